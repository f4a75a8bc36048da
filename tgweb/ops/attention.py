"""Fused scaled dot-product attention (torch.nn.functional.scaled_dot_product_attention).

q [..., Tq, D], k [..., Tk, D], v [..., Tk, Dv]; the leading dims (and a mask's)
broadcast. Score s_ij = scale * q_i . k_j (+ an additive mask); key j is visible to
query i unless is_causal hides it (j > i, top-left aligned as torch.tril), a
boolean mask is False there, or s_ij is -inf. A row with no visible key gives 0, as
PyTorch does.

Kinds (attrs {causal, scale, mask: None | "bool" | "add", dropout, stream}; inputs
(q, k, v) + (mask,) if mask + (seed,) if dropout, after the operands listed):

- ``sdpa``: -> [L..., Tq, Dv + 1]: the output O (columns 0..Dv-1) and each row's
  log-sum-exp of its visible scores (column Dv; +inf for a row with none), what the
  backward recomputes the probabilities from. The kernel walks the keys with an
  online softmax (one running max and sum per row) and never stores a Tq x Tk tensor.
- ``sdpa_grad_q`` (q, k, v, P, dO, delta, ...) -> dQ [L..., Tq, D], where P is the
  ``sdpa`` result (or its lse column alone: the kernels read P's last column) and
  delta = rowsum(dO * O) [L..., Tq, 1] (FlashAttention-2).
- ``sdpa_grad_kv`` (the same inputs) -> [L..., Tk, D + Dv]: dK then dV per key row.

In a mixed-precision graph (tgweb.ops.half) the kernels read q, k, v and dO from their
f16 copies (those are what the backward keeps); scores, the running max and sum, the
log-sum-exp and the accumulators stay f32, and so do the results.

L is the broadcast of the leading dims; gradients are summed down to each operand's
shape afterwards. Dropout drops p_ij after the softmax with the counter-based stream
of tgweb.ops.random: p_ij is kept iff uniform(seed, stream, (z * Tq + i) * Tk + j) >=
dropout (z the flat index into L), and every kernel draws the same bits. No gradient
flows to attn_mask.

The kernels give each invocation one row (a query, or a key for dK/dV) and loop over
the other side; on the GPU class the workgroup's rows share tiles of that side staged
in workgroup memory, on the CPU class (emulators: barriers are expensive) every
invocation reads straight from memory. codegen/target.py's "attention" knobs.

Subgroup matrices (codegen/sgmat.py): in a mixed graph the forward runs both products
on matrices (_emit_forward_matrices) and each backward kernel its S, dP and gradient
products (_emit_grad_matrices) where matrix_plan finds a layout, that is where
(1) the target has an f16 -> f32 configuration (M, N, K) (sgmat.config: the feature,
subgroups, one subgroup size S; or the emulated matrices of the tests), (2) q, k and v
are f16 copies (precision="mixed"), (3) S is a multiple of M and M N of S, and (4) a
block of MATRIX_BLOCKS fits 16 KiB of workgroup memory with the head dims padded to
whole matrices: up to 128 for the forward, 64 for the backward with 16 x 16 x 16
(past them the plain kernel, which the others' results do not depend on: each kernel
reads only q, k, v, dO and the lse column). Every mask (bool or
additive, broadcast), causality, dropout (the same stream and bits as the plain
kernel), odd lengths and head dims, leading dims and strided views take it. On the
H200 (16 x 16 x 16, S = 32) at D = Dv = 64: 2 subgroups, 32 query rows and 32-key tiles
per workgroup, 14,336 bytes (Qs 4096, KVs 4096, Ss 4096, Ps 2048); D = 128: 2
subgroups, 16-key tiles, 15,360 bytes. The backward at D = Dv = 64: 2 subgroups of 32
rows (queries for dQ, keys for dK and dV) and tiles of 16 of the other side, 15,360
bytes (dQ) and 16,384 (dK, dV: grad_matrix_bytes).
"""

from __future__ import annotations

import math

from ..codegen import sgmat
from ..codegen.common import (
    add_idx,
    ceil_div,
    digits,
    f32_lit,
    grid,
    group_size,
    linear_group,
    mul_idx,
    udiv,
    umod,
)
from ..codegen.common import strides as row_major
from ..codegen.kernel import stored_half
from ..ir import NO_GRAD, OpError, Tensor, make, prod, register
from . import random as rnd
from .base import as_tensor, broadcast_shapes, op
from .half import half

MAX_HEAD_DIM = 256
N_OPERANDS = {"sdpa": 3, "sdpa_grad_q": 6, "sdpa_grad_kv": 6}
NEG_INF, POS_INF = "bitcast<f32>(0xff800000u)", "bitcast<f32>(0x7f800000u)"
WORKGROUP_BYTES = 16384  # WebGPU's default maxComputeWorkgroupStorageSize: any adapter runs it


# ---------------------------------------------------------------- shapes


def _extras(kind: str, attrs) -> tuple[int | None, int | None]:
    """Input positions of the mask and of the seed (None where absent)."""
    at = N_OPERANDS[kind]
    mask = at if attrs["mask"] else None
    seed = at + (1 if attrs["mask"] else 0) if attrs["dropout"] else None
    return mask, seed


def _lead(q_shape, k_shape, v_shape, mask_shape=None) -> tuple[int, ...]:
    shapes = [q_shape[:-2], k_shape[:-2], v_shape[:-2]] + ([mask_shape[:-2]] if mask_shape else [])
    return broadcast_shapes(*shapes)


