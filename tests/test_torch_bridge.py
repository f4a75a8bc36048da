"""tg.to_torch: every sample's loss and gradients under PyTorch equal tgweb's reference
backend; parameters move both ways bit for bit; a kind with no mapping is named."""

from __future__ import annotations

import numpy as np
import pytest
import torch  # noqa: E402 - the optional extra; build.py installs it, so CI runs this

import tgweb as tg
from tgweb import samples
from tgweb.ir import REGISTRY
from tgweb.trace import input_spec


def _batch(mod, step=0):
    out = {}
    for name, spec in mod.INPUTS.items():
        shape, dtype = input_spec(name, spec)
        data = mod.batch(step)[name]
        out[name] = np.asarray(data, {"f32": np.float32, "i32": np.int32, "bool": np.bool_}[dtype]).reshape(
            shape
        )
    return out


@pytest.mark.parametrize("name", sorted(samples.SAMPLES))
def test_sample_loss_and_gradients_match_the_reference(name):
    mod = samples.get(name)
    if hasattr(mod, "sized"):  # shakespeare: its full size is far too big for float64 NumPy here
        mod = mod.sized("small")
    batch = _batch(mod)
    model = mod.Model()  # one instance: a PyTorch-style model (torchgpt) draws its init from a stream
    want_loss, want_grads = tg.value_and_grad(mod.loss_fn, model, precision="float64", **batch)
    module = tg.to_torch(model, mod.loss_fn, inputs=mod.INPUTS).double()
    feeds = {
        k: torch.from_numpy(v.astype(np.float64) if v.dtype == np.float32 else v) for k, v in batch.items()
    }
    loss = module(**feeds)
    loss.backward()
    # the module holds float32 parameters, the float64 reference their unrounded values
    np.testing.assert_allclose(loss.item(), float(want_loss), rtol=1e-6)
    grads = {n: p.grad.numpy() for n, p in module.named_parameters()}
    assert set(grads) == set(want_grads)
    for n, g in grads.items():
        scale = max(1e-12, float(np.abs(want_grads[n]).max()))
        np.testing.assert_allclose(g, want_grads[n], rtol=1e-5, atol=1e-6 * scale, err_msg=n)


def test_float32_forward_is_close_and_parameters_round_trip_bitwise():
    mod = samples.get("sin")
    tr = samples.compile(mod, backend="reference")
    for i in range(10):
        tr.step(**mod.batch(i))
    module = tg.to_torch(mod.Model(), mod.loss_fn, inputs=mod.INPUTS)
    module.load_params(tr.params())
    state = {k: v.numpy() for k, v in module.state_dict().items()}
    assert set(state) == set(tr.params())
    for n, v in tr.params().items():
        assert np.array_equal(state[n], v) and state[n].dtype == np.float32, n
    batch = _batch(mod, 10)
    want = tr.attach(mod.loss_fn, inputs=mod.INPUTS).run(**batch).output
    got = module(**{k: torch.from_numpy(v) for k, v in batch.items()})
    np.testing.assert_allclose(got.item(), float(want), rtol=1e-5)
    tr.load_params({k: v.numpy() for k, v in module.state_dict().items()})  # and back
    assert all(np.array_equal(tr.params()[n], state[n]) for n in state)


def test_a_free_batch_axis_is_traced_once_per_size():
    mod = samples.get("sin")
    module = tg.to_torch(mod.Model(), mod.forward, inputs={"x": (None, 1)})
    ref = tg.compile(
        mod.Model(), mod.loss_fn, inputs=mod.INPUTS, optimizer=mod.OPTIMIZER, backend="reference"
    )
    module.load_params(ref.params())
    for n in (1, 7, 300, 7):
        x = np.linspace(-3, 3, n, dtype=np.float32).reshape(n, 1)
        want = ref.attach(mod.forward, inputs={"x": (n, 1)}).run(x=x).output
        np.testing.assert_allclose(module(x=torch.from_numpy(x)).detach().numpy(), want, rtol=1e-5, atol=1e-6)
    assert len(module._graphs) == 3  # 1, 7 and 300
    with pytest.raises(tg.TraceError, match="has shape \\(4, 2\\), expected \\(None, 1\\)"):
        module(x=torch.zeros(4, 2))


def test_a_kind_without_a_mapping_is_named(monkeypatch):
    monkeypatch.setattr(REGISTRY["tanh"], "torch", None)
    mod = samples.get("addition")
    with pytest.raises(tg.TraceError, match="no PyTorch mapping yet: \\['tanh'\\]"):
        tg.to_torch(mod.Model(), lambda m, tokens, targets: tg.tanh(m(tokens)).sum(), inputs=mod.INPUTS)


