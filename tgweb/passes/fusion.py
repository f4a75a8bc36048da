"""Fusion: which nodes share a kernel.

Elementwise kinds and index ops (shape moves, gathers) of one shape fuse into a
group evaluated at one flat index; a member whose every consumer reads it at the
same index inside the group is never stored. Nodes are visited consumers first,
so a producer joins its consumers' group only when all of them are in that one
group: every other member is then later in topological order than the producer,
and no cycle can form. A group's position is its head (its last node).

Then a reduction absorbs a group that only feeds it (a prologue, computed while
loading), and a group that is the only consumer of a reduction's result and has
its shape absorbs the reduction (an epilogue, e.g. mean's scaling).
`full` constants are never grouped: every kernel writes them as literals.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from ..codegen.elementwise import fusable, same_index

REDUCE_KINDS = ("sum", "max", "min", "argmax", "argmin")
EPILOGUE_HOSTS = REDUCE_KINDS + ("global_sumsq", "matmul")
LONG_WAIT = 16  # nodes between a matmul and a later input of its epilogue: no fusion


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

    @property
    def shape(self):
        return self.head.shape


def fuse(
    nodes, consumers, roots, root_of, max_bindings: int = 8, late=None, inplace=None, inlined=None
) -> list[Group]:
    """nodes: live computed nodes (no leaves, no aliases) in topological order.
    consumers: id -> [(consumer node, direct)] where direct is False when read via an alias.
    roots: ids that must be stored (outputs, captures, updates).
    late: ids of update values; kernels writing only those are scheduled last.
    inplace: update value id -> id of the param/state it will likely overwrite.
    root_of(t): t with aliases resolved. Returns the groups to emit, in order."""
    group_of: dict[int, Group] = {}
    groups: list[Group] = []
    inplace = dict(inplace or {})
    inlined = set(inlined or ())

    def ext_of(n, inside):
        out = set()
        for x in n.inputs:
            r = root_of(x)
            if r.kind == "full" or r.id in inside:
                continue
            if r.id in inlined:
                out |= ext_of(r, inside)
                continue
            out.add(-1 if r.kind == "scalar" else r.id)  # all scalars share one buffer
        return out

    for n in reversed(nodes):
        if n.kind == "full" or n.id in inlined:
            continue
        if fusable(n.kind):
            cons = consumers.get(n.id, [])
            target = None
            cand = []
            for c, _ in cons:
                g = group_of.get(c.id)
                if g is not None and g not in cand:
                    cand.append(g)
            for g in cand:
                if g.kind != "ew" or g.shape != n.shape:
                    continue
                if not all(d and same_index(c.kind) for c, d in cons if group_of.get(c.id) is g):
                    continue
                others = [h for h in cand if h is not g]
                if others and _depends(g, others, group_of, root_of):
                    continue  # g would wait for a kernel that waits for g
                ids = {m.id for m in g.members} | {n.id}
                new_ext = (g.ext - {n.id}) | ext_of(n, ids)
                st = {m.id for m in g.members if m.id in roots}
                if n.id in roots or others:
                    st.add(n.id)
                if _bindings(new_ext, st, inplace) <= max_bindings:
                    target = g
                    g.ext = new_ext
                    break
            if target is None:
                target = Group("ew", n)
                target.ext = ext_of(n, {n.id})
                groups.append(target)
            target.members.insert(0, n)
            group_of[n.id] = target
        else:
            g = Group("op", n, [n])
            g.ext = ext_of(n, set())
            groups.append(g)
            group_of[n.id] = g
    # constants that must exist in memory (they are outputs) get a group of their own
    for n in nodes:
        if n.kind == "full" and n.id in roots:
            g = Group("ew", n, [n])
            groups.append(g)
            group_of[n.id] = g

    rank = {n.id: k for k, n in enumerate(nodes)}  # topological position (copies have big ids)
    groups = _merge_groups(groups, group_of, consumers, roots, root_of, max_bindings, inplace, rank)

    for g in groups:
        if g.kind != "ew":
            continue
        for m in g.members:
            if m.id in roots or any(not d or group_of.get(c.id) is not g for c, d in consumers.get(m.id, [])):
                g.stored.add(m.id)

    by_id = {id(g): g for g in groups}
    for g in groups:
        if g.kind != "op" or g.head.kind not in EPILOGUE_HOSTS:
            continue
        r = g.head
        # prologue: the input is computed by a group that feeds only this reduction
        # (also through a reshape: the flat index is the same)
        x = root_of(r.inputs[0])
        p = group_of.get(x.id)
        if (
            r.kind in REDUCE_KINDS
            and p is not None
            and p.kind == "ew"
            and not p.absorbed
            and p.stored == {x.id}
            and x.id not in roots
            and [c for c, _ in consumers.get(x.id, [])] == [r]
            and len(p.ext) + 1 <= max_bindings
        ):
            g.prologue = p
            p.absorbed = True
        # epilogue: one group of the result's shape is the only consumer of the result
        # (also through a reshape of the result to the group's shape: same flat index)
        cons = consumers.get(r.id, [])
        if not cons or r.id in roots:
            continue
        e = group_of.get(cons[0][0].id)
        if (
            e is None
            or e.kind != "ew"
            or e.absorbed
            or _size(e.shape) != _size(r.shape)
            or any(group_of.get(c.id) is not e or not same_index(c.kind) for c, _ in cons)
            or any(inp.shape != e.shape for c, _ in cons for inp in c.inputs if root_of(inp) is r)
            or any(h.epilogue is e for h in by_id.values())
            # the host runs at the epilogue's place: a matmul not when the epilogue waits
            # for a result from much later (a tied weight's two gradients), which would
            # hold the matmul's operands (activations) until then
            or r.kind == "matmul"
            and any(rank.get(x, -1) > rank[r.id] + LONG_WAIT for x in e.ext)
        ):
            continue
        ext = (e.ext - {r.id}) | g.ext
        if g.prologue is not None:
            ext |= g.prologue.ext
        if _bindings(ext, e.stored, inplace) > max_bindings:
            continue
        g.epilogue = e
        e.absorbed = True
    # an absorbed epilogue is emitted at its own head's position, inside its host
    out = []
    for g in groups:
        if g.kind == "op" and g.epilogue is not None:
            g.order = rank[g.epilogue.head.id]
        else:
            g.order = rank[g.head.id]
        if not g.absorbed:
            out.append(g)
    # kernels that only write updates (nothing reads their results) go last, so that
    # every other reader of a parameter or state runs first and the write can be in place
    late = set(late or ())

    def is_late(g):
        return (
            g.kind == "ew"
            and bool(g.stored)
            and not g.absorbed
            and all(
                i in late and all(d and group_of.get(c.id) is g for c, d in consumers.get(i, []))
                for i in g.stored
            )
        )

    # a topological order of the kernels, as close to the heads' order as it can be
    owner: dict[int, Group] = {}
    for g in out:
        for p in [g] + [q for q in (g.prologue, g.epilogue) if q is not None]:
            for m in p.members:
                owner[m.id] = g
    deps: dict[int, set] = {id(g): set() for g in out}
    users: dict[int, list] = {id(g): [] for g in out}
    for g in out:
        for p in [g] + [q for q in (g.prologue, g.epilogue) if q is not None]:
            for m in p.members:
                for x in m.inputs:
                    h = owner.get(root_of(x).id)
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
                k = index[id(u)]
                heapq.heappush(heap, ((is_late(u), u.order, k), k, u))
    if len(order) != len(out):  # pragma: no cover - the fusion rules exclude cycles
        raise AssertionError("fusion produced a cycle between kernels")
    return order


def _depends(g: Group, others: list, group_of, root_of, budget: int = 4000) -> bool:
    """Whether group g reads (transitively) anything computed by a group in others."""
    targets = {id(h) for h in others}
    seen = {id(g)}
    stack = [g]
    while stack:
        h = stack.pop()
        parts = [h] + [p for p in (h.prologue, h.epilogue) if p is not None]
        for p in parts:
            for m in p.members:
                for x in m.inputs:
                    budget -= 1
                    if budget < 0:
                        return True  # too far to tell: assume the worst
                    r = root_of(x)
                    q = group_of.get(r.id)
                    if q is None or id(q) in seen:
                        continue
                    if id(q) in targets:
                        return True
                    seen.add(id(q))
                    stack.append(q)
    return False


def _readers(g: Group, group_of, consumers) -> list:
    out = []
    for m in g.members:
        for c, _ in consumers.get(m.id, []):
            h = group_of.get(c.id)
            if h is not None and h is not g and h not in out:
                out.append(h)
    return out


def _size(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _bindings(ext: set, stored: set, inplace: dict) -> int:
    """Bindings a group needs: what it reads plus what it writes, an update written
    over a tensor it also reads counted once."""
    return len(ext) + max(1, sum(1 for i in stored if inplace.get(i) not in ext))


def _merge_groups(groups, group_of, consumers, roots, root_of, max_bindings, inplace, rank):
    """Merge elementwise groups of one shape that feed each other at the same index or
    read the same tensors (an optimizer's moment and parameter updates), when no third
    kernel sits between them and the bindings fit."""
    ew = [g for g in groups if g.kind == "ew"]
    alive = {id(g) for g in ew}
    by_input: dict = {}
    for g in ew:
        for x in g.ext:
            by_input.setdefault((x, g.shape), []).append(g)
    pairs = []  # (group, group, whether they only share inputs)
    for g in ew:
        for m in g.members:
            for c, _d in consumers.get(m.id, []):
                h = group_of.get(c.id)
                if h is not None and h is not g and h.kind == "ew" and h.shape == g.shape:
                    pairs.append((g, h, False))
    for gs in by_input.values():
        for a, b in zip(gs, gs[1:]):
            pairs.append((a, b, True))
    for a, b, shared in pairs:
        a, b = group_of[a.head.id], group_of[b.head.id]  # follow earlier merges
        if a is b or id(a) not in alive or id(b) not in alive:
            continue
        if shared:
            # the merged kernel runs at the later head: no reader of the earlier group may
            # come before it (that would hold a forward value until its backward reader,
            # or delay the reader)
            early, later = sorted((a, b), key=lambda g: rank[g.head.id])
            if any(
                rank[h.head.id] < rank[later.head.id]
                for h in _readers(early, group_of, consumers)
                if h is not later
            ):
                continue
        # every read between the two must be a direct same-index read
        ok = True
        for x, y in ((a, b), (b, a)):
            ids = {m.id for m in x.members}
            for m in y.members:
                for inp in m.inputs:
                    r = root_of(inp)
                    if r.id in ids and (r is not inp or not same_index(m.kind)):
                        ok = False
        if not ok:
            continue
        members = sorted(a.members + b.members, key=lambda t: rank[t.id])
        ids = {m.id for m in members}
        ext = {x for x in (a.ext | b.ext) if x not in ids}
        st = {
            m.id
            for m in members
            if m.id in roots
            or any(group_of.get(c.id) not in (a, b) or not d for c, d in consumers.get(m.id, []))
        }
        if _bindings(ext, st, inplace) > max_bindings:
            continue
        mids = [x for x in _readers(a, group_of, consumers) if x is not b]
        if mids and _depends(b, mids, group_of, root_of):
            continue
        mids = [x for x in _readers(b, group_of, consumers) if x is not a]
        if mids and _depends(a, mids, group_of, root_of):
            continue
        keep, gone = (b, a) if rank[b.head.id] > rank[a.head.id] else (a, b)
        keep.members = members
        keep.ext = ext
        for m in gone.members:
            group_of[m.id] = keep
        alive.discard(id(gone))
    return [g for g in groups if g.kind != "ew" or id(g) in alive]
