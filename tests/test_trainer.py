"""The Trainer on the reference backend: non-finite steps, bad input, params and
states, schedules, masks, normalisation, inference and the memory report."""

import array
import sys

import numpy as np
import pytest

import tgweb as tg
from tgweb import nn
from tgweb.compile import decays
from tgweb.optim import schedules
from tgweb.pipeline import APPLIED_READ, DEPTH, if_applied


class Net(nn.Module):
    """Token embedding plus a float feature -> 2 outputs."""

    def __init__(self):
        self.emb = nn.Embedding(5, 4)
        self.l1 = nn.Linear(5, 8)
        self.norm = nn.LayerNorm(8)
        self.l2 = nn.Linear(8, 2)

    def forward(self, tok, x):
        h = tg.concat([self.emb(tok), x], axis=-1)
        return self.l2(self.norm(tg.tanh(self.l1(h))))


def loss_fn(m, tok, x, y, z):
    out = m(tok, x)
    # the second term is finite with a finite gradient for z != 0; at z == 0 the loss
    # stays finite but the gradient of sqrt(|0|) is not
    return ((out - y) ** 2).mean() + 1e-3 * tg.sqrt(tg.abs(out * z)).mean()


INPUTS = {"tok": ((6,), "i32"), "x": (6, 1), "y": (6, 2), "z": ()}


def batch(seed, z=1.0):
    rng = np.random.default_rng(seed)
    return {
        "tok": rng.integers(0, 5, 6).astype(np.int32),
        "x": rng.normal(size=(6, 1)).astype(np.float32),
        "y": rng.normal(size=(6, 2)).astype(np.float32),
        "z": np.float32(z),
    }


def make(opt=None, **kw):
    return tg.compile(
        Net(),
        loss_fn,
        inputs=INPUTS,
        optimizer=opt or tg.optim.AdamW(1e-2, weight_decay=0.1),
        **{"backend": "reference", **kw},
    )


def snapshot(tr):
    return (
        {k: v.tobytes() for k, v in tr.params().items()},
        {k: v.tobytes() for k, v in tr.states().items()},
        tr.steps,
    )


@pytest.mark.parametrize("bad", ["nan_input", "inf_target", "nan_grad_only"])
def test_nonfinite_step_changes_nothing_and_training_goes_on(bad):
    a, b = make(clip_grad_norm=1.0), make(clip_grad_norm=1.0)
    for tr in (a, b):
        for s in range(3):
            assert tr.step(**batch(s)).ok
    before = snapshot(a)
    nb = batch(10)
    if bad == "nan_input":
        nb["x"][2, 0] = np.nan
    elif bad == "inf_target":
        nb["y"][0, 1] = np.inf
    else:
        nb["z"] = np.float32(0.0)
    r = a.step(**nb)
    assert not r.ok
    if bad == "nan_grad_only":
        assert np.isfinite(r.loss) and "gradient" in r.reason
    else:
        assert "loss" in r.reason
    assert snapshot(a) == before  # bitwise: params, Adam moments and the step count
    # the next good batch trains exactly as if the bad one never happened
    for s in range(3, 6):
        ra, rb = a.step(**batch(s)), b.step(**batch(s))
        assert ra.ok and ra.loss == rb.loss
    assert snapshot(a) == snapshot(b)


def test_skipped_step_does_not_advance_schedule():
    tr = make(tg.optim.SGD(schedules.Step(0.1, 1, 0.5)))
    assert tr.step(**batch(0)).lr == 0.1
    bad = batch(1)
    bad["x"][0, 0] = np.nan
    r = tr.step(**bad)
    assert not r.ok and r.lr == 0.05 and tr.steps == 1
    assert tr.step(**batch(2)).lr == 0.05
    assert tr.lr == 0.025


def test_set_lr_starts_schedule_on_next_step():
    tr = make(tg.optim.SGD(0.1))
    tr.step(**batch(0))
    tr.step(**batch(1))
    assert tr.schedule == schedules.Constant(0.1) and tr.schedule_origin == 0
    tr.set_lr(schedules.Linear(0.2, 0.0, 4))
    assert tr.schedule == schedules.Linear(0.2, 0.0, 4) and tr.schedule_origin == 2
    assert [tr.step(**batch(s)).lr for s in range(5)] == pytest.approx([0.2, 0.15, 0.1, 0.05, 0.0])
    tr.set_lr({"kind": "constant", "lr": 0.3})
    assert tr.step(**batch(9)).lr == 0.3
    tr.set_lr(0.01)
    assert tr.lr == 0.01
    with pytest.raises(ValueError):
        tr.set_lr(-1.0)
    with pytest.raises(ValueError):
        tr.set_lr({"kind": "nope"})


