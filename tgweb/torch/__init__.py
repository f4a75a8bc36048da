"""tgweb.torch: PyTorch's names over tgweb's one op set, so that a model file written
for `torch` runs with only its imports changed (`import tgweb.torch as torch`, or
`sys.modules["torch"] = tgweb.torch`). Inside a traced forward every function builds
graph nodes; outside (in __init__) the factories make host tensors (tgweb.torch._host).
Never imports torch: Pyodide has none."""

from __future__ import annotations

import builtins as _b
import contextlib
import functools
import math

from .. import ops as _ops
from ..ir import TraceError, current_graph, prod, user_site
from ..nn.init import draw_normal, draw_uniform
from ..ops.base import TORCH_NAMES as _TORCH_NAMES
from ._host import GENERATOR, HostTensor, cast_values, flatten_data


class dtype:  # noqa: N801 - PyTorch's name
    """A PyTorch dtype name; tgweb's dtype_name maps str(d) ("torch.int64") to its own."""

    def __init__(self, name: str, own: str) -> None:
        self.name, self.own = name, own

    def __str__(self) -> str:
        return f"torch.{self.name}"

    __repr__ = __str__

    @property
    def is_floating_point(self) -> bool:
        return self.own == "f32"


float32 = float = dtype("float32", "f32")  # noqa: A001 - PyTorch's names
int64 = long = dtype("int64", "i32")
int32 = int = dtype("int32", "i32")  # noqa: A001
bool = dtype("bool", "bool")  # noqa: A001
_OWN = {"f32": "f32", "i32": "i32", "bool": "bool", "float32": "f32", "int64": "i32", "int32": "i32"}


def _own(d, default: str = "f32") -> str:
    if d is None:
        return default
    if isinstance(d, dtype):
        return d.own
    name = str(d).removeprefix("torch.")
    if name not in _OWN:
        raise TypeError(f"dtype {d!r} is not supported (float32, int64/long, int32, bool)")
    return _OWN[name]


class device:  # noqa: N801
    def __init__(self, name: str = "cpu") -> None:
        self.type = str(name).split(":")[0]

    def __str__(self) -> str:
        return self.type


class _NoGrad(contextlib.ContextDecorator):
    """no_grad / inference_mode: nothing to switch off in a graph that derives only the
    gradients the loss needs."""

    def __init__(self, *args) -> None:
        self._fn = args[0] if args and callable(args[0]) else None
        if self._fn is not None:
            functools.update_wrapper(self, self._fn)

    def __call__(self, *args, **kwargs):
        if self._fn is not None:
            return self._fn(*args, **kwargs)
        return super().__call__(*args)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> bool:
        return False


no_grad = inference_mode = enable_grad = _NoGrad


def manual_seed(seed: int) -> None:
    """Seeds the host generator that initialises parameters (not PyTorch's numbers)."""
    GENERATOR.seed(seed)


def is_tensor(x) -> bool:
    from ..ir import TensorOps

    return isinstance(x, TensorOps)


# ---------------------------------------------------------------- factories


def _shape(size) -> tuple:
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        size = tuple(size[0])
    return tuple(size)


def _factory(values_fn, traced_fn, shape, own):
    """A graph tensor while tracing; else a host tensor with its values and recipe."""
    if current_graph() is not None:
        return traced_fn()
    return HostTensor(cast_values(values_fn(), own), shape, own, traced_fn)


def full(size, fill_value, *, dtype=None, device=None, requires_grad=False):
    own = _own(
        dtype,
        "f32" if isinstance(fill_value, _b.float) else "bool" if isinstance(fill_value, _b.bool) else "i32",
    )
    size = _shape((size,))
    return _factory(lambda: [fill_value] * prod(size), lambda: _ops.full(size, fill_value, own), size, own)


def zeros(*size, dtype=None, device=None, requires_grad=False):
    return full(_shape(size), 0.0, dtype=dtype or float32)


def ones(*size, dtype=None, device=None, requires_grad=False):
    return full(_shape(size), 1.0, dtype=dtype or float32)


def empty(*size, dtype=None, device=None, requires_grad=False):
    return zeros(*size, dtype=dtype)


def zeros_like(x, dtype=None):
    return zeros(x.shape, dtype=dtype or x.dtype)


def ones_like(x, dtype=None):
    return ones(x.shape, dtype=dtype or x.dtype)


