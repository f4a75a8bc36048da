"""The canonical samples train on the reference backend to their success criteria."""

import time

import pytest

import tgweb as tg
from tgweb import samples
from tgweb.samples import addition, sin


def test_sin_trains_to_success():
    tr = samples.compile(sin, backend="reference")
    assert isinstance(tr.optimizer, tg.optim.Adam) and tr.lr == sin.OPTIMIZER["lr"]
    fwd = tr.attach(sin.forward, inputs=sin.EVAL_INPUTS)
    best = float("inf")
    for s in range(sin.STEPS):
        r = tr.step(**sin.batch(s))
        assert r.ok
        if (s + 1) % 100 == 0:
            best = sin.metric(lambda b: fwd.run(**b).output)
            if best < sin.SUCCESS["below"]:
                break
    assert best < sin.SUCCESS["below"], best


def test_addition_plan_pools_intermediates():
    tr = samples.compile(addition, backend="reference")
    assert tr.clip_grad_norm == 1.0 and isinstance(tr.optimizer, tg.optim.AdamW)
    rep = tr.memory_report()  # the GPU backends' plan: fused kernels, pooled intermediates
    assert rep["total_bytes"] * 2 < rep["unpooled_total_bytes"]
    assert rep["bytes_by_kind"]["state"] == 2 * rep["bytes_by_kind"]["param"]


def _train_addition(seed=0):
    tr = samples.compile(addition, backend="reference", seed=seed)
    fwd = tr.attach(addition.forward, inputs=addition.EVAL_INPUTS)
    t0 = time.time()
    acc = 0.0
    for s in range(addition.STEPS):
        assert tr.step(**addition.batch(s)).ok
        if (s + 1) % 500 == 0:
            acc = addition.metric(lambda b: fwd.run(**b).output)
            print(f"step {s + 1}: held-out exact match {acc:.3f} ({time.time() - t0:.0f} s)")
            if acc >= addition.SUCCESS["at_least"]:
                break
    return acc


@pytest.mark.slow
def test_addition_reaches_95_percent():
    """python -m pytest -m slow tests/test_trainer_samples.py -k 95 (about 4 minutes)."""
    acc = _train_addition()
    assert acc >= addition.SUCCESS["at_least"], acc
