"""Training on the native backend (wgpu-py; lavapipe in CI) against the reference."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

from tgweb import samples
from tgweb.samples import get

pytestmark = pytest.mark.native  # tests/conftest.py: skipped without an adapter, fails in CI
tgc = importlib.import_module("tgweb.compile")


def _train(name: str, backend: str, steps: int):
    s = get(name)
    prec = "float64" if backend == "reference64" else "float32"
    tr = tgc.compile(
        s.Model(),
        s.loss_fn,
        s.INPUTS,
        s.OPTIMIZER,
        seed=0,
        precision=prec,
        backend="reference" if backend == "reference64" else backend,
    )
    losses = [float(tr.step(**s.batch(i)).loss) for i in range(steps)]
    return tr, losses, {k: np.asarray(v, np.float64) for k, v in tr.params().items()}


def test_sin_20_steps_native_equals_reference():
    _, l_ref, p_ref = _train("sin", "reference", 20)
    tr, l_nat, p_nat = _train("sin", "native", 20)
    np.testing.assert_allclose(l_nat, l_ref, rtol=1e-4)
    for k in p_ref:
        np.testing.assert_allclose(p_nat[k], p_ref[k], rtol=1e-4, atol=1e-6, err_msg=k)
    meta = tr.program.meta
    assert meta["copied_updates"] == 0 and meta["inplace_updates"] == 2 * len(p_ref) + len(p_ref)


def test_addition_20_steps_native_equals_reference():
    _, l_ref, p_ref = _train("addition", "reference", 20)
    _, l_nat, p_nat = _train("addition", "native", 20)
    _, l_64, p_64 = _train("addition", "reference64", 20)
    # addition's trajectory is sensitive to float32 rounding itself: the reference in
    # float32 and in float64 already differ by 1.6e-4 in the loss at step 10, and in
    # about 38 % of the parameters at 1e-4 after 20 steps (Adam divides each gradient
    # by its own magnitude, so entries whose gradient is rounding noise move by up to
    # lr per step). So: the losses agree to 1e-4 for the first steps, both float32 runs stay
    # within 5e-4 of the float64 trajectory over 20 (they may stray from it on opposite sides:
    # with numpy 2.4 and Mesa 22.3.6, reference 1.9e-4 and native 4.0e-4 at steps 9 and 18),
    # and native must be about as close to the float64 trajectory as float32 NumPy is.
    np.testing.assert_allclose(l_nat[:5], l_ref[:5], rtol=1e-4)
    np.testing.assert_allclose(l_ref, l_64, rtol=5e-4)
    np.testing.assert_allclose(l_nat, l_64, rtol=5e-4)
    d_nat = np.sqrt(sum(((p_nat[k] - p_64[k]) ** 2).sum() for k in p_64))
    d_ref = np.sqrt(sum(((p_ref[k] - p_64[k]) ** 2).sum() for k in p_64))
    assert d_nat <= 2.0 * d_ref + 1e-6, (d_nat, d_ref)


def test_sin_trains_natively_to_success():
    s = get("sin")
    tr = samples.compile(s, backend="native", seed=0)
    inf = tr.attach(s.forward, s.EVAL_INPUTS)

    def predict(batch):
        return inf.run(**batch).output

    mse = None
    for i in range(s.STEPS):
        tr.step(**s.batch(i))
        if (i + 1) % 100 == 0:
            mse = s.metric(predict)
            if mse < 1e-3:
                break
    assert mse is not None and mse < 1e-3, f"mse {mse} after {i + 1} steps"


def test_non_finite_step_changes_nothing_natively():
    import array

    s = get("sin")
    tr = samples.compile(s, backend="native", seed=0)
    tr.step(**s.batch(0))
    before = {k: np.asarray(v).copy() for k, v in tr.params().items()}
    states = {k: np.asarray(v).copy() for k, v in tr.states().items()}
    bad = s.batch(1)
    bad["y"] = array.array("f", [float("nan")] + list(bad["y"])[1:])
    r = tr.step(**bad)
    assert not r.ok
    for k, v in tr.params().items():
        assert np.array_equal(np.asarray(v), before[k]), k
    for k, v in tr.states().items():
        assert np.array_equal(np.asarray(v), states[k]), k
    r = tr.step(**s.batch(2))
    assert r.ok and any(not np.array_equal(np.asarray(v), before[k]) for k, v in tr.params().items())
