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

from operator import is_not

from ..ir import REGISTRY, Tensor, prod, replace

MIN_GAP = 8  # kernels between an early and a late reader before recomputing pays
MAX_OPS = 4  # operations one recomputation may copy
FIT_OPS = 8  # operations one recomputation may copy to fit a memory budget


def clonable(t: Tensor) -> bool:
    """Kinds a fused elementwise kernel can compute (elementwise math, broadcasts, slices
    and other index moves), except constants; and the kernel kinds marked recompute."""
    d = REGISTRY[t.kind]
    return d.role in ("elementwise", "index") or d.recompute


def _free(t: Tensor) -> bool:
    """Always in memory (leaves) or written as literals (constants)."""
    return REGISTRY[t.kind].role in ("leaf", "const")


def _cost(t: Tensor) -> int:
    """The arithmetic of computing t once: its kind's flops, else one operation per element."""
    f = REGISTRY[t.kind].flops
    return f(t) if f is not None else prod(t.shape)


def _costly(t: Tensor) -> bool:
    """Clonable, or a kernel kind recomputed only to fit a memory budget (a matmul)."""
    return clonable(t) or REGISTRY[t.kind].flops is not None


class _Readers:
    """The stored values' readers in the schedule, and how a value is recomputed for its
    late readers. pos: node id -> position of its kernel; stored: ids of values written
    to memory; root_of(t): t with aliases resolved."""

    def __init__(self, nodes: list[Tensor], pos: dict[int, int], stored: set[int], root_of) -> None:
        self.pos, self.stored, self.root_of = pos, stored, root_of
        self.of: dict[int, list[tuple[int, Tensor]]] = {}  # stored value -> [(position, reader)]
        for n in nodes:
            for x in n.inputs:
                r = root_of(x)
                if r.id in stored and n.id in pos and pos[n.id] != pos[r.id]:
                    self.of.setdefault(r.id, []).append((pos[n.id], n))
        self.last = {v: max(p for p, _ in rs) for v, rs in self.of.items()}
        self.recomputed: set[int] = set()  # values the copies planned so far recompute

    def positions(self, v: Tensor) -> list[int]:
        """Where v is written and read: the kernel that computes v counts as its first
        reader, so when every other reader is late the copies serve them all and v is
        no longer stored at all."""
        return sorted({self.pos[v.id]} | {p for p, _ in self.of[v.id]})

    def late(self, v: Tensor, start: int) -> list[Tensor]:
        return [n for p, n in self.of[v.id] if p >= start]

    def chain(self, v: Tensor, start: int, end: int, ops: int, can) -> list[Tensor] | None:
        """The nodes copied to recompute v at every kernel in [start, end] (v first),
        copying at most `ops` nodes that `can` accepts (a node reached twice counts
        twice) and keeping nothing stored longer than it already is; None if that is
        not possible. A stored value freed before
        `end` is recomputed too: the slice of the attention output that only a permute
        reads early, say."""
        out: list[Tensor] = []

        def available(x: Tensor) -> bool:
            r = self.root_of(x)
            if _free(r):
                return True
            if r.id in self.stored and r.id not in self.recomputed:
                if self.pos[r.id] < start and self.last.get(r.id, -1) >= end:
                    return True
            if r is not x:
                # a view of an f16 copy (mixed precision's saved activations) is recomputed
                # with its input (the copies copy it too); other views are not followed
                return r.dtype == "f16" and available(x.inputs[0])
            if not can(r) or len(out) == ops:
                return False
            out.append(r)
            return all(available(i) for i in r.inputs)

        out.append(v)
        return out if all(available(x) for x in v.inputs) else None


