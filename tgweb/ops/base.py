"""Helpers shared by every op family: argument coercion, broadcasting, axes."""

from __future__ import annotations

import functools
import inspect

from ..ir import OpError, Tensor, TensorOps, TraceError, make, user_site

PUBLIC: dict = {}  # name -> public op function; tgweb.ops exports exactly these
METHODS: set = set()  # the public ops that are Tensor methods too (op(method=True))
TORCH_NAMES: set = set()  # the public ops tgweb.torch exports under their names (op(torch=True))


# PyTorch's keyword names, accepted wherever the op takes NumPy's (both is an error)
TORCH_KWARGS = {"dim": "axis", "keepdim": "keepdims", "dims": "axes", "input": "x"}


def _kwarg_aliases(fn) -> dict[str, str]:
    names = inspect.signature(fn).parameters
    return {t: n for t, n in TORCH_KWARGS.items() if n in names and t not in names}


def _renamed(name: str, aliases: dict[str, str], kwargs: dict) -> dict:
    for torch_name, own in aliases.items():
        if torch_name in kwargs:
            if own in kwargs:
                raise OpError(f"{name}: {torch_name}= and {own}= name the same argument; give one")
            kwargs[own] = kwargs.pop(torch_name)
    return kwargs


def op(fn=None, *, method: bool = False, torch: bool = False):
    """Marks a public op function (tgweb.ops and tgweb export it by its name); an OpError
    raised by its own checks names the user's call site. PyTorch's keyword names (dim=,
    keepdim=, dims=, input=) are accepted for NumPy's (axis=, keepdims=, axes=, x=).
    Where else it is exposed, said here and nowhere else: method=True makes it a Tensor
    method too (x.name(...) is name(x, ...): ops/methods.py), torch=True a name of
    tgweb.torch (torch.name is this function). Bare (@op) or with them (@op(torch=True))."""
    if fn is None:
        return lambda f: op(f, method=method, torch=torch)
    aliases = _kwarg_aliases(fn)

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            if aliases and kwargs:
                kwargs = _renamed(fn.__name__, aliases, kwargs)
            return fn(*args, **kwargs)
        except OpError as e:
            raise TraceError(f"{fn.__name__}: {e}", user_site()) from None

    if fn.__name__ in PUBLIC:
        raise RuntimeError(f"two public ops are called {fn.__name__!r}")
    PUBLIC[fn.__name__] = wrapper
    if method:
        METHODS.add(fn.__name__)
    if torch:
        TORCH_NAMES.add(fn.__name__)
    return wrapper


def as_tensor(x, like: Tensor | None = None, dtype: str | None = None) -> Tensor:
    """A Tensor for x: tensors and parameters as they are, Python numbers as constants."""
    if isinstance(x, Tensor):
        return x
    if isinstance(x, TensorOps):
        return x._t()
    if isinstance(x, (bool, int, float)):
        if dtype is None:
            dtype = "bool" if isinstance(x, bool) else "i32" if isinstance(x, int) else "f32"
        return (
            make("full", (), shape=(), value=_coerce(x, dtype), dtype=dtype)
            if like is None
            else _const_like(like, x, dtype)
        )
    raise TraceError(f"expected a tensor or a number, got {type(x).__name__}", user_site())


def _const_like(like: Tensor, x, dtype: str) -> Tensor:
    from ..ir import tracing

    with tracing(like.graph):
        return make("full", (), shape=(), value=_coerce(x, dtype), dtype=dtype)


def _coerce(x, dtype: str):
    if dtype == "f32":
        return float(x)
    if dtype == "i32":
        return int(x)
    return bool(x)


def norm_axis(axis: int, ndim: int, shape=None) -> int:
    if not isinstance(axis, int) or isinstance(axis, bool):
        raise OpError(f"axis must be an int, got {axis!r}")
    if not -ndim <= axis < ndim:
        raise OpError(f"axis {axis} is out of range for shape {tuple(shape) if shape is not None else ndim}")
    return axis % ndim


def norm_axes(axis, ndim: int, shape=None) -> tuple[int, ...]:
    """None means all axes; an int or a sequence of ints, each checked and made positive."""
    if axis is None:
        return tuple(range(ndim))
    if isinstance(axis, int):
        axis = (axis,)
    axes = tuple(sorted(norm_axis(a, ndim, shape) for a in axis))
    if len(set(axes)) != len(axes):
        raise OpError(f"repeated axis in {axis!r}")
    return axes


def infer_float_same(ins, attrs):
    """The shape rule of a kind whose one float input gives its output's shape."""
    (x,) = ins
    if x.dtype != "f32":
        raise OpError(f"needs a float (f32) tensor, got {x.dtype} of shape {x.shape}")
    return x.shape, "f32"


def require_float(name: str, *ts: Tensor) -> None:
    for t in ts:
        if t.dtype != "f32":
            raise OpError(f"{name} needs a float (f32) tensor, got {t.dtype} of shape {t.shape}")
