"""Reductions (sums, maxima, minima and their indices over any axes), row kernels (the
softmax family, normalize and its gradient) and the embedding gradient (a scatter-add
written as one reduction per output). Each op kind picks its variant with the
parameters of its registered emitter (reduction(), softmax(), normalize()).

Rows up to the target's serial_max long are reduced by one invocation each, in a plain loop;
longer rows get one workgroup each, a strided loop per invocation and a
shared-memory tree, so any row length works. Where the target has subgroups, sums,
maxima and minima fold the workgroup's values with subgroup operations instead
(subgroup_total), a barrier per level rather than per halving. The input may be a
fused elementwise prologue computed on the fly, and the result may feed a fused
elementwise epilogue (mean's scaling, a layer norm's statistics) before it is
stored.
"""

from __future__ import annotations

from ..ir import prod
from .common import (
    add_idx,
    digits,
    f32_lit,
    grid,
    group_size,
    invocations,
    linear_group,
    mul_idx,
    strides,
    udiv,
    umod,
)
from .kernel import KernelCtx

# Serial rows (no workgroup memory or barriers) suit CPU implementations of WebGPU, where
# a barrier costs a context switch per invocation group; subgroup folds against trees:
# measured in benchmarks/RESULTS.md ("Row reductions").


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
    return add_idx(*(mul_idx(e, s) for e, (n, s) in zip(digits(var, [n for n, _ in dims]), dims)))


def row_split(shape, axes):
    """(kept dims, reduced dims) as [(size, stride)] lists, merged where contiguous."""
    st = strides(tuple(shape))
    dims = _merge([(n, s, i in axes) for i, (n, s) in enumerate(zip(shape, st))])
    kept = [(n, s) for n, s, c in dims if not c]
    red = [(n, s) for n, s, c in dims if c]
    return kept, red


_INIT = {
    ("sum", "f32"): "0.0",
    ("sum", "i32"): "0i",
    ("max", "f32"): "bitcast<f32>(0xff800000u)",
    ("max", "i32"): "bitcast<i32>(0x80000000u)",
    ("min", "f32"): "bitcast<f32>(0x7f800000u)",
    ("min", "i32"): "2147483647i",
}


def _comb(fold, a, b):
    if fold == "sum":
        return f"{a} + {b}"
    return f"{fold}({a}, {b})"


def _rows(kc: KernelCtx, rows: int, length: int, serial: bool, t: str):
    """The layout of a row kernel: (body defining the row index o, dispatch, workgroup
    size, first and stride of a row's loop). Serial: one invocation per row. Else one
    workgroup per row, its invocations striding along the row into `sh` (declared here)."""
    if serial:
        wg = group_size(rows)
        body, disp = invocations("o", rows, wg)
        return body, disp, wg, "0u", "1u"
    wg = 256 if length >= 2048 else 64
    disp = grid(rows)
    kc.decls.append(f"var<workgroup> sh: array<{t}, {wg}>;")
    # the grid may overshoot; the return is uniform per workgroup
    body = [f"let o = {linear_group(disp[0])};", f"if (o >= {rows}u) {{ return; }}"]
    return body, disp, wg, "li", f"{wg}u"


def tree(wg: int, step: str) -> list[str]:
    """A workgroup's shared-memory tree: halving strides s, each invocation li < s folds
    element li + s into element li (`step` is that statement, with {s} for s), a
    barrier after each level. Element 0 ends up holding the whole workgroup's value."""
    out = []
    s = wg // 2
    while s >= 1:
        out.append(f"if (li < {s}u) {{ {step.format(s=s)} }}")
        out.append("workgroupBarrier();")
        s //= 2
    return out


_SUBGROUP_OP = {"sum": "subgroupAdd", "max": "subgroupMax", "min": "subgroupMin"}


