"""The buffer planner: properties on random graphs (hypothesis) and real training graphs."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tgweb as tg
from tgweb import nn
from tgweb.lower import IdSource, assign_buffers, computed_nodes, place_updates, schedule
from tgweb.passes.plan import (
    PlanError,
    Step,
    Value,
    _pool_by_start,
    plan,
)
from tgweb.program import limits_of

NEVER_POOLED = {"param", "grad", "state", "input", "output", "capture", "scalars"}
PRIORITY = ("param", "state", "input", "scalars", "grad", "output", "capture", "intermediate")


@st.composite
def random_program(draw):
    """Leaves, then steps that each write one or two new values from earlier ones;
    some values are views (same_as) of earlier ones, read by later steps."""
    values: list[Value] = []
    steps: list[Step] = []
    nleaves = draw(st.integers(1, 4))
    for i in range(nleaves):
        values.append(
            Value(
                i, 4 * draw(st.integers(1, 64)), draw(st.sampled_from(["input", "param", "state", "scalars"]))
            )
        )
    nsteps = draw(st.integers(1, 30))
    for _ in range(nsteps):
        avail = [v.id for v in values]
        reads = draw(st.lists(st.sampled_from(avail), min_size=1, max_size=3, unique=True))
        writes = []
        for _ in range(draw(st.integers(1, 2))):
            vid = len(values)
            kind = draw(st.sampled_from(["intermediate"] * 6 + ["grad", "output", "capture"]))
            values.append(Value(vid, 4 * draw(st.integers(1, 64)), kind))
            writes.append(vid)
        steps.append(Step(reads, writes))
        if draw(st.booleans()):  # a view of something computed so far
            src = draw(st.sampled_from([v.id for v in values]))
            values.append(Value(len(values), values[src].nbytes, "intermediate", same_as=src))
    return values, steps


def classes(values):
    by = {v.id: v for v in values}

    def root(v):
        while v.same_as is not None:
            v = by[v.same_as]
        return v.id

    return {v.id: root(v) for v in values}


def lifetimes(values, steps, cls):
    life = {}
    for i, s in enumerate(steps):
        for vid in s.reads + s.writes:
            r = cls[vid]
            a, b = life.get(r, (i, i))
            life[r] = (min(a, i), max(b, i))
    return life


@settings(max_examples=150, deadline=None)
@given(random_program())
def test_planner_properties(prog):
    values, steps = prog
    p = plan(values, steps)
    buffers, buffer_of, offset_of, report = p
    assert offset_of is p.offset_of and report is p.report
    cls = classes(values)
    life = lifetimes(values, steps, cls)
    by = {v.id: v for v in values}
    kind = {}
    for v in values:
        r = cls[v.id]
        kind[r] = min(kind.get(r, v.kind), v.kind, key=PRIORITY.index)
    size = {}
    for v in values:
        size[cls[v.id]] = max(size.get(cls[v.id], 4), v.nbytes)
    roots = sorted(set(cls.values()))

    for v in values:  # members of a class share memory
        assert buffer_of[v.id] == buffer_of[cls[v.id]] and p.offset_of[v.id] == p.offset_of[cls[v.id]]
        assert p.offset_of[v.id] + by[v.id].nbytes <= buffers[buffer_of[v.id]].size

    for i, a in enumerate(roots):
        for c in roots[i + 1 :]:
            if buffer_of[a] != buffer_of[c]:
                continue
            oa, oc = p.offset_of[a], p.offset_of[c]
            if oa >= oc + size[c] or oc >= oa + size[a]:
                continue
            # sharing memory: only intermediates, never at the same time
            assert kind[a] not in NEVER_POOLED and kind[c] not in NEVER_POOLED
            (s1, e1), (s2, e2) = life.get(a, (-1, -1)), life.get(c, (-1, -1))
            assert e1 < s2 or e2 < s1

    # never-pooled kinds: own buffer, except grads / scalars packed in one arena each
    for k in NEVER_POOLED:
        rs = [r for r in roots if kind[r] == k]
        bufs = {buffer_of[r] for r in rs}
        if k in ("grad", "scalars"):
            assert len(bufs) <= 1
            align = 16 if k == "grad" else 4
            assert all(p.offset_of[r] % align == 0 for r in rs)
        else:
            assert len(bufs) == len(rs)
        assert all(buffers[b].kind == k for b in bufs)

    # reuse happens: whenever two intermediates are never live at once, some buffer is
    # shared; and no more bytes than the greedy-by-start plan (one buffer per
    # simultaneously live intermediate) would take
    inter = [r for r in roots if kind[r] == "intermediate"]
    most = 0
    for i in range(len(steps)):
        most = max(most, sum(1 for r in inter if r in life and life[r][0] <= i <= life[r][1]))
    # no step touches two tenants of one pooled buffer (a kernel binds a buffer once)
    for s in steps:
        touched = {cls[v] for v in (*s.reads, *s.writes)}
        pooled = [r for r in touched if kind[r] == "intermediate"]
        assert len({buffer_of[r] for r in pooled}) == len(pooled)
    if len(inter) > most:
        assert len({buffer_of[r] for r in inter}) < len(inter)
    r4 = {r: (size[r] + 3) // 4 * 4 for r in inter}
    by_start = _pool_by_start(inter, {r: life.get(r, (-1, -1)) for r in inter}, r4)
    assert len(by_start) == most or (most == 0 and len(by_start) <= 1)
    assert p.report["bytes_by_kind"].get("intermediate", 0) <= sum(sz for sz, _ in by_start)
    assert p.report["total_bytes"] <= p.report["unpooled_total_bytes"]

    unpooled = plan(values, steps, pool=False)
    assert unpooled.report["intermediate_buffers"] == len(inter)
    assert unpooled.report["total_bytes"] == p.report["unpooled_total_bytes"]


def test_chain_reuses_two_buffers():
    values = [Value(0, 64, "input")] + [Value(i, 64, "intermediate") for i in range(1, 11)]
    values.append(Value(11, 64, "output"))
    steps = [Step([i], [i + 1]) for i in range(11)]
    p = plan(values, steps)
    assert p.report["intermediate_buffers"] == 2
    # an output never shares with an input of its own step
    for s in steps:
        for r in s.reads:
            for w in s.writes:
                assert p.buffer_of[r] != p.buffer_of[w]


def test_values_live_together_share_a_buffer_made_for_a_larger_one():
    """Two 40-byte values live at once after a 100-byte one has died: both in its buffer,
    at different offsets; never beside a value that one of their steps touches too."""
    sizes = {0: 16, 1: 100, 2: 40, 3: 40, 5: 16, 6: 16, 7: 16}
    kinds = {0: "input", 6: "output"}
    values = [Value(i, n, kinds.get(i, "intermediate")) for i, n in sizes.items()]
    flow = [([0], [1]), ([1], [5]), ([0], [2]), ([0], [3]), ([2], [7]), ([3, 7, 5], [6])]
    steps = [Step(r, w) for r, w in flow]
    p = plan(values, steps)
    assert p.buffer_of[1] == p.buffer_of[2] == p.buffer_of[3]
    assert sorted([p.offset_of[2], p.offset_of[3]]) == [0, 48]  # 16-byte aligned, disjoint
    # 5 is touched with 1 (step 1), 7 with 2 and with 5: each a buffer of its own
    assert len({p.buffer_of[r] for r in (1, 5, 7)}) == 3
    assert p.report["bytes_by_kind"]["intermediate"] == 100 + 16 + 16


def test_inplace_update_and_hazard():
    values = [
        Value(0, 16, "param"),
        Value(1, 16, "intermediate"),
        Value(2, 16, "intermediate", same_as=0, inplace=True),
    ]
    ok = plan(values, [Step([0], [1]), Step([0, 1], [2])])
    assert ok.buffer_of[2] == ok.buffer_of[0]
    with pytest.raises(PlanError, match="overwrote"):
        plan(values, [Step([0], [1]), Step([1], [2]), Step([0], [])])


def test_read_before_write_is_caught():
    values = [Value(0, 16, "input"), Value(1, 16, "intermediate"), Value(2, 16, "output")]
    with pytest.raises(PlanError, match="before it is written"):
        plan(values, [Step([1], [2]), Step([0], [1])])


class MLP(nn.Module):
    def __init__(self):
        self.l1 = nn.Linear(4, 16)
        self.l2 = nn.Linear(16, 3)

    def forward(self, x):
        h = tg.relu(self.l1(x))
        tg.capture("hidden", h)
        return self.l2(h).reshape(8, 3)


def test_training_graph_plan():
    tr = tg.compile(
        MLP(),
        lambda m, x, y: ((m(x) - y) ** 2).mean(),
        inputs={"x": (8, 4), "y": (8, 3)},
        optimizer=tg.optim.Adam(1e-3),
        backend="reference",
        clip_grad_norm=1.0,
    )
    g = tr.graph
    nodes = computed_nodes(g)
    sched = schedule(g, nodes, 8, IdSource(g))
    ups = place_updates(g, sched)
    assert len(ups.inplace) == len(g.updates) and not ups.copies  # every update in place
    store = assign_buffers(g, sched, ups, limits_of(), IdSource(g).new())
    kinds = {b.id: b.kind for b in store.buffers}
    for n, t in g.params.items():
        assert kinds[store.where(t)[0]] == "param"
        assert store.where(g.updates[n]) == store.where(t)  # updates in place
    for n, t in g.states.items():
        assert kinds[store.where(t)[0]] == "state"
        assert store.where(g.updates[n]) == store.where(t)
    arena = {store.where(t)[0] for t in g.grads.values()}
    assert len(arena) == 1 and kinds[arena.pop()] == "grad"
    offs = sorted((store.where(t)[1], int(np.prod(t.shape))) for t in g.grads.values())
    assert all(a + n <= b for (a, n), (b, _) in zip(offs, offs[1:]))
    assert kinds[store.where(g.captures["hidden"])[0]] == "capture"
    for n in ("loss", "ok", "grad_norm"):
        assert kinds[store.where(g.outputs[n])[0]] == "output"
    # reshape is a view: it lives where its input lives, and no kernel computes it
    reshapes = [t for t in g.tensors if t.kind == "reshape"]
    assert reshapes and all(store.where(t) == store.where(t.inputs[0]) for t in reshapes)
    assert not any(t.kind == "reshape" for t in sched.nodes)
    rep = store.report
    assert rep["unpooled_total_bytes"] >= rep["total_bytes"]
    assert tr.memory_report()["total_bytes"] == rep["total_bytes"]


def test_reference_and_gpu_backends_report_the_same_plan(monkeypatch):
    """One path from graph to plan: with the same device limits (the reference backend
    has no device and plans for WebGPU's defaults), the reference and native backends
    report the same buffers, kernels and memory report."""
    from tgweb import samples
    from tgweb.backends import native
    from tgweb.samples import sin

    monkeypatch.setattr(native, "device_limits", lambda: {})
    progs = []
    for backend in ("reference", "native"):
        tr = samples.compile(sin, backend=backend)
        progs.append((tr.program, tr.memory_report()))
    (ref, ref_mem), (gpu, gpu_mem) = progs
    assert ref_mem == gpu_mem and ref.buffers == gpu.buffers
    assert [k.wgsl for k in ref.kernels] == [k.wgsl for k in gpu.kernels]


def test_addition_sample_plans_at_most_12_MB():
    """Issue 7: every buffer of the addition sample's training step (params, grads, Adam
    states, inputs, intermediates) fits in 12 MB; forward values are recomputed or
    overwritten instead of kept (it was 18.9 MB). With the fused attention (issue 30) the
    attention output is kept once, for the attention's backward, and its permuted copy
    for the output projection's weight gradient is recomputed (12.1 MB were it kept)."""
    from tgweb import samples
    from tgweb.lower import lower

    s = samples.get("addition")
    tr = samples.compile(s, backend="reference")
    prog = lower(tr.graph)
    assert sum(b.size for b in prog.buffers) <= 12_000_000
    assert prog.meta["overwritten_intermediates"] > 0
    assert len(prog.kernels) <= 235  # 229, and select_scalars (pipelined steps)


