"""lower(graph) -> Program, in named stages that each can be tested alone:

  computed_nodes   views folded into strided kernels, dead code dropped, every node
                   left has a WGSL emitter
  schedule         kernels: size-1 chains inlined, fusion, rematerialization
  place_updates    each param/state update written in place, or copied at the end
                   (passes/inplace.py)
  assign_buffers   values and kernel steps handed to the planner; storage of a tensor
  emit             the WGSL of every kernel
  pack             the Program, its slots and meta

Every backend plans through here (the reference backend reports this plan too).
Pure Python (no NumPy): it runs in the browser too.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, replace
from typing import Callable, NamedTuple

from .codegen.kernel import KernelCtx, Part, emit_copy, emit_group
from .codegen.reuse import KernelMemo, kernel_name
from .codegen.select import select_kernel
from .codegen.target import Target
from .ir import ITEMSIZE, REGISTRY, Graph, Tensor, TraceError, gc_paused, prod, root
from .passes.fusion import Group, fuse
from .passes.inplace import Updates, overwrites, place_updates
from .passes.plan import Step, Value, plan
from .passes.remat import fit, relinked, rematerialize
from .passes.views import fold_views
from .pipeline import APPLIED_READ, scalar_words
from .program import Kernel, Program, Scalar, Slot, limits_of, wgsl_features, workgroup_bytes


class IdSource:
    """Ids for the values and nodes lowering creates, after the graph's own tensors."""

    def __init__(self, graph: Graph) -> None:
        self._next = len(graph.tensors)

    def new(self) -> int:
        self._next += 1
        return self._next - 1


@gc_paused
def lower(
    graph: Graph,
    limits=None,
    name: str = "step",
    target: Target | None = None,
    max_memory: int | None = None,
    memo: KernelMemo | None = None,
    reserve: Callable | None = None,
    ask: Callable | None = None,
) -> Program:
    """Compile a graph (with its outputs, captures and updates) to a Program, its
    kernels tuned for target (tgweb.codegen.target; default: the CPU class).
    max_memory: the most bytes its buffers may hold together (fit_memory); None: no bound.
    memo: the texts' reuse (tgweb.codegen.reuse), given to count what it emitted.
    reserve: called with the Program's buffers (a list) once they are planned, before its
    kernels are emitted (the native backend starts creating them: native.reserve).
    ask: called with each kernel as it is emitted (the browser's GPU process starts
    compiling its pipeline while Python emits the rest: backends.kernel_asker)."""
    lim = limits_of(limits)
    target = target or Target()
    if target.workgroup_bytes != lim["maxComputeWorkgroupStorageSize"]:  # what its kernels may declare
        target = replace(target, workgroup_bytes=lim["maxComputeWorkgroupStorageSize"])
    ids = IdSource(graph)
    scalars_id = ids.new()  # the value holding every per-step host scalar
    nodes = computed_nodes(graph, target, ids)
    sched = schedule(graph, nodes, lim["maxStorageBuffersPerShaderStage"], ids)
    ups = place_updates(graph, sched)
    store = assign_buffers(graph, sched, ups, lim, scalars_id)
    if max_memory is not None:
        sched, ups, store = fit_memory(graph, sched, ups, store, lim, scalars_id, ids, max_memory)
    if reserve is not None:
        reserve(store.buffers)
    selected = select_kernels(graph, store)
    for k in selected:
        if ask is not None:
            ask(k)
    kernels = selected + emit(sched, ups, store, target, memo, ask)
    prog = pack(graph, store, kernels, name)
    prog.meta["target"] = target.to_meta()
    prog.meta["features"] = wgsl_features(prog.kernels)  # what the device must have been created with
    prog.meta["precision"] = graph.precision
    prog.meta.update(
        inplace_updates=len(ups.inplace),
        copied_updates=len(ups.copies),
        overwritten_intermediates=len(store.overwrites),
    )
    prog.validate()
    return prog


def describe(t: Tensor) -> str:
    if REGISTRY[t.kind].role == "leaf":
        return f"{t.kind} {t.attrs['name']!r} {t.dtype}{list(t.shape)}"
    return f"tensor %{t.id} (the result of {t.kind}, {t.dtype}{list(t.shape)})"


def _roots(graph: Graph) -> list[Tensor]:
    return list(graph.outputs.values()) + list(graph.captures.values()) + list(graph.updates.values())


# ---------------------------------------------------------------- computed nodes


