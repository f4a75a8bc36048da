"""Fusion: which nodes share a kernel.

Elementwise kinds and index ops (shape moves, gathers) of one shape fuse into a
group evaluated at one flat index; a member whose every consumer reads it at the
same index inside the group is never stored. Nodes are visited consumers first: a
producer joins a consumers' group whose members all read it at the same index, and
consumers in other groups read it from memory, unless that would close a cycle
between kernels. A group's position is its head (its last node).

Then a reduction absorbs a group that only feeds it (a prologue, computed while
loading), and a group that is the only consumer of a reduction's or an epilogue
host's result and has its size runs inside that kernel (an epilogue: mean's
scaling, a matmul's bias and activation). Constants are never grouped: every kernel
writes them as literals. Roles come from the op registry (tgweb.ir.OpDef.role).

Whether a join or a merge would make two kernels wait for each other is answered by a
topological order of the groups that every join and merge keeps valid (_Dag), so each
check searches only the groups placed between the two: linear in depth for a model of
repeated layers.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from ..ir import REGISTRY, prod

LONG_WAIT = 16  # nodes between a host kernel and a later input of its epilogue: no fusion
# A strided host (matmul) runs its epilogue on every output an invocation computes (its
# register tile: up to 128 on a GPU), so the epilogue's code is repeated that often, and
# transcendental functions (a polynomial and exp each, erf two of those) make kernels the
# GPU's compiler takes seconds over. NVIDIA's Vulkan driver (H100, its cache off) compiled
# the GELU backward's tiled matmul in 0.79 s without its epilogue, 1.41 s with an exp in it,
# 3.13 s with an erf and 4.81 s with both (shakespeare's, which held up every first start
# for as long; as a WGSL function called per output it took 5.46 s). An epilogue weighing
# more than this runs as an elementwise kernel of its own instead: one more pass over the
# product's memory, small beside the product (shakespeare's step: 48.3 -> 48.8 ms).
HEAVY = {"exp": 1, "log": 1, "pow": 1, "tanh": 1, "sin": 1, "cos": 1, "sigmoid": 1, "silu": 1, "softplus": 1}
HEAVY |= {"erf": 2, "gelu": 2}
STRIDED_EPILOGUE_WEIGHT = 1


def fusable(kind: str) -> bool:
    """Kinds a fused elementwise group can hold (the registry's fusion role)."""
    return REGISTRY[kind].fuses


def same_index(kind: str) -> bool:
    """Kinds that read their inputs at their own index (broadcasting aside)."""
    return REGISTRY[kind].same_index


def _is_const(n) -> bool:
    return REGISTRY[n.kind].role == "const"


@dataclass(eq=False)
class Group:
    kind: str  # "ew" (fused elementwise/index group) or "op" (a kernel of its own)
    head: object
    members: list = field(default_factory=list)  # topological order
    stored: set = field(default_factory=set)  # ids of members written to memory
    ext: set = field(default_factory=set)  # ids of stored tensors read from outside
    prologue: "Group | None" = None  # op groups: the fused input computation
    epilogue: "Group | None" = None  # op groups: the group that consumes the result
    absorbed: bool = False  # emitted inside another group's kernel
    order: int = 0  # position in the node order where the kernel runs

    @property
    def shape(self):
        return self.head.shape

    def parts(self) -> list["Group"]:
        """The group and its fused prologue and epilogue: everything one kernel computes."""
        return [self] + [p for p in (self.prologue, self.epilogue) if p is not None]


class _Ctx:
    """What the fusion steps share: consumers, roots, views resolved, bindings, in-place hints."""

    def __init__(self, nodes, consumers, roots, root_of, max_bindings, inplace, inlined):
        self.consumers, self.roots, self.root_of = consumers, roots, root_of
        self.max_bindings = max_bindings
        self.inplace = dict(inplace or {})
        self.inlined = set(inlined or ())
        self.rank = {n.id: k for k, n in enumerate(nodes)}  # topological position
        self.group_of: dict[int, Group] = {}
        self.dag = _Dag()
        # each elementwise group's member ids (while grouping: merges do not keep them), and
        # the members it must store because they are roots or read outside it or through a
        # view (fixed once a member joins, its consumers having come first; merges keep it)
        self.ids: dict[Group, set] = {}
        self.kept: dict[Group, set] = {}

    def ext_of(self, n, inside) -> set:
        """Stored tensors n reads from outside `inside` (all scalars share one buffer: -1)."""
        out = set()
        for x in n.inputs:
            r = self.root_of(x)
            if _is_const(r) or r.id in inside:
                continue
            if r.id in self.inlined:
                out |= self.ext_of(r, inside)
                continue
            out.add(-1 if r.kind == "scalar" else r.id)
        return out

    def fits(self, ext: set, stored: set) -> bool:
        return _bindings(ext, stored, self.inplace) <= self.max_bindings


def fuse(
    nodes, consumers, roots, root_of, max_bindings: int = 8, late=None, inplace=None, inlined=None
) -> list[Group]:
    """nodes: live computed nodes (no leaves, no views) in topological order.
    consumers: id -> [(consumer node, direct)] where direct is False when read via a view.
    roots: ids that must be stored (outputs, captures, updates).
    late: ids of update values; kernels writing only those are scheduled last.
    inplace: update value id -> id of the param/state it will likely overwrite.
    inlined: ids of size-1 nodes every reader recomputes (never grouped).
    root_of(t): t with views resolved. Returns the groups to emit, in order."""
    cx = _Ctx(nodes, consumers, roots, root_of, max_bindings, inplace, inlined)
    groups = _group(nodes, cx)
    groups = _merge_groups(groups, cx)
    _mark_stored(groups, cx)
    for g in groups:
        if g.kind == "op" and REGISTRY[g.head.kind].role == "reduction":
            _attach_prologue(g, cx)
        if g.kind == "op" and (REGISTRY[g.head.kind].role == "reduction" or REGISTRY[g.head.kind].epilogue):
            _attach_epilogue(g, cx)
    return _order(groups, set(late or ()), cx)


def _group(nodes, cx: _Ctx) -> list[Group]:
    """Fusable nodes join their consumers' group when all of those consumers are in
    that one group and read them at the same index (consumers first, so every other
    member comes later in topological order and no cycle can form); other nodes get a
    kernel of their own. Constants and inlined nodes are never grouped; constants that
    are outputs get a group of their own (they must exist in memory)."""
    groups: list[Group] = []
    for n in reversed(nodes):
        if _is_const(n) or n.id in cx.inlined:
            continue
        g = _join(n, cx) if fusable(n.kind) else None
        if g is None:
            g = (
                Group("ew", n, ext=cx.ext_of(n, {n.id}))
                if fusable(n.kind)
                else Group("op", n, ext=cx.ext_of(n, set()))
            )
            groups.append(g)
            cx.dag.add(g, _consumer_groups(n, cx))
        g.members.insert(0, n)
        cx.group_of[n.id] = g
        if g.kind == "ew":
            cx.ids.setdefault(g, set()).add(n.id)
            if n.id in cx.roots or _read_outside(n, g, cx):
                cx.kept.setdefault(g, set()).add(n.id)
    for n in nodes:
        if _is_const(n) and n.id in cx.roots:
            g = Group("ew", n, [n])
            groups.append(g)
            cx.group_of[n.id] = g
            cx.kept[g] = {n.id}
            cx.dag.add(g, [])  # kernels write constants as literals: nothing reads it
    return groups


def _consumer_groups(n, cx: _Ctx) -> list[Group]:
    """The groups of n's consumers so far, each once."""
    out = []
    for c, _ in cx.consumers.get(n.id, []):
        g = cx.group_of.get(c.id)
        if g is not None and g not in out:
            out.append(g)
    return out


def _join(n, cx: _Ctx) -> Group | None:
    """The consumers' group n can join (updating its external reads), or None."""
    cons = cx.consumers.get(n.id, [])
    cand = _consumer_groups(n, cx)
    for g in cand:
        if g.kind != "ew" or g.shape != n.shape:
            continue
        if not all(
            (d or _same_index_view(c, n, g, cx)) and same_index(c.kind)
            for c, d in cons
            if cx.group_of.get(c.id) is g
        ):
            continue
        others = [h for h in cand if h is not g]
        new_ext = (g.ext - {n.id}) | cx.ext_of(n, cx.ids[g])  # n does not read itself
        # what the group stores: roots, and members read outside it or through a view
        # (each a binding of its own, as _mark_stored will find)
        st = cx.kept.get(g, set()) | ({n.id} if n.id in cx.roots or others else set())
        # the other consumers then read g: refused when g waits for one of them
        if cx.fits(new_ext, st) and cx.dag.link(g, others):
            g.ext = new_ext
            return g
    return None


def _read_outside(m, g: Group, cx: _Ctx) -> bool:
    """Whether a member of g is read by another group or through a view."""
    return any(not d or cx.group_of.get(c.id) is not g for c, d in cx.consumers.get(m.id, []))


def _same_index_view(c, n, g: Group, cx: _Ctx) -> bool:
    """Whether c reads n only through views of g's shape: a view keeps the flat index
    (reshape, from_f16), so the group's emitter hands c the value n has there (a mixed
    graph's f16 copy read through its from_f16 view by the op computed from it)."""
    return all(tuple(x.shape) == g.shape for x in c.inputs if x is not n and cx.root_of(x) is n)


def _mark_stored(groups, cx: _Ctx) -> None:
    """A member is stored when it is a root or something outside its group (or a view)
    reads it: what grouping and merging kept."""
    for g in groups:
        if g.kind == "ew":
            g.stored = set(cx.kept.get(g, ()))  # kept holds members only


def _attach_prologue(g: Group, cx: _Ctx) -> None:
    """A reduction absorbs the group computing its input when that group feeds only it
    (also through a reshape: the flat index is the same)."""
    r = g.head
    x = cx.root_of(r.inputs[0])
    p = cx.group_of.get(x.id)
    if (
        p is not None
        and p.kind == "ew"
        and not p.absorbed
        and p.stored == {x.id}
        and x.id not in cx.roots
        and [c for c, _ in cx.consumers.get(x.id, [])] == [r]
        and len(p.ext) + 1 <= cx.max_bindings
    ):
        g.prologue = p
        p.absorbed = True


def _attach_epilogue(g: Group, cx: _Ctx) -> None:
    """A group of the result's size that is the only consumer of the result (also
    through a reshape to the group's shape) runs inside the host kernel, on the value
    before it is stored: bias and activation after a matmul, mean's scaling."""
    r = g.head
    cons = cx.consumers.get(r.id, [])
    if not cons or r.id in cx.roots:
        return
    e = cx.group_of.get(cons[0][0].id)
    if (
        e is None
        or e.kind != "ew"
        or e.absorbed  # another kernel's prologue or epilogue already
        or prod(e.shape) != prod(r.shape)
        or any(cx.group_of.get(c.id) is not e or not same_index(c.kind) for c, _ in cons)
        or any(inp.shape != e.shape for c, _ in cons for inp in c.inputs if cx.root_of(inp) is r)
        # f16 values are stored in pairs (codegen/kernel.py): by a host that holds both
        # values of each word (OpDef.pairs), else by an elementwise kernel of their own
        or any(m.dtype == "f16" for m in e.members if m.id in e.stored)
        and not (REGISTRY[r.kind].pairs and REGISTRY[r.kind].pairs(r))
        # a strided host (matmul) runs at the epilogue's place: not when the epilogue
        # waits for a result from much later (a tied weight's two gradients), which would
        # hold the host's operands (activations) until then
        or REGISTRY[r.kind].strided
        and any(cx.rank.get(x, -1) > cx.rank[r.id] + LONG_WAIT for x in e.ext)
        or REGISTRY[r.kind].strided
        and sum(HEAVY.get(m.kind, 0) for m in e.members) > STRIDED_EPILOGUE_WEIGHT
    ):
        return
    ext = (e.ext - {r.id}) | g.ext
    if g.prologue is not None:
        ext |= g.prologue.ext
    # an update in a host's epilogue is not counted as written in place: the planner may
    # give it a buffer of its own (the step's state updates beside the global norm)
    if len(ext) + len(e.stored) <= cx.max_bindings:
        g.epilogue = e
        e.absorbed = True


def _order(groups, late: set, cx: _Ctx) -> list[Group]:
    """The kernels in a topological order as close to their heads' order as it can be
    (an absorbed epilogue runs at its own head's position, inside its host). Kernels
    that only write updates nothing reads go last, so every other reader of a
    parameter or state runs first and the write can be in place."""
    out = []
    for g in groups:
        g.order = cx.rank[(g.epilogue or g).head.id]
        if not g.absorbed:
            out.append(g)

    def is_late(g):
        return (
            g.kind == "ew"
            and bool(g.stored)
            and all(
                i in late and all(d and cx.group_of.get(c.id) is g for c, d in cx.consumers.get(i, []))
                for i in g.stored
            )
        )

    owner = {m.id: g for g in out for p in g.parts() for m in p.members}
    deps: dict[int, set] = {id(g): set() for g in out}
    users: dict[int, list] = {id(g): [] for g in out}
    for g in out:
        for p in g.parts():
            for m in p.members:
                for x in m.inputs:
                    h = owner.get(cx.root_of(x).id)
                    if h is not None and h is not g and id(h) not in deps[id(g)]:
                        deps[id(g)].add(id(h))
                        users[id(h)].append(g)
    index = {id(g): k for k, g in enumerate(out)}
    heap = [((is_late(g), g.order, k), k, g) for k, g in enumerate(out) if not deps[id(g)]]
    heapq.heapify(heap)
    order = []
    while heap:
        _, k, g = heapq.heappop(heap)
        order.append(g)
        for u in users[id(g)]:
            deps[id(u)].discard(id(g))
            if not deps[id(u)]:
                heapq.heappush(heap, ((is_late(u), u.order, index[id(u)]), index[id(u)], u))
    if len(order) != len(out):  # pragma: no cover - the fusion rules exclude cycles
        raise AssertionError("fusion produced a cycle between kernels")
    return order


class _Dag:
    """The groups' dependency graph (an edge g -> h: h reads what g computes) and a
    topological order of it (pos), kept through every join and merge, so that a cycle
    check searches only the groups placed between the two ends: Pearce and Kelly's
    dynamic topological order. (The node order is no such order: a group's members are
    not contiguous in it.)"""

    def __init__(self) -> None:
        self.pos: dict[Group, int] = {}
        self.succ: dict[Group, set] = {}
        self.pred: dict[Group, set] = {}
        self._first = 0

    def add(self, g: Group, readers) -> None:
        """A new group, placed before every other (groups are made consumers first)."""
        self._first -= 1
        self.pos[g], self.succ[g], self.pred[g] = self._first, set(), set()
        for h in readers:
            self._edge(g, h)

    def link(self, g: Group, readers: list) -> bool:
        """Edges from g to each of readers; none when one would close a cycle."""
        new = [h for h in readers if h is not g and h not in self.succ[g]]
        for k, h in enumerate(new):
            if self.pos[h] < self.pos[g] and not self._reorder(h, g, direct_ok=False):
                for x in new[:k]:  # the order stays valid without them
                    self.succ[g].discard(x)
                    self.pred[x].discard(g)
                return False
            self._edge(g, h)
        return True

    def merge(self, keep: Group, gone: Group) -> bool:
        """Contracts gone into keep; refused (False, nothing changed) when a path between
        them through a third group would become a cycle."""
        lo, hi = sorted((keep, gone), key=self.pos.__getitem__)
        if not self._reorder(lo, hi, direct_ok=True):
            return False
        self.pos[keep] = self.pos[hi]  # hi now sits right before lo: either place is valid
        del self.pos[gone]
        for p in self.pred.pop(gone):
            self.succ[p].discard(gone)
            if p is not keep:
                self._edge(p, keep)
        for q in self.succ.pop(gone):
            self.pred[q].discard(gone)
            if q is not keep:
                self._edge(keep, q)
        return True

    def _edge(self, g: Group, h: Group) -> None:
        self.succ[g].add(h)
        self.pred[h].add(g)

    def _reorder(self, lo: Group, hi: Group, direct_ok: bool) -> bool:
        """Places hi before lo (pos[lo] < pos[hi]): the groups between them that reach hi
        move before those lo reaches, each set in its own order. False, with nothing
        moved, when lo reaches hi (not counting a direct edge, where direct_ok)."""
        top, bottom = self.pos[hi], self.pos[lo]
        ahead, stack = {lo}, [lo]
        while stack:
            v = stack.pop()
            for x in self.succ[v]:
                if x is hi:
                    if direct_ok and v is lo:
                        continue
                    return False
                if x not in ahead and self.pos[x] < top:
                    ahead.add(x)
                    stack.append(x)
        behind, stack = {hi}, [hi]
        while stack:
            for x in self.pred[stack.pop()]:
                if x not in behind and x is not lo and self.pos[x] > bottom:
                    behind.add(x)
                    stack.append(x)
        at = self.pos.__getitem__
        moved = sorted(behind, key=at) + sorted(ahead, key=at)
        for x, p in zip(moved, sorted(map(at, moved))):
            self.pos[x] = p
        return True


def _readers(g: Group, cx: _Ctx) -> list:
    """The other groups reading g's members (only the kept ones are read outside it)."""
    out = []
    for m in cx.kept.get(g, ()):
        for c, _ in cx.consumers.get(m, []):
            h = cx.group_of.get(c.id)
            if h is not None and h is not g and h not in out:
                out.append(h)
    return out


def _bindings(ext: set, stored: set, inplace: dict) -> int:
    """Bindings a group needs: what it reads plus what it writes, an update written
    over a tensor it also reads counted once."""
    return len(ext) + max(1, sum(1 for i in stored if inplace.get(i) not in ext))


def _merge_groups(groups, cx: _Ctx) -> list[Group]:
    """Merge elementwise groups of one shape that feed each other at the same index or
    read the same tensors (an optimizer's moment and parameter updates), when no third
    kernel sits between them and the bindings fit."""
    ew = [g for g in groups if g.kind == "ew"]
    alive = {id(g) for g in ew}
    for a, b, shared in _merge_candidates(ew, cx):
        a, b = cx.group_of[a.head.id], cx.group_of[b.head.id]  # follow earlier merges
        if a is b or id(a) not in alive or id(b) not in alive:
            continue
        gone = _merge(a, b, shared, cx)
        if gone is not None:
            alive.discard(id(gone))
    return [g for g in groups if g.kind != "ew" or id(g) in alive]


def _merge_candidates(ew: list[Group], cx: _Ctx) -> list[tuple[Group, Group, bool]]:
    """(group, group, whether they only share inputs): producer-consumer pairs first,
    then groups of one shape reading the same stored tensor."""
    pairs = []
    for g in ew:
        for m in g.members:
            for c, _d in cx.consumers.get(m.id, []):
                h = cx.group_of.get(c.id)
                if h is not None and h is not g and h.kind == "ew" and h.shape == g.shape:
                    pairs.append((g, h, False))
    by_input: dict = {}
    for g in ew:
        for x in g.ext:
            by_input.setdefault((x, g.shape), []).append(g)
    for gs in by_input.values():
        pairs += [(a, b, True) for a, b in zip(gs, gs[1:])]
    return pairs


def _merge(a: Group, b: Group, shared: bool, cx: _Ctx) -> Group | None:
    """Merge b and a into the one whose head is later; returns the group merged away,
    or None when they may not merge."""
    rank = cx.rank
    # a tensor one reads from the other is a kept member of the other
    kept = cx.kept.get(a, set()) | cx.kept.get(b, set())
    ext = (a.ext | b.ext) - kept
    if len(ext) + 1 > cx.max_bindings:  # the least _bindings can say: most candidates stop here
        return None
    if shared:
        # the merged kernel runs at the later head: no reader of the earlier group may
        # come before it (that would hold a forward value until its backward reader,
        # or delay the reader)
        early, later = sorted((a, b), key=lambda g: rank[g.head.id])
        if any(rank[h.head.id] < rank[later.head.id] for h in _readers(early, cx) if h is not later):
            return None
    # every read between the two must be a direct same-index read (of a kept member)
    both = (a, b)
    for x, y in both, (b, a):
        for i in cx.kept.get(x, ()):
            for c, d in cx.consumers.get(i, []):
                if cx.group_of.get(c.id) is y and (not d or not same_index(c.kind)):
                    return None
    # what the merged group stores: its kept members still read outside it
    at, cons = cx.group_of.get, cx.consumers
    st = {i for i in kept if i in cx.roots or any(at(c.id) not in both or not d for c, d in cons.get(i, []))}
    if not cx.fits(ext, st):
        return None
    keep, gone = (b, a) if rank[b.head.id] > rank[a.head.id] else (a, b)
    if not cx.dag.merge(keep, gone):  # a third kernel sits between them
        return None
    keep.members = sorted(a.members + b.members, key=lambda t: rank[t.id])
    keep.ext = ext
    cx.kept[keep] = st
    for m in gone.members:
        cx.group_of[m.id] = keep
    return gone
