"""Matmul: three kernels, chosen by the target (codegen/target.py), the operands' storage
and the problem size.

_emit_direct: register blocks of T x T outputs per invocation read straight from
the operands, with no workgroup memory and no barriers. On CPU implementations of
WebGPU (SwiftShader in Chrome, lavapipe) a barrier is a context switch per
invocation group; measured in this machine's Chromium (benchmarks/matmul_browser.py),
the direct kernel runs the samples' shapes 5-10x faster than shared-memory tiles.
The CPU class uses it for every product under a million outputs; the GPU class only
for skinny ones.

_emit_tiled: workgroup-memory tiles, what real GPUs need. The target's table of
tiles (BM, BN, BK, TM, TN) picks the largest that still makes enough workgroups
to fill the GPU; two of each operand's tiles live in workgroup memory, so the
next slice of k is in flight while the current one is multiplied out (see the
emitter). On an H200 the 128 x 128 tile reaches 37 TFLOP/s natively and 41-46 in
Chromium at 4096^2 (benchmarks/RESULTS.md).

_emit_matrices: the tiled kernel's staging and k loop, with the products on subgroup
matrices (tensor cores; codegen/sgmat.py) where both operands are f16 copies
(precision="mixed") and the target offers chromium-experimental-subgroup-matrix with an
f16 -> f32 configuration (16 x 16 x 16 preferred, else the largest; M, N, K read from
it). The target's "matrix_tiles" (BM, BN, BK, WM, WN): WM x WN subgroups per workgroup,
each owning a (BM/WM) x (BN/WN) block of C as result matrices accumulated in f32. The
operands are staged as f16 (two tiles of each, BK deep; an f16 operand moved as its
words, eight values a 16-byte load where they line up, never through f32 on the real
builtins), each staged row padded by the target's "matrix_pad" f16 (16 bytes) where the
tile still fits, so a matrix load's rows fall in different banks; at the end each result
matrix passes through a per-subgroup M x N of f32 workgroup memory to the fused
epilogue (f16 pair stores included), so out_view strides and edges work as in the tiled
kernel. The tiles may take the device's maxComputeWorkgroupStorageSize
(Target.workgroup_bytes, from the limits lower() is given; the Program then asks for
what its kernels declare): on the H200 (48 KiB) the GPU class's 128 x 128 x 32 with 2 x 2
subgroups (64 x 64 of C each, 4 x 4 matrices of 16 x 16), within WebGPU's default 16
KiB its 64 x 128 x 16 (32 x 64 each, unpadded). Figures: benchmarks/RESULTS.md
("Products on tensor cores"), from benchmarks/matmul_browser.py --sizes 4096 --f16.

Every operand is read through strides: a stored transpose (ta/tb), and any chain
of permutes in front of an operand (attention's head split, lower() folds them
into the node's attrs["views"]), so no transpose is ever copied; the result
may be written through strides too (attrs["out_view"]: a permute after the product).
The tile loader walks whichever axis is contiguous in memory. Leading batch dims
are flattened into rows when B has no batch and the layout allows, so small
per-sample row counts still fill tiles; otherwise batches map to dispatch z with
stride 0 for broadcast batch dims. Edges are bounds-checked, so any size works.
Operands contiguous along an axis whose length and strides are multiples of 4
are loaded as vec4. A product of few tiles and a long k is split along k first
(ops/linalg.py, on the GPU class)."""

from __future__ import annotations

from ..ir import prod
from . import sgmat
from .common import add_idx, ceil_div, digits, group_size, invocations, mul_idx, strides, udiv, umod
from .kernel import KernelCtx, stored_half
from .target import DEFAULT_WORKGROUP_BYTES

# workgroup memory one tiled product may use: WebGPU's default limit, so any adapter runs it
# (the subgroup-matrix kernel may take the device's: Target.workgroup_bytes)
WORKGROUP_BYTES = DEFAULT_WORKGROUP_BYTES


