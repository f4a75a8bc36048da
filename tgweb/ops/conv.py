"""2-D convolution and pooling on NCHW tensors, with torch.nn.functional's
argument order and output sizes (floor((H + 2p - d(k-1) - 1) / s) + 1).

Kinds and attrs (stride, padding, dilation, kernel are (h, w) int pairs; a kind
without dilation has (1, 1)):

- ``conv2d`` {stride, padding, dilation, groups}: (x [N, C, H, W], w [O, C/groups, kh, kw])
  -> [N, O, Ho, Wo]; zero padding. The bias is a broadcast add, not part of the kind.
- ``conv2d_grad_input`` {stride, padding, dilation, groups, in_hw}: (g [N, O, Ho, Wo], w)
  -> [N, C, H, W] with (H, W) = in_hw: the transposed convolution (also
  ``conv_transpose2d``, whose output_padding makes in_hw larger than conv's inverse size).
- ``conv2d_grad_weight`` {stride, padding, dilation, groups, kernel}: (x, g [N, O, Ho, Wo])
  -> [O, C/groups, kh, kw].

Pool kinds also carry ceil_mode (the output size rounds up; a last window that would
start in the right padding is dropped, as in PyTorch), and the avg kinds
count_include_pad (the divisor: the window's size within the padded input, else its
taps inside the input); both default to PyTorch's defaults when absent.

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
"""

from __future__ import annotations

from ..codegen.common import f32_lit
from ..ir import OpError, Tensor, make, register
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