def _chain(t_kind: str | None = None):
    """exp(a) (or exp(t), t = log(a) or a @ a computed and last read early) read by the
    next kernel and again 20 kernels later."""
    from tgweb.ir import Graph

    g = Graph()
    a = g.input("a", (4, 4))
    src = a
    nodes = []
    if t_kind is not None:
        attrs = {"ta": False, "tb": False} if t_kind == "matmul" else {}
        src = g.add(t_kind, (a,) if t_kind == "log" else (a, a), attrs, (4, 4), "f32", "t")
        nodes.append(src)
    e = g.add("exp", (src,), {}, (4, 4), "f32", "t")
    early = g.add("matmul", (e, e), {}, (4, 4), "f32", "t")
    nodes += [e, early]
    x = early
    for _ in range(20):
        x = g.add("matmul", (x, a), {}, (4, 4), "f32", "t")
        nodes.append(x)
    late = g.add(
        "matmul", (x, g.add("reshape", (e,), {"shape": (4, 4)}, (4, 4), "f32", "t")), {}, (4, 4), "f32", "t"
    )
    nodes.append(late)
    pos = {n.id: k for k, n in enumerate(nodes)}
    return g, nodes, pos, {n.id for n in nodes}, e, late


def _root(t):
    while t.kind == "reshape":
        t = t.inputs[0]
    return t


