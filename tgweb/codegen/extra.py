"""WGSL for convolution and pooling (as index ops: one invocation per output
element, loops over the window, so a bias add and an activation fuse into the
same kernel), the counter-based PRNG (rand, randn; the hash of tgweb.ops.random,
bit for bit), and the global sum of squares over all gradients.
"""

from __future__ import annotations

from ..ops.random import GOLDEN, STREAM_OFFSET, lowbias32
from .common import KernelCtx, f32_lit, grid, group_size, udiv, umod
from .elementwise import GroupEmitter, index_op, store_result

_NINF = "bitcast<f32>(0xff800000u)"


def _conv_dims(m):
    s, p = m.attrs["stride"], m.attrs["padding"]
    return s[0], s[1], p[0], p[1]


def _loop(var, n):
    return f"for (var {var} = 0u; {var} < {n}u; {var} = {var} + 1u) {{"


@index_op("conv2d")
def _conv2d(g: GroupEmitter, m) -> str:
    x, w = m.inputs
    N, C, H, W = x.shape
    O, CG, KH, KW = w.shape
    OG = O // m.attrs["groups"]
    s0, s1, p0, p1 = _conv_dims(m)
    n, o, y, xx = (g.coord(d) for d in range(4))
    acc, c, i, j = g.kc.fresh(), g.kc.fresh("q"), g.kc.fresh("q"), g.kc.fresh("q")
    iy, ix = g.kc.fresh("q"), g.kc.fresh("q")
    L = g.lines
    L.append(f"var {acc} = 0.0;")
    L.append(_loop(c, CG))
    L.append(f"  let ch = ({o} / {OG}u) * {CG}u + {c};")
    L.append("  " + _loop(i, KH))
    L.append(f"    let {iy} = i32({y} * {s0}u + {i}) - {p0}i;")
    L.append(f"    if ({iy} < 0i || {iy} >= {H}i) {{ continue; }}")
    L.append("    " + _loop(j, KW))
    L.append(f"      let {ix} = i32({xx} * {s1}u + {j}) - {p1}i;")
    xi = f"((({n} * {C}u + ch) * {H}u + u32({iy})) * {W}u + u32({ix}))"
    wi = f"((({o} * {CG}u + {c}) * {KH}u + {i}) * {KW}u + {j})"
    L.append(
        f"      if ({ix} >= 0i && {ix} < {W}i) {{ "
        f"{acc} = fma({g.load_at(x, xi)}, {g.load_at(w, wi)}, {acc}); }}"
    )
    L += ["    }", "  }", "}"]
    return acc


@index_op("conv2d_grad_input")
def _conv2d_gi(g: GroupEmitter, m) -> str:
    gr, w = m.inputs
    N, C, H, W = m.shape
    O, CG, KH, KW = w.shape
    _, _, HO, WO = gr.shape
    OG = O // m.attrs["groups"]
    s0, s1, p0, p1 = _conv_dims(m)
    n, c, h, x = (g.coord(d) for d in range(4))
    acc, oo, i, j = g.kc.fresh(), g.kc.fresh("q"), g.kc.fresh("q"), g.kc.fresh("q")
    L = g.lines
    L.append(f"var {acc} = 0.0;")
    L.append(_loop(oo, OG))
    L.append(f"  let o = ({c} / {CG}u) * {OG}u + {oo};")
    L.append("  " + _loop(i, KH))
    L.append(f"    let ty = i32({h}) + {p0}i - i32({i});")
    L.append(f"    if (ty < 0i || ty % {s0}i != 0i || ty / {s0}i >= {HO}i) {{ continue; }}")
    L.append("    " + _loop(j, KW))
    L.append(f"      let tx = i32({x}) + {p1}i - i32({j});")
    gi = f"(((({n} * {O}u + o) * {HO}u + u32(ty / {s0}i)) * {WO}u) + u32(tx / {s1}i))"
    wi = f"(((o * {CG}u + ({c} % {CG}u)) * {KH}u + {i}) * {KW}u + {j})"
    L.append(
        f"      if (tx >= 0i && tx % {s1}i == 0i && tx / {s1}i < {WO}i) {{ "
        f"{acc} = fma({g.load_at(gr, gi)}, {g.load_at(w, wi)}, {acc}); }}"
    )
    L += ["    }", "  }", "}"]
    return acc