def config(m: int, n: int, batch: int, tuning: dict) -> tuple[int, int, int, int, int]:
    """(BM, BN, BK, TM, TN): the first of the target's "tiles" that makes at least its
    count of workgroups for this product (the last applies to every product)."""
    tiles = tuning["tiles"]
    tile = next((t for t in tiles if ceil_div(m, t[0]) * ceil_div(n, t[1]) * batch >= t[5]), tiles[-1])
    check_tile(*tile[:5])
    return tuple(tile[:5])


def check_tile(BM: int, BN: int, BK: int, TM: int, TN: int) -> None:
    """A tile the tiled kernel can run on any WebGPU device, or ValueError naming why not."""
    why = []
    if min(BM, BN, BK, TM, TN) < 4 or any(v % 4 for v in (BM, BN, BK, TM, TN)):
        why.append("every size must be a positive multiple of 4")
    elif BM % TM or BN % TN:
        why.append("TM must divide BM and TN divide BN")
    elif (BM // TM) * (BN // TN) > 256:
        why.append(f"{(BM // TM) * (BN // TN)} invocations per workgroup (at most 256)")
    elif 2 * (BM + BN) * BK * 4 > WORKGROUP_BYTES:
        why.append(
            f"two tiles take {2 * (BM + BN) * BK * 4} bytes of workgroup memory (at most {WORKGROUP_BYTES})"
        )
    if why:
        raise ValueError(f"matmul tile {BM}x{BN}x{BK} with {TM}x{TN} per invocation: {why[0]}")


def matrix_tile(
    m: int, n: int, batch: int, tuning: dict, dims, S: int, budget: int = WORKGROUP_BYTES
) -> tuple | None:
    """(BM, BN, BK, WM, WN, pad): the first of the target's "matrix_tiles" that fits the
    configuration dims = (M, N, K), subgroups of S and `budget` bytes of workgroup memory
    and makes at least its count of workgroups for this product (the last that fits
    applies to every product), its rows padded by the target's "matrix_pad" f16 where that
    fits too, else not padded; None if none fits (the plain f16 tiles then run)."""
    fits = []
    for t in tuning.get("matrix_tiles", ()):
        for pad in dict.fromkeys((tuning.get("matrix_pad", 0), 0)):
            try:
                check_matrix_tile(*t[:5], dims, S, budget, pad)
            except ValueError:
                continue
            fits.append((*t[:5], pad, t[5]))
            break
    enough = (t for t in fits if ceil_div(m, t[0]) * ceil_div(n, t[1]) * batch >= t[6])
    tile = next(enough, fits[-1] if fits else None)
    return tuple(tile[:6]) if tile else None


def check_matrix_tile(
    BM: int, BN: int, BK: int, WM: int, WN: int, dims, S: int, budget: int = WORKGROUP_BYTES, pad: int = 0
) -> None:
    """A subgroup-matrix tile the kernel can run with configuration dims, subgroups of S,
    rows padded by `pad` f16 and `budget` bytes of workgroup memory, or ValueError naming
    why not."""
    fm, fn, fk = dims
    why = []
    if min(BM, BN, BK) < 4 or any(v % 4 for v in (BM, BN, BK)) or min(WM, WN) < 1:
        why.append("BM, BN and BK must be positive multiples of 4, WM and WN positive")
    elif BM % (WM * fm) or BN % (WN * fn) or BK % fk:
        why.append(f"each subgroup's block must be whole {fm} x {fn} x {fk} matrices")
    elif WM * WN * S > 256:
        why.append(f"{WM * WN * S} invocations per workgroup (at most 256)")
    elif pad % 8:
        why.append(f"rows padded by {pad} f16 (a multiple of 8 keeps them 16-byte aligned)")
    elif (used := matrix_bytes(BM, BN, BK, WM * WN, dims, pad)) > budget:
        why.append(f"{used} bytes of workgroup memory (at most {budget})")
    if why:
        raise ValueError(f"subgroup-matrix tile {BM}x{BN}x{BK} with {WM}x{WN} subgroups: {why[0]}")


def matrix_bytes(BM: int, BN: int, BK: int, subgroups: int, dims, pad: int = 0) -> int:
    """Workgroup memory of the subgroup-matrix kernel at most (whichever axis its tiles'
    rows run along: _TileLoader.tile_size): two f16 tiles of each operand and one f32
    result matrix per subgroup (the epilogue's)."""
    tiles = sum(R * BK + pad * max(R, BK) for R in (BM, BN))
    return 2 * tiles * 2 + subgroups * dims[0] * dims[1] * 4


def operand_layout(x, view, trans):
    """(batch shape, batch strides, rows, cols, row stride, col stride, element offset) of
    a logical operand."""
    shape, st, off = (tuple(view[0]), tuple(view[1]), view[2]) if view else (x.shape, strides(x.shape), 0)
    r, c, rs, cs = shape[-2], shape[-1], st[-2], st[-1]
    if trans:
        r, c, rs, cs = c, r, cs, rs
    return tuple(shape[:-2]), tuple(st[:-2]), r, c, rs, cs, off


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
    ba, sba, M, K, am, ak, ao = operand_layout(a, views.get(0), at["ta"])
    bb, sbb, K2, N, bk, bn, bo = operand_layout(b, views.get(1), at["tb"])
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
        ao=ao,
        bo=bo,
        nbatch=prod(batch),
    )


