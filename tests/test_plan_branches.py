"""Every branch of the buffer planner and of the lowering's in-place update logic.

The planner (tgweb.passes.plan.plan) on hand-written values and steps: each PlanError,
views, in-place writes, the packed arenas, both pooling strategies, pool=False and the
report. Then lower() on small graphs: updates written in place, the copy fallback, an
intermediate overwritten by its last reader, and tensors over the device limits. Programs
that lower builds for updates run on the native backend and must agree with the
reference. Public surfaces only: lower(), plan/Value/Step/PlanError, Program and its meta.
"""

from __future__ import annotations

import numpy as np
import pytest

import tgweb as tg
from tgweb import nn, ops
from tgweb.backends.reference import Context, evaluate
from tgweb.compile import build_training_graph
from tgweb.ir import Graph, TraceError, tracing
from tgweb.lower import lower
from tgweb.passes.plan import PlanError, Step, Value, plan

# --------------------------------------------------------------------------
# plan(): inconsistent values and steps


def _input(vid=0, nbytes=16):
    return Value(vid, nbytes, "input", f"input {vid}")


PLAN_ERRORS = {
    "listed_twice": ([_input(0), _input(0)], [], "value 0 listed twice"),
    "unknown_kind": ([Value(0, 16, "weights")], [], "unknown kind 'weights'"),
    "negative_size": ([Value(0, -4, "input")], [], "value 0: negative size"),
    "same_as_unknown": (
        [_input(0), Value(1, 16, "intermediate", same_as=9)],
        [],
        "value 1 is same_as unknown value 9",
    ),
    "same_as_cycle": (
        [Value(0, 16, "intermediate", same_as=1), Value(1, 16, "intermediate", same_as=0)],
        [],
        "same_as cycle",
    ),
    "inplace_without_same_as": ([Value(0, 16, "param", inplace=True)], [], "inplace but names no same_as"),
    "two_overwrite_one": (
        [
            Value(0, 16, "param"),
            Value(1, 16, "intermediate", same_as=0, inplace=True),
            Value(2, 16, "intermediate", same_as=0, inplace=True),
        ],
        [Step([0], [1, 2])],
        "values 1 and 2 both overwrite value 0 in place",
    ),
    # the same through a chain: 2 overwrites 1, which overwrote 0 -- one class, two writers
    "two_overwrite_one_chained": (
        [
            Value(0, 16, "param"),
            Value(1, 16, "intermediate", same_as=0, inplace=True),
            Value(2, 16, "intermediate", same_as=1, inplace=True),
        ],
        [Step([0], [1]), Step([1], [2])],
        "both overwrite value 0 in place",
    ),
    "read_after_overwrite": (
        [
            Value(0, 16, "param"),
            Value(1, 16, "intermediate", same_as=0, inplace=True),
            Value(2, 4, "output"),
        ],
        [Step([0], [1], "update"), Step([0], [2], "late reader")],
        "step 1 (late reader) reads value 0 after step 0 overwrote it in place with value 1",
    ),
    # a view of the old value is the old value too
    "view_of_old_read_after_overwrite": (
        [
            Value(0, 16, "param"),
            Value(3, 16, "intermediate", same_as=0),
            Value(1, 16, "intermediate", same_as=0, inplace=True),
            Value(2, 4, "output"),
        ],
        [Step([0], [1]), Step([3], [2])],
        "reads value 3 after step 0 overwrote it",
    ),
    "step_touches_unknown_value": ([_input(0)], [Step([0], [5], "k")], "step 0 (k) touches unknown value 5"),
    # the self-check: an intermediate is read before any step writes it ...
    "read_before_write": (
        [_input(0), Value(1, 16, "intermediate"), Value(2, 16, "output")],
        [Step([1], [2]), Step([0], [1])],
        "intermediate value 1 is read at step 0 before it is written",
    ),
    # ... or never written at all
    "read_never_written": (
        [_input(0), Value(1, 16, "intermediate"), Value(2, 16, "output")],
        [Step([0, 1], [2])],
        "intermediate value 1 is read at step 0 before it is written",
    ),
}


