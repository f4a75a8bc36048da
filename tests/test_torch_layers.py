"""tgweb.torch's everyday layers, losses and Tensor methods against PyTorch: forward,
the gradients of the input and every parameter, state dicts both ways
(tests/torch_check.py); the layers natively on lavapipe too, at small sizes. Also
the losses' arguments, nn.init, and a class-weight table made from data inside the
forward (a data constant)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from torch_check import compare  # noqa: E402

import tgweb as tg  # noqa: E402
import tgweb.torch as tgt  # noqa: E402

R = np.random.default_rng(0)
X4 = R.standard_normal((2, 4, 5, 6)).astype(np.float32)
X3 = R.standard_normal((2, 4, 7)).astype(np.float32)

LAYERS = {
    "Conv1d": (lambda ns: ns.nn.Conv1d(4, 3, 3, stride=2, padding=1), X3),
    "Conv1d-groups-dilation": (lambda ns: ns.nn.Conv1d(4, 6, 2, dilation=2, groups=2), X3),
    "Conv1d-reflect": (lambda ns: ns.nn.Conv1d(4, 3, 3, padding=1, padding_mode="reflect"), X3),
    "ConvTranspose1d": (lambda ns: ns.nn.ConvTranspose1d(4, 3, 4, stride=2, padding=1), X3),
    "ConvTranspose2d": (lambda ns: ns.nn.ConvTranspose2d(4, 3, 4, 2, 1, bias=False), X4),
    "MaxPool1d": (lambda ns: ns.nn.MaxPool1d(3, 2, padding=1), X3),
    "AvgPool1d": (lambda ns: ns.nn.AvgPool1d(2), X3),
    "AdaptiveAvgPool1d": (lambda ns: ns.nn.AdaptiveAvgPool1d(3), X3),
    "AdaptiveMaxPool1d": (lambda ns: ns.nn.AdaptiveMaxPool1d(3), X3),
    "AdaptiveAvgPool2d-even": (lambda ns: ns.nn.AdaptiveAvgPool2d((5, 3)), X4),
    "AdaptiveAvgPool2d-uneven": (lambda ns: ns.nn.AdaptiveAvgPool2d((3, 4)), X4),
    "AdaptiveAvgPool2d-1": (lambda ns: ns.nn.AdaptiveAvgPool2d(1), X4),
    "AdaptiveMaxPool2d-uneven": (lambda ns: ns.nn.AdaptiveMaxPool2d((2, 4)), X4),
    "Upsample-nearest": (lambda ns: ns.nn.Upsample(scale_factor=2), X4),
    "Upsample-nearest-size": (lambda ns: ns.nn.Upsample(size=(7, 9)), X4),
    "Upsample-bilinear": (lambda ns: ns.nn.Upsample(scale_factor=2, mode="bilinear"), X4),
    "Upsample-bilinear-corners": (
        lambda ns: ns.nn.Upsample(size=(7, 9), mode="bilinear", align_corners=True),
        X4,
    ),
    "UpsamplingBilinear2d": (lambda ns: ns.nn.UpsamplingBilinear2d(scale_factor=2), X4),
    "Upsample-linear": (lambda ns: ns.nn.Upsample(size=11, mode="linear"), X3),
    "PixelShuffle": (lambda ns: ns.nn.PixelShuffle(2), X4),
    "PixelUnshuffle": (lambda ns: ns.nn.PixelUnshuffle(1), X4),
    "ZeroPad2d": (lambda ns: ns.nn.ZeroPad2d((1, 2, 0, 3)), X4),
    "ConstantPad1d": (lambda ns: ns.nn.ConstantPad1d((2, 1), 0.5), X3),
    "ReflectionPad2d": (lambda ns: ns.nn.ReflectionPad2d((1, 2, 2, 1)), X4),
    "ReflectionPad1d": (lambda ns: ns.nn.ReflectionPad1d(3), X3),
    "ReplicationPad2d": (lambda ns: ns.nn.ReplicationPad2d(2), X4),
    "ReplicationPad1d": (lambda ns: ns.nn.ReplicationPad1d((0, 2)), X3),
    "CircularPad2d": (lambda ns: ns.nn.CircularPad2d(1), X4),
    "LeakyReLU": (lambda ns: ns.nn.LeakyReLU(0.2), X4),
    "PReLU": (lambda ns: ns.nn.PReLU(), X4),
    "PReLU-channels": (lambda ns: ns.nn.PReLU(4, init=0.1), X4),
    "ELU": (lambda ns: ns.nn.ELU(0.7), X4 * 30),
    "SELU": (lambda ns: ns.nn.SELU(), X4),
    "CELU": (lambda ns: ns.nn.CELU(0.5), X4),
    "Softplus": (lambda ns: ns.nn.Softplus(beta=2, threshold=3), X4 * 3),
    "Hardtanh": (lambda ns: ns.nn.Hardtanh(-0.5, 0.7), X4),
    "ReLU6": (lambda ns: ns.nn.ReLU6(), X4 * 5),
    "LogSigmoid": (lambda ns: ns.nn.LogSigmoid(), X4 * 5),
    "Softsign": (lambda ns: ns.nn.Softsign(), X4),
    "Hardsigmoid": (lambda ns: ns.nn.Hardsigmoid(), X4 * 4),
    "Hardswish": (lambda ns: ns.nn.Hardswish(), X4 * 4),
    "Mish": (lambda ns: ns.nn.Mish(), X4),
    "Tanhshrink": (lambda ns: ns.nn.Tanhshrink(), X4),
    "Softmax": (lambda ns: ns.nn.Softmax(dim=1), X4),
    "LogSoftmax": (lambda ns: ns.nn.LogSoftmax(dim=-1), X4),
    "Softmax2d": (lambda ns: ns.nn.Softmax2d(), X4),
}


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_layer_matches_torch(name):
    make, x = LAYERS[name]
    compare(make, x)


NATIVE = [
    "ConvTranspose2d",
    "Upsample-bilinear",
    "AdaptiveAvgPool2d-uneven",
    "ReflectionPad2d",
    "PReLU-channels",
]


@pytest.mark.native
@pytest.mark.parametrize("name", NATIVE)
def test_layer_matches_torch_natively(name):
    make, x = LAYERS[name]
    compare(make, x, backend="native", tol=1e-4)


# ---------------------------------------------------------------- losses

LOGITS = R.standard_normal((6, 5)).astype(np.float32)
LOGITS3 = R.standard_normal((3, 5, 4)).astype(np.float32)
CLASSES = np.array([0, 3, -100, 4, 1, 3], np.int64)
CLASSES3 = np.array([[0, 3, 1, 4], [2, -100, 0, 0], [4, 4, 1, 2]], np.int64)
WEIGHT = [0.5, 2.0, 1.0, 0.3, 1.5]
PROBS = np.float32(R.random((6, 5)))
PROBS /= PROBS.sum(-1, keepdims=True)
UNIT = np.float32(R.uniform(0.05, 0.95, (6, 5)))


def _weight(ns):
    return ns.tensor(WEIGHT)


# name: (make(ns) -> loss module, input, target)
LOSSES = {
    "CrossEntropyLoss": (lambda ns: ns.nn.CrossEntropyLoss(), LOGITS, CLASSES),
    "CrossEntropyLoss-weight-smoothing": (
        lambda ns: ns.nn.CrossEntropyLoss(weight=_weight(ns), label_smoothing=0.2),
        LOGITS,
        CLASSES,
    ),
    "CrossEntropyLoss-weight-sum-3d": (
        lambda ns: ns.nn.CrossEntropyLoss(weight=_weight(ns), reduction="sum"),
        LOGITS3,
        CLASSES3,
    ),
    "CrossEntropyLoss-probs-weight": (
        lambda ns: ns.nn.CrossEntropyLoss(weight=_weight(ns), label_smoothing=0.1),
        LOGITS,
        PROBS,
    ),
    "NLLLoss-weight": (lambda ns: ns.nn.NLLLoss(weight=_weight(ns)), LOGITS, CLASSES),
    "NLLLoss-none": (lambda ns: ns.nn.NLLLoss(reduction="none", ignore_index=3), LOGITS, CLASSES % 5),
    "BCELoss": (lambda ns: ns.nn.BCELoss(), UNIT, PROBS),
    "BCELoss-weight": (lambda ns: ns.nn.BCELoss(weight=_weight(ns), reduction="sum"), UNIT, PROBS),
    "BCEWithLogitsLoss": (lambda ns: ns.nn.BCEWithLogitsLoss(), LOGITS * 10, PROBS),
    "BCEWithLogitsLoss-pos-weight": (
        lambda ns: ns.nn.BCEWithLogitsLoss(pos_weight=_weight(ns), reduction="none"),
        LOGITS,
        PROBS,
    ),
    "MSELoss": (lambda ns: ns.nn.MSELoss(reduction="sum"), LOGITS, PROBS),
    "L1Loss": (lambda ns: ns.nn.L1Loss(), LOGITS, PROBS),
    "SmoothL1Loss": (lambda ns: ns.nn.SmoothL1Loss(beta=0.5), LOGITS, PROBS),
    "HuberLoss": (lambda ns: ns.nn.HuberLoss(delta=0.7), LOGITS * 2, PROBS),
    "KLDivLoss-batchmean": (lambda ns: ns.nn.KLDivLoss(reduction="batchmean"), LOGITS, PROBS),
    "KLDivLoss-log-target": (
        lambda ns: ns.nn.KLDivLoss(reduction="sum", log_target=True),
        LOGITS,
        np.log(PROBS),
    ),
}


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_loss_matches_torch(name):
    make, x, y = LOSSES[name]
    target = torch.from_numpy(y.copy())
    if y.dtype == np.float32:
        target_tg = y
        spec = (y.shape, "f32")
    else:
        target_tg = y.astype(np.int32)
        spec = (y.shape, "i32")

    def layer(ns):
        class Wrap(ns.nn.Module):
            def __init__(self):
                super().__init__()
                self.loss = make(ns)

        return Wrap()

    tx = torch.from_numpy(x.copy()).requires_grad_(True)
    want = layer(torch).loss(tx, target)
    want.sum().backward()

    class Holder(tgt.nn.Module):
        def __init__(self):
            super().__init__()
            self.x = tgt.nn.Parameter(tgt.tensor(x))
            self.wrap = layer(tgt)

    m = Holder()
    assert set(m.wrap.state_dict()) == set(layer(torch).state_dict())
    tr = tg.compile(
        m,
        lambda m, y: m.wrap.loss(m.x, y).sum(),
        {"y": spec},
        optimizer=tgt.optim.SGD(m.parameters(), lr=1.0),
        backend="reference",
    )
    r = tr.step(y=target_tg)
    np.testing.assert_allclose(r.loss, want.sum().item(), rtol=2e-5, atol=1e-5)
    np.testing.assert_allclose(x - tr.params()["x"], tx.grad.numpy(), rtol=1e-4, atol=1e-5)


def test_loss_refusals_and_range_checks():
    m = tgt.nn.Linear(5, 5)
    with pytest.raises(tg.TraceError, match="label_smoothing"):
        tg.value_and_grad(
            lambda m, x: tgt.nn.functional.cross_entropy(m(x), tgt.tensor([0, 1]), label_smoothing=2.0),
            m,
            x=LOGITS[:2],
        )
    loss = tgt.nn.CrossEntropyLoss(weight=tgt.tensor(WEIGHT))
    tr = tg.compile(
        m,
        lambda m, x, y: loss(m(x), y),
        {"x": (6, 5), "y": ((6,), tgt.long)},
        optimizer=tgt.optim.SGD(m.parameters(), lr=0.1),
        backend="reference",
    )
    with pytest.raises(tg.InputError):  # a class out of range is refused, weights or not
        tr.step(x=LOGITS, y=np.array([0, 1, 2, 3, 4, 5]))
    assert tr.step(x=LOGITS, y=CLASSES).ok  # -100 is ignored


# ---------------------------------------------------------------- Tensor methods, init

TENSOR_METHODS = {
    "log1p": lambda t: t.abs().log1p() + (t * 1e-4).log1p() * 1e4,
    "expm1": lambda t: t.expm1() + (t * 1e-4).expm1() * 1e4,
    "flatten": lambda t: t.flatten(1) * t.flatten().sum(),
    "unflatten": lambda t: t.unflatten(1, (2, 5, 3))[:, 1],
    "new_full": lambda t: t + t.new_zeros(t.shape) + t.new_ones(3, 30) * 2 + t.new_full((1, 30), 0.5),
    "repeat": lambda t: t.repeat(2, 1, 3),
    "var": lambda t: t.var(1) + t.std(0, unbiased=False).sum() + t.var(),
    "norm": lambda t: t.norm(dim=1) + t.norm(),
    "index_select": lambda t: t.index_select(1, (t[0, :4] * 0).long() + 2) * 1.0,
    "t": lambda t: t.t() @ t,
    "expand_as": lambda t: t[:1].expand_as(t) * t.view_as(t).reshape_as(t),
    "unbind": lambda t: t.unbind(0)[1] * 2 + t.unbind(1)[0].sum(),
    "clamp_min": lambda t: t.clamp_min(0.1) + t.clamp_max(-0.2) + t.clone().detach() * t,
    "add": lambda t: t.add(1.0).mul(t).sub(t.neg()).div(2.0),
}


@pytest.mark.parametrize("name", sorted(TENSOR_METHODS))
def test_tensor_method_matches_torch(name):
    fn = TENSOR_METHODS[name]
    x = R.standard_normal((3, 30)).astype(np.float32)
    tx = torch.from_numpy(x.copy()).requires_grad_(True)
    want = fn(tx)
    w = np.random.default_rng(1).standard_normal(tuple(want.shape)).astype(np.float32)
    (want * torch.from_numpy(w)).sum().backward()

    class Holder(tgt.nn.Module):
        def __init__(self):
            super().__init__()
            self.x = tgt.nn.Parameter(tgt.tensor(x))

    value, grads = tg.value_and_grad(lambda m, w: (fn(m.x) * w).sum(), Holder(), w=w)
    np.testing.assert_allclose(value, (want * torch.from_numpy(w)).sum().item(), rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(grads["x"], tx.grad.numpy(), rtol=1e-4, atol=1e-4)


def test_tensor_attributes():
    def f(m, x):
        assert x.is_cuda is False and str(x.device)
        y = tgt.log1p(x.abs()) + tgt.expm1(x * 0.01) + tgt.zeros(3, device=x.device)
        return y.sum()

    value, _ = tg.value_and_grad(f, tgt.nn.Linear(1, 1), x=np.ones((2, 3), np.float32))
    np.testing.assert_allclose(value, 6 * (np.log1p(1.0) + np.expm1(0.01)), rtol=1e-6)


def test_len_of_a_traced_tensor_is_its_first_axis():
    """PyTorch's examples write len(src) (the word-language model's batchify, loops)."""

    def f(m, x):
        assert len(x) == 2 and len(x[0]) == 3 and len(x.T) == 3
        with pytest.raises(TypeError, match="len\\(\\) of a 0-d tensor"):
            len(x.sum())
        return x.sum() * len(x)

    value, _ = tg.value_and_grad(f, tgt.nn.Linear(1, 1), x=np.ones((2, 3), np.float32))
    assert float(value) == 12.0


def test_init_orthogonal_and_gain():
    for shape in [(5, 8), (8, 5), (4, 2, 3)]:
        p = tgt.nn.Parameter(tgt.zeros(*shape))
        tgt.nn.init.orthogonal_(p, gain=2.0)
        a = np.asarray(p.value, np.float64).reshape(shape[0], -1)
        small = a @ a.T if a.shape[0] <= a.shape[1] else a.T @ a
        np.testing.assert_allclose(small, 4.0 * np.eye(small.shape[0]), atol=1e-5)
    gains = [("relu", None), ("leaky_relu", None), ("leaky_relu", 0.2), ("tanh", None), ("selu", None)]
    for name, param in gains:
        want = torch.nn.init.calculate_gain(name, param)
        assert tgt.nn.init.calculate_gain(name, param) == pytest.approx(want)


# ---------------------------------------------------------------- data constants


class Weighted(tgt.nn.Module):
    """A class-weight table and a target table made from data inside forward."""

    def __init__(self):
        super().__init__()
        self.fc = tgt.nn.Linear(4, 3)

    def forward(self, x):
        weight = tgt.tensor([0.2, 1.0, 3.0])
        target = tgt.tensor(np.array([[0, 2, 1, 2]]))[0]
        mask = tgt.tensor([[True], [False], [True], [True]])
        return tgt.nn.functional.cross_entropy(self.fc(x) * mask, target, weight=weight)


@pytest.mark.parametrize("backend", ["reference", pytest.param("native", marks=pytest.mark.native)])
def test_data_constants_inside_forward(backend):
    """Data made inside forward is a constant of the graph: f32, int64 (as i32) and bool,
    equal to PyTorch's loss step by step; the Program carries it (and its JSON)."""
    from tgweb.program import Program

    x = R.standard_normal((4, 4)).astype(np.float32)
    m = Weighted()
    tm = torch.nn.Linear(4, 3)
    tm.load_state_dict({k: torch.from_numpy(np.asarray(v).copy()) for k, v in m.fc.state_dict().items()})
    topt = torch.optim.SGD(tm.parameters(), lr=0.5)
    opt = tgt.optim.SGD(m.parameters(), lr=0.5)
    tr = tg.compile(m, lambda m, x: m(x), {"x": (4, 4)}, opt, backend=backend)
    mask = torch.tensor([[1.0], [0.0], [1.0], [1.0]])
    for _ in range(3):
        want = torch.nn.functional.cross_entropy(
            tm(torch.from_numpy(x)) * mask, torch.tensor([0, 2, 1, 2]), weight=torch.tensor([0.2, 1.0, 3.0])
        )
        topt.zero_grad()
        want.backward()
        topt.step()
        assert tr.step(x=x).loss == pytest.approx(want.item(), rel=1e-5, abs=1e-6)
    prog = tr.program
    assert sorted(s.dtype for s in prog.constants.values()) == ["bool", "f32", "i32"]
    again = Program.from_json(prog.to_json())
    assert again.data == prog.data and again.constants == prog.constants


def test_large_data_constant_is_refused_with_its_size():
    big = np.zeros((600, 500), np.float32)  # 1.2 MB

    def f(m, x):
        return (m(x) * tgt.tensor(big).sum()).sum()

    with pytest.raises(tg.TraceError, match="1,200,000 bytes"):
        tg.value_and_grad(f, tgt.nn.Linear(2, 2), x=np.ones((1, 2), np.float32))
