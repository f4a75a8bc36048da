"""Matmul: tiled in workgroup memory with register blocking.

A workgroup of 16 x 16 invocations computes a BM x BN tile of C, each invocation
TM x TN outputs (rows ty + 16 i, columns tx + 16 j, so stores are coalesced).
Operands stored transposed (ta/tb) are read through strides: the tile loader
walks whichever axis is contiguous in memory, so no transpose is ever copied.
Leading batch dims of A are flattened into rows when B has no batch, so small
per-sample row counts still fill tiles; otherwise batches map to dispatch z
with stride 0 for broadcast batch dims. Edges are bounds-checked, so any size
works. With K a multiple of 4 and aligned offsets, operands contiguous along K
are loaded as vec4.
"""

from __future__ import annotations

from .common import KernelCtx, add_idx, ceil_div, strides


def _prod(s):
    n = 1
    for d in s:
        n *= d
    return n


def config(m: int, n: int, k: int) -> tuple[int, int, int, int, int]:
    """(BM, BN, BK, TM, TN) for the problem size."""
    if m >= 512 and n >= 512:
        return 128, 128, 8, 8, 8
    return 64, 64, 16, 4, 4


def emit_matmul(kc: KernelCtx, node, epilogue=None):
    a, b = node.inputs
    ta, tb = node.attrs["ta"], node.attrs["tb"]
    M, N = node.shape[-2], node.shape[-1]
    K = a.shape[-2] if ta else a.shape[-1]
    batch = node.shape[:-2]
    ba, bb = a.shape[:-2], b.shape[:-2]
    if _prod(bb) == 1 and not ta:
        M, nbatch = M * _prod(batch), 1  # rows of all batches stacked: one big matrix
        a_batch = b_batch = None
    else:
        nbatch = _prod(batch)
        a_batch = _batch_strides(ba, batch, M * K)
        b_batch = _batch_strides(bb, batch, K * N)
    if M <= 16 or N <= 16 or K <= 4:
        return _emit_small(kc, node, M, N, K, nbatch, a_batch, b_batch, batch, epilogue)
    BM, BN, BK, TM, TN = config(M, N, K)
    gx, gy = ceil_div(N, BN), ceil_div(M, BM)
    if gy > 65535 or nbatch > 65535:
        raise ValueError(f"matmul of shape {node.shape} needs too many workgroups")

    kc.decls.append(f"var<workgroup> As: array<f32, {BM * BK}>;")
    kc.decls.append(f"var<workgroup> Bs: array<f32, {BK * BN}>;")
    body = ["let tx = lid.x;", "let ty = lid.y;", f"let m0 = wg.y * {BM}u;",
            f"let n0 = wg.x * {BN}u;"]
    if nbatch > 1:
        body.append("let z = wg.z;")
        body.append(f"let abase = {_batch_index(a_batch, batch)};")
        body.append(f"let bbase = {_batch_index(b_batch, batch)};")
        body.append(f"let cbase = z * {M * N}u;")
    else:
        body += ["let abase = 0u;", "let bbase = 0u;", "let cbase = 0u;"]
    body.append(f"var acc: array<f32, {TM * TN}>;")
    body.append(f"for (var k0 = 0u; k0 < {K}u; k0 = k0 + {BK}u) {{")
    # vec4 loads along an operand's contiguous axis when it and the offsets allow
    va = not ta and K % 4 == 0 or ta and M % 4 == 0
    vb = tb and K % 4 == 0 or not tb and N % 4 == 0
    va = va and kc.vec4_ok(a) and (nbatch == 1 or all(s % 4 == 0 for s in a_batch))
    vb = vb and kc.vec4_ok(b) and (nbatch == 1 or all(s % 4 == 0 for s in b_batch))
    if va:
        kc.vec4.add(kc.storage(a)[0])
    if vb:
        kc.vec4.add(kc.storage(b)[0])
    # A tile: As[kk * BM + mm] = A[m0 + mm, k0 + kk]; B tile: Bs[kk * BN + nn] = B[k0 + kk, n0 + nn]
    body += _tile(kc, a, "As", BM, BK, "m0", M, K, "abase", contiguous_rows=ta, vec=va)
    body += _tile(kc, b, "Bs", BN, BK, "n0", N, K, "bbase", contiguous_rows=not tb, vec=vb)
    body.append("  workgroupBarrier();")
    body.append(f"  for (var kk = 0u; kk < {BK}u; kk = kk + 1u) {{")
    for i in range(TM):
        body.append(f"    let a{i} = As[kk * {BM}u + ty + {16 * i}u];")
    for j in range(TN):
        body.append(f"    let c{j} = Bs[kk * {BN}u + tx + {16 * j}u];")
    for i in range(TM):
        for j in range(TN):
            body.append(f"    acc[{i * TN + j}] = fma(a{i}, c{j}, acc[{i * TN + j}]);")
    body.append("  }")
    body.append("  workgroupBarrier();")
    body.append("}")
    for i in range(TM):
        body.append(f"{{ let m = m0 + ty + {16 * i}u;")
        body.append(f"  if (m < {M}u) {{")
        for j in range(TN):
            body.append(f"    {{ let n = n0 + tx + {16 * j}u; if (n < {N}u) {{")
            body.append(f"      let ci = {add_idx('cbase', f'm * {N}u', 'n')};")
            body += ["      " + ln for ln in finish(kc, node, "ci", f"acc[{i * TN + j}]", epilogue)]
            body.append("    } }")
        body.append("  }")
        body.append("}")
    return body, (gx, gy, nbatch), (16, 16, 1)


