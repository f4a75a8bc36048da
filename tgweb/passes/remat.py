"""Rematerialization: recompute a cheap value where it is read again much later, instead
of keeping it stored in between.

A training step reads many forward values twice: in the forward pass and, much later,
in the backward pass. When such a value is a short elementwise function of values
that stay stored until its late readers run anyway (a layer norm's output
x_hat * gamma + beta from x_hat), or a kernel kind registered with recompute=True over
such a value (x_hat itself, normalize(x), from x), the late readers get a copy of that computation
instead. Fusion then folds an elementwise copy into their kernel (or gives it a small
kernel of its own in front of a matmul), and the original value's memory is free from
its last early reader on. Results are bit-identical: the copy runs the same operations
on the same stored operands.
"""

from __future__ import annotations

from ..ir import REGISTRY, Tensor, prod, replace

MIN_GAP = 8  # kernels between an early and a late reader before recomputing pays
MAX_OPS = 4  # operations one recomputation may copy


def clonable(t: Tensor) -> bool:
    """Kinds a fused elementwise kernel can compute (elementwise math, broadcasts, slices
    and other index moves), except constants; and the kernel kinds marked recompute."""
    d = REGISTRY[t.kind]
    return d.role in ("elementwise", "index") or d.recompute


def _free(t: Tensor) -> bool:
    """Always in memory (leaves) or written as literals (constants)."""
    return REGISTRY[t.kind].role in ("leaf", "const")


def rematerialize(
    nodes: list[Tensor], pos: dict[int, int], stored: set[int], keep: set[int], root_of, new_id
) -> list[Tensor] | None:
    """nodes (computed nodes in topological order) with the late readers of recomputable
    values rewired to copies, the copies inserted in front of them; None if no value is
    worth it. pos: node id -> position of its kernel in the schedule; stored: ids of
    values written to memory; keep: ids that must stay stored as they are (outputs,
    captures, updates, gradients); root_of(t): t with aliases resolved; new_id(): a
    fresh tensor id."""
    # readers of each stored value in other kernels: (position, node)
    readers: dict[int, list[tuple[int, Tensor]]] = {}
    for n in nodes:
        for x in n.inputs:
            r = root_of(x)
            if r.id in stored and n.id in pos and pos[n.id] != pos[r.id]:
                readers.setdefault(r.id, []).append((pos[n.id], n))
    last = {v: max(p for p, _ in rs) for v, rs in readers.items()}
    recomputed: set[int] = set()
    plans: list[tuple[Tensor, list[Tensor]]] = []  # value, its late readers

    def available(x: Tensor, start: int, end: int, budget: list[int], through: list[int]) -> bool:
        """x can be read or recomputed at every kernel in [start, end] without keeping
        anything stored longer than it already is. A stored x freed before `end` is
        recomputed too (its id goes to `through`): the slice of the attention output that
        only a permute reads early, say."""
        r = root_of(x)
        if _free(r):
            return True
        if r.id in stored and r.id not in recomputed:
            if pos[r.id] < start and last.get(r.id, -1) >= end:
                return True
            through.append(r.id)
        if r is not x or not clonable(r) or budget[0] == 0:
            return False  # recomputing through a view is not supported
        budget[0] -= 1
        return all(available(i, start, end, budget, through) for i in r.inputs)

    for v in nodes:
        if v.id not in readers or v.id in keep or not clonable(v) or prod(v.shape) == 1:
            continue
        # the kernel that computes v counts as its first reader: when every other reader
        # is late, the copies serve them all and v is no longer stored at all
        ps = sorted({pos[v.id]} | {p for p, _ in readers[v.id]})
        gap, i = max((b - a, i) for i, (a, b) in enumerate(zip(ps, ps[1:])))
        if gap < MIN_GAP:
            continue
        start, end = ps[i + 1], ps[-1]
        budget, through = [MAX_OPS], []
        if all(available(x, start, end, budget, through) for x in v.inputs):
            recomputed.update([v.id, *through])
            plans.append((v, [n for p, n in readers[v.id] if p >= start]))
    if not plans:
        return None

    return _rewire(nodes, plans, stored, recomputed, root_of, new_id)


def _rewire(nodes, plans, stored, recomputed, root_of, new_id) -> list[Tensor]:
    """nodes with each planned value's late readers reading copies of its computation,
    the copies inserted in front of the first of those readers."""
    current = {n.id: n for n in nodes}  # node id -> its latest (rewired) version
    before: dict[int, list[Tensor]] = {}  # node id -> copies to insert in front of it
    index = {n.id: k for k, n in enumerate(nodes)}
    for v, late in plans:
        copies: dict[int, Tensor] = {}
        made: list[Tensor] = []

        def copy(x: Tensor) -> Tensor:
            """x as the late readers see it: copies of what is recomputed, views of them
            copied too, everything else as it is."""
            r = root_of(x)
            if _free(r) or (r.id in stored and r.id not in recomputed):
                return x
            if x.id not in copies:
                ins = tuple(copy(i) for i in x.inputs)  # inputs first: their ids come before c's
                c = replace(x, id=new_id(), inputs=ins)
                copies[x.id] = c
                if x is r:
                    made.append(c)
            return copies[x.id]

        for n in late:
            n = current[n.id]
            current[n.id] = replace(n, inputs=tuple(copy(x) if root_of(x) is v else x for x in n.inputs))
        head = min((n.id for n in late), key=index.__getitem__)
        before.setdefault(head, []).extend(made)
    out = []
    for n in nodes:
        out.extend(before.get(n.id, []))
        out.append(current[n.id])
    return out
