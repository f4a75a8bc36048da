"""Matmul: three kernels by problem size.

Most products (every one in the samples) run _emit_direct: register blocks of
8 x 8 outputs per invocation read straight from the operands, with no workgroup
memory and no barriers. On CPU implementations of WebGPU (SwiftShader in Chrome,
lavapipe) a barrier is a context switch per invocation group; measured in this
machine's Chromium (benchmarks/matmul_browser.py), the direct kernel runs the
samples' shapes 5-10x faster than shared-memory tiles, and split-K (one
workgroup per output with a tree) was 100-300x slower. Products with a million
outputs or more run tiles in workgroup memory, which big GPUs need:
a workgroup of 16 x 16 invocations computes a BM x BN tile of C, each invocation
TM x TN outputs (rows ty + 16 i, columns tx + 16 j, so stores are coalesced).
Every operand is read through strides: a stored transpose (ta/tb), and any chain
of permutes in front of an operand (attention's head split, lower() folds them
into the node's attrs["views"]), so no transpose is ever copied; the result
may be written through strides too (attrs["out_view"]: a permute after the product).
The tile loader walks whichever axis is contiguous in memory. Leading batch dims
are flattened into rows when B has no batch and the layout allows, so small
per-sample row counts still fill tiles; otherwise batches map to dispatch z with
stride 0 for broadcast batch dims. Edges are bounds-checked, so any size works.
Operands contiguous along an axis whose length and strides are multiples of 4
are loaded as vec4."""

from __future__ import annotations

from ..ir import prod
from .common import add_idx, ceil_div, digits, group_size, invocations, mul_idx, strides, udiv, umod
from .kernel import KernelCtx


