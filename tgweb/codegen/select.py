"""The select_scalars kernel: the first kernel of a training step's Program, which picks
the optimizer scalars of pipelined steps on the GPU (tgweb.pipeline says why)."""

from __future__ import annotations

from ..pipeline import APPLIED_READ, DEPTH, if_applied
from ..program import Binding, Kernel


def select_kernel(word: dict[str, int], scalars_buffer: int, ok_buffer: int, ok_at: int) -> Kernel:
    """word: each host scalar's word in the scalars buffer (in order; the count of applied
    runs is kept in the word after them); ok_at: the word of the `ok` output in ok_buffer.
    It adds the last run's ok to the count, then, when j of the steps the host had not read
    back were applied (1 <= j <= DEPTH), copies each scalar's value for that j over its plain
    one. A scalar's DEPTH values lie in consecutive words (tgweb.pipeline declares them so and
    the planner packs scalars in order), so the copy is one indexed read, not a branch per j:
    SwiftShader compiles a switch of DEPTH cases about three times as slowly."""
    copies = []
    for n in word:
        if if_applied(n, 1) not in word:
            continue
        first = word[if_applied(n, 1)]
        if [word.get(if_applied(n, j)) for j in range(1, DEPTH + 1)] != list(range(first, first + DEPTH)):
            raise AssertionError(f"the scalars {n}@1..{DEPTH} are not in consecutive words")
        copies.append(f"    s[{word[n]}u] = s[{first - 1}u + j];\n")
    count = len(word)
    wgsl = (
        "@group(0) @binding(0) var<storage, read_write> s: array<u32>;\n"
        "@group(0) @binding(1) var<storage, read> ok: array<u32>;\n"
        "@compute @workgroup_size(1)\n"
        "fn main() {\n"
        f"  let applied = s[{count}u] + select(0u, 1u, ok[{ok_at}u] != 0u);\n"
        f"  s[{count}u] = applied;\n"
        f"  let j = applied - s[{word[APPLIED_READ]}u];\n"
        f"  if (j >= 1u && j <= {DEPTH}u) {{\n" + "".join(copies) + "  }\n}\n"
    )
    bindings = [Binding(scalars_buffer, "read_write"), Binding(ok_buffer, "read")]
    return Kernel("k_select_scalars", wgsl, bindings, (1, 1, 1), ["select_scalars"], "tgweb.pipeline")