@pytest.mark.parametrize("case", list(PLAN_ERRORS))
@pytest.mark.parametrize("pool", [True, False])
def test_plan_rejects_inconsistent_input(case, pool):
    values, steps, message = PLAN_ERRORS[case]
    with pytest.raises(PlanError) as e:
        plan(values, steps, pool=pool)
    assert message in str(e.value)


# --------------------------------------------------------------------------
# plan(): views and in-place writes


def _where(p, vid):
    return p.buffer_of[vid], p.offset_of[vid]


def test_views_share_their_values_memory_and_extend_its_lifetime():
    values = [
        _input(0, 16),
        Value(1, 16, "intermediate", "a"),
        Value(2, 16, "intermediate", "view of a", same_as=1),
        Value(3, 16, "intermediate", "view of the view", same_as=2),
        Value(4, 16, "intermediate", "b"),
        Value(5, 16, "intermediate", "view of the input", same_as=0),
        Value(6, 16, "output", "out"),
    ]
    steps = [Step([0], [1]), Step([0], [4]), Step([4, 5], [6]), Step([3], [6])]
    p = plan(values, steps)
    kinds = {b.id: b.kind for b in p.buffers}
    assert _where(p, 2) == _where(p, 3) == _where(p, 1)
    assert _where(p, 5) == _where(p, 0) and kinds[p.buffer_of[5]] == "input"
    # a is written at step 0 and read (through its views) at step 3: alive while b is
    assert p.lifetime[1] == p.lifetime[3] == (0, 3)
    assert p.buffer_of[4] != p.buffer_of[1]
    # without the late read through the view, a and b could share one buffer
    q = plan(values, steps[:3])
    assert q.lifetime[1] == (0, 0) and q.buffer_of[4] == q.buffer_of[1]
    assert q.report["intermediate_buffers"] == 1 and p.report["intermediate_buffers"] == 2


def test_a_class_takes_the_first_kind_of_priority_and_at_least_4_bytes():
    values = [
        _input(0, 16),
        Value(1, 16, "intermediate"),
        Value(2, 16, "output", "y", same_as=1),  # an output that is a view of an intermediate
        Value(3, 0, "intermediate"),  # an empty tensor still gets 4 bytes
        Value(4, 4, "capture", "c"),
    ]
    steps = [Step([0], [1]), Step([0], [3]), Step([3], [4])]
    p = plan(values, steps)
    by_id = {b.id: b for b in p.buffers}
    assert by_id[p.buffer_of[1]].kind == "output" and by_id[p.buffer_of[1]].size == 16
    assert p.report["intermediate_values"] == 1  # the class of 1 and 2 is an output, not pooled
    assert by_id[p.buffer_of[3]].kind == "intermediate" and by_id[p.buffer_of[3]].size == 4
    assert by_id[p.buffer_of[4]].kind == "capture"


def test_inplace_update_shares_the_param_and_may_be_read_after_it_is_written():
    values = [
        Value(0, 16, "param", "p"),
        Value(1, 16, "state", "m"),
        _input(2, 16),
        Value(3, 16, "intermediate", "new m", same_as=1, inplace=True),
        Value(4, 16, "intermediate", "new p", same_as=0, inplace=True),
        Value(5, 16, "intermediate", "view of new p", same_as=4),
        Value(6, 4, "output", "loss"),
        Value(7, 16, "intermediate", "never written", same_as=1, inplace=False),
    ]
    steps = [
        Step([0, 2], [6]),  # reads p before the update
        Step([1, 2], [3]),  # m <- m * b + x: reads the old m in its own step (elementwise)
        Step([0, 3], [4]),  # p <- p - lr * new m
        Step([4, 5], [6]),  # reads the new p (and a view of it) afterwards: fine
    ]
    for pool in (True, False):
        p = plan(values, steps, pool=pool)
        kinds = {b.id: b.kind for b in p.buffers}
        assert _where(p, 4) == _where(p, 0) == _where(p, 5) and kinds[p.buffer_of[0]] == "param"
        assert _where(p, 3) == _where(p, 1) and kinds[p.buffer_of[1]] == "state"
        assert p.report["intermediate_values"] == 0