@index_op("conv2d_grad_weight")
def _conv2d_gw(g: GroupEmitter, m) -> str:
    x, gr = m.inputs
    N, C, H, W = x.shape
    O, CG, KH, KW = m.shape
    _, _, HO, WO = gr.shape
    OG = O // m.attrs["groups"]
    s0, s1, p0, p1 = _conv_dims(m)
    o, c, i, j = (g.coord(d) for d in range(4))
    acc, n, oy, ox = g.kc.fresh(), g.kc.fresh("q"), g.kc.fresh("q"), g.kc.fresh("q")
    L = g.lines
    L.append(f"var {acc} = 0.0;")
    L.append(f"let ch{acc} = ({o} / {OG}u) * {CG}u + {c};")
    L.append(_loop(n, N))
    L.append("  " + _loop(oy, HO))
    L.append(f"    let iy = i32({oy} * {s0}u + {i}) - {p0}i;")
    L.append(f"    if (iy < 0i || iy >= {H}i) {{ continue; }}")
    L.append("    " + _loop(ox, WO))
    L.append(f"      let ix = i32({ox} * {s1}u + {j}) - {p1}i;")
    xi = f"((({n} * {C}u + ch{acc}) * {H}u + u32(iy)) * {W}u + u32(ix))"
    gi = f"((({n} * {O}u + {o}) * {HO}u + {oy}) * {WO}u + {ox})"
    L.append(
        f"      if (ix >= 0i && ix < {W}i) {{ {acc} = fma({g.load_at(x, xi)}, {g.load_at(gr, gi)}, {acc}); }}"
    )
    L += ["    }", "  }", "}"]
    return acc


def _pool(m):
    k, s, p = m.attrs["kernel"], m.attrs["stride"], m.attrs["padding"]
    return k[0], k[1], s[0], s[1], p[0], p[1]


def _winner(g: GroupEmitter, x, plane: str, oy: str, ox: str, m, prefix: str):
    """Lines finding the first maximum of window (oy, ox) of x's plane; returns the
    names (best value, winner flat index in the unpadded plane or -1)."""
    KH, KW, s0, s1, p0, p1 = _pool(m)
    H, W = x.shape[2], x.shape[3]
    best, win = f"{prefix}b", f"{prefix}w"
    L = g.lines
    L.append(f"var {best} = {_NINF};")
    L.append(f"var {win} = -1i;")
    L.append(_loop(f"{prefix}i", KH))
    L.append(f"  let {prefix}y = i32({oy} * {s0}u + {prefix}i) - {p0}i;")
    L.append(f"  if ({prefix}y < 0i || {prefix}y >= {H}i) {{ continue; }}")
    L.append("  " + _loop(f"{prefix}j", KW))
    L.append(f"    let {prefix}x = i32({ox} * {s1}u + {prefix}j) - {p1}i;")
    L.append(f"    if ({prefix}x < 0i || {prefix}x >= {W}i) {{ continue; }}")
    L.append(f"    let {prefix}f = u32({prefix}y) * {W}u + u32({prefix}x);")
    L.append(f"    let {prefix}v = {g.load_at(x, f'{plane} + {prefix}f')};")
    L.append(f"    if ({prefix}v > {best}) {{ {best} = {prefix}v; {win} = i32({prefix}f); }}")
    L += ["  }", "}"]
    return best, win


@index_op("max_pool2d")
def _max_pool(g: GroupEmitter, m) -> str:
    x = m.inputs[0]
    H, W = x.shape[2], x.shape[3]
    n, c, oy, ox = (g.coord(d) for d in range(4))
    plane = g.let(f"({n} * {x.shape[1]}u + {c}) * {H * W}u")
    best, _ = _winner(g, x, plane, oy, ox, m, g.kc.fresh("p"))
    return best


