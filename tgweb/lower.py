"""lower(graph) -> Program: dead-code elimination, fusion, aliasing, in-place
updates, buffer planning, WGSL emission and device-limit checks.

Pure Python (no NumPy): it runs in the browser too.
"""

from __future__ import annotations

from typing import NamedTuple

from .codegen import register_all
from .codegen.common import KernelCtx, strides
from .codegen.elementwise import emit_copy, emit_group, fusable, same_index
from .codegen.program import Kernel, Program, Scalar, Slot
from .ir import ITEMSIZE, REGISTRY, Graph, Tensor, TraceError, prod
from .passes.fusion import Group, fuse
from .passes.plan import Step, Value, plan
from .passes.remat import rematerialize

LEAVES = ("input", "param", "state", "scalar")

# WebGPU's default limits (the spec's guaranteed minimums), used without an adapter
DEFAULT_LIMITS = {
    "maxStorageBufferBindingSize": 134217728,
    "maxBufferSize": 268435456,
    "maxStorageBuffersPerShaderStage": 8,
    "maxComputeWorkgroupStorageSize": 16384,
    "maxComputeInvocationsPerWorkgroup": 256,
    "maxComputeWorkgroupsPerDimension": 65535,
}


def _norm_limits(limits) -> dict[str, int]:
    out = dict(DEFAULT_LIMITS)
    if not limits:
        return out
    canon = {k.lower(): k for k in DEFAULT_LIMITS}
    for k, v in dict(limits).items():
        key = canon.get(k.replace("-", "").replace("_", "").lower())
        if key is not None and v is not None:
            out[key] = int(v)
    return out


def _permute_view(x: Tensor):
    """(stored tensor, (shape, strides)) when x is a chain of permutes of it, else None."""
    if x.kind != "permute":
        return None
    chain = []
    while x.kind == "permute":
        chain.append(x.attrs["perm"])
        x = x.inputs[0]
    shape, st = list(x.shape), strides(tuple(x.shape))
    for perm in reversed(chain):
        shape, st = [shape[p] for p in perm], [st[p] for p in perm]
    return x, (tuple(shape), tuple(st))


def _root(t: Tensor) -> Tensor:
    while REGISTRY[t.kind].alias:
        t = t.inputs[0]
    return t


def describe(t: Tensor) -> str:
    if t.kind in LEAVES:
        return f"{t.kind} {t.attrs['name']!r} {t.dtype}{list(t.shape)}"
    return f"tensor %{t.id} (the result of {t.kind}, {t.dtype}{list(t.shape)})"


