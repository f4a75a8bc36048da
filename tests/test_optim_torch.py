"""Optimizer trajectories against torch.optim, in float64, from the same weights."""

import numpy as np
import pytest
import torch

import tgweb as tg
from tgweb import nn
from tgweb.optim import schedules

STEPS = 25
NAMES = {"l1.weight": "0.weight", "l1.bias": "0.bias", "l2.weight": "2.weight", "l2.bias": "2.bias"}


class MLP(nn.Module):
    def __init__(self):
        self.l1 = nn.Linear(3, 8)
        self.l2 = nn.Linear(8, 2)

    def forward(self, x):
        return self.l2(tg.tanh(self.l1(x)))


def mse(m, x, y):
    return ((m(x) - y) ** 2).mean()


def batches(n, seed=1):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        x = rng.normal(size=(16, 3)).astype(np.float32)
        y = np.stack([np.sin(x[:, 0]) + x[:, 1], x[:, 2] * x[:, 0]], 1).astype(np.float32)
        out.append((x, y))
    return out


OPTIMIZERS = {
    "sgd": (lambda lr: tg.optim.SGD(lr), lambda g, lr: torch.optim.SGD(g, lr=lr), 0.1, 0.0),
    "sgd_momentum_wd": (
        lambda lr: tg.optim.SGD(lr, momentum=0.9, weight_decay=0.05),
        lambda g, lr: torch.optim.SGD(g, lr=lr, momentum=0.9),
        0.05,
        0.05,
    ),
    "nesterov": (
        lambda lr: tg.optim.SGD(lr, momentum=0.8, nesterov=True),
        lambda g, lr: torch.optim.SGD(g, lr=lr, momentum=0.8, nesterov=True),
        0.05,
        0.0,
    ),
    "adam": (
        lambda lr: tg.optim.Adam(lr, betas=(0.8, 0.99), eps=1e-6),
        lambda g, lr: torch.optim.Adam(g, lr=lr, betas=(0.8, 0.99), eps=1e-6),
        0.02,
        0.0,
    ),
    "adam_l2": (
        lambda lr: tg.optim.Adam(lr, weight_decay=0.1),
        lambda g, lr: torch.optim.Adam(g, lr=lr),
        0.02,
        0.1,
    ),
    "adamw": (
        lambda lr: tg.optim.AdamW(lr, weight_decay=0.3),
        lambda g, lr: torch.optim.AdamW(g, lr=lr),
        0.02,
        0.3,
    ),
}

VARIANTS = {
    "plain": (None, None),
    "clip": (0.3, None),
    "schedule": (None, "warmup_cosine"),
    "clip_schedule": (0.3, "step"),
}


def make_schedule(kind, lr):
    if kind == "warmup_cosine":
        return schedules.Warmup(5, schedules.Cosine(lr, 15, end=lr / 10))
    if kind == "step":
        return schedules.MultiStep(lr, [7, 15], gamma=0.5)
    return None


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("opt", list(OPTIMIZERS))
def test_trajectory_matches_torch(opt, variant):
    make_tg, make_torch, lr, wd = OPTIMIZERS[opt]
    clip, sched_kind = VARIANTS[variant]
    sched = make_schedule(sched_kind, lr)
    model = MLP()
    trainer = tg.compile(
        model,
        mse,
        inputs={"x": (16, 3), "y": (16, 2)},
        optimizer=make_tg(sched if sched is not None else lr),
        backend="reference",
        precision="float64",
        clip_grad_norm=clip,
        seed=3,
    )
    start = {k: v.astype(np.float64) for k, v in trainer.params().items()}
    trainer.load_params(start)

    tm = torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2)).double()
    tparams = dict(tm.named_parameters())
    with torch.no_grad():
        for k, v in start.items():
            tparams[NAMES[k]].copy_(torch.from_numpy(v))
    # the default mask: no decay for the (zeros-initialised) biases
    groups = [
        {"params": [tparams["0.weight"], tparams["2.weight"]], "weight_decay": wd},
        {"params": [tparams["0.bias"], tparams["2.bias"]], "weight_decay": 0.0},
    ]
    topt = make_torch(groups, lr)

    for t, (x, y) in enumerate(batches(STEPS)):
        cur = sched(t) if sched is not None else lr
        for g in topt.param_groups:
            g["lr"] = cur
        topt.zero_grad()
        tloss = ((tm(torch.from_numpy(x).double()) - torch.from_numpy(y).double()) ** 2).mean()
        tloss.backward()
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(tm.parameters(), clip)
        topt.step()
        r = trainer.step(x=x, y=y)
        assert r.ok and r.lr == pytest.approx(cur, rel=1e-15)
        assert r.loss == pytest.approx(tloss.item(), rel=1e-9)

    mine = trainer.params()
    for k, v in mine.items():
        ref = tparams[NAMES[k]].detach().numpy()
        assert v.dtype == np.float64
        err = np.abs(v - ref).max() / max(np.abs(ref).max(), 1e-12)
        assert err < 1e-5, (k, err)
        # the run actually moved the parameter
        assert np.abs(v - start[k]).max() > 1e-4


def test_schedules_match_torch_schedulers():
    p = [torch.nn.Parameter(torch.zeros(1))]
    cases = [
        (schedules.Step(0.1, 3, 0.5), lambda o: torch.optim.lr_scheduler.StepLR(o, 3, 0.5)),
        (
            schedules.MultiStep(0.1, [2, 5, 9], 0.3),
            lambda o: torch.optim.lr_scheduler.MultiStepLR(o, [2, 5, 9], 0.3),
        ),
        (
            schedules.Cosine(0.1, 10, end=0.01),
            lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, 10, eta_min=0.01),
        ),
        (schedules.Linear(0.1, 0.02, 8), lambda o: torch.optim.lr_scheduler.LinearLR(o, 1.0, 0.2, 8)),
        (
            schedules.Cosine(0.1, 7, end=0.01, periodic=True),
            lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, 7, eta_min=0.01),
        ),
        (
            schedules.OneCycle(0.3, 30, pct_start=0.4, div_factor=10.0),
            lambda o: torch.optim.lr_scheduler.OneCycleLR(
                o, 0.3, total_steps=30, pct_start=0.4, div_factor=10.0, cycle_momentum=False
            ),
        ),
    ]
    for mine, make in cases:
        o = torch.optim.SGD(p, lr=0.1)
        s = make(o)
        # torch's cosine keeps oscillating after T_max; ours stays at the end value unless periodic
        for t in range(11 if isinstance(mine, schedules.Cosine) and not mine.periodic else 30):
            assert mine(t) == pytest.approx(o.param_groups[0]["lr"], rel=1e-9, abs=1e-15), (mine, t)
            o.step()
            s.step()


def test_schedules_round_trip_as_data():
    for s in (
        schedules.Constant(0.1),
        schedules.Linear(0.1, 0.0, 10),
        schedules.Warmup(3, schedules.Cosine(0.2, 10)),
        schedules.Step(0.1, 2),
        schedules.MultiStep(0.1, [3, 6]),
        schedules.OneCycle(0.5, 40, three_phase=True, anneal="linear"),
        schedules.Sequence([schedules.Linear(0.0, 0.1, 5), schedules.Cosine(0.1, 4, periodic=True)], [5]),
    ):
        again = schedules.from_spec(s.to_dict())
        assert again == s
        assert [again(t) for t in range(20)] == [s(t) for t in range(20)]
    w = schedules.Warmup(4, 0.2)
    assert [w(t) for t in range(6)] == pytest.approx([0.05, 0.1, 0.15, 0.2, 0.2, 0.2])
