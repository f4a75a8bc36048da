"""Module and Parameter: parameters are found from attributes (also inside lists,
tuples and dicts of modules) and named by dotted path, as in PyTorch."""

from __future__ import annotations

import array
import random
import zlib
from typing import Any, Iterator

from ..host import InputError, from_user, to_user
from ..ir import TensorOps, TraceError, current_graph, prod, user_site
from . import init as _init


def param_rng(seed: int, name: str) -> random.Random:
    """The generator for one parameter: depends on the seed and its name only,
    so adding a layer does not change the others' initial values."""
    return random.Random(zlib.crc32(f"{seed}/{name}".encode()) ^ (seed * 0x9E3779B1 & 0xFFFFFFFF))


class Parameter(TensorOps):
    """A trainable f32 array owned by a Module; inside a traced function it acts as a tensor."""

    def __init__(self, shape: tuple[int, ...], init: _init.Init, decay: bool | None) -> None:
        self.shape = tuple(shape)
        self.dtype = "f32"
        self.init = init
        self.decay = decay  # None: the optimizer decides from init.kind
        self.value: array.array | None = None

    def _t(self):
        g = current_graph()
        t = g.param_tensors.get(id(self)) if g is not None else None
        if t is None:
            raise TraceError(
                "this parameter does not belong to the module being traced "
                "(assign it to an attribute of that module or a submodule)",
                user_site(),
            )
        return t

    def __repr__(self) -> str:
        return f"Parameter(shape={self.shape}, init={self.init!r})"


def _check_shape(shape) -> tuple[int, ...]:
    if isinstance(shape, int):
        shape = (shape,)
    shape = tuple(shape)
    if not all(isinstance(d, int) and not isinstance(d, bool) and d >= 1 for d in shape):
        raise TraceError(f"parameter shape must be positive ints, got {shape}", user_site())
    return shape


class Module:
    """Base class: subclasses create parameters in __init__ and compute in forward."""

    def param(self, shape, init: _init.Init | None = None, decay: bool | None = None) -> Parameter:
        """A new parameter; by default initialised N(0, 1). decay overrides weight-decay masks."""
        if current_graph() is not None:
            raise TraceError(
                "a parameter was created inside forward; create parameters in __init__", user_site()
            )
        return Parameter(_check_shape(shape), init or _init.normal(1.0), decay)

    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__} defines no forward()")

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    def named_parameters(self) -> list[tuple[str, Parameter]]:
        out: list[tuple[str, Parameter]] = []
        seen: set[int] = set()
        _walk(self, "", out, seen)
        return out

    def parameters(self) -> list[Parameter]:
        return [p for _, p in self.named_parameters()]

    def num_params(self) -> int:
        return sum(prod(p.shape) for p in self.parameters())

    def init_params(self, seed: int = 0, only_missing: bool = False) -> None:
        """Draw every parameter's initial values (or only those not set yet)."""
        for name, p in self.named_parameters():
            if only_missing and p.value is not None:
                continue
            p.value = p.init(p.shape, param_rng(seed, name))

    def state_dict(self) -> dict[str, Any]:
        """Parameter arrays by dotted name (NumPy where importable, else tgweb.Array)."""
        self.init_params(0, only_missing=True)
        return {n: to_user(p.value, p.shape, "f32") for n, p in self.named_parameters()}

    def load_state_dict(self, d: dict[str, Any]) -> None:
        """Set every parameter; strict: names and shapes must match exactly.
        On any error nothing is changed."""
        params = dict(self.named_parameters())
        missing = sorted(set(params) - set(d))
        extra = sorted(set(d) - set(params))
        if missing or extra:
            raise InputError(
                "load_state_dict: "
                + (f"missing {missing}" if missing else "")
                + ("; " if missing and extra else "")
                + (f"unexpected {extra}" if extra else "")
            )
        new = {n: from_user(d[n], p.shape, "f32", f"parameter {n!r}") for n, p in params.items()}
        for n, p in params.items():
            p.value = new[n]


def _walk(obj: Any, prefix: str, out: list, seen: set) -> None:
    if id(obj) in seen:
        return
    if isinstance(obj, Parameter):
        seen.add(id(obj))
        out.append((prefix, obj))
        return
    if isinstance(obj, Module):
        seen.add(id(obj))
        items: Iterator = iter(vars(obj).items())
    elif isinstance(obj, (list, tuple)):
        items = iter(enumerate(obj))
    elif isinstance(obj, dict):
        items = iter(obj.items())
    else:
        return
    for k, v in items:
        if isinstance(k, str) and k.startswith("_"):
            continue
        _walk(v, f"{prefix}.{k}" if prefix else str(k), out, seen)