@index_op("max_pool2d_select")
def _max_pool_select(g: GroupEmitter, m) -> str:
    x, h = m.inputs
    H, W = x.shape[2], x.shape[3]
    n, c, oy, ox = (g.coord(d) for d in range(4))
    plane = g.let(f"({n} * {x.shape[1]}u + {c}) * {H * W}u")
    _, win = _winner(g, x, plane, oy, ox, m, g.kc.fresh("p"))
    v = g.kc.fresh()
    g.lines.append(f"var {v} = 0.0;")
    g.lines.append(f"if ({win} >= 0i) {{ {v} = {g.load_at(h, f'{plane} + u32({win})')}; }}")
    return v


@index_op("max_pool2d_grad")
def _max_pool_grad(g: GroupEmitter, m) -> str:
    x, gr = m.inputs
    KH, KW, s0, s1, p0, p1 = _pool(m)
    H, W = x.shape[2], x.shape[3]
    HO, WO = gr.shape[2], gr.shape[3]
    n, c, h, w = (g.coord(d) for d in range(4))
    plane = g.let(f"({n} * {x.shape[1]}u + {c}) * {H * W}u")
    me = g.let(f"i32({h} * {W}u + {w})")
    acc, i, j = g.kc.fresh(), g.kc.fresh("q"), g.kc.fresh("q")
    L = g.lines
    L.append(f"var {acc} = 0.0;")
    L.append(_loop(i, KH))
    L.append(f"  let ty = i32({h}) + {p0}i - i32({i});")
    L.append(f"  if (ty < 0i || ty % {s0}i != 0i || ty / {s0}i >= {HO}i) {{ continue; }}")
    L.append("  " + _loop(j, KW))
    L.append(f"    let tx = i32({w}) + {p1}i - i32({j});")
    L.append(f"    if (tx < 0i || tx % {s1}i != 0i || tx / {s1}i >= {WO}i) {{ continue; }}")
    L.append(f"    let oy = u32(ty / {s0}i);")
    L.append(f"    let ox = u32(tx / {s1}i);")
    inner = GroupEmitter(g.kc, g.shape, [])
    inner.ivar = g.ivar
    best, win = _winner(inner, x, plane, "oy", "ox", m, g.kc.fresh("p"))
    L += ["    " + ln for ln in inner.lines]
    gplane = f"({n} * {x.shape[1]}u + {c}) * {HO * WO}u"
    L.append(f"    if ({win} == {me}) {{ {acc} = {acc} + {g.load_at(gr, f'{gplane} + oy * {WO}u + ox')}; }}")
    L += ["  }", "}"]
    return acc


@index_op("avg_pool2d")
def _avg_pool(g: GroupEmitter, m) -> str:
    x = m.inputs[0]
    KH, KW, s0, s1, p0, p1 = _pool(m)
    H, W = x.shape[2], x.shape[3]
    n, c, oy, ox = (g.coord(d) for d in range(4))
    plane = g.let(f"({n} * {x.shape[1]}u + {c}) * {H * W}u")
    acc, i, j = g.kc.fresh(), g.kc.fresh("q"), g.kc.fresh("q")
    L = g.lines
    L.append(f"var {acc} = 0.0;")
    L.append(_loop(i, KH))
    L.append(f"  let yy = i32({oy} * {s0}u + {i}) - {p0}i;")
    L.append(f"  if (yy < 0i || yy >= {H}i) {{ continue; }}")
    L.append("  " + _loop(j, KW))
    L.append(f"    let xx = i32({ox} * {s1}u + {j}) - {p1}i;")
    L.append(
        f"    if (xx >= 0i && xx < {W}i) {{ {acc} = {acc} + "
        f"{g.load_at(x, f'{plane} + u32(yy) * {W}u + u32(xx)')}; }}"
    )
    L += ["  }", "}"]
    return g.let(f"{acc} * {f32_lit(1.0 / (KH * KW))}")


