"""2-D pooling on NCHW tensors, with torch.nn.functional's argument order and output
sizes (as conv2d's: tgweb.ops.conv), and nearest-neighbour upsampling.

Kinds and attrs (kernel, stride, padding are (h, w) int pairs). Every kind also
carries ceil_mode (the output size rounds up; a last window that would start in the
right padding is dropped, as in PyTorch), and the avg kinds count_include_pad (the
divisor: the window's size within the padded input, else its taps inside the input);
both default to PyTorch's defaults when absent.

- ``max_pool2d`` {kernel, stride, padding}: x -> pooled; padding acts as -inf.
  Each window's winner is its FIRST maximum in row-major window order (as in PyTorch),
  found with a strict ``v > best`` from best = -inf: a window of only -inf/NaN has no
  winner, gives -inf and passes no gradient.
- ``max_pool2d_grad`` {kernel, stride, padding}: (x, g pooled) -> x's shape; each
  g value is added at its window's winner (overlapping windows accumulate).
- ``max_pool2d_select`` {kernel, stride, padding}: (x, h x-shaped) -> pooled; h at
  each window's winner (the gradient of max_pool2d_grad with respect to g).
- ``avg_pool2d`` {kernel, stride, padding}: the window's sum over its divisor.
- ``avg_pool2d_grad`` {kernel, stride, padding, in_hw}: (g pooled) -> [N, C, H, W].

upsample_nearest2d composes reshape and broadcast_to (its gradient is a sum).

The kernels: codegen/conv.py.
"""

from __future__ import annotations

from ..codegen import conv as kernels
from ..ir import OpError, Tensor, make, register
from .base import as_tensor, op
from .conv import check_nchw, out_size, pair, window


def _pool_attrs(kernel_size, stride, padding, ceil_mode, **extra):
    k = pair(kernel_size, "kernel_size", 1)
    s = k if stride is None else pair(stride, "stride", 1)
    p = pair(padding, "padding", 0)
    if p[0] * 2 > k[0] or p[1] * 2 > k[1]:
        raise OpError(f"padding {p} must be at most half the kernel size {k}")
    return {"kernel": k, "stride": s, "padding": p, "ceil_mode": bool(ceil_mode), **extra}


def _pool_out_hw(hw, attrs) -> tuple[int, int]:
    k, s, p, ceil = attrs["kernel"], attrs["stride"], attrs["padding"], attrs.get("ceil_mode", False)
    return tuple(out_size(hw[a], k[a], s[a], p[a], 1, ceil) for a in (0, 1))


def _infer_pool(ins, attrs):
    x = ins[0]
    check_nchw(x)
    ho, wo = _pool_out_hw(x.shape[2:], attrs)
    if ho < 1 or wo < 1:
        raise OpError(
            f"kernel {attrs['kernel']} is larger than the padded input {x.shape} (padding {attrs['padding']})"
        )
    return x.shape[:2] + (ho, wo), "f32"


def _pad_pool(np, x, attrs, value=0.0):
    """x padded by the pool's padding on every side and, for ceil_mode windows that run
    past it, more on the bottom/right, so that every window is a slice."""
    k, s, p = attrs["kernel"], attrs["stride"], attrs["padding"]
    out = _pool_out_hw(x.shape[2:], attrs)
    after = [max(p[a], (out[a] - 1) * s[a] + k[a] - x.shape[2 + a] - p[a]) for a in (0, 1)]
    return np.pad(x, ((0, 0), (0, 0), (p[0], after[0]), (p[1], after[1])), constant_values=value)


def _ref_divisor(np, attrs, hw, out_hw):
    """[Ho, Wo]: each window's divisor (see _window_count)."""
    k, s, p = attrs["kernel"], attrs["stride"], attrs["padding"]
    include = attrs.get("count_include_pad", True)
    counts = []
    for a in (0, 1):
        start = np.arange(out_hw[a]) * s[a] - p[a]
        end = np.minimum(start + k[a], hw[a] + p[a])
        counts.append(end - start if include else np.minimum(end, hw[a]) - np.maximum(start, 0))
    return counts[0][:, None] * counts[1][None, :]


