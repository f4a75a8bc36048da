"""2-D convolution on NCHW tensors, with torch.nn.functional's argument order and
output sizes (floor((H + 2p - d(k-1) - 1) / s) + 1).

Kinds and attrs (stride, padding, dilation, kernel are (h, w) int pairs; a kind
without dilation has (1, 1)):

- ``conv2d`` {stride, padding, dilation, groups}: (x [N, C, H, W], w [O, C/groups, kh, kw])
  -> [N, O, Ho, Wo]; zero padding. The bias is a broadcast add, not part of the kind.
- ``conv2d_grad_input`` {stride, padding, dilation, groups, in_hw}: (g [N, O, Ho, Wo], w)
  -> [N, C, H, W] with (H, W) = in_hw: the transposed convolution (also
  ``conv_transpose2d``, whose output_padding makes in_hw larger than conv's inverse size).
- ``conv2d_grad_weight`` {stride, padding, dilation, groups, kernel}: (x, g [N, O, Ho, Wo])
  -> [O, C/groups, kh, kw].

The kernels: codegen/conv.py. Pooling: ops/pool.py.
"""

from __future__ import annotations

from ..codegen import conv as kernels
from ..codegen.conv import dilation
from ..ir import OpError, Tensor, make, register
from .base import as_tensor, op


def pair(v, name: str, minimum: int) -> tuple[int, int]:
    if isinstance(v, int) and not isinstance(v, bool):
        v = (v, v)
    if (
        not isinstance(v, (tuple, list))
        or len(v) != 2
        or not all(isinstance(d, int) and not isinstance(d, bool) and d >= minimum for d in v)
    ):
        raise OpError(f"{name} must be an int >= {minimum} or a pair of them, got {v!r}")
    return (v[0], v[1])


