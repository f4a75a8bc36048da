"""WGSL text helpers every emitter shares: literals, u32 index arithmetic, loops,
and the 2-D dispatch of a linear index space. Plain functions of strings and ints.
"""

from __future__ import annotations

import math
import re
import struct

from ..ir import strides  # noqa: F401 - emitters take it from here with the other index helpers
from ..program import MAX_GROUPS


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