def test_rematerialize_copies_a_late_read_value():
    from tgweb.passes.remat import rematerialize

    g, nodes, pos, stored, e, late = _chain()
    ids = iter(range(1000, 2000))
    out = rematerialize(nodes, pos, stored, set(), _root, ids.__next__)
    assert out is not None and len(out) == len(nodes) + 1
    copy, rewired = out[-2], out[-1]
    assert copy.kind == "exp" and copy.id == 1000 and copy.inputs[0].kind == "input"
    assert rewired.id == late.id and _root(rewired.inputs[1]) is copy  # through a copied view
    assert out[:-2] == nodes[:-1]  # the early readers keep the original
    # nothing to gain for a value kept as an output
    assert rematerialize(nodes, pos, stored, {e.id}, _root, ids.__next__) is None


def test_rematerialize_keeps_values_whose_inputs_are_gone():
    from tgweb.passes.remat import rematerialize

    # exp's input t = a @ a is stored but read for the last time early, and a product is
    # not recomputed: recomputing exp late would keep t longer than exp itself
    g, nodes, pos, stored, e, late = _chain("matmul")
    assert rematerialize(nodes, pos, stored, set(), _root, iter(range(1000, 2000)).__next__) is None


def test_rematerialize_recomputes_through_a_value_freed_early():
    """exp's input t = log(a) is stored but freed early: the late reader gets copies of
    both (the attention output's slice and permute are recomputed this way)."""
    from tgweb.passes.remat import rematerialize

    g, nodes, pos, stored, e, late = _chain("log")
    out = rematerialize(nodes, pos, stored, set(), _root, iter(range(1000, 2000)).__next__)
    assert out is not None and out[:-3] == nodes[:-1]  # the early readers keep the originals
    log_copy, exp_copy, rewired = out[-3:]
    assert log_copy.kind == "log" and log_copy.inputs[0].kind == "input"
    assert exp_copy.kind == "exp" and exp_copy.inputs[0] is log_copy
    assert rewired.id == late.id and _root(rewired.inputs[1]) is exp_copy


