"""Subgroup matrices (Chromium's chromium_experimental_subgroup_matrix): which
configuration a product uses, and the WGSL of the matrix types and builtins, real or
emulated.

Real: `subgroup_matrix_left<f16, K, M>` (template order: columns, then rows),
`subgroupMatrixLoad<T>(&array, offset, col_major, stride)`,
`subgroupMatrixMultiplyAccumulate(left, right, acc)`,
`subgroupMatrixStore(&array, offset, value, col_major, stride)`: the forms with a bool
`col_major` argument, which Chromium 156's Tint accepts on the H200 (with a deprecation
warning; newer Tint spells it `subgroupMatrixLoad<T, col_major>(&array, offset, stride)`:
TEMPLATE_FORMS). Every form is written in `FORMS` below and nowhere else. Offsets and strides must be
uniform: the kernels build them from `@builtin(subgroup_id)`, workgroup ids, loop
counters and constants only (Tint's uniformity analysis rejects offsets built from
local_invocation_id).

Emulated (Target.emulate_matrices, for tests on adapters without the feature): the same
kernel text with each builtin replaced by ordinary WGSL of the same result. The
subgroup is `li / EMULATED_SUBGROUP` (its lane `li % EMULATED_SUBGROUP`); a left or
right matrix is its offset into the workgroup array it was loaded from (the kernels
multiply it out before that array changes); a result matrix is each lane's share of its
M x N elements in a private array (element e of lane l: row-major element l E + e, E =
M N / subgroup size), accumulated in f32 from the f16 elements and stored by each lane.
No barrier is added, so the emulated kernel has the real one's barriers and no others."""

from __future__ import annotations

from .target import MATRIX_FEATURE, Target

EMULATED_SUBGROUP = 32  # invocations per emulated subgroup

# the WGSL forms of the real builtins, in one place: Chromium 156's Tint (the H200 probe)
# took the bool col_major forms (with a deprecation warning)
BOOL_FORMS = {
    "enable": "chromium_experimental_subgroup_matrix",
    # language extensions declared with `requires` (none: the probe's Tint took
    # @builtin(subgroup_id) under `enable subgroups;` alone; newer Tint documents it as
    # `requires subgroup_id;`)
    "requires": (),
    "left": "subgroup_matrix_left<{t}, {k}, {m}>",
    "right": "subgroup_matrix_right<{t}, {n}, {k}>",
    "result": "subgroup_matrix_result<{t}, {n}, {m}>",
    "load": "subgroupMatrixLoad<{type}>(&{array}, {offset}, {col_major}, {stride})",
    "mma": "subgroupMatrixMultiplyAccumulate({left}, {right}, {acc})",
    "store": "subgroupMatrixStore(&{array}, {offset}, {value}, {col_major}, {stride})",
}
# newer Tint's forms, the layout a template argument (col_major / row_major)
TEMPLATE_FORMS = dict(
    BOOL_FORMS,
    load="subgroupMatrixLoad<{type}, {layout}>(&{array}, {offset}, {stride})",
    store="subgroupMatrixStore<{layout}>(&{array}, {offset}, {value}, {stride})",
)
FORMS = BOOL_FORMS


def config(target: Target) -> tuple[int, int, int] | None:
    """(M, N, K) of the f16 -> f32 configuration the target's products use (16 x 16 x 16
    where offered, else the largest), or None where the target has none (no feature, no
    such configuration, an adapter whose subgroup size is not fixed, or no subgroups for
    subgroup_id) and the products keep the plain f16 tiles."""
    if not target.has(MATRIX_FEATURE) or not target.has("shader-f16"):
        return None
    if not target.emulate_matrices and (not target.has("subgroups") or subgroup_size(target) is None):
        return None
    dims = [tuple(c[2:]) for c in target.matrix_configs if c[0] == "f16" and c[1] == "f32"]
    if not dims:
        return None
    return (16, 16, 16) if (16, 16, 16) in dims else max(dims, key=lambda d: (d[0] * d[1] * d[2], d))


def subgroup_size(target: Target) -> int | None:
    """The invocations of every subgroup the kernel's layout counts on: the emulated size,
    or the adapter's where its least and most agree (32 on NVIDIA), else None."""
    if target.emulate_matrices:
        return EMULATED_SUBGROUP
    lo, hi = target.subgroup_sizes
    return hi if lo == hi else None


