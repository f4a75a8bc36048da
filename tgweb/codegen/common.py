"""Shared pieces of the WGSL emitters: literals, typed loads and stores, bindings,
index arithmetic and the 2-D dispatch of a linear index space.

Every storage binding is declared `array<u32>`; values are bitcast on load and
store (free on every GPU), so tensors of different dtypes may share one buffer and
one binding. bool is stored as one u32 (0 or 1) per element. Identifiers in the
generated text are tgweb's own (b0, v3, c1, ...), numbered per kernel, so two
kernels that do the same work on the same shapes and offsets have identical text.
Nothing here imports NumPy.
"""

from __future__ import annotations

import math
import re
import struct

from .program import Binding, Kernel

MAX_GROUPS = 65535  # workgroups per dispatch dimension (WebGPU's default limit)
WGSL_TYPE = {"f32": "f32", "i32": "i32", "bool": "bool"}


def f32_lit(v: float) -> str:
    """A WGSL f32 expression equal to float32(v) (inf, nan and subnormals through bitcast)."""
    v = float(v)
    try:
        bits = struct.unpack("<I", struct.pack("<f", v))[0]
    except OverflowError:  # beyond float32's range: rounds to an infinity
        bits = 0x7F800000 if v > 0 else 0xFF800000
    f = struct.unpack("<f", struct.pack("<I", bits))[0]
    if not math.isfinite(f) or (f != 0.0 and abs(f) < 1.1754943508222875e-38):
        return f"bitcast<f32>({bits}u)"
    if f == 0.0:
        return "-0.0f" if math.copysign(1.0, f) < 0 else "0.0f"
    r = repr(f)
    return r + "f" if ("." in r or "e" in r) else r + ".0f"


def i32_lit(v: int) -> str:
    v = int(v)
    if not -(2**31) <= v < 2**31:
        raise ValueError(f"integer constant {v} does not fit in i32")
    if v == -(2**31):
        return "bitcast<i32>(2147483648u)"
    return f"{v}i" if v >= 0 else f"({v}i)"


def u32_lit(v: int) -> str:
    return f"{int(v)}u"


def lit(value, dtype: str) -> str:
    if dtype == "f32":
        return f32_lit(value)
    if dtype == "i32":
        return i32_lit(value)
    return "true" if value else "false"


def zero(dtype: str) -> str:
    return lit(0, dtype)


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def grid(groups: int) -> tuple[int, int, int]:
    """Workgroup counts (x, y, 1) covering `groups` linearly; x <= 65535."""
    groups = max(1, groups)
    x = min(groups, MAX_GROUPS)
    y = ceil_div(groups, x)
    if y > MAX_GROUPS:
        raise ValueError(f"{groups} workgroups do not fit one dispatch")
    return (x, y, 1)


def group_size(n: int, most: int = 64) -> int:
    """Invocations per workgroup for n independent invocations: `most`, or fewer so that
    there are at least four workgroups (CPU implementations of WebGPU, SwiftShader and
    lavapipe, run a workgroup on one thread; a lone workgroup leaves the other cores
    idle), and never fewer than four (their SIMD width)."""
    wg = most
    while wg > 4 and n < 4 * wg:
        wg //= 2
    return wg


def strides(shape: tuple[int, ...]) -> list[int]:
    out, s = [], 1
    for d in reversed(shape):
        out.append(s)
        s *= d
    return out[::-1]


def add_idx(*terms: str) -> str:
    """Sum of u32 index terms, dropping zeros."""
    ts = [t for t in terms if t not in ("0u", "0", "")]
    if not ts:
        return "0u"
    return ts[0] if len(ts) == 1 else "(" + " + ".join(ts) + ")"


def _atom(e: str) -> str:
    """e as an operand of a shift or a mask (WGSL takes only unary expressions there)."""
    if re.fullmatch(r"[A-Za-z_][\w.]*", e):
        return e
    if e.startswith("(") and e.endswith(")"):
        depth = 0
        for i, ch in enumerate(e):
            depth += ch == "("
            depth -= ch == ")"
            if depth == 0 and i < len(e) - 1:
                break
        else:
            return e
    return f"({e})"


def udiv(e: str, k: int) -> str:
    """The u32 expression e divided by the constant k > 0: a shift when k is a power of
    two (the JIT compilers of CPU WebGPU implementations emit a real division)."""
    if k == 1:
        return e
    if k & (k - 1) == 0:
        return f"({_atom(e)} >> {k.bit_length() - 1}u)"
    return f"({e} / {k}u)"


def umod(e: str, k: int) -> str:
    """e % k for a u32 expression e and a constant k > 0 (a mask for powers of two)."""
    if k & (k - 1) == 0:
        return f"({_atom(e)} & {k - 1}u)"
    return f"({e} % {k}u)"


