"""Reductions (sum, max, min, argmax, argmin over any axes) and row kernels
(softmax, log_softmax, causal_softmax).

One workgroup reduces one output element ("row") with a strided loop per
invocation and a shared-memory tree, so any row length works; rows shorter than
a few dozen elements use one invocation per row instead. The input may be a
fused elementwise prologue computed on the fly, and the result may feed a fused
elementwise epilogue (mean's scaling, a layer norm's statistics) before it is
stored.
"""

from __future__ import annotations

from .common import KernelCtx, add_idx, ceil_div, f32_lit, grid, linear_group, linear_index, mul_idx, strides
from .elementwise import GroupEmitter

SERIAL_MAX = 32  # rows this short are reduced by one invocation each


def _merge(dims):
    """Merge adjacent (size, stride, cls) dims of one class: [(size, stride, cls)]."""
    out = []
    for n, s, c in dims:
        if n == 1:
            continue
        if out and out[-1][2] == c and out[-1][1] == n * s:
            pn, _, _ = out[-1]
            out[-1] = (pn * n, s, c)
        else:
            out.append((n, s, c))
    return out


def _index(dims, var):
    """Flat input offset of index var enumerating dims [(size, stride)] row-major."""
    terms, div = [], 1
    for j in range(len(dims) - 1, -1, -1):
        n, s = dims[j]
        e = var if div == 1 else f"({var} / {div}u)"
        if j > 0:
            e = f"({e} % {n}u)"
        terms.append(mul_idx(e, s))
        div *= n
    return add_idx(*terms)


def row_split(shape, axes):
    """(kept dims, reduced dims) as [(size, stride)] lists, merged where contiguous."""
    st = strides(tuple(shape))
    dims = _merge([(n, s, i in axes) for i, (n, s) in enumerate(zip(shape, st))])
    kept = [(n, s) for n, s, c in dims if not c]
    red = [(n, s) for n, s, c in dims if c]
    return kept, red


_INIT = {
    ("sum", "f32"): "0.0", ("sum", "i32"): "0i",
    ("max", "f32"): "bitcast<f32>(0xff800000u)", ("max", "i32"): "bitcast<i32>(0x80000000u)",
    ("min", "f32"): "bitcast<f32>(0x7f800000u)", ("min", "i32"): "2147483647i",
}


def _comb(kind, a, b):
    if kind == "sum":
        return f"{a} + {b}"
    return f"{kind}({a}, {b})"


def emit_reduce(kc: KernelCtx, node, input_at, epilogue=None):
    """Kernel body and dispatch for a sum/max/min/argmax/argmin node.

    input_at(idx) -> (lines, expr): the input's value at flat index idx.
    epilogue: (shape, members, stored) of a fused group reading node's value."""
    x = node.inputs[0]
    kind = node.kind
    arg = kind in ("argmax", "argmin")
    axes = (node.attrs["axis"],) if arg else tuple(node.attrs["axes"])
    kept, red = row_split(x.shape, axes)
    rows = 1
    for n, _ in kept:
        rows *= n
    length = 1
    for n, _ in red:
        length *= n
    t = "f32" if x.dtype == "f32" else "i32"
    better = ">" if kind == "argmax" else "<"
    init = _INIT[("max" if kind == "argmax" else "min" if kind == "argmin" else kind, t)]

    def finish(o, result):
        if epilogue is None:
            return [kc.store(node, o, result)]
        shape, members, stored = epilogue
        g = GroupEmitter(kc, shape, members, provided={node.id: result})
        lines = g.emit(o)
        for m in members:
            if m.id in stored:
                lines.append(kc.store(m, o, g.local[m.id]))
        if node.id in stored:
            lines.append(kc.store(node, o, result))
        return lines

    body = []
    if length <= SERIAL_MAX or (rows >= 2048 and length <= 512):
        wg = 64
        disp = grid(ceil_div(rows, wg))
        body += [f"let o = {linear_index(disp[0], wg)};", f"if (o >= {rows}u) {{ return; }}",
                 f"let base = {_index(kept, 'o')};"]
        body.append(f"var acc: {t} = {init};")
        if arg:
            body.append("var best = 0u;")
        body.append(f"for (var r = 0u; r < {length}u; r = r + 1u) {{")
        lines, e = input_at(add_idx("base", _index(red, "r")))
        body += ["  " + ln for ln in lines]
        if arg:
            body.append(f"  let xv = {e};")
            body.append(f"  if (xv {better} acc || r == 0u) {{ acc = xv; best = r; }}")
        else:
            body.append(f"  acc = {_comb(kind, 'acc', e)};")
        body.append("}")
        body += finish("o", "i32(best)" if arg else "acc")
        return body, disp, wg

    wg = 256 if length >= 2048 else 64
    disp = grid(rows)
    kc.decls.append(f"var<workgroup> sh: array<{t}, {wg}>;")
    if arg:
        kc.decls.append(f"var<workgroup> shi: array<u32, {wg}>;")
    body += [f"let o = {linear_group(disp[0])};",
             f"if (o >= {rows}u) {{ return; }}",  # the grid may overshoot; uniform per workgroup
             f"let base = {_index(kept, 'o')};",
             f"var acc: {t} = {init};"]
    if arg:
        body.append("var best = 0xffffffffu;")
    body.append(f"for (var r = li; r < {length}u; r = r + {wg}u) {{")
    lines, e = input_at(add_idx("base", _index(red, "r")))
    body += ["  " + ln for ln in lines]
    if arg:
        body.append(f"  let xv = {e};")
        body.append(f"  if (xv {better} acc || best == 0xffffffffu) {{ acc = xv; best = r; }}")
    else:
        body.append(f"  acc = {_comb(kind, 'acc', e)};")
    body.append("}")
    body.append("sh[li] = acc;")
    if arg:
        body.append("shi[li] = best;")
    body.append("workgroupBarrier();")
    s = wg // 2
    while s >= 1:
        if arg:
            body.append(f"if (li < {s}u) {{ let ov = sh[li + {s}u]; let oi = shi[li + {s}u]; "
                        f"if (oi != 0xffffffffu && (shi[li] == 0xffffffffu || ov {better} sh[li] "
                        f"|| (ov == sh[li] && oi < shi[li]))) {{ sh[li] = ov; shi[li] = oi; }} }}")
        else:
            body.append(f"if (li < {s}u) {{ sh[li] = {_comb(kind, 'sh[li]', f'sh[li + {s}u]')}; }}")
        body.append("workgroupBarrier();")
        s //= 2
    body.append("if (li == 0u) {")
    body += ["  " + ln for ln in finish("o", "i32(shi[0])" if arg else "sh[0]")]
    body.append("}")
    return body, disp, wg