def computed_nodes(graph: Graph, target: Target | None = None, ids: IdSource | None = None) -> list[Tensor]:
    """The nodes a kernel computes, in topological order: views folded into strided
    kernels (their replacements take the nodes' places), each node as its kind computes
    it for the target (OpDef.rewrite), dead code dropped, leaves and views (memory, not
    work) left out. Raises TraceError for a live kind with no WGSL."""
    target, ids = target or Target(), ids or IdSource(graph)
    eff = fold_views(graph, _roots(graph))
    live = {t.id for t in _roots(graph)}
    for t in reversed(graph.tensors):
        if t.id in live:
            live.update(i.id for i in eff.get(t.id, t).inputs)
    out = []
    for t in graph.tensors:
        d = REGISTRY[t.kind]
        if t.id not in live or d.role in ("leaf", "view"):
            continue
        if d.emit is None:
            raise TraceError(f"op kind {t.kind!r} has no WGSL kernel yet", t.site)
        n = eff.get(t.id, t)
        hook = REGISTRY[n.kind].rewrite
        out.extend((hook and hook(n, target, ids.new)) or [n])
    return relinked(out)  # views of a replaced node read the replacement (remat copies them)


# ---------------------------------------------------------------- schedule


class KernelOrder(NamedTuple):
    """What schedule() decides: the kernels in execution order and what each stores and reads."""

    nodes: list[Tensor]  # computed nodes, recomputations included
    inlined: set[int]  # size-1 nodes every reader recomputes
    groups: list[Group]  # the kernels, in order
    reads: list[set[int]]  # ids of the stored tensors each kernel reads
    pos_of: dict[int, int]  # node id -> index of the kernel that computes it
    stored: set[int]  # ids of the tensors written to memory
    roots: set[int]  # ids that must be stored (outputs, captures, updates)


class _Fusing(NamedTuple):
    """What fusion and rematerialization need to know of the graph."""

    roots: set[int]  # ids that must be stored (outputs, captures, updates)
    late: set[int]  # the updates' ids
    hint: dict[int, int]  # update id -> id of the leaf it overwrites
    keep: set[int]  # ids rematerialization leaves stored: roots and gradients


def _fusing(graph: Graph) -> _Fusing:
    roots = {root(t).id for t in _roots(graph)}
    leaf_ids = {n: t.id for d in (graph.params, graph.states) for n, t in d.items()}
    hint = {root(u).id: leaf_ids[n] for n, u in graph.updates.items() if n in leaf_ids}
    late = {root(u).id for u in graph.updates.values()}
    return _Fusing(roots, late, hint, roots | {root(t).id for t in graph.grads.values()})


def schedule(graph: Graph, nodes: list[Tensor], max_bind: int, ids: IdSource) -> KernelOrder:
    """Fuse the nodes into kernels; then values read again much later (forward values
    the backward pass needs) that are cheap to recompute from what stays stored anyway
    are recomputed there instead of kept, and the nodes are fused again."""
    f = _fusing(graph)
    sched = _fused(nodes, f, max_bind)
    again = rematerialize(nodes, sched.pos_of, sched.stored, f.keep, root, ids.new)
    if again is not None:
        sched = _fused(again, f, max_bind)
    return sched


def _consumers(nodes: list[Tensor]) -> dict[int, list]:
    """stored tensor id -> [(reader, whether it reads it directly, not through a view)]."""
    out: dict[int, list] = {}
    for t in nodes:
        for x in t.inputs:
            r = root(x)
            out.setdefault(r.id, []).append((t, r is x))
    return out


def _inlined(nodes: list[Tensor], roots: set[int], consumers) -> set[int]:
    """Size-1 elementwise chains over constants and host scalars (an optimizer's
    1 - lr * wd), recomputed by every kernel that reads them instead of stored; not
    when a reader is not a fused kernel, reads through a view, or it is a root."""
    out: set[int] = set()
    for t in nodes:
        if (
            REGISTRY[t.kind].role == "elementwise"
            and t.inputs
            and prod(t.shape) == 1
            and all(
                REGISTRY[root(x).kind].role == "const" or root(x).kind == "scalar" or root(x).id in out
                for x in t.inputs
            )
        ):
            out.add(t.id)
    for t in reversed(nodes):
        if t.id in out and (
            t.id in roots or any(not d or not REGISTRY[c.kind].fuses for c, d in consumers.get(t.id, []))
        ):
            out.discard(t.id)
    return out