def _expect_input_error(tr, match, **b):
    before = snapshot(tr)
    with pytest.raises(tg.InputError, match=match):
        tr.step(**b)
    assert snapshot(tr) == before


def test_bad_step_inputs_name_the_input_and_change_nothing():
    tr = make()
    tr.step(**batch(0))
    good = batch(1)
    _expect_input_error(tr, "missing.*'y'", **{k: v for k, v in good.items() if k != "y"})
    _expect_input_error(tr, "unexpected.*'w'", **good, w=np.zeros(3))
    _expect_input_error(tr, "input 'x'.*shape", **{**good, "x": np.zeros((6, 2), np.float32)})
    _expect_input_error(tr, "input 'tok'.*i32", **{**good, "tok": np.zeros(6, np.float32)})
    _expect_input_error(tr, "input 'x'.*6 values", **{**good, "x": array.array("f", [0.0] * 5)})
    _expect_input_error(tr, "input 'y'", **{**good, "y": "not an array"})
    _expect_input_error(tr, "input 'z'", **{**good, "z": None})
    # and it still trains
    assert tr.step(**good).ok and tr.steps == 2


def test_inputs_accept_lists_and_array_array():
    tr = make()
    b = batch(0)
    r1 = tr.step(**b)
    tr.reset()
    r2 = tr.step(
        tok=b["tok"].tolist(), x=array.array("f", b["x"].ravel()), y=b["y"].tolist(), z=float(b["z"])
    )
    assert r1.loss == r2.loss


def test_load_params_is_strict_and_atomic():
    tr = make()
    p = tr.params()
    before = snapshot(tr)
    for bad, match in [
        ({k: v for k, v in p.items() if k != "l1.bias"}, "missing.*l1.bias"),
        ({**p, "extra": np.zeros(2)}, "unexpected.*extra"),
        ({**p, "l2.weight": np.zeros((3, 8))}, "l2.weight.*shape"),
        ({**{k: v + 1 for k, v in p.items()}, "l1.weight": "x"}, "l1.weight"),
    ]:
        with pytest.raises(tg.InputError, match=match):
            tr.load_params(bad)
        assert snapshot(tr) == before
        # check_params says the same, naming its caller, and never writes
        with pytest.raises(tg.InputError, match="^load_from_x: .*" + match):
            tr.check_params(bad, "load_from_x")
        assert snapshot(tr) == before
    new = {k: v * 0.5 for k, v in p.items()}
    tr.check_params(new)
    assert snapshot(tr) == before
    tr.load_params(new)
    assert all(np.array_equal(tr.params()[k], new[k]) for k in p)


def test_states_round_trip_and_resume_exactly():
    a = make()
    for s in range(4):
        a.step(**batch(s))
    b = make()
    b.load_params(a.params())
    b.load_states(a.states(), steps=a.steps)
    for s in range(4, 7):
        assert a.step(**batch(s)).loss == b.step(**batch(s)).loss
    assert snapshot(a) == snapshot(b)
    assert set(a.states()) == {f"{n}.{m}" for n in a.params() for m in ("exp_avg", "exp_avg_sq")}


def test_reset_restores_the_seeded_start():
    tr = make(seed=7)
    p0 = snapshot(tr)
    for s in range(3):
        tr.step(**batch(s))
    assert snapshot(tr) != p0
    tr.reset()
    assert snapshot(tr) == p0
    assert snapshot(make(seed=7)) == p0
    assert snapshot(make(seed=8))[0] != p0[0]


def test_optimizer_arguments_rejected_at_compile_time():
    for build in (
        lambda: tg.optim.Adam(-1e-3),
        lambda: tg.optim.Adam(1e-3, betas=(1.0, 0.9)),
        lambda: tg.optim.AdamW(1e-3, betas=(0.9, -0.1)),
        lambda: tg.optim.SGD(-0.1),
        lambda: tg.optim.SGD(0.1, momentum=-1),
        lambda: tg.optim.SGD(0.1, nesterov=True),
        lambda: tg.optim.AdamW(1e-3, eps=-1),
        lambda: tg.optim.Adam(float("nan")),
        lambda: make({"name": "adam", "lr": -1.0}),
        lambda: make({"name": "adamw", "lr": 1e-3, "betas": (0.9, 1.5)}),
        lambda: make({"name": "lamb", "lr": 1e-3}),  # no such optimizer
        lambda: make(clip_grad_norm=-1.0),
        lambda: make(normalize_grads=3),
    ):
        with pytest.raises(ValueError):
            build()