def test_inplace_value_no_step_writes_is_accepted():
    values = [Value(0, 16, "param"), Value(1, 16, "intermediate", same_as=0, inplace=True)]
    values.append(Value(2, 4, "output"))
    p = plan(values, [Step([0], [2])])
    assert _where(p, 1) == _where(p, 0)


# --------------------------------------------------------------------------
# plan(): the packed arenas


def test_grad_arena_packs_at_16_bytes_and_leaves_the_padding_to_no_value():
    sizes = {10: 4, 11: 12, 12: 20, 13: 0, 14: 16}
    values = [_input(0, 16)] + [Value(v, n, "grad", f"g{v}") for v, n in sizes.items()]
    steps = [Step([0], list(sizes))]
    p = plan(values, steps)
    grads = [b for b in p.buffers if b.kind == "grad"]
    assert len(grads) == 1 and {p.buffer_of[v] for v in sizes} == {grads[0].id}
    assert [p.offset_of[v] for v in sizes] == [0, 16, 32, 64, 80]
    assert grads[0].size == 96
    covered = set()
    for v, n in sizes.items():
        covered |= set(range(p.offset_of[v], p.offset_of[v] + max(n, 4)))
    padding = set(range(grads[0].size)) - covered
    assert padding == set(range(4, 16)) | set(range(28, 32)) | set(range(52, 64)) | set(range(68, 80))
    assert p.report["bytes_by_kind"]["grad"] == 96


def test_scalars_arena_packs_at_4_bytes():
    values = [Value(20, 4, "scalars", "lr"), Value(21, 4, "scalars", "seed"), Value(22, 8, "scalars", "pair")]
    values += [Value(23, 2, "scalars", "short"), _input(0, 16), Value(1, 4, "output")]
    p = plan(values, [Step([0, 20, 21, 22, 23], [1])])
    (arena,) = [b for b in p.buffers if b.kind == "scalars"]
    assert [p.offset_of[v] for v in (20, 21, 22, 23)] == [0, 4, 8, 16]
    assert arena.size == 20 and not any(b.kind == "grad" for b in p.buffers)


def test_no_values_no_buffers():
    p = plan([], [])
    assert p.buffers == [] and p.report["total_bytes"] == 0 and p.report["steps"] == 0


# --------------------------------------------------------------------------
# plan(): pooling intermediates


def _pooled(p):
    """{frozenset of value ids sharing a pool buffer}, and the pooled bytes."""
    share: dict[int, set] = {}
    for vid, b in p.buffer_of.items():
        if p.buffers[b].kind == "intermediate":
            share.setdefault(b, set()).add(vid)
    return {frozenset(s) for s in share.values()}, sum(b.size for b in p.buffers if b.kind == "intermediate")


def test_pooling_keeps_the_by_start_assignment_when_it_is_smaller():
    # four 4-byte intermediates a, b, c, d with lifetimes a 1..1, b 3..4, c 2..4, d 0..2.
    # by start with best fit: d, a, then c reuses a's buffer, b reuses d's: 2 buffers, 8 bytes.
    # largest first (all equal, graph order): a; b joins a; c overlaps b; d overlaps a and c:
    # 3 buffers, 12 bytes. The planner keeps the 8.
    a, b, c, d = 1, 2, 3, 4
    values = [_input(0)] + [Value(v, 4, "intermediate", n) for v, n in zip((a, b, c, d), "abcd")]
    values.append(Value(5, 4, "output"))
    steps = [Step([0], [d]), Step([0], [a]), Step([d], [c]), Step([c], [b]), Step([b, c], [5])]
    p = plan(values, steps)
    assert [p.lifetime[v] for v in (a, b, c, d)] == [(1, 1), (3, 4), (2, 4), (0, 2)]
    shared, nbytes = _pooled(p)
    assert shared == {frozenset({d, b}), frozenset({a, c})} and nbytes == 8
    assert p.report["intermediate_buffers"] == 2


