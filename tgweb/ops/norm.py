"""Layer normalization: one row kernel (codegen/reduce.py's normalize()) and its gradient.

Kinds and attrs:

- ``normalize`` {eps}: over the last axis, (x - mean) / sqrt(var + eps) with the
  biased variance (a layer norm without its scale and shift). One kernel per row.
- ``normalize_grad`` {eps}: (x, g) -> the gradient of normalize at x for the output
  gradient g. No gradient of its own.
"""

from __future__ import annotations

from ..codegen.reduce import normalize
from ..ir import NO_GRAD, OpError, Tensor, make, register
from .base import as_tensor, infer_float_same, op, require_float


def _np_normalized(np, x, eps):
    """(xhat, 1 / sqrt(var + eps)) over the last axis."""
    d = x - x.mean(-1, keepdims=True)
    rstd = 1.0 / np.sqrt((d * d).mean(-1, keepdims=True) + eps)
    return d * rstd, rstd


def _ref_normalize_grad(ctx, args, t):
    x, g = args
    xh, rstd = _np_normalized(ctx.np, x, t.attrs["eps"])
    return rstd * (g - g.mean(-1, keepdims=True) - xh * (g * xh).mean(-1, keepdims=True))


def _infer_normalize_grad(ins, attrs):
    x, g = ins
    if g.shape != x.shape or g.dtype != "f32":
        raise OpError(f"needs a gradient of x's shape {x.shape}, got {g.dtype} {g.shape}")
    return infer_float_same((x,), attrs)


def _infer_normalize(ins, attrs):
    (x,) = ins
    if x.ndim < 1:
        raise OpError("needs a tensor of rank >= 1 (it normalizes the last axis), got a scalar")
    return infer_float_same(ins, attrs)


def _torch_normalize_grad(tc, a, n):
    x, g = a
    d = x - x.mean(-1, keepdim=True)
    rstd = tc.torch.rsqrt((d * d).mean(-1, keepdim=True) + n.attrs["eps"])
    xh = d * rstd
    return rstd * (g - g.mean(-1, keepdim=True) - xh * (g * xh).mean(-1, keepdim=True))


def _even_rows(t) -> bool:
    """Whether a row kernel's rows start words of an f16 tensor (an even row length)."""
    return t.shape[-1] % 2 == 0


register(
    "normalize",
    family="norm",
    role="kernel",
    emit=normalize(),
    epilogue=True,  # the gain (and a bias) multiplied in before x_hat is stored
    pairs=_even_rows,  # its f16 copy (a product's operand, mixed) stored two a word
    infer=_infer_normalize,
    grad=lambda t, g: [make("normalize_grad", (t.inputs[0], g), eps=t.attrs["eps"])],
    ref=lambda ctx, args, t: _np_normalized(ctx.np, args[0], t.attrs["eps"])[0],
    torch=lambda tc, a, n: tc.torch.nn.functional.layer_norm(a[0], a[0].shape[-1:], eps=n.attrs["eps"]),
    recompute=True,  # a layer norm's x_hat, read again by its scale's gradient
)
register(
    "normalize_grad",
    family="norm",
    role="kernel",
    emit=normalize(grad=True),
    epilogue=True,  # the residual's gradient added before dx is stored
    pairs=_even_rows,
    infer=_infer_normalize_grad,
    grad=NO_GRAD,
    ref=_ref_normalize_grad,
    torch=_torch_normalize_grad,
)


@op
def layer_norm(x, weight=None, bias=None, eps: float = 1e-5) -> Tensor:
    """Layer normalization over the last axis (torch.nn.functional.layer_norm with
    normalized_shape = x.shape[-1:]): (x - mean) / sqrt(var + eps), the variance biased,
    then times weight and plus bias when given (each of shape [x.shape[-1]]). The
    normalization is one kernel per row, and its gradient one more."""
    x = as_tensor(x)
    require_float("layer_norm", x)
    if x.ndim < 1:
        raise OpError("needs a tensor of rank >= 1 (it normalizes the last axis), got a scalar")
    eps = float(eps)
    if not eps > 0.0 or eps == float("inf"):
        raise OpError(f"eps must be a finite number > 0, got {eps!r}")
    y = make("normalize", (x,), eps=eps)
    for name, p in (("weight", weight), ("bias", bias)):
        if p is None:
            continue
        p = as_tensor(p)
        if p.shape != x.shape[-1:]:
            raise OpError(f"{name} must have shape {x.shape[-1:]} (x's last axis), got {p.shape}")
        y = y * p if name == "weight" else y + p
    return y