def subgroup_levels(wg: int, least: int) -> int:
    """Levels of subgroup folds that bring wg values down to one when every subgroup
    has at least `least` invocations."""
    n, levels = wg, 0
    while n > 1:
        n, levels = -(-n // max(2, least)), levels + 1
    return levels


def subgroup_total(kc: KernelCtx, wg: int, fold: str, t: str, var: str, everyone: bool):
    """(lines, expression): the workgroup's fold (sum, max or min) of every invocation's
    `var`, by subgroup operations. Each level folds each subgroup's values at once and
    its first invocation writes the result to workgroup memory, at the subgroup's
    index; the next level folds those. Levels are enough for the adapter's least
    subgroup size (a larger subgroup leaves later levels folding one value). The
    expression holds the total in every invocation if `everyone`, else only in
    invocation 0 (and one barrier fewer is spent).

    Assumes what every implementation does for a one-dimensional workgroup: a
    subgroup holds consecutive invocations, from a multiple of the subgroup size on,
    in order (the native backend probes for it before offering subgroups). The last
    subgroup may be partial. Every subgroup operation is in uniform control flow."""
    kc.enables.add("subgroups")
    op, init = _SUBGROUP_OP[fold], _INIT[(fold, t)]
    levels = subgroup_levels(wg, kc.target.subgroup_sizes[0])
    v = kc.fresh("sg")
    bufs = ["sh", "sh_sg"]  # levels write them in turn: a level never writes what it reads
    decl = f"var<workgroup> sh_sg: array<{t}, {wg}>;"
    if (levels > 2 or (levels == 2 and everyone)) and decl not in kc.decls:
        kc.decls.append(decl)
    out = [f"var {v} = {op}({var});", f"var {v}_n = {wg}u;  // values left to fold"]
    for level in range(1, levels + 1):
        if level > 1:
            src = bufs[level % 2]  # what the level before wrote
            out.append(f"{v} = {op}(select({init}, {src}[li], li < {v}_n));")
        if level == levels and not everyone:
            return out, v  # subgroup 0 holds the total
        dst = bufs[(level - 1) % 2]
        out += [
            f"if (sg_id == 0u && li < {v}_n) {{ {dst}[li / sg_size] = {v}; }}",
            f"{v}_n = ({v}_n + sg_size - 1u) / sg_size;",
            "workgroupBarrier();",
        ]
    final = bufs[(levels - 1) % 2]
    out.append(f"let {v}_t = {final}[0];")
    if final == "sh":  # the next fold writes sh again: everyone must have read it first
        out.append("workgroupBarrier();")
    return out, f"{v}_t"


def reduction(fold: str, better: str | None = None):
    """The emitter of a reduction kind (its registry entry's emit): fold "sum", "max" or
    "min" over attrs["axes"]; with `better` (">" or "<"), the index along attrs["axis"]
    of the first value that compares better than every other (argmax, argmin)."""
    return lambda kc, node: emit_reduce(kc, node, fold, better)


def emit_reduce(kc: KernelCtx, node, fold: str, better: str | None):
    """Kernel body, dispatch and workgroup size of a reduction node (see reduction());
    its input comes through kc.input_at (a fused prologue, if any) and its result goes
    through kc.result (a fused epilogue, if any)."""
    x = node.inputs[0]
    arg = better is not None
    axes = (node.attrs["axis"],) if arg else tuple(node.attrs["axes"])
    kept, red = row_split(x.shape, axes)
    rows, length = prod(n for n, _ in kept), prod(n for n, _ in red)
    t = "f32" if x.dtype == "f32" else "i32"
    init = _INIT[(fold, t)]

    most = kc.target.knob("serial_max")
    serial = length <= most or (rows >= 2048 and length <= 4 * most)
    body, disp, wg, first, stride = _rows(kc, rows, length, serial, t)
    if arg and not serial:
        kc.decls.append(f"var<workgroup> shi: array<u32, {wg}>;")
    body += [f"let base = {_index(kept, 'o')};", f"var acc: {t} = {init};"]
    if arg:
        body.append("var best = 0xffffffffu;")
    body.append(f"for (var r = {first}; r < {length}u; r = r + {stride}) {{")
    lines, e = kc.input_at(node, add_idx("base", _index(red, "r")))
    body += ["  " + ln for ln in lines]
    if arg:
        body.append(f"  let xv = {e};")
        body.append(f"  if (xv {better} acc || best == 0xffffffffu) {{ acc = xv; best = r; }}")
    else:
        body.append(f"  acc = {_comb(fold, 'acc', e)};")
    body.append("}")
    if serial:
        return body + kc.result(node, "o", "i32(best)" if arg else "acc"), disp, wg
    if not arg and kc.target.has("subgroups"):
        lines, total = subgroup_total(kc, wg, fold, t, "acc", everyone=False)
        body += lines + ["if (li == 0u) {"]
        body += ["  " + ln for ln in kc.result(node, "o", total)]
        return body + ["}"], disp, wg
    body.append("sh[li] = acc;")
    if arg:
        body.append("shi[li] = best;")
    body.append("workgroupBarrier();")
    if arg:  # the best value, and on ties the lowest index, wins
        body += tree(
            wg,
            "let ov = sh[li + {s}u]; let oi = shi[li + {s}u]; "
            f"if (oi != 0xffffffffu && (shi[li] == 0xffffffffu || ov {better} sh[li] "
            "|| (ov == sh[li] && oi < shi[li]))) {{ sh[li] = ov; shi[li] = oi; }}",
        )
    else:
        body += tree(wg, "sh[li] = " + _comb(fold, "sh[li]", "sh[li + {s}u]") + ";")
    body.append("if (li == 0u) {")
    body += ["  " + ln for ln in kc.result(node, "o", "i32(shi[0])" if arg else "sh[0]")]
    body.append("}")
    return body, disp, wg


def _row_total(kc: KernelCtx, serial: bool, wg: int, var: str, fold: str) -> list[str]:
    """Lines leaving the whole row's `var` (each invocation's part of a sum or max) in
    `var`_t, in every invocation of a row kernel laid out by _rows: the part itself if
    one invocation holds the row, else subgroup folds or a shared-memory tree (`sh`
    free again after)."""
    if serial:
        return [f"let {var}_t = {var};"]
    if kc.target.has("subgroups"):
        lines, e = subgroup_total(kc, wg, fold, "f32", var, everyone=True)
        return lines + [f"let {var}_t = {e};"]
    out = [f"sh[li] = {var};", "workgroupBarrier();"]
    out += tree(wg, "sh[li] = " + _comb(fold, "sh[li]", "sh[li + {s}u]") + ";")
    return out + [f"let {var}_t = sh[0];", "workgroupBarrier();"]


def softmax(log: bool = False, causal: bool = False):
    """The emitter of a softmax kind (its registry entry's emit): over attrs["axis"], or
    with `causal` over the last axis with row i of each [T, S] block seeing entries j <= i
    only; `log` writes the log of the softmax."""
    return lambda kc, node: emit_softmax(kc, node, log, causal)


def emit_softmax(kc: KernelCtx, node, log: bool, causal: bool):
    """A softmax row kernel (see softmax()): the row's max, then the sum of exponentials,
    then the write; one invocation per row up to the target's serial_max long, else one
    workgroup per row with shared-memory trees."""
    x = node.inputs[0]
    shape = x.shape
    axis = len(shape) - 1 if causal else node.attrs["axis"]
    kept, red = row_split(shape, (axis,))
    rows = prod(n for n, _ in kept)
    length = shape[axis]
    step = strides(shape)[axis]
    serial = length <= kc.target.knob("serial_max")
    body, disp, wg, first, stride = _rows(kc, rows, length, serial, "f32")
    body += [f"let base = {_index(kept, 'o')};"]
    if causal:  # row o of a [.., T, T] block sees o % T + 1 entries
        trow = shape[-2]
        body.append(f"let n = min({('(o % ' + str(trow) + 'u)') if trow > 1 else '0u'} + 1u, {length}u);")
    else:
        body.append(f"let n = {length}u;")

    def ld(r):
        return kc.load(x, add_idx("base", mul_idx(r, step)))

    body += [
        "var m = bitcast<f32>(0xff800000u);",
        f"for (var r = {first}; r < n; r = r + {stride}) {{ m = max(m, {ld('r')}); }}",
    ]
    body += _row_total(kc, serial, wg, "m", "max")
    body += [
        "var s = 0.0;",
        f"for (var r = {first}; r < n; r = r + {stride}) {{ s = s + exp({ld('r')} - m_t); }}",
    ]
    body += _row_total(kc, serial, wg, "s", "sum")
    if log:
        body.append("let lt = log(s_t);")
        val = f"{ld('r')} - m_t - lt"
    else:
        body.append("let inv = 1.0 / s_t;")
        val = f"exp({ld('r')} - m_t) * inv"
    body.append(f"for (var r = {first}; r < {length}u; r = r + {stride}) {{")
    if causal:
        body += [f"  var y = {f32_lit(0.0)};", f"  if (r < n) {{ y = {val}; }}"]
    else:
        body.append(f"  let y = {val};")
    body.append("  " + kc.store(node, add_idx("base", mul_idx("r", step)), "y"))
    body.append("}")
    return body, disp, wg


def normalize(grad: bool = False):
    """The emitter of a normalize kind (its registry entry's emit); `grad`: its gradient,
    of inputs (x, g)."""
    return lambda kc, node: emit_normalize(kc, node, grad)


def emit_normalize(kc: KernelCtx, node, grad: bool):
    """normalize over the last axis: the row's mean, then its variance about the mean,
    then (x - mean) / sqrt(var + eps) written. Its gradient at (x, g): the same
    statistics, then the sums of g and of g * xhat, then dx = (g - mean(g) - xhat *
    mean(g * xhat)) / sqrt(var + eps). One invocation per row up to the target's
    serial_max long, else one workgroup per row (as the softmax kernels)."""
    x = node.inputs[0]
    length = x.shape[-1]
    rows = prod(x.shape[:-1])
    serial = length <= kc.target.knob("serial_max")
    body, disp, wg, first, stride = _rows(kc, rows, length, serial, "f32")
    inv_n, eps = f32_lit(1.0 / length), f32_lit(node.attrs["eps"])
    loop = f"for (var r = {first}; r < {length}u; r = r + {stride}) {{"

    def ld(t):
        return kc.load(t, "(base + r)")

    body += [f"let base = {mul_idx('o', length)};", "var s = 0.0;", f"{loop} s = s + {ld(x)}; }}"]
    body += _row_total(kc, serial, wg, "s", "sum")
    body += [
        f"let mean = s_t * {inv_n};",
        "var q = 0.0;",
        f"{loop} let d = {ld(x)} - mean; q = q + d * d; }}",
    ]
    body += _row_total(kc, serial, wg, "q", "sum")
    body.append(f"let rstd = inverseSqrt(q_t * {inv_n} + {eps});")

    def xhat(i: str) -> str:  # element i of the row normalized
        return f"({kc.load(x, f'(base + {i})')} - mean) * rstd"

    if not grad:
        return body + _normalized_stores(kc, node, loop, first, stride, xhat), disp, wg
    g = node.inputs[1]
    body += [
        "var a = 0.0;",
        "var b = 0.0;",
        f"{loop} let gv = {ld(g)}; a = a + gv; b = b + gv * ({ld(x)} - mean) * rstd; }}",
    ]
    body += _row_total(kc, serial, wg, "a", "sum") + _row_total(kc, serial, wg, "b", "sum")
    body += [f"let ma = a_t * {inv_n};", f"let mb = b_t * {inv_n};"]

    def dx(i: str) -> str:
        return f"rstd * ({kc.load(g, f'(base + {i})')} - ma - ({xhat(i)}) * mb)"

    return body + _normalized_stores(kc, node, loop, first, stride, dx), disp, wg


def _normalized_stores(kc: KernelCtx, node, loop: str, first: str, stride: str, value) -> list[str]:
    """The row's results stored through the epilogue, value(i) the expression of element
    i. Where the epilogue stores f16 values (kc.pairs; the row's length is even, so a row
    starts a word), each invocation takes two neighbours at a time and stores them
    through result_pair."""
    if not kc.pairs:
        return [loop, *_indent(kc.result(node, "(base + r)", value("r"))), "}"]
    length = node.shape[-1]
    pfirst, pstride = ("0u", "2u") if first == "0u" else (f"({first} * 2u)", f"({stride} * 2u)")
    return [
        f"for (var r = {pfirst}; r < {length}u; r = r + {pstride}) {{",
        "  let rb = r + 1u;",
        *_indent(kc.result_pair(node, "(base + r)", value("r"), value("rb"))),
        "}",
    ]


def _indent(lines: list[str]) -> list[str]:
    return ["  " + ln for ln in lines]


def emit_embedding_grad(kc: KernelCtx, node):
    """out[n, d] = sum of g[r, d] over the rows r with idx[r] == n, in a fixed order (no
    atomics). Up to 16 times the target's serial_max rows, one invocation per output element loops over
    them (neighbouring invocations share n, so they test the same idx); beyond, one
    workgroup per output element splits the rows and adds the parts in a tree."""
    gr, idx = node.inputs
    rows = prod(idx.shape)
    num, dim = node.shape
    serial = rows <= 16 * kc.target.knob("serial_max")
    body, disp, wg, first, stride = _rows(kc, num * dim, rows, serial, "f32")
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
    if kc.target.has("subgroups"):
        lines, total = subgroup_total(kc, wg, "sum", "f32", "acc", everyone=False)
        return body + lines + [f"if (li == 0u) {{ {kc.store(node, 'o', total)} }}"], disp, wg
    body += ["sh[li] = acc;", "workgroupBarrier();"] + tree(wg, "sh[li] = sh[li] + sh[li + {s}u];")
    body.append(f"if (li == 0u) {{ {kc.store(node, 'o', 'sh[0]')} }}")
    return body, disp, wg