def test_pooling_keeps_the_largest_first_assignment_when_it_is_smaller():
    # a 4 bytes 1..1, b 8 bytes 0..0, c 8 bytes 1..3.
    # by start: b; a reuses b's buffer; c overlaps a: a second 8-byte buffer, 16 bytes.
    # largest first: b, c after b in the same buffer, a overlaps c: 8 + 4 = 12 bytes, kept.
    a, b, c = 1, 2, 3
    values = [_input(0), Value(a, 4, "intermediate"), Value(b, 8, "intermediate")]
    values += [Value(c, 8, "intermediate"), Value(4, 4, "output"), Value(5, 4, "output")]
    steps = [Step([0], [b]), Step([0], [a, c]), Step([c], [4]), Step([c], [5])]
    p = plan(values, steps)
    assert [p.lifetime[v] for v in (a, b, c)] == [(1, 1), (0, 0), (1, 3)]
    shared, nbytes = _pooled(p)
    assert shared == {frozenset({b, c}), frozenset({a})} and nbytes == 12
    # and without pooling every intermediate has its own buffer
    q = plan(values, steps, pool=False)
    assert _pooled(q) == ({frozenset({a}), frozenset({b}), frozenset({c})}, 20)


def test_pooled_values_never_overlap_in_time():
    # a chain: each step reads the previous value; lifetimes are inclusive, so a step's
    # output never shares a buffer with its input, but with the value before that
    n = 6
    values = [_input(0)] + [Value(i, 16, "intermediate") for i in range(1, n + 1)] + [Value(99, 16, "output")]
    steps = [Step([i - 1], [i]) for i in range(1, n + 1)] + [Step([n], [99])]
    p = plan(values, steps)
    for i in range(1, n):
        assert p.buffer_of[i] != p.buffer_of[i + 1]
    for i in range(1, n - 1):
        assert p.buffer_of[i] == p.buffer_of[i + 2]
    assert p.report["intermediate_buffers"] == 2


# --------------------------------------------------------------------------
# plan(): the report


REPORT_VALUES = [
    _input(0, 16),
    Value(1, 8, "param", "p"),
    Value(2, 4, "scalars", "lr"),
    Value(3, 12, "intermediate", "a"),
    Value(4, 20, "intermediate", "b"),
    Value(5, 12, "intermediate", "c"),
    Value(6, 8, "grad", "g"),
    Value(7, 4, "output", "loss"),
    Value(8, 40, "intermediate", "never touched"),
]
REPORT_STEPS = [Step([0, 1, 2], [3]), Step([3], [4]), Step([4], [5]), Step([5], [6, 7])]


def test_report_fields_pooled():
    p = plan(REPORT_VALUES, REPORT_STEPS)
    r = p.report
    # a 12 bytes 0..1, b 20 bytes 1..2, c 12 bytes 2..3 and 40 bytes no step touches.
    # largest first: the 40, b with it, a and c in a 12-byte buffer: 52 bytes (by start
    # would put a and c with the 40 and b alone: 60)
    kinds = {"grad": 8, "scalars": 4, "input": 16, "param": 8, "output": 4, "intermediate": 52}
    assert r["bytes_by_kind"] == kinds
    fixed = 8 + 4 + 16 + 8 + 4
    assert r["total_bytes"] == fixed + 52 == sum(b.size for b in p.buffers)
    assert r["unpooled_total_bytes"] == fixed + 12 + 20 + 12 + 40
    assert r["peak_live_bytes"] == fixed + 32  # a + b at step 1, b + c at step 2
    assert r["buffers"] == len(p.buffers) == 7
    assert r["intermediate_values"] == 4 and r["intermediate_buffers"] == 2 and r["steps"] == 4
    assert p.lifetime[8] == (-1, -1)


def test_report_fields_unpooled():
    p = plan(REPORT_VALUES, REPORT_STEPS, pool=False)
    r = p.report
    fixed = 8 + 4 + 16 + 8 + 4
    assert r["total_bytes"] == r["unpooled_total_bytes"] == fixed + 84 == sum(b.size for b in p.buffers)
    assert r["peak_live_bytes"] == fixed + 32
    assert r["intermediate_buffers"] == r["intermediate_values"] == 4
    assert r["bytes_by_kind"]["intermediate"] == 84
    assert len({p.buffer_of[v] for v in (3, 4, 5, 8)}) == 4


