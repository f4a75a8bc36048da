"""2-D convolution and pooling on NCHW tensors, with torch.nn.functional's
argument order and output sizes (floor((H + 2p - k) / s) + 1).

Kinds and attrs (stride, padding, kernel are (h, w) int pairs):

- ``conv2d`` {stride, padding, groups}: (x [N, C, H, W], w [O, C/groups, kh, kw])
  -> [N, O, Ho, Wo]; zero padding. The bias is a broadcast add, not part of the kind.
- ``conv2d_grad_input`` {stride, padding, groups, in_hw}: (g [N, O, Ho, Wo], w)
  -> [N, C, H, W] with (H, W) = in_hw: the transposed convolution.
- ``conv2d_grad_weight`` {stride, padding, groups, kernel}: (x, g [N, O, Ho, Wo])
  -> [O, C/groups, kh, kw].
- ``max_pool2d`` {kernel, stride, padding}: x -> pooled; padding acts as -inf.
  Each window's winner is its FIRST maximum in row-major window order (as in PyTorch),
  found with a strict ``v > best`` from best = -inf: a window of only -inf/NaN has no
  winner, gives -inf and passes no gradient.
- ``max_pool2d_grad`` {kernel, stride, padding}: (x, g pooled) -> x's shape; each
  g value is added at its window's winner (overlapping windows accumulate).
- ``max_pool2d_select`` {kernel, stride, padding}: (x, h x-shaped) -> pooled; h at
  each window's winner (the gradient of max_pool2d_grad with respect to g).
- ``avg_pool2d`` {kernel, stride, padding}: mean over kh*kw including zero padding
  (PyTorch's count_include_pad=True).
- ``avg_pool2d_grad`` {kernel, stride, padding, in_hw}: (g pooled) -> [N, C, H, W].

upsample_nearest2d composes reshape and broadcast_to (its gradient is a sum).
"""

from __future__ import annotations

from ..codegen.common import f32_lit
from ..ir import OpError, Tensor, make, register, set_torch
from .base import as_tensor, op


def _pair(v, name: str, minimum: int) -> tuple[int, int]:
    if isinstance(v, int) and not isinstance(v, bool):
        v = (v, v)
    if (
        not isinstance(v, (tuple, list))
        or len(v) != 2
        or not all(isinstance(d, int) and not isinstance(d, bool) and d >= minimum for d in v)
    ):
        raise OpError(f"{name} must be an int >= {minimum} or a pair of them, got {v!r}")
    return (v[0], v[1])


def _out_size(n: int, k: int, s: int, p: int) -> int:
    return (n + 2 * p - k) // s + 1


def _check_nchw(x, what="input"):
    if x.ndim != 4:
        raise OpError(f"{what} must be NCHW (rank 4), got shape {x.shape}")
    if x.dtype != "f32":
        raise OpError(f"{what} must be float (f32), got {x.dtype} of shape {x.shape}")


# ---------------------------------------------------------------- reference helpers


def _pad_hw(np, x, p, value=0.0):
    if p == (0, 0):
        return x
    return np.pad(x, ((0, 0), (0, 0), (p[0], p[0]), (p[1], p[1])), constant_values=value)


def _window(xp, i, j, s, out_hw):
    """The elements that kernel tap (i, j) meets at every output position."""
    return xp[:, :, i : i + s[0] * (out_hw[0] - 1) + 1 : s[0], j : j + s[1] * (out_hw[1] - 1) + 1 : s[1]]


