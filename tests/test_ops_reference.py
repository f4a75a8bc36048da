"""Reference implementations of the nn, conv and random ops against PyTorch (CPU)
and against the documented PRNG algorithm."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import tgweb as tg
from tgweb.backends.reference import Context, evaluate
from tgweb.grad import append_grad
from tgweb.ir import Graph, tracing
from tgweb.ops import random as tgrandom


def run(fn, arrays: dict, grad_of: list[str] = (), precision="float64", seed=None, cot=None):
    """(output, {input: d sum(output * cot) / d input}) evaluated by the reference backend."""
    g = Graph()
    with tracing(g):
        feeds = {k: g.input(k, a.shape, "i32" if a.dtype.kind in "iu" else "f32") for k, a in arrays.items()}
        out = fn(**feeds)
        loss = None
        if grad_of:
            c = g.input("_cot", out.shape)
            loss = tg.sum(out * c)
    ctx = Context(precision)
    if seed is not None:
        ctx.scalars["seed"] = seed
    vals = dict(arrays)
    ids = {feeds[k].id: v for k, v in vals.items()}
    outs = [out]
    if grad_of:
        ids[c.id] = cot if cot is not None else np.ones(out.shape)
        grads = append_grad(g, loss, [feeds[k] for k in grad_of])
        outs += [grads[feeds[k].id] for k in grad_of]
    res = evaluate(g, outs, ids, ctx)
    return res[0], dict(zip(grad_of, res[1:]))


def torch_grads(fn, arrays: dict, grad_of, cot):
    ts = {
        k: torch.tensor(a, requires_grad=k in grad_of)
        if a.dtype.kind == "f"
        else torch.tensor(a.astype(np.int64))
        for k, a in arrays.items()
    }
    out = fn(**ts)
    (out * torch.tensor(cot)).sum().backward()
    return out.detach().numpy(), {k: ts[k].grad.numpy() for k in grad_of}


def compare(tg_fn, torch_fn, arrays, grad_of=(), rtol=1e-9, atol=1e-10):
    rng = np.random.default_rng(1)
    out, _ = run(tg_fn, arrays)
    cot = rng.normal(size=out.shape)
    out, grads = run(tg_fn, arrays, list(grad_of), cot=cot)
    t_out, t_grads = torch_grads(torch_fn, arrays, list(grad_of), cot)
    np.testing.assert_allclose(out, t_out, rtol=rtol, atol=atol)
    for k in grad_of:
        np.testing.assert_allclose(grads[k], t_grads[k], rtol=rtol, atol=atol, err_msg=k)


R = np.random.default_rng(0)


@pytest.mark.parametrize("shape,axis", [((3, 7), -1), ((3, 7), 0), ((2, 1, 7), 1), ((7,), 0)])
def test_softmax_and_log_softmax_match_torch(shape, axis):
    x = R.normal(size=shape) * 3
    compare(lambda x: tg.softmax(x, axis), lambda x: F.softmax(x, axis), {"x": x}, ["x"])
    compare(lambda x: tg.log_softmax(x, axis), lambda x: F.log_softmax(x, axis), {"x": x}, ["x"])


@pytest.mark.parametrize("shape", [(5, 5), (2, 3, 7, 7), (3, 7)])
def test_causal_softmax_matches_masked_torch_softmax(shape):
    x = R.normal(size=shape)
    t_, s_ = shape[-2:]

    def ref(x):
        mask = torch.ones(t_, s_, dtype=torch.bool).tril()
        return F.softmax(x.masked_fill(~mask, float("-inf")), -1)

    compare(lambda x: tg.causal_softmax(x), ref, {"x": x}, ["x"])
    out, _ = run(lambda x: tg.causal_softmax(x), {"x": x})
    assert np.all(out[..., 0, 1:] == 0.0)  # hidden weights are exactly zero


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_and_nll_match_torch(reduction):
    logits = R.normal(size=(6, 7)) * 2
    targets = R.integers(0, 7, size=(6,)).astype(np.int32)
    compare(
        lambda x, t: tg.cross_entropy(x, t, reduction=reduction),
        lambda x, t: F.cross_entropy(x, t, reduction=reduction),
        {"x": logits, "t": targets},
        ["x"],
    )
    compare(
        lambda x, t: tg.nll_loss(x, t, reduction=reduction),
        lambda x, t: F.nll_loss(x, t, reduction=reduction),
        {"x": logits, "t": targets},
        ["x"],
    )
    # class axis last for higher ranks; torch wants it second
    l3 = R.normal(size=(2, 3, 7))
    t3 = R.integers(0, 7, size=(2, 3)).astype(np.int32)
    compare(
        lambda x, t: tg.cross_entropy(x, t, reduction=reduction),
        lambda x, t: F.cross_entropy(x.permute(0, 2, 1), t, reduction=reduction),
        {"x": l3, "t": t3},
        ["x"],
    )


def test_cross_entropy_with_probabilities_and_mse_match_torch():
    logits = R.normal(size=(4, 7))
    p = R.dirichlet(np.ones(7), size=4)
    compare(
        lambda x, p: tg.cross_entropy(x, p),
        lambda x, p: F.cross_entropy(x, p),
        {"x": logits, "p": p},
        ["x", "p"],
    )
    a, b = R.normal(size=(3, 7)), R.normal(size=(3, 7))
    for red in ("mean", "sum", "none"):
        compare(
            lambda a, b: tg.mse_loss(a, b, red),
            lambda a, b: F.mse_loss(a, b, reduction=red),
            {"a": a, "b": b},
            ["a", "b"],
        )


def test_embedding_one_hot_take_along_axis_match_torch():
    w = R.normal(size=(7, 3))
    idx = np.array([[0, 6, 6], [2, 2, 1]], np.int32)  # repeats: the scatter must add
    compare(lambda w, i: tg.embedding(w, i), lambda w, i: F.embedding(i, w), {"w": w, "i": idx}, ["w"])
    out, _ = run(lambda i: tg.one_hot(i, 7), {"i": idx})
    np.testing.assert_array_equal(out, F.one_hot(torch.tensor(idx.astype(np.int64)), 7).numpy())
    x = R.normal(size=(3, 7))
    j = np.array([[0, 0], [6, 1], [3, 3]], np.int32)
    compare(
        lambda x, j: tg.take_along_axis(x, j, 1),
        lambda x, j: torch.take_along_dim(x, j, 1),
        {"x": x, "j": j},
        ["x"],
    )


def test_out_of_range_indices_give_zeros():
    w = R.normal(size=(4, 2))
    out, grads = run(lambda w, i: tg.embedding(w, i), {"w": w, "i": np.array([-1, 4, 1], np.int32)}, ["w"])
    np.testing.assert_array_equal(out[:2], 0)
    np.testing.assert_array_equal(grads["w"], np.array([[0, 0], [1, 1], [0, 0], [0, 0]]))
    out, _ = run(lambda i: tg.one_hot(i, 3), {"i": np.array([3, -1], np.int32)})
    np.testing.assert_array_equal(out, 0)


CONVS = [
    ((2, 3, 7, 5), (4, 3, 3, 3), 1, 1, 1),
    ((1, 3, 8, 7), (2, 3, 3, 2), 2, 0, 1),
    ((1, 4, 5, 6), (8, 1, 3, 3), (2, 1), (1, 2), 4),
    ((3, 4, 3, 3), (2, 2, 1, 1), 1, 0, 2),
    ((1, 1, 1, 1), (3, 1, 1, 1), 1, 0, 1),
]


@pytest.mark.parametrize("xs,ws,stride,padding,groups", CONVS)
def test_conv2d_matches_torch(xs, ws, stride, padding, groups):
    arrays = {"x": R.normal(size=xs), "w": R.normal(size=ws), "b": R.normal(size=ws[:1])}
    compare(
        lambda x, w, b: tg.conv2d(x, w, b, stride=stride, padding=padding, groups=groups),
        lambda x, w, b: F.conv2d(x, w, b, stride=stride, padding=padding, groups=groups),
        arrays,
        ["x", "w", "b"],
    )


POOLS = [
    ((2, 3, 6, 7), 2, None, 0),
    ((1, 2, 7, 7), 3, 2, 1),
    ((1, 1, 3, 7), (3, 1), 1, 0),
    ((2, 1, 5, 5), (2, 3), (1, 2), (1, 1)),
    ((1, 1, 4, 4), 3, 1, 1),
]


@pytest.mark.parametrize("xs,k,s,p", POOLS)
def test_pools_match_torch(xs, k, s, p):
    x = R.permutation(np.prod(xs)).reshape(xs) * 0.1  # distinct values: one winner per window
    compare(lambda x: tg.max_pool2d(x, k, s, p), lambda x: F.max_pool2d(x, k, s, p), {"x": x}, ["x"])
    compare(lambda x: tg.avg_pool2d(x, k, s, p), lambda x: F.avg_pool2d(x, k, s, p), {"x": x}, ["x"])


def test_max_pool_ties_go_to_the_first_maximum():
    x = np.zeros((1, 1, 2, 2))
    out, grads = run(lambda x: tg.max_pool2d(x, 2), {"x": x}, ["x"])
    np.testing.assert_array_equal(grads["x"], [[[[1, 0], [0, 0]]]])


def test_max_pool_window_without_a_winner():
    # a window of only -inf has no winner (as the WGSL kernels): -inf out, no gradient
    x = np.array([[[[1.0, 2.0, -np.inf, -np.inf], [0.0, 3.0, -np.inf, -np.inf]]]])
    out, grads = run(lambda x: tg.max_pool2d(x, 2), {"x": x}, ["x"])
    np.testing.assert_array_equal(out, [[[[3.0, -np.inf]]]])
    np.testing.assert_array_equal(grads["x"], [[[[0, 0, 0, 0], [0, 1, 0, 0]]]])


def test_upsample_nearest_matches_torch():
    x = R.normal(size=(2, 3, 3, 5))
    compare(
        lambda x: tg.upsample_nearest2d(x, 2),
        lambda x: F.interpolate(x, scale_factor=2, mode="nearest"),
        {"x": x},
        ["x"],
    )
    compare(
        lambda x: tg.upsample_nearest2d(x, (3, 1)),
        lambda x: F.interpolate(x, scale_factor=(3, 1), mode="nearest"),
        {"x": x},
        ["x"],
    )


# ------------------------------------------------------------------ PRNG


def test_lowbias32_known_values():
    # the hash of the module docstring, computed independently in 64-bit integers
    def h(x):
        x ^= x >> 16
        x = (x * 0x7FEB352D) % 2**32
        x ^= x >> 15
        x = (x * 0x846CA68B) % 2**32
        return x ^ (x >> 16)

    for v in (0, 1, 2, 12345, 2**31, 2**32 - 1):
        assert tgrandom.lowbias32(v) == h(v)
    # test vectors for the WGSL kernels: bits(seed, stream, counter)
    assert [tgrandom.lowbias32(v) for v in (0, 1, 2, 12345)] == [0x0, 0x688990C0, 0xD1132181, 0x912EFCF7]
    assert [
        tgrandom.bits(*a) for a in [(0, 0, 0), (0, 0, 1), (1, 0, 0), (0, 1, 0), (123456789, 3, 1000)]
    ] == [0x648AB328, 0xBBA9E397, 0x64D2D1C3, 0x59908BFB, 0xAD22F31C]
    assert tgrandom.uniform(0, 0, 0) == (0x648AB328 >> 8) / 2**24


@pytest.mark.parametrize("seed", [0, 7, 2**31 + 5, 2**32 - 1])
def test_rand_reference_is_the_documented_algorithm(seed):
    out, _ = run(lambda: tg.rand((3, 7)) + tg.rand((2,)).sum() * 0.0, {}, seed=seed, precision="float32")
    want = np.array([tgrandom.uniform(seed, 0, i) for i in range(21)], np.float32).reshape(3, 7)
    np.testing.assert_array_equal(out, want)
    assert out.min() >= 0 and out.max() < 1


def test_randn_reference_is_the_documented_algorithm():
    out, _ = run(lambda: tg.randn((5,)), {}, seed=3, precision="float64")
    want = []
    for i in range(5):
        u1, u2 = tgrandom.uniform(3, 0, 2 * i), tgrandom.uniform(3, 0, 2 * i + 1)
        want.append(math.sqrt(-2 * math.log(1 - u1)) * math.cos(2 * math.pi * u2))
    np.testing.assert_allclose(out, want, rtol=1e-12)


def test_random_statistics_streams_and_seeds():
    a, _ = run(lambda: tg.concat([tg.rand((20000,)), tg.rand((20000,))]), {}, seed=1)
    u1, u2 = a[:20000], a[20000:]
    assert abs(u1.mean() - 0.5) < 0.01 and abs(u1.var() - 1 / 12) < 0.005
    assert abs(np.corrcoef(u1, u2)[0, 1]) < 0.03  # two ops: two streams
    b, _ = run(lambda: tg.rand((20000,)), {}, seed=2)
    assert not np.array_equal(b, u1)
    c, _ = run(lambda: tg.rand((20000,)), {}, seed=1)
    np.testing.assert_array_equal(c, u1)
    n, _ = run(lambda: tg.randn((20000,)), {}, seed=5)
    assert abs(n.mean()) < 0.03 and abs(n.std() - 1) < 0.03


def test_dropout_and_categorical():
    x = np.ones((100, 100))
    out, grads = run(lambda x: tg.dropout(x, 0.25), {"x": x}, ["x"], seed=9)
    kept = out != 0
    assert abs(kept.mean() - 0.75) < 0.02
    np.testing.assert_allclose(out[kept], 1 / 0.75)
    np.testing.assert_allclose(grads["x"], out)  # the same mask forward and backward
    same, _ = run(lambda x: tg.dropout(x, 0.25, training=False), {"x": x})
    np.testing.assert_array_equal(same, x)
    logits = np.log(np.array([0.1, 0.2, 0.7]))
    s, _ = run(lambda x: tg.categorical(tg.broadcast_to(x, (30000, 3))), {"x": logits}, seed=4)
    assert s.dtype == np.int32
    freq = np.bincount(s, minlength=3) / s.size
    np.testing.assert_allclose(freq, [0.1, 0.2, 0.7], atol=0.015)


def test_nn_dropout_layer():
    m = tg.nn.Dropout(0.5)
    out, _ = run(lambda x: m(x), {"x": np.ones((4, 4))}, seed=0)
    assert set(np.unique(out)) <= {0.0, 2.0}
    m.eval()
    out, _ = run(lambda x: m(x), {"x": np.ones((4, 4))})
    np.testing.assert_array_equal(out, 1.0)


def test_value_and_grad_runs_stochastic_models():
    class M(tg.nn.Module):
        def __init__(self):
            self.lin = tg.nn.Linear(3, 1)
            self.drop = tg.nn.Dropout(0.5)

        def forward(self, x):
            return self.lin(self.drop(x))

    loss, grads = tg.value_and_grad(lambda m, x: m(x).mean(), M(), x=np.ones((8, 3), np.float32))
    assert np.isfinite(loss) and grads["lin.weight"].shape == (1, 3)
