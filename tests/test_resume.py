"""Exact resume (issue 14, item 3): a checkpoint (Trainer.checkpoint, tgweb.io.checkpoint
bytes) holds parameters, optimizer state, the step count, the random stream's position
and the schedule in force with its origin; restoring it in a fresh trainer gives the
same next steps, bitwise on the reference backend and within tolerance natively.
Loads are atomic; NaN and infinite tensors are refused by name."""

from __future__ import annotations

import numpy as np
import pytest

import tgweb as tg
from tgweb import nn
from tgweb.io import checkpoint
from tgweb.optim import schedules as S


class Net(nn.Module):
    def __init__(self):
        self.l1 = nn.Linear(3, 16)
        self.l2 = nn.Linear(16, 2)

    def forward(self, x, drop):
        h = tg.tanh(self.l1(x))
        return self.l2(tg.dropout(h, 0.3) if drop else h)


def loss_drop(m, x, y):
    return ((m(x, True) - y) ** 2).mean()


def loss_plain(m, x, y):
    return ((m(x, False) - y) ** 2).mean()


INPUTS = {"x": (8, 3), "y": (8, 2)}


def batch(i):
    r = np.random.default_rng(i)
    x = r.normal(size=(8, 3)).astype(np.float32)
    return {"x": x, "y": np.stack([np.sin(x.sum(1)), np.cos(x[:, 0])], 1).astype(np.float32)}


OPTS = {
    "sgd": lambda lr: tg.optim.SGD(lr, momentum=0.9, nesterov=True, weight_decay=1e-3),
    "adam": lambda lr: tg.optim.Adam(lr, weight_decay=1e-3),
    "adamw": lambda lr: tg.optim.AdamW(lr),
}
SCHEDS = {
    "constant": 0.01,
    "warmup_cosine": S.Warmup(5, S.Cosine(0.02, 40, 0.001)),
    "step": S.Step(0.02, 7, 0.5),
    "multistep": S.MultiStep(0.02, [4, 9, 20], 0.3),
    "linear": S.Linear(0.02, 0.0, 30),
}


def make(opt, sched, loss=loss_drop, backend="reference", clip=1.0, seed=3):
    return tg.compile(Net(), loss, INPUTS, OPTS[opt](sched), backend=backend, seed=seed, clip_grad_norm=clip)


def state(tr):
    return (
        {k: np.asarray(v).tobytes() for k, v in tr.params().items()},
        {k: np.asarray(v).tobytes() for k, v in tr.states().items()},
        tr.steps,
        tr.calls,
        tr.lr,
    )


def run(tr, start, n):
    return [(r.loss, r.lr, r.ok) for r in (tr.step(**batch(start + i)) for i in range(n))]


CASES = [(o, s) for o in OPTS for s in SCHEDS]


@pytest.mark.parametrize("opt, sched", CASES, ids=[f"{o}-{s}" for o, s in CASES])
def test_resume_through_bytes_is_bitwise(opt, sched):
    a = make(opt, SCHEDS[sched])
    run(a, 0, 12)
    blob = checkpoint.save(a, metadata={"note": "x"})
    b = make(opt, 0.5, seed=99)  # another lr and another seed: the checkpoint decides
    checkpoint.load(b, blob)
    assert state(b) == state(a)
    assert run(a, 12, 25) == run(b, 12, 25)
    assert state(a) == state(b)


def test_set_lr_mid_run_and_older_checkpoints():
    a = make("adamw", SCHEDS["warmup_cosine"])
    run(a, 0, 6)
    old = checkpoint.save(a)  # before set_lr
    run(a, 6, 4)
    a.set_lr(S.Linear(0.01, 0.0, 20))
    run(a, 10, 5)
    mid = checkpoint.save(a)  # the new schedule, started at step 10
    ref_next = run(a, 15, 10)
    b = make("adamw", 0.3)
    checkpoint.load(b, mid)
    assert b.lr == pytest.approx(0.01 * (1 - 5 / 20)) and b.schedule_origin == 10
    assert run(b, 15, 10) == ref_next
    # the older checkpoint, restored into a trainer that has since had set_lr: its own
    # schedule and origin come back (no negative t, no wrong lr)
    a.set_lr(100.0)
    checkpoint.load(a, old)
    c = make("adamw", SCHEDS["warmup_cosine"])
    run(c, 0, 6)
    assert state(a) == state(c)
    assert run(a, 6, 10) == run(c, 6, 10)
    assert all(0 <= lr <= 0.02 for _, lr, _ in run(a, 16, 3))


