"""Safe steps (issue 14, item 2): the in-graph check covers the update itself; the
global norm is computed without overflow, so huge finite gradients are clipped,
not skipped; non-finite, negative or over-f32 learning rates are refused with
InputError and change nothing; StepResult.reason names the cause."""

from __future__ import annotations

import math

import numpy as np
import pytest

import tgweb as tg
from tgweb import nn
from tgweb.optim import clip, schedules

BACKENDS = ["reference", pytest.param("native", marks=pytest.mark.native)]


class P(nn.Module):
    def __init__(self):
        self.w = self.param((3, 4), nn.init.constant(0.5))


def lin_loss(m, x):
    return (m.w * x).sum()  # the gradient is x itself


def make(backend, opt, **kw):
    return tg.compile(P(), lin_loss, {"x": (3, 4)}, opt, backend=backend, **kw)


def snapshot(t):
    return (
        {k: np.asarray(v).tobytes() for k, v in t.params().items()},
        {k: np.asarray(v).tobytes() for k, v in t.states().items()},
        t.steps,
        t.calls,
        repr(t.lr),
    )


@pytest.mark.parametrize("backend", BACKENDS)
def test_global_norm_of_huge_finite_values_is_finite(backend):
    """The kernel (lavapipe) and the reference agree on norms that overflow a plain f32
    sum of squares, on ordinary ones, and on inf/NaN."""
    tr = make(backend, tg.optim.SGD(0.1))
    inf = tr.attach(
        lambda m, x: {"norm": clip.global_sumsq([x, x * 2.0], root=True), "sumsq": clip.global_sumsq([x])},
        {"x": (3, 4)},
    )
    rng = np.random.default_rng(0)
    # (squares below f32's range underflow, as in any f32 sum: scales from 1e-15 up)
    for scale in (1e-15, 1e-3, 1.0, 1e10, 1e19, 1e20, 1e30, 3e37):
        x = (rng.normal(size=(3, 4)) * scale).astype(np.float32)
        out = inf.run(x=x).output
        want = math.sqrt(5 * float((x.astype(np.float64) ** 2).sum()))
        assert np.isfinite(out["norm"]), scale
        np.testing.assert_allclose(float(out["norm"]), want, rtol=1e-5)
        s = float((x.astype(np.float64) ** 2).sum())
        if 1e-30 < s < 3e38:
            np.testing.assert_allclose(float(out["sumsq"]), s, rtol=1e-5)
        else:
            assert out["sumsq"] == np.inf
    # mixed magnitudes: the small ones still count beside the huge ones
    x = np.full((3, 4), 1e20, np.float32)
    x[0, 0] = 3.0
    np.testing.assert_allclose(float(inf.run(x=x).output["norm"]), math.sqrt(5 * 11) * 1e20, rtol=1e-5)
    for bad in (np.inf, -np.inf, np.nan):
        x = np.ones((3, 4), np.float32)
        x[1, 2] = bad
        assert not np.isfinite(inf.run(x=x).output["norm"])