def _check_operands(q, k, v, mask) -> tuple[int, ...]:
    for name, x in (("q", q), ("k", k), ("v", v)):
        if x.dtype not in ("f32", "f16") or x.ndim < 2:
            raise OpError(
                f"{name} must be float (f32) of shape [..., T, D], got {x.dtype} of shape {x.shape}"
            )
    if q.shape[-1] != k.shape[-1] or k.shape[-2] != v.shape[-2]:
        raise OpError(
            f"q {q.shape}, k {k.shape} and v {v.shape} do not fit: q and k need the same last dim, "
            "k and v the same number of keys"
        )
    if max(q.shape[-1], v.shape[-1]) > MAX_HEAD_DIM:
        raise OpError(f"head dims up to {MAX_HEAD_DIM} are supported, got q {q.shape} and v {v.shape}")
    try:
        lead = _lead(q.shape, k.shape, v.shape, mask.shape if mask is not None else None)
        if mask is not None:
            broadcast_shapes(mask.shape[-2:], (q.shape[-2], k.shape[-2]))
            if len(mask.shape) - 2 > len(lead):
                raise OpError("")
    except OpError:
        shapes = f"q {q.shape}, k {k.shape}, v {v.shape}" + (
            f", mask {mask.shape}" if mask is not None else ""
        )
        raise OpError(f"the shapes do not broadcast: {shapes}") from None
    return lead


def _infer(kind):
    def infer(ins, attrs):
        q, k, v = ins[:3]
        mpos, spos = _extras(kind, attrs)
        lead = _check_operands(q, k, v, ins[mpos] if mpos is not None else None)
        if spos is not None and (ins[spos].shape != () or ins[spos].dtype != "i32"):
            raise OpError("the seed must be an i32 scalar")
        tq, tk, d, dv = q.shape[-2], k.shape[-2], q.shape[-1], v.shape[-1]
        shape = {"sdpa": (tq, dv + 1), "sdpa_grad_q": (tq, d), "sdpa_grad_kv": (tk, d + dv)}[kind]
        return lead + shape, "f32"

    return infer


# ---------------------------------------------------------------- the math, for NumPy and PyTorch


class _NumPy:
    def __init__(self, ctx):
        self.np, self.f, self.ctx = ctx.np, ctx.f, ctx

    def arr(self, a):
        return self.np.asarray(a).astype(self.f)

    def swap(self, a):
        return self.np.swapaxes(a, -1, -2)

    def tril(self, tq, tk):
        return self.np.tril(self.np.ones((tq, tk), bool))

    def uniform(self, seed, stream, n):
        return rnd._np_uniform(self.ctx, seed, stream, self.np.arange(n, dtype=self.np.uint64))

    def rowmax(self, a):
        return a.max(-1, keepdims=True)

    def rowsum(self, a):
        return a.sum(-1, keepdims=True)

    def __getattr__(self, name):  # exp, log, where, isinf, concatenate, ...
        return getattr(self.np, name)


class _Torch:
    def __init__(self, tc):
        self.torch, self.tc = tc.torch, tc

    def arr(self, a):
        return a.to(self.tc.float)

    def swap(self, a):
        return a.transpose(-1, -2)

    def tril(self, tq, tk):
        return self.torch.ones(tq, tk, dtype=self.torch.bool, device=self.tc.device).tril()

    def uniform(self, seed, stream, n):
        i = self.torch.arange(n, dtype=self.torch.int64, device=self.tc.device)
        return rnd._torch_uniform(self.tc, seed, stream, i).to(self.tc.float)

    def rowmax(self, a):
        return a.amax(-1, keepdim=True)

    def rowsum(self, a):
        return a.sum(-1, keepdim=True)

    def concatenate(self, xs, axis):
        return self.torch.cat(xs, axis)

    def __getattr__(self, name):  # exp, log, where, isinf, ...
        return getattr(self.torch, name)


def _scores(xp, kind, args, t):
    """(s with hidden entries -inf, the dropout factor per entry, lead) for the node's inputs."""
    a = t.attrs
    q, k = xp.arr(args[0]), xp.arr(args[1])
    mpos, spos = _extras(kind, a)
    s = (q @ xp.swap(k)) * a["scale"]
    tq, tk = s.shape[-2], s.shape[-1]
    vis = xp.tril(tq, tk) if a["causal"] else None
    if a["mask"] == "add":
        s = s + xp.arr(args[mpos])
    elif a["mask"] == "bool":
        m = args[mpos] != 0
        vis = m if vis is None else (m & vis)
    lead = _lead(args[0].shape, args[1].shape, args[2].shape, args[mpos].shape if mpos is not None else None)
    s = xp.broadcast_to(s, lead + (tq, tk))  # v's and the mask's leading dims too
    if vis is not None:
        s = xp.where(vis, s, -math.inf)
    keep = 1.0
    if a["dropout"]:
        u = xp.uniform(args[spos], a["stream"], prod(lead) * tq * tk).reshape(lead + (tq, tk))
        keep = xp.where(u >= a["dropout"], 1.0 / (1.0 - a["dropout"]), 0.0)
    return s, keep


def _forward(xp, args, t):
    s, keep = _scores(xp, "sdpa", args, t)
    m = xp.rowmax(s)
    m = xp.where(xp.isinf(m), 0.0, m)  # a row with no visible key
    e = xp.exp(s - m)
    total = xp.rowsum(e)
    some = total > 0
    lse = xp.where(some, m + xp.log(xp.where(some, total, 1.0)), math.inf)
    out = (e / xp.where(some, total, 1.0) * keep) @ xp.arr(args[2])
    return xp.concatenate([out, lse], -1)


def _backward(xp, kind, args, t):
    """dQ, or dK and dV side by side, from the saved log-sum-exp (FlashAttention-2)."""
    s, keep = _scores(xp, kind, args, t)
    v, lse, do, delta = (xp.arr(args[j]) for j in (2, 3, 4, 5))
    lse = lse[..., -1:]
    p = xp.exp(s - lse)  # 0 where s is -inf or the row has no visible key (lse = inf)
    ds = p * ((do @ xp.swap(v)) * keep - delta)
    if kind == "sdpa_grad_q":
        return (ds @ xp.arr(args[1])) * t.attrs["scale"]
    dk = (xp.swap(ds) @ xp.arr(args[0])) * t.attrs["scale"]
    return xp.concatenate([dk, xp.swap(p * keep) @ do], -1)


# ---------------------------------------------------------------- WGSL