def _fused(nodes: list[Tensor], f: _Fusing, max_bind: int) -> KernelOrder:
    consumers = _consumers(nodes)
    roots = f.roots
    inlined = _inlined(nodes, roots, consumers)
    groups = fuse(nodes, consumers, roots, root, max_bind, inlined=inlined, late=f.late, inplace=f.hint)
    reads = [_kernel_reads(g, inlined) for g in groups]
    pos_of = {m.id: k for k, g in enumerate(groups) for p in g.parts() for m in p.members}
    stored: set[int] = set()
    for g in groups:
        if g.kind == "ew":
            stored |= g.stored
            continue
        if g.epilogue is not None:
            stored |= g.epilogue.stored
        if g.epilogue is None or g.head.id in roots:
            stored.add(g.head.id)
    return KernelOrder(nodes, inlined, groups, reads, pos_of, stored, roots)


def _kernel_reads(g: Group, inlined: set[int]) -> set[int]:
    """Ids of the stored tensors one kernel reads (inlined values: what they read)."""
    parts = g.parts()
    inside = {m.id for p in parts for m in p.members}
    out: set[int] = set()

    def add(x):
        r = root(x)
        if r.id in inlined:
            for y in r.inputs:
                add(y)
        elif r.id not in inside and REGISTRY[r.kind].role != "const":
            out.add(r.id)

    for p in parts:
        for m in p.members:
            for x in m.inputs:
                add(x)
    return out


# ---------------------------------------------------------------- buffers


@dataclass
class Storage:
    """The plan's answer: buffers, and where each stored tensor lives."""

    buffers: list
    where: Callable[[Tensor], tuple[int, int]]  # tensor -> (buffer id, element offset)
    report: dict
    overwrites: dict[int, int]
    grad_arena: int | None
    scalars_buffer: int
    live: dict[int, int]  # id -> bytes of each intermediate live at the peak


