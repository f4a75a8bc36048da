"""In-place writes: which values a step writes over the memory of others. A parameter's
or state's update is written straight into its leaf's buffer when that is safe, else
copied there at the end of the step (place_updates); a result may be written over an
intermediate its kernel is the last to read (overwrites). `sched` is lowering's
KernelOrder: its groups in order, the stored ids each kernel reads, the kernel of each
node, the stored ids."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..ir import ITEMSIZE, REGISTRY, Graph, Tensor, TraceError, prod, root
from .fusion import Group, same_index


@dataclass
class Updates:
    inplace: dict[int, int] = field(default_factory=dict)  # update node id -> leaf id it overwrites
    copies: list[tuple[Tensor, Tensor]] = field(default_factory=list)  # (leaf, new value) copied at the end


def place_updates(graph: Graph, sched) -> Updates:
    """Each param/state update is written straight into its leaf's buffer when that is
    safe, else copied there by a kernel at the end of the step."""
    leaves = {**graph.params, **graph.states}
    out = Updates()
    last_read = _last_reads(sched)
    outs = {root(t).id for t in list(graph.outputs.values()) + list(graph.captures.values())}
    elsewhere: dict[int, set[int]] = {}
    for name, u in graph.updates.items():
        leaf = leaves.get(name)
        if leaf is None:
            raise TraceError(f"update for {name!r}, which is neither a param nor a state")
        if u.shape != leaf.shape or u.dtype != leaf.dtype:
            raise TraceError(
                f"update for {name!r} has {u.dtype}{list(u.shape)}, not {leaf.dtype}{list(leaf.shape)}",
                u.site,
            )
        if u is leaf:
            continue
        if u.id not in outs and u.id not in out.inplace and _inplace_ok(u, leaf, sched, last_read, elsewhere):
            out.inplace[u.id] = leaf.id
        else:
            out.copies.append((leaf, u))
    return out


def _last_reads(sched) -> dict[int, int]:
    """Stored value id -> the last kernel that reads it."""
    return {vid: k for k, rs in enumerate(sched.reads) for vid in rs}


def _inplace_ok(u: Tensor, leaf: Tensor, sched, last_read: dict[int, int], elsewhere: dict) -> bool:
    """u may be written straight into leaf's buffer: u is stored by a fused group that
    reads leaf only at the same element, and no later kernel reads leaf's old value.
    elsewhere: kernel index -> what its group reads elsewhere (_reads), filled as asked."""
    if REGISTRY[u.kind].role in ("leaf", "view", "const"):
        return False
    k = sched.pos_of.get(u.id)
    if k is None:
        return False
    g = sched.groups[k]
    if g.kind != "ew" or u.id not in g.stored:
        return False
    if k not in elsewhere:
        elsewhere[k] = _reads(g)[1]
    return leaf.id not in elsewhere[k] and last_read.get(leaf.id, k) <= k


def _reads(part: Group) -> tuple[set[int], set[int]]:
    """(ids of the stored tensors part's members read, those of them some member reads at
    another element than its own: through a view, by a kind that reads other indices, or
    at another shape than its own and the part's)."""
    read, away = set(), set()
    shape = tuple(part.shape)
    for m in part.members:
        same = same_index(m.kind) and tuple(m.shape) == shape
        for x in m.inputs:
            r = root(x)
            read.add(r.id)
            if x is not r or not same or tuple(x.shape) != shape:
                away.add(r.id)
    return read, away


def overwrites(sched, keep: set[int], by_id: dict[int, Tensor]) -> dict[int, int]:
    """result id -> id of the intermediate it may be written over: the kernel computing
    the result (elementwise, or the elementwise epilogue of a strided kernel writing its
    own layout) is the last to read the intermediate, reads it only directly at the
    result's own index, and both have the same size. One value is overwritten once."""
    last = _last_reads(sched)
    out: dict[int, int] = {}
    taken: set[int] = set()
    for k, g in enumerate(sched.groups):
        part = g if g.kind == "ew" else g.epilogue
        if part is None or (
            g.kind == "op" and (not REGISTRY[g.head.kind].strided or "out_view" in g.head.attrs)
        ):
            continue
        # stored tensors read some other way in this kernel: the host's operands
        others = {root(x).id for x in g.head.inputs} if g.kind == "op" else set()
        read, away = _reads(part)
        free = [
            x
            for x in sorted(sched.reads[k])
            if x in read
            and x not in away
            and x not in others
            and last[x] == k
            and x in sched.stored
            and x not in keep
            and x not in taken
            and prod(by_id[x].shape) == prod(part.shape)
        ]
        for m in part.members:
            if not free:
                break
            if (
                m.id in sched.stored
                and m.id not in keep
                and m.id not in taken
                and tuple(m.shape) == tuple(part.shape)
            ):
                x = next((x for x in free if ITEMSIZE[by_id[x].dtype] == ITEMSIZE[m.dtype]), None)
                if x is not None:
                    free.remove(x)
                    out[m.id] = x
                    taken |= {m.id, x}
    return out