def _batch_strides(bshape, out_batch, mat):
    """Per output-batch-dim element strides of an operand (0 where it broadcasts)."""
    lead = len(out_batch) - len(bshape)
    st = strides(tuple(bshape))
    out = []
    for d in range(len(out_batch)):
        j = d - lead
        out.append(0 if j < 0 or bshape[j] == 1 else st[j] * mat)
    return out


def _batch_index(bstr, batch):
    terms, div = [], 1
    for d in range(len(batch) - 1, -1, -1):
        n, s = batch[d], bstr[d]
        if s and n > 1:
            e = "z" if div == 1 else f"(z / {div}u)"
            if d > 0:
                e = f"({e} % {n}u)"
            terms.append(f"({e} * {s}u)")
        div *= n
    return add_idx(*terms)


def _emit_small(kc: KernelCtx, node, M, N, K, nbatch, a_batch, b_batch, batch, epilogue):
    """Skinny or tiny products (attention on short sequences, K = 1 layers): one
    invocation per output element, a plain loop over K; tiles would sit mostly empty."""
    from .common import grid, linear_index
    a, b = node.inputs
    ta, tb = node.attrs["ta"], node.attrs["tb"]
    total = nbatch * M * N
    wg = 64
    disp = grid(ceil_div(total, wg))
    body = [f"let i = {linear_index(disp[0], wg)};", f"if (i >= {total}u) {{ return; }}",
            f"let n = i % {N}u;", f"let m = (i / {N}u) % {M}u;"]
    if nbatch > 1:
        body.append(f"let z = i / {M * N}u;")
        body.append(f"let abase = {_batch_index(a_batch, batch)};")
        body.append(f"let bbase = {_batch_index(b_batch, batch)};")
    else:
        body += ["let abase = 0u;", "let bbase = 0u;"]
    aa = f"abase + k * {M}u + m" if ta else f"abase + m * {K}u + k"
    bb = f"bbase + n * {K}u + k" if tb else f"bbase + k * {N}u + n"
    body.append("var acc = 0.0;")
    body.append(f"for (var k = 0u; k < {K}u; k = k + 1u) {{ "
                f"acc = fma({kc.load(a, aa)}, {kc.load(b, bb)}, acc); }}")
    body += finish(kc, node, "i", "acc", epilogue)
    return body, disp, wg


def finish(kc: KernelCtx, node, idx: str, value: str, epilogue) -> list[str]:
    """Store one result, or run the fused elementwise epilogue on it (bias, activation)."""
    if epilogue is None:
        return [kc.store(node, idx, value)]
    from .elementwise import GroupEmitter
    shape, members, stored = epilogue
    v = kc.fresh("r")
    g = GroupEmitter(kc, shape, members, provided={node.id: v})
    lines = [f"let {v} = {value};"] + g.emit(idx)
    for m in members:
        if m.id in stored:
            lines.append(kc.store(m, idx, g.local[m.id]))
    if node.id in stored:
        lines.append(kc.store(node, idx, v))
    return lines


def _tile(kc: KernelCtx, x, sh: str, R: int, BK: int, r0: str, rows: int, K: int, base: str,
          contiguous_rows: bool, vec: bool) -> list[str]:
    """Lines loading an R x BK tile of an operand into shared sh[kk * R + rr]. The operand
    is stored [rows, K] (k contiguous) or [K, rows] (rows contiguous, contiguous_rows)."""
    out = []
    if not vec:
        for j in range(R * BK // 256):
            e = f"(li + {256 * j}u)"
            if contiguous_rows:
                rr, kk = f"({e} % {R}u)", f"({e} / {R}u)"
                addr = f"{base} + (k0 + kk) * {rows}u + {r0} + rr"
            else:
                rr, kk = f"({e} / {BK}u)", f"({e} % {BK}u)"
                addr = f"{base} + ({r0} + rr) * {K}u + k0 + kk"
            out.append(f"  {{ let rr = {rr}; let kk = {kk}; var v = 0.0;")
            out.append(f"    if ({r0} + rr < {rows}u && k0 + kk < {K}u) {{ v = {kc.load(x, addr)}; }}")
            out.append(f"    {sh}[kk * {R}u + rr] = v; }}")
        return out
    for j in range(max(1, R * BK // 1024)):
        e = f"(li + {256 * j}u)"
        if contiguous_rows:  # four consecutive rows at one k
            rq, kk = f"({e} % {R // 4}u)", f"({e} / {R // 4}u)"
            out.append(f"  {{ let rr = {rq} * 4u; let kk = {kk}; var v = vec4<f32>();")
            idx = f"({base} + (k0 + kk) * {rows}u + {r0} + rr) / 4u"
            out.append(f"    if ({r0} + rr < {rows}u && k0 + kk < {K}u) {{ v = {kc.load4(x, idx)}; }}")
            for c in range(4):
                out.append(f"    {sh}[kk * {R}u + rr + {c}u] = v[{c}];")
        else:  # four consecutive k of one row
            rr, kq = f"({e} / {BK // 4}u)", f"({e} % {BK // 4}u)"
            out.append(f"  {{ let rr = {rr}; let kk = {kq} * 4u; var v = vec4<f32>();")
            idx = f"({base} + ({r0} + rr) * {K}u + k0 + kk) / 4u"
            out.append(f"    if ({r0} + rr < {rows}u && k0 + kk < {K}u) {{ v = {kc.load4(x, idx)}; }}")
            for c in range(4):
                out.append(f"    {sh}[(kk + {c}u) * {R}u + rr] = v[{c}];")
        out.append("  }")
    return out
