"""Attention's kernels on subgroup matrices (codegen/sgmat.py): which kernels take them
(matrix_plan), the forward with Q K^T and P V on matrices, and each backward kernel
with its S, dP and gradient products on matrices. codegen/attention.py calls them where
matrix_plan finds a layout, that is where (1) the target has an f16 -> f32
configuration (M, N, K) (sgmat.config: the feature, subgroups, one subgroup size S; or
the emulated matrices of the tests), (2) q, k and v are f16 copies (precision="mixed"),
(3) S is a multiple of M and M N of S, and (4) a block of MATRIX_BLOCKS fits 16 KiB of
workgroup memory with the head dims padded to whole matrices: up to 128 for the
forward, 64 for the backward with 16 x 16 x 16 (past them the plain kernel, which the
others' results do not depend on: each kernel reads only q, k, v, dO and the lse
column). Every mask (bool or additive, broadcast), causality, dropout (the same stream
and bits as the plain kernel), odd lengths and head dims, leading dims and strided views
take it. On the H200 (16 x 16 x 16, S = 32) at D = Dv = 64: 2 subgroups, 32 query rows
and 32-key tiles per workgroup, 14,336 bytes (Qs 4096, KVs 4096, Ss 4096, Ps 2048);
D = 128: 2 subgroups, 16-key tiles, 15,360 bytes. The backward at D = Dv = 64: 2
subgroups of 32 rows (queries for dQ, keys for dK and dV) and tiles of 16 of the other
side, 15,360 bytes (dQ) and 16,384 (dK, dV: grad_matrix_bytes)."""

from __future__ import annotations

from . import sgmat
from .attention_rows import (
    FORWARD_OPERANDS,
    GRAD_OPERANDS,
    NEG_INF,
    POS_INF,
    WORKGROUP_BYTES,
    Rows,
    logical_shapes,
)
from .common import ceil_div, f32_lit
from .kernel import stored_half

# (subgroups per workgroup, keys per tile), most preferred first: the first whose
# workgroup memory fits WORKGROUP_BYTES for the head dims is taken
MATRIX_BLOCKS = ((4, 32), (2, 32), (4, 16), (2, 16), (1, 32), (1, 16))


def matrix_bytes(W: int, BKV: int, dp: int, dvp: int, M: int) -> int:
    """Workgroup memory of the matrix forward: Q's block (W M rows of dp, f16), one tile
    of K or V (BKV rows, f16), the scores (f32) and the probabilities (f16) of the block."""
    BQ = W * M
    return 2 * BQ * dp + 2 * BKV * max(dp, dvp) + 4 * BQ * BKV + 2 * BQ * BKV


def grad_matrix_bytes(part: str, W: int, BT: int, dp: int, dvp: int, M: int) -> int:
    """Workgroup memory of a backward kernel on matrices: the block's two operands (W M
    rows of dp and dvp, f16), one tile of the other side's two (BT rows, f16), the scores
    or dP (f32), dS (f16) and, for dK/dV, the dropped-out probabilities (f16)."""
    BR = W * M
    return 2 * (BR + BT) * (dp + dvp) + 4 * BR * BT + 2 * BR * BT * (2 if part == "dkv" else 1)


def matrix_plan(kc, node, part: str):
    """(dims, S, W, BT, dp, dvp) of a kernel on subgroup matrices, or None where the plain
    kernel runs: the target has no f16 -> f32 configuration (codegen/sgmat.py), q, k, v
    (and dO) are not f16 copies (precision="mixed"), the subgroup size S is not a
    multiple of the configuration's M, or no block of MATRIX_BLOCKS (W subgroups, BT
    rows of the other side per tile) fits 16 KiB with the head dims padded to whole
    matrices (the forward: up to 128 with 16 x 16 x 16; the backward: up to 64). part:
    the kernel asking, "forward", "dq" (dQ) or "dkv" (dK and dV)."""
    dims = sgmat.config(kc.target)
    operands = node.inputs[:3] if part == "forward" else node.inputs[:3] + node.inputs[4:5]
    if dims is None or not all(stored_half(x) for x in operands):
        return None
    M, N, K = dims
    S = sgmat.subgroup_size(kc.target)
    shapes = logical_shapes(node)
    d, dv = shapes[0][-1], shapes[2][-1]
    if S % M or (M * N) % S:
        return None
    if part == "forward":
        dp, dvp = ceil_div(d, K) * K, ceil_div(dv, N) * N
    else:  # both dims are contracted (S, dP) and produced (dQ, dK, dV)
        dp, dvp = ceil_div(d, max(N, K)) * max(N, K), ceil_div(dv, max(N, K)) * max(N, K)
    for W, BT in MATRIX_BLOCKS:
        # the forward's row statistics (2 per invocation) pass through its M x BT of Ss
        if W * S > 256 or BT % N or BT % K or (M * BT) % S or 2 * S > M * BT:
            continue
        if part == "forward":
            used = matrix_bytes(W, BT, dp, dvp, M)
        else:
            used = grad_matrix_bytes(part, W, BT, dp, dvp, M)
        if used <= WORKGROUP_BYTES:
            return dims, S, W, BT, dp, dvp
    return None