@index_op("avg_pool2d_grad")
def _avg_pool_grad(g: GroupEmitter, m) -> str:
    gr = m.inputs[0]
    KH, KW, s0, s1, p0, p1 = _pool(m)
    HO, WO = gr.shape[2], gr.shape[3]
    n, c, h, w = (g.coord(d) for d in range(4))
    acc, i, j = g.kc.fresh(), g.kc.fresh("q"), g.kc.fresh("q")
    gplane = g.let(f"({n} * {gr.shape[1]}u + {c}) * {HO * WO}u")
    L = g.lines
    L.append(f"var {acc} = 0.0;")
    L.append(_loop(i, KH))
    L.append(f"  let ty = i32({h}) + {p0}i - i32({i});")
    L.append(f"  if (ty < 0i || ty % {s0}i != 0i || ty / {s0}i >= {HO}i) {{ continue; }}")
    L.append("  " + _loop(j, KW))
    L.append(f"    let tx = i32({w}) + {p1}i - i32({j});")
    L.append(
        f"    if (tx >= 0i && tx % {s1}i == 0i && tx / {s1}i < {WO}i) {{ {acc} = {acc} + "
        f"{g.load_at(gr, f'{gplane} + u32(ty / {s0}i) * {WO}u + u32(tx / {s1}i)')}; }}"
    )
    L += ["  }", "}"]
    return g.let(f"{acc} * {f32_lit(1.0 / (KH * KW))}")


# ---------------------------------------------------------------- PRNG

_HASH = """fn tg_hash(x0: u32) -> u32 {
  var x = x0;
  x = x ^ (x >> 16u);
  x = x * 0x7feb352du;
  x = x ^ (x >> 15u);
  x = x * 0x846ca68bu;
  x = x ^ (x >> 16u);
  return x;
}"""

_UNIFORM = """fn tg_uniform(k: u32, c: u32) -> f32 {
  return f32(tg_hash(tg_hash(c ^ k) + k) >> 8u) * 5.9604644775390625e-8;
}"""


def _key(g: GroupEmitter, m) -> str:
    g.kc.helper("tg_hash", _HASH)
    g.kc.helper("tg_uniform", _UNIFORM)
    sk = lowbias32((m.attrs["stream"] * GOLDEN + STREAM_OFFSET) & 0xFFFFFFFF)
    seed = g.load_at(m.inputs[0], "0u")
    return g.let(f"tg_hash(bitcast<u32>({seed}) ^ {sk}u)", "k")


@index_op("rand")
def _rand(g: GroupEmitter, m) -> str:
    k = _key(g, m)
    return g.let(f"tg_uniform({k}, {g.ivar})")


@index_op("randn")
def _randn(g: GroupEmitter, m) -> str:
    k = _key(g, m)
    u1 = g.let(f"tg_uniform({k}, 2u * {g.ivar})")
    u2 = g.let(f"tg_uniform({k}, 2u * {g.ivar} + 1u)")
    return g.let(f"sqrt(-2.0 * log(1.0 - {u1})) * cos({f32_lit(6.283185307179586)} * {u2})")


# ---------------------------------------------------------------- global sum of squares