# --------------------------------------------------------------------------
# lower(): updates in place, the copy fallback, overwritten intermediates, limits


def _feeds(g, rng):
    """Random values for every input, param and state, keyed by name and kind."""
    out = {}
    for kind, leaves in (("inputs", g.inputs), ("params", g.params), ("states", g.states)):
        for n, t in leaves.items():
            out[(kind, n)] = rng.standard_normal(t.shape).astype(np.float32)
    return out


def _run_against_reference(g, prog, scalars=None, seed=0, inspect=None):
    """One step natively; the outputs and every updated param/state must equal the reference.
    inspect(runtime) runs after the step. Returns the reference's outputs by name."""
    from tgweb.backends import native

    scalars = scalars or {}
    feeds = _feeds(g, np.random.default_rng(seed))
    rt = native.Runtime(prog)
    try:
        for (kind, n), v in feeds.items():
            if kind != "inputs":
                rt.write(kind, n, v)
        inputs = {n: v for (kind, n), v in feeds.items() if kind == "inputs"}
        got = rt.run(inputs, scalars, [("outputs", n) for n in g.outputs])
        for n in g.updates:
            kind = "params" if n in g.params else "states"
            got[(kind, n)] = rt.read(kind, n)
        if inspect is not None:
            inspect(rt)
    finally:
        rt.close()
    ctx = Context()
    ctx.scalars = dict(scalars)
    leaves = {**g.inputs, **g.params, **g.states}
    want_of = list(g.outputs.values()) + list(g.updates.values())
    fed = {leaves[n].id: v for (_, n), v in feeds.items()}
    want = evaluate(g, want_of, fed, ctx)
    keys = [("outputs", n) for n in g.outputs] + [
        ("params" if n in g.params else "states", n) for n in g.updates
    ]
    for key, t, w in zip(keys, want_of, want):
        a = np.array(got[key], np.float32).reshape(t.shape)
        np.testing.assert_allclose(a, np.asarray(w, np.float32), rtol=1e-5, atol=1e-5, err_msg=str(key))
    return {n: w for n, w in zip(g.outputs, want)}


def _writers(prog, buffer):
    """The kernels that bind `buffer` for writing."""

    def writes(k):
        return any(b.buffer == buffer and b.access == "read_write" for b in k.bindings)

    return [k for k in prog.kernels if writes(k)]


def _is_copy(k):
    return list(k.ops) == ["copy"]


def _inplace_graph():
    g = Graph()
    with tracing(g):
        p = g.param("p", (3, 5))
        m = g.state("m", (3, 5))
        x = g.input("x", (3, 5))
        lr = g.scalar("lr")
        new_m = m * 0.9 + x
        g.updates["m"] = new_m
        g.updates["p"] = p - lr * new_m
        g.outputs["loss"] = ops.sum(p * x)  # reads p before its update
    return g


@pytest.mark.native
def test_updates_written_in_place_run_natively():
    g = _inplace_graph()
    prog = lower(g)
    assert prog.meta["inplace_updates"] == 2 and prog.meta["copied_updates"] == 0
    assert not any(_is_copy(k) for k in prog.kernels)
    for slot in (prog.params["p"], prog.states["m"]):
        ws = _writers(prog, slot.buffer)
        assert ws and not any(_is_copy(k) for k in ws)
    _run_against_reference(g, prog, {"lr": 0.1})