def test_older_files_without_the_new_metadata():
    """A page file of before (params, optimizer.* states, steps): the trainer's own
    schedule from step 0 of the file's count; the stream position defaults to steps."""
    a = make("adam", SCHEDS["step"], loss=loss_plain)
    run(a, 0, 5)
    tensors, meta = a.checkpoint()
    old_meta = {"format": "tgweb", "sample": "x", "steps": meta["steps"]}
    b = make("adam", SCHEDS["step"], loss=loss_plain)
    b.set_lr(0.5)
    run(b, 0, 2)
    b.restore(tensors, old_meta)
    assert b.steps == 5 and b.calls == 5 and b.schedule_origin == 0 and b.lr == a.lr
    assert run(a, 5, 8) == run(b, 5, 8)
    # parameters only: the optimizer restarts
    c = make("adam", SCHEDS["step"], loss=loss_plain)
    c.restore({k: v for k, v in tensors.items() if not k.startswith("optimizer.")}, {})
    assert c.steps == 0 and all(not np.asarray(v).any() for v in c.states().values())


def test_skipped_steps_advance_the_stream_not_the_count():
    a = make("sgd", SCHEDS["constant"])
    run(a, 0, 3)
    bad = batch(3)
    bad["x"][0, 0] = np.nan
    assert not a.step(**bad).ok
    assert (a.steps, a.calls) == (3, 4)
    b = make("sgd", SCHEDS["constant"])
    checkpoint.load(b, checkpoint.save(a))
    assert run(a, 4, 10) == run(b, 4, 10)


@pytest.mark.native
@pytest.mark.parametrize("opt", ["sgd", "adamw"])
def test_native_resume_within_tolerance_and_across_backends(opt):
    a = make(opt, SCHEDS["warmup_cosine"], backend="native")
    run(a, 0, 8)
    blob = checkpoint.save(a)
    b = make(opt, 0.3, backend="native", seed=5)
    checkpoint.load(b, blob)
    ra, rb = run(a, 8, 20), run(b, 8, 20)
    np.testing.assert_allclose([x[0] for x in ra], [x[0] for x in rb], rtol=1e-5)
    assert [x[1] for x in ra] == [x[1] for x in rb]
    # native -> reference -> native: the same state crosses backends
    r = make(opt, 0.3)
    checkpoint.load(r, checkpoint.save(b))
    back = make(opt, 0.3, backend="native")
    checkpoint.load(back, checkpoint.save(r))
    for k, v in b.params().items():
        np.testing.assert_array_equal(back.params()[k], v)
    np.testing.assert_allclose(
        [x[0] for x in run(r, 28, 5)], [x[0] for x in run(back, 28, 5)], rtol=1e-4, atol=1e-6
    )


# ------------------------------------------------------------------ refusals


def _bad_cases(tr):
    t, m = tr.checkpoint()
    nan_p = dict(t)
    nan_p["l1.weight"] = np.array(t["l1.weight"]).copy()
    nan_p["l1.weight"][1, 2] = np.nan
    inf_s = dict(t)
    inf_s["optimizer.l2.bias.exp_avg_sq"] = np.array([1.0, np.inf], np.float32)
    return [
        (nan_p, m, r"restore: parameter 'l1.weight' holds nan at flat index 5"),
        (inf_s, m, r"restore: state 'l2.bias.exp_avg_sq' holds inf at flat index 1"),
        ({k: v for k, v in t.items() if k != "l2.bias"}, m, r"missing parameters \['l2.bias'\]"),
        ({**t, "zzz": np.zeros(1)}, m, r"unexpected \['zzz'\]"),
        (
            {k: v for k, v in t.items() if k != "optimizer.l1.bias.exp_avg"},
            m,
            r"missing states \['l1.bias.exp_avg'\]",
        ),
        ({**t, "l2.weight": np.zeros((2, 3), np.float32)}, m, r"parameter 'l2.weight': expected shape"),
        (t, {**m, "steps": "-1"}, r"'steps' must be an int >= 0, got '-1'"),
        (t, {**m, "steps": "x"}, r"'steps' must be an int >= 0, got 'x'"),
        (t, {**m, "steps": "²"}, r"'steps' must be an int"),
        (t, {**m, "calls": "1e3"}, r"'calls' must be an int"),
        (t, {**m, "schedule_origin": "999"}, r"schedule_origin 999 is after the checkpoint's step 4"),
        (t, {**m, "schedule": "{"}, r"'schedule' is not a schedule"),
        (t, {**m, "schedule": '{"kind": "constant", "lr": -1}'}, r"'schedule' is not a schedule.*got -1"),
        (t, {**m, "schedule": "[" * 100000}, r"'schedule' is not a schedule"),
        (t, {**m, "steps": 4}, r"metadata must map strings to strings"),
        ([1, 2], m, r"expected a dict"),
    ]


