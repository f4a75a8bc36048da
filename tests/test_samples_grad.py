"""The sin and addition samples trace, differentiate and evaluate in the reference
backend; whole-model gradients pass a float64 finite-difference spot check and
match tg.value_and_grad and an independent PyTorch model."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import tgweb as tg
from tgweb.backends.reference import Context, evaluate
from tgweb.grad import append_grad
from tgweb.samples import addition, get, sin
from tgweb.trace import scalar_loss, trace


def feeds_of(sample, data: dict, n: int | None = None) -> dict:
    """NumPy arrays shaped as sample.INPUTS from a batch() dict (first n rows)."""
    out = {}
    for k, spec in sample.INPUTS.items():
        shape, dt = spec if isinstance(spec[1], str) else (spec, "f32")
        a = np.array(data[k], np.float32 if dt == "f32" else np.int32).reshape(shape)
        out[k] = a[:n] if n else a
    return out


class Float64Loss:
    """The sample's loss and its gradients as a graph, evaluated in float64 with
    parameters given as float64 arrays."""

    def __init__(self, sample, model, arrays):
        specs = {k: (a.shape, "i32" if a.dtype.kind == "i" else "f32") for k, a in arrays.items()}
        self.graph, out = trace(sample.loss_fn, model, specs)
        self.loss = scalar_loss(out)
        self.names = list(self.graph.params)
        grads = append_grad(self.graph, self.loss, [self.graph.params[n] for n in self.names])
        self.grads = [grads[self.graph.params[n].id] for n in self.names]
        self.inputs = {self.graph.inputs[k].id: a for k, a in arrays.items()}
        self.ctx = Context("float64")

    def __call__(self, params: dict, with_grads=False):
        feeds = dict(self.inputs)
        feeds.update({self.graph.params[n].id: params[n] for n in self.names})
        outs = [self.loss] + (self.grads if with_grads else [])
        vals = evaluate(self.graph, outs, feeds, self.ctx)
        return vals[0][()], dict(zip(self.names, vals[1:]))


def model_params64(model) -> dict:
    return {n: np.array(p.value, np.float64).reshape(p.shape) for n, p in model.named_parameters()}


def fd_spot_check(sample, model, arrays, per_param=2, seed=0):
    f = Float64Loss(sample, model, arrays)
    params = model_params64(model)
    loss, grads = f(params, with_grads=True)
    rng = np.random.default_rng(seed)
    eps = 1e-6
    checked = 0
    for name in f.names:
        g = grads[name]
        # the largest entry plus random ones
        picks = [np.unravel_index(np.abs(g).argmax(), g.shape)]
        picks += [np.unravel_index(i, g.shape) for i in rng.integers(0, g.size, per_param - 1)]
        for pos in picks:
            plus = dict(params, **{name: params[name].copy()})
            minus = dict(params, **{name: params[name].copy()})
            plus[name][pos] += eps
            minus[name][pos] -= eps
            num = (f(plus)[0] - f(minus)[0]) / (2 * eps)
            assert abs(num - g[pos]) <= 1e-6 * max(1.0, abs(num)) + 1e-9, (
                f"{name}{pos}: analytic {g[pos]} vs numeric {num}"
            )
            checked += 1
    return loss, grads, checked


# ------------------------------------------------------------------ sin


def test_sin_sample_surface():
    assert get("sin") is sin and get("addition") is addition
    m = sin.Model()
    assert [n for n, _ in m.named_parameters()] == [
        "net.0.weight",
        "net.0.bias",
        "net.2.weight",
        "net.2.bias",
        "net.4.weight",
        "net.4.bias",
    ]
    assert m.num_params() == 64 + 64 + 64 * 64 + 64 + 64 + 1
    b = sin.batch(5, 3)
    assert b == sin.batch(5, 3) and b != sin.batch(6, 3) and b != sin.batch(5, 4)
    assert len(b["x"]) == sin.BATCH and all(-math.pi <= v <= math.pi for v in b["x"])
    assert all(abs(math.sin(x) - y) < 1e-6 for x, y in zip(b["x"], b["y"]))
    assert len(sin.GRID) == 200 and sin.GRID[0] == -math.pi and abs(sin.GRID[-1] - math.pi) < 1e-12
    assert sin.metric(lambda feeds: [[math.sin(x)] for x in feeds["x"]]) < 1e-12
    assert abs(sin.metric(lambda feeds: [0.0] * 200) - 199 / 400) < 1e-9
    assert sin.OPTIMIZER["name"] == "adam" and sin.OPTIMIZER["lr"] == 5e-3


def test_sin_gradients():
    m = sin.Model()
    m.init_params(1)
    arrays = feeds_of(sin, sin.batch(0, 0))
    loss, grads, checked = fd_spot_check(sin, m, arrays, per_param=3)
    assert checked == 18
    loss32, grads32 = tg.value_and_grad(sin.loss_fn, m, **arrays)
    assert abs(loss32 - loss) <= 1e-5 * abs(loss)
    for n, g in grads.items():
        np.testing.assert_allclose(grads32[n], g, rtol=2e-4, atol=1e-6 * np.abs(g).max())


def test_sin_forward_on_the_grid_and_a_few_descent_steps():
    m = sin.Model()
    m.init_params(0)
    g, out = trace(sin.forward, m, sin.EVAL_INPUTS)
    params = {
        g.params[n].id: np.frombuffer(p.value, np.float32).reshape(p.shape) for n, p in m.named_parameters()
    }

    def predict(feeds):
        x = np.array(feeds["x"], np.float32).reshape(200, 1)
        return evaluate(g, [out], {**params, g.inputs["x"].id: x})[0]

    before = sin.metric(predict)
    arrays = feeds_of(sin, sin.batch(0, 0))
    f = Float64Loss(sin, m, arrays)
    p64 = model_params64(m)
    first, _ = f(p64)
    for _ in range(20):
        _, grads = f(p64, with_grads=True)
        p64 = {n: v - 0.05 * grads[n] for n, v in p64.items()}
    assert f(p64)[0] < 0.9 * first
    assert np.isfinite(before) and before > 0


# ------------------------------------------------------------------ addition


def test_addition_data():
    assert len(addition.TEST_PAIRS) == 2000 and len(addition.TRAIN_PAIRS) == 8000
    assert addition.sequence(47, 85) == [4, 7, 10, 8, 5, 11, 2, 3, 1]
    assert addition.sequence(5, 3) == [0, 5, 10, 0, 3, 11, 8, 0, 0]
    b = addition.batch(0, 7)
    assert b == addition.batch(0, 7) and b != addition.batch(1, 7)
    toks, tgts = list(b["tokens"]), list(b["targets"])
    assert len(toks) == len(tgts) == addition.BATCH * 8
    test = set(addition.TEST_PAIRS)
    for r in range(addition.BATCH):
        row = toks[r * 8 : (r + 1) * 8] + tgts[r * 8 + 7 : (r + 1) * 8]
        assert tgts[r * 8 : (r + 1) * 8] == row[1:]
        a, c = row[0] * 10 + row[1], row[3] * 10 + row[4]
        assert row == addition.sequence(a, c) and (a, c) not in test


def test_addition_metric_with_oracles():
    def oracle(feeds, corrupt=False):
        t = list(feeds["tokens"])
        out = np.zeros((len(t) // 8, 8, 12))
        for i in range(len(t) // 8):
            r = t[i * 8 : i * 8 + 8]
            s = addition.sequence(r[0] * 10 + r[1], r[3] * 10 + r[4])
            for p in range(8):
                # answer digits from the fed-back tokens: greedy decoding must feed them in
                want = s[p + 1]
                if p == 6 and corrupt and r[6] != s[6]:
                    want = (want + 1) % 10
                out[i, p, want] = 1.0
        return out

    assert addition.metric(oracle) == 1.0
    assert addition.metric(lambda f: np.zeros((250, 8, 12))) < 0.05
    pairs = addition.TEST_PAIRS[:30]
    answers = addition.greedy_answers(oracle, pairs, batch_size=7)
    assert answers == [addition.sequence(a, c)[6:] for a, c in pairs]


def test_addition_model_structure():
    m = addition.Model()
    names = [n for n, _ in m.named_parameters()]
    assert names[:2] == ["tok.weight", "pos"]
    assert "blocks.0.attn.q.weight" in names and "blocks.2.fc2.bias" in names
    assert not any(n.startswith("blocks.0.attn.") and n.endswith("bias") for n in names)
    per_block = 4 * 64 * 64 + 2 * 2 * 64 + 64 * 256 + 256 + 256 * 64 + 64
    assert m.num_params() == 12 * 64 + 9 * 64 + 3 * per_block + 2 * 64
    g, logits = trace(addition.forward, m, addition.EVAL_INPUTS)
    assert logits.shape == (250, 8, 12)
    assert g.captures["attn0"].shape == (250, 4, 8, 8)
    m.init_params(0)
    w = np.array(m.tok.weight.value)
    assert abs(w.std() - 0.02) < 0.004 and abs(w.mean()) < 0.004


def torch_addition_loss(state: dict, tokens, targets):
    """The addition model written independently in PyTorch (float64)."""
    p = {k: torch.tensor(v, dtype=torch.float64, requires_grad=True) for k, v in state.items()}
    tok = torch.tensor(tokens.astype(np.int64))
    b, t = tok.shape
    x = p["tok.weight"][tok] + p["pos"][:t]
    mask = torch.ones(t, t, dtype=torch.bool).tril()

    def ln(x, pre):
        return F.layer_norm(x, (64,), p[pre + ".weight"], p[pre + ".bias"], 1e-5)

    attn0 = None
    for i in range(3):
        pre = f"blocks.{i}."
        h = ln(x, pre + "ln1")
        q, k, v = (F.linear(h, p[pre + f"attn.{n}.weight"]).view(b, t, 4, 16).transpose(1, 2) for n in "qkv")
        s = (q @ k.transpose(-1, -2)) / 4.0
        w = F.softmax(s.masked_fill(~mask, float("-inf")), -1)
        attn0 = w if attn0 is None else attn0
        y = (w @ v).transpose(1, 2).reshape(b, t, 64)
        x = x + F.linear(y, p[pre + "attn.o.weight"])
        h = ln(x, pre + "ln2")
        h = F.relu(F.linear(h, p[pre + "fc1.weight"], p[pre + "fc1.bias"]))
        x = x + F.linear(h, p[pre + "fc2.weight"], p[pre + "fc2.bias"])
    logits = ln(x, "ln_f") @ p["tok.weight"].T
    tg_ = torch.tensor(targets.astype(np.int64))
    loss = F.cross_entropy(logits[:, 5:8].reshape(-1, 12), tg_[:, 5:8].reshape(-1))
    loss.backward()
    return loss.item(), {k: v.grad.numpy() for k, v in p.items()}, attn0.detach().numpy()


def test_addition_gradients_fd_torch_and_value_and_grad():
    m = addition.Model()
    m.init_params(3)
    # larger weights than the init so that every path carries a visible gradient
    state = {
        n: v * (5.0 if v.ndim == 2 and not n.startswith("tok") else 1.0) for n, v in model_params64(m).items()
    }
    m.load_state_dict({n: v.astype(np.float32) for n, v in state.items()})
    state = model_params64(m)
    arrays = feeds_of(addition, addition.batch(0, 0), n=16)
    loss, grads, checked = fd_spot_check(addition, m, arrays, per_param=1)
    assert checked == len(grads) == 40
    assert abs(loss - math.log(12)) < 1.5
    assert np.all(grads["pos"][8] == 0)  # the ninth position is never used
    t_loss, t_grads, t_attn = torch_addition_loss(state, arrays["tokens"], arrays["targets"])
    assert abs(t_loss - loss) < 1e-10
    for n, g in grads.items():
        np.testing.assert_allclose(g, t_grads[n], rtol=1e-7, atol=1e-12, err_msg=n)
    loss32, grads32 = tg.value_and_grad(addition.loss_fn, m, **arrays)
    assert abs(loss32 - loss) < 1e-4
    for n, g in grads.items():
        np.testing.assert_allclose(grads32[n], g, rtol=1e-2, atol=2e-3 * np.abs(g).max(), err_msg=n)
    # the attention capture equals torch's first-block weights
    g_, logits = trace(addition.forward, m, {"tokens": ((16, 8), "i32")})
    feeds = {g_.params[n].id: v for n, v in state.items()}
    feeds[g_.inputs["tokens"].id] = arrays["tokens"]
    (attn,) = evaluate(g_, [g_.captures["attn0"]], feeds, Context("float64"))
    np.testing.assert_allclose(attn, t_attn, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("name", ["sin", "addition"])
def test_optimizer_settings_are_plain_data(name):
    import json

    s = get(name)
    json.dumps(s.OPTIMIZER)
    json.dumps(s.SUCCESS)
    assert set(s.OPTIMIZER) >= {"name", "lr", "schedule", "weight_decay", "clip"}