def _ref_conv(ctx, args, t):
    np = ctx.np
    x, w = args
    s, p, groups = t.attrs["stride"], t.attrs["padding"], t.attrs["groups"]
    n, c = x.shape[:2]
    o, cg, kh, kw = w.shape
    ho, wo = t.shape[2:]
    xp = _pad_hw(np, x, p)
    wg = w.reshape(groups, o // groups, cg, kh, kw)
    out = np.zeros((n, groups, o // groups, ho, wo), ctx.f)
    for i in range(kh):
        for j in range(kw):
            patch = _window(xp, i, j, s, (ho, wo)).reshape(n, groups, cg, ho, wo)
            out += np.einsum("ngchw,goc->ngohw", patch, wg[:, :, :, i, j])
    return out.reshape(n, o, ho, wo)


def _ref_conv_grad_input(ctx, args, t):
    np = ctx.np
    g, w = args
    s, p, groups = t.attrs["stride"], t.attrs["padding"], t.attrs["groups"]
    n, c, h, wd = t.shape
    o, cg, kh, kw = w.shape
    ho, wo = g.shape[2:]
    gg = g.reshape(n, groups, o // groups, ho, wo)
    wg = w.reshape(groups, o // groups, cg, kh, kw)
    gxp = np.zeros((n, c, h + 2 * p[0], wd + 2 * p[1]), ctx.f)
    for i in range(kh):
        for j in range(kw):
            contrib = np.einsum("ngohw,goc->ngchw", gg, wg[:, :, :, i, j]).reshape(n, c, ho, wo)
            _window(gxp, i, j, s, (ho, wo))[...] += contrib
    return gxp[:, :, p[0] : p[0] + h, p[1] : p[1] + wd]


def _ref_conv_grad_weight(ctx, args, t):
    np = ctx.np
    x, g = args
    s, p, groups = t.attrs["stride"], t.attrs["padding"], t.attrs["groups"]
    n = x.shape[0]
    o, cg, kh, kw = t.shape
    ho, wo = g.shape[2:]
    xp = _pad_hw(np, x, p)
    gg = g.reshape(n, groups, o // groups, ho, wo)
    out = np.zeros((groups, o // groups, cg, kh, kw), ctx.f)
    for i in range(kh):
        for j in range(kw):
            patch = _window(xp, i, j, s, (ho, wo)).reshape(n, groups, cg, ho, wo)
            out[:, :, :, i, j] = np.einsum("ngchw,ngohw->goc", patch, gg)
    return out.reshape(o, cg, kh, kw)


# ---------------------------------------------------------------- WGSL
# Every conv and pool kind is an index op: one invocation per output element loops
# over its window, so a bias add and an activation fuse into the same kernel. Two
# window walks serve them all: the taps an output position reads (forward), and the
# output positions whose windows cover an input element (the transposed walk).

_NINF = "bitcast<f32>(0xff800000u)"


def _loop(var, n):
    return f"for (var {var} = 0u; {var} < {n}u; {var} = {var} + 1u) {{"


def _taps(L, var, n, out, pos, s, tap, p, size, indent):
    """Open a loop of `var` over n, with `out` = pos * s + tap - p (a padded window
    position), skipping those outside [0, size) (zero or -inf padding). One '}' closes it."""
    L.append(indent + _loop(var, n))
    L.append(f"{indent}  let {out} = i32({pos} * {s}u + {tap}) - {p}i;")
    L.append(f"{indent}  if ({out} < 0i || {out} >= {size}i) {{ continue; }}")


def _covers(L, pos, s, p, tap, n, count, out, indent):
    """Open a loop over `n` taps along one axis whose window at output `out` covers
    input position `pos`: t = pos + p - tap must be a multiple of s with t / s in
    [0, count); `out` = t / s. Closes with one '}'."""
    t = f"t{out}"
    L.append(indent + _loop(tap, n))
    L.append(f"{indent}  let {t} = i32({pos}) + {p}i - i32({tap});")
    L.append(f"{indent}  if ({t} < 0i || {t} % {s}i != 0i || {t} / {s}i >= {count}i) {{ continue; }}")
    L.append(f"{indent}  let {out} = u32({t} / {s}i);")


def _conv_wgsl(g, m) -> str:
    x, w = m.inputs
    N, C, H, W = x.shape
    O, CG, KH, KW = w.shape
    (s0, s1), (p0, p1), OG = m.attrs["stride"], m.attrs["padding"], O // m.attrs["groups"]
    n, o, y, xx = (g.coord(d) for d in range(4))
    acc, c, i, j = g.kc.fresh(), g.kc.fresh("q"), g.kc.fresh("q"), g.kc.fresh("q")
    L = g.lines
    L += [f"var {acc} = 0.0;", _loop(c, CG), f"  let ch = ({o} / {OG}u) * {CG}u + {c};"]
    _taps(L, i, KH, "iy", y, s0, i, p0, H, "  ")
    _taps(L, j, KW, "ix", xx, s1, j, p1, W, "    ")
    xi = f"((({n} * {C}u + ch) * {H}u + u32(iy)) * {W}u + u32(ix))"
    wi = f"((({o} * {CG}u + {c}) * {KH}u + {i}) * {KW}u + {j})"
    L.append(f"      {acc} = fma({g.load_at(x, xi)}, {g.load_at(w, wi)}, {acc});")
    L += ["    }", "  }", "}"]
    return acc


def _conv_grad_input_wgsl(g, m) -> str:
    gr, w = m.inputs
    N, C, H, W = m.shape
    O, CG, KH, KW = w.shape
    _, _, HO, WO = gr.shape
    (s0, s1), (p0, p1), OG = m.attrs["stride"], m.attrs["padding"], O // m.attrs["groups"]
    n, c, h, x = (g.coord(d) for d in range(4))
    acc, oo, i, j = g.kc.fresh(), g.kc.fresh("q"), g.kc.fresh("q"), g.kc.fresh("q")
    L = g.lines
    L += [f"var {acc} = 0.0;", _loop(oo, OG), f"  let o = ({c} / {CG}u) * {OG}u + {oo};"]
    _covers(L, h, s0, p0, i, KH, HO, "oy", "  ")
    _covers(L, x, s1, p1, j, KW, WO, "ox", "    ")
    gi = f"((({n} * {O}u + o) * {HO}u + oy) * {WO}u + ox)"
    wi = f"(((o * {CG}u + ({c} % {CG}u)) * {KH}u + {i}) * {KW}u + {j})"
    L.append(f"      {acc} = fma({g.load_at(gr, gi)}, {g.load_at(w, wi)}, {acc});")
    L += ["    }", "  }", "}"]
    return acc


def _conv_grad_weight_wgsl(g, m) -> str:
    x, gr = m.inputs
    N, C, H, W = x.shape
    O, CG, KH, KW = m.shape
    _, _, HO, WO = gr.shape
    (s0, s1), (p0, p1), OG = m.attrs["stride"], m.attrs["padding"], O // m.attrs["groups"]
    o, c, i, j = (g.coord(d) for d in range(4))
    acc, n, oy, ox = g.kc.fresh(), g.kc.fresh("q"), g.kc.fresh("q"), g.kc.fresh("q")
    L = g.lines
    L += [f"var {acc} = 0.0;", f"let ch{acc} = ({o} / {OG}u) * {CG}u + {c};", _loop(n, N)]
    # output positions (oy, ox) whose window puts tap (i, j) inside the input
    _taps(L, oy, HO, "iy", oy, s0, i, p0, H, "  ")
    _taps(L, ox, WO, "ix", ox, s1, j, p1, W, "    ")
    xi = f"((({n} * {C}u + ch{acc}) * {H}u + u32(iy)) * {W}u + u32(ix))"
    gi = f"((({n} * {O}u + {o}) * {HO}u + {oy}) * {WO}u + {ox})"
    L.append(f"      {acc} = fma({g.load_at(x, xi)}, {g.load_at(gr, gi)}, {acc});")
    L += ["    }", "  }", "}"]
    return acc


def _plane(g, x):
    """The flat offset of output element (n, c)'s H x W plane of x."""
    n, c = g.coord(0), g.coord(1)
    return g.let(f"({n} * {x.shape[1]}u + {c}) * {x.shape[2] * x.shape[3]}u")


def _winner(g, x, plane: str, oy: str, ox: str, m, indent: str = ""):
    """Lines finding the first maximum of window (oy, ox) of x's plane; returns the
    names (best value, winner's flat index in the unpadded plane or -1)."""
    (KH, KW), (s0, s1), (p0, p1) = m.attrs["kernel"], m.attrs["stride"], m.attrs["padding"]
    H, W = x.shape[2], x.shape[3]
    pre = g.kc.fresh("p")
    best, win = f"{pre}b", f"{pre}w"
    L = [f"var {best} = {_NINF};", f"var {win} = -1i;"]
    _taps(L, f"{pre}i", KH, f"{pre}y", oy, s0, f"{pre}i", p0, H, "")
    _taps(L, f"{pre}j", KW, f"{pre}x", ox, s1, f"{pre}j", p1, W, "  ")
    L.append(f"    let {pre}f = u32({pre}y) * {W}u + u32({pre}x);")
    L.append(f"    let {pre}v = {g.load_at(x, f'{plane} + {pre}f')};")
    L.append(f"    if ({pre}v > {best}) {{ {best} = {pre}v; {win} = i32({pre}f); }}")
    L += ["  }", "}"]
    g.lines += [indent + ln for ln in L]
    return best, win


def _max_pool_wgsl(g, m) -> str:
    x = m.inputs[0]
    oy, ox = g.coord(2), g.coord(3)
    best, _ = _winner(g, x, _plane(g, x), oy, ox, m)
    return best


def _max_pool_select_wgsl(g, m) -> str:
    x, h = m.inputs
    oy, ox = g.coord(2), g.coord(3)
    plane = _plane(g, x)
    _, win = _winner(g, x, plane, oy, ox, m)
    v = g.kc.fresh()
    g.lines.append(f"var {v} = 0.0;")
    g.lines.append(f"if ({win} >= 0i) {{ {v} = {g.load_at(h, f'{plane} + u32({win})')}; }}")
    return v


def _max_pool_grad_wgsl(g, m) -> str:
    x, gr = m.inputs
    (KH, KW), (s0, s1), (p0, p1) = m.attrs["kernel"], m.attrs["stride"], m.attrs["padding"]
    W, HO, WO = x.shape[3], gr.shape[2], gr.shape[3]
    n, c, h, w = (g.coord(d) for d in range(4))  # named before any loop opens a scope
    plane = _plane(g, x)
    me = g.let(f"i32({h} * {W}u + {w})")
    acc, i, j = g.kc.fresh(), g.kc.fresh("q"), g.kc.fresh("q")
    L = g.lines
    L.append(f"var {acc} = 0.0;")
    _covers(L, h, s0, p0, i, KH, HO, "oy", "")
    _covers(L, w, s1, p1, j, KW, WO, "ox", "  ")
    _, win = _winner(g, x, plane, "oy", "ox", m, "    ")
    gplane = f"({n} * {x.shape[1]}u + {c}) * {HO * WO}u"
    L.append(f"    if ({win} == {me}) {{ {acc} = {acc} + {g.load_at(gr, f'{gplane} + oy * {WO}u + ox')}; }}")
    L += ["  }", "}"]
    return acc


def _avg_pool_wgsl(g, m) -> str:
    x = m.inputs[0]
    (KH, KW), (s0, s1), (p0, p1) = m.attrs["kernel"], m.attrs["stride"], m.attrs["padding"]
    _, _, oy, ox = (g.coord(d) for d in range(4))  # named before any loop opens a scope
    plane = _plane(g, x)
    acc, i, j = g.kc.fresh(), g.kc.fresh("q"), g.kc.fresh("q")
    L = g.lines
    L.append(f"var {acc} = 0.0;")
    _taps(L, i, KH, "yy", oy, s0, i, p0, x.shape[2], "")
    _taps(L, j, KW, "xx", ox, s1, j, p1, x.shape[3], "  ")
    L.append(f"    {acc} = {acc} + {g.load_at(x, f'{plane} + u32(yy) * {x.shape[3]}u + u32(xx)')};")
    L += ["  }", "}"]
    return g.let(f"{acc} * {f32_lit(1.0 / (KH * KW))}")


def _avg_pool_grad_wgsl(g, m) -> str:
    gr = m.inputs[0]
    (KH, KW), (s0, s1), (p0, p1) = m.attrs["kernel"], m.attrs["stride"], m.attrs["padding"]
    HO, WO = gr.shape[2], gr.shape[3]
    _, _, h, w = (g.coord(d) for d in range(4))  # named before any loop opens a scope
    acc, i, j = g.kc.fresh(), g.kc.fresh("q"), g.kc.fresh("q")
    gplane = _plane(g, gr)
    L = g.lines
    L.append(f"var {acc} = 0.0;")
    _covers(L, h, s0, p0, i, KH, HO, "oy", "")
    _covers(L, w, s1, p1, j, KW, WO, "ox", "  ")
    L.append(f"    {acc} = {acc} + {g.load_at(gr, f'{gplane} + oy * {WO}u + ox')};")
    L += ["  }", "}"]
    return g.let(f"{acc} * {f32_lit(1.0 / (KH * KW))}")


# ---------------------------------------------------------------- conv2d kinds


def _infer_conv(ins, attrs):
    x, w = ins
    _check_nchw(x)
    _check_nchw(w, "weight")
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
    ho, wo = _out_size(h, kh, s[0], p[0]), _out_size(wd, kw, s[1], p[1])
    if ho < 1 or wo < 1:
        raise OpError(f"kernel {kh}x{kw} is larger than the padded input {x.shape} (padding {p})")
    return (n, o, ho, wo), "f32"


def _infer_conv_grad_input(ins, attrs):
    g, w = ins
    groups = attrs["groups"]
    return (g.shape[0], w.shape[1] * groups) + tuple(attrs["in_hw"]), "f32"


def _infer_conv_grad_weight(ins, attrs):
    x, g = ins
    groups = attrs["groups"]
    return (g.shape[1], x.shape[1] // groups) + tuple(attrs["kernel"]), "f32"


def _conv_attrs(t):
    return {k: t.attrs[k] for k in ("stride", "padding", "groups")}


def _g_conv(t, g):
    x, w = t.inputs
    a = _conv_attrs(t)
    return [
        make("conv2d_grad_input", (g, w), in_hw=x.shape[2:], **a),
        make("conv2d_grad_weight", (x, g), kernel=w.shape[2:], **a),
    ]


def _g_conv_grad_input(t, h):
    # gi(g, w) is bilinear with <gi(g, w), u> = <g, conv(u, w)>
    g, w = t.inputs
    a = _conv_attrs(t)
    return [make("conv2d", (h, w), **a), make("conv2d_grad_weight", (h, g), kernel=w.shape[2:], **a)]


def _g_conv_grad_weight(t, h):
    # gw(x, g) is bilinear with <gw(x, g), v> = <g, conv(x, v)>
    x, g = t.inputs
    a = _conv_attrs(t)
    return [make("conv2d_grad_input", (g, h), in_hw=x.shape[2:], **a), make("conv2d", (x, h), **a)]


register(
    "conv2d", family="conv", role="index", emit=_conv_wgsl, infer=_infer_conv, grad=_g_conv, ref=_ref_conv
)
register(
    "conv2d_grad_input",
    family="conv",
    role="index",
    emit=_conv_grad_input_wgsl,
    infer=_infer_conv_grad_input,
    grad=_g_conv_grad_input,
    ref=_ref_conv_grad_input,
)
register(
    "conv2d_grad_weight",
    family="conv",
    role="index",
    emit=_conv_grad_weight_wgsl,
    infer=_infer_conv_grad_weight,
    grad=_g_conv_grad_weight,
    ref=_ref_conv_grad_weight,
)


@op
def conv2d(x, weight, bias=None, stride=1, padding=0, groups: int = 1) -> Tensor:
    """torch.nn.functional.conv2d: x [N, C, H, W], weight [O, C/groups, kh, kw],
    bias [O] or None; zero padding."""
    from .shape import reshape

    x, w = as_tensor(x), as_tensor(weight)
    if not isinstance(groups, int) or isinstance(groups, bool) or groups < 1:
        raise OpError(f"groups must be a positive int, got {groups!r}")
    y = make(
        "conv2d",
        (x, w),
        stride=_pair(stride, "stride", 1),
        padding=_pair(padding, "padding", 0),
        groups=groups,
    )
    if bias is not None:
        b = as_tensor(bias)
        if b.shape != (w.shape[0],):
            raise OpError(f"bias must have shape ({w.shape[0]},), got {b.shape}")
        y = y + reshape(b, (w.shape[0], 1, 1))
    return y


# ---------------------------------------------------------------- pooling


def _pool_attrs(kernel_size, stride, padding):
    k = _pair(kernel_size, "kernel_size", 1)
    s = k if stride is None else _pair(stride, "stride", 1)
    p = _pair(padding, "padding", 0)
    if p[0] * 2 > k[0] or p[1] * 2 > k[1]:
        raise OpError(f"padding {p} must be at most half the kernel size {k}")
    return {"kernel": k, "stride": s, "padding": p}


def _infer_pool(ins, attrs):
    x = ins[0]
    _check_nchw(x)
    k, s, p = attrs["kernel"], attrs["stride"], attrs["padding"]
    ho, wo = _out_size(x.shape[2], k[0], s[0], p[0]), _out_size(x.shape[3], k[1], s[1], p[1])
    if ho < 1 or wo < 1:
        raise OpError(f"kernel {k} is larger than the padded input {x.shape} (padding {p})")
    return x.shape[:2] + (ho, wo), "f32"


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
    k, s, p = attrs["kernel"], attrs["stride"], attrs["padding"]
    xp = _pad_hw(np, x, p, -np.inf)
    hp, wp = xp.shape[2:]
    ho, wo = _out_size(x.shape[2], k[0], s[0], p[0]), _out_size(x.shape[3], k[1], s[1], p[1])
    best = np.full(x.shape[:2] + (ho, wo), -np.inf, x.dtype)
    arg = np.zeros(best.shape, np.int64)
    found = np.zeros(best.shape, bool)
    rows = np.arange(ho)[:, None] * s[0]
    cols = np.arange(wo)[None, :] * s[1]
    for i in range(k[0]):
        for j in range(k[1]):
            v = _window(xp, i, j, s, (ho, wo))
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
    hpd = _pad_hw(np, h, t.attrs["padding"]).reshape(h.shape[:2] + (hp * wp,))
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
    k, s, p = t.attrs["kernel"], t.attrs["stride"], t.attrs["padding"]
    xp = _pad_hw(np, x, p)
    out = np.zeros(t.shape, ctx.f)
    for i in range(k[0]):
        for j in range(k[1]):
            out += _window(xp, i, j, s, t.shape[2:])
    return out / (k[0] * k[1])


def _ref_avg_pool_grad(ctx, args, t):
    np = ctx.np
    g = args[0]
    k, s, p = t.attrs["kernel"], t.attrs["stride"], t.attrs["padding"]
    h, w = t.attrs["in_hw"]
    gxp = np.zeros(t.shape[:2] + (h + 2 * p[0], w + 2 * p[1]), ctx.f)
    for i in range(k[0]):
        for j in range(k[1]):
            _window(gxp, i, j, s, g.shape[2:])[...] += g / (k[0] * k[1])
    return gxp[:, :, p[0] : p[0] + h, p[1] : p[1] + w]


def _pattrs(t):
    return {k: t.attrs[k] for k in ("kernel", "stride", "padding")}


register(
    "max_pool2d",
    family="conv",
    role="index",
    emit=_max_pool_wgsl,
    infer=_infer_pool,
    ref=_ref_max_pool,
    grad=lambda t, g: [make("max_pool2d_grad", (t.inputs[0], g), **_pattrs(t))],
)
register(
    "max_pool2d_grad",
    family="conv",
    role="index",
    emit=_max_pool_grad_wgsl,
    infer=_infer_same_as_first,
    ref=_ref_max_pool_grad,
    grad=lambda t, h: [None, make("max_pool2d_select", (t.inputs[0], h), **_pattrs(t))],
)
register(
    "max_pool2d_select",
    family="conv",
    role="index",
    emit=_max_pool_select_wgsl,
    infer=_infer_pool_select,
    ref=_ref_max_pool_select,
    grad=lambda t, g: [None, make("max_pool2d_grad", (t.inputs[0], g), **_pattrs(t))],
)
register(
    "avg_pool2d",
    family="conv",
    role="index",
    emit=_avg_pool_wgsl,
    infer=_infer_pool,
    ref=_ref_avg_pool,
    grad=lambda t, g: [make("avg_pool2d_grad", (g,), in_hw=t.inputs[0].shape[2:], **_pattrs(t))],
)
register(
    "avg_pool2d_grad",
    family="conv",
    role="index",
    emit=_avg_pool_grad_wgsl,
    infer=_infer_avg_grad,
    ref=_ref_avg_pool_grad,
    grad=lambda t, h: [make("avg_pool2d", (h,), **_pattrs(t))],
)


@op
def max_pool2d(x, kernel_size, stride=None, padding=0) -> Tensor:
    """torch.nn.functional.max_pool2d (stride defaults to kernel_size; padding is -inf
    and at most half the kernel)."""
    return make("max_pool2d", (as_tensor(x),), **_pool_attrs(kernel_size, stride, padding))


@op
def avg_pool2d(x, kernel_size, stride=None, padding=0) -> Tensor:
    """torch.nn.functional.avg_pool2d with count_include_pad=True."""
    return make("avg_pool2d", (as_tensor(x),), **_pool_attrs(kernel_size, stride, padding))


@op
def upsample_nearest2d(x, scale_factor) -> Tensor:
    """Nearest-neighbour upsampling of NCHW by integer factors (an int or a pair)."""
    from .shape import broadcast_to, reshape

    x = as_tensor(x)
    _check_nchw(x)
    fh, fw = _pair(scale_factor, "scale_factor", 1)
    n, c, h, w = x.shape
    y = broadcast_to(reshape(x, (n, c, h, 1, w, 1)), (n, c, h, fh, w, fw))
    return reshape(y, (n, c, h * fh, w * fw))


# ---------------------------------------------------------------- PyTorch (tg.to_torch)

set_torch(
    {
        "conv2d": lambda tc, a, n: tc.F.conv2d(
            a[0], a[1], stride=n.attrs["stride"], padding=n.attrs["padding"], groups=n.attrs["groups"]
        ),
        "max_pool2d": lambda tc, a, n: tc.F.max_pool2d(
            a[0], n.attrs["kernel"], n.attrs["stride"], n.attrs["padding"]
        ),
        "avg_pool2d": lambda tc, a, n: tc.F.avg_pool2d(
            a[0], n.attrs["kernel"], n.attrs["stride"], n.attrs["padding"], count_include_pad=True
        ),
    }
)