def stage(side, arr: str, first: str, rows: int, width: int, cols: int, T: int) -> list[str]:
    """The T invocations copy rows first .. first + rows - 1 of side (cols wide, zero past
    its edges) into the f16 workgroup array arr, `width` elements a row."""
    return [
        f"for (var e = li; e < {rows * width}u; e = e + {T}u) {{",
        f"  let er = {first} + e / {width}u; let ec = e % {width}u;",
        "  var x = 0.0;",
        f"  if (er < {side.rows}u && ec < {cols}u) {{ x = {side.at('er', 'ec')}; }}",
        f"  {arr}[e] = f16(x);",
        "}",
    ]


class _Forward:
    """The matrix forward's parts (forward() says what it computes): the workgroup of W
    subgroups, its block of BQ = W M query rows, the tiles of BKV keys, the head dims
    padded to whole matrices (dp, dvp), and its workgroup arrays."""

    def __init__(self, kc, node, dims, S, W, BKV, dp, dvp) -> None:
        self.node, self.a = node, node.attrs
        M = dims[0]
        self.M, self.N, self.K = dims
        self.BQ, self.T, self.P = W * M, W * S, S // M
        self.BKV, self.dp, self.dvp = BKV, dp, dvp
        self.R = R = Rows(kc, node, logical_shapes(node)[0][-2], FORWARD_OPERANDS, block=self.BQ)
        self.q, self.k, self.v = R.sides[:3]
        self.mx = sgmat.Matrices(kc, dims, S)
        kc.decls.append(f"var<workgroup> Qs: array<f16, {self.BQ * dp}>;")
        kc.decls.append(f"var<workgroup> KVs: array<f16, {BKV * max(dp, dvp)}>;")
        kc.decls.append(f"var<workgroup> Ss: array<f32, {self.BQ * BKV}>;")
        kc.decls.append(f"var<workgroup> Ps: array<f16, {self.BQ * BKV}>;")
        # each row's keys in an order rotated by the row, so that the invocations of a
        # subgroup (rows BKV words apart in Ss) read different banks at once
        self.rotated = f"let jj = (lh + {self.P}u * (t + lr)) % {BKV}u;"

    def stage_queries(self) -> list[str]:
        """The invocation's subgroup, query row and share of the row's keys; Q's block
        staged in Qs; hi, the end of the keys any row of the block sees."""
        BQ, tq, tk = self.BQ, self.R.tq, self.R.tk
        body = [f"let sg = {self.mx.subgroup()};", f"let lr = li / {self.P}u;", f"let lh = li % {self.P}u;"]
        body.append(f"let i = min(r0 + lr, {tq - 1}u);")  # this invocation's query row (clamped)
        body += stage(self.q, "Qs", "r0", BQ, self.dp, self.q.cols, self.T)
        hi = f"{tk}u"
        if self.a["causal"]:  # keys past the block's last query are hidden from all its rows
            hi = f"min(min(r0 + {BQ}u, {tq}u), {tk}u)"
        return body + [f"let hi = {hi};"]

    def scores(self) -> list[str]:
        """S of the tile into Ss: each subgroup its M rows, N keys at a time."""
        mx, M, N, K, BKV, dp = self.mx, self.M, self.N, self.K, self.BKV, self.dp
        out = []
        for nb in range(BKV // N):
            out += ["{", "  " + mx.result("sacc")]
            for kk in range(dp // K):
                out.append("  " + mx.load("left", f"ql{kk}", "Qs", f"sg * {M * dp}u + {kk * K}u", False, dp))
                out.append("  " + mx.load("right", f"kr{kk}", "KVs", f"{nb * N * dp + kk * K}u", True, dp))
                out += ["  " + x for x in mx.mma("sacc", f"ql{kk}", f"kr{kk}")]
            out += ["  " + x for x in mx.store("Ss", f"sg * {M * BKV}u + {nb * N}u", "sacc", False, BKV)]
            out.append("}")
        return out

    def score(self, j: str) -> list[str]:
        """s, the score of key j for the invocation's row: scaled, the mask added."""
        out = [f"var s = Ss[lr * {self.BKV}u + jj] * {f32_lit(self.a['scale'])};"]
        if self.a["mask"] == "add":
            out.append(f"s = s + {self.R.mask.at('i', j)};")
        return out

    def walk(self, inner: list[str]) -> list[str]:
        """inner for each tile of keys, staged in KVs, after its scores."""
        out = [f"for (var j0 = 0u; j0 < hi; j0 = j0 + {self.BKV}u) {{", "  workgroupBarrier();"]
        out += ["  " + x for x in stage(self.k, "KVs", "j0", self.BKV, self.dp, self.q.cols, self.T)]
        out += ["  workgroupBarrier();"] + ["  " + x for x in self.scores()] + ["  workgroupBarrier();"]
        out += [f"  let n = min({self.BKV}u, hi - j0);"]
        return out + ["  " + x for x in inner] + ["}"]

    def row_statistics(self) -> list[str]:
        """Pass 1: each row's max and sum, its S / M partial statistics combined through
        Ss, to the row's log-sum-exp lse."""
        R, P, T = self.R, self.P, self.T
        body = [f"var m = {NEG_INF};", "var l = 0.0;"]
        step = [f"for (var t = 0u; t < {self.BKV // P}u; t = t + 1u) {{", "  " + self.rotated]
        step += ["  if (jj >= n) { continue; }", "  let j = j0 + jj;"]
        step += ["  " + x for x in self.score("j")]
        step += [f"  if ({R.hidden('i', 'j', 's')}) {{ continue; }}"]
        step += ["  if (s > m) { l = l * exp(m - s); m = s; }", "  l = l + exp(s - m);", "}"]
        body += self.walk(step)
        body += ["workgroupBarrier();", "Ss[li] = m;", f"Ss[{T}u + li] = l;", "workgroupBarrier();"]
        body += [f"var mm = {NEG_INF};"]
        body += [f"for (var t = 0u; t < {P}u; t = t + 1u) {{ mm = max(mm, Ss[lr * {P}u + t]); }}"]
        body += ["var ll = 0.0;", f"for (var t = 0u; t < {P}u; t = t + 1u) {{"]
        body += [
            f"  let mt = Ss[lr * {P}u + t];",
            f"  if (mt > {NEG_INF}) {{ ll = ll + Ss[{T}u + lr * {P}u + t] * exp(mt - mm); }}",
        ]
        return body + ["}", f"let lse = select({POS_INF}, mm + log(ll), ll > 0.0);"]

    def pv(self) -> list[str]:
        """Pass 2: P = exp(s - lse) (dropped out) as f16 into Ps, O += P V."""
        R, mx, M, N, K, BKV, dvp = self.R, self.mx, self.M, self.N, self.K, self.BKV, self.dvp
        body = [mx.result(f"oacc{c}") for c in range(dvp // N)]
        step = [f"for (var t = 0u; t < {BKV // self.P}u; t = t + 1u) {{", "  " + self.rotated]
        step += ["  let j = j0 + jj;", "  var p = 0.0;"]
        step += ["  if (jj < n) {"] + ["    " + x for x in self.score("j")]
        keep = f" * {R.keep('i', 'j')}" if R.seed is not None else ""
        step += [f"    if (!({R.hidden('i', 'j', 's')})) {{ p = exp(s - lse){keep}; }}", "  }"]
        step += [f"  Ps[lr * {BKV}u + jj] = f16(p);", "}"]
        step += stage(self.v, "KVs", "j0", BKV, dvp, self.v.cols, self.T) + ["workgroupBarrier();"]
        for c in range(dvp // N):
            step.append("{")
            for kk in range(BKV // K):
                step.append(
                    "  " + mx.load("left", f"pl{kk}", "Ps", f"sg * {M * BKV}u + {kk * K}u", False, BKV)
                )
                step.append("  " + mx.load("right", f"vr{kk}", "KVs", f"{kk * K * dvp + c * N}u", False, dvp))
                step += ["  " + x for x in mx.mma(f"oacc{c}", f"pl{kk}", f"vr{kk}")]
            step.append("}")
        return body + ["workgroupBarrier();"] + self.walk(step)

    def store(self) -> list[str]:
        """O through Ss, N columns at a time, and the log-sum-exp."""
        R, node, N, BKV, dv = self.R, self.node, self.N, self.BKV, self.v.cols
        live = f"r0 + lr < {R.tq}u"
        body = []
        for c in range(self.dvp // N):
            body += ["workgroupBarrier();"]
            body += self.mx.store("Ss", f"sg * {self.M * BKV}u", f"oacc{c}", False, BKV)
            body += ["workgroupBarrier();", f"for (var cc = lh; cc < {N}u; cc = cc + {self.P}u) {{"]
            body += [f"  let col = {c * N}u + cc;", f"  if ({live} && col < {dv}u) {{"]
            body += [
                "    " + R.out.kc.store(node, R.out.index("i", "col"), f"Ss[lr * {BKV}u + cc]"),
                "  }",
                "}",
            ]
        return body + [
            f"if ({live} && lh == 0u) {{",
            "  " + R.out.kc.store(node, R.out.index("i", dv), "lse"),
            "}",
        ]


def forward(kc, node, dims, S, W, BKV, dp, dvp):
    """The forward with both products on subgroup matrices (matrix_plan says when).

    A workgroup of W subgroups owns BQ = W M consecutive query rows of one batch z
    (subgroup g rows g M .. g M + M - 1), staged once as f16 in Qs (zeros past Tq and D).
    Result matrices are opaque (no per-row rescale of an accumulator), so instead of an
    online softmax the kernel walks the keys twice, BKV at a time, each tile staged as
    f16 in KVs: pass 1 computes the scores S = Q K^T (matrices, into the f32 area Ss),
    where invocations apply scale, mask and causality and keep each row's running max
    and sum in f32 (S / M invocations per row, each on every (S/M)-th key, combined at
    the end through Ss) to the row's log-sum-exp; pass 2 recomputes S and writes the
    normalized, dropped-out probabilities exp(s - lse) (x keep) as f16 into Ps, stages V
    into KVs and accumulates O += P V in result matrices (f32), which the end stores
    through Ss to O. Matrix offsets come from the subgroup id, loop counters and
    constants only. Three products instead of two, against no rescaling and f32
    statistics throughout; the probabilities enter P V rounded to f16."""
    f = _Forward(kc, node, dims, S, W, BKV, dp, dvp)
    body = f.stage_queries() + f.row_statistics()
    body += f.pv()
    body += f.store()
    return f.R.head + body, f.R.disp, f.T


class _Backward:
    """A matrix backward kernel's parts (backward() says what it computes): W subgroups
    owning BR = W M rows of one side, tiles of BT rows of the other, each invocation on
    E elements of a BR x BT tile, the head dims padded to whole matrices (dp, dvp), the
    operands X1, X2 (the block's) and Y1, Y2 (the tiles'), and the workgroup arrays."""

    def __init__(self, kc, node, part, dims, S, W, BT, dp, dvp) -> None:
        self.kc, self.node, self.a = kc, node, node.attrs
        M = dims[0]
        self.M, self.N, self.K = dims
        self.BR, self.T, self.BT, self.dp, self.dvp = W * M, W * S, BT, dp, dvp
        self.E = self.BR * BT // self.T  # elements of the tile per invocation
        self.P = S // M
        shapes = logical_shapes(node)
        self.tq, self.tk = shapes[0][-2], shapes[1][-2]
        self.kv = kv = part == "dkv"
        self.R = R = Rows(kc, node, self.tk if kv else self.tq, GRAD_OPERANDS, block=self.BR)
        q, k, v, self.saved, do, self.delta = R.sides[:6]
        self.d, self.dv = q.cols, v.cols
        self.X1, self.X2, self.Y1, self.Y2 = (k, v, q, do) if kv else (q, do, k, v)
        self.mx = sgmat.Matrices(kc, dims, S)
        BR = self.BR
        for name, rows, w in (("X1s", BR, dp), ("X2s", BR, dvp), ("Y1s", BT, dp), ("Y2s", BT, dvp)):
            kc.decls.append(f"var<workgroup> {name}: array<f16, {rows * w}>;")
        kc.decls.append(f"var<workgroup> Ss: array<f32, {BR * BT}>;")
        kc.decls.append(f"var<workgroup> Ds: array<f16, {BR * BT}>;")
        if kv:
            kc.decls.append(f"var<workgroup> Ps: array<f16, {BR * BT}>;")
        # the results: dK and dV, or dQ (its name and padded width)
        self.accs = [("dk", dp), ("dv", dvp)] if kv else [("dq", dp)]
        self.keep = R.seed is not None

    def stage_block(self) -> list[str]:
        """The block's operands staged in X1s and X2s; the result matrices set to 0."""
        BR, dp, dvp, T, mx = self.BR, self.dp, self.dvp, self.T, self.mx
        body = [f"let sg = {mx.subgroup()};", f"var pv: array<f32, {self.E}>;"]
        if self.keep:
            body.append(f"var fv: array<f32, {self.E}>;")
        body += stage(self.X1, "X1s", "r0", BR, dp, self.d, T) + stage(
            self.X2, "X2s", "r0", BR, dvp, self.dv, T
        )
        for name, width in self.accs:
            body += [mx.result(f"{name}{c}") for c in range(width // self.N)]
        return body

    def product(self, left: str, right: str, width: int) -> list[str]:
        """left right^T -> Ss: S or dP of the tile, N columns at a time."""
        mx, M, N, K, BT = self.mx, self.M, self.N, self.K, self.BT
        out = []
        for nb in range(BT // N):
            out += ["{", "  " + mx.result("pacc")]
            for kk in range(width // K):
                lo = f"sg * {M * width}u + {kk * K}u"
                out.append("  " + mx.load("left", f"xl{kk}", left, lo, False, width))
                out.append(
                    "  " + mx.load("right", f"yr{kk}", right, f"{nb * N * width + kk * K}u", True, width)
                )
                out += ["  " + x for x in mx.mma("pacc", f"xl{kk}", f"yr{kk}")]
            out += ["  " + x for x in mx.store("Ss", f"sg * {M * BT}u + {nb * N}u", "pacc", False, BT)]
            out.append("}")
        return out

    def accumulate(self, acc: str, left: str, right: str, width: int) -> list[str]:
        """acc_c += left right, for each N columns c of the result."""
        mx, M, N, K, BT = self.mx, self.M, self.N, self.K, self.BT
        out = []
        for c in range(width // N):
            out.append("{")
            for kk in range(BT // K):
                out.append("  " + mx.load("left", f"al{kk}", left, f"sg * {M * BT}u + {kk * K}u", False, BT))
                ro = f"{kk * K * width + c * N}u"
                out.append("  " + mx.load("right", f"br{kk}", right, ro, False, width))
                out += ["  " + x for x in mx.mma(f"{acc}{c}", f"al{kk}", f"br{kk}")]
            out.append("}")
        return out

    def element(self, lines: list[str]) -> list[str]:
        """lines over this invocation's elements e of the tile: query i, key j."""
        tq, tk, BT = self.tq, self.tk, self.BT
        out = [f"for (var u = 0u; u < {self.E}u; u = u + 1u) {{", f"  let e = li + u * {self.T}u;"]
        out += [f"  let rr = r0 + e / {BT}u; let tt = t0 + e % {BT}u;"]
        i, j = ("tt", "rr") if self.kv else ("rr", "tt")
        out += [f"  let i = min({i}, {tq - 1}u); let j = min({j}, {tk - 1}u);"]
        out += [f"  let live = {i} < {tq}u && {j} < {tk}u;"]
        return out + ["  " + x for x in lines] + ["}"]

    def probabilities(self) -> list[str]:
        """p = exp(s - lse) of an element from S in Ss (and, for dV, p keep into Ps)."""
        R, a = self.R, self.a
        step = [f"var s = Ss[e] * {f32_lit(a['scale'])};"]
        if a["mask"] == "add":
            step.append(f"s = s + {R.mask.at('i', 'j')};")
        step += ["var p = 0.0;", f"if (live && !({R.hidden('i', 'j', 's')})) {{"]
        step += [f"  p = exp(s - {self.saved.at('i', self.saved.cols - 1)});", "}", "pv[u] = p;"]
        if self.keep:  # drawn once per element: the dP pass reads it back
            step.append(f"fv[u] = {R.keep('i', 'j')};")
        if self.kv:
            step.append(f"Ps[e] = f16(p{' * fv[u]' if self.keep else ''});")
        return step

    def ds(self) -> list[str]:
        """ds = p (dp keep - delta) of an element from dP in Ss, as f16 into Ds."""
        step = ["var dp = Ss[e];"] + (["dp = dp * fv[u];"] if self.keep else [])
        return step + [f"Ds[e] = f16(pv[u] * (dp - {self.delta.at('i', 0)}));"]

    def tiles(self) -> list[str]:
        """The loop over the other side's tiles: stage, S, p, dP, dS, the products."""
        a, BR, BT, tq, tk, dp, dvp, T = self.a, self.BR, self.BT, self.tq, self.tk, self.dp, self.dvp, self.T
        if self.kv:  # queries before the block's first key see none of its keys
            lo, hi = (f"(r0 / {BT}u) * {BT}u" if a["causal"] else "0u"), f"{tq}u"
        else:
            lo, hi = "0u", (f"min(min(r0 + {BR}u, {tq}u), {tk}u)" if a["causal"] else f"{tk}u")
        loop = ["workgroupBarrier();"]
        loop += stage(self.Y1, "Y1s", "t0", BT, dp, self.d, T) + stage(
            self.Y2, "Y2s", "t0", BT, dvp, self.dv, T
        )
        loop += ["workgroupBarrier();"] + self.product("X1s", "Y1s", dp) + ["workgroupBarrier();"]
        loop += self.element(self.probabilities()) + ["workgroupBarrier();"]
        loop += self.product("X2s", "Y2s", dvp) + ["workgroupBarrier();"]
        loop += self.element(self.ds()) + ["workgroupBarrier();"]
        if self.kv:
            loop += self.accumulate("dk", "Ds", "Y1s", dp) + self.accumulate("dv", "Ps", "Y2s", dvp)
        else:
            loop += self.accumulate("dq", "Ds", "Y1s", dp)
        return [f"for (var t0 = {lo}; t0 < {hi}; t0 = t0 + {BT}u) {{"] + ["  " + x for x in loop] + ["}"]

    def store(self) -> list[str]:
        """The results through Ss, N columns at a time: dK (or dQ) times scale, then dV."""
        R, N, P, BT = self.R, self.N, self.P, self.BT
        body = [f"let lr = li / {P}u;", f"let lh = li % {P}u;", "let rw = r0 + lr;"]
        first = 0
        for name, width in self.accs:
            cols, mul = (self.d, f" * {f32_lit(self.a['scale'])}") if name != "dv" else (self.dv, "")
            for c in range(width // N):
                body += ["workgroupBarrier();"]
                body += self.mx.store("Ss", f"sg * {self.M * BT}u", f"{name}{c}", False, BT)
                body += ["workgroupBarrier();", f"for (var cc = lh; cc < {N}u; cc = cc + {P}u) {{"]
                body += [f"  let col = {c * N}u + cc;", f"  if (rw < {R.rows}u && col < {cols}u) {{"]
                at = R.out.index("rw", f"(col + {first}u)" if first else "col")
                body += ["    " + self.kc.store(self.node, at, f"Ss[lr * {BT}u + cc]{mul}"), "  }", "}"]
            first += self.d
        return body


def backward(kc, node, part, dims, S, W, BT, dp, dvp):
    """A backward kernel with its products on subgroup matrices (matrix_plan says when).

    The workgroup's W subgroups own BR = W M rows of one side (queries for dQ, keys for
    dK and dV) and stage its two operands once as f16: X1, X2 = (q, dO) or (k, v). The
    other side's two, Y1, Y2 = (k, v) or (q, dO), come BT rows a tile. Both kernels
    then compute, per tile, S = X1 Y1^T and dP = X2 Y2^T on matrices (for dK/dV these
    are the transposes, keys by queries) through the f32 area Ss, and the invocations,
    each on fixed elements of the BR x BT tile, recompute p = exp(s - lse) and
    ds = p (dp keep - delta) in f32 (mask, causality and dropout as the plain kernels),
    writing ds (and, for dV, p keep) as f16; then dQ += dS K, or dK += dS^T Q and
    dV += (P keep)^T dO, accumulate in result matrices, stored through Ss at the end."""
    b = _Backward(kc, node, part, dims, S, W, BT, dp, dvp)
    body = b.stage_block() + b.tiles()
    body += b.store()
    return b.R.head + body, b.R.disp, b.T
