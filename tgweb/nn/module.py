"""Module, Parameter and the containers ModuleList and ModuleDict: parameters are
found from attributes (also inside lists, tuples and dicts of modules, and under
names that begin with `_`) and named by dotted path, as in PyTorch; colliding
dotted names are an error."""

from __future__ import annotations

import array
from typing import Any

from ..arrays import InputError, from_user, to_user
from ..ir import TensorOps, TraceError, current_graph, is_text, prod, user_site
from . import init as _init


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

    def state_buffers(self) -> list[tuple[str, Any]]:
        """(dotted name, holder) of each buffer the forward updates (tgweb.torch's BatchNorm
        running statistics): graph state the Trainer starts from holder.values (flat
        numbers of holder.shape) and keeps under that name. None here."""
        return []

    def parameters(self) -> list[Parameter]:
        return [p for _, p in self.named_parameters()]

    def num_params(self) -> int:
        return sum(prod(p.shape) for p in self.parameters())

    def init_params(self, seed: int = 0, only_missing: bool = False) -> None:
        """Draw every parameter's initial values (or only those not set yet): those a
        Trainer compiled with this seed starts from (tgweb.nn.init.initial_values)."""
        for name, p in self.named_parameters():
            if only_missing and p.value is not None:
                continue
            p.value = _init.initial_values(p.init, p.shape, seed, name)

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


def _attr_path(path: str, k: Any) -> str:
    return f"{path}.{k}" if isinstance(k, str) and k.isidentifier() else f"getattr({path}, {k!r})"


def _walk(obj: Any, prefix: str, out: list, seen: set) -> None:
    """Every Parameter reachable from obj through Module attributes (any name, `_`
    ones included, as in PyTorch), lists, tuples and dicts, depth first, named by
    dotted path; a Parameter reached twice keeps its first name. Two different
    Parameters whose dotted names collide are an error naming both paths."""
    where: dict[str, str] = {}  # dotted name -> the path it was found at
    stack: list[tuple[Any, str, str]] = [(obj, prefix, "model")]
    while stack:
        o, name, path = stack.pop()
        if id(o) in seen:
            continue
        if isinstance(o, Parameter):
            seen.add(id(o))
            if not is_text(name):
                raise TraceError(
                    f"the parameter at {path} is named {name!r}, which is not valid UTF-8 text "
                    "(it holds a lone surrogate); rename it"
                )
            if name in where:
                raise TraceError(
                    f"two parameters have the dotted name {name!r}: {where[name]} and {path}; "
                    "rename one of them"
                )
            where[name] = path
            out.append((name, o))
            continue
        if isinstance(o, Module):
            seen.add(id(o))
            items = [(k, v, _attr_path(path, k)) for k, v in vars(o).items()]
        elif isinstance(o, (list, tuple)):
            items = [(k, v, f"{path}[{k}]") for k, v in enumerate(o)]
        elif isinstance(o, dict):
            items = [(k, v, f"{path}[{k!r}]") for k, v in o.items()]
        else:
            continue
        for k, v, p in reversed(items):
            if isinstance(v, (Parameter, Module, list, tuple, dict)):
                stack.append((v, f"{name}.{k}" if name else str(k), p))


class ModuleList(Module):
    """Modules held in order and named "0", "1", ... (PyTorch's state-dict keys:
    ``layers.0.weight``); indexing, iteration, len, append, extend and insert."""

    # the modules live only in the attributes "0", "1", ..., which parameter
    # discovery walks (a list attribute would be walked too, under a second name)

    def __init__(self, modules=()) -> None:
        self._n = 0
        self.extend(modules)

    def _items(self) -> list[Module]:
        return [vars(self)[str(i)] for i in range(self._n)]

    def _set_all(self, items: list[Module]) -> None:
        for i in range(self._n):
            del vars(self)[str(i)]
        self._n = 0
        for m in items:
            self.append(m)

    def append(self, module: Module) -> "ModuleList":
        if not isinstance(module, Module):
            raise TypeError(f"ModuleList holds Modules, got {type(module).__name__}")
        vars(self)[str(self._n)] = module
        self._n += 1
        return self

    def extend(self, modules) -> "ModuleList":
        for m in modules:
            self.append(m)
        return self

    def insert(self, index: int, module: Module) -> None:
        items = self._items()
        items.insert(index, module)
        self._set_all(items)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return ModuleList(self._items()[i])
        return self._items()[i]

    def __setitem__(self, i: int, module: Module) -> None:
        items = self._items()
        items[i] = module
        self._set_all(items)

    def __len__(self) -> int:
        return self._n

    def __iter__(self):
        return iter(self._items())

    def forward(self, *args, **kwargs):
        raise NotImplementedError("ModuleList has no forward(); iterate over it in yours")


class ModuleDict(Module):
    """Modules by string key, in insertion order, named by key (``blocks.enc.weight``);
    indexing, ``in``, len, iteration over keys, keys/values/items, update, pop."""

    # each module lives in the instance dict under its key (not through setattr, so a
    # key such as "forward" hides no method); _keys keeps the order

    def __init__(self, modules=None) -> None:
        self._keys: list[str] = []
        if modules:
            self.update(modules)

    def __setitem__(self, key: str, module: Module) -> None:
        if not isinstance(key, str) or not key or "." in key or key == "_keys":
            raise KeyError(f"ModuleDict keys must be non-empty strings without '.', got {key!r}")
        if not isinstance(module, Module):
            raise TypeError(f"ModuleDict holds Modules, got {type(module).__name__}")
        if key not in vars(self):
            self._keys.append(key)
        vars(self)[key] = module

    def __getitem__(self, key: str) -> Module:
        if key not in self._keys:
            raise KeyError(key)
        return vars(self)[key]

    def __delitem__(self, key: str) -> None:
        self._keys.remove(key)
        del vars(self)[key]

    def pop(self, key: str) -> Module:
        m = self[key]
        del self[key]
        return m

    def update(self, modules) -> None:
        for k, m in modules.items() if hasattr(modules, "items") else modules:
            self[k] = m

    def __contains__(self, key) -> bool:
        return key in self._keys

    def __len__(self) -> int:
        return len(self._keys)

    def __iter__(self):
        return iter(list(self._keys))

    def keys(self):
        return list(self._keys)

    def values(self):
        return [vars(self)[k] for k in self._keys]

    def items(self):
        return [(k, vars(self)[k]) for k in self._keys]

    def forward(self, *args, **kwargs):
        raise NotImplementedError("ModuleDict has no forward(); index it in yours")