def _copy_graph(case):
    """A graph whose update for p cannot be written in place (see COPY_CASES)."""
    g = Graph()
    with tracing(g):
        p = g.param("p", (3, 5))
        x = g.input("x", (3, 5))
        if case == "old_value_read_later":
            new_p = p * 0.5 + x
            g.updates["p"] = new_p
            s = ops.sum(new_p, axis=1, keepdims=True)  # runs after new_p's kernel ...
            g.outputs["y"] = ops.sum(p * s)  # ... and so does this reader of the old p
        elif case == "view":
            g.updates["p"] = (x * 2.0).reshape((15,)).reshape((3, 5))
            g.outputs["y"] = ops.sum(p)
        elif case == "leaf":
            g.updates["p"] = x
            g.outputs["y"] = ops.sum(p * 2.0)
        elif case == "output":
            new_p = p + x
            g.updates["p"] = new_p
            g.outputs["new_p"] = new_p
        elif case == "reduction":  # computed by a reduction kernel (whose epilogue reads p)
            z = g.input("z", (3, 5, 2))
            g.updates["p"] = ops.sum(z, axis=2) * p
            g.outputs["y"] = ops.sum(p * x)
        elif case == "matmul":
            a, b = g.input("a", (3, 4)), g.input("b", (4, 5))
            g.updates["p"] = a @ b
            g.outputs["y"] = ops.sum(p * x)
        elif case == "full":
            g.updates["p"] = tg.full((3, 5), 2.0)
            g.outputs["y"] = ops.sum(p * x)
        else:
            raise AssertionError(case)
    return g


COPY_CASES = ["old_value_read_later", "view", "leaf", "output", "reduction", "matmul", "full"]


@pytest.mark.native
@pytest.mark.parametrize("case", COPY_CASES)
def test_updates_copied_when_not_safe_in_place_run_natively(case):
    g = _copy_graph(case)
    prog = lower(g)
    assert prog.meta["copied_updates"] == 1 and prog.meta["inplace_updates"] == 0
    ws = _writers(prog, prog.params["p"].buffer)
    assert ws and all(_is_copy(k) for k in ws)
    # the copy runs after every kernel that reads the old value
    last_copy = max(i for i, k in enumerate(prog.kernels) if _is_copy(k))
    assert last_copy == len(prog.kernels) - 1
    _run_against_reference(g, prog)


@pytest.mark.native
def test_intermediate_overwritten_by_its_last_reader_runs_natively():
    g = Graph()
    with tracing(g):
        x = g.input("x", (4, 6))
        a = ops.exp(x)
        b = a / ops.sum(a, axis=1, keepdims=True)  # the last reader of a, elementwise
        g.outputs["y"] = ops.sum(b, axis=0)
        g.outputs["z"] = ops.sum(b, axis=1)
    prog = lower(g)
    assert prog.meta["overwritten_intermediates"] >= 1
    assert prog.meta["inplace_updates"] == prog.meta["copied_updates"] == 0
    _run_against_reference(g, prog)


def test_lower_meta_memory_is_the_plans_report():
    prog = lower(_inplace_graph())
    mem = prog.meta["memory"]
    keys = ("bytes_by_kind", "total_bytes", "unpooled_total_bytes", "peak_live_bytes", "buffers", "steps")
    assert set(keys) <= set(mem), mem
    assert mem["buffers"] == len(prog.buffers)
    assert mem["peak_live_bytes"] <= mem["total_bytes"] <= mem["unpooled_total_bytes"]
    assert set(mem["bytes_by_kind"]) == {b.kind for b in prog.buffers}


def test_tensor_over_the_binding_limit_is_named():
    g = Graph()
    with tracing(g):
        x = g.input("big", (64, 64))  # 16 KiB
        g.outputs["y"] = ops.sum(x)
    limits = {"maxStorageBufferBindingSize": 8192, "maxBufferSize": 1 << 20}
    with pytest.raises(TraceError) as e:
        lower(g, limits=limits)
    msg = str(e.value)
    assert "input 'big'" in msg and "16384 bytes" in msg and "maxStorageBufferBindingSize = 8192" in msg
    lower(g, limits={"maxStorageBufferBindingSize": 16384, "maxBufferSize": 1 << 20})  # fits exactly


def test_tensors_over_the_limit_are_named_largest_first():
    g = Graph()
    with tracing(g):
        a = g.input("a", (40, 64))  # 10 KiB
        b = g.input("b", (64, 64))  # 16 KiB
        g.outputs["y"] = ops.sum(a) + ops.sum(b)
    with pytest.raises(TraceError) as e:
        lower(g, limits={"maxStorageBufferBindingSize": 8192, "maxBufferSize": 1 << 20})
    msg = str(e.value)
    assert msg.index("input 'b'") < msg.index("also input 'a'") and "10240 bytes" in msg


