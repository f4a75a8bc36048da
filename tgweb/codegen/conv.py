"""The kernels of 2-D convolution and pooling on NCHW tensors (the kinds of
tgweb.ops.conv and tgweb.ops.pool, which say what each computes).

Every conv and pool kind is an index op: one invocation per output element loops
over its window, so a bias add and an activation fuse into the same kernel. Two
window walks serve them all: the taps an output position reads (forward), and the
output positions whose windows cover an input element (the transposed walk)."""

from __future__ import annotations

from .common import f32_lit


def dilation(attrs) -> tuple[int, int]:
    """A kind's dilation; (1, 1) for the kinds without one."""
    return attrs.get("dilation", (1, 1))


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


def conv_wgsl(g, m) -> str:
    x, w = m.inputs
    N, C, H, W = x.shape
    O, CG, KH, KW = w.shape
    (s0, s1), (p0, p1), OG = m.attrs["stride"], m.attrs["padding"], O // m.attrs["groups"]
    d0, d1 = dilation(m.attrs)
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


def conv_grad_input_wgsl(g, m) -> str:
    gr, w = m.inputs
    N, C, H, W = m.shape
    O, CG, KH, KW = w.shape
    _, _, HO, WO = gr.shape
    (s0, s1), (p0, p1), OG = m.attrs["stride"], m.attrs["padding"], O // m.attrs["groups"]
    d0, d1 = dilation(m.attrs)
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


def conv_grad_weight_wgsl(g, m) -> str:
    x, gr = m.inputs
    N, C, H, W = x.shape
    O, CG, KH, KW = m.shape
    _, _, HO, WO = gr.shape
    (s0, s1), (p0, p1), OG = m.attrs["stride"], m.attrs["padding"], O // m.attrs["groups"]
    d0, d1 = dilation(m.attrs)
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


def max_pool_wgsl(g, m) -> str:
    x = m.inputs[0]
    oy, ox = g.coord(2), g.coord(3)
    best, _ = _winner(g, x, _plane(g, x), oy, ox, m)
    return best


def max_pool_select_wgsl(g, m) -> str:
    x, h = m.inputs
    oy, ox = g.coord(2), g.coord(3)
    plane = _plane(g, x)
    _, win = _winner(g, x, plane, oy, ox, m)
    v = g.kc.fresh()
    g.lines.append(f"var {v} = 0.0;")
    g.lines.append(f"if ({win} >= 0i) {{ {v} = {g.load_at(h, f'{plane} + u32({win})')}; }}")
    return v


def max_pool_grad_wgsl(g, m) -> str:
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


def avg_pool_wgsl(g, m) -> str:
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


def avg_pool_grad_wgsl(g, m) -> str:
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