def _infer_pool_select(ins, attrs):
    x, h = ins
    if h.shape != x.shape:
        raise OpError(f"shapes differ: {x.shape} and {h.shape}")
    return _infer_pool((x,), attrs)


def _infer_same_as_first(ins, attrs):
    return ins[0].shape, "f32"


def _infer_avg_grad(ins, attrs):
    g = ins[0]
    return g.shape[:2] + tuple(attrs["in_hw"]), "f32"


def _winners(ctx, x, attrs):
    """Each window's first maximum: (its value, its flat index into one padded H x W
    plane, whether the window has one), each [N, C, Ho, Wo]; and the padded plane's
    shape. A window of only -inf or NaN has no winner (as in the WGSL kernels):
    its maximum is -inf and it passes no gradient."""
    np = ctx.np
    k, s = attrs["kernel"], attrs["stride"]
    xp = _pad_pool(np, x, attrs, -np.inf)
    hp, wp = xp.shape[2:]
    ho, wo = _pool_out_hw(x.shape[2:], attrs)
    best = np.full(x.shape[:2] + (ho, wo), -np.inf, x.dtype)
    arg = np.zeros(best.shape, np.int64)
    found = np.zeros(best.shape, bool)
    rows = np.arange(ho)[:, None] * s[0]
    cols = np.arange(wo)[None, :] * s[1]
    for i in range(k[0]):
        for j in range(k[1]):
            v = window(xp, i, j, s, (ho, wo))
            better = v > best  # strict: the first maximum wins
            best = np.where(better, v, best)
            arg = np.where(better, (rows + i) * wp + (cols + j), arg)
            found |= better
    return best, arg, found, (hp, wp)


def _ref_max_pool(ctx, args, t):
    return _winners(ctx, args[0], t.attrs)[0]


def _ref_max_pool_select(ctx, args, t):
    np = ctx.np
    x, h = args
    _, arg, found, (hp, wp) = _winners(ctx, x, t.attrs)
    hpd = _pad_pool(np, h, t.attrs).reshape(h.shape[:2] + (hp * wp,))
    out = np.take_along_axis(hpd, arg.reshape(arg.shape[:2] + (-1,)), 2).reshape(t.shape)
    return np.where(found, out, 0)


def _ref_max_pool_grad(ctx, args, t):
    np = ctx.np
    x, g = args
    _, arg, found, (hp, wp) = _winners(ctx, x, t.attrs)
    n, c = x.shape[:2]
    out = np.zeros((n * c, hp * wp), ctx.f)
    rows = np.repeat(np.arange(n * c), arg.shape[2] * arg.shape[3])
    keep = found.reshape(-1)
    np.add.at(out, (rows[keep], arg.reshape(-1)[keep]), g.reshape(-1)[keep])
    p = t.attrs["padding"]
    return out.reshape(n, c, hp, wp)[:, :, p[0] : p[0] + x.shape[2], p[1] : p[1] + x.shape[3]]


def _ref_avg_pool(ctx, args, t):
    np = ctx.np
    x = args[0]
    k, s = t.attrs["kernel"], t.attrs["stride"]
    xp = _pad_pool(np, x, t.attrs)
    out = np.zeros(t.shape, ctx.f)
    for i in range(k[0]):
        for j in range(k[1]):
            out += window(xp, i, j, s, t.shape[2:])
    return out / _ref_divisor(np, t.attrs, x.shape[2:], t.shape[2:])


def _ref_avg_pool_grad(ctx, args, t):
    np = ctx.np
    g = args[0]
    k, s, p = t.attrs["kernel"], t.attrs["stride"], t.attrs["padding"]
    h, w = t.attrs["in_hw"]
    gxp = _pad_pool(np, np.zeros(t.shape, ctx.f), t.attrs)
    gd = g / _ref_divisor(np, t.attrs, (h, w), g.shape[2:])
    for i in range(k[0]):
        for j in range(k[1]):
            window(gxp, i, j, s, g.shape[2:])[...] += gd
    return gxp[:, :, p[0] : p[0] + h, p[1] : p[1] + w]