def test_fit_recomputes_a_product_live_at_the_peak():
    """Under a memory budget products are recomputed too: exp(t), t = a @ a freed early,
    is live across kernel 10; its late reader gets copies of the product and of exp."""
    from tgweb.passes.remat import fit

    g, nodes, pos, stored, e, late = _chain("matmul")
    ids = iter(range(1000, 2000)).__next__
    out, chosen = fit(nodes, pos, stored, set(), _root, ids, 10, {e.id: 64}, 64)
    assert out[:-3] == nodes[:-1]  # the early readers keep the originals
    t_copy, exp_copy, rewired = out[-3:]
    assert t_copy.kind == "matmul" and exp_copy.inputs[0] is t_copy
    assert rewired.id == late.id and _root(rewired.inputs[1]) is exp_copy
    assert chosen == [(e, 64, 2 * 4 * 4 * 4 + 16)]  # freed at the peak, the copies' arithmetic
    # not when kept (an output), nor when the peak kernel itself reads it
    assert fit(nodes, pos, stored, {e.id}, _root, ids, 10, {e.id: 64}, 64) is None
    assert fit(nodes, pos, stored, set(), _root, ids, pos[late.id], {e.id: 64}, 64) is None


def test_memory_report_names_the_largest_values_live_at_the_peak():
    """The peak of live intermediates: the largest live values with the op and the user's
    line that made each, and the live bytes by op kind (Trainer.memory_text prints it)."""
    import inspect

    class Wide(nn.Module):
        def __init__(self):
            self.a, self.b = nn.Linear(3, 700), nn.Linear(700, 1)

        def forward(self, x):
            return self.b(tg.tanh(self.a(x)))  # the [50, 700] product and tanh: the peak

    line = inspect.getsourcelines(Wide.forward)[1] + 1
    tr = tg.compile(
        Wide(),
        lambda m, x: tg.mean(m(x) ** 2),
        {"x": (50, 3)},
        {"name": "sgd", "lr": 0.1},
        backend="reference",
    )
    rep = tr.memory_report()
    peak = rep["peak"]
    fixed = rep["total_bytes"] - rep["bytes_by_kind"]["intermediate"]
    assert peak["intermediate_bytes"] + fixed == rep["peak_live_bytes"]
    assert sum(peak["by_kind"].values()) == peak["intermediate_bytes"]
    top = peak["largest"][0]
    assert top["bytes"] == 50 * 700 * 4 and "[50, 700]" in top["tensor"]
    assert top["site"].endswith(f"test_planner.py:{line}")
    s, e = top["steps"]
    assert s <= peak["step"] <= e
    text = tr.memory_text()
    assert f"peak at step {peak['step']}" in text and top["tensor"] in text
