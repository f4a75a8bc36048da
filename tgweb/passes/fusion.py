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

from dataclasses import dataclass, field

from ..codegen.elementwise import fusable, same_index

REDUCE_KINDS = ("sum", "max", "min", "argmax", "argmin")
EPILOGUE_HOSTS = REDUCE_KINDS + ("global_sumsq",)


@dataclass
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


def fuse(nodes, consumers, roots, root_of, max_bindings: int = 8) -> list[Group]:
    """nodes: live computed nodes (no leaves, no aliases) in topological order.
    consumers: id -> [(consumer node, direct)] where direct is False when read via an alias.
    roots: ids that must be stored (outputs, captures, updates).
    root_of(t): t with aliases resolved. Returns the groups to emit, in order."""
    group_of: dict[int, Group] = {}
    groups: list[Group] = []

    def ext_of(n, inside):
        out = set()
        for x in n.inputs:
            r = root_of(x)
            if r.kind == "full" or r.id in inside:
                continue
            out.add(r.id)
        return out

    for n in reversed(nodes):
        if n.kind == "full":
            continue
        if fusable(n.kind):
            cons = consumers.get(n.id, [])
            target = None
            if cons and all(d for _, d in cons):
                gs = {id(group_of.get(c.id)) for c, _ in cons}
                g = group_of.get(cons[0][0].id)
                if (len(gs) == 1 and g is not None and g.kind == "ew" and g.shape == n.shape
                        and all(same_index(c.kind) for c, _ in cons)):
                    ids = {m.id for m in g.members} | {n.id}
                    new_ext = (g.ext - {n.id}) | ext_of(n, ids)
                    stored_est = sum(1 for m in g.members if m.id in roots) + (n.id in roots)
                    if len(new_ext) + max(1, stored_est) <= max_bindings:
                        target = g
                        g.ext = new_ext
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

    for g in groups:
        if g.kind != "ew":
            continue
        for m in g.members:
            if m.id in roots or any(not d or group_of.get(c.id) is not g
                                    for c, d in consumers.get(m.id, [])):
                g.stored.add(m.id)

    by_id = {id(g): g for g in groups}
    for g in groups:
        if g.kind != "op" or g.head.kind not in EPILOGUE_HOSTS:
            continue
        r = g.head
        # prologue: the input is computed by a group that feeds only this reduction
        x = r.inputs[0]
        p = group_of.get(x.id)
        if (r.kind in REDUCE_KINDS and p is not None and p.kind == "ew" and not p.absorbed
                and p.stored == {x.id}
                and x.id not in roots and consumers.get(x.id) == [(r, True)]
                and len(p.ext) + 1 <= max_bindings):
            g.prologue = p
            p.absorbed = True
        # epilogue: one group of the result's shape is the only consumer of the result
        cons = consumers.get(r.id, [])
        if not cons or r.id in roots or not all(d for _, d in cons):
            continue
        e = group_of.get(cons[0][0].id)
        if (e is None or e.kind != "ew" or e.absorbed or e.shape != r.shape
                or any(group_of.get(c.id) is not e or not same_index(c.kind) for c, _ in cons)
                or any(h.epilogue is e for h in by_id.values())):
            continue
        ext = (e.ext - {r.id}) | g.ext
        if g.prologue is not None:
            ext |= g.prologue.ext
        if len(ext) + len(e.stored) > max_bindings:
            continue
        g.epilogue = e
        e.absorbed = True
    # an absorbed epilogue is emitted at its own head's position, inside its host
    out = []
    for g in groups:
        if g.kind == "op" and g.epilogue is not None:
            g.order = g.epilogue.head.id
        else:
            g.order = g.head.id
        if not g.absorbed:
            out.append(g)
    out.sort(key=lambda g: g.order)
    return out
