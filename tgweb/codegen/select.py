"""The select_scalars kernel: the first kernel of a training step's Program, which picks
the optimizer scalars of pipelined steps on the GPU (tgweb.pipeline says why)."""

from __future__ import annotations

from ..pipeline import APPLIED_READ, DEPTH, if_applied
from ..program import Binding, Kernel


def select_kernel(word: dict[str, int], scalars_buffer: int, ok_buffer: int, ok_at: int) -> Kernel:
    """word: each host scalar's word in the scalars buffer (in order; the count of applied
    runs is kept in the word after them); ok_at: the word of the `ok` output in ok_buffer.
    It adds the last run's ok to the count, then copies the set the count selects."""
    count = len(word)
    cases = []
    for j in range(1, DEPTH + 1):
        copies = " ".join(
            f"s[{word[n]}u] = s[{word[if_applied(n, j)]}u];" for n in word if if_applied(n, j) in word
        )
        cases.append(f"    case {j}u: {{ {copies} }}\n")
    wgsl = (
        "@group(0) @binding(0) var<storage, read_write> s: array<u32>;\n"
        "@group(0) @binding(1) var<storage, read> ok: array<u32>;\n"
        "@compute @workgroup_size(1)\n"
        "fn main() {\n"
        f"  let applied = s[{count}u] + select(0u, 1u, ok[{ok_at}u] != 0u);\n"
        f"  s[{count}u] = applied;\n"
        f"  switch (applied - s[{word[APPLIED_READ]}u]) {{\n" + "".join(cases) + "    default: {}\n  }\n}\n"
    )
    bindings = [Binding(scalars_buffer, "read_write"), Binding(ok_buffer, "read")]
    return Kernel("k_select_scalars", wgsl, bindings, (1, 1, 1), ["select_scalars"], "tgweb.pipeline")