def _out_size(n: int, k: int, s: int, p: int, d: int = 1, ceil: bool = False) -> int:
    """Output length along one axis; ceil_mode rounds up but, as in PyTorch, drops a
    last window that would start in the right padding."""
    span = n + 2 * p - d * (k - 1) - 1
    if not ceil:
        return span // s + 1
    o = -(-span // s) + 1
    return o - 1 if (o - 1) * s >= n + p else o


def _dil(attrs) -> tuple[int, int]:
    return attrs.get("dilation", (1, 1))


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


def _window(xp, i, j, s, out_hw, d=(1, 1)):
    """The elements that kernel tap (i, j) (dilated by d) meets at every output position."""
    i, j = i * d[0], j * d[1]
    return xp[:, :, i : i + s[0] * (out_hw[0] - 1) + 1 : s[0], j : j + s[1] * (out_hw[1] - 1) + 1 : s[1]]


def _ref_conv(ctx, args, t):
    np = ctx.np
    x, w = args
    s, p, groups, d = t.attrs["stride"], t.attrs["padding"], t.attrs["groups"], _dil(t.attrs)
    n, c = x.shape[:2]
    o, cg, kh, kw = w.shape
    ho, wo = t.shape[2:]
    xp = _pad_hw(np, x, p)
    wg = w.reshape(groups, o // groups, cg, kh, kw)
    out = np.zeros((n, groups, o // groups, ho, wo), ctx.f)
    for i in range(kh):
        for j in range(kw):
            patch = _window(xp, i, j, s, (ho, wo), d).reshape(n, groups, cg, ho, wo)
            out += np.einsum("ngchw,goc->ngohw", patch, wg[:, :, :, i, j])
    return out.reshape(n, o, ho, wo)


def _ref_conv_grad_input(ctx, args, t):
    np = ctx.np
    g, w = args
    s, p, groups, d = t.attrs["stride"], t.attrs["padding"], t.attrs["groups"], _dil(t.attrs)
    n, c, h, wd = t.shape
    o, cg, kh, kw = w.shape
    ho, wo = g.shape[2:]
    gg = g.reshape(n, groups, o // groups, ho, wo)
    wg = w.reshape(groups, o // groups, cg, kh, kw)
    gxp = np.zeros((n, c, h + 2 * p[0], wd + 2 * p[1]), ctx.f)
    for i in range(kh):
        for j in range(kw):
            contrib = np.einsum("ngohw,goc->ngchw", gg, wg[:, :, :, i, j]).reshape(n, c, ho, wo)
            _window(gxp, i, j, s, (ho, wo), d)[...] += contrib
    return gxp[:, :, p[0] : p[0] + h, p[1] : p[1] + wd]


def _ref_conv_grad_weight(ctx, args, t):
    np = ctx.np
    x, g = args
    s, p, groups, d = t.attrs["stride"], t.attrs["padding"], t.attrs["groups"], _dil(t.attrs)
    n = x.shape[0]
    o, cg, kh, kw = t.shape
    ho, wo = g.shape[2:]
    xp = _pad_hw(np, x, p)
    gg = g.reshape(n, groups, o // groups, ho, wo)
    out = np.zeros((groups, o // groups, cg, kh, kw), ctx.f)
    for i in range(kh):
        for j in range(kw):
            patch = _window(xp, i, j, s, (ho, wo), d).reshape(n, groups, cg, ho, wo)
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


def _taps(L, var, n, out, pos, s, tap, p, size, indent, d=1):
    """Open a loop of `var` over n, with `out` = pos * s + tap * d - p (a padded,
    dilated window position), skipping those outside [0, size) (zero or -inf padding).
    One '}' closes it."""
    L.append(indent + _loop(var, n))
    L.append(f"{indent}  let {out} = i32({pos} * {s}u + {tap} * {d}u) - {p}i;")
    L.append(f"{indent}  if ({out} < 0i || {out} >= {size}i) {{ continue; }}")


def _covers(L, pos, s, p, tap, n, count, out, indent, d=1):
    """Open a loop over `n` taps along one axis whose window at output `out` covers
    input position `pos`: t = pos + p - tap * d must be a multiple of s with t / s in
    [0, count); `out` = t / s. Closes with one '}'."""
    t = f"t{out}"
    L.append(indent + _loop(tap, n))
    L.append(f"{indent}  let {t} = i32({pos}) + {p}i - i32({tap} * {d}u);")
    L.append(f"{indent}  if ({t} < 0i || {t} % {s}i != 0i || {t} / {s}i >= {count}i) {{ continue; }}")
    L.append(f"{indent}  let {out} = u32({t} / {s}i);")


def _conv_wgsl(g, m) -> str:
    x, w = m.inputs
    N, C, H, W = x.shape
    O, CG, KH, KW = w.shape
    (s0, s1), (p0, p1), OG = m.attrs["stride"], m.attrs["padding"], O // m.attrs["groups"]
    d0, d1 = _dil(m.attrs)
    n, o, y, xx = (g.coord(d) for d in range(4))
    acc, c, i, j = g.kc.fresh(), g.kc.fresh("q"), g.kc.fresh("q"), g.kc.fresh("q")
    L = g.lines
    L += [f"var {acc} = 0.0;", _loop(c, CG), f"  let ch = ({o} / {OG}u) * {CG}u + {c};"]
    _taps(L, i, KH, "iy", y, s0, i, p0, H, "  ", d0)
    _taps(L, j, KW, "ix", xx, s1, j, p1, W, "    ", d1)
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
    d0, d1 = _dil(m.attrs)
    n, c, h, x = (g.coord(d) for d in range(4))
    acc, oo, i, j = g.kc.fresh(), g.kc.fresh("q"), g.kc.fresh("q"), g.kc.fresh("q")
    L = g.lines
    L += [f"var {acc} = 0.0;", _loop(oo, OG), f"  let o = ({c} / {CG}u) * {OG}u + {oo};"]
    _covers(L, h, s0, p0, i, KH, HO, "oy", "  ", d0)
    _covers(L, x, s1, p1, j, KW, WO, "ox", "    ", d1)
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
    d0, d1 = _dil(m.attrs)
    o, c, i, j = (g.coord(d) for d in range(4))
    acc, n, oy, ox = g.kc.fresh(), g.kc.fresh("q"), g.kc.fresh("q"), g.kc.fresh("q")
    L = g.lines
    L += [f"var {acc} = 0.0;", f"let ch{acc} = ({o} / {OG}u) * {CG}u + {c};", _loop(n, N)]
    # output positions (oy, ox) whose window puts tap (i, j) inside the input
    _taps(L, oy, HO, "iy", oy, s0, f"{i} * {d0}u", p0, H, "  ")
    _taps(L, ox, WO, "ix", ox, s1, f"{j} * {d1}u", p1, W, "    ")
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


def _window_count(o: str, k: int, s: int, p: int, n: int, include_pad: bool) -> str:
    """WGSL: how many of window o's k taps along one axis the average divides by: those
    inside the input plus padding (count_include_pad; a ceil_mode window running past
    the padding is cut there, as in PyTorch), or those inside the input only."""
    start = f"(i32({o} * {s}u) - {p}i)"
    if include_pad:
        return f"(min({start} + {k}i, {n + p}i) - {start})"
    return f"(min({start} + {k}i, {n}i) - max({start}, 0i))"


def _avg_scale(m, oy: str, ox: str, hw) -> str:
    """WGSL: 1 / the divisor of output window (oy, ox) of an avg_pool2d kind over an
    input plane of size hw."""
    (KH, KW), (s0, s1), (p0, p1) = m.attrs["kernel"], m.attrs["stride"], m.attrs["padding"]
    include = m.attrs.get("count_include_pad", True)
    if include and not m.attrs.get("ceil_mode", False):
        return f32_lit(1.0 / (KH * KW))  # every window is whole
    ch = _window_count(oy, KH, s0, p0, hw[0], include)
    cw = _window_count(ox, KW, s1, p1, hw[1], include)
    return f"(1.0 / f32({ch} * {cw}))"


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
    return g.let(f"{acc} * {_avg_scale(m, oy, ox, x.shape[2:])}")


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
    scale = _avg_scale(m, "oy", "ox", m.shape[2:])
    L.append(f"    {acc} = {acc} + {g.load_at(gr, f'{gplane} + oy * {WO}u + ox')} * {scale};")
    L += ["  }", "}"]
    return acc


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
    d = _dil(attrs)
    ho, wo = _out_size(h, kh, s[0], p[0], d[0]), _out_size(wd, kw, s[1], p[1], d[1])
    if ho < 1 or wo < 1:
        raise OpError(
            f"kernel {kh}x{kw} (dilation {d}) is larger than the padded input {x.shape} (padding {p})"
        )
    return (n, o, ho, wo), "f32"


def _infer_conv_grad_input(ins, attrs):
    # also the shape rule of conv_transpose2d, whose input is g
    g, w = ins
    _check_nchw(g)
    _check_nchw(w, "weight")
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
    at, d = n.attrs, _dil(n.attrs)
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
    emit=_conv_wgsl,
    infer=_infer_conv,
    grad=_g_conv,
    ref=_ref_conv,
    torch=lambda tc, a, n: tc.F.conv2d(
        a[0], a[1], None, n.attrs["stride"], n.attrs["padding"], _dil(n.attrs), n.attrs["groups"]
    ),
)
register(
    "conv2d_grad_input",
    family="conv",
    role="index",
    emit=_conv_grad_input_wgsl,
    infer=_infer_conv_grad_input,
    grad=_g_conv_grad_input,
    ref=_ref_conv_grad_input,
    torch=_torch_conv_transpose,
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
    _check_nchw(w, "weight")
    s, d = _pair(stride, "stride", 1), _pair(dilation, "dilation", 1)
    if padding == "same":
        x, p = _same_padding(x, w.shape[2:], s, d)
    elif padding == "valid":
        p = (0, 0)
    elif isinstance(padding, str):
        raise OpError(f'padding must be an int, a pair, "same" or "valid", got {padding!r}')
    else:
        p = _pair(padding, "padding", 0)
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
    _check_nchw(x)
    _check_nchw(w, "weight")
    s, p, d = _pair(stride, "stride", 1), _pair(padding, "padding", 0), _pair(dilation, "dilation", 1)
    op_ = _pair(output_padding, "output_padding", 0)
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


# ---------------------------------------------------------------- pooling


def _pool_attrs(kernel_size, stride, padding, ceil_mode, **extra):
    k = _pair(kernel_size, "kernel_size", 1)
    s = k if stride is None else _pair(stride, "stride", 1)
    p = _pair(padding, "padding", 0)
    if p[0] * 2 > k[0] or p[1] * 2 > k[1]:
        raise OpError(f"padding {p} must be at most half the kernel size {k}")
    return {"kernel": k, "stride": s, "padding": p, "ceil_mode": bool(ceil_mode), **extra}


def _pool_out_hw(hw, attrs) -> tuple[int, int]:
    k, s, p, ceil = attrs["kernel"], attrs["stride"], attrs["padding"], attrs.get("ceil_mode", False)
    return tuple(_out_size(hw[a], k[a], s[a], p[a], 1, ceil) for a in (0, 1))


def _infer_pool(ins, attrs):
    x = ins[0]
    _check_nchw(x)
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
            out += _window(xp, i, j, s, t.shape[2:])
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
            _window(gxp, i, j, s, g.shape[2:])[...] += gd
    return gxp[:, :, p[0] : p[0] + h, p[1] : p[1] + w]


def _pattrs(t):
    keys = ("kernel", "stride", "padding", "ceil_mode", "count_include_pad")
    return {k: t.attrs[k] for k in keys if k in t.attrs}


register(
    "max_pool2d",
    family="conv",
    role="index",
    emit=_max_pool_wgsl,
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
    emit=_avg_pool_grad_wgsl,
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
    _check_nchw(x)
    fh, fw = _pair(scale_factor, "scale_factor", 1)
    n, c, h, w = x.shape
    y = broadcast_to(reshape(x, (n, c, h, 1, w, 1)), (n, c, h, fh, w, fw))
    return reshape(y, (n, c, h * fh, w * fw))
