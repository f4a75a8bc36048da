"""PyTorch model files (tests/torch_models) run unchanged under real torch and under
tgweb.torch (substituted for `torch` while the file is imported), from the same
initial weights; the losses must agree step by step."""

from __future__ import annotations

import contextlib
import importlib.util
import pathlib
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import tgweb as tg  # noqa: E402
import tgweb.torch as tgt  # noqa: E402

HERE = pathlib.Path(__file__).parent / "torch_models"
STEPS = 20
_NAMES = ("", ".nn", ".nn.functional", ".nn.init", ".optim", ".optim.lr_scheduler")


@contextlib.contextmanager
def as_torch(namespace):
    """`import torch` (and its submodules) gives namespace while the block runs."""
    saved = {n: sys.modules.get("torch" + n) for n in _NAMES}
    for n in _NAMES:
        sys.modules["torch" + n] = importlib.import_module(namespace.__name__ + n)
    try:
        yield
    finally:
        for n, m in saved.items():
            sys.modules["torch" + n] = m


def load(name: str, under_tgweb: bool):
    spec = importlib.util.spec_from_file_location(f"_{name}_{under_tgweb}", HERE / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    with as_torch(tgt) if under_tgweb else contextlib.nullcontext():
        spec.loader.exec_module(mod)
    return mod


def torch_losses(mod, args, batches, every=1):
    """Losses, and get_last_lr() after each step, of training under PyTorch; the
    scheduler steps after every `every` optimizer steps (1: per iteration, more: per epoch)."""
    torch.manual_seed(0)
    m = mod.model(*args)
    init = {k: v.detach().numpy().copy() for k, v in m.state_dict().items()}
    opt, sched = mod.optimizer(m)
    out, lrs = [], []
    for i, b in enumerate(batches):
        _set_lr(mod, opt, i)
        loss = mod.loss(m, **{k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in b.items()})
        opt.zero_grad()
        loss.backward()
        opt.step()
        out.append(loss.item())
        lrs.append(_scheduled(sched, i, every))
    return init, out, lrs


def _set_lr(mod, opt, i):
    """The file's own lr loop before step i (nanoGPT's), if it has one."""
    if hasattr(mod, "set_lr"):
        mod.set_lr(opt, i)


def _scheduled(sched, i, every):
    if sched is None:
        return None
    if (i + 1) % every == 0:
        sched.step()
    return sched.get_last_lr()


def tgweb_losses(mod, args, init, batches, backend, every=1):
    m = mod.model(*args)
    m.load_state_dict(init)
    opt, sched = mod.optimizer(m)
    trainer = tg.compile(m, mod.loss, mod.INPUTS, optimizer=opt, backend=backend)
    out, lrs = [], []
    for i, b in enumerate(batches):
        _set_lr(mod, opt, i)
        out.append(trainer.step(**b))
        lrs.append(_scheduled(sched, i, every))
    return [r.loss for r in out], lrs


CASES = [
    ("gpt", (True,)),
    ("gpt", (False,)),
    ("cnn", ()),
    ("charmodels", ("rnn",)),
    ("charmodels", ("gru",)),
    ("charmodels", ("bow",)),
    ("charmodels", ("mlp",)),
    ("charmodels", ("bigram",)),
    ("dcgan", ()),
    ("superres", ()),
    ("style", ()),
    ("lstm_mnist", ()),
    ("vae", ()),
    ("classweights", ()),
]


def _run(name, args, backend, every=1, steps=STEPS):
    rng = np.random.default_rng(1)
    ref = load(name, False)
    batches = [ref.batch(rng) for _ in range(steps)]
    init, want, want_lrs = torch_losses(ref, args, batches, every)
    got, got_lrs = tgweb_losses(load(name, True), args, init, batches, backend, every)
    np.testing.assert_allclose(np.array(got_lrs, float), np.array(want_lrs, float), rtol=1e-12)
    return np.array(want), np.array(got)


@pytest.mark.parametrize("name,args", CASES, ids=[f"{n}-{'-'.join(map(str, a))}" for n, a in CASES])
def test_reference_matches_torch(name, args):
    want, got = _run(name, args, "reference")
    assert np.abs(want - got).max() < 1e-4, (want, got)
    assert np.ptp(want) > 1e-3  # the steps change the model


@pytest.mark.parametrize("kind", ["step", "onecycle", "sequential"])
@pytest.mark.parametrize("every", [1, 4], ids=["per-iteration", "per-epoch"])
def test_scheduler_steps_as_in_torch(kind, every):
    """The lr follows scheduler.step() calls, per iteration or once per epoch of 4 steps."""
    want, got = _run("scheduled", (kind,), "reference", every)
    assert np.abs(want - got).max() < 1e-4, (want, got)


def test_lr_set_on_param_groups_before_each_step():
    """nanoGPT's warm-up + cosine written into param_groups before every step, with
    groups whose lrs differ and change apart (a tenth for one, 0 then the lr for another)."""
    want, got = _run("manual_lr", (), "reference")
    assert np.abs(want - got).max() < 1e-4, (want, got)
    assert np.ptp(want) > 1e-3


@pytest.mark.native
@pytest.mark.parametrize(
    "name,args",
    [
        ("gpt", (False,)),
        ("charmodels", ("gru",)),
        ("manual_lr", ()),
        ("dcgan", ()),
        ("style", ()),
        ("vae", ()),
    ],
)
def test_native_matches_torch(name, args):
    want, got = _run(name, args, "native", steps=6)  # lavapipe: the reference runs check 20 steps
    assert np.abs(want - got).max() < 2e-3, (want, got)


def _lrs(ns, make, steps=50, groups=(0.1,)):
    """get_last_lr() before the first step and after each of `steps` scheduler.step()
    calls, for the scheduler make(ns, optimizer) on a parameter group per lr."""
    params = [ns.nn.Parameter(ns.ones(2)) for _ in groups]
    opt = ns.optim.SGD([{"params": [p], "lr": lr} for p, lr in zip(params, groups)], lr=0.1)
    sched = make(ns, opt)
    out = [sched.get_last_lr()]
    for _ in range(steps):
        opt.step() if ns is torch else None  # torch warns when the scheduler steps first
        sched.step()
        out.append(sched.get_last_lr())
    return np.array(out)


SCHEDULES = {
    "onecycle": lambda ns, o: ns.optim.lr_scheduler.OneCycleLR(o, 0.8, total_steps=50, cycle_momentum=False),
    "onecycle-three-phase-linear": lambda ns, o: ns.optim.lr_scheduler.OneCycleLR(
        o,
        0.8,
        epochs=7,
        steps_per_epoch=8,
        pct_start=0.25,
        anneal_strategy="linear",
        three_phase=True,
        cycle_momentum=False,
    ),
    "sequential": lambda ns, o: ns.optim.lr_scheduler.SequentialLR(
        o,
        [
            ns.optim.lr_scheduler.LinearLR(o, start_factor=0.2, total_iters=6),
            ns.optim.lr_scheduler.CosineAnnealingLR(o, T_max=15, eta_min=0.01),
            ns.optim.lr_scheduler.StepLR(o, step_size=4, gamma=0.5),
        ],
        milestones=[8, 35],
    ),
    "multistep-groups": lambda ns, o: ns.optim.lr_scheduler.MultiStepLR(o, [3, 10, 30], gamma=0.3),
    "exponential-groups": lambda ns, o: ns.optim.lr_scheduler.ExponentialLR(o, 0.93),
    "lambda-groups": lambda ns, o: ns.optim.lr_scheduler.LambdaLR(o, lambda k: 1 / (1 + k) ** 0.5),
}


@pytest.mark.parametrize("name", SCHEDULES)
def test_scheduler_lr_sequence_matches_torch(name):
    groups = (0.1, 0.03) if name.endswith("-groups") else (0.1,)
    want = _lrs(torch, SCHEDULES[name], groups=groups)
    got = _lrs(tgt, SCHEDULES[name], groups=groups)
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-15)
    assert np.ptp(want) > 0.01