def digits(var: str, dims) -> list[str]:
    """Row-major coordinates of the u32 index var over dims [size, ...]: var / (product
    of the later sizes) % size, with neither where it is not needed."""
    out, div = [], 1
    for j in range(len(dims) - 1, -1, -1):
        e = udiv(var, div)
        out.append(umod(e, dims[j]) if j > 0 else e)
        div *= dims[j]
    return out[::-1]


def mul_idx(term: str, k: int) -> str:
    if k == 0:
        return "0u"
    if k == 1:
        return term
    return f"({term} * {k}u)"


class KernelCtx:
    """Collects the bindings, helper functions and workgroup declarations of one kernel.

    storage(node) gives (buffer id, element offset) of a stored tensor (aliases
    resolved); `full` constants are never loaded, they become literals."""

    def __init__(self, storage) -> None:
        self.storage = storage
        self.bindings: list[list] = []  # [buffer, access]
        self._bidx: dict[int, int] = {}
        self.helpers: dict[str, str] = {}
        self.decls: list[str] = []
        self.ops: list[str] = []
        self.site = ""
        self._n = 0
        self.vec4: set[int] = set()  # buffers bound as array<vec4<u32>> (read-only here)
        self.offsets: list[int] = []  # element offsets the kernel reads from its uniform
        self._oidx: dict[tuple[int, int], int] = {}
        self.inlined: set[int] = set()  # size-1 nodes recomputed where they are read

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
        if (buf, off) not in self._oidx:
            self._oidx[(buf, off)] = len(self.offsets)
            self.offsets.append(off)
        i = self._oidx[(buf, off)]
        return f"tg_off[{i // 4}].{'xyzw'[i % 4]}"

    def addr(self, node, idx: str, write: bool = False) -> str:
        buf, off = self.storage(node)
        i = add_idx(self.offset(buf, off), idx)
        if buf in self.vec4:
            if write:
                raise AssertionError("a vec4 binding is read-only")
            return f"{self.bind(buf, False)}[({i}) >> 2u][({i}) & 3u]"
        return f"{self.bind(buf, write)}[{i}]"

    def vec4_ok(self, node) -> bool:
        return self.storage(node)[1] % 4 == 0

    def load4(self, node, idx4: str) -> str:
        """Four f32 at vec4 index idx4 of a tensor whose element offset is a multiple of 4."""
        buf, off = self.storage(node)
        self.vec4.add(buf)
        i = add_idx(f"({self.offset(buf, off)} >> 2u)", idx4)
        return f"bitcast<vec4<f32>>({self.bind(buf, False)}[{i}])"

    def load(self, node, idx: str) -> str:
        """Value of a stored tensor at flat element index idx (a u32 expression)."""
        if node.kind == "full" or (node.inputs and _alias_root(node).kind == "full"):
            r = _alias_root(node)
            return lit(r.attrs["value"], r.dtype)
        a = self.addr(node, idx)
        return from_u32(a, node.dtype)

    def store(self, node, idx: str, value: str) -> str:
        return f"{self.addr(node, idx, True)} = {to_u32(value, node.dtype)};"

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
        lines.append(
            "fn main(@builtin(workgroup_id) wg: vec3<u32>, "
            "@builtin(local_invocation_index) li: u32, "
            "@builtin(local_invocation_id) lid: vec3<u32>) {"
        )
        lines.extend("  " + ln for ln in body)
        lines.append("}")
        text = _nonfinite_through_private("\n".join(lines) + "\n")
        return Kernel(
            name,
            text,
            [Binding(b, a) for b, a in self.bindings],
            tuple(dispatch),
            list(self.ops),
            self.site,
            list(self.offsets),
        )


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


def _alias_root(node):
    from ..ir import REGISTRY

    while REGISTRY[node.kind].alias:
        node = node.inputs[0]
    return node


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


def linear_index(nx: int, wg: int) -> str:
    """The u32 linear invocation index of a 1-D kernel dispatched by grid()."""
    if nx == 1:
        return f"(wg.y * {wg}u + li)" if wg > 1 else "wg.y"
    return f"((wg.y * {nx}u + wg.x) * {wg}u + li)"


def invocations(var: str, n: int, wg: int) -> tuple[list[str], tuple[int, int, int]]:
    """n invocations in workgroups of wg: the dispatch, and lines defining var as the
    linear invocation index, returning from those past n if the dispatch overshoots
    (a kernel with no early return runs with all lanes on, which CPU implementations
    of WebGPU execute without per-lane masking)."""
    disp = grid(ceil_div(n, wg))
    lines = [f"let {var} = {linear_index(disp[0], wg)};"]
    if disp[0] * disp[1] * wg != n:
        lines.append(f"if ({var} >= {n}u) {{ return; }}")
    return lines, disp


def linear_group(nx: int) -> str:
    return f"(wg.y * {nx}u + wg.x)"


def coord_exprs(shape: tuple[int, ...], ivar: str) -> list[str]:
    """Coordinate expressions of flat index ivar in a row-major shape."""
    return ["0u" if n == 1 else e for n, e in zip(shape, digits(ivar, shape))]