def out_size(n: int, k: int, s: int, p: int, d: int = 1, ceil: bool = False) -> int:
    """Output length along one axis; ceil_mode rounds up but, as in PyTorch, drops a
    last window that would start in the right padding."""
    span = n + 2 * p - d * (k - 1) - 1
    if not ceil:
        return span // s + 1
    o = -(-span // s) + 1
    return o - 1 if (o - 1) * s >= n + p else o


def check_nchw(x, what="input"):
    if x.ndim != 4:
        raise OpError(f"{what} must be NCHW (rank 4), got shape {x.shape}")
    if x.dtype != "f32":
        raise OpError(f"{what} must be float (f32), got {x.dtype} of shape {x.shape}")


# ---------------------------------------------------------------- reference helpers


def _pad_hw(np, x, p, value=0.0):
    if p == (0, 0):
        return x
    return np.pad(x, ((0, 0), (0, 0), (p[0], p[0]), (p[1], p[1])), constant_values=value)


def window(xp, i, j, s, out_hw, d=(1, 1)):
    """The elements that kernel tap (i, j) (dilated by d) meets at every output position."""
    i, j = i * d[0], j * d[1]
    return xp[:, :, i : i + s[0] * (out_hw[0] - 1) + 1 : s[0], j : j + s[1] * (out_hw[1] - 1) + 1 : s[1]]


def _ref_conv(ctx, args, t):
    np = ctx.np
    x, w = args
    s, p, groups, d = t.attrs["stride"], t.attrs["padding"], t.attrs["groups"], dilation(t.attrs)
    n, c = x.shape[:2]
    o, cg, kh, kw = w.shape
    ho, wo = t.shape[2:]
    xp = _pad_hw(np, x, p)
    wg = w.reshape(groups, o // groups, cg, kh, kw)
    out = np.zeros((n, groups, o // groups, ho, wo), ctx.f)
    for i in range(kh):
        for j in range(kw):
            patch = window(xp, i, j, s, (ho, wo), d).reshape(n, groups, cg, ho, wo)
            out += np.einsum("ngchw,goc->ngohw", patch, wg[:, :, :, i, j])
    return out.reshape(n, o, ho, wo)


def _ref_conv_grad_input(ctx, args, t):
    np = ctx.np
    g, w = args
    s, p, groups, d = t.attrs["stride"], t.attrs["padding"], t.attrs["groups"], dilation(t.attrs)
    n, c, h, wd = t.shape
    o, cg, kh, kw = w.shape
    ho, wo = g.shape[2:]
    gg = g.reshape(n, groups, o // groups, ho, wo)
    wg = w.reshape(groups, o // groups, cg, kh, kw)
    gxp = np.zeros((n, c, h + 2 * p[0], wd + 2 * p[1]), ctx.f)
    for i in range(kh):
        for j in range(kw):
            contrib = np.einsum("ngohw,goc->ngchw", gg, wg[:, :, :, i, j]).reshape(n, c, ho, wo)
            window(gxp, i, j, s, (ho, wo), d)[...] += contrib
    return gxp[:, :, p[0] : p[0] + h, p[1] : p[1] + wd]


def _ref_conv_grad_weight(ctx, args, t):
    np = ctx.np
    x, g = args
    s, p, groups, d = t.attrs["stride"], t.attrs["padding"], t.attrs["groups"], dilation(t.attrs)
    n = x.shape[0]
    o, cg, kh, kw = t.shape
    ho, wo = g.shape[2:]
    xp = _pad_hw(np, x, p)
    gg = g.reshape(n, groups, o // groups, ho, wo)
    out = np.zeros((groups, o // groups, cg, kh, kw), ctx.f)
    for i in range(kh):
        for j in range(kw):
            patch = window(xp, i, j, s, (ho, wo), d).reshape(n, groups, cg, ho, wo)
            out[:, :, :, i, j] = np.einsum("ngchw,ngohw->goc", patch, gg)
    return out.reshape(o, cg, kh, kw)


# ---------------------------------------------------------------- conv2d kinds


def _infer_conv(ins, attrs):
    x, w = ins
    check_nchw(x)
    check_nchw(w, "weight")
    s, p, groups = attrs["stride"], attrs["padding"], attrs["groups"]
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    if c % groups or o % groups:
        raise OpError(f"channels in {c} / out {o} do not divide into {groups} groups")
    if cg * groups != c:
        raise OpError(
            f"weight {w.shape} expects {cg * groups} input channels "
            f"(groups={groups}), input {x.shape} has {c}"
        )
    d = dilation(attrs)
    ho, wo = out_size(h, kh, s[0], p[0], d[0]), out_size(wd, kw, s[1], p[1], d[1])
    if ho < 1 or wo < 1:
        raise OpError(
            f"kernel {kh}x{kw} (dilation {d}) is larger than the padded input {x.shape} (padding {p})"
        )
    return (n, o, ho, wo), "f32"


def _infer_conv_grad_input(ins, attrs):
    # also the shape rule of conv_transpose2d, whose input is g
    g, w = ins
    check_nchw(g)
    check_nchw(w, "weight")
    groups = attrs["groups"]
    if w.shape[0] != g.shape[1] or g.shape[1] % groups:
        raise OpError(
            f"weight {w.shape} expects {w.shape[0]} input channels in {groups} groups, "
            f"input {g.shape} has {g.shape[1]}"
        )
    return (g.shape[0], w.shape[1] * groups) + tuple(attrs["in_hw"]), "f32"


def _infer_conv_grad_weight(ins, attrs):
    x, g = ins
    groups = attrs["groups"]
    return (g.shape[1], x.shape[1] // groups) + tuple(attrs["kernel"]), "f32"


def _conv_attrs(t):
    return {k: t.attrs[k] for k in ("stride", "padding", "groups", "dilation") if k in t.attrs}


def _g_conv(t, g):
    x, w = t.inputs
    a = _conv_attrs(t)
    return [
        make("conv2d_grad_input", (g, w), in_hw=x.shape[2:], **a),
        make("conv2d_grad_weight", (x, g), kernel=w.shape[2:], **a),
    ]


def _g_conv_grad_input(t, h):
    # gi(g, w) is bilinear with <gi(g, w), u> = <g, conv(u, w)>; a transposed conv whose
    # output_padding reaches a stride holds rows conv does not see: conv(u, w) is cut to g
    from .shape import narrow

    g, w = t.inputs
    a = _conv_attrs(t)
    gx = make("conv2d", (h, w), **a)
    for ax in (2, 3):
        gx = narrow(gx, ax, 0, g.shape[ax])
    return [gx, make("conv2d_grad_weight", (h, g), kernel=w.shape[2:], **a)]


def _g_conv_grad_weight(t, h):
    # gw(x, g) is bilinear with <gw(x, g), v> = <g, conv(x, v)>
    x, g = t.inputs
    a = _conv_attrs(t)
    return [make("conv2d_grad_input", (g, h), in_hw=x.shape[2:], **a), make("conv2d", (x, h), **a)]


def _torch_conv_transpose(tc, a, n):
    g, w = a
    at, d = n.attrs, dilation(n.attrs)
    natural = [
        (g.shape[2 + i] - 1) * at["stride"][i] - 2 * at["padding"][i] + d[i] * (w.shape[2 + i] - 1) + 1
        for i in (0, 1)
    ]
    extra = tuple(h - m for h, m in zip(at["in_hw"], natural))
    return tc.F.conv_transpose2d(g, w, None, at["stride"], at["padding"], extra, at["groups"], d)


register(
    "conv2d",
    family="conv",
    role="index",
    emit=kernels.conv_wgsl,
    infer=_infer_conv,
    grad=_g_conv,
    ref=_ref_conv,
    torch=lambda tc, a, n: tc.F.conv2d(
        a[0], a[1], None, n.attrs["stride"], n.attrs["padding"], dilation(n.attrs), n.attrs["groups"]
    ),
)
register(
    "conv2d_grad_input",
    family="conv",
    role="index",
    emit=kernels.conv_grad_input_wgsl,
    infer=_infer_conv_grad_input,
    grad=_g_conv_grad_input,
    ref=_ref_conv_grad_input,
    torch=_torch_conv_transpose,
)
register(
    "conv2d_grad_weight",
    family="conv",
    role="index",
    emit=kernels.conv_grad_weight_wgsl,
    infer=_infer_conv_grad_weight,
    grad=_g_conv_grad_weight,
    ref=_ref_conv_grad_weight,
)


def _same_padding(x: Tensor, k, s, d) -> tuple[Tensor, tuple[int, int]]:
    """padding="same": d * (k - 1) in all per axis, the odd one on the bottom/right as in
    PyTorch (an explicit zero pad); x and the symmetric padding that remains."""
    from .shape import pad

    if s != (1, 1):
        raise OpError(f'padding="same" needs stride 1, got stride {s}')
    total = (d[0] * (k[0] - 1), d[1] * (k[1] - 1))
    for ax, t in ((2, total[0]), (3, total[1])):
        x = pad(x, ax, 0, t % 2)
    return x, (total[0] // 2, total[1] // 2)


def _groups(groups) -> int:
    if not isinstance(groups, int) or isinstance(groups, bool) or groups < 1:
        raise OpError(f"groups must be a positive int, got {groups!r}")
    return groups


def _add_bias(y: Tensor, bias, channels: int) -> Tensor:
    from .shape import reshape

    if bias is None:
        return y
    b = as_tensor(bias)
    if b.shape != (channels,):
        raise OpError(f"bias must have shape ({channels},), got {b.shape}")
    return y + reshape(b, (channels, 1, 1))


@op
def conv2d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups: int = 1) -> Tensor:
    """torch.nn.functional.conv2d: x [N, C, H, W], weight [O, C/groups, kh, kw],
    bias [O] or None; zero padding: an int, a pair, "valid" (0) or "same" (stride 1;
    the output keeps H x W)."""
    x, w = as_tensor(x), as_tensor(weight)
    check_nchw(w, "weight")
    s, d = pair(stride, "stride", 1), pair(dilation, "dilation", 1)
    if padding == "same":
        x, p = _same_padding(x, w.shape[2:], s, d)
    elif padding == "valid":
        p = (0, 0)
    elif isinstance(padding, str):
        raise OpError(f'padding must be an int, a pair, "same" or "valid", got {padding!r}')
    else:
        p = pair(padding, "padding", 0)
    y = make("conv2d", (x, w), stride=s, padding=p, dilation=d, groups=_groups(groups))
    return _add_bias(y, bias, w.shape[0])


@op
def conv_transpose2d(
    x, weight, bias=None, stride=1, padding=0, output_padding=0, groups: int = 1, dilation=1
) -> Tensor:
    """torch.nn.functional.conv_transpose2d: x [N, C, H, W], weight [C, O/groups, kh, kw],
    out [N, O, (H-1)*stride - 2*padding + dilation*(k-1) + output_padding + 1, ...]. It is
    the gradient of conv2d with respect to its input (the kind conv2d_grad_input)."""
    x, w = as_tensor(x), as_tensor(weight)
    check_nchw(x)
    check_nchw(w, "weight")
    s, p, d = pair(stride, "stride", 1), pair(padding, "padding", 0), pair(dilation, "dilation", 1)
    op_ = pair(output_padding, "output_padding", 0)
    if any(o >= max(si, di) for o, si, di in zip(op_, s, d)):
        raise OpError(f"output_padding {op_} must be smaller than stride {s} or dilation {d}")
    hw = tuple(
        (n - 1) * si - 2 * pi + di * (k - 1) + o + 1
        for n, si, pi, di, k, o in zip(x.shape[2:], s, p, d, w.shape[2:], op_)
    )
    if min(hw) < 1:
        raise OpError(
            f"output size {hw} is not positive (input {x.shape}, kernel {w.shape[2:]}, padding {p})"
        )
    y = make("conv2d_grad_input", (x, w), stride=s, padding=p, dilation=d, groups=_groups(groups), in_hw=hw)
    return _add_bias(y, bias, w.shape[1] * y.attrs["groups"])