def emit_global_sumsq(kc: KernelCtx, node, input_at=None, epilogue=None):
    """Sum of squares of every element of every input, in one workgroup. Inputs packed
    in one arena buffer (the planner's grad arena) are merged into contiguous ranges
    (alignment padding is zero), so the loop count does not grow with the parameter count."""
    wg = 64
    ranges: dict[int, list[list[int]]] = {}
    const = 0.0
    from .common import _alias_root

    for x in node.inputs:
        r = _alias_root(x)
        n = 1
        for d in x.shape:
            n *= d
        if r.kind == "full":
            const += float(r.attrs["value"]) ** 2 * n
            continue
        buf, off = kc.storage(x)
        ranges.setdefault(buf, []).append([off, off + n])
    body = ["var s0 = 0.0;", "var s1 = 0.0;", "var s2 = 0.0;", "var s3 = 0.0;"]
    for buf, rs in ranges.items():
        rs.sort()
        merged = []
        for a, b in rs:
            if merged and merged[-1][1] <= a <= merged[-1][1] + 3:  # padding is zero
                merged[-1][1] = max(merged[-1][1], b)
            else:
                merged.append([a, b])
        name = kc.bind(buf, False)
        for a, b in merged:  # four independent sums in flight per invocation
            body.append(f"for (var r = {a}u + li; r < {b}u; r = r + {4 * wg}u) {{")
            for j in range(4):
                rj = f"r + {j * wg}u" if j else "r"
                body.append(
                    f"  if ({rj} < {b}u) {{ let v = bitcast<f32>({name}[{rj}]); s{j} = fma(v, v, s{j}); }}"
                )
            body.append("}")
    kc.decls.append(f"var<workgroup> sh: array<f32, {wg}>;")
    body.append("sh[li] = (s0 + s1) + (s2 + s3);")
    body.append("workgroupBarrier();")
    s = wg // 2
    while s >= 1:
        body.append(f"if (li < {s}u) {{ sh[li] = sh[li] + sh[li + {s}u]; }}")
        body.append("workgroupBarrier();")
        s //= 2
    body.append("if (li == 0u) {")
    res = "sh[0]" if not const else f"(sh[0] + {f32_lit(const)})"
    body += ["  " + ln for ln in store_result(kc, node, "0u", res, epilogue)]
    body.append("}")
    return body, (1, 1, 1), wg


def emit_embedding_grad(kc: KernelCtx, node):
    """out[n, d] = sum of g[r, d] over the rows r with idx[r] == n, in a fixed order (no
    atomics). Up to SERIAL_MAX * 16 rows, one invocation per output element loops over
    them (neighbouring invocations share n, so they test the same idx); beyond, one
    workgroup per output element splits the rows and adds the parts in a tree."""
    from .common import add_idx, invocations, linear_group, mul_idx
    from .reduce import SERIAL_MAX

    gr, idx = node.inputs
    rows = 1
    for d in idx.shape:
        rows *= d
    num, dim = node.shape
    serial = rows <= 16 * SERIAL_MAX
    if serial:
        wg = group_size(num * dim)
        body, disp = invocations("o", num * dim, wg)
        first, stride = "0u", "1u"
    else:
        wg = 256 if rows >= 4096 else 64
        disp = grid(num * dim)
        kc.decls.append(f"var<workgroup> sh: array<f32, {wg}>;")
        # the grid may overshoot; the return is uniform per workgroup
        body = [f"let o = {linear_group(disp[0])};", f"if (o >= {num * dim}u) {{ return; }}"]
        first, stride = "li", f"{wg}u"
    body += [
        f"let n = i32({udiv('o', dim)});",
        f"let d = {umod('o', dim)};",
        "var acc = 0.0;",
        f"for (var r = {first}; r < {rows}u; r = r + {stride}) {{",
        f"  if ({kc.load(idx, 'r')} == n) {{ acc = acc + {kc.load(gr, add_idx(mul_idx('r', dim), 'd'))}; }}",
        "}",
    ]
    if serial:
        body.append(kc.store(node, "o", "acc"))
        return body, disp, wg
    body += ["sh[li] = acc;", "workgroupBarrier();"]
    s = wg // 2
    while s >= 1:
        body.append(f"if (li < {s}u) {{ sh[li] = sh[li] + sh[li + {s}u]; }}")
        body.append("workgroupBarrier();")
        s //= 2
    body.append(f"if (li == 0u) {{ {kc.store(node, 'o', 'sh[0]')} }}")
    return body, disp, wg


def table() -> dict:
    return {"global_sumsq": ("kernel", emit_global_sumsq), "embedding_grad": ("kernel", emit_embedding_grad)}