def arange(start, end=None, step=1, *, dtype=None, device=None, requires_grad=False):
    if end is None:
        start, end = 0, start
    n = _b.max(0, math.ceil((end - start) / step))
    floats = any(isinstance(v, _b.float) for v in (start, end, step))
    own = _own(dtype, "f32" if floats else "i32")
    return _factory(
        lambda: [start + i * step for i in range(n)], lambda: _ops.arange(start, end, step, own), (n,), own
    )


def tensor(data, *, dtype=None, device=None, requires_grad=False):
    """A host tensor of data (nested lists, numbers, NumPy arrays); not usable inside a
    traced forward unless wrapped in nn.Parameter."""
    values, shape = flatten_data(data)
    if current_graph() is not None and not shape:
        return _ops.full((), values[0], _own(dtype, _kind(values)))
    own = _own(dtype, _kind(values))
    return HostTensor(cast_values(values, own), shape, own, None)


def _kind(values) -> str:
    if all(isinstance(v, _b.bool) for v in values):
        return "bool"
    return "i32" if all(isinstance(v, _b.int) for v in values) else "f32"


def _random(kind, size, generator=None):
    size = _shape(size)
    if current_graph() is not None:
        return getattr(_ops, kind)(size)
    n = prod(size)
    values = draw_uniform(GENERATOR, n, 0.0, 1.0) if kind == "rand" else draw_normal(GENERATOR, n, 0.0, 1.0)
    return HostTensor(values.tolist(), size, "f32", None)


def randn(*size, generator=None, dtype=None, device=None, requires_grad=False):
    return _random("randn", size)


def rand(*size, generator=None, dtype=None, device=None, requires_grad=False):
    return _random("rand", size)


def _band(x, diagonal: int, lower: bool):
    """tril (lower) / triu of the last two axes, on the host or in the graph."""
    if isinstance(x, HostTensor) and current_graph() is None:
        n, m = x.shape[-2:]
        keep = [(j <= i + diagonal) if lower else (j >= i + diagonal) for i in range(n) for j in range(m)]
        zero = cast_values([0], x.dtype)[0]
        vals = [v if keep[k % (n * m)] else zero for k, v in enumerate(x.values)]
        return HostTensor(vals, x.shape, x.dtype, x._then(lambda t: _band(t, diagonal, lower)))
    x = _ops.reshape(x, x.shape) if not hasattr(x, "graph") else x
    n, m = x.shape[-2:]
    rows = _ops.reshape(_ops.arange(n), (n, 1))
    cols = _ops.reshape(_ops.arange(m), (1, m))
    keep = cols <= rows + diagonal if lower else cols >= rows + diagonal
    return _ops.where(keep, x, _ops.full((), 0, x.dtype))


def tril(input, diagonal: int = 0):  # noqa: A002 - PyTorch's name
    return _band(input, diagonal, True)


def triu(input, diagonal: int = 0):  # noqa: A002
    return _band(input, diagonal, False)


# ---------------------------------------------------------------- functions (graph only)


def cat(tensors, dim: int = 0):
    return _ops.concat(list(tensors), dim)


concat = cat


def flatten(input, start_dim: int = 0, end_dim: int = -1):  # noqa: A002
    s = input.shape
    a, b = start_dim % len(s), end_dim % len(s)
    return _ops.reshape(input, s[:a] + (prod(s[a : b + 1]),) + s[b + 1 :])


def masked_fill(input, mask, value):  # noqa: A002
    return _ops.where(mask, value, input)


def numel(input) -> int:  # noqa: A002
    return prod(input.shape)


def multinomial(*args, **kwargs):
    raise TraceError(
        "torch.multinomial draws on the host in PyTorch; in a graph use tg.categorical(logits), "
        "which samples once per step from the per-step seed",
        user_site(),
    )


# the ops whose @op says torch=True: the same function under the same name
globals().update({n: getattr(_ops, n) for n in sorted(_TORCH_NAMES)})
clip, gather_along = _ops.clamp, _ops.take_along_axis
eq, lt, gt, le, ge = _ops.equal, _ops.less, _ops.greater, _ops.less_equal, _ops.greater_equal

# PyTorch's Tensor methods that tgweb's Tensor lacks (_methods.py), and their functions
from . import _methods  # noqa: E402

_methods.install()
log1p, expm1, index_select, gather = _methods.log1p, _methods.expm1, _methods._index_select, _methods._gather
var, std = _methods._var, _methods._std
as_tensor = from_numpy = tensor

from . import nn, optim  # noqa: E402,F401 - they use the names above
