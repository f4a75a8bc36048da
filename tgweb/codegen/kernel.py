"""The kernel being built (KernelCtx: bindings, offsets, helpers, the WGSL text)
and the fused elementwise group evaluated inside it (GroupEmitter).

Every storage binding is declared `array<u32>`; values are bitcast on load and
store (free on every GPU), so tensors of different dtypes may share one buffer and
one binding. bool is stored as one u32 (0 or 1) per element; f16 (precision="mixed")
as two binary16 values per word, computed on as f32: a kernel touching one declares
`enable f16;` (the Program then needs the device feature shader-f16), loads a value
with unpack2x16float (exact) and stores values in pairs, one word per invocation, so
no two invocations write halves of one word. The rounding is tgweb's own
(tg_half: round to nearest even, inf past 65504), bit for bit NumPy's float16: WGSL
lets f32 -> f16 conversions round either way and leaves overflow undefined. Identifiers in the
generated text are tgweb's own (b0, v3, c1, ...), numbered per kernel, so two
kernels that do the same work on the same shapes and offsets have identical text.

A fused group is a set of nodes of one shape S evaluated at one flat index i of S:
members read each other as local values, and read tensors stored elsewhere
through broadcasting index arithmetic. Each member's value comes from its kind's
emitter in the registry (tgweb.ir.OpDef.emit). The same group body serves as a
reduction's prologue and as the epilogue of a reduction or a matmul.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from ..ir import REGISTRY, prod, root
from ..program import Binding, Kernel
from .common import add_idx, ceil_div, coord_exprs, invocations, lit, mul_idx, strides
from .target import Target

WG = 256  # invocations per workgroup of a fused elementwise kernel
ALIGN = 16  # the largest element alignment an emitter may test (KernelCtx.aligned)


class Part(NamedTuple):
    """A fused group as a kernel emits it: its shape, members in topological order and
    the ids of the members it stores."""

    shape: tuple
    members: list
    stored: set


class KernelCtx:
    """Collects the bindings, helper functions and workgroup declarations of one kernel.

    storage(node) gives (buffer id, element offset) of a stored tensor (views
    resolved); constants are never loaded, they become literals. inlined: ids of
    size-1 nodes every reader recomputes. A kernel kind's emitter reads its first
    input through input_at (computed by the fused prologue, if any) and stores its
    result through result (which runs the fused epilogue, if any)."""

    def __init__(
        self,
        storage,
        inlined=(),
        prologue: Part | None = None,
        epilogue: Part | None = None,
        target: Target | None = None,
    ) -> None:
        self._where = storage
        self.raw_storage = False  # an emitter read a (buffer, offset) itself: see storage()
        self.bindings: list[list] = []  # [buffer, access]
        self._bidx: dict[int, int] = {}
        self.helpers: dict[str, str] = {}
        self.decls: list[str] = []
        self.ops: list[str] = []
        self.site = ""
        self._n = 0
        self.vec4: set[int] = set()  # buffers bound as array<vec4<u32>> (read-only here)
        self.offsets: list[int] = []  # u32 words the kernel reads from its uniform
        self._oidx: dict[tuple, int] = {}
        self.inlined = set(inlined)
        self.prologue, self.epilogue = prologue, epilogue
        self.target = target or Target()  # what the kernel is tuned for
        self.enables: set[str] = set()  # WGSL extensions the kernel uses ("subgroups")
        self.builtins: dict[str, str] = {}  # further entry-point builtins: builtin -> name
        self.requires: set[str] = set()  # WGSL language extensions it declares (`requires`)

    def storage(self, node) -> tuple[int, int]:
        """(buffer id, element offset) of a stored tensor, for an emitter that writes them
        into its text itself (literal ranges): its text then depends on where its tensors
        live, so it is never reused for another kernel (tgweb.codegen.reuse)."""
        self.raw_storage = True
        return self._where(node)

    def buffer_of(self, node) -> int:
        """The buffer of a stored tensor (only ever bound: bindings are renumbered per kernel)."""
        return self._where(node)[0]

    def aligned(self, node, n: int) -> bool:
        """Whether a stored tensor's element offset is a multiple of n (which divides
        ALIGN: what a reused text may assume, tgweb.codegen.reuse)."""
        if ALIGN % n:
            raise AssertionError(f"alignment {n} does not divide {ALIGN}")
        return self._where(node)[1] % n == 0

    def fresh(self, prefix: str = "v") -> str:
        self._n += 1
        return f"{prefix}{self._n}"

    def bind(self, buffer: int, write: bool) -> str:
        if buffer not in self._bidx:
            self._bidx[buffer] = len(self.bindings)
            self.bindings.append([buffer, "read_write" if write else "read"])
        elif write:
            self.bindings[self._bidx[buffer]][1] = "read_write"
        return f"b{self._bidx[buffer]}"

    def offset(self, buf: int, off: int) -> str:
        """The expression of an element offset: read from the kernel's uniform, so that
        kernels differing only in where their tensors live (one per layer) share a
        pipeline."""
        return self._uniform_word((buf, off), off)

    def word(self, value: int) -> str:
        """The expression of a u32 constant that differs between otherwise identical
        kernels (a random op's stream key, one per layer): read from the kernel's uniform
        too, so that those kernels share a pipeline."""
        return self._uniform_word(("word", value), value)

    @property
    def uniform_keys(self) -> list[tuple]:
        """What each uniform word holds, in order: (buffer, offset) or ("word", value)."""
        return list(self._oidx)

    def _uniform_word(self, key: tuple, value: int) -> str:
        if key not in self._oidx:
            self._oidx[key] = len(self.offsets)
            self.offsets.append(value)
        i = self._oidx[key]
        return f"tg_off[{i // 4}].{'xyzw'[i % 4]}"

    def addr(self, node, idx: str, write: bool = False) -> str:
        buf, off = self._where(node)
        return self._word(buf, add_idx(self.offset(buf, off), idx), write)

    def _word(self, buf: int, i: str, write: bool) -> str:
        """The u32 word at word index i of a buffer, through its binding."""
        if buf in self.vec4:
            if write:
                raise AssertionError("a vec4 binding is read-only")
            return f"{self.bind(buf, False)}[({i}) >> 2u][({i}) & 3u]"
        return f"{self.bind(buf, write)}[{i}]"

    def _half_word(self, node, idx: str, write: bool = False) -> str:
        """The word holding element idx of an f16 tensor (whose storage starts on a word)."""
        self.enables.add("f16")
        buf, off = self._where(node)
        return self._word(buf, add_idx(self.offset(buf, off), f"(({idx}) >> 1u)"), write)

    def store_pair(self, node, idx: str, v0: str, v1: str) -> str:
        """Elements idx (even) and idx + 1 of an f16 tensor, as one word (the second may be
        the padding after an odd-length tensor's last value)."""
        h = self.helper("tg_half", HALF)
        return f"{self._half_word(node, idx, True)} = {h}({v0}) | ({h}({v1}) << 16u);"

    def vec4_ok(self, node) -> bool:
        """Whether load4 can read the tensor: its first element starts a group of four."""
        return self._where(node)[1] % (2 if stored_half(node) else 4) == 0

    def load4(self, node, idx4: str) -> str:
        """Four f32 at vec4 index idx4 of a tensor whose element offset is a multiple of 4
        (of an f16 tensor: two words, unpacked)."""
        buf, off = self._where(node)
        if stored_half(node):
            self.enables.add("f16")
            w = add_idx(self.offset(buf, off), mul_idx(f"({idx4})", 2))
            lo, hi = self._word(buf, w, False), self._word(buf, add_idx(w, "1u"), False)
            return f"vec4<f32>(unpack2x16float({lo}), unpack2x16float({hi}))"
        self.vec4.add(buf)
        i = add_idx(f"({self.offset(buf, off)} >> 2u)", idx4)
        return f"bitcast<vec4<f32>>({self.bind(buf, False)}[{i}])"

    def load4_words(self, node, idx4: str) -> str:
        """The two words (vec2<u32>) holding the four f16 values at vec4 index idx4 of an
        f16 tensor whose element offset is even: moved as they are stored."""
        buf, off = self._where(node)
        w = add_idx(self.offset(buf, off), mul_idx(f"({idx4})", 2))
        return f"vec2<u32>({self._word(buf, w, False)}, {self._word(buf, add_idx(w, '1u'), False)})"

    def load8_words(self, node, idx8: str) -> str:
        """The four words (vec4<u32>) holding the eight f16 values at index idx8 (in eights)
        of an f16 tensor whose element offset is a multiple of 8: one 16-byte load."""
        buf, off = self._where(node)
        self.vec4.add(buf)
        return f"{self.bind(buf, False)}[{add_idx(f'({self.offset(buf, off)} >> 2u)', idx8)}]"

    def load(self, node, idx: str) -> str:
        """Value of a stored tensor at flat element index idx (a u32 expression)."""
        r = root(node)
        if REGISTRY[r.kind].role == "const":
            return lit(r.attrs["value"], r.dtype)
        if stored_half(node):
            return f"unpack2x16float({self._half_word(node, idx)})[({idx}) & 1u]"
        a = self.addr(node, idx)
        return from_u32(a, node.dtype)

    def store(self, node, idx: str, value: str) -> str:
        if node.dtype == "f16":
            raise AssertionError(f"f16 tensor %{node.id} stored alone: f16 values are stored in pairs")
        return f"{self.addr(node, idx, True)} = {to_u32(value, node.dtype)};"

    def input_at(self, node, idx: str) -> tuple[list[str], str]:
        """(lines, expression): node's first input at flat index idx, computed by the
        fused prologue when there is one, else loaded."""
        x = node.inputs[0]
        if self.prologue is None:
            return [], self.load(x, idx)
        ge = GroupEmitter(self, self.prologue.shape, self.prologue.members)
        lines = [f"let pi = {idx};"] + ge.emit("pi")
        return lines, ge.local[root(x).id]

    def result(self, node, idx: str, value: str) -> list[str]:
        """Lines storing node's value (a matmul's or a reduction's result) at flat index
        idx, or running the fused epilogue on it (bias, activation, mean's scaling) and
        storing what the epilogue must."""
        if self.epilogue is None:
            return [self.store(node, idx, value)]
        epi = self.epilogue
        v = self.fresh("r")
        g = GroupEmitter(self, epi.shape, epi.members, provided={node.id: v})
        lines = [f"let {v} = {value};"] + g.emit(idx)
        lines += [self.store(m, idx, g.local[m.id]) for m in epi.members if m.id in epi.stored]
        if node.id in epi.stored:
            lines.append(self.store(node, idx, v))
        return lines

    @property
    def pairs(self) -> bool:
        """Whether the fused epilogue stores f16 values: the host then stores its results
        through result_pair, two neighbours at a time."""
        epi = self.epilogue
        return epi is not None and any(m.dtype == "f16" for m in epi.members if m.id in epi.stored)

    def result_pair(self, node, idx: str, v0: str, v1: str) -> list[str]:
        """result() for elements idx (even) and idx + 1, whose values are v0 and v1: the
        epilogue runs on both, and each f16 value it stores shares its word with its
        neighbour's (one store, so no two invocations write halves of one word)."""
        epi = self.epilogue
        lines, gs = [], []
        for i, v in ((idx, v0), (f"{idx} + 1u", v1)):
            r, ij = self.fresh("r"), self.fresh("pi")
            g = GroupEmitter(self, epi.shape, epi.members, provided={node.id: r})
            lines += [f"let {ij} = {i};", f"let {r} = {v};"] + g.emit(ij)
            gs.append((ij, r, g))
        for m in epi.members:
            if m.id not in epi.stored:
                continue
            if m.dtype == "f16":
                lines.append(self.store_pair(m, gs[0][0], gs[0][2].local[m.id], gs[1][2].local[m.id]))
            else:
                lines += [self.store(m, ij, g.local[m.id]) for ij, _, g in gs]
        if node.id in epi.stored:
            lines += [self.store(node, ij, r) for ij, r, _ in gs]
        return lines

    def builtin(self, which: str) -> str:
        """The name of an entry-point builtin the kernel reads beyond the usual ones
        (subgroup_id: the invocation's subgroup in its workgroup)."""
        return self.builtins.setdefault(which, f"tg_{which}")

    def helper(self, name: str, text: str) -> str:
        self.helpers.setdefault(name, text)
        return name

    def kernel(
        self, name: str, body: list[str], wg: tuple[int, int, int] | int, dispatch: tuple[int, int, int]
    ) -> Kernel:
        if isinstance(wg, int):
            wg = (wg, 1, 1)
        lines = []
        for i, (_, access) in enumerate(self.bindings):
            acc = "read_write" if access == "read_write" else "read"
            ty = "vec4<u32>" if self.bindings[i][0] in self.vec4 else "u32"
            lines.append(f"@group(0) @binding({i}) var<storage, {acc}> b{i}: array<{ty}>;")
        if self.offsets:
            lines.append(
                f"@group(0) @binding({len(self.bindings)}) var<uniform> tg_off: "
                f"array<vec4<u32>, {ceil_div(len(self.offsets), 4)}>;"
            )
        lines.extend(self.decls)
        for h in sorted(self.helpers):
            lines.append(self.helpers[h])
        lines.append(f"@compute @workgroup_size({wg[0]}, {wg[1]}, {wg[2]})")
        sub = ""
        if "subgroups" in self.enables:  # the invocation's subgroup: its size, its place in it
            sub = ", @builtin(subgroup_size) sg_size: u32, @builtin(subgroup_invocation_id) sg_id: u32"
        sub += "".join(f", @builtin({b}) {n}: u32" for b, n in sorted(self.builtins.items()))
        lines.append(
            "fn main(@builtin(workgroup_id) wg: vec3<u32>, "
            "@builtin(local_invocation_index) li: u32, "
            f"@builtin(local_invocation_id) lid: vec3<u32>{sub}) {{"
        )
        lines.extend("  " + ln for ln in body)
        lines.append("}")
        # directives come first, before the private constants the next line may add
        text = "".join(f"enable {e};\n" for e in sorted(self.enables))
        text += "".join(f"requires {r};\n" for r in sorted(self.requires))
        text += _nonfinite_through_private("\n".join(lines) + "\n")
        return Kernel(
            name,
            text,
            [Binding(b, a) for b, a in self.bindings],
            tuple(dispatch),
            list(self.ops),
            self.site,
            list(self.offsets),
        )


def stored_half(node) -> bool:
    """Whether node's values are stored as f16: an f16 tensor, or an f32 view of one
    (tgweb.ops.half's saved activations)."""
    return root(node).dtype == "f16"


# f32 -> binary16 bits, rounded to nearest even: NaN stays NaN, past 65504 rounds to inf,
# values below 2^-14 become subnormals (the bits of NumPy's float16)
HALF = """fn tg_half(x: f32) -> u32 {
  let b = bitcast<u32>(x);
  let s = (b >> 16u) & 0x8000u;
  let a = b & 0x7fffffffu;
  if (a > 0x7f800000u) { return s | 0x7e00u; }
  if (a >= 0x477ff000u) { return s | 0x7c00u; }
  if (a >= 0x38800000u) {
    let m = a - 0x38000000u;
    return s | ((m + 0xfffu + ((m >> 13u) & 1u)) >> 13u);
  }
  if (a <= 0x33000000u) { return s; }
  let shift = 126u - (a >> 23u);
  let m = (a & 0x7fffffu) | 0x800000u;
  return s | ((m + (1u << (shift - 1u)) - 1u + ((m >> shift) & 1u)) >> shift);
}"""


def round_half(kc: KernelCtx, x: str) -> str:
    """x (f32) rounded to the nearest f16, as an f32 expression."""
    return f"unpack2x16float({kc.helper('tg_half', HALF)}({x})).x"


_BITCAST_F32 = re.compile(r"bitcast<f32>\((0x[0-9a-fA-F]+|[0-9]+)u\)")


def _nonfinite_through_private(text: str) -> str:
    """Chrome's WGSL compiler (Tint) rejects a constant expression that evaluates to inf
    or NaN; a private variable is not a constant expression, so each non-finite f32
    constant is read from one (same bits, same value)."""
    names: dict[int, str] = {}

    def sub(m):
        bits = int(m.group(1), 0)
        if bits & 0x7F800000 != 0x7F800000:
            return m.group(0)
        names.setdefault(bits, f"tg_nonfinite{len(names)}")
        return f"bitcast<f32>({names[bits]})"

    text = _BITCAST_F32.sub(sub, text)
    if not names:
        return text
    decls = "".join(f"var<private> {n}: u32 = {b:#x}u;\n" for b, n in names.items())
    return decls + text


def from_u32(raw: str, dtype: str) -> str:
    if dtype == "f32":
        return f"bitcast<f32>({raw})"
    if dtype == "i32":
        return f"bitcast<i32>({raw})"
    return f"({raw} != 0u)"


def to_u32(value: str, dtype: str) -> str:
    if dtype == "bool":
        return f"select(0u, 1u, {value})"
    return f"bitcast<u32>({value})"


class GroupEmitter:
    """Emits the body of a fused group at flat index `ivar` of shape `shape`.

    members: the group's nodes in topological order. provided: node id -> WGSL
    expression for values the host kernel computes (a reduction's result)."""

    def __init__(self, kc: KernelCtx, shape, members, provided=None) -> None:
        self.kc = kc
        self.shape = tuple(shape)
        self.members = list(members)
        self.provided = dict(provided or {})
        self.lines: list[str] = []
        self.local: dict[int, str] = {}
        self._coords: dict[int, str] = {}
        self.inl: dict[int, str] = {}
        self.ivar = "i"

    def emit(self, ivar: str) -> list[str]:
        self.ivar = ivar
        for m in self.members:
            self.local[m.id] = self.compute(m)
        return self.lines

    def let(self, expr: str, prefix: str = "v") -> str:
        v = self.kc.fresh(prefix)
        self.lines.append(f"let {v} = {expr};")
        return v

    def coord(self, d: int) -> str:
        n = self.shape[d]
        if n == 1:
            return "0u"
        if d not in self._coords:
            self._coords[d] = self.let(coord_exprs(self.shape, self.ivar)[d], "c")
        return self._coords[d]

    def compute(self, m) -> str:
        """m's value: an elementwise kind's expression gets a name (a let); index and
        const kinds return a name or a literal themselves."""
        d = REGISTRY[m.kind]
        e = d.emit(self, m)
        return self.let(e) if d.role == "elementwise" else e

    def args(self, m) -> list[str]:
        """The values of m's inputs at the current index (for an inlined size-1 node:
        at index 0)."""
        if m.id in self.kc.inlined:
            return [self.load_at(a, "0u") for a in m.inputs]
        return [self.value(x) for x in m.inputs]

    def value(self, x) -> str:
        """x's value at the current index, broadcast from x.shape to the group shape."""
        if x.id in self.local:
            return self.local[x.id]
        if x.id in self.provided:
            return self.provided[x.id]
        r = root(x)
        if r.id in self.provided and tuple(x.shape) == self.shape:  # a reshape of it
            return self.provided[r.id]
        if r.id in self.local and tuple(x.shape) == self.shape:  # same flat index
            return self.local[r.id]
        return self.load_at(x, self.bcast_index(x.shape))

    def load_at(self, x, idx: str) -> str:
        r = root(x)
        d = REGISTRY[r.kind]
        if d.role == "const":
            return d.emit(self, r)
        if r.id in self.kc.inlined:  # a size-1 chain over constants and scalars
            if r.id not in self.inl:
                self.inl[r.id] = self.let(d.emit(self, r))
            return self.inl[r.id]
        if r.shape == ():  # a host scalar, or any other 0-d tensor
            return self.kc.load(r, "0u")
        return self.kc.load(x, idx)

    def bcast_index(self, xshape) -> str:
        xshape = tuple(xshape)
        if xshape == self.shape:
            return self.ivar
        if prod(xshape) == 1:
            return "0u"
        lead = len(self.shape) - len(xshape)
        st = strides(xshape)
        return add_idx(*[mul_idx(self.coord(lead + d), st[d]) for d in range(len(xshape)) if xshape[d] != 1])

    def index_in(self, xshape, coords: list[str]) -> str:
        st = strides(tuple(xshape))
        return add_idx(*[mul_idx(c, s) for c, s, n in zip(coords, st, xshape) if n != 1])


def emit_group(kc: KernelCtx, part: Part) -> tuple[list[str], tuple[int, int, int]]:
    """A whole elementwise kernel: one invocation per element of the part's shape (per
    two elements when it stores an f16 tensor: emit_pairs)."""
    stored = [m for m in part.members if m.id in part.stored]
    if any(m.dtype == "f16" for m in stored):
        return emit_pairs(kc, part, stored)
    body, disp = invocations("i", prod(part.shape), WG)
    g = GroupEmitter(kc, part.shape, part.members)
    body += g.emit("i")
    body += [kc.store(m, "i", g.local[m.id]) for m in stored]
    return body, disp


def emit_pairs(kc: KernelCtx, part: Part, stored: list) -> tuple[list[str], tuple[int, int, int]]:
    """The group at elements i0 = 2t and i1 = i0 + 1 by invocation t, so that each f16
    word is written whole by one invocation. Past an odd count's end, i1 repeats the
    last element: its f16 half lands in the padding word's upper half, its f32 values
    are not stored."""
    n = prod(part.shape)
    body, disp = invocations("t", ceil_div(n, 2), WG)
    body += ["let i0 = t * 2u;", f"let i1 = min(i0 + 1u, {n - 1}u);"]
    g0, g1 = (GroupEmitter(kc, part.shape, part.members) for _ in range(2))
    body += g0.emit("i0") + g1.emit("i1")
    for m in stored:
        if m.dtype == "f16":
            body.append(kc.store_pair(m, "i0", g0.local[m.id], g1.local[m.id]))
            continue
        body.append(kc.store(m, "i0", g0.local[m.id]))
        second = kc.store(m, "i1", g1.local[m.id])
        body.append(f"if (i0 + 1u < {n}u) {{ {second} }}" if n % 2 else second)
    return body, disp


def emit_copy(kc: KernelCtx, dst, src) -> tuple[list[str], tuple[int, int, int]]:
    """dst <- src (same shape): the fallback when an update cannot be written in place."""
    body, disp = invocations("i", prod(dst.shape), WG)
    g = GroupEmitter(kc, dst.shape, [])
    g.ivar = "i"
    val = g.load_at(src, "i")
    body += g.lines
    body.append(kc.store(dst, "i", val))
    return body, disp