def test_optimizer_as_plain_data():
    spec = {
        "name": "adamw",
        "lr": 5e-3,
        "betas": (0.9, 0.999),
        "eps": 1e-8,
        "schedule": {"kind": "linear", "start": 5e-3, "end": 5e-4, "steps": 10},
        "weight_decay": 0.01,
        "decay_exclude": "biases and norms",
        "clip": 1.0,
    }
    tr = make(spec)
    assert tr.clip_grad_norm == 1.0 and isinstance(tr.optimizer, tg.optim.AdamW)
    assert tr.lr == 5e-3
    tr.step(**batch(0))
    assert tr.lr == pytest.approx(5e-3 - 4.5e-4)


def test_decay_masks():
    m = Net()
    ps = dict(m.named_parameters())
    assert decays(ps["l1.weight"]) and decays(ps["emb.weight"])
    assert not decays(ps["l1.bias"]) and not decays(ps["norm.weight"]) and not decays(ps["norm.bias"])

    class M(nn.Module):
        def __init__(self):
            self.w = self.param((3,), nn.init.ones(), decay=True)
            self.b = self.param((3,), nn.init.normal(1.0), decay=False)

        def forward(self, x):
            return x * self.w + self.b

    mm = M()
    assert decays(mm.w) and not decays(mm.b)
    # gradient zero (loss ignores x's value) -> AdamW only decays
    tr = tg.compile(
        mm,
        lambda m, x: (m(x) * 0.0).sum(),
        inputs={"x": (3,)},
        optimizer=tg.optim.AdamW(0.1, weight_decay=0.5),
        backend="reference",
    )
    p0 = tr.params()
    tr.step(x=np.ones(3, np.float32))
    p1 = tr.params()
    np.testing.assert_allclose(p1["w"], p0["w"] * (1 - 0.1 * 0.5), rtol=1e-6)
    assert np.array_equal(p1["b"], p0["b"])


def test_normalize_grads_by_name_filter():
    x = np.linspace(-1, 1, 6, dtype=np.float32).reshape(6, 1)
    b = {**batch(3), "x": x}
    tr = make(tg.optim.SGD(1.0), normalize_grads="l1.*", precision="float64")
    p0 = tr.params()
    m = Net()
    m.load_state_dict({k: v.astype(np.float32) for k, v in p0.items()})
    _, grads = tg.value_and_grad(loss_fn, m, precision="float64", **b)
    tr.step(**b)
    p1 = tr.params()
    for k in p0:
        g = grads[k]
        want = g / (np.sqrt((g * g).sum()) + 1e-8) if k.startswith("l1.") else g
        np.testing.assert_allclose(p0[k] - p1[k], want, rtol=1e-5, atol=1e-6)


def test_graph_conventions():
    tr = make(clip_grad_norm=1.0)
    g = tr.graph
    assert set(g.outputs) == {"loss", "ok", "grad_norm"}
    assert g.outputs["ok"].dtype == "bool" and g.outputs["ok"].shape == ()
    assert set(g.grads) == set(g.params)
    assert set(g.updates) == set(g.params) | set(g.states)
    assert all(u.kind == "where" for u in g.updates.values())
    sumsq = [t for t in g.tensors if t.kind == "global_sumsq"]
    assert len(sumsq) == 1 and {i.id for i in sumsq[0].inputs} == {t.id for t in g.grads.values()}
    opt = ("lr", "step_size", "bc2_sqrt")
    assert set(g.scalars) == {
        *opt,
        *(if_applied(k, j) for k in opt for j in range(1, DEPTH + 1)),
        APPLIED_READ,
    }
    assert all(g.scalars[n].dtype == ("i32" if n == APPLIED_READ else "f32") for n in g.scalars)


def test_attach_shares_params():
    tr = make()
    inf = tr.attach(lambda m, tok, x: m(tok, x), inputs={"tok": ((6,), "i32"), "x": (6, 1)})
    b = batch(0)
    out0, caps = inf.run(tok=b["tok"], x=b["x"])
    assert out0.shape == (6, 2) and caps == {}
    tr.step(**b)
    out1 = inf.run(tok=b["tok"], x=b["x"]).output
    assert not np.array_equal(out0, out1)
    with pytest.raises(tg.InputError, match="missing.*'x'"):
        inf.run(tok=b["tok"])


