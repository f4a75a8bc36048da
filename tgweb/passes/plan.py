"""The buffer planner: which GPU buffer holds each stored value.

Input: the values that need storage and the kernels (steps) in execution order,
each with the values it reads and writes. Output: the buffer list and a map from
value id to buffer id.

Kinds param, grad, state, input, output, capture and scalars are never pooled.
A value with `same_as` shares the buffer of that value (aliases such as reshape,
and optimizer updates written in place).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..codegen.program import Buffer


@dataclass
class Value:
    id: int
    nbytes: int
    kind: str
    label: str = ""
    same_as: int | None = None


@dataclass
class Step:
    reads: list[int] = field(default_factory=list)
    writes: list[int] = field(default_factory=list)


def plan(values: list[Value], steps: list[Step]) -> tuple[list[Buffer], dict[int, int]]:
    """Assign buffers. This first version gives every value its own buffer."""
    buffers: list[Buffer] = []
    buffer_of: dict[int, int] = {}
    by_id = {v.id: v for v in values}

    def root(v: Value) -> Value:
        while v.same_as is not None:
            v = by_id[v.same_as]
        return v

    for v in values:
        r = root(v)
        if r.id not in buffer_of:
            buffer_of[r.id] = len(buffers)
            buffers.append(Buffer(len(buffers), max(4, (r.nbytes + 3) // 4 * 4), r.kind, r.label))
        buffer_of[v.id] = buffer_of[r.id]
    return buffers, buffer_of
