"""Pipelined steps (issue 13, item 3): trainer.step sends a step before the one before it
is read back, and the GPU picks the optimizer scalars (t, lr) for that step's outcome.
Skips in the middle of a pipelined run must give bit for bit the parameters, states,
step counts and learning rates of a run that reads every step back at once; reading
waits lazily; worker.metric(name, StepResult) sends each loss once it is in, in order."""

from __future__ import annotations

import math

import numpy as np
import pytest

import tgweb as tg
from tgweb import nn, worker
from tgweb.optim import schedules
from tgweb.pipeline import DEPTH

BACKENDS = ["reference", pytest.param("native", marks=pytest.mark.native)]


class M(nn.Module):
    def __init__(self):
        self.l1 = nn.Linear(4, 8)
        self.l2 = nn.Linear(8, 1)

    def forward(self, x):
        return self.l2(self.l1(x).tanh())


def loss_fn(m, x, y):
    return ((m(x) - y) ** 2).mean()


BAD = (3, 4, 9, 17, 18, 19)  # skipped steps: two and three back to back, 8 apart (DEPTH)


def batches(n, bad=BAD):
    """n batches; those at `bad` hold a NaN (skipped steps)."""
    rng = np.random.default_rng(1)
    out = []
    for i in range(n):
        x = rng.normal(size=(16, 4)).astype(np.float32)
        y = np.sin(x.sum(1, keepdims=True)).astype(np.float32)
        if i in bad:
            x[2, 1] = np.nan
        out.append({"x": x, "y": y})
    return out


def make(backend):
    # a warm-up schedule and Adam: lr, step_size and bc2_sqrt all depend on the applied steps
    opt = tg.optim.Adam(schedules.Warmup(5, schedules.Cosine(1e-2, 20)))
    return tg.compile(M(), loss_fn, {"x": (16, 4), "y": (16, 1)}, opt, backend=backend, seed=3)


def run(backend, read_at_once: bool):
    tr = make(backend)
    results = []
    for b in batches(24):
        r = tr.step(**b)
        if read_at_once:
            assert r.loss is not None  # waits for this step before the next is sent
        results.append(r)
    got = [(r.loss, r.ok, r.step, r.lr, r.grad_norm) for r in results]
    return tr, got


@pytest.mark.parametrize("backend", BACKENDS)
def test_skips_in_a_pipelined_run_match_reading_every_step_at_once(backend):
    a, got_a = run(backend, read_at_once=False)
    b, got_b = run(backend, read_at_once=True)
    assert [g[1] for g in got_a] == [i not in BAD for i in range(24)]
    assert [g[2] for g in got_a] == [sum(j not in BAD for j in range(i + 1)) for i in range(24)]
    for ga, gb in zip(got_a, got_b):
        assert ga[1:4] == gb[1:4]
        assert (math.isnan(ga[0]) and math.isnan(gb[0])) or ga[0] == gb[0]
    assert a.steps == b.steps == 18 and a.calls == b.calls == 24
    for kind in ("params", "states"):
        pa, pb = getattr(a, kind)(), getattr(b, kind)()
        for k in pa:
            assert np.asarray(pa[k]).tobytes() == np.asarray(pb[k]).tobytes(), (kind, k)


@pytest.mark.parametrize("backend", BACKENDS)
def test_results_wait_lazily_and_methods_settle_the_step_in_flight(backend):
    tr = make(backend)
    bs = batches(DEPTH + 3, bad=())
    rs = [tr.step(**b) for b in bs[: DEPTH + 1]]  # the last one sent brings the first in
    assert rs[0].ready and not any(r.ready for r in rs[1:])
    assert tr.steps == DEPTH + 1 and all(r.ready for r in rs)  # steps waits for every step in flight
    more = [tr.step(**b) for b in bs[DEPTH + 1 :]]
    assert not any(r.ready for r in more)
    params = tr.params()  # so do params(), states(), checkpoint(), ...
    assert all(r.ready for r in more) and more[-1].step == DEPTH + 3
    again = tg.compile(
        M(), loss_fn, {"x": (16, 4), "y": (16, 1)}, make(backend).optimizer, backend=backend, seed=3
    )
    for b in bs:
        assert np.isfinite(again.step(**b).loss)  # read at once: nothing in flight at the next
    for k, v in again.params().items():
        assert np.asarray(v).tobytes() == np.asarray(params[k]).tobytes(), k


def test_metric_of_a_step_result_is_sent_in_order_once_read_back():
    tr = make("reference")
    seen = []
    worker.set_handler(lambda event, data: seen.append((data["step"], data["value"])))
    try:
        rs = []
        for b in batches(DEPTH + 4, bad=(2,)):
            r = tr.step(**b)
            rs.append(r)
            worker.metric("loss", r)
            # at most DEPTH steps are still unread
            assert len(seen) >= len(rs) - DEPTH
        worker.flush()
    finally:
        worker.set_handler(None)
    assert [s for s, _ in seen] == [1, 2, *range(2, DEPTH + 4)]
    assert seen[2][1] is None  # the skipped step's NaN loss goes out as null
    assert [v for _, v in seen if v is not None] == [r.loss for r in rs if r.ok]


def test_the_select_kernel_indexes_each_scalars_consecutive_words_and_refuses_others():
    from tgweb.codegen.select import select_kernel
    from tgweb.pipeline import APPLIED_READ, if_applied

    names = ["lr", "step_size"] + [if_applied(n, j) for n in ("lr", "step_size") for j in range(1, DEPTH + 1)]
    word = {n: i for i, n in enumerate(names + [APPLIED_READ])}
    wgsl = select_kernel(word, 0, 1, 0).wgsl
    assert "s[0u] = s[1u + j];" in wgsl and f"s[1u] = s[{1 + DEPTH}u + j];" in wgsl
    assert "switch" not in wgsl
    word[if_applied("lr", 2)], word[if_applied("lr", 3)] = (
        word[if_applied("lr", 3)],
        word[if_applied("lr", 2)],
    )
    with pytest.raises(AssertionError, match="lr@1"):
        select_kernel(word, 0, 1, 0)