def _bases(L, body):
    """Each operand's and the result's first element of batch z (an operand read through
    a folded slice starts at its view's offset)."""
    many = L["nbatch"] > 1
    for name, st, off in (("abase", L["ab"], L["ao"]), ("bbase", L["bb"], L["bo"]), ("cbase", L["cb"], 0)):
        z = _batch_index(st, L["batch"]) if many else "0u"
        body.append(f"let {name} = {add_idx(z, f'{off}u')};")


def pairs_ok(node) -> bool:
    """Whether every invocation's results come in pairs of neighbouring elements that
    start a word: C's rows contiguous, of an even length, and starting on even elements
    (every register block is an even number of columns wide: the tiled kernel's are
    multiples of 4, the direct kernel's min(T, N) with T even)."""
    L = layout(node)
    return L["cn"] == 1 and L["N"] % 2 == 0 and L["cm"] % 2 == 0 and all(s % 2 == 0 for s in L["cb"])


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
    dims = sgmat.config(kc.target) if all(stored_half(x) for x in node.inputs) else None
    S, budget = sgmat.subgroup_size(kc.target), kc.target.workgroup_bytes
    tile = dims and matrix_tile(M, N, nbatch, kc.target.tuning, dims, S, budget)
    if tile:
        return _emit_matrices(kc, node, L, dims, tile)
    return _emit_tiled(kc, node, L)


def _vec_ok(kc: KernelCtx, x, rows: int, K: int, rs: int, ks: int, bstr, g: int = 4) -> bool:
    """Whether an operand's tile loads can take g = 4 (vec4) or 8 (an f16 operand's
    vec4<u32>) elements at once: contiguous along rows (rs == 1) or along k (ks == 1),
    everything else in steps of g."""
    if rs == 1:
        ok = rows % g == 0 and ks % g == 0
    elif ks == 1:
        ok = K % g == 0 and rs % g == 0
    else:
        return False
    aligned = kc.vec4_ok(x) and (g == 4 or kc.aligned(x, 4))  # 8 f16: 4 words
    return ok and aligned and all(s % g == 0 for s in bstr)


