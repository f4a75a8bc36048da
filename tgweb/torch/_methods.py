"""Tensor methods and attributes PyTorch code uses that tgweb's own Tensor lacks,
installed on TensorOps (traced tensors, parameters, host tensors) when tgweb.torch is
imported; each composes existing ops. Names the Tensor already has are left alone."""

from __future__ import annotations

from .. import ops
from ..ir import TensorOps, TraceError, prod, user_site


def log1p(x):
    # log(u) * x / (u - 1) with u = 1 + x: exact where 1 + x rounds (Goldberg's form)
    u = x + 1.0
    rounded = u == 1.0
    return ops.where(rounded, x, ops.log(u) * x / ops.where(rounded, 1.0, u - 1.0))


def expm1(x):
    # (u - 1) * x / log(u) with u = exp(x): accurate near 0, where exp(x) - 1 is not
    u = ops.exp(x)
    near = ops.logical_or(u == 1.0, ops.abs(x) > 1.0)
    return ops.where(near, ops.where(u == 1.0, x, u - 1.0), (u - 1.0) * x / ops.log(ops.where(near, 2.0, u)))


def flatten(x, start_dim: int = 0, end_dim: int = -1):
    s = tuple(x.shape)
    if not s:
        return ops.reshape(x, (1,))
    a, b = start_dim % len(s), end_dim % len(s)
    return ops.reshape(x, s[:a] + (prod(s[a : b + 1]),) + s[b + 1 :])


def unflatten(x, dim: int, sizes):
    d = dim % x.ndim
    return ops.reshape(x, tuple(x.shape[:d]) + tuple(sizes) + tuple(x.shape[d + 1 :]))


def _sized(size) -> tuple:
    return tuple(size[0]) if len(size) == 1 and isinstance(size[0], (tuple, list)) else tuple(size)


def _own(dtype, default):
    from . import _own as own

    return own(dtype, default)


def new_full(x, size, fill_value, *, dtype=None, device=None, requires_grad=False):
    return ops.full(_sized((size,)), fill_value, _own(dtype, x.dtype))


def new_zeros(x, *size, dtype=None, device=None, requires_grad=False):
    return ops.full(_sized(size), 0, _own(dtype, x.dtype))


def new_ones(x, *size, dtype=None, device=None, requires_grad=False):
    return ops.full(_sized(size), 1, _own(dtype, x.dtype))


def new_tensor(x, data, *, dtype=None, device=None, requires_grad=False):
    from . import tensor

    return tensor(data, dtype=dtype if dtype is not None else {"f32": "float32"}.get(x.dtype, x.dtype))


def repeat(x, *sizes):
    sizes = _sized(sizes)
    x = ops.reshape(x, (1,) * (len(sizes) - x.ndim) + tuple(x.shape))
    shape = tuple(x.shape)
    y = ops.broadcast_to(
        ops.reshape(x, tuple(v for d in shape for v in (1, d))),
        tuple(v for r, d in zip(sizes, shape) for v in (r, d)),
    )
    return ops.reshape(y, tuple(r * d for r, d in zip(sizes, shape)))


def _var(x, dim=None, unbiased=True, keepdim=False, *, correction=None):
    n = prod(x.shape) if dim is None else prod(x.shape[d] for d in ((dim,) if isinstance(dim, int) else dim))
    c = (1 if unbiased else 0) if correction is None else correction
    mu = ops.mean(x, dim, keepdims=True)
    return ops.sum(ops.square(x - mu), dim, keepdims=keepdim) / max(n - c, 0)


def _std(x, dim=None, unbiased=True, keepdim=False, *, correction=None):
    return ops.sqrt(_var(x, dim, unbiased, keepdim, correction=correction))


def _norm(x, p=2, dim=None, keepdim=False):
    if p not in (2, "fro"):
        raise TraceError(
            f"norm with p={p!r}: only the 2-norm is composed; write it with abs, pow and sum", user_site()
        )
    return ops.sqrt(ops.sum(ops.square(x), dim, keepdims=keepdim))


def _index_select(x, dim: int, index):
    d = dim % x.ndim
    moved = ops.swapaxes(x, 0, d) if d else x
    out = ops.embedding(moved, index)
    return ops.swapaxes(out, 0, d) if d else out


def _gather(x, dim: int, index):
    return ops.take_along_axis(x, index, dim)


def _same(name):
    return lambda x, *a, **k: getattr(ops, name)(x, *a, **k)


def _t(x):
    if x.ndim > 2:
        raise TraceError(f"t() needs a tensor of rank <= 2, got shape {tuple(x.shape)}", user_site())
    return ops.transpose(x) if x.ndim == 2 else x


def _itself(x, *args, **kwargs):
    return x


METHODS = {
    "log1p": log1p,
    "expm1": expm1,
    "flatten": flatten,
    "unflatten": unflatten,
    "new_full": new_full,
    "new_zeros": new_zeros,
    "new_ones": new_ones,
    "new_tensor": new_tensor,
    "repeat": repeat,
    "var": _var,
    "std": _std,
    "norm": _norm,
    "index_select": _index_select,
    "gather": _gather,
    "t": _t,
    "clone": _itself,
    "detach": lambda x: ops.stop_gradient(x),
    "requires_grad_": _itself,
    "cpu": _itself,
    "cuda": _itself,
    "type_as": lambda x, other: ops.cast(x, other.dtype),
    "view_as": lambda x, other: ops.reshape(x, tuple(other.shape)),
    "reshape_as": lambda x, other: ops.reshape(x, tuple(other.shape)),
    "expand_as": lambda x, other: ops.broadcast_to(x, tuple(other.shape)),
    "add": _same("add"),
    "sub": _same("sub"),
    "mul": _same("mul"),
    "div": _same("div"),
    "neg": _same("neg"),
    "erf": _same("erf"),
    "cumsum": _same("cumsum"),
    "roll": _same("roll"),
    "eq": _same("equal"),
    "lt": _same("less"),
    "gt": _same("greater"),
    "le": _same("less_equal"),
    "ge": _same("greater_equal"),
    "clamp_min": lambda x, m: ops.maximum(x, m),
    "clamp_max": lambda x, m: ops.minimum(x, m),
    "mm": _same("matmul"),
    "bmm": _same("matmul"),
    "unbind": lambda x, dim=0: [ops.squeeze(p, dim) for p in ops.split(x, 1, dim)],
}


def install() -> None:
    """Put the methods and attributes TensorOps does not have yet onto it."""
    for name, fn in METHODS.items():
        if not hasattr(TensorOps, name):
            setattr(TensorOps, name, fn)
    if not hasattr(TensorOps, "is_cuda"):
        TensorOps.is_cuda = property(
            lambda x: False
        )  # no CUDA here: code that branches on it takes the CPU path
