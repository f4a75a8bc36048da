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
        loss = mod.loss(m, **{k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in b.items()})
        opt.zero_grad()
        loss.backward()
        opt.step()
        out.append(loss.item())
        lrs.append(_scheduled(sched, i, every))
    return init, out, lrs


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
]


def _run(name, args, backend, every=1):
    rng = np.random.default_rng(1)
    ref = load(name, False)
    batches = [ref.batch(rng) for _ in range(STEPS)]
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


@pytest.mark.native
@pytest.mark.parametrize("name,args", [("gpt", (False,)), ("charmodels", ("gru",))])
def test_native_matches_torch(name, args):
    want, got = _run(name, args, "native")
    assert np.abs(want - got).max() < 2e-3, (want, got)