def test_bad_checkpoints_are_refused_by_name_and_change_nothing():
    tr = make("adam", SCHEDS["step"])
    run(tr, 0, 4)
    cases = _bad_cases(tr)
    victim = make("adam", 0.1, seed=9)
    run(victim, 0, 2)
    victim.set_lr(0.05)
    before = state(victim) + (victim.schedule, victim.schedule_origin)
    for tensors, meta, match in cases:
        with pytest.raises(tg.InputError, match=match):
            victim.restore(tensors, meta)
        assert state(victim) + (victim.schedule, victim.schedule_origin) == before, match
    # bytes that are not a file, and a file with a NaN: SafetensorsError / InputError
    blob = checkpoint.save(tr)
    for bad in (blob[:-3], b"garbage!", blob[:8] + b"[" + blob[9:]):
        with pytest.raises(tg.io.SafetensorsError):
            checkpoint.load(victim, bad)
    assert state(victim) + (victim.schedule, victim.schedule_origin) == before


def test_load_params_and_load_states_refuse_nonfinite_values_by_name():
    tr = make("adamw", 0.01)
    p, s = tr.params(), tr.states()
    before = state(tr)
    p["l2.bias"] = np.array([0.0, np.inf], np.float32)
    with pytest.raises(tg.InputError, match=r"load_params: parameter 'l2.bias' holds inf at flat index 1"):
        tr.load_params(p)
    s["l1.weight.exp_avg"] = np.full((16, 3), np.nan, np.float32)
    with pytest.raises(tg.InputError, match=r"load_states: state 'l1.weight.exp_avg' holds nan"):
        tr.load_states(s, steps=3)
    with pytest.raises(tg.InputError, match=r"steps must be an int >= 0, got -2"):
        tr.load_states(tr.states(), steps=-2)
    assert state(tr) == before


def test_cli_checkpoint_and_resume_continue_the_same_run(tmp_path):
    import io

    from tgweb import cli

    kw = {"backend": "reference", "eval_every": 1000, "progress": False, "out": io.StringIO()}
    full = cli.train("sin", steps=12, checkpoint_path=str(tmp_path / "full.st"), **kw)
    cli.train("sin", steps=7, checkpoint_path=str(tmp_path / "a.st"), **kw)
    part = cli.train(  # --steps is the run's total: the resumed run does the last 5
        "sin", steps=12, resume=str(tmp_path / "a.st"), checkpoint_path=str(tmp_path / "b.st"), **kw
    )
    assert part["final_loss"] == full["final_loss"]
    assert (tmp_path / "b.st").read_bytes() == (tmp_path / "full.st").read_bytes()
    (tmp_path / "bad.st").write_bytes(b"not a checkpoint")
    argv = ["train", "sin", "--backend", "reference", "--steps", "1", "--no-progress"]
    assert cli.main(argv + ["--resume", str(tmp_path / "bad.st")]) == 2


@pytest.mark.parametrize("name", ["sin", "addition", "digits", "names"])
def test_every_sample_resumes_bitwise(name):
    """Each sample with its own optimizer, schedule and clipping: 3 steps, a checkpoint,
    3 more steps in the original and in a fresh trainer restored from it."""
    from tgweb import samples

    mod = samples.get(name)

    def trainer(seed):
        return samples.compile(mod, backend="reference", seed=seed)

    a = trainer(0)
    for i in range(3):
        a.step(**mod.batch(i))
    b = trainer(7)
    checkpoint.load(b, checkpoint.save(a))
    la = [a.step(**mod.batch(i)).loss for i in range(3, 6)]
    lb = [b.step(**mod.batch(i)).loss for i in range(3, 6)]
    assert la == lb and state(a) == state(b)