def emit_softmax(kc: KernelCtx, node):
    """softmax / log_softmax over one axis, causal_softmax over the last: one workgroup
    per row (max, then sum of exponentials, then the write)."""
    x = node.inputs[0]
    shape = x.shape
    axis = len(shape) - 1 if node.kind == "causal_softmax" else node.attrs["axis"]
    kept, red = row_split(shape, (axis,))
    rows = 1
    for n, _ in kept:
        rows *= n
    length = shape[axis]
    step = strides(shape)[axis]
    causal = node.kind == "causal_softmax"
    wg = 256 if length >= 2048 else 64 if length > 32 else 32
    disp = grid(rows)
    kc.decls.append(f"var<workgroup> sh: array<f32, {wg}>;")
    ninf = "bitcast<f32>(0xff800000u)"
    body = [f"let o = {linear_group(disp[0])};",
            f"if (o >= {rows}u) {{ return; }}",  # the grid may overshoot; uniform per workgroup
            f"let base = {_index(kept, 'o')};"]
    if causal:
        trow = shape[-2]
        body.append(f"let lim = {('(o % ' + str(trow) + 'u)') if trow > 1 else '0u'} + 1u;")
        n_expr = f"min(lim, {length}u)"
    else:
        n_expr = f"{length}u"
    body.append(f"let n = {n_expr};")

    def ld(r):
        return kc.load(x, add_idx("base", mul_idx(r, step)))

    def tree(comb):
        out = ["workgroupBarrier();"]
        s = wg // 2
        while s >= 1:
            out.append(f"if (li < {s}u) {{ sh[li] = {comb('sh[li]', f'sh[li + {s}u]')}; }}")
            out.append("workgroupBarrier();")
            s //= 2
        return out

    body += [f"var m = {ninf};",
             f"for (var r = li; r < n; r = r + {wg}u) {{ m = max(m, {ld('r')}); }}",
             "sh[li] = m;"]
    body += tree(lambda a, b: f"max({a}, {b})")
    body += ["let mx = sh[0];", "workgroupBarrier();", "var s = 0.0;",
             f"for (var r = li; r < n; r = r + {wg}u) {{ s = s + exp({ld('r')} - mx); }}",
             "sh[li] = s;"]
    body += tree(lambda a, b: f"{a} + {b}")
    body.append("let tot = sh[0];")
    if node.kind == "log_softmax":
        body.append("let lt = log(tot);")
        val = f"{ld('r')} - mx - lt"
    else:
        body.append("let inv = 1.0 / tot;")
        val = f"exp({ld('r')} - mx) * inv"
    if causal:
        body.append(f"for (var r = li; r < {length}u; r = r + {wg}u) {{")
        body.append(f"  var y = {f32_lit(0.0)};")
        body.append(f"  if (r < n) {{ y = {val}; }}")
        body.append("  " + kc.store(node, add_idx("base", mul_idx("r", step)), "y"))
        body.append("}")
    else:
        body.append(f"for (var r = li; r < {length}u; r = r + {wg}u) {{")
        body.append("  " + kc.store(node, add_idx("base", mul_idx("r", step)), val))
        body.append("}")
    return body, disp, wg
