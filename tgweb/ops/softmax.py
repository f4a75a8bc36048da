"""The softmax family over one axis, each one row kernel (codegen/reduce.py's softmax()).

Kinds and attrs:

- ``softmax`` / ``log_softmax`` {axis}: over one axis, max-subtracted.
- ``causal_softmax`` {}: softmax over the last axis of x [..., T, S] where entry
  (i, j) of each T x S matrix is visible iff j <= i (top-left aligned, like
  ``torch.tril``); hidden entries come out exactly 0.
"""

from __future__ import annotations

from ..codegen.reduce import softmax as emit_softmax
from ..ir import OpError, Tensor, make, register
from .base import as_tensor, infer_float_same, norm_axis, op, require_float


def _np_softmax(np, x, axis):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _g_softmax(t, g):
    from .reduce import sum as rsum

    axis = t.attrs.get("axis", -1) % t.ndim
    return [t * (g - rsum(g * t, axis, keepdims=True))]


def _g_log_softmax(t, g):
    from .elementwise import exp
    from .reduce import sum as rsum

    return [g - exp(t) * rsum(g, t.attrs["axis"], keepdims=True)]


def _ref_log_softmax(ctx, args, t):
    np, x, axis = ctx.np, args[0], t.attrs["axis"]
    z = x - x.max(axis=axis, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=axis, keepdims=True))


def _causal_mask(np, shape):
    rows, cols = shape[-2], shape[-1]
    return np.arange(cols)[None, :] <= np.arange(rows)[:, None]


def _ref_causal_softmax(ctx, args, t):
    np, x = ctx.np, args[0]
    mask = _causal_mask(np, x.shape)
    y = _np_softmax(np, np.where(mask, x, -np.inf), -1)
    return np.where(mask, y, 0)


def _infer_causal(ins, attrs):
    (x,) = ins
    if x.ndim < 2:
        raise OpError(f"needs scores of rank >= 2 ([..., T, S]), got shape {x.shape}")
    return infer_float_same(ins, attrs)


def _torch_causal(tc, a, n):
    x = a[0]
    t, s = x.shape[-2], x.shape[-1]
    keep = tc.torch.ones(t, s, dtype=tc.torch.bool, device=x.device).tril()
    return tc.torch.softmax(x.masked_fill(~keep, float("-inf")), -1).masked_fill(~keep, 0.0)


register(
    "softmax",
    family="softmax",
    role="kernel",
    emit=emit_softmax(),
    infer=infer_float_same,
    grad=_g_softmax,
    ref=lambda ctx, args, t: _np_softmax(ctx.np, args[0], t.attrs["axis"]),
    torch=lambda tc, a, n: tc.torch.softmax(a[0], n.attrs["axis"]),
)
register(
    "log_softmax",
    family="softmax",
    role="kernel",
    emit=emit_softmax(log=True),
    infer=infer_float_same,
    grad=_g_log_softmax,
    ref=_ref_log_softmax,
    torch=lambda tc, a, n: tc.torch.log_softmax(a[0], n.attrs["axis"]),
)
register(
    "causal_softmax",
    family="softmax",
    role="kernel",
    emit=emit_softmax(causal=True),
    infer=_infer_causal,
    grad=_g_softmax,
    ref=_ref_causal_softmax,
    torch=_torch_causal,
)


@op(method=True, torch=True)
def softmax(x, axis: int = -1) -> Tensor:
    x = as_tensor(x)
    require_float("softmax", x)
    return make("softmax", (x,), axis=norm_axis(axis, x.ndim, x.shape))


@op(method=True, torch=True)
def log_softmax(x, axis: int = -1) -> Tensor:
    x = as_tensor(x)
    require_float("log_softmax", x)
    return make("log_softmax", (x,), axis=norm_axis(axis, x.ndim, x.shape))


@op
def causal_softmax(scores) -> Tensor:
    """Softmax over the last axis of attention scores [..., T, S] with query i seeing
    keys j <= i only; the hidden weights are exactly 0. One fused kernel."""
    x = as_tensor(scores)
    require_float("causal_softmax", x)
    return make("causal_softmax", (x,))