class Matrices:
    """The matrix types and builtins of one kernel: real where the target has them, else
    emulated (module docstring). dims: (M, N, K) of the configuration; S: invocations per
    subgroup. Left and right matrices are f16, results f32."""

    def __init__(self, kc, dims: tuple[int, int, int], S: int) -> None:
        self.kc, (self.M, self.N, self.K), self.S = kc, dims, S
        self.emulated = kc.target.emulate_matrices
        if self.emulated and (self.M * self.N) % S:
            raise AssertionError(f"an emulated {self.M} x {self.N} result over subgroups of {S}")
        self.loaded: dict[str, tuple] = {}  # emulated: name -> (array, col_major, stride)
        kc.enables.add("f16")
        if not self.emulated:
            kc.enables.update(("subgroups", FORMS["enable"]))
            kc.requires.update(FORMS["requires"])

    def subgroup(self) -> str:
        """The expression of the invocation's subgroup within the workgroup."""
        if self.emulated:
            return f"(li / {self.S}u)"
        return self.kc.builtin("subgroup_id")

    def result(self, name: str) -> str:
        """A result matrix of zeros (emulated: zeroed explicitly, as wgpu's Naga gives a
        variable declared in a loop body its zeros once, not on every iteration)."""
        if self.emulated:
            E = self.M * self.N // self.S
            zero = f"for (var mz = 0u; mz < {E}u; mz = mz + 1u) {{ {name}[mz] = 0.0; }}"
            return f"var {name}: array<f32, {E}>; {zero}"
        t = FORMS["result"].format(t="f32", n=self.N, m=self.M)
        return f"var {name} = {t}();"

    def halves(self, word: str) -> str:
        """A u32 word's two f16 values as a vec2<f16>: its bits as they are (Tint), or,
        emulated, through f32 (exact; wgpu's Naga takes no bitcast from u32 to vec2<f16>)."""
        if self.emulated:
            return f"vec2<f16>(unpack2x16float({word}))"
        return f"bitcast<vec2<f16>>({word})"

    def load(self, side: str, name: str, array: str, offset: str, col_major: bool, stride: int) -> str:
        """let name = the left (M x K) or right (K x N) matrix whose element (r, c) is
        array[offset + r stride + c] (row-major) or array[offset + c stride + r]."""
        if self.emulated:
            self.loaded[name] = (array, col_major, stride)
            return f"let {name} = {offset};"
        t = FORMS[side].format(t="f16", m=self.M, n=self.N, k=self.K)
        call = FORMS["load"].format(type=t, array=array, offset=offset, stride=stride, **_layout(col_major))
        return f"let {name} = {call};"

    def mma(self, acc: str, left: str, right: str) -> list[str]:
        """acc += left right."""
        if not self.emulated:
            return [f"{acc} = " + FORMS["mma"].format(left=left, right=right, acc=acc) + ";"]
        E = self.M * self.N // self.S
        out = [f"for (var me = 0u; me < {E}u; me = me + 1u) {{"]
        out += self._lane_element("me")
        out.append(f"  var msum = {acc}[me];")
        out.append(f"  for (var mk = 0u; mk < {self.K}u; mk = mk + 1u) {{")
        a, b = self._element(left, "mr", "mk"), self._element(right, "mk", "mc")
        out.append(f"    msum = fma(f32({a}), f32({b}), msum);")
        out += ["  }", f"  {acc}[me] = msum;", "}"]
        return out

    def store(self, array: str, offset: str, acc: str, col_major: bool, stride: int) -> list[str]:
        """Element (r, c) of the result acc to array[offset + r stride + c] (row-major) or
        array[offset + c stride + r]."""
        if not self.emulated:
            call = FORMS["store"].format(
                array=array, offset=offset, value=acc, stride=stride, **_layout(col_major)
            )
            return [call + ";"]
        E = self.M * self.N // self.S
        at = f"mc * {stride}u + mr" if col_major else f"mr * {stride}u + mc"
        out = [f"for (var me = 0u; me < {E}u; me = me + 1u) {{"]
        out += self._lane_element("me")
        out += [f"  {array}[{offset} + {at}] = {acc}[me];", "}"]
        return out

    def _lane_element(self, e: str) -> list[str]:
        """(r, c): the result element the emulated lane holds as its element e."""
        E = self.M * self.N // self.S
        return [
            f"  let mx = (li % {self.S}u) * {E}u + {e};",
            f"  let mr = mx / {self.N}u;",
            f"  let mc = mx % {self.N}u;",
        ]

    def _element(self, name: str, r: str, c: str) -> str:
        array, col_major, stride = self.loaded[name]
        at = f"{c} * {stride}u + {r}" if col_major else f"{r} * {stride}u + {c}"
        return f"{array}[{name} + {at}]"


def _layout(col_major: bool) -> dict:
    """A matrix's layout in either form's words."""
    return {
        "col_major": "true" if col_major else "false",
        "layout": "col_major" if col_major else "row_major",
    }
