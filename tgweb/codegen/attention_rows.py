"""What every attention kernel shares (codegen/attention.py, attention_matrices.py):
the inputs' layout of the kinds (tgweb.ops.attention), the operands read through
strides (Side), the walk of a row's invocation over the other side's rows, staged in
workgroup memory or not (Walk), and the rows themselves (Rows): one invocation per row,
its workgroup and batch, the mask, causality and dropout of a (query, key) pair."""

from __future__ import annotations

from ..ir import broadcast_shapes, prod
from .common import add_idx, ceil_div, digits, f32_lit, grid, group_size, linear_group, mul_idx, udiv, umod
from .common import strides as row_major
from .random import key_wgsl

# the operands the kernels read first: q, k, v (the forward); q, k, v, the forward's
# result (its lse column), dO and delta (the backward's)
FORWARD_OPERANDS, GRAD_OPERANDS = 3, 6
NEG_INF, POS_INF = "bitcast<f32>(0xff800000u)", "bitcast<f32>(0x7f800000u)"
WORKGROUP_BYTES = 16384  # WebGPU's default maxComputeWorkgroupStorageSize: any adapter runs it


def extras(operands: int, attrs) -> tuple[int | None, int | None]:
    """Input positions of the mask and of the seed (None where absent): the operands
    (FORWARD_OPERANDS or GRAD_OPERANDS of them), then the mask, then the seed."""
    mask = operands if attrs["mask"] else None
    seed = operands + (1 if attrs["mask"] else 0) if attrs["dropout"] else None
    return mask, seed


def lead(q_shape, k_shape, v_shape, mask_shape=None) -> tuple[int, ...]:
    """L, the broadcast of the operands' (and the mask's) leading dims."""
    shapes = [q_shape[:-2], k_shape[:-2], v_shape[:-2]] + ([mask_shape[:-2]] if mask_shape else [])
    return broadcast_shapes(*shapes)


class Side:
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


def sides(kc, node, lead):
    views = node.attrs.get("views", {})
    out = []
    for j, x in enumerate(node.inputs):
        v = views.get(j)
        shape, st, off = (tuple(v[0]), tuple(v[1]), v[2]) if v else (x.shape, row_major(x.shape), 0)
        out.append(Side(kc, x, tuple(shape), tuple(st), lead, f"base{j}", off) if len(shape) >= 2 else x)
    cshape, cst = node.attrs.get("out_view") or (tuple(node.shape), tuple(row_major(node.shape)))
    return out, Side(kc, node, tuple(cshape), tuple(cst), lead, "obase")


def logical_shapes(node):
    views = node.attrs.get("views", {})
    return [tuple(views[j][0]) if j in views else tuple(x.shape) for j, x in enumerate(node.inputs)]


def w4(n: int) -> int:
    return ceil_div(n, 4)


class Walk:
    """The loop of a row's invocation over the other side's rows j in [lo, hi): with
    tile > 0 the workgroup stages `tile` of them at a time in workgroup memory (lo and hi
    uniform over the workgroup), else every invocation reads them from memory."""

    def __init__(self, kc, tile: int, wg: int, vecs, scalars) -> None:
        self.kc, self.wg, self.vecs, self.scalars = kc, wg, vecs, scalars
        words = sum(4 * w4(s.cols) for s in vecs) + len(scalars)
        self.tile = max(1, min(tile, WORKGROUP_BYTES // (4 * words))) if tile else 0
        if self.tile:
            for i, s in enumerate(vecs):
                kc.decls.append(f"var<workgroup> tv{i}: array<vec4<f32>, {self.tile * w4(s.cols)}>;")
            for i in range(len(scalars)):
                kc.decls.append(f"var<workgroup> ts{i}: array<f32, {self.tile}>;")

    def vec(self, i: int, c: int) -> str:
        s = self.vecs[i]
        return f"tv{i}[jj * {w4(s.cols)}u + {c}u]" if self.tile else s.chunk("j", c)

    def scalar(self, i: int) -> str:
        s, col = self.scalars[i]
        return f"ts{i}[jj]" if self.tile else s.at("j", col)

    def lines(self, lo: str, hi: str, body: list[str]) -> list[str]:
        if not self.tile:
            return [f"for (var j = {lo}; j < {hi}; j = j + 1u) {{"] + ["  " + b for b in body] + ["}"]
        t = self.tile
        out = [f"for (var j0 = {lo}; j0 < {hi}; j0 = j0 + {t}u) {{"]
        for i, s in enumerate(self.vecs):
            w = w4(s.cols)
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


def dot(a: list[str], b: list[str]) -> str:
    return " + ".join(f"dot({x}, {y})" for x, y in zip(a, b))


def registers(side: Side, prefix: str, r: str, scale: float = 1.0) -> tuple[list[str], list[str]]:
    """Row r of side in vec4 registers (times scale): (lines, names)."""
    names = [f"{prefix}{c}" for c in range(w4(side.cols))]
    mul = "" if scale == 1.0 else f" * {f32_lit(scale)}"
    return [f"let {n} = {side.chunk(r, c)}{mul};" for c, n in enumerate(names)], names


def accumulators(prefix: str, n: int) -> tuple[list[str], list[str]]:
    names = [f"{prefix}{c}" for c in range(w4(n))]
    return [f"var {a} = vec4<f32>();" for a in names], names


def row_stores(out: Side, r: str, accs: list[str], cols: int, first: int = 0, mul: str = "") -> list[str]:
    return [
        out.kc.store(out.x, out.index(r, first + 4 * c + t), f"{a}[{t}]{mul}")
        for c, a in enumerate(accs)
        for t in range(4)
        if 4 * c + t < cols
    ]


class Rows:
    """What every attention kernel shares: one invocation per row of `rows` per batch z,
    a workgroup per `wg` consecutive rows of one batch (r0 the first), r the row (clamped
    where barriers forbid returning early), the mask and dropout of pair (query, key).
    operands: FORWARD_OPERANDS or GRAD_OPERANDS, the inputs before the mask and seed."""

    def __init__(self, kc, node, rows: int, operands: int, block: int = 0) -> None:
        self.kc, self.node, a = kc, node, node.attrs
        shapes = logical_shapes(node)
        mpos, spos = extras(operands, a)
        self.lead = lead(*shapes[:3], shapes[mpos] if mpos is not None else None)
        self.sides, self.out = sides(kc, node, self.lead)
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
        self.head += [s.setup() for s in self.sides + [self.out] if isinstance(s, Side)]
        if self.seed is not None:
            key = key_wgsl(kc, kc.load(self.seed, "0u"), a["stream"])
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
        lines = [f"var s = {dot(a, b)};"]
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