def test_scheduler_refusals():
    sched = tgt.optim.lr_scheduler
    p = tgt.nn.Parameter(tgt.ones(2))
    with pytest.raises(ValueError, match="cycle_momentum=False"):
        sched.OneCycleLR(tgt.optim.Adam([p]), max_lr=0.1, total_steps=10)
    one = sched.OneCycleLR(tgt.optim.SGD([p]), max_lr=0.1, total_steps=3, cycle_momentum=False)
    for _ in range(3):
        one.step()
    with pytest.raises(ValueError, match="Tried to step 4 times"):
        one.step()
    assert one.last_epoch == 3
    with pytest.raises(TypeError, match="tgweb.torch.optim optimizer"):
        sched.StepLR(tg.optim.SGD(0.1), 2)
    two = tgt.optim.SGD([{"params": [p], "lr": 0.1}, {"params": [tgt.nn.Parameter(tgt.ones(1))], "lr": 0.2}])
    with pytest.raises(ValueError, match="different lr"):
        sched.CosineAnnealingLR(two, T_max=5, eta_min=1e-3)


def test_groups_with_different_betas_are_refused():
    a, b = tgt.nn.Parameter(tgt.ones(2)), tgt.nn.Parameter(tgt.ones(2))
    with pytest.raises(ValueError, match="different betas"):
        tgt.optim.AdamW([{"params": [a]}, {"params": [b], "betas": (0.8, 0.99)}])
    tgt.optim.AdamW([{"params": [a], "lr": 0.1}, {"params": [b], "betas": (0.9, 0.999)}])  # the same betas