def assign_buffers(graph: Graph, sched: KernelOrder, ups: Updates, lim: dict, scalars_id: int) -> Storage:
    """Values (leaves, the scalars arena, every stored tensor) and steps (what each
    kernel reads and writes) handed to the planner; device limits checked."""
    by_id = {t.id: t for t in graph.tensors} | {t.id: t for t in sched.nodes}
    grad_ids = {root(t).id for t in graph.grads.values()}
    out_ids = {root(t).id for t in graph.outputs.values()}
    cap_ids = {root(t).id for t in graph.captures.values()}
    over = overwrites(sched, sched.roots | out_ids | cap_ids | grad_ids | set(ups.inplace), by_id)

    too_big: list[tuple[int, Tensor]] = []

    def nbytes(t: Tensor) -> int:
        nb = (prod(t.shape) * ITEMSIZE[t.dtype] + 3) // 4 * 4  # whole words: f16 pairs
        if nb > _most(lim):
            too_big.append((nb, t))
        return nb

    values = [
        Value(t.id, nbytes(t), kind[:-1], f"{kind[:-1]}:{n}")
        for kind in ("inputs", "params", "states", "constants")
        for n, t in getattr(graph, kind).items()
    ]
    words = scalar_words(graph.scalars)
    values.append(Value(scalars_id, 4 * max(1, words), "scalars", "scalars"))
    for vid in sorted(sched.stored):
        t = by_id[vid]
        if vid in ups.inplace or vid in over:
            same = ups.inplace.get(vid, over.get(vid))
            values.append(
                Value(vid, nbytes(t), "intermediate", f"%{vid} {t.kind}", same_as=same, inplace=True)
            )
            continue
        kind = (
            "output"
            if vid in out_ids
            else "capture"
            if vid in cap_ids
            else "grad"
            if vid in grad_ids
            else "intermediate"
        )
        values.append(Value(vid, nbytes(t), kind, f"%{vid} {t.kind}"))
    if too_big:
        _too_big(too_big, lim)

    def vid_of(t: Tensor) -> int:
        r = root(t)
        return scalars_id if r.kind == "scalar" else r.id

    steps = []
    for k, g in enumerate(sched.groups):
        ws = {m.id for p in g.parts() for m in p.members if m.id in sched.stored}
        if g.kind == "op" and g.head.id in sched.stored:
            ws.add(g.head.id)
        kinds = "+".join(_uniq(m.kind for p in g.parts() for m in p.members))
        steps.append(Step(sorted({vid_of(by_id[i]) for i in sched.reads[k]}), sorted(ws), f"k{k} {kinds}"))
    for leaf, u in ups.copies:
        steps.append(Step([vid_of(u)] if REGISTRY[root(u).kind].role != "const" else [], [leaf.id]))

    p = plan(values, steps, max_binding=_most(lim) // 16 * 16)
    member = _live_at_peak(p.report["peak"], over, sched.pos_of)
    live = {member[e["value"]]: e["bytes"] for e in p.report["peak"]["live"]}
    p.report["peak"] = _peak(p.report["peak"], by_id, member)
    for b in p.buffers:
        b.size = max(16, (b.size + 15) // 16 * 16)  # whole 16-byte units: any buffer binds as vec4s
        _check_size(b.size, lim, f"buffer {b.id} ({b.kind}, {b.label})", "")
    word = {graph.scalars[n].id: k for k, n in enumerate(graph.scalars)}

    def where(t: Tensor) -> tuple[int, int]:
        r = root(t)
        if r.kind == "scalar":
            return p.buffer_of[scalars_id], p.offset_of[scalars_id] // 4 + word[r.id]
        if r.id not in p.buffer_of:
            raise AssertionError(f"{describe(r)} has no storage")
        return p.buffer_of[r.id], p.offset_of[r.id] // 4

    arena = next((p.buffer_of[i] for i in grad_ids if i in p.buffer_of), None)
    return Storage(p.buffers, where, p.report, over, arena, p.buffer_of[scalars_id], live)


def _live_at_peak(peak: dict, over: dict[int, int], pos: dict[int, int]) -> dict[int, int]:
    """The planner names values written over one another by the first of them: its id
    -> the id of the one live at the peak."""
    written_over = {x: m for m, x in over.items()}
    out = {}
    for e in peak["live"]:
        v = e["value"]
        while v in written_over and pos.get(written_over[v], peak["step"] + 1) <= peak["step"]:
            v = written_over[v]
        out[e["value"]] = v
    return out


PEAK_LARGEST = 12  # live intermediates the memory report names at the peak


def _peak(peak: dict, by_id: dict[int, Tensor], member: dict[int, int]) -> dict:
    """The planner's peak with its live values named (member: _live_at_peak): the largest
    with the node that made each (and the user's line), and the live bytes by op kind."""
    by_kind: dict[str, int] = {}
    for e in peak["live"]:
        k = by_id[member[e["value"]]].kind
        by_kind[k] = by_kind.get(k, 0) + e["bytes"]
    largest = [
        {**e, "value": member[e["value"]], "tensor": describe(t), "site": t.site}
        for e in peak["live"][:PEAK_LARGEST]
        for t in [by_id[member[e["value"]]]]
    ]
    rest = {k: v for k, v in peak.items() if k != "live"}
    return {**rest, "largest": largest, "by_kind": dict(sorted(by_kind.items(), key=lambda kv: -kv[1]))}


def _most(lim: dict) -> int:
    """The most bytes one buffer may hold: every buffer is bound whole."""
    return min(lim["maxStorageBufferBindingSize"], lim["maxBufferSize"])


def _too_big(found: list[tuple[int, Tensor]], lim: dict) -> None:
    """The tensors over the limits, the largest named first (at its user's line)."""
    found.sort(key=lambda f: -f[0])
    nb, t = found[0]
    others = "".join(f"; also {describe(u)}: {n} bytes" for n, u in found[1:4])
    more = f" and {len(found) - 4} more" if len(found) > 4 else ""
    key = min(("maxStorageBufferBindingSize", "maxBufferSize"), key=lambda k: lim[k])
    raise TraceError(
        f"{describe(t)} needs {nb} bytes, over the device limit {key} = {lim[key]} bytes{others}{more}; "
        "make it smaller (batch, width) or use a device with larger limits",
        t.site,
    )


def _check_size(nbytes: int, lim: dict, what: str, site: str) -> None:
    for key in ("maxStorageBufferBindingSize", "maxBufferSize"):
        if nbytes > lim[key]:
            raise TraceError(
                f"{what} needs {nbytes} bytes, over the device limit {key} = {lim[key]} bytes; "
                "make it smaller (batch, width) or use a device with larger limits",
                site,
            )


# ---------------------------------------------------------------- a memory budget


def fit_memory(
    graph: Graph,
    sched: KernelOrder,
    ups: Updates,
    store: Storage,
    lim: dict,
    scalars_id: int,
    ids: IdSource,
    budget: int,
) -> tuple[KernelOrder, Updates, Storage]:
    """The schedule, updates and storage again with values live at the plan's peak
    recomputed after it (products too: tgweb.passes.remat.fit), the cheapest per byte
    freed first, until the buffers hold at most `budget` bytes; TraceError when nothing
    left at the peak can be recomputed. Values are the same bit for bit: a copy runs the
    same kernel on the same stored operands. The report says what was recomputed."""
    fixed = sum(b.size for b in store.buffers if b.kind != "intermediate")
    if budget < fixed:
        raise TraceError(
            f"max_memory = {budget} bytes is less than the {fixed} bytes of parameters, gradients, "
            "optimizer state, inputs and outputs alone, which recomputation cannot free; raise "
            "max_memory, or make the model smaller"
        )
    f = _fusing(graph)
    before, chosen, skip = _allocated(store), [], set()
    for _ in range(FIT_ROUNDS):
        if _allocated(store) <= budget:
            break
        at = store.report["peak"]["step"]
        need = int((_allocated(store) - budget) * FIT_MARGIN)
        got = fit(sched.nodes, sched.pos_of, sched.stored, f.keep | skip, root, ids.new, at, store.live, need)
        if got is None:
            _over_budget(store, budget, chosen)
        nodes, picked = got
        s2 = _fused(nodes, f, lim["maxStorageBuffersPerShaderStage"])
        u2 = place_updates(graph, s2)
        st2 = assign_buffers(graph, s2, u2, lim, scalars_id)
        if _allocated(st2) >= _allocated(store):  # fusion put the copies back where they were
            skip |= {v.id for v, _, _ in picked}
            continue
        sched, ups, store = s2, u2, st2
        chosen += picked
    else:
        if _allocated(store) > budget:
            _over_budget(store, budget, chosen)
    store.report["budget"] = {
        "max_memory": budget,
        "unbudgeted_bytes": before,
        "recomputed_flops": sum(c for _, _, c in chosen),
        "recomputed": [_recomputed(v, n, c) for v, n, c in chosen],
    }
    return sched, ups, store


FIT_ROUNDS = 16  # plans fit_memory makes at most (each plans the whole step again)
# what a round asks fit to free at the peak, over what the plan is over budget: bytes freed
# there free fewer in the plan made again (its buffers are shared by values at other
# steps), so asked for exactly, shakespeare's step took a second round (its first freed
# 403 MB of 436 MB); with the margin one round makes the very same Program
FIT_MARGIN = 1.1


def _allocated(store: Storage) -> int:
    return sum(b.size for b in store.buffers)


def _recomputed(v: Tensor, freed: int, flops: int) -> dict:
    return {"tensor": describe(v), "bytes": freed, "flops": flops, "site": v.site}


def _over_budget(store: Storage, budget: int, chosen: list) -> None:
    """The plan over budget with nothing left to recompute at its peak: what was tried,
    and the largest values live there."""
    peak = store.report["peak"]
    tried = (
        f"after recomputing {len(chosen)} values in the backward pass "
        f"({sum(n for _, n, _ in chosen)} bytes freed at the peaks, "
        f"{sum(c for _, _, c in chosen) / 1e9:.1f} GFLOP more a step)"
        if chosen
        else "and nothing could be recomputed"
    )
    largest = "; ".join(f"{e['tensor']}: {e['bytes']} bytes" for e in peak["largest"][:3])
    raise TraceError(
        f"the plan needs {_allocated(store)} bytes, over max_memory = {budget} bytes, {tried}; "
        f"at its peak ({peak['kernel']}) nothing live can be recomputed from values kept "
        f"anyway; the largest live there: {largest}; raise max_memory, or make the model "
        "smaller (batch, block, width)",
        peak["largest"][0]["site"] if peak["largest"] else "",
    )


# ---------------------------------------------------------------- kernels


def emit(
    sched: KernelOrder,
    ups: Updates,
    store: Storage,
    target: Target,
    memo: KernelMemo | None = None,
    ask: Callable | None = None,
) -> list[Kernel]:
    """The WGSL of every kernel: the scheduled groups (a repeated layer's kernels emitted
    once: tgweb.codegen.reuse), then the copied updates; each handed to ask (if given) as
    soon as it is made."""
    memo = memo or KernelMemo()
    kernels: list[Kernel] = []
    for k, g in enumerate(sched.groups):
        made = memo.kernel(g, k, sched, store.where, lambda g=g, k=k: _emit_group(g, k, sched, store, target))
        kernels.append(made)
        if ask is not None:
            ask(made)
    for leaf, u in ups.copies:
        kc = KernelCtx(store.where)
        kc.ops, kc.site = ["copy"], u.site
        body, disp = emit_copy(kc, leaf, u)
        kernels.append(kc.kernel(f"k{len(kernels)}_copy", body, 256, disp))
        if ask is not None:
            ask(kernels[-1])
    return kernels


def select_kernels(graph: Graph, store: Storage) -> list[Kernel]:
    """[the select_scalars kernel] for a training step (a graph with the APPLIED_READ
    scalar: tgweb.pipeline), [] otherwise."""
    if APPLIED_READ not in graph.scalars:
        return []
    ok_buffer, ok_at = store.where(graph.outputs["ok"])
    word = {n: store.where(t)[1] for n, t in graph.scalars.items()}
    return [select_kernel(word, store.scalars_buffer, ok_buffer, ok_at)]


def _emit_group(
    g: Group, k: int, sched: KernelOrder, store: Storage, target: Target
) -> tuple[Kernel, KernelCtx]:
    if g.kind == "ew":
        kc = KernelCtx(store.where, sched.inlined, target=target)
        kc.ops, kc.site = _uniq(m.kind for m in g.members), g.head.site
        body, disp = emit_group(kc, Part(g.shape, g.members, g.stored))
        return kc.kernel(kernel_name(k, kc.ops), body, 256, disp), kc
    node = g.head
    pro = Part(g.prologue.shape, g.prologue.members, set()) if g.prologue else None
    epi = None
    if g.epilogue is not None:
        st = set(g.epilogue.stored) | ({node.id} if node.id in sched.stored else set())
        epi = Part(g.epilogue.shape, g.epilogue.members, st)
    kc = KernelCtx(store.where, sched.inlined, pro, epi, target)
    kinds = _uniq(m.kind for p in (g.prologue, g, g.epilogue) if p is not None for m in p.members)
    kc.ops, kc.site = kinds, node.site
    body, disp, wg = REGISTRY[node.kind].emit(kc, node)
    return kc.kernel(kernel_name(k, kinds), body, wg, disp), kc


def _uniq(xs) -> list:
    out = []
    for x in xs:
        if x not in out:
            out.append(x)
    return out


# ---------------------------------------------------------------- the Program


def pack(graph: Graph, store: Storage, kernels: list[Kernel], name: str) -> Program:
    """The Program: buffers, kernels, a slot for every named tensor, scalars, meta."""

    def slot(t: Tensor) -> Slot:
        b, e = store.where(t)
        return Slot(b, tuple(t.shape), t.dtype, e * 4)

    prog = Program(buffers=store.buffers, kernels=kernels)
    for kind in ("inputs", "params", "states", "constants", "outputs", "captures"):
        setattr(prog, kind, {n: slot(t) for n, t in getattr(graph, kind).items()})
    prog.data = {n: base64.b64encode(t.attrs["data"]).decode() for n, t in graph.constants.items()}
    prog.scalars = [Scalar(n, "f32" if t.dtype == "f32" else "u32") for n, t in graph.scalars.items()]
    prog.scalars_buffer = store.scalars_buffer
    biggest = max((b.size for b in store.buffers), default=4)
    texts = {k.wgsl for k in kernels}  # a repeated layer's kernels share texts
    prog.meta = {
        "name": name,
        "dispatches": len(kernels),
        "pipelines": prog.pipelines(),
        "limits": {
            "maxStorageBufferBindingSize": biggest,
            "maxBufferSize": biggest,
            "maxStorageBuffersPerShaderStage": max((len(k.bindings) for k in kernels), default=1),
            # WebGPU's default, or more where a subgroup-matrix product declares more
            "maxComputeWorkgroupStorageSize": max([16384] + [workgroup_bytes(w) for w in texts]),
            "maxComputeInvocationsPerWorkgroup": 256,
        },
        "memory": dict(store.report),  # the planner's bytes (buffers are then rounded to 16)
        "state_init": {n: t.attrs.get("init", 0.0) for n, t in graph.states.items()},
    }
    if store.grad_arena is not None:
        prog.meta["grad_arena"] = {"buffer": store.grad_arena, "bytes": store.buffers[store.grad_arena].size}
    return prog


__all__ = [
    "lower",
    "computed_nodes",
    "schedule",
    "place_updates",
    "assign_buffers",
    "fit_memory",
    "emit",
    "pack",
]