class _Side:
    """A [L..., rows, cols] tensor as a kernel reads or writes it through strides: batch
    z's base, then row r and column c (broadcast dims have stride 0)."""

    def __init__(self, kc, x, shape, st, lead, name: str, off: int = 0) -> None:
        self.kc, self.x, self.name, self.off = kc, x, name, off
        self.rows, self.cols = shape[-2], shape[-1]
        self.rs = st[-2] if shape[-2] > 1 else 0
        self.cs = st[-1] if shape[-1] > 1 else 0
        off = len(lead) - (len(shape) - 2)
        self.bst = [0 if d < off or shape[d - off] == 1 else st[d - off] for d in range(len(lead))]
        self.lead = lead

    def setup(self) -> str:
        coords = digits("z", self.lead)
        terms = [mul_idx(c, s) for c, s, n in zip(coords, self.bst, self.lead) if s and n > 1]
        return f"let {self.name} = {add_idx(f'{self.off}u', *terms)};"

    def index(self, r: str, c) -> str:
        col = f"{c * self.cs}u" if isinstance(c, int) else mul_idx(c, self.cs)
        return add_idx(self.name, mul_idx(r, self.rs), col)

    def at(self, r: str, c) -> str:
        return self.kc.load(self.x, self.index(r, c))

    def chunk(self, r: str, c: int) -> str:
        """Columns 4c .. 4c+3 of row r as a vec4 (zeros past the last column)."""
        parts = [self.at(r, 4 * c + t) if 4 * c + t < self.cols else "0.0" for t in range(4)]
        return f"vec4<f32>({', '.join(parts)})"


def _sides(kc, node, lead):
    views = node.attrs.get("views", {})
    out = []
    for j, x in enumerate(node.inputs):
        v = views.get(j)
        shape, st, off = (tuple(v[0]), tuple(v[1]), v[2]) if v else (x.shape, row_major(x.shape), 0)
        out.append(_Side(kc, x, tuple(shape), tuple(st), lead, f"base{j}", off) if len(shape) >= 2 else x)
    cshape, cst = node.attrs.get("out_view") or (tuple(node.shape), tuple(row_major(node.shape)))
    return out, _Side(kc, node, tuple(cshape), tuple(cst), lead, "obase")


def _logical_shapes(node):
    views = node.attrs.get("views", {})
    return [tuple(views[j][0]) if j in views else tuple(x.shape) for j, x in enumerate(node.inputs)]


def _w4(n: int) -> int:
    return ceil_div(n, 4)