def test_param_over_the_buffer_size_limit_is_named():
    g = Graph()
    with tracing(g):
        w = g.param("w", (32, 32))  # 4 KiB
        x = g.input("x", (32,))
        g.outputs["y"] = ops.sum(w * x)
    with pytest.raises(TraceError) as e:
        lower(g, limits={"maxStorageBufferBindingSize": 1 << 20, "maxBufferSize": 2048})
    msg = str(e.value)
    assert "param 'w'" in msg and "maxBufferSize = 2048" in msg


def test_intermediate_over_the_limits_names_the_op_and_the_users_line():
    g = Graph()
    with tracing(g):
        x = g.input("x", (16,))
        g.outputs["y"] = ops.exp(tg.broadcast_to(x, (256, 16))) * 2.0  # 16 KiB from 64 bytes
    with pytest.raises(TraceError) as e:
        lower(g, limits={"maxStorageBufferBindingSize": 4096, "maxBufferSize": 4096})
    msg = str(e.value)
    assert "tensor %" in msg and "16384 bytes" in msg and "test_plan_branches.py" in msg


class _Tiny(nn.Module):
    def __init__(self):
        self.l = nn.Linear(4, 4)

    def forward(self, x):
        return self.l(x)


def test_arena_over_the_binding_limit_is_split_and_each_buffer_fits():
    g = build_training_graph(_Tiny(), lambda m, x: (m(x) ** 2).mean(), {"x": (2, 4)}, tg.optim.SGD(0.1))
    # weight and its gradient: 64 bytes each; the grad arena holds weight + bias: 80
    prog = lower(g, limits={"maxStorageBufferBindingSize": 70, "maxBufferSize": 1 << 20})
    assert [(b.size, b.label) for b in prog.buffers if b.kind == "grad"] == [
        (16, "grad arena 1 of 2"),  # the bias's gradient comes first
        (64, "grad arena 2 of 2"),
    ]
    prog = lower(g, limits={"maxStorageBufferBindingSize": 80, "maxBufferSize": 1 << 20})
    assert [(b.size, b.label) for b in prog.buffers if b.kind == "grad"] == [(80, "grad arena")]


def test_plan_splits_an_arena_where_the_next_value_would_pass_max_binding():
    values = [Value(i, n, "grad") for i, n in enumerate((100, 100, 40, 100))] + [Value(9, 8, "scalars")]
    steps = [Step([], [0, 1, 2, 3, 9])]
    p = plan(values, steps, max_binding=256)
    grads = [b for b in p.buffers if b.kind == "grad"]
    # 0 at 0, 1 at 112, 2 would end at 264 > 256: a new arena with 2 at 0 and 3 at 48
    assert [b.size for b in grads] == [212, 148]
    assert [(p.buffer_of[i], p.offset_of[i]) for i in range(4)] == [
        (grads[0].id, 0),
        (grads[0].id, 112),
        (grads[1].id, 0),
        (grads[1].id, 48),
    ]
    assert [b.size for b in plan(values, steps).buffers if b.kind == "grad"] == [372]  # no limit: one


class _TwoLayers(nn.Module):
    def __init__(self):
        self.l1 = nn.Linear(5, 6)
        self.l2 = nn.Linear(6, 3)

    def forward(self, x):
        return self.l2(ops.tanh(self.l1(x)))


@pytest.mark.native
def test_a_plan_split_by_small_limits_runs_natively_as_the_reference():
    """Gradients of 120 + 24 + 72 + 12 bytes under a 160-byte binding limit: two grad
    arenas, read together by the global norm's reduction; one SGD step with momentum and
    clipping natively equals the reference, and no buffer passes the limit."""
    opt = tg.optim.SGD(0.1, momentum=0.9)
    loss = lambda m, x: (m(x) ** 2).mean()  # noqa: E731
    g = build_training_graph(_TwoLayers(), loss, {"x": (3, 5)}, opt, clip_grad_norm=0.5)
    limits = {"maxStorageBufferBindingSize": 160, "maxBufferSize": 1 << 20}
    prog = lower(g, limits=limits)
    arenas = [b for b in prog.buffers if b.kind == "grad"]
    assert len(arenas) == 2 and all(b.size <= 160 for b in prog.buffers), prog.buffers
    assert [b.size for b in lower(g).buffers if b.kind == "grad"] == [256]  # default limits: one arena
    scalars = {s.name: 0.1 if s.type == "f32" else 1 for s in prog.scalars}
    want = _run_against_reference(g, prog, scalars)
    assert float(want["grad_norm"]) > 0.5  # the clipping scaled the step