def test_memory_report_and_program():
    tr = make(clip_grad_norm=1.0)
    rep = tr.memory_report()
    assert rep["total_bytes"] <= rep["unpooled_total_bytes"]
    assert rep["intermediate_buffers"] < rep["intermediate_values"]
    kinds = rep["bytes_by_kind"]
    assert kinds["param"] == sum(v.nbytes for v in tr.params().values())
    assert kinds["state"] == 2 * kinds["param"]
    prog = tr.program
    arena = prog.meta["grad_arena"]["buffer"]
    assert prog.buffers[arena].kind == "grad" and prog.buffers[arena].size >= kinds["param"]
    opt = ("lr", "step_size", "bc2_sqrt")
    want = {k: "f32" for k in opt} | {if_applied(k, j): "f32" for k in opt for j in range(1, DEPTH + 1)}
    assert {s.name: s.type for s in prog.scalars} == want | {APPLIED_READ: "u32"}
    assert set(prog.outputs) == {"loss", "ok", "grad_norm"}


def test_default_backend_is_native_exactly_when_an_adapter_is_found(monkeypatch):
    assert tg.compile.__module__ == "tgweb.compile"
    from tgweb.backends import native
    from tgweb.compile import default_backend

    assert sys.platform != "emscripten"
    assert default_backend() == ("native" if native.available() else "reference")
    # "browser" under Pyodide, and only there
    monkeypatch.setattr(sys, "platform", "emscripten")
    assert default_backend() == "browser"


@pytest.mark.parametrize("backend", ["reference", pytest.param("native", marks=pytest.mark.native)])
def test_attached_inference_with_random_ops_draws_anew_each_run(backend):
    """Sampling in an inference graph (ops.rand): each run() draws new numbers from the
    trainer's seed; the backends draw the same ones."""
    tr = make(backend=backend)
    noisy = tr.attach(lambda m, x: x + tg.rand((2, 3)), {"x": (2, 3)})
    zeros = np.zeros((2, 3), np.float32)
    a, b = np.asarray(noisy.run(x=zeros).output), np.asarray(noisy.run(x=zeros).output)
    assert noisy.runs == 2
    assert not np.array_equal(a, b) and ((0 <= a) & (a < 1)).all()
    ref = make(backend="reference").attach(lambda m, x: x + tg.rand((2, 3)), {"x": (2, 3)})
    np.testing.assert_allclose(np.asarray(ref.run(x=zeros).output), a, rtol=1e-6)


def test_a_float64_run_takes_a_float64_batch_as_given():
    """The reference engine in float64 reads the batch the caller passed (StepData.given),
    not the f32 copy the GPU runtimes send: 0.1 stays 0.1, for exact trajectories."""

    class Lin(nn.Module):
        def __init__(self):
            self.l = nn.Linear(1, 1)

        def forward(self, x):
            return self.l(x)

    tr = tg.compile(
        Lin(),
        lambda m, x: (m(x) ** 2).mean(),
        inputs={"x": (3, 1)},
        optimizer=tg.optim.SGD(0.0),
        backend="reference",
        precision="float64",
    )
    x = np.array([[0.1], [0.2], [0.3]])
    p = tr.params()
    want = np.mean((x * np.float64(p["l.weight"][0, 0]) + np.float64(p["l.bias"][0])) ** 2)
    got = float(tr.step(x=x).loss)
    assert got == pytest.approx(want, rel=1e-14, abs=0)
    assert tr.attach(lambda m, x: (m(x) ** 2).mean(), inputs={"x": (3, 1)}).run(x=x).output == pytest.approx(
        want, rel=1e-14, abs=0
    )


def test_compile_pauses_the_garbage_collector_and_restores_it():
    """The collector is off while compile traces (the loss function sees it so) and as it
    was after: on, off, or on again after a compile that raised."""
    import gc

    seen = []

    def watched(m, tok, x, y, z):
        seen.append(gc.isenabled())
        return loss_fn(m, tok, x, y, z)

    assert gc.isenabled()
    try:
        tr = tg.compile(Net(), watched, inputs=INPUTS, optimizer=tg.optim.Adam(lr=1e-2), backend="reference")
        assert seen == [False] and gc.isenabled()
        # every node, the gradients' and the update's too, names a line of this file (the
        # caller's), not the pause's wrapper
        assert {t.site.rsplit(":", 1)[0] for t in tr.graph.tensors} == {__file__}
        gc.disable()
        tg.compile(Net(), watched, inputs=INPUTS, optimizer=tg.optim.Adam(lr=1e-2), backend="reference")
        assert seen == [False, False] and not gc.isenabled()
        gc.enable()
        opt = tg.optim.Adam(lr=1e-2)
        with pytest.raises(tg.TraceError) as e:  # a (6, 2) feature where Net takes (6, 1)
            tg.compile(Net(), lambda m, tok, x, y, z: m(tok, y).mean(), inputs=INPUTS, optimizer=opt)
        assert gc.isenabled() and e.value.site.startswith(__file__ + ":")
    finally:
        gc.enable()
