"""WGSL emitters by family; program.py defines the Program.

register_all() fills OpDef.wgsl of every op kind that has WGSL:
("expr", fn) for elementwise kinds (fused into groups), ("index", fn) for index
ops (shape moves and gathers, also fusable), ("kernel", fn) for kinds that own a
kernel (reductions, row ops, matmul, ...). Leaf and alias kinds need none.
"""

from __future__ import annotations


def register_all() -> None:
    from .. import ops  # noqa: F401 - registers the op kinds
    from ..ir import REGISTRY
    from . import elementwise, extra, matmul, reduce

    table = {}
    for k, fn in elementwise.EXPR.items():
        table[k] = ("expr", fn)
    table["full"] = ("expr", None)
    table["arange"] = ("expr", None)
    for k, fn in elementwise.INDEX_OPS.items():
        table[k] = ("index", fn)
    for k in ("sum", "max", "min", "argmax", "argmin"):
        table[k] = ("kernel", reduce.emit_reduce)
    for k in ("softmax", "log_softmax", "causal_softmax"):
        table[k] = ("kernel", reduce.emit_softmax)
    table["matmul"] = ("kernel", matmul.emit_matmul)
    table.update(extra.table())
    for k, v in table.items():
        if k in REGISTRY:
            REGISTRY[k].wgsl = v