def _pattrs(t):
    keys = ("kernel", "stride", "padding", "ceil_mode", "count_include_pad")
    return {k: t.attrs[k] for k in keys if k in t.attrs}


register(
    "max_pool2d",
    family="conv",
    role="index",
    emit=kernels.max_pool_wgsl,
    infer=_infer_pool,
    ref=_ref_max_pool,
    grad=lambda t, g: [make("max_pool2d_grad", (t.inputs[0], g), **_pattrs(t))],
    torch=lambda tc, a, n: tc.F.max_pool2d(
        a[0],
        n.attrs["kernel"],
        n.attrs["stride"],
        n.attrs["padding"],
        ceil_mode=n.attrs.get("ceil_mode", False),
    ),
)
register(
    "max_pool2d_grad",
    family="conv",
    role="index",
    emit=kernels.max_pool_grad_wgsl,
    infer=_infer_same_as_first,
    ref=_ref_max_pool_grad,
    grad=lambda t, h: [None, make("max_pool2d_select", (t.inputs[0], h), **_pattrs(t))],
)
register(
    "max_pool2d_select",
    family="conv",
    role="index",
    emit=kernels.max_pool_select_wgsl,
    infer=_infer_pool_select,
    ref=_ref_max_pool_select,
    grad=lambda t, g: [None, make("max_pool2d_grad", (t.inputs[0], g), **_pattrs(t))],
)
register(
    "avg_pool2d",
    family="conv",
    role="index",
    emit=kernels.avg_pool_wgsl,
    infer=_infer_pool,
    ref=_ref_avg_pool,
    grad=lambda t, g: [make("avg_pool2d_grad", (g,), in_hw=t.inputs[0].shape[2:], **_pattrs(t))],
    torch=lambda tc, a, n: tc.F.avg_pool2d(
        a[0],
        n.attrs["kernel"],
        n.attrs["stride"],
        n.attrs["padding"],
        ceil_mode=n.attrs.get("ceil_mode", False),
        count_include_pad=n.attrs.get("count_include_pad", True),
    ),
)
register(
    "avg_pool2d_grad",
    family="conv",
    role="index",
    emit=kernels.avg_pool_grad_wgsl,
    infer=_infer_avg_grad,
    ref=_ref_avg_pool_grad,
    grad=lambda t, h: [make("avg_pool2d", (h,), **_pattrs(t))],
)


@op
def max_pool2d(x, kernel_size, stride=None, padding=0, ceil_mode: bool = False) -> Tensor:
    """torch.nn.functional.max_pool2d (stride defaults to kernel_size; padding is -inf
    and at most half the kernel; ceil_mode rounds the output size up, dropping a last
    window that would start in the padding, as PyTorch does)."""
    return make("max_pool2d", (as_tensor(x),), **_pool_attrs(kernel_size, stride, padding, ceil_mode))


@op
def avg_pool2d(
    x, kernel_size, stride=None, padding=0, ceil_mode: bool = False, count_include_pad: bool = True
) -> Tensor:
    """torch.nn.functional.avg_pool2d: count_include_pad divides by the window's size
    within the padded input, else by its taps inside the input."""
    a = _pool_attrs(kernel_size, stride, padding, ceil_mode, count_include_pad=bool(count_include_pad))
    return make("avg_pool2d", (as_tensor(x),), **a)


@op
def upsample_nearest2d(x, scale_factor) -> Tensor:
    """Nearest-neighbour upsampling of NCHW by integer factors (an int or a pair)."""
    from .shape import broadcast_to, reshape

    x = as_tensor(x)
    check_nchw(x)
    fh, fw = pair(scale_factor, "scale_factor", 1)
    n, c, h, w = x.shape
    y = broadcast_to(reshape(x, (n, c, h, 1, w, 1)), (n, c, h, fh, w, fw))
    return reshape(y, (n, c, h * fh, w * fw))