def rematerialize(
    nodes: list[Tensor], pos: dict[int, int], stored: set[int], keep: set[int], root_of, new_id
) -> list[Tensor] | None:
    """nodes (computed nodes in topological order) with the late readers of recomputable
    values rewired to copies, the copies inserted in front of them; None if no value is
    worth it. pos: node id -> position of its kernel in the schedule; stored: ids of
    values written to memory; keep: ids that must stay stored as they are (outputs,
    captures, updates, gradients); root_of(t): t with aliases resolved; new_id(): a
    fresh tensor id."""
    rd = _Readers(nodes, pos, stored, root_of)
    plans: list[tuple[Tensor, list[Tensor]]] = []  # value, its late readers
    for v in nodes:
        if v.id not in rd.of or v.id in keep or not clonable(v) or prod(v.shape) == 1:
            continue
        ps = rd.positions(v)
        gap, i = max((b - a, i) for i, (a, b) in enumerate(zip(ps, ps[1:])))
        if gap < MIN_GAP:
            continue
        copied = rd.chain(v, ps[i + 1], ps[-1], MAX_OPS + 1, clonable)
        if copied is not None:
            rd.recomputed.update(c.id for c in copied)
            plans.append((v, rd.late(v, ps[i + 1])))
    if not plans:
        return None
    return _rewire(nodes, plans, stored, rd.recomputed, root_of, new_id)


def fit(nodes, pos, stored, keep, root_of, new_id, peak: int, live: dict[int, int], need: int):
    """For a plan over its memory budget: nodes with values live across the kernel at
    position `peak` recomputed (products too) for their readers after it instead of kept,
    the cheapest recomputation per byte freed there first, until `need` bytes are freed
    or nothing else can be. live: id -> bytes of each stored value live at the peak;
    the other arguments as rematerialize() takes them. Returns (nodes, [(value, bytes
    freed, flops a step)]), or None when nothing live there can be recomputed."""
    rd = _Readers(nodes, pos, stored, root_of)

    def attempt(v: Tensor):
        """(start of v's late readers, the nodes copied) or None."""
        ps = rd.positions(v)
        start = next((p for p in ps if p > peak), None)
        if start is None or peak in ps or v.id in rd.recomputed:
            return None
        copied = rd.chain(v, start, ps[-1], FIT_OPS, _costly)
        return None if copied is None else (start, list({c.id: c for c in copied}.values()))

    ranked = []
    for v in nodes:
        if v.id in live and v.id not in keep and v.id in rd.of and _costly(v) and (a := attempt(v)):
            ranked.append((sum(map(_cost, a[1])) / sum(live.get(c.id, 0) for c in a[1]), pos[v.id], v))
    plans, chosen, freed = [], [], 0
    for _, _, v in sorted(ranked, key=lambda r: r[:2]):
        a = attempt(v) if freed < need else None  # again: earlier choices change what is stored
        if a is None:
            continue
        start, copied = a
        gain = sum(live.get(c.id, 0) for c in copied if c.id not in rd.recomputed)
        rd.recomputed.update(c.id for c in copied)
        plans.append((v, rd.late(v, start)))
        chosen.append((v, gain, sum(map(_cost, copied))))
        freed += gain
    if not plans:
        return None
    return _rewire(nodes, plans, stored, rd.recomputed, root_of, new_id), chosen


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
    return relinked(out)


def relinked(nodes: list[Tensor]) -> list[Tensor]:
    """nodes with every input (and view) naming the current version of the node it
    reads, so that a later pass over them sees the rewired inputs of its inputs."""
    cur: dict[int, Tensor] = {}

    def fix(x: Tensor) -> Tensor:
        got = cur.get(x.id)
        if got is not None:
            return got
        if REGISTRY[x.kind].role != "view":
            return x
        return _current(x, tuple(map(fix, x.inputs)), cur)

    return [_current(n, tuple(map(fix, n.inputs)), cur) for n in nodes]


def _current(x: Tensor, ins: tuple, cur: dict[int, Tensor]) -> Tensor:
    """x reading ins (x itself when they are its inputs already), kept as x's current version."""
    c = x if not any(map(is_not, ins, x.inputs)) else replace(x, inputs=ins)
    cur[x.id] = c
    return c