def _manual_lr_after_one_step():
    """manual_lr.py's model compiled with its AdamW groups (reference backend), one step in."""
    mod = load("manual_lr", True)
    m = mod.model()
    opt = mod.optimizer(m)[0]
    trainer = tg.compile(m, mod.loss, mod.INPUTS, optimizer=opt, backend="reference")
    b = mod.batch(np.random.default_rng(0))
    trainer.step(**b)
    return mod, opt, trainer, b


@pytest.mark.parametrize(
    "key,value,match",
    [
        (
            "weight_decay",
            0.5,
            r'param_groups\[1\]\["weight_decay"\] changed from 0.0 to 0.5 after tg.compile',
        ),
        ("betas", (0.8, 0.95), r'param_groups\[1\]\["betas"\] changed from \(0.9, 0.95\)'),
        ("lr", -1e-3, r'param_groups\[1\]\["lr"\] = -0.001: the lr must be a finite number >= 0'),
        ("lr", "0.1", r"param_groups\[1\]\[\"lr\"\] = '0.1'"),
    ],
)
def test_param_group_changes_a_step_cannot_follow(key, value, match):
    """Only "lr" may change after tg.compile; anything else raises when the step is sent,
    naming the group and the setting, and nothing changes (after a step still in flight)."""
    mod, opt, trainer, b = _manual_lr_after_one_step()
    before = trainer.params()
    opt.param_groups[1][key] = value
    with pytest.raises(tg.InputError, match=match):
        trainer.step(**b)
    assert trainer.steps == 1
    for n, v in trainer.params().items():
        np.testing.assert_array_equal(v, before[n])
    opt.param_groups[1][key] = mod.optimizer(mod.model())[0].param_groups[1][key]  # back: it steps
    assert trainer.step(**b).ok and trainer.steps == 2


def test_param_groups_added_or_changed_after_compile_are_refused():
    """A group's params list changed after tg.compile raises when the next step is sent,
    add_param_group after tg.compile raises at once; nothing changes either way."""
    mod, opt, trainer, b = _manual_lr_after_one_step()
    before = trainer.params()
    moved = opt.param_groups[1]["params"].pop()
    with pytest.raises(tg.InputError, match=r"param_groups changed after tg.compile"):
        trainer.step(**b)
    opt.param_groups[1]["params"].append(moved)
    with pytest.raises(tg.InputError, match=r"add_param_group after tg.compile"):
        opt.add_param_group({"params": [], "lr": 0.5})
    assert len(opt.param_groups) == len(mod.optimizer(mod.model())[0].param_groups)
    assert trainer.steps == 1
    for n, v in trainer.params().items():
        np.testing.assert_array_equal(v, before[n])
    assert trainer.step(**b).ok and trainer.steps == 2


def test_add_param_group_before_compile_trains_with_its_own_lr():
    """PyTorch's add_param_group before tg.compile: the added group (lr 0 here) is held
    still while the first group moves."""
    import tgweb.torch as torch
    from tgweb.torch import nn

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(3, 4), nn.Linear(4, 1)

        def forward(self, x):
            return self.b(torch.relu(self.a(x)))

    # seeded: drawn from wherever earlier tests left the stream, all four ReLUs could be dead
    # on every input, and then a's gradient is zero (the test failed in a longer run so)
    torch.manual_seed(0)
    m = M()
    opt = torch.optim.SGD(m.a.parameters(), lr=0.1)
    opt.add_param_group({"params": m.b.parameters(), "lr": 0.0})
    tr = tg.compile(
        m,
        lambda m, x, y: ((m(x) - y) ** 2).mean(),
        {"x": (8, 3), "y": (8, 1)},
        optimizer=opt,
        backend="reference",
    )
    rng = np.random.default_rng(0)
    before = tr.params()
    tr.step(x=rng.standard_normal((8, 3), np.float32), y=rng.random((8, 1), np.float32))
    after = tr.params()
    assert all(np.any(before[k] != after[k]) for k in ("a.weight", "a.bias"))
    assert all(np.array_equal(before[k], after[k]) for k in ("b.weight", "b.bias"))


@pytest.mark.parametrize("limit", [8, 10])
def test_every_kernel_fits_the_devices_binding_limit(limit):
    """The DCGAN's step asked for 12 storage bindings in one kernel where SwiftShader
    allows 10 (WebGPU's default is 8): fusion counted a group's stored members only as
    roots, not those other groups read, and took the updates in a host's epilogue (batch
    norm's step count beside the global norm) as written in place, which the planner may
    not do."""
    from tgweb.compile import _optimizer_from_spec, build_training_graph
    from tgweb.lower import lower
    from tgweb.program import LIMITS

    mod = load("dcgan", True)
    m = mod.model()
    opt, _ = _optimizer_from_spec(mod.optimizer(m)[0])
    graph = build_training_graph(m, mod.loss, mod.INPUTS, opt, None, None, "float32")
    prog = lower(graph, limits={**LIMITS, "maxStorageBuffersPerShaderStage": limit})
    worst = max(prog.kernels, key=lambda k: len(k.bindings))
    assert len(worst.bindings) <= limit, (worst.name, len(worst.bindings))
