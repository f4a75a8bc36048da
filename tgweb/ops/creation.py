"""Tensor creation: full (zeros, ones) and arange. Neither reads an input; their WGSL is an
expression of the element's index at most, so they fuse into their readers' kernels.

- ``full`` {shape, value, dtype}: every element value (role "const").
- ``arange`` {n, start, step, dtype}: element i is start + step * i.
"""

from __future__ import annotations

import math

from ..codegen.common import f32_lit, i32_lit, lit
from ..ir import DTYPES, NO_GRAD, OpError, Tensor, dtype_name, make, register
from .base import op
from .elementwise import torch_dtype


def _arange_wgsl(g, n):
    i, a = g.coord(0), n.attrs
    if n.dtype == "i32":
        return f"({i32_lit(a['start'])} + {i32_lit(a['step'])} * i32({i}))"
    return f"({f32_lit(a['start'])} + {f32_lit(a['step'])} * f32({i}))"


def _infer_full(ins, attrs):
    return attrs["shape"], attrs["dtype"]


register(
    "full",
    family="creation",
    role="const",
    emit=lambda g, n: lit(n.attrs["value"], n.dtype),
    infer=_infer_full,
    grad=NO_GRAD,
    ref=lambda ctx, args, t: ctx.np.full(t.shape, t.attrs["value"], ctx.npdtype(t.dtype)),
    torch=lambda tc, a, n: tc.torch.full(
        n.shape, n.attrs["value"], dtype=torch_dtype(tc, n.dtype), device=tc.device
    ),
)


def check_shape(shape):
    """shape as a tuple of positive ints (an int is a 1-D shape), or OpError."""
    if isinstance(shape, int):
        shape = (shape,)
    shape = tuple(shape)
    if not all(isinstance(d, int) and not isinstance(d, bool) and d >= 1 for d in shape):
        raise OpError(f"shape must be a tuple of positive ints, got {shape!r}")
    return shape


@op
def full(shape, value, dtype: str | None = None) -> Tensor:
    shape = check_shape(shape)
    if dtype is None:
        dtype = "f32" if isinstance(value, float) else "bool" if isinstance(value, bool) else "i32"
    dtype = dtype_name(dtype)
    if dtype not in DTYPES:
        raise OpError(f"dtype must be one of {DTYPES}, got {dtype!r}")
    value = float(value) if dtype == "f32" else bool(value) if dtype == "bool" else int(value)
    return make("full", (), shape=shape, value=value, dtype=dtype)


@op
def zeros(shape, dtype: str = "f32") -> Tensor:
    return full(shape, 0, dtype)


@op
def ones(shape, dtype: str = "f32") -> Tensor:
    return full(shape, 1, dtype)


register(
    "arange",
    family="creation",
    role="elementwise",
    emit=_arange_wgsl,
    grad=NO_GRAD,
    infer=lambda ins, a: ((a["n"],), a["dtype"]),
    ref=lambda ctx, args, t: (t.attrs["start"] + t.attrs["step"] * ctx.np.arange(t.attrs["n"])).astype(
        ctx.npdtype(t.dtype)
    ),
    torch=lambda tc, a, n: (
        n.attrs["start"] + n.attrs["step"] * tc.torch.arange(n.attrs["n"], device=tc.device)
    ).to(torch_dtype(tc, n.dtype)),
)


@op
def arange(start, stop=None, step=1, dtype: str | None = None) -> Tensor:
    """Like numpy.arange: i32 for integer arguments, else f32."""
    if stop is None:
        start, stop = 0, start
    for v in (start, stop, step):
        if not isinstance(v, (int, float)) or isinstance(v, bool):
            raise OpError(f"arange takes numbers, got {v!r}")
    if step == 0:
        raise OpError("step must not be zero")
    n = max(0, math.ceil((stop - start) / step))
    if n == 0:
        raise OpError(f"arange({start}, {stop}, {step}) is empty")
    if dtype is None:
        dtype = "i32" if all(isinstance(v, int) for v in (start, stop, step)) else "f32"
    return make("arange", (), n=n, start=start, step=step, dtype=dtype)
