"""Normalization layers against PyTorch (tests/torch_check.py): forward, gradients of
input and parameters, in training and eval mode, state dicts both ways; the running
statistics the step updates (momentum, cumulative average, num_batches_tracked), kept
by the Trainer beside the parameters, in checkpoints, and read by an inference program
in eval mode; natively on lavapipe too."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from torch_check import compare  # noqa: E402

import tgweb as tg  # noqa: E402
import tgweb.torch as tgt  # noqa: E402

R = np.random.default_rng(0)
X2 = R.standard_normal((6, 4)).astype(np.float32)
X3 = R.standard_normal((3, 4, 7)).astype(np.float32)
X4 = R.standard_normal((3, 4, 5, 6)).astype(np.float32) * 2 + 1

NORMS = {
    "BatchNorm1d-2d-input": (lambda ns: ns.nn.BatchNorm1d(4), X2),
    "BatchNorm1d": (lambda ns: ns.nn.BatchNorm1d(4, momentum=0.3, eps=1e-3), X3),
    "BatchNorm2d": (lambda ns: ns.nn.BatchNorm2d(4), X4),
    "BatchNorm2d-cumulative": (lambda ns: ns.nn.BatchNorm2d(4, momentum=None), X4),
    "BatchNorm2d-no-affine": (lambda ns: ns.nn.BatchNorm2d(4, affine=False), X4),
    "BatchNorm2d-no-stats": (lambda ns: ns.nn.BatchNorm2d(4, track_running_stats=False), X4),
    "InstanceNorm1d": (lambda ns: ns.nn.InstanceNorm1d(4), X3),
    "InstanceNorm2d-affine-stats": (
        lambda ns: ns.nn.InstanceNorm2d(4, affine=True, track_running_stats=True),
        X4,
    ),
    "InstanceNorm2d-unbatched": (lambda ns: ns.nn.InstanceNorm2d(4, affine=True), X4[0]),
    "GroupNorm": (lambda ns: ns.nn.GroupNorm(2, 4), X4),
    "GroupNorm-1d": (lambda ns: ns.nn.GroupNorm(4, 4, affine=False), X3),
}


@pytest.mark.parametrize("train", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("name", sorted(NORMS))
def test_norm_matches_torch(name, train):
    make, x = NORMS[name]
    compare(make, x, train=train, tol=3e-5)


@pytest.mark.native
@pytest.mark.parametrize(
    "name", ["BatchNorm2d", "BatchNorm2d-cumulative", "GroupNorm", "InstanceNorm2d-affine-stats"]
)
def test_norm_matches_torch_natively(name):
    make, x = NORMS[name]
    compare(make, x, backend="native", tol=1e-4)


def _net(ns, momentum=0.1):
    return ns.nn.Sequential(
        ns.nn.Conv2d(2, 3, 3, padding=1),
        ns.nn.BatchNorm2d(3, momentum=momentum),
        ns.nn.ReLU(),
        ns.nn.Flatten(),
        ns.nn.Linear(48, 2),
        ns.nn.BatchNorm1d(2),
    )


def _batches(n):
    rng = np.random.default_rng(3)
    return [(rng.standard_normal((5, 2, 4, 4)).astype(np.float32) * 2 + 0.5) for _ in range(n)]


@pytest.mark.parametrize("backend", ["reference", pytest.param("native", marks=pytest.mark.native)])
@pytest.mark.parametrize("momentum", [0.1, None])
def test_running_statistics_follow_torch_over_steps(backend, momentum):
    """Four steps: losses, parameters and running statistics as PyTorch's; then eval mode
    in an attached inference program reads the trained statistics; a checkpoint holds
    the buffers under their names and restores them."""
    torch.manual_seed(0)
    tm = _net(torch, momentum)
    m = _net(tgt, momentum)
    m.load_state_dict({k: v.numpy() for k, v in tm.state_dict().items()})
    topt = torch.optim.SGD(tm.parameters(), lr=0.1, momentum=0.9)
    loss = lambda m, x: (m(x) ** 2).mean()  # noqa: E731
    tr = tg.compile(
        m, loss, {"x": (5, 2, 4, 4)}, tgt.optim.SGD(m.parameters(), lr=0.1, momentum=0.9), backend=backend
    )
    for x in _batches(4):
        want = loss(tm, torch.from_numpy(x))
        topt.zero_grad()
        want.backward()
        topt.step()
        assert tr.step(x=x).loss == pytest.approx(want.item(), rel=1e-4, abs=1e-6)
    sd = tm.state_dict()
    got = tr.buffers()
    assert sorted(got) == sorted(k for k in sd if "running" in k or "batches" in k)
    for k, v in got.items():
        np.testing.assert_allclose(v, sd[k].numpy(), rtol=1e-4, atol=1e-6, err_msg=k)
    assert not set(got) & set(tr.states())  # optimizer state stays apart

    m.load_state_dict({**tr.params(), **got})  # back into the module, as PyTorch's names
    assert int(m.state_dict()["1.num_batches_tracked"]) == 4
    tm.eval()
    m.eval()
    x = _batches(5)[-1]
    inf = tr.attach(lambda m, x: m(x), {"x": (5, 2, 4, 4)})
    np.testing.assert_allclose(
        inf.run(x=x).output, tm(torch.from_numpy(x)).detach().numpy(), rtol=1e-4, atol=1e-5
    )

    tensors, meta = tr.checkpoint()
    assert "1.running_var" in tensors and "optimizer.1.running_var" not in tensors
    tr.step(x=x)  # in training mode (compiled so): the statistics move on
    assert not np.allclose(tr.buffers()["1.running_mean"], got["1.running_mean"])
    tr.restore(tensors, meta)
    np.testing.assert_array_equal(tr.buffers()["1.running_mean"], got["1.running_mean"])
    np.testing.assert_allclose(
        inf.run(x=x).output, tm(torch.from_numpy(x)).detach().numpy(), rtol=1e-4, atol=1e-5
    )


def test_a_skipped_step_leaves_the_statistics():
    m = _net(tgt)
    tr = tg.compile(
        m, lambda m, x: (m(x) ** 2).mean(), {"x": (5, 2, 4, 4)}, tgt.optim.SGD(m.parameters(), lr=0.1)
    )
    before = tr.buffers()
    x = _batches(1)[0]
    x[0, 0, 0, 0] = np.inf
    assert not tr.step(x=x).ok
    for k, v in tr.buffers().items():
        np.testing.assert_array_equal(v, before[k])


def test_refusals():
    m = _net(tgt)
    tr = tg.compile(
        m, lambda m, x: (m(x) ** 2).mean(), {"x": (5, 2, 4, 4)}, tgt.optim.SGD(m.parameters(), lr=0.1)
    )
    with pytest.raises(tg.TraceError, match="model.eval"):
        tr.attach(lambda m, x: m(x), {"x": (5, 2, 4, 4)})  # training mode would update the statistics
    with pytest.raises(tg.TraceError, match="more than one value per channel"):
        tg.value_and_grad(lambda m, x: m(x).sum(), tgt.nn.BatchNorm1d(3), x=np.ones((1, 3), np.float32))
    with pytest.raises(tg.TraceError, match="rank 4"):
        tg.value_and_grad(lambda m, x: m(x).sum(), tgt.nn.BatchNorm2d(3), x=np.ones((2, 3), np.float32))


def test_to_torch_refuses_module_buffers_with_a_clear_error():
    import tgweb as tg

    m = tgt.nn.Sequential(tgt.nn.Linear(3, 4), tgt.nn.BatchNorm1d(4))
    with pytest.raises(tg.TraceError, match="reads module buffers .*1.running_mean.* tg.compile"):
        tg.to_torch(m, lambda m, x: m(x).sum(), inputs={"x": (5, 3)})