def lower(graph: Graph, limits=None, name: str = "step") -> Program:
    """Compile a graph (with its outputs, captures and updates) to a Program."""
    register_all()
    lim = _norm_limits(limits)
    max_bind = lim["maxStorageBuffersPerShaderStage"]

    # ---------------------------------------------------------------- dead code
    root_nodes = list(graph.outputs.values()) + list(graph.captures.values()) + list(graph.updates.values())
    # permutes in front of a matmul operand (a transpose, attention's head split) are
    # read through strides, and a permute of a matmul's result is written through
    # strides: the node is shadowed by one carrying those views; the permutes go dead
    eff: dict[int, Tensor] = {}
    for t in graph.tensors:
        if t.kind != "matmul":
            continue
        ins, attrs = list(t.inputs), dict(t.attrs)
        for j, key in ((0, "a_view"), (1, "b_view")):
            v = _permute_view(ins[j])
            if v is not None:
                ins[j], attrs[key] = v
        if "a_view" in attrs or "b_view" in attrs:
            sh = Tensor(graph, "matmul", tuple(ins), attrs, t.shape, t.dtype, t.site)
            sh.id = t.id
            eff[t.id] = sh
    uses: dict[int, int] = {}
    for t in graph.tensors:
        for x in eff.get(t.id, t).inputs:
            uses[x.id] = uses.get(x.id, 0) + 1
    for t in root_nodes:
        uses[t.id] = uses.get(t.id, 0) + 1
    for t in graph.tensors:
        if t.kind != "permute":
            continue
        m = eff.get(t.inputs[0].id, t.inputs[0])
        if m.kind != "matmul" or uses.get(m.id) != 1:
            continue
        perm = t.attrs["perm"]
        pst = strides(t.shape)
        moved = [0] * len(perm)  # stride, in t's storage, of each axis of t's input
        for i, p in enumerate(perm):
            moved[p] = pst[i]
        cshape = tuple(m.attrs.get("c_shape") or m.shape)
        if "c_strides" in m.attrs:  # m already writes through strides into its own layout
            ist = strides(tuple(m.shape))
            where = {ist[q]: q for q in range(len(m.shape)) if m.shape[q] > 1}
            cst = [moved[where[sj]] if cshape[j] > 1 else 0 for j, sj in enumerate(m.attrs["c_strides"])]
        else:
            cst = moved
        attrs = dict(m.attrs, c_strides=tuple(cst), c_shape=cshape)
        sh = Tensor(graph, "matmul", m.inputs, attrs, t.shape, t.dtype, m.site)
        sh.id = t.id
        eff[t.id] = sh
    live = {t.id for t in root_nodes}
    for t in reversed(graph.tensors):
        if t.id in live:
            live.update(i.id for i in eff.get(t.id, t).inputs)
    for t in graph.tensors:
        if (
            t.id in live
            and REGISTRY[t.kind].wgsl is None
            and t.kind not in LEAVES
            and not REGISTRY[t.kind].alias
        ):
            raise TraceError(f"op kind {t.kind!r} has no WGSL kernel yet", t.site)
    roots = {_root(t).id for t in root_nodes}
    nodes = [
        eff.get(t.id, t)
        for t in graph.tensors
        if t.id in live and t.kind not in LEAVES and not REGISTRY[t.kind].alias
    ]
    leaf_ids = {**{n: t.id for n, t in graph.params.items()}, **{n: t.id for n, t in graph.states.items()}}
    hint = {_root(u).id: leaf_ids[n] for n, u in graph.updates.items() if n in leaf_ids}
    late = {_root(u).id for u in graph.updates.values()}
    sched = _schedule(nodes, roots, max_bind, late, hint)
    # values read again much later (forward values the backward pass needs) that are cheap
    # to recompute from what stays stored anyway are recomputed there instead of kept
    keep = roots | {_root(t).id for t in graph.grads.values()}
    fresh = iter(range(len(graph.tensors) + 1, 1 << 62))  # len(graph.tensors): scalars
    again = rematerialize(nodes, sched.pos_of, sched.stored, keep, _root, fresh.__next__)
    if again is not None:
        nodes = again
        sched = _schedule(nodes, roots, max_bind, late, hint)
    inlined, groups, reads, pos_of, stored = sched

    # ---------------------------------------------------------------- in-place updates
    leaf_of_name = {**{n: t for n, t in graph.params.items()}, **{n: t for n, t in graph.states.items()}}
    inplace: dict[int, int] = {}  # update node id -> leaf id it is written into
    copies: list[tuple[Tensor, Tensor]] = []  # (leaf, new value) copied at the end
    for name_, u in graph.updates.items():
        leaf = leaf_of_name.get(name_)
        if leaf is None:
            raise TraceError(f"update for {name_!r}, which is neither a param nor a state")
        if u.shape != leaf.shape or u.dtype != leaf.dtype:
            raise TraceError(
                f"update for {name_!r} has {u.dtype}{list(u.shape)}, not {leaf.dtype}{list(leaf.shape)}",
                u.site,
            )
        if u is leaf:
            continue
        if _inplace_ok(u, leaf, groups, reads, pos_of, inplace, graph):
            inplace[u.id] = leaf.id
        else:
            copies.append((leaf, u))

    # ---------------------------------------------------------------- values to store
    out_ids = {_root(t).id for t in graph.outputs.values()}
    cap_ids = {_root(t).id for t in graph.captures.values()}
    grad_ids = {_root(t).id for t in graph.grads.values()}
    by_id = {**{t.id: eff.get(t.id, t) for t in graph.tensors}, **{t.id: t for t in nodes}}

    def check(t: Tensor, nbytes: int) -> None:
        for key in ("maxStorageBufferBindingSize", "maxBufferSize"):
            if nbytes > lim[key]:
                raise TraceError(
                    f"{describe(t)} needs {nbytes} bytes, over the device limit "
                    f"{key} = {lim[key]} bytes; make it smaller (batch, width) "
                    "or use a device with larger limits",
                    t.site,
                )

    # an intermediate whose last reader reads it only at the index it writes a result of the
    # same size lends that result its memory (the result overwrites it element by element)
    over = _overwrites(groups, reads, stored, roots | out_ids | cap_ids | grad_ids | set(inplace), by_id)

    values: list[Value] = []
    for kind, leaves in (("input", graph.inputs), ("param", graph.params), ("state", graph.states)):
        for n, t in leaves.items():
            nb = prod(t.shape) * ITEMSIZE[t.dtype]
            check(t, nb)
            values.append(Value(t.id, nb, kind, f"{kind}:{n}"))
    scalar_vid = len(graph.tensors)
    scalar_names = list(graph.scalars)
    scalar_index = {graph.scalars[n].id: k for k, n in enumerate(scalar_names)}
    values.append(Value(scalar_vid, 4 * max(1, len(scalar_names)), "scalars", "scalars"))
    for vid in sorted(stored):
        t = by_id[vid]
        nb = prod(t.shape) * ITEMSIZE[t.dtype]
        check(t, nb)
        if vid in inplace or vid in over:
            values.append(
                Value(
                    vid,
                    nb,
                    "intermediate",
                    f"%{vid} {t.kind}",
                    same_as=inplace.get(vid, over.get(vid)),
                    inplace=True,
                )
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
        values.append(Value(vid, nb, kind, f"%{vid} {t.kind}"))

    def vid_of(t: Tensor) -> int:
        r = _root(t)
        if r.kind == "scalar":
            return scalar_vid
        return r.id

    steps = []
    for k, g in enumerate(groups):
        ws = set()
        parts = [g] + ([g.prologue, g.epilogue] if g.kind == "op" else [])
        for p in parts:
            if p is not None:
                ws |= {m.id for m in p.members if m.id in stored}
        if g.kind == "op" and g.head.id in stored:
            ws.add(g.head.id)
        rs = {vid_of(by_id[i]) for i in reads[k]}
        steps.append(Step(sorted(rs), sorted(ws)))
    for leaf, u in copies:
        steps.append(Step([vid_of(u)] if _root(u).kind != "full" else [], [leaf.id]))

    res = plan(values, steps)
    buffers, buffer_of = res[0], res[1]
    offset_of = getattr(res, "offset_of", None) or {}
    for b in buffers:
        # whole 16-byte units, so any buffer may be bound as array<vec4<u32>>
        b.size = max(16, (b.size + 15) // 16 * 16)
        for key in ("maxStorageBufferBindingSize", "maxBufferSize"):
            if b.size > lim[key]:
                raise TraceError(
                    f"buffer {b.id} ({b.kind}, {b.label}) needs {b.size} bytes, "
                    f"over the device limit {key} = {lim[key]} bytes"
                )

    def storage(t: Tensor) -> tuple[int, int]:
        r = _root(t)
        if r.kind == "scalar":
            return buffer_of[scalar_vid], offset_of.get(scalar_vid, 0) // 4 + scalar_index[r.id]
        vid = r.id
        if vid not in buffer_of:
            raise AssertionError(f"{describe(r)} has no storage")
        off = offset_of.get(vid, 0)
        if vid in inplace and vid not in offset_of:
            off = offset_of.get(inplace[vid], 0)
        return buffer_of[vid], off // 4

    # ---------------------------------------------------------------- kernels
    kernels: list[Kernel] = []
    for k, g in enumerate(groups):
        kc = KernelCtx(storage)
        kc.inlined = inlined
        kernels.append(_emit(kc, g, stored, k))
    for leaf, u in copies:
        kc = KernelCtx(storage)
        kc.ops, kc.site = ["copy"], u.site
        body, disp = emit_copy(kc, leaf, u)
        kernels.append(kc.kernel(f"k{len(kernels)}_copy", body, 256, disp))

    # ---------------------------------------------------------------- slots
    def slot(t: Tensor) -> Slot:
        b, e = storage(t)
        return Slot(b, tuple(t.shape), t.dtype, e * 4)

    prog = Program(buffers=buffers, kernels=kernels)
    prog.inputs = {n: slot(t) for n, t in graph.inputs.items()}
    prog.params = {n: slot(t) for n, t in graph.params.items()}
    prog.states = {n: slot(t) for n, t in graph.states.items()}
    prog.outputs = {n: slot(t) for n, t in graph.outputs.items()}
    prog.captures = {n: slot(t) for n, t in graph.captures.items()}
    prog.scalars = [Scalar(n, "f32" if graph.scalars[n].dtype == "f32" else "u32") for n in scalar_names]
    prog.scalars_buffer = buffer_of[scalar_vid]
    needed_bind = max((len(k.bindings) for k in kernels), default=1)
    biggest = max((b.size for b in buffers), default=4)
    prog.meta = {
        "name": name,
        "dispatches": len(kernels),
        "pipelines": prog.pipelines(),
        "limits": {
            "maxStorageBufferBindingSize": biggest,
            "maxBufferSize": biggest,
            "maxStorageBuffersPerShaderStage": needed_bind,
            "maxComputeWorkgroupStorageSize": 16384,
            "maxComputeInvocationsPerWorkgroup": 256,
        },
        "memory": {"bytes_by_kind": prog.bytes_by_kind(), "total_bytes": sum(b.size for b in buffers)},
        "state_init": {n: t.attrs.get("init", 0.0) for n, t in graph.states.items()},
        "inplace_updates": len(inplace),
        "copied_updates": len(copies),
        "overwritten_intermediates": len(over),
    }
    report = getattr(res, "report", None)
    if isinstance(report, dict):
        prog.meta["memory"].update(report)
    return prog


class Schedule(NamedTuple):
    inlined: set[int]  # size-1 nodes every reader recomputes
    groups: list[Group]  # the kernels, in order
    reads: list[set[int]]  # ids of the stored tensors each kernel reads
    pos_of: dict[int, int]  # node id -> index of the kernel that computes it
    stored: set[int]  # ids of the tensors written to memory


def _schedule(nodes, roots, max_bind, late, hint) -> Schedule:
    """Fuse nodes (computed, in topological order) into kernels and say what each reads
    and what is stored."""
    consumers: dict[int, list] = {}
    for t in nodes:
        for x in t.inputs:
            r = _root(x)
            consumers.setdefault(r.id, []).append((t, r is x))
    # size-1 elementwise chains over constants and host scalars (an optimizer's 1 - lr * wd)
    # are recomputed by every kernel that reads them instead of being stored
    inlined: set[int] = set()
    for t in nodes:
        if (
            REGISTRY[t.kind].elementwise
            and t.kind != "arange"
            and prod(t.shape) == 1
            and all(_root(x).kind in ("full", "scalar") or _root(x).id in inlined for x in t.inputs)
        ):
            inlined.add(t.id)
    for t in reversed(nodes):
        if t.id in inlined and (
            t.id in roots or any(not d or not fusable(c.kind) for c, d in consumers.get(t.id, []))
        ):
            inlined.discard(t.id)
    # a materialized one must take its inputs from memory or from other inlined nodes
    groups = fuse(nodes, consumers, roots, _root, max_bind, inlined=inlined, late=late, inplace=hint)

    def kernel_reads(g: Group) -> set[int]:
        if g.kind == "ew":
            parts = [g]
        else:
            parts = [g] + [p for p in (g.prologue, g.epilogue) if p is not None]
        inside = {m.id for p in parts for m in p.members}
        out = set()

        def add(x):
            r = _root(x)
            if r.id in inlined:
                for y in r.inputs:
                    add(y)
            elif r.id not in inside and r.kind != "full":
                out.add(r.id)

        for p in parts:
            for m in p.members:
                for x in m.inputs:
                    add(x)
        return out

    reads = [kernel_reads(g) for g in groups]
    pos_of: dict[int, int] = {}
    for k, g in enumerate(groups):
        parts = [g] + ([g.prologue, g.epilogue] if g.kind == "op" else [])
        for p in parts:
            if p is not None:
                for m in p.members:
                    pos_of[m.id] = k
    stored: set[int] = set()
    for g in groups:
        if g.kind == "ew":
            stored |= g.stored
        else:
            if g.epilogue is not None:
                stored |= g.epilogue.stored
            if g.epilogue is None or g.head.id in roots:
                stored.add(g.head.id)
    return Schedule(inlined, groups, reads, pos_of, stored)


def _overwrites(groups, reads, stored, keep, by_id) -> dict[int, int]:
    """result id -> id of the intermediate it may be written over: the kernel computing
    the result (elementwise, or a matmul's elementwise epilogue) is the last to read the
    intermediate, reads it only directly at the result's own index, and both have the same
    size. Neither may already take part in such a pair (one value overwritten once)."""
    last: dict[int, int] = {}
    for k, rs in enumerate(reads):
        for vid in rs:
            last[vid] = k
    out: dict[int, int] = {}
    taken: set[int] = set()
    for k, g in enumerate(groups):
        part = g if g.kind == "ew" else g.epilogue
        if part is None or (g.kind == "op" and (g.head.kind != "matmul" or "c_strides" in g.head.attrs)):
            continue
        size = prod(part.shape)
        # stored tensors read some other way in this kernel: the matmul's operands
        others = {_root(x).id for x in g.head.inputs} if g.kind == "op" else set()
        direct: dict[int, bool] = {}
        for m in part.members:
            for x in m.inputs:
                r = _root(x)
                ok = (
                    r is x
                    and same_index(m.kind)
                    and tuple(m.shape) == tuple(part.shape)
                    and tuple(x.shape) == tuple(part.shape)
                )
                direct[r.id] = direct.get(r.id, True) and ok
        free = [
            x
            for x in sorted(reads[k])
            if direct.get(x)
            and x not in others
            and last[x] == k
            and x in stored
            and x not in keep
            and x not in taken
            and prod(by_id[x].shape) == size
        ]
        for m in part.members:
            if not free:
                break
            if (
                m.id in stored
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


def _inplace_ok(u, leaf, groups, reads, pos_of, inplace, graph) -> bool:
    """u may be written straight into leaf's buffer: u is stored by a fused group that
    reads leaf only at the same element, and no later kernel reads leaf's old value."""
    if REGISTRY[u.kind].alias or u.kind in LEAVES or u.id in inplace or u.kind == "full":
        return False
    if u.id in {_root(t).id for t in graph.outputs.values()} | {_root(t).id for t in graph.captures.values()}:
        return False
    k = pos_of.get(u.id)
    if k is None:
        return False
    g = groups[k]
    if g.kind != "ew" or u.id not in g.stored:
        return False
    # inside the group: every reader of leaf reads it directly at the same index
    for m in g.members:
        for x in m.inputs:
            if _root(x) is leaf and (x is not leaf or not same_index(m.kind) or m.shape != leaf.shape):
                return False
    # other kernels reading the leaf must all run before this one
    for j, rs in enumerate(reads):
        if j != k and leaf.id in rs and j > k:
            return False
    return True


def _emit(kc: KernelCtx, g: Group, stored: set[int], k: int) -> Kernel:
    from .codegen.elementwise import GroupEmitter

    kinds = []
    if g.kind == "ew":
        kinds = [m.kind for m in g.members]
        kc.ops, kc.site = _uniq(kinds), g.head.site
        body, disp = emit_group(kc, g.shape, g.members, g.stored)
        return kc.kernel(f"k{k}_" + "_".join(_uniq(kinds))[:40], body, 256, disp)
    node = g.head
    parts = (
        [m.kind for m in (g.prologue.members if g.prologue else [])]
        + [node.kind]
        + [m.kind for m in (g.epilogue.members if g.epilogue else [])]
    )
    kc.ops, kc.site = _uniq(parts), node.site
    emitter = REGISTRY[node.kind].wgsl[1]
    if node.kind in ("sum", "max", "min", "argmax", "argmin", "global_sumsq"):
        x = node.inputs[0]
        if g.prologue is not None:
            pro = g.prologue

            def input_at(idx):
                ge = GroupEmitter(kc, pro.shape, pro.members)
                lines = [f"let pi = {idx};"] + ge.emit("pi")
                return lines, ge.local[_root(x).id]
        else:

            def input_at(idx):
                return [], kc.load(x, idx)

        epi = None
        if g.epilogue is not None:
            st = set(g.epilogue.stored)
            if node.id in stored:
                st.add(node.id)
            epi = (g.epilogue.shape, g.epilogue.members, st)
        body, disp, wg = emitter(kc, node, input_at, epi)
    elif node.kind == "matmul":
        epi = None
        if g.epilogue is not None:
            st = set(g.epilogue.stored)
            if node.id in stored:
                st.add(node.id)
            epi = (g.epilogue.shape, g.epilogue.members, st)
        body, disp, wg = emitter(kc, node, epi)
    else:
        body, disp, wg = emitter(kc, node)
    return kc.kernel(f"k{k}_" + "_".join(_uniq(parts))[:40], body, wg, disp)


def _uniq(xs):
    out = []
    for x in xs:
        if x not in out:
            out.append(x)
    return out


__all__ = ["lower", "DEFAULT_LIMITS", "fusable"]