class _Walk:
    """The loop of a row's invocation over the other side's rows j in [lo, hi): with
    tile > 0 the workgroup stages `tile` of them at a time in workgroup memory (lo and hi
    uniform over the workgroup), else every invocation reads them from memory."""

    def __init__(self, kc, tile: int, wg: int, vecs, scalars) -> None:
        self.kc, self.wg, self.vecs, self.scalars = kc, wg, vecs, scalars
        words = sum(4 * _w4(s.cols) for s in vecs) + len(scalars)
        self.tile = max(1, min(tile, WORKGROUP_BYTES // (4 * words))) if tile else 0
        if self.tile:
            for i, s in enumerate(vecs):
                kc.decls.append(f"var<workgroup> tv{i}: array<vec4<f32>, {self.tile * _w4(s.cols)}>;")
            for i in range(len(scalars)):
                kc.decls.append(f"var<workgroup> ts{i}: array<f32, {self.tile}>;")

    def vec(self, i: int, c: int) -> str:
        s = self.vecs[i]
        return f"tv{i}[jj * {_w4(s.cols)}u + {c}u]" if self.tile else s.chunk("j", c)

    def scalar(self, i: int) -> str:
        s, col = self.scalars[i]
        return f"ts{i}[jj]" if self.tile else s.at("j", col)

    def lines(self, lo: str, hi: str, body: list[str]) -> list[str]:
        if not self.tile:
            return [f"for (var j = {lo}; j < {hi}; j = j + 1u) {{"] + ["  " + b for b in body] + ["}"]
        t = self.tile
        out = [f"for (var j0 = {lo}; j0 < {hi}; j0 = j0 + {t}u) {{"]
        for i, s in enumerate(self.vecs):
            w = _w4(s.cols)
            parts = []
            for q in range(4):
                col = f"(cc * 4u + {q}u)"
                ld = s.at("jr", col)
                parts.append(ld if s.cols % 4 == 0 else f"select(0.0, {ld}, {col} < {s.cols}u)")
            out += [
                f"  for (var e = li; e < {t * w}u; e = e + {self.wg}u) {{",
                f"    let jr = j0 + {udiv('e', w)}; let cc = {umod('e', w)};",
                "    var x = vec4<f32>();",
                f"    if (jr < {hi}) {{ x = vec4<f32>({', '.join(parts)}); }}",
                f"    tv{i}[e] = x;",
                "  }",
            ]
        for i, (s, col) in enumerate(self.scalars):
            out += [
                f"  for (var e = li; e < {t}u; e = e + {self.wg}u) {{",
                f"    var x = 0.0; if (j0 + e < {hi}) {{ x = {s.at('(j0 + e)', col)}; }} ts{i}[e] = x;",
                "  }",
            ]
        out += ["  workgroupBarrier();", f"  let n = min({t}u, {hi} - j0);"]
        out += ["  for (var jj = 0u; jj < n; jj = jj + 1u) {", "    let j = j0 + jj;"]
        return out + ["    " + b for b in body] + ["  }", "  workgroupBarrier();", "}"]


def _dot(a: list[str], b: list[str]) -> str:
    return " + ".join(f"dot({x}, {y})" for x, y in zip(a, b))


def _regs(side: _Side, prefix: str, r: str, scale: float = 1.0) -> tuple[list[str], list[str]]:
    """Row r of side in vec4 registers (times scale): (lines, names)."""
    names = [f"{prefix}{c}" for c in range(_w4(side.cols))]
    mul = "" if scale == 1.0 else f" * {f32_lit(scale)}"
    return [f"let {n} = {side.chunk(r, c)}{mul};" for c, n in enumerate(names)], names


def _accs(prefix: str, n: int) -> tuple[list[str], list[str]]:
    names = [f"{prefix}{c}" for c in range(_w4(n))]
    return [f"var {a} = vec4<f32>();" for a in names], names


def _stores(out: _Side, r: str, accs: list[str], cols: int, first: int = 0, mul: str = "") -> list[str]:
    return [
        out.kc.store(out.x, out.index(r, first + 4 * c + t), f"{a}[{t}]{mul}")
        for c, a in enumerate(accs)
        for t in range(4)
        if 4 * c + t < cols
    ]


class _Rows:
    """What every attention kernel shares: one invocation per row of `rows` per batch z,
    a workgroup per `wg` consecutive rows of one batch (r0 the first), r the row (clamped
    where barriers forbid returning early), the mask and dropout of pair (query, key)."""

    def __init__(self, kc, node, rows: int, block: int = 0) -> None:
        self.kc, self.node, a = kc, node, node.attrs
        shapes = _logical_shapes(node)
        mpos, spos = _extras(node.kind, a)
        self.lead = _lead(*shapes[:3], shapes[mpos] if mpos is not None else None)
        self.sides, self.out = _sides(kc, node, self.lead)
        self.mask = self.sides[mpos] if mpos is not None else None
        self.seed = node.inputs[spos] if spos is not None else None
        self.tq, self.tk = shapes[0][-2], shapes[1][-2]
        tile = block or kc.target.knob("attention_tile")
        nb, most = prod(self.lead), block or kc.target.knob("attention_rows")
        self.wg = most if tile else group_size(nb * rows, most)
        self.tile, self.rows = tile, rows
        nblk = ceil_div(rows, self.wg)
        self.disp = grid(nb * nblk)
        self.head = [f"let g = {linear_group(self.disp[0])};"]
        if self.disp[0] * self.disp[1] != nb * nblk:
            self.head.append(f"if (g >= {nb * nblk}u) {{ return; }}")
        self.head += [f"let z = {udiv('g', nblk)};", f"let r0 = {mul_idx(umod('g', nblk), self.wg)};"]
        if tile:
            self.head.append(f"let r = min(r0 + li, {rows - 1}u);")
        else:
            self.head += ["let r = r0 + li;", f"if (r >= {rows}u) {{ return; }}"]
        self.head += [s.setup() for s in self.sides + [self.out] if isinstance(s, _Side)]
        if self.seed is not None:
            key = rnd.key_wgsl(kc, kc.load(self.seed, "0u"), a["stream"])
            self.head.append(f"let dkey = {key};")

    def hidden(self, i: str, j: str, s: str) -> str:
        """The condition under which key j is hidden from query i (s: the score)."""
        conds = [f"{s} == {NEG_INF}"]
        if self.node.attrs["causal"]:
            conds.append(f"{j} > {i}")
        if self.node.attrs["mask"] == "bool":
            conds.append(f"!{self.mask.at(i, j)}")
        return " || ".join(conds)

    def score(self, a: list[str], b: list[str], i: str, j: str) -> list[str]:
        lines = [f"var s = {_dot(a, b)};"]
        if self.node.attrs["mask"] == "add":
            lines.append(f"s = s + {self.mask.at(i, j)};")
        return lines + [f"if ({self.hidden(i, j, 's')}) {{ continue; }}"]

    def keep(self, i: str, j: str) -> str:
        """The dropout factor of pair (i, j): 0, or 1 / (1 - p)."""
        p = self.node.attrs["dropout"]
        u = f"tg_uniform(dkey, (z * {self.tq}u + {i}) * {self.tk}u + {j})"
        return f"select(0.0, {f32_lit(1.0 / (1.0 - p))}, {u} >= {f32_lit(p)})"

    def live(self, lines: list[str]) -> list[str]:
        """lines run only by invocations of a real row."""
        if not self.tile:
            return lines
        return [f"if (r0 + li < {self.rows}u) {{"] + ["  " + x for x in lines] + ["}"]

    def kernel(self, body: list[str]):
        return self.head + body, self.disp, self.wg


def _emit_forward(kc, node):
    a = node.attrs
    plan = matrix_plan(kc, node)
    if plan:
        return _emit_forward_matrices(kc, node, *plan)
    R = _Rows(kc, node, _logical_shapes(node)[0][-2])
    q, k, v = R.sides[:3]
    walk = _Walk(kc, R.tile, R.wg, [k, v], [])
    body, qs = _regs(q, "q", "r", a["scale"])
    acc_lines, accs = _accs("acc", v.cols)
    body += acc_lines + [f"var m = {NEG_INF};", "var l = 0.0;"]
    kb = [walk.vec(0, c) for c in range(len(qs))]
    step = R.score(qs, kb, "r", "j")
    step += ["if (s > m) {", "  let c = exp(m - s);", "  l = l * c;"]
    step += [f"  {x} = {x} * c;" for x in accs] + ["  m = s;", "}", "let p = exp(s - m);", "l = l + p;"]
    pk = "p"
    if R.seed is not None:
        step.append(f"let pk = p * {R.keep('r', 'j')};")
        pk = "pk"
    step += [f"{x} = {x} + {pk} * {walk.vec(1, c)};" for c, x in enumerate(accs)]
    hi = f"{R.tk}u"
    if a["causal"]:  # keys past the workgroup's (or the row's) last query are hidden
        last = f"min(r0 + {R.wg - 1}u, {R.rows - 1}u)" if R.tile else "r"
        hi = f"min({last} + 1u, {R.tk}u)"
    body += walk.lines("0u", hi, step)
    body += ["let inv = select(0.0, 1.0 / l, l > 0.0);"]
    body += R.live(
        _stores(R.out, "r", accs, v.cols, mul=" * inv")
        + [R.out.kc.store(node, R.out.index("r", v.cols), f"select({POS_INF}, m + log(l), l > 0.0)")]
    )
    return R.kernel(body)


def _emit_grad_q(kc, node):
    a = node.attrs
    plan = matrix_plan(kc, node)
    if plan:
        return _emit_grad_matrices(kc, node, *plan)
    R = _Rows(kc, node, _logical_shapes(node)[0][-2])
    q, k, v, saved, do, delta = R.sides[:6]
    walk = _Walk(kc, R.tile, R.wg, [k, v], [])
    body, qs = _regs(q, "q", "r", a["scale"])
    lines, dos = _regs(do, "o", "r")
    acc_lines, accs = _accs("dq", q.cols)
    body += lines + acc_lines
    body += [f"let lse = {saved.at('r', saved.cols - 1)};", f"let delta = {delta.at('r', 0)};"]
    step = R.score(qs, [walk.vec(0, c) for c in range(len(qs))], "r", "j")
    step += ["let p = exp(s - lse);", f"var dp = {_dot(dos, [walk.vec(1, c) for c in range(len(dos))])};"]
    if R.seed is not None:
        step.append(f"dp = dp * {R.keep('r', 'j')};")
    step.append("let ds = p * (dp - delta);")
    step += [f"{x} = {x} + ds * {walk.vec(0, c)};" for c, x in enumerate(accs)]
    hi = f"{R.tk}u"
    if a["causal"]:
        last = f"min(r0 + {R.wg - 1}u, {R.rows - 1}u)" if R.tile else "r"
        hi = f"min({last} + 1u, {R.tk}u)"
    body += walk.lines("0u", hi, step)
    body += R.live(_stores(R.out, "r", accs, q.cols, mul=f" * {f32_lit(a['scale'])}"))
    return R.kernel(body)


def _emit_grad_kv(kc, node):
    a = node.attrs
    plan = matrix_plan(kc, node)
    if plan:
        return _emit_grad_matrices(kc, node, *plan)
    R = _Rows(kc, node, _logical_shapes(node)[1][-2])
    q, k, v, saved, do, delta = R.sides[:6]
    walk = _Walk(kc, R.tile, R.wg, [q, do], [(saved, saved.cols - 1), (delta, 0)])
    body, ks = _regs(k, "k", "r", a["scale"])
    lines, vs = _regs(v, "v", "r")
    dk_lines, dks = _accs("dk", k.cols)
    dv_lines, dvs = _accs("dv", v.cols)
    body += lines + dk_lines + dv_lines
    step = R.score(ks, [walk.vec(0, c) for c in range(len(ks))], "j", "r")
    step += [f"let p = exp(s - {walk.scalar(0)});"]
    step += [f"var dp = {_dot(vs, [walk.vec(1, c) for c in range(len(vs))])};"]
    pk = "p"
    if R.seed is not None:
        step += [f"let f = {R.keep('j', 'r')};", "let pk = p * f;", "dp = dp * f;"]
        pk = "pk"
    step += [f"{x} = {x} + {pk} * {walk.vec(1, c)};" for c, x in enumerate(dvs)]
    step.append(f"let ds = p * (dp - {walk.scalar(1)});")
    step += [f"{x} = {x} + ds * {walk.vec(0, c)};" for c, x in enumerate(dks)]
    lo = ("r0" if R.tile else "r") if a["causal"] else "0u"  # queries before the key do not see it
    body += walk.lines(lo, f"{R.tq}u", step)
    stores = _stores(R.out, "r", dks, k.cols, mul=f" * {f32_lit(a['scale'])}")
    body += R.live(stores + _stores(R.out, "r", dvs, v.cols, first=k.cols))
    return R.kernel(body)


# ---------------------------------------------------------------- on subgroup matrices

# (subgroups per workgroup, keys per tile), most preferred first: the first whose
# workgroup memory fits WORKGROUP_BYTES for the head dims is taken
MATRIX_BLOCKS = ((4, 32), (2, 32), (4, 16), (2, 16), (1, 32), (1, 16))


def matrix_bytes(W: int, BKV: int, dp: int, dvp: int, M: int) -> int:
    """Workgroup memory of the matrix forward: Q's block (W M rows of dp, f16), one tile
    of K or V (BKV rows, f16), the scores (f32) and the probabilities (f16) of the block."""
    BQ = W * M
    return 2 * BQ * dp + 2 * BKV * max(dp, dvp) + 4 * BQ * BKV + 2 * BQ * BKV


def grad_matrix_bytes(kind: str, W: int, BT: int, dp: int, dvp: int, M: int) -> int:
    """Workgroup memory of a backward kernel on matrices: the block's two operands (W M
    rows of dp and dvp, f16), one tile of the other side's two (BT rows, f16), the scores
    or dP (f32), dS (f16) and, for dK/dV, the dropped-out probabilities (f16)."""
    BR = W * M
    return 2 * (BR + BT) * (dp + dvp) + 4 * BR * BT + 2 * BR * BT * (2 if kind == "sdpa_grad_kv" else 1)


def matrix_plan(kc, node):
    """(dims, S, W, BT, dp, dvp) of a kernel on subgroup matrices, or None where the plain
    kernel runs: the target has no f16 -> f32 configuration (codegen/sgmat.py), q, k, v
    (and dO) are not f16 copies (precision="mixed"), the subgroup size S is not a
    multiple of the configuration's M, or no block of MATRIX_BLOCKS (W subgroups, BT
    rows of the other side per tile) fits 16 KiB with the head dims padded to whole
    matrices (the forward: up to 128 with 16 x 16 x 16; the backward: up to 64)."""
    dims = sgmat.config(kc.target)
    operands = node.inputs[:3] if node.kind == "sdpa" else node.inputs[:3] + node.inputs[4:5]
    if dims is None or not all(stored_half(x) for x in operands):
        return None
    M, N, K = dims
    S = sgmat.subgroup_size(kc.target)
    shapes = _logical_shapes(node)
    d, dv = shapes[0][-1], shapes[2][-1]
    if S % M or (M * N) % S:
        return None
    if node.kind == "sdpa":
        dp, dvp = ceil_div(d, K) * K, ceil_div(dv, N) * N
    else:  # both dims are contracted (S, dP) and produced (dQ, dK, dV)
        dp, dvp = ceil_div(d, max(N, K)) * max(N, K), ceil_div(dv, max(N, K)) * max(N, K)
    for W, BT in MATRIX_BLOCKS:
        # the forward's row statistics (2 per invocation) pass through its M x BT of Ss
        if W * S > 256 or BT % N or BT % K or (M * BT) % S or 2 * S > M * BT:
            continue
        if node.kind == "sdpa":
            used = matrix_bytes(W, BT, dp, dvp, M)
        else:
            used = grad_matrix_bytes(node.kind, W, BT, dp, dvp, M)
        if used <= WORKGROUP_BYTES:
            return dims, S, W, BT, dp, dvp
    return None


def _stage(side, arr: str, first: str, rows: int, width: int, cols: int, T: int) -> list[str]:
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


def _emit_forward_matrices(kc, node, dims, S, W, BKV, dp, dvp):
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
    a = node.attrs
    M, N, K = dims
    BQ, T, P = W * M, W * S, S // M
    R = _Rows(kc, node, _logical_shapes(node)[0][-2], block=BQ)
    q, k, v = R.sides[:3]
    d, dv = q.cols, v.cols
    mx = sgmat.Matrices(kc, dims, S)
    kc.decls.append(f"var<workgroup> Qs: array<f16, {BQ * dp}>;")
    kc.decls.append(f"var<workgroup> KVs: array<f16, {BKV * max(dp, dvp)}>;")
    kc.decls.append(f"var<workgroup> Ss: array<f32, {BQ * BKV}>;")
    kc.decls.append(f"var<workgroup> Ps: array<f16, {BQ * BKV}>;")
    tq, tk = R.tq, R.tk
    body = [f"let sg = {mx.subgroup()};", f"let lr = li / {P}u;", f"let lh = li % {P}u;"]
    body.append(f"let i = min(r0 + lr, {tq - 1}u);")  # this invocation's query row (clamped)

    body += _stage(q, "Qs", "r0", BQ, dp, d, T)
    hi = f"{tk}u"
    if a["causal"]:  # keys past the block's last query are hidden from all its rows
        hi = f"min(min(r0 + {BQ}u, {tq}u), {tk}u)"
    body.append(f"let hi = {hi};")

    def scores() -> list[str]:  # S of the tile: each subgroup its M rows, N keys at a time
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

    def score(j: str) -> list[str]:
        out = [f"var s = Ss[lr * {BKV}u + jj] * {f32_lit(a['scale'])};"]
        if a["mask"] == "add":
            out.append(f"s = s + {R.mask.at('i', j)};")
        return out

    def walk(inner: list[str]) -> list[str]:
        out = [f"for (var j0 = 0u; j0 < hi; j0 = j0 + {BKV}u) {{", "  workgroupBarrier();"]
        out += ["  " + x for x in _stage(k, "KVs", "j0", BKV, dp, d, T)]
        out += ["  workgroupBarrier();"] + ["  " + x for x in scores()] + ["  workgroupBarrier();"]
        out += [f"  let n = min({BKV}u, hi - j0);"]
        return out + ["  " + x for x in inner] + ["}"]

    # pass 1: each row's max and sum
    body += [f"var m = {NEG_INF};", "var l = 0.0;"]
    # each row's keys in an order rotated by the row, so that the invocations of a
    # subgroup (rows BKV words apart in Ss) read different banks at once
    rotated = f"let jj = (lh + {P}u * (t + lr)) % {BKV}u;"
    step = [f"for (var t = 0u; t < {BKV // P}u; t = t + 1u) {{", "  " + rotated]
    step += ["  if (jj >= n) { continue; }", "  let j = j0 + jj;"]
    step += ["  " + x for x in score("j")]
    step += [f"  if ({R.hidden('i', 'j', 's')}) {{ continue; }}"]
    step += ["  if (s > m) { l = l * exp(m - s); m = s; }", "  l = l + exp(s - m);", "}"]
    body += walk(step)
    # the S / M partial statistics of a row combined through Ss
    body += ["workgroupBarrier();", "Ss[li] = m;", f"Ss[{T}u + li] = l;", "workgroupBarrier();"]
    body += [f"var mm = {NEG_INF};"]
    body += [f"for (var t = 0u; t < {P}u; t = t + 1u) {{ mm = max(mm, Ss[lr * {P}u + t]); }}"]
    body += ["var ll = 0.0;", f"for (var t = 0u; t < {P}u; t = t + 1u) {{"]
    body += [
        f"  let mt = Ss[lr * {P}u + t];",
        f"  if (mt > {NEG_INF}) {{ ll = ll + Ss[{T}u + lr * {P}u + t] * exp(mt - mm); }}",
    ]
    body += ["}", f"let lse = select({POS_INF}, mm + log(ll), ll > 0.0);"]
    # pass 2: P = exp(s - lse) (dropped out) as f16, O += P V
    body += [mx.result(f"oacc{c}") for c in range(dvp // N)]
    step = [f"for (var t = 0u; t < {BKV // P}u; t = t + 1u) {{", "  " + rotated]
    step += ["  let j = j0 + jj;", "  var p = 0.0;"]
    step += ["  if (jj < n) {"] + ["    " + x for x in score("j")]
    keep = f" * {R.keep('i', 'j')}" if R.seed is not None else ""
    step += [f"    if (!({R.hidden('i', 'j', 's')})) {{ p = exp(s - lse){keep}; }}", "  }"]
    step += [f"  Ps[lr * {BKV}u + jj] = f16(p);", "}"]
    step += _stage(v, "KVs", "j0", BKV, dvp, dv, T) + ["workgroupBarrier();"]
    for c in range(dvp // N):
        step.append("{")
        for kk in range(BKV // K):
            step.append("  " + mx.load("left", f"pl{kk}", "Ps", f"sg * {M * BKV}u + {kk * K}u", False, BKV))
            step.append("  " + mx.load("right", f"vr{kk}", "KVs", f"{kk * K * dvp + c * N}u", False, dvp))
            step += ["  " + x for x in mx.mma(f"oacc{c}", f"pl{kk}", f"vr{kk}")]
        step.append("}")
    body += ["workgroupBarrier();"] + walk(step)
    # O through Ss, N columns at a time, and the log-sum-exp
    live = f"r0 + lr < {tq}u"
    for c in range(dvp // N):
        body += ["workgroupBarrier();"]
        body += mx.store("Ss", f"sg * {M * BKV}u", f"oacc{c}", False, BKV)
        body += ["workgroupBarrier();", f"for (var cc = lh; cc < {N}u; cc = cc + {P}u) {{"]
        body += [f"  let col = {c * N}u + cc;", f"  if ({live} && col < {dv}u) {{"]
        body += ["    " + R.out.kc.store(node, R.out.index("i", "col"), f"Ss[lr * {BKV}u + cc]"), "  }", "}"]
    body += [f"if ({live} && lh == 0u) {{", "  " + R.out.kc.store(node, R.out.index("i", dv), "lse"), "}"]
    return R.head + body, R.disp, T


def _emit_grad_matrices(kc, node, dims, S, W, BT, dp, dvp):
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
    a = node.attrs
    kind = node.kind
    M, N, K = dims
    BR, T = W * M, W * S
    E = BR * BT // T  # elements of the tile per invocation
    P = S // M
    shapes = _logical_shapes(node)
    tq, tk = shapes[0][-2], shapes[1][-2]
    kv = kind == "sdpa_grad_kv"
    R = _Rows(kc, node, tk if kv else tq, block=BR)
    q, k, v, saved, do, delta = R.sides[:6]
    d, dv = q.cols, v.cols
    X1, X2, Y1, Y2 = (k, v, q, do) if kv else (q, do, k, v)
    mx = sgmat.Matrices(kc, dims, S)
    for name, rows, w in (("X1s", BR, dp), ("X2s", BR, dvp), ("Y1s", BT, dp), ("Y2s", BT, dvp)):
        kc.decls.append(f"var<workgroup> {name}: array<f16, {rows * w}>;")
    kc.decls.append(f"var<workgroup> Ss: array<f32, {BR * BT}>;")
    kc.decls.append(f"var<workgroup> Ds: array<f16, {BR * BT}>;")
    if kv:
        kc.decls.append(f"var<workgroup> Ps: array<f16, {BR * BT}>;")
    body = [f"let sg = {mx.subgroup()};", f"var pv: array<f32, {E}>;"]
    if R.seed is not None:
        body.append(f"var fv: array<f32, {E}>;")

    def product(left: str, right: str, width: int) -> list[str]:  # left right^T -> Ss
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

    def accumulate(acc: str, left: str, right: str, width: int) -> list[str]:  # acc_c += left right
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

    body += _stage(X1, "X1s", "r0", BR, dp, d, T) + _stage(X2, "X2s", "r0", BR, dvp, dv, T)
    accs = [("dk", dp), ("dv", dvp)] if kv else [("dq", dp)]
    for name, width in accs:
        body += [mx.result(f"{name}{c}") for c in range(width // N)]
    if kv:  # queries before the block's first key see none of its keys
        lo, hi = (f"(r0 / {BT}u) * {BT}u" if a["causal"] else "0u"), f"{tq}u"
    else:
        lo, hi = "0u", (f"min(min(r0 + {BR}u, {tq}u), {tk}u)" if a["causal"] else f"{tk}u")
    body.append(f"for (var t0 = {lo}; t0 < {hi}; t0 = t0 + {BT}u) {{")
    loop = ["workgroupBarrier();"]
    loop += _stage(Y1, "Y1s", "t0", BT, dp, d, T) + _stage(Y2, "Y2s", "t0", BT, dvp, dv, T)
    loop += ["workgroupBarrier();"] + product("X1s", "Y1s", dp) + ["workgroupBarrier();"]

    def element(lines: list[str]) -> list[str]:  # over this invocation's elements of the tile
        out = [f"for (var u = 0u; u < {E}u; u = u + 1u) {{", f"  let e = li + u * {T}u;"]
        out += [f"  let rr = r0 + e / {BT}u; let tt = t0 + e % {BT}u;"]
        i, j = ("tt", "rr") if kv else ("rr", "tt")
        out += [f"  let i = min({i}, {tq - 1}u); let j = min({j}, {tk - 1}u);"]
        out += [f"  let live = {i} < {tq}u && {j} < {tk}u;"]
        return out + ["  " + x for x in lines] + ["}"]

    step = [f"var s = Ss[e] * {f32_lit(a['scale'])};"]
    if a["mask"] == "add":
        step.append(f"s = s + {R.mask.at('i', 'j')};")
    step += ["var p = 0.0;", f"if (live && !({R.hidden('i', 'j', 's')})) {{"]
    step += [f"  p = exp(s - {saved.at('i', saved.cols - 1)});", "}", "pv[u] = p;"]
    keep = R.keep("i", "j") if R.seed is not None else None
    if keep:  # drawn once per element: the dP pass reads it back
        step.append(f"fv[u] = {keep};")
    if kv:
        step.append(f"Ps[e] = f16(p{' * fv[u]' if keep else ''});")
    loop += element(step) + ["workgroupBarrier();"]
    loop += product("X2s", "Y2s", dvp) + ["workgroupBarrier();"]
    step = ["var dp = Ss[e];"] + (["dp = dp * fv[u];"] if keep else [])
    step += [f"Ds[e] = f16(pv[u] * (dp - {delta.at('i', 0)}));"]
    loop += element(step) + ["workgroupBarrier();"]
    if kv:
        loop += accumulate("dk", "Ds", "Y1s", dp) + accumulate("dv", "Ps", "Y2s", dvp)
    else:
        loop += accumulate("dq", "Ds", "Y1s", dp)
    body += ["  " + x for x in loop] + ["}"]
    # the results through Ss, N columns at a time: dK (or dQ) times scale, then dV
    body += [f"let lr = li / {P}u;", f"let lh = li % {P}u;", "let rw = r0 + lr;"]
    first = 0
    for name, width in accs:
        cols, mul = (d, f" * {f32_lit(a['scale'])}") if name != "dv" else (dv, "")
        for c in range(width // N):
            body += ["workgroupBarrier();"]
            body += mx.store("Ss", f"sg * {M * BT}u", f"{name}{c}", False, BT)
            body += ["workgroupBarrier();", f"for (var cc = lh; cc < {N}u; cc = cc + {P}u) {{"]
            body += [f"  let col = {c * N}u + cc;", f"  if (rw < {R.rows}u && col < {cols}u) {{"]
            at = R.out.index("rw", f"(col + {first}u)" if first else "col")
            body += ["    " + kc.store(node, at, f"Ss[lr * {BT}u + cc]{mul}"), "  }", "}"]
        first += d
    return R.head + body, R.disp, T


# ---------------------------------------------------------------- the kinds


def _output_grad(t: Tensor, g: Tensor) -> Tensor:
    """dO from the cotangent of [O | lse]: the log-sum-exp column is internal, so g is
    normally dO padded with a zero column (narrow's gradient), taken as it is."""
    from .shape import narrow

    dv = t.shape[-1] - 1
    if g.kind == "pad" and g.attrs["axis"] == g.ndim - 1 and (g.attrs["before"], g.attrs["after"]) == (0, 1):
        return g.inputs[0]
    return narrow(g, -1, 0, dv)


def _g_sdpa(t: Tensor, g: Tensor):
    from .elementwise import unbroadcast
    from .reduce import sum as rsum
    from .shape import narrow

    q, k, v = t.inputs[:3]
    d, dv = q.shape[-1], v.shape[-1]
    do = _output_grad(t, g)
    # mixed precision: O's f16 copy and lse's own copy (made in the forward), not t
    o, lse = t.graph.kept.get(t.id, (narrow(t, -1, 0, dv), t))
    delta = rsum(do * o, -1, keepdims=True)
    # mixed precision: the kernels read dO from its f16 copy, as they read q, k and v
    ins = (q, k, v, lse, half(do), delta) + tuple(t.inputs[3:])
    dq = make("sdpa_grad_q", ins, **t.attrs)
    dkv = make("sdpa_grad_kv", ins, **t.attrs)
    grads = [dq, narrow(dkv, -1, 0, d), narrow(dkv, -1, d, dv)]
    return [unbroadcast(x, y.shape) for x, y in zip(grads, (q, k, v))] + [None] * (len(t.inputs) - 3)


register(
    "sdpa",
    family="attention",
    role="kernel",
    strided=True,
    emit=_emit_forward,
    infer=_infer("sdpa"),
    grad=_g_sdpa,
    ref=lambda ctx, args, t: _forward(_NumPy(ctx), args, t),
    torch=lambda tc, a, n: _forward(_Torch(tc), a, n),
)
for _kind, _emitter in (("sdpa_grad_q", _emit_grad_q), ("sdpa_grad_kv", _emit_grad_kv)):
    register(
        _kind,
        family="attention",
        role="kernel",
        strided=True,
        emit=_emitter,
        infer=_infer(_kind),
        grad=NO_GRAD,
        ref=lambda ctx, args, t: _backward(_NumPy(ctx), t.kind, args, t),
        torch=lambda tc, a, n: _backward(_Torch(tc), n.kind, a, n),
    )


def _check_args(attn_mask, dropout_p, is_causal, scale) -> None:
    if isinstance(dropout_p, bool) or not isinstance(dropout_p, (int, float)) or not 0 <= dropout_p < 1:
        raise OpError(f"dropout_p must be a number in [0, 1), got {dropout_p!r}")
    if not isinstance(is_causal, bool):
        raise OpError(f"is_causal must be True or False, got {is_causal!r}")
    if scale is not None and (
        isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(scale)
    ):
        raise OpError(f"scale must be a finite number or None, got {scale!r}")
    if attn_mask is not None and is_causal:
        raise OpError("give attn_mask or is_causal=True, not both (as PyTorch)")
    if attn_mask is not None and attn_mask.dtype not in ("bool", "f32"):
        raise OpError(
            f"attn_mask must be bool (True: attend) or float (added to the scores), "
            f"got {attn_mask.dtype} of shape {attn_mask.shape}"
        )


@op
def scaled_dot_product_attention(
    q, k, v, attn_mask=None, dropout_p: float = 0.0, is_causal: bool = False, scale: float | None = None
) -> Tensor:
    """softmax(q @ k^T * scale + mask) @ v, as torch.nn.functional.scaled_dot_product_attention:
    q [..., Tq, D], k [..., Tk, D], v [..., Tk, Dv] with broadcasting leading dims;
    attn_mask bool (True: attend) or float (added), broadcastable to [..., Tq, Tk];
    is_causal hides key j from query i < j (top-left aligned, instead of a mask);
    dropout_p drops attention weights (tgweb's per-step random stream); scale
    defaults to 1 / sqrt(D). One kernel, no Tq x Tk tensor stored; its gradient two
    kernels that recompute the weights from each row's saved log-sum-exp. No gradient
    flows to attn_mask."""
    from .shape import narrow, reshape

    # mixed precision: the operands are read from their f16 copies (what the backward keeps);
    # the softmax statistics and the accumulation stay f32
    q, k, v = (half(as_tensor(x)) for x in (q, k, v))
    mask = None if attn_mask is None else as_tensor(attn_mask)
    _check_args(mask, dropout_p, is_causal, scale)
    if mask is not None and mask.ndim < 2:
        mask = reshape(mask, (1,) * (2 - mask.ndim) + mask.shape)
    _check_operands(q, k, v, mask)
    kinds = {"bool": "bool", "f32": "add"}
    attrs = {
        "causal": is_causal,
        "scale": float(1.0 / math.sqrt(q.shape[-1]) if scale is None else scale),
        "mask": kinds[mask.dtype] if mask is not None else None,
        "dropout": float(dropout_p),
        "stream": -1,
    }
    ins = (q, k, v) + ((mask,) if mask is not None else ())
    if dropout_p:
        attrs["stream"] = rnd.next_stream(q.graph)
        ins += (q.graph.scalar("seed", "i32"),)
    t = make("sdpa", ins, **attrs)
    out = narrow(t, -1, 0, v.shape[-1])
    g = t.graph
    if out.id in g.saved:
        # mixed precision: the backward reads O through the f16 copy the next product reads
        # and lse from a copy of its own, so [O | lse] (f32) is not kept for the backward
        g.kept[t.id] = (g.saved[out.id], narrow(t, -1, v.shape[-1], 1))
    return out