def config(m: int, n: int, k: int, batch: int, tuning: dict) -> tuple[int, int, int, int, int]:
    """(BM, BN, BK, TM, TN) for the problem size: 128 x 128 tiles with 8 x 8 outputs per
    invocation when that still leaves enough workgroups to fill a big GPU (the target's
    big_tile_min_tiles), with its tile_k steps of k per barrier; else 64 x 64 tiles."""
    if -(-m // 128) * -(-n // 128) * batch >= tuning["big_tile_min_tiles"]:
        return 128, 128, tuning["tile_k"], 8, 8
    return 64, 64, 16, 4, 4


def operand_layout(x, view, trans):
    """(batch shape, batch strides, rows, cols, row stride, col stride) of a logical operand."""
    shape, st = (tuple(view[0]), tuple(view[1])) if view else (tuple(x.shape), tuple(strides(x.shape)))
    r, c, rs, cs = shape[-2], shape[-1], st[-2], st[-1]
    if trans:
        r, c, rs, cs = c, r, cs, rs
    return shape[:-2], st[:-2], r, c, rs, cs


def _out_batch_strides(bshape, bstr, out_batch):
    """Per output-batch-dim strides of an operand (0 where it broadcasts or is missing)."""
    lead = len(out_batch) - len(bshape)
    out = []
    for d in range(len(out_batch)):
        j = d - lead
        out.append(0 if j < 0 or bshape[j] == 1 else bstr[j])
    return out


def layout(node):
    """Everything the kernels need: sizes, batch, strides of A, B and C."""
    a, b = node.inputs
    at = node.attrs
    views = at.get("views", {})
    ba, sba, M, K, am, ak = operand_layout(a, views.get(0), at["ta"])
    bb, sbb, K2, N, bk, bn = operand_layout(b, views.get(1), at["tb"])
    assert K == K2, (K, K2)
    cshape, cst = at.get("out_view") or (tuple(node.shape), strides(node.shape))
    batch = list(cshape[:-2])
    cm, cn, cb = cst[-2], cst[-1], list(cst[:-2])
    ab = _out_batch_strides(ba, sba, batch)
    bbs = _out_batch_strides(bb, sbb, batch)
    # batch dims that B does not have fold into A's rows when A and C run contiguously
    while batch and bbs[-1] == 0 and (batch[-1] == 1 or ab[-1] == M * am and cb[-1] == M * cm):
        M *= batch[-1]
        batch.pop()
        ab.pop()
        bbs.pop()
        cb.pop()
    return dict(
        M=M,
        N=N,
        K=K,
        am=am,
        ak=ak,
        bk=bk,
        bn=bn,
        cm=cm,
        cn=cn,
        batch=batch,
        ab=ab,
        bb=bbs,
        cb=cb,
        nbatch=prod(batch),
    )


def _bases(L, body):
    if L["nbatch"] > 1:
        body.append(f"let abase = {_batch_index(L['ab'], L['batch'])};")
        body.append(f"let bbase = {_batch_index(L['bb'], L['batch'])};")
        body.append(f"let cbase = {_batch_index(L['cb'], L['batch'])};")
    else:
        body += ["let abase = 0u;", "let bbase = 0u;", "let cbase = 0u;"]


def emit_matmul(kc: KernelCtx, node):
    L = layout(node)
    M, N, K, nbatch = L["M"], L["N"], L["K"], L["nbatch"]
    # tiles only for products that fill enough of them: on a GPU a product of a few tiles
    # runs on a few multiprocessors, where small register blocks spread over more
    tiles = ceil_div(M, 64) * ceil_div(N, 64) * nbatch
    if (
        M <= 16
        or N <= 16
        or K <= 4
        or M * N * nbatch < kc.target.knob("tiled_min_outputs")
        or tiles < kc.target.knob("tiled_min_tiles")
    ):
        return _emit_direct(kc, node, L)
    return _emit_tiled(kc, node, L)


def _vec_ok(kc: KernelCtx, x, rows: int, K: int, rs: int, ks: int, bstr) -> bool:
    """Whether an operand's tile loads can be vec4: contiguous along rows (rs == 1) or along
    k (ks == 1), everything else in steps of 4."""
    if rs == 1:
        ok = rows % 4 == 0 and ks % 4 == 0
    elif ks == 1:
        ok = K % 4 == 0 and rs % 4 == 0
    else:
        return False
    return ok and kc.vec4_ok(x) and all(s % 4 == 0 for s in bstr)


def _emit_tiled(kc: KernelCtx, node, L):
    """Workgroup-memory tiles: shared tiles hold vec4s along m (As) and n (Bs); invocation
    (tx, ty) owns rows 64 p + 4 ty + r and columns 64 q + 4 tx + c: per k, TM/4 + TN/4
    vec4 reads feed TM x TN fused multiply-adds."""
    M, N, K, nbatch = L["M"], L["N"], L["K"], L["nbatch"]
    a, b = node.inputs
    BM, BN, BK, TM, TN = config(M, N, K, nbatch, kc.target.tuning)
    gx, gy = ceil_div(N, BN), ceil_div(M, BM)
    if gy > 65535 or nbatch > 65535:
        raise ValueError(f"matmul of shape {node.shape} needs too many workgroups")
    va = _vec_ok(kc, a, M, K, L["am"], L["ak"], L["ab"])
    vb = _vec_ok(kc, b, N, K, L["bn"], L["bk"], L["bb"])
    for x, v in ((a, va), (b, vb)):
        if v:
            kc.vec4.add(kc.storage(x)[0])
    kc.decls.append(f"var<workgroup> As: array<vec4<f32>, {BM * BK // 4}>;")
    kc.decls.append(f"var<workgroup> Bs: array<vec4<f32>, {BK * BN // 4}>;")
    body = [
        "let tx = lid.x;",
        "let ty = lid.y;",
        f"let m0 = wg.y * {BM}u;",
        f"let n0 = wg.x * {BN}u;",
        "let z = wg.z;",
    ]
    _bases(L, body)
    RG, CG = TM // 4, TN // 4
    body.append(f"var acc: array<vec4<f32>, {TM * CG}>;")  # acc[row i][col group q]
    body.append(f"for (var k0 = 0u; k0 < {K}u; k0 = k0 + {BK}u) {{")
    body += _tile(kc, a, "As", BM, BK, "m0", M, K, "abase", L["am"], L["ak"], va)
    body += _tile(kc, b, "Bs", BN, BK, "n0", N, K, "bbase", L["bn"], L["bk"], vb)
    body.append("  workgroupBarrier();")
    body.append(f"  for (var kk = 0u; kk < {BK}u; kk = kk + 1u) {{")
    body += [f"    let a{p} = As[kk * {BM // 4}u + ty + {16 * p}u];" for p in range(RG)]
    body += [f"    let c{q} = Bs[kk * {BN // 4}u + tx + {16 * q}u];" for q in range(CG)]
    for p in range(RG):
        for r in range(4):
            for q in range(CG):
                i = (p * 4 + r) * CG + q
                body.append(f"    acc[{i}] = fma(vec4<f32>(a{p}[{r}]), c{q}, acc[{i}]);")
    body += ["  }", "  workgroupBarrier();", "}"]
    return body + _tiled_stores(kc, node, L, RG, CG), (gx, gy, nbatch), (16, 16, 1)


def _tiled_stores(kc: KernelCtx, node, L, RG: int, CG: int) -> list[str]:
    """Each invocation's TM x TN results stored (through the epilogue), edges guarded."""
    body = []
    ci = add_idx("cbase", mul_idx("m", L["cm"]), mul_idx("n", L["cn"]))
    for p in range(RG):
        for r in range(4):
            body.append(f"{{ let m = m0 + {64 * p + r}u + ty * 4u;")
            body.append(f"  if (m < {L['M']}u) {{")
            for q in range(CG):
                for c in range(4):
                    i = (p * 4 + r) * CG + q
                    body.append(f"    {{ let n = n0 + {64 * q + c}u + tx * 4u; if (n < {L['N']}u) {{")
                    body.append(f"      let ci = {ci};")
                    body += ["      " + ln for ln in kc.result(node, "ci", f"acc[{i}][{c}]")]
                    body.append("    } }")
            body.append("  }")
            body.append("}")
    return body


def _batch_index(bstr, batch):
    return add_idx(*(mul_idx(e, s) for e, n, s in zip(digits("z", batch), batch, bstr) if s and n > 1))


# _emit_direct: T x T outputs per invocation (the target's "direct_block"), U steps of k
# unrolled per loop trip. Measured in this machine's Chromium (bench --profile --block):
# unrolling k by 2 or 4 runs no faster within the noise, and costs addition 0.7-1 s
# more pipeline set-up. Products with fewer outputs than the target's
# "tiled_min_outputs" run _emit_direct: on CPU implementations of WebGPU only big ones
# fill enough workgroup-memory tiles to pay for their barriers (context switches there).
DIRECT_U = 1


def _emit_direct(kc: KernelCtx, node, L):
    """Register blocking with no workgroup memory and no barriers: each invocation
    computes a TM x TN block of C (T x T, less where C is narrower) straight from A
    and B, U steps of k at a time, with vec4 loads along whichever axis of an operand
    is contiguous. Invocations take the blocks in order (columns, rows, batch), so a
    workgroup may span several products of a batch (attention's small per-head
    products)."""
    a, b = node.inputs
    M, N, K, nbatch = L["M"], L["N"], L["K"], L["nbatch"]
    T, U = kc.target.knob("direct_block"), DIRECT_U
    TM, TN = min(T, M), min(T, N)
    mb, nb = ceil_div(M, TM), ceil_div(N, TN)
    total = nbatch * mb * nb
    wg = group_size(total, 32)
    body, disp = invocations("t", total, wg)
    body += [
        f"let n0 = {umod('t', nb)} * {TN}u;",
        f"let m0 = {umod(udiv('t', nb), mb)} * {TM}u;",
        f"let z = {udiv('t', mb * nb)};",
    ]
    _bases(L, body)
    # clamped row and column indices: loads never leave the operands, stores are guarded
    for r in range(TM):
        m = f"min(m0 + {r}u, {M - 1}u)" if M % TM else f"(m0 + {r}u)"
        body.append(f"let am{r} = {add_idx('abase', mul_idx(m, L['am']))};")
    for c in range(TN):
        n = f"min(n0 + {c}u, {N - 1}u)" if N % TN else f"(n0 + {c}u)"
        body.append(f"let bn{c} = {add_idx('bbase', mul_idx(n, L['bn']))};")
    for r in range(TM):
        for c in range(TN):
            body.append(f"var acc{r}_{c} = 0.0;")

    def chunk(U_, ksym):
        out = _direct_loads(kc, a, TM, "am", L["am"], L["ak"], M, ksym, U_, "a", L["ab"])
        out += _direct_loads(kc, b, TN, "bn", L["bn"], L["bk"], N, ksym, U_, "b", L["bb"])
        for kk in range(U_):
            for r in range(TM):
                for c in range(TN):
                    out.append(f"acc{r}_{c} = fma(a{r}_{kk}, b{c}_{kk}, acc{r}_{c});")
        return ["  " + ln for ln in out]

    K4 = K - K % U
    if K4:
        body.append(f"for (var k = 0u; k < {K4}u; k = k + {U}u) {{")
        body += chunk(U, "k")
        body.append("}")
    for k in range(K4, K):
        body.append("{")
        body += chunk(1, f"{k}u")
        body.append("}")
    return body + _direct_stores(kc, node, L, TM, TN), disp, wg


def _direct_loads(kc: KernelCtx, x, R, lead, rs, ks, nrows, ksym, U_, pre, bstr) -> list[str]:
    """Lines defining pre{i}_{kk} = operand element (row i, k + kk) for i < R, kk < U_."""
    out = []
    aligned = kc.vec4_ok(x) and all(s % 4 == 0 for s in bstr)
    if U_ == 4 and ks == 1 and rs % 4 == 0 and aligned:
        for i in range(R):
            v = kc.fresh("v")
            out.append(f"let {v} = {kc.load4(x, udiv(f'{lead}{i} + {ksym}', 4))};")
            out += [f"let {pre}{i}_{kk} = {v}[{kk}];" for kk in range(4)]
        return out
    if rs == 1 and R % 4 == 0 and nrows % 4 == 0 and ks % 4 == 0 and aligned:
        for kk in range(U_):
            koff = mul_idx(f"({ksym} + {kk}u)", ks)
            for g in range(R // 4):
                v = kc.fresh("v")
                out.append(f"let {v} = {kc.load4(x, udiv(f'{lead}{4 * g} + {koff}', 4))};")
                out += [f"let {pre}{4 * g + i}_{kk} = {v}[{i}];" for i in range(4)]
        return out
    for kk in range(U_):
        for i in range(R):
            idx = add_idx(f"{lead}{i}", mul_idx(f"({ksym} + {kk}u)", ks))
            out.append(f"let {pre}{i}_{kk} = {kc.load(x, idx)};")
    return out


def _direct_stores(kc: KernelCtx, node, L, TM: int, TN: int) -> list[str]:
    """The block's stores (and the fused epilogue) in a loop over the block, not unrolled:
    CPU implementations of WebGPU compile every unrolled copy (set-up time), and this runs
    once per invocation; guarded only where blocks overhang C's edges."""
    M, N = L["M"], L["N"]
    body = [f"var res: array<f32, {TM * TN}>;"]
    body += [f"res[{r * TN + c}] = acc{r}_{c};" for r in range(TM) for c in range(TN)]
    body.append(f"for (var r = 0u; r < {TM}u; r = r + 1u) {{")
    body.append("  let m = m0 + r;" + (f" if (m < {M}u) {{" if M % TM else ""))
    body.append(f"  for (var c = 0u; c < {TN}u; c = c + 1u) {{")
    body.append("    let n = n0 + c;" + (f" if (n < {N}u) {{" if N % TN else ""))
    body.append(f"    let ci = {add_idx('cbase', mul_idx('m', L['cm']), mul_idx('n', L['cn']))};")
    body += ["    " + ln for ln in kc.result(node, "ci", f"res[r * {TN}u + c]")]
    body.append("  }" + (" }" if N % TN else ""))
    body.append("}" + (" }" if M % TM else ""))
    return body


def _tile(
    kc: KernelCtx,
    x,
    sh: str,
    R: int,
    BK: int,
    r0: str,
    rows: int,
    K: int,
    base: str,
    rs: int,
    ks: int,
    vec: bool,
) -> list[str]:
    """Lines loading an R x BK tile of an operand (element (r, k) at base + r rs + k ks)
    into the shared vec4 array sh: element (kk, rr) is sh[kk * R / 4 + rr / 4][rr % 4].
    Consecutive invocations walk the operand's contiguous axis."""
    out = []
    rows_fast = rs == 1 or (ks != 1 and rs < ks)
    R4 = R // 4

    def addr(rr, kk):
        return add_idx(base, mul_idx(f"({r0} + {rr})", rs), mul_idx(f"(k0 + {kk})", ks))

    if not vec:
        for j in range(R * BK // 256):
            e = f"(li + {256 * j}u)"
            if rows_fast:
                rr, kk = umod(e, R), udiv(e, R)
            else:
                rr, kk = udiv(e, BK), umod(e, BK)
            out.append(f"  {{ let rr = {rr}; let kk = {kk}; var v = 0.0;")
            out.append(
                f"    if ({r0} + rr < {rows}u && k0 + kk < {K}u) {{ v = {kc.load(x, addr('rr', 'kk'))}; }}"
            )
            out.append(f"    {sh}[kk * {R4}u + rr / 4u][rr % 4u] = v; }}")
        return out
    for j in range(max(1, R * BK // 1024)):
        e = f"(li + {256 * j}u)"
        if rs == 1:  # four consecutive rows at one k: one shared vec4
            out.append(f"  {{ let rq = {umod(e, R4)}; let kk = {udiv(e, R4)}; var v = vec4<f32>();")
            out.append(
                f"    if ({r0} + rq * 4u < {rows}u && k0 + kk < {K}u) "
                f"{{ v = {kc.load4(x, '(' + addr('rq * 4u', 'kk') + ') / 4u')}; }}"
            )
            out.append(f"    {sh}[kk * {R4}u + rq] = v;")
        else:  # four consecutive k of one row
            out.append(
                f"  {{ let rr = {udiv(e, BK // 4)}; let kk = {umod(e, BK // 4)} * 4u; var v = vec4<f32>();"
            )
            out.append(
                f"    if ({r0} + rr < {rows}u && k0 + kk < {K}u) "
                f"{{ v = {kc.load4(x, '(' + addr('rr', 'kk') + ') / 4u')}; }}"
            )
            for c in range(4):
                out.append(f"    {sh}[(kk + {c}u) * {R4}u + rr / 4u][rr % 4u] = v[{c}];")
        out.append("  }")
    return out