@pytest.mark.parametrize("backend", BACKENDS)
def test_huge_finite_gradients_are_clipped_not_skipped(backend):
    tr = make(backend, tg.optim.SGD(0.1), clip_grad_norm=1.0)
    x = np.full((3, 4), 1e20, np.float32)
    r = tr.step(x=x)
    assert r.ok and r.reason is None and tr.steps == 1
    np.testing.assert_allclose(r.grad_norm, math.sqrt(12) * 1e20, rtol=1e-5)
    w = np.asarray(tr.params()["w"])
    np.testing.assert_allclose(w, 0.5 - 0.1 / math.sqrt(12), rtol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_update_that_overflows_is_skipped_and_named(backend):
    # Adam without clipping: g*g*(1-beta2) = 9e71 overflows the second moment however
    # the kernel associates it (the gradient and its norm, 1.04e38, are finite)
    tr = make(backend, tg.optim.Adam(1e-3))
    assert tr.step(x=np.ones((3, 4), np.float32)).ok
    before = snapshot(tr)
    r = tr.step(x=np.full((3, 4), 3e37, np.float32))
    assert not r.ok and r.reason.startswith("non-finite update"), r.reason
    assert "global gradient norm 1.03923e+38" in r.reason
    assert snapshot(tr)[:3] == before[:3]  # params, states, step count
    assert tr.step(x=np.ones((3, 4), np.float32)).ok
    # SGD with a finite lr whose product with the gradient overflows
    sgd = make(backend, tg.optim.SGD(1e38))
    b = snapshot(sgd)
    r = sgd.step(x=np.full((3, 4), 100.0, np.float32))
    assert not r.ok and r.reason.startswith("non-finite update") and "lr 1e+38" in r.reason
    assert snapshot(sgd)[:3] == b[:3]


@pytest.mark.parametrize("backend", BACKENDS)
def test_reasons_name_the_loss_and_the_gradient(backend):
    tr = make(backend, tg.optim.SGD(0.1))
    x = np.ones((3, 4), np.float32)
    x[0, 0] = np.inf
    r = tr.step(x=x)
    assert not r.ok and r.reason.startswith("non-finite loss (inf)")

    def loss2(m, x):  # finite loss, infinite gradient at x == 0
        return (m.w * x).sum() * 0.0 + tg.sqrt(tg.abs(x * m.w)).sum() * 1e-3

    t2 = tg.compile(P(), loss2, {"x": (3, 4)}, tg.optim.SGD(0.1), backend=backend)
    r = t2.step(x=np.zeros((3, 4), np.float32))
    assert not r.ok and np.isfinite(r.loss) and r.reason.startswith("non-finite gradient"), r.reason


class NaNAfter(schedules.Schedule):
    kind = "nan_after"

    def __init__(self, n):
        self.n = n

    def __call__(self, t):
        return 0.1 if t < self.n else float("nan")


BAD_LR = [
    (1e39, r"at most 3.402823e\+38\), got 1e\+39"),
    (float("inf"), "got inf"),
    (float("nan"), "got nan"),
    (-0.5, "got -0.5"),
    (True, "got True"),
    ("0.1", r"got '0.1'"),
    (None, "got None"),
    ({"kind": "constant", "lr": float("nan")}, "constant: lr .* got nan"),
    ({"kind": "cosine", "start": 1e39, "steps": 10}, "cosine: start"),
    ({"kind": "linear", "start": 0.1, "end": -1.0, "steps": 10}, "linear: end"),
    ({"kind": "warmup", "steps": 5, "then": float("inf")}, "constant: lr"),
    ({"kind": "step", "lr": 0.1, "step_size": 0}, "step: step_size"),
    ({"kind": "multistep", "lr": 0.1, "milestones": [5, 2]}, "increasing"),
    ({"kind": "nope"}, "unknown schedule kind"),
    ({"kind": "constant", "lr": 0.1, "x": 1}, "schedule 'constant'"),
    (NaNAfter(0), r"gives lr nan at t=0"),
]


@pytest.mark.parametrize("lr, match", BAD_LR, ids=[repr(v)[:30] for v, _ in BAD_LR])
def test_set_lr_refuses_bad_rates_and_changes_nothing(lr, match):
    tr = make("reference", tg.optim.Adam(schedules.Cosine(0.01, 10)))
    tr.step(x=np.ones((3, 4), np.float32))
    before = snapshot(tr)
    with pytest.raises(tg.InputError, match=match):
        tr.set_lr(lr)
    assert snapshot(tr) == before and tr.schedule == schedules.Cosine(0.01, 10) and tr.schedule_origin == 0


@pytest.mark.parametrize(
    "opt, match",
    [
        (lambda: tg.optim.SGD(1e39), "lr must be a finite number"),
        (lambda: tg.optim.AdamW(float("nan")), "lr must be a finite number"),
        (lambda: tg.optim.Adam(schedules.Step(1e39, 2)), "step: lr"),
        (lambda: tg.optim.SGD(0.1, momentum=float("inf")), "momentum"),
    ],
)
def test_optimizers_refuse_bad_rates(opt, match):
    with pytest.raises(tg.InputError, match=match):
        opt()


def test_a_schedule_that_goes_bad_later_is_refused_at_that_step():
    x = np.ones((3, 4), np.float32)
    tr = make("reference", tg.optim.SGD(NaNAfter(2)))
    assert tr.step(x=x).ok and tr.step(x=x).ok
    before = snapshot(tr)
    with pytest.raises(
        tg.InputError, match=r"schedule NaNAfter\(n=2\) gave lr nan at t=2; .*nothing changed"
    ):
        tr.step(x=x)
    assert snapshot(tr) == before
    # a step schedule growing past f32 (gamma > 1): 1e30, 1e35, then 1e40
    g = make("reference", tg.optim.SGD(schedules.Step(1e30, 1, gamma=1e5)))
    assert g.step(x=x * 0).ok and g.step(x=x * 0).ok
    with pytest.raises(tg.InputError, match=r"gave lr 1(\.0+\d*)?e\+40 at t=2"):
        g.step(x=x * 0)
    # Adam's step size lr / (1 - beta1) must fit f32 too
    a = make("reference", tg.optim.Adam(1e38))
    b = snapshot(a)
    with pytest.raises(tg.InputError, match=r"step_size = 1.0*2?e\+39 \(from lr 1e\+38\) does not fit f32"):
        a.step(x=x)
    assert snapshot(a) == b
    # and the trainer recovers after set_lr
    tr.set_lr(0.05)
    assert tr.step(x=x).ok and tr.steps == 3