def test_tensors_over_the_limits_are_named_largest_first():
    g = Graph()
    with tracing(g):
        a = g.input("a", (40, 64))  # 10,240 bytes
        b = g.input("b", (64, 64))  # 16,384 bytes
        c = g.input("c", (10, 10))
        g.outputs["y"] = ops.sum(a) + ops.sum(b) + ops.sum(c)
    with pytest.raises(TraceError) as e:
        lower(g, limits={"maxStorageBufferBindingSize": 8192, "maxBufferSize": 1 << 20})
    msg = str(e.value)
    assert msg.startswith("input 'b'") and "16384 bytes, over the device limit" in msg
    assert "maxStorageBufferBindingSize = 8192 bytes; also input 'a' f32[40, 64]: 10240 bytes;" in msg
    assert "'c'" not in msg


@pytest.mark.native
def test_grad_arena_padding_stays_zero_natively():
    """Gradients of 6 and 3 floats: the arena has padding after each. A step runs, the
    whole arena is read back: its sum of squares is the gradient norm, so the padding
    is zero (a global norm reduces over the whole arena as one range)."""

    class Small(nn.Module):
        def __init__(self):
            self.l = nn.Linear(2, 3)

        def forward(self, x):
            return self.l(x)

    g = build_training_graph(Small(), lambda m, x: (m(x) ** 2).mean(), {"x": (2, 2)}, tg.optim.SGD(0.1))
    prog = lower(g)
    (arena,) = [b for b in prog.buffers if b.kind == "grad"]
    assert arena.size >= 48  # 24 + 12 bytes of gradients, each at a 16-byte boundary
    seen = {}

    def read_arena(rt):
        raw = rt.device.queue.read_buffer(rt.buffers[arena.id])
        seen["arena"] = np.frombuffer(bytes(raw), np.float32)

    scalars = {s.name: 0.1 if s.type == "f32" else 1 for s in prog.scalars}
    want = _run_against_reference(g, prog, scalars, inspect=read_arena)
    a = seen["arena"].astype(np.float64)
    assert np.count_nonzero(a) <= 9
    np.testing.assert_allclose(np.sqrt((a * a).sum()), float(want["grad_norm"]), rtol=1e-5)


class _Aligned(nn.Module):  # every gradient a multiple of 4 floats: no arena padding
    def __init__(self):
        self.l1 = nn.Linear(4, 8)
        self.l2 = nn.Linear(8, 4)

    def forward(self, x):
        return self.l2(ops.tanh(self.l1(x)))


@pytest.mark.native
@pytest.mark.parametrize("model", [_TwoLayers, _Aligned])
def test_the_gpu_global_norm_reads_the_grad_arena_in_blocks(model):
    """The GPU class's global norm over blocks of 12 gradients, straight from the grad
    arena (one range where the gradients follow each other without padding, a range
    each where they do not), equals the reference's through a clipped AdamW step."""
    from tgweb.codegen.target import TUNING, Target

    opt = tg.optim.AdamW(0.1)
    g = build_training_graph(
        model(), lambda m, x: (m(x) ** 2).mean(), {"x": (3, model().l1.weight.shape[1])}, opt, 0.5
    )
    prog = lower(g, target=Target("gpu", tuning=dict(TUNING["gpu"], sumsq_block=12)))
    (blocks,) = [k for k in prog.kernels if "sumsq_blocks" in k.ops]
    ranges = blocks.wgsl.count("let lo = ")
    assert ranges == (1 if model is _Aligned else 4), blocks.wgsl
    scalars = {s.name: 0.1 if s.type == "f32" else 1 for s in prog.scalars}
    want = _run_against_reference(g, prog, scalars)
    assert float(want["grad_norm"]) > 0.5  # the clipping scaled the step