def _emit_tiled(kc: KernelCtx, node, L):
    """Workgroup-memory tiles, two of each operand: while the workgroup multiplies out one
    BK-deep slice of k, each invocation's loads of the next slice are in flight in its
    registers, stored after the products; one barrier per slice. A workgroup of
    (BN/TN) x (BM/TM) invocations computes a BM x BN tile of C; invocation (tx, ty) owns
    the vec4 row groups ty + (BM/TM) p and column groups tx + (BN/TN) q, so the
    invocations of a row read one shared vec4 of A (a broadcast) and consecutive vec4s of
    B. Per k, TM/4 + TN/4 vec4 reads feed TM x TN fused multiply-adds, unrolled."""
    M, N, K, nbatch = L["M"], L["N"], L["K"], L["nbatch"]
    BM, BN, BK, TM, TN = config(M, N, nbatch, kc.target.tuning)
    WX, WY = BN // TN, BM // TM
    # [tile][k][row group]: with k a constant in the unrolled reads, the bounds clamp
    # Naga puts on each dynamic index (the row group) does not change within the k loop
    kc.decls.append(f"var<workgroup> As: array<array<array<vec4<f32>, {BM // 4}>, {BK}>, 2>;")
    kc.decls.append(f"var<workgroup> Bs: array<array<array<vec4<f32>, {BN // 4}>, {BK}>, 2>;")
    body = ["let tx = lid.x;", "let ty = lid.y;"]
    la, lb, disp = _staging(kc, node, L, BM, BN, BK, WX * WY, body, flat=False)
    CG = TN // 4
    body += la.setup() + lb.setup()
    body += [f"var acc{i}_{q} = vec4<f32>();" for i in range(TM) for q in range(CG)]

    def multiply(s: str) -> list[str]:  # one slice of k out of tile s, unrolled
        out = []
        for kk in range(BK):
            out.append("{")
            out += [f"  let a{p} = As[{s}][{kk}][{add_idx('ty', f'{WY * p}u')}];" for p in range(TM // 4)]
            out += [f"  let c{q} = Bs[{s}][{kk}][{add_idx('tx', f'{WX * q}u')}];" for q in range(CG)]
            for i in range(TM):
                for q in range(CG):
                    out.append(f"  acc{i}_{q} = fma(vec4<f32>(a{i // 4}[{i % 4}]), c{q}, acc{i}_{q});")
            out.append("}")
        return out

    body += _double_buffered(la, lb, K, BK, multiply)
    return body + _tiled_stores(kc, node, L, TM, TN, WX, WY), disp, (WX, WY, 1)


def _emit_matrices(kc: KernelCtx, node, L, dims, tile):
    """f16 products on subgroup matrices (codegen/sgmat.py: real, or emulated in tests).
    A workgroup of WM x WN subgroups computes a BM x BN tile of C; subgroup g owns the
    (BM/WM) x (BN/WN) block at rows sm, columns sn, as FM x FN result matrices of the
    configuration's M x N, accumulated in f32. The operands are staged as f16 in
    workgroup memory by every invocation, two tiles of each, exactly as the plain tiled
    kernel stages them (_staging, _double_buffered: strides, offsets, transposes,
    batches, zeros past the edges), each tile along the axis its loads walk
    (_TileLoader.flat_at), which says whether a matrix is loaded row- or column-major
    (_TileLoader.matrix). At the end each result matrix in turn is stored into
    the subgroup's M x N of Cs, and all invocations write Cs through the epilogue."""
    fm, fn, fk = dims
    BM, BN, BK, WM, WN, pad = tile
    S = sgmat.subgroup_size(kc.target)
    SM, SN = BM // WM, BN // WN
    FM, FN, nsub = SM // fm, SN // fn, WM * WN
    mx = sgmat.Matrices(kc, dims, S)
    # the subgroup's block: uniform offsets (from subgroup_id), as the builtins need
    body = [f"let sg = {mx.subgroup()};", f"let sm = (sg / {WN}u) * {SM}u;"]
    body.append(f"let sn = (sg % {WN}u) * {SN}u;")
    la, lb, disp = _staging(kc, node, L, BM, BN, BK, nsub * S, body, flat=True, pad=pad)
    la.halves = lb.halves = mx.halves
    kc.decls.append(f"var<workgroup> As: array<f16, {2 * la.tile_size}>;")
    kc.decls.append(f"var<workgroup> Bs: array<f16, {2 * lb.tile_size}>;")
    kc.decls.append(f"var<workgroup> Cs: array<f32, {nsub * fm * fn}>;")
    body += la.setup() + lb.setup()
    body += [mx.result(f"acc{i}_{j}") for i in range(FM) for j in range(FN)]

    def multiply(s: str) -> list[str]:  # one slice of k out of tile s, K at a time
        out = []
        for kk in range(0, BK, fk):
            out.append("{")
            for i in range(FM):
                at = la.flat_at(s, f"{kk}u", f"(sm + {i * fm}u)")
                out.append("  " + mx.load("left", f"l{i}", "As", at, *la.matrix(left=True)))
            for j in range(FN):
                at = lb.flat_at(s, f"{kk}u", f"(sn + {j * fn}u)")
                out.append("  " + mx.load("right", f"r{j}", "Bs", at, *lb.matrix(left=False)))
            for i in range(FM):
                for j in range(FN):
                    out += ["  " + ln for ln in mx.mma(f"acc{i}_{j}", f"l{i}", f"r{j}")]
            out.append("}")
        return out

    body += _double_buffered(la, lb, L["K"], BK, multiply)
    return body + _matrix_stores(kc, node, L, mx, tile, FM, FN), disp, (nsub * S, 1, 1)


def _matrix_stores(kc: KernelCtx, node, L, mx, tile, FM: int, FN: int) -> list[str]:
    """Result matrix (i, j) of every subgroup stored into its M x N of Cs, then Cs written
    to C through the epilogue by all invocations (in pairs of neighbours where it stores
    f16 values), guarded only where tiles overhang C's edges; two barriers per matrix."""
    BM, BN, _, WM, WN, _ = tile
    fm, fn, S = mx.M, mx.N, mx.S
    T, frag = WM * WN * S, fm * fn
    step = 2 if kc.pairs else 1  # fn is even: a pair never leaves its row
    count = WM * WN * frag // step
    ci = add_idx("cbase", mul_idx("m", L["cm"]), mul_idx("n", L["cn"]))
    body = []
    for i in range(FM):
        for j in range(FN):
            body += mx.store("Cs", f"sg * {frag}u", f"acc{i}_{j}", False, fn)
            body.append("workgroupBarrier();")
            body.append(f"for (var p = 0u; p < {ceil_div(count, T)}u; p = p + 1u) {{")
            body.append(f"  let x = (li + p * {T}u) * {step}u;")
            body.append(f"  let fg = x / {frag}u;")
            body.append(f"  let m = m0 + (fg / {WN}u) * {BM // WM}u + {i * fm}u + (x % {frag}u) / {fn}u;")
            body.append(f"  let n = n0 + (fg % {WN}u) * {BN // WN}u + {j * fn}u + x % {fn}u;")
            cond = ([f"x < {count * step}u"] if count % T else []) + [f"m < {L['M']}u", f"n < {L['N']}u"]
            body.append(f"  if ({' && '.join(cond)}) {{")
            body.append(f"    let ci = {ci};")
            if kc.pairs:
                res = kc.result_pair(node, "ci", "Cs[x]", "Cs[x + 1u]")
            else:
                res = kc.result(node, "ci", "Cs[x]")
            body += ["    " + ln for ln in res]
            body += ["  }", "}", "workgroupBarrier();"]
    return body


def _staging(kc: KernelCtx, node, L, BM: int, BN: int, BK: int, T: int, body: list[str], flat: bool, pad=0):
    """The staged kernels' common start: the tile's first row and column (m0, n0) and
    batch (z), each operand's base, and the loaders of A's BM x BK and B's BN x BK tiles
    (into As and Bs) shared by T invocations; returns (A's loader, B's, the dispatch)."""
    M, N, K, nbatch = L["M"], L["N"], L["K"], L["nbatch"]
    a, b = node.inputs
    gx, gy = ceil_div(N, BN), ceil_div(M, BM)
    if gy > 65535 or nbatch > 65535:
        raise ValueError(f"matmul of shape {node.shape} needs too many workgroups")
    va = _vec_ok(kc, a, M, K, L["am"], L["ak"], L["ab"] + [L["ao"]])
    vb = _vec_ok(kc, b, N, K, L["bn"], L["bk"], L["bb"] + [L["bo"]])
    # f16 operands staged flat: eight values (16 bytes) a load where they line up
    wa = flat and stored_half(a) and _vec_ok(kc, a, M, K, L["am"], L["ak"], L["ab"] + [L["ao"]], 8)
    wb = flat and stored_half(b) and _vec_ok(kc, b, N, K, L["bn"], L["bk"], L["bb"] + [L["bo"]], 8)
    body += [f"let m0 = wg.y * {BM}u;", f"let n0 = wg.x * {BN}u;", "let z = wg.z;"]
    _bases(L, body)
    la = _TileLoader(kc, a, "As", "pa", BM, BK, T, "m0", M, K, "abase", L["am"], L["ak"], va, flat, pad, wa)
    lb = _TileLoader(kc, b, "Bs", "pb", BN, BK, T, "n0", N, K, "bbase", L["bn"], L["bk"], vb, flat, pad, wb)
    return la, lb, (gx, gy, nbatch)


def _double_buffered(la, lb, K: int, BK: int, multiply) -> list[str]:
    """The k loop over two tiles of each operand: the first slice stored, then every
    slice but the last multiplied out (multiply(s): tile s) while the next one's loads
    are in flight, and stored into the other tile; the last slice (peeled) only
    multiplies. One barrier per slice."""
    body = la.fetch("0u") + lb.fetch("0u") + la.put("0u") + lb.put("0u") + ["workgroupBarrier();"]
    NT = ceil_div(K, BK)
    if NT > 1:
        body.append(f"for (var t = 0u; t < {NT - 1}u; t = t + 1u) {{")
        body += ["  let s = t & 1u;", f"  let k0 = (t + 1u) * {BK}u;"]
        body += ["  " + ln for ln in la.fetch("k0") + lb.fetch("k0") + multiply("s")]
        body += ["  " + ln for ln in la.put("s ^ 1u") + lb.put("s ^ 1u")]
        body += ["  workgroupBarrier();", "}"]
    return body + multiply(f"{(NT - 1) % 2}u")


def _tiled_stores(kc: KernelCtx, node, L, TM: int, TN: int, WX: int, WY: int) -> list[str]:
    """Each invocation's TM x TN results stored (through the epilogue); guarded only where
    tiles overhang C's edges."""
    body = []
    M, N = L["M"], L["N"]
    BM, BN = TM * WY, TN * WX
    ci = add_idx("cbase", mul_idx("m", L["cm"]), mul_idx("n", L["cn"]))
    for i in range(TM):
        body.append(f"{{ let m = m0 + {4 * WY * (i // 4) + i % 4}u + ty * 4u;")
        body.append(f"  if (m < {M}u) {{" if M % BM else "  {")
        for q in range(TN // 4):
            for c in range(0, 4, 2 if kc.pairs else 1):
                guard = f" if (n < {N}u)" if N % BN else ""
                body.append(f"    {{ let n = n0 + {4 * WX * q + c}u + tx * 4u;{guard} {{")
                body.append(f"      let ci = {ci};")
                if kc.pairs:  # columns c and c + 1: one word of each f16 value (pairs_ok)
                    res = kc.result_pair(node, "ci", f"acc{i}_{q}[{c}]", f"acc{i}_{q}[{c + 1}]")
                else:
                    res = kc.result(node, "ci", f"acc{i}_{q}[{c}]")
                body += ["      " + ln for ln in res]
                body.append("    } }")
        body += ["  }", "}"]
    return body


class _TileLoader:
    """Moves R x BK tiles of one operand (element (r, k) at base + r rs + k ks, rows from
    r0) from memory into each invocation's registers (fetch) and from there into the
    shared array sh (put), which holds element (kk, rr) of tile s at
    [s][kk][rr / 4][rr % 4] (array<array<array<vec4<f32>>>>), or, flat, as f16 in
    array<f16> (the subgroup-matrix kernel's tiles) along the axis the invocations walk:
    at [s size + kk (R + pad) + rr] where they walk rows, [s size + rr (BK + pad) + kk]
    where they walk k (kinner), so each invocation's four values are neighbours there
    too; `pad` f16 after each row of the tile keep a matrix load's rows in different
    banks. Consecutive invocations walk the operand's contiguous axis: vec4s of four rows
    at one k ("rows"), vec4s of four k of one row ("k"), or single elements. An f16
    operand staged flat stays f16 on the way: its four values are fetched as their two
    words and stored by bitcast (no f16 -> f32 -> f16 conversions). Where an
    invocation's element lies (its row, its k within the tile, its address less k0) is
    worked out once, before the k loop."""

    def __init__(
        self, kc, x, sh, reg, R, BK, T, r0, rows, K, base, rs, ks, vec, flat=False, pad=0, wide=False
    ) -> None:
        self.kc, self.x, self.sh, self.reg, self.R, self.BK, self.T = kc, x, sh, reg, R, BK, T
        self.r0, self.rows, self.K, self.base, self.rs, self.ks = r0, rows, K, base, rs, ks
        self.flat = flat
        self.mode = ("rows" if rs == 1 else "k") if vec else "scalar"
        # elements a load moves: 8 (wide: an f16 operand's vec4<u32>) where the walked
        # axis of the tile holds whole groups of 8, else 4 (vec4) or 1
        self.g = 8 if wide and (R if rs == 1 else BK) % 8 == 0 else 4 if vec else 1
        self.count = R * BK // self.g  # loads per tile
        self.n = ceil_div(self.count, T)  # loads per invocation
        walk_rows = self.mode == "rows" or (self.mode == "scalar" and (rs == 1 or (ks != 1 and rs < ks)))
        self.kinner = flat and not walk_rows
        # a flat tile's row: BK + pad f16 (kinner) or R + pad; its f16 elements
        self.stride = (BK if self.kinner else R) + (pad if flat else 0)
        self.tile_size = (R if self.kinner else BK) * self.stride
        self.words = flat and vec and stored_half(x)  # f16 values moved as words
        # a word's two f16 values as a vec2<f16> (the matrix kernel's sgmat.Matrices.halves)
        self.halves = lambda w: f"vec2<f16>(unpack2x16float({w}))"
        if vec:
            kc.vec4.add(kc.buffer_of(x))

    def _spare(self, j: int) -> bool:
        """Whether load j of some invocations falls outside the tile."""
        return j == self.n - 1 and self.count % self.T != 0

    def _guards(self, j: int) -> list[str]:
        """What load j must check, whatever the k: inside the tile, inside the operand's rows."""
        e, rr = f"(li + {self.T * j}u)", f"{self.reg}r{j}"
        return ([f"{e} < {self.count}u"] if self._spare(j) else []) + (
            [f"{self.r0} + {rr} < {self.rows}u"] if self.rows % self.R else []
        )

    def setup(self) -> list[str]:
        out = []
        R4, K4, G, g = self.R // self.g, self.BK // self.g, self.g, self.reg
        for j in range(self.n):
            e = f"(li + {self.T * j}u)"
            if self.mode == "rows":
                rr, kk = f"({umod(e, R4)} * {G}u)", udiv(e, R4)
            elif self.mode == "k":
                rr, kk = udiv(e, K4), f"({umod(e, K4)} * {G}u)"
            elif self.rs == 1 or (self.ks != 1 and self.rs < self.ks):
                rr, kk = umod(e, self.R), udiv(e, self.R)
            else:
                rr, kk = udiv(e, self.BK), umod(e, self.BK)
            out += [f"let {g}r{j} = {rr};", f"let {g}k{j} = {kk};"]
            addr = add_idx(
                self.base, mul_idx(f"({self.r0} + {g}r{j})", self.rs), mul_idx(f"{g}k{j}", self.ks)
            )
            out.append(f"let {g}g{j} = {addr};")
            if self._guards(j):
                out.append(f"let {g}ok{j} = {' && '.join(self._guards(j))};")
            ty = "f32" if self.mode == "scalar" else "vec4<f32>"
            ty = f"vec{self.g // 2}<u32>" if self.words else ty
            out.append(f"var {g}{j}: {ty};")
        return out

    def fetch(self, k0: str) -> list[str]:
        out, g = [], self.reg
        for j in range(self.n):
            addr = add_idx(f"{g}g{j}", mul_idx(k0, self.ks)) if k0 != "0u" else f"{g}g{j}"
            if self.mode == "scalar":
                value, zero = self.kc.load(self.x, addr), "0.0"
            elif self.words:
                load = self.kc.load8_words if self.g == 8 else self.kc.load4_words
                value, zero = load(self.x, udiv(addr, self.g)), f"vec{self.g // 2}<u32>()"
            else:
                value, zero = self.kc.load4(self.x, udiv(addr, 4)), "vec4<f32>()"
            cond = ([f"{g}ok{j}"] if self._guards(j) else []) + (
                [f"{add_idx(k0, f'{g}k{j}')} < {self.K}u"] if self.K % self.BK else []
            )
            if cond:
                out.append(f"{g}{j} = {zero}; if ({' && '.join(cond)}) {{ {g}{j} = {value}; }}")
            else:
                out.append(f"{g}{j} = {value};")
        return out

    def put(self, tile: str) -> list[str]:
        out, g, sh = [], self.reg, f"{self.sh}[{tile}]"
        for j in range(self.n):
            if self.flat:
                lines = self._put_flat(tile, j)
            elif self.mode == "rows":
                lines = [f"{sh}[{g}k{j}][{g}r{j} / 4u] = {g}{j};"]
            elif self.mode == "k":
                lines = [f"{sh}[{g}k{j} + {c}u][{g}r{j} / 4u][{g}r{j} % 4u] = {g}{j}[{c}];" for c in range(4)]
            else:
                lines = [f"{sh}[{g}k{j}][{g}r{j} / 4u][{g}r{j} % 4u] = {g}{j};"]
            if self._spare(j):
                lines = [f"if (li + {self.T * j}u < {self.count}u) {{"] + ["  " + ln for ln in lines] + ["}"]
            out += lines
        return out

    def _put_flat(self, tile: str, j: int) -> list[str]:
        """Load j's elements as f16 in the flat array (the vec4's four along the walked axis)."""
        g = self.reg
        at = self.flat_at(tile, f"{g}k{j}", f"{g}r{j}")
        if self.mode == "scalar":
            return [f"{self.sh}[{at}] = f16({g}{j});"]
        if self.words:  # word w holds values 2w and 2w + 1
            out = [f"let h{w} = {self.halves(f'{g}{j}.' + 'xyzw'[w])};" for w in range(self.g // 2)]
            out += [f"{self.sh}[{at} + {c}u] = h{c // 2}.{'xy'[c % 2]};" for c in range(self.g)]
            return ["{"] + ["  " + ln for ln in out] + ["}"]
        return [f"{self.sh}[{at} + {c}u] = f16({g}{j}[{c}]);" for c in range(4)]

    def flat_at(self, tile: str, kk: str, rr: str) -> str:
        """The flat array's index of element (kk, rr) of tile `tile`."""
        inner = f"{rr} * {self.stride}u + {kk}" if self.kinner else f"{kk} * {self.stride}u + {rr}"
        return f"({tile}) * {self.tile_size}u + {inner}"

    def matrix(self, left: bool) -> tuple[bool, int]:
        """(col_major, stride) of a subgroup-matrix load from the flat tiles: the left matrix
        is rows x k, the right one k x rows."""
        return (left != self.kinner), self.stride


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
    if K <= 4:  # a few sums per output: the stores bound it, and a big block only costs set-up
        T = min(T, 4)
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
        out = _direct_loads(kc, a, TM, "am", L["am"], L["ak"], M, ksym, U_, "a", L["ab"] + [L["ao"]])
        out += _direct_loads(kc, b, TN, "bn", L["bn"], L["bk"], N, ksym, U_, "b", L["bb"] + [L["bo"]])
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
    step = 2 if kc.pairs else 1  # columns c and c + 1: one word of each f16 value (pairs_ok)
    if TN % step:
        raise AssertionError(f"f16 pairs from a register block {TN} columns wide")
    body.append(f"  for (var c = 0u; c < {TN}u; c = c + {step}u) {{")
    body.append("    let n = n0 + c;" + (f" if (n < {N}u) {{" if N % TN else ""))
    body.append(f"    let ci = {add_idx('cbase', mul_idx('m', L['cm']), mul_idx('n', L['cn']))};")
    if kc.pairs:
        res = kc.result_pair(node, "ci", f"res[r * {TN}u + c]", f"res[r * {TN}u + c + 1u]")
    else:
        res = kc.result(node, "ci", f"res[r * {TN}u + c]")
    body += ["    " + ln for ln in res]
    body.append("  }" + (" }" if N % TN else ""))
    body.append("}" + (" }" if M % TM else ""))
    return body