@pytest.mark.parametrize(
    "optimizer",
    [
        {
            "name": "adamw",
            "lr": 0.01,
            "weight_decay": 0.1,
            "schedule": {
                "kind": "warmup",
                "steps": 4,
                "then": {"kind": "cosine", "start": 0.01, "steps": 300},
            },
        },
        {"name": "adam", "lr": 0.01},
        {"name": "sgd", "lr": 0.05, "momentum": 0.9, "weight_decay": 0.01},
        {"name": "adadelta", "lr": 0.5, "rho": 0.8, "weight_decay": 0.01},
        {"name": "adagrad", "lr": 0.05, "lr_decay": 0.01, "initial_accumulator_value": 0.1},
        {"name": "rmsprop", "lr": 0.003, "momentum": 0.5, "centered": True, "weight_decay": 0.01},
        "torch-groups",
    ],
    ids=["adamw-cosine", "adam", "sgd-momentum", "adadelta", "adagrad", "rmsprop-centered", "torch-groups"],
)
def test_a_run_moves_to_pytorch_and_back_as_if_it_had_not_moved(optimizer):
    """250 steps in tgweb against 100 in tgweb, 100 in PyTorch and 50 in tgweb again. The
    test is about the algorithm (every state, count and schedule crossing both ways), so
    both runs are float64: a float32 run of 250 steps amplifies the rounding of its BLAS
    kernels (Adam and RMSprop divide noise by its own size), which differs between CPUs."""
    mod = samples.get("sin")

    def trainer():
        model = mod.Model()
        opt, sched = _torch_groups(model) if optimizer == "torch-groups" else (optimizer, None)
        t = tg.compile(
            model,
            mod.loss_fn,
            inputs=mod.INPUTS,
            optimizer=opt,
            backend="reference",
            clip_grad_norm=1.0,
            precision="float64",
        )
        return t, sched

    def train(t, sched, steps):
        for i in steps:
            t.step(**mod.batch(i))
            if sched is not None:
                sched.step()

    (still, still_sched), (moved, moved_sched) = trainer(), trainer()
    train(still, still_sched, range(250))
    train(moved, moved_sched, range(100))
    module = tg.to_torch(mod.Model(), mod.loss_fn, inputs=mod.INPUTS).double()
    module.load_params(moved.params())
    opt, sched = tg.to_torch_optimizer(moved, module)
    for i in range(100, 200):
        batch = _batch(mod, i)  # float32 values, as the trainer takes them; exact in float64
        module(**{k: torch.from_numpy(v.astype(np.float64)) for k, v in batch.items()}).backward()
        torch.nn.utils.clip_grad_norm_(module.parameters(), moved.clip_grad_norm)
        opt.step()
        sched.step()
        opt.zero_grad()
    tg.load_from_torch(moved, module, opt, sched)
    assert moved.steps == 200
    train(moved, moved_sched, range(200, 250))
    if moved_sched is not None:
        assert moved_sched.get_last_lr() == still_sched.get_last_lr()
    for kind in ("params", "states"):
        a, b = getattr(still, kind)(), getattr(moved, kind)()
        assert set(a) == set(b)
        for n in a:
            assert b[n].dtype == np.float64, f"{kind} {n} came back as {b[n].dtype}"
            scale = float(np.abs(a[n]).max())
            np.testing.assert_allclose(b[n], a[n], rtol=1e-9, atol=1e-12 * scale, err_msg=f"{kind} {n}")


def _torch_groups(model):
    """A tgweb.torch RMSprop with two parameter groups (own lr, momentum, weight decay)
    and a StepLR stepped per iteration."""
    import tgweb.torch as tgt

    first = [p for n, p in model.named_parameters() if n.startswith("net.0.")]
    rest = [p for n, p in model.named_parameters() if not n.startswith("net.0.")]
    opt = tgt.optim.RMSprop(
        [{"params": first, "lr": 0.004, "momentum": 0.3}, {"params": rest, "weight_decay": 0.01}], lr=0.002
    )
    return opt, tgt.optim.lr_scheduler.StepLR(opt, step_size=60, gamma=0.5)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_ddp_on_two_processes_equals_one_process_on_the_doubled_batch(tmp_path):
    """examples/ddp_train.py under torchrun with gloo: 2 ranks x 50 steps of sin equal
    one process training on both ranks' batches at once (the doubled batch)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from tgweb.io import checkpoint

    root = Path(__file__).resolve().parents[1]
    out = tmp_path / "ddp.safetensors"
    env = dict(os.environ, PYTHONPATH=str(root), OMP_NUM_THREADS="1")
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node=2",
        f"--master_port={_free_port()}",
        str(root / "examples" / "ddp_train.py"),
        "--sample",
        "sin",
        "--steps",
        "50",
        "--out",
        str(out),
    ]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
    mod = samples.get("sin")
    ddp = tg.compile(
        mod.Model(), mod.loss_fn, inputs=mod.INPUTS, optimizer=mod.OPTIMIZER, backend="reference"
    )
    meta = checkpoint.load_file(ddp, out)
    assert meta["sample"] == "sin" and ddp.steps == 50

    # one process, the doubled batch: rank 0's and rank 1's batches of each step, stacked
    doubled = {
        n: ((2 * shape[0],) + tuple(shape[1:]), dtype)
        for n, (shape, dtype) in ((n, input_spec(n, s)) for n, s in mod.INPUTS.items())
    }
    ref = tg.compile(
        mod.Model(), mod.loss_fn, inputs=mod.INPUTS, optimizer=mod.OPTIMIZER, backend="reference"
    )
    module = tg.to_torch(mod.Model(), mod.loss_fn, inputs=doubled)
    module.load_params(ref.params())
    opt, sched = tg.to_torch_optimizer(ref, module)
    for step in range(50):
        a, b = _batch(mod, 2 * step), _batch(mod, 2 * step + 1)
        module(**{k: torch.from_numpy(np.concatenate([a[k], b[k]])) for k in a}).backward()
        opt.step()
        sched.step()
        opt.zero_grad()
    for n, p in module.named_parameters():
        np.testing.assert_allclose(ddp.params()[n], p.detach().numpy(), rtol=1e-4, atol=1e-5, err_msg=n)
