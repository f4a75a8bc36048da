"""Issue 15's ops and layers against PyTorch's own functions on random inputs, forward
and gradient, in float64 on the reference backend; their argument errors; the
containers' state-dict keys against torch.nn's."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from test_ops_reference import compare, run

import tgweb as tg
from tgweb import nn
from tgweb.ir import make

R = np.random.default_rng(15)


def normal(*shape):
    return R.normal(size=shape)


# ---------------------------------------------------------------- rope
# PyTorch has no rope function; these are the two published conventions written in torch


def _inv_freq(d, base):
    return 1.0 / base ** (torch.arange(0, d, 2, dtype=torch.float64) / d)


def hf_rope(x, pos, base):  # Hugging Face Llama: x * cos + rotate_half(x) * sin
    d = x.shape[-1]
    freqs = pos.unsqueeze(-1).double() * _inv_freq(d, base)
    emb = torch.cat([freqs, freqs], -1)
    rotated = torch.cat([-x[..., d // 2 :], x[..., : d // 2]], -1)
    return x * emb.cos() + rotated * emb.sin()


def meta_rope(x, pos, base):  # GPT-J / Meta Llama: adjacent pairs as complex numbers
    d = x.shape[-1]
    freqs = pos.unsqueeze(-1).double() * _inv_freq(d, base)
    xc = torch.view_as_complex(x.reshape(*x.shape[:-1], d // 2, 2).contiguous())
    return torch.view_as_real(xc * torch.polar(torch.ones_like(freqs), freqs)).reshape(x.shape)


@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("shape,pos_shape,base", [((2, 3, 7, 8), None, 10000.0), ((3, 5, 6), (5,), 500.0)])
def test_rope_matches_both_conventions(interleaved, shape, pos_shape, base):
    want = meta_rope if interleaved else hf_rope
    x = normal(*shape)
    if pos_shape is None:
        compare(
            lambda x: tg.rope(x, base=base, interleaved=interleaved),
            lambda x: want(x, torch.arange(shape[-2]), base),
            {"x": x},
            ["x"],
        )
        return
    pos = R.integers(0, 100, pos_shape).astype(np.int32)
    compare(
        lambda x, p: tg.rope(x, p, base=base, interleaved=interleaved),
        lambda x, p: want(x, p, base),
        {"x": x, "p": pos},
        ["x"],
    )


def test_rope_positions_per_batch_row_and_the_layer():
    x, pos = normal(2, 3, 5, 4), R.integers(0, 50, (2, 1, 5)).astype(np.int32)
    rot = nn.RotaryEmbedding(4, base=100.0)
    compare(lambda x, p: rot(x, p), lambda x, p: hf_rope(x, p, 100.0), {"x": x, "p": pos}, ["x"])


# ---------------------------------------------------------------- convolution


@pytest.mark.parametrize(
    "xs,ws,kw",
    [
        ((2, 3, 9, 8), (4, 3, 3, 3), {"dilation": 2, "padding": 1}),
        ((1, 4, 9, 7), (6, 2, 3, 2), {"dilation": (2, 1), "stride": 2, "groups": 2}),
        ((2, 2, 6, 7), (3, 2, 3, 3), {"padding": "same", "dilation": 2}),
        ((1, 2, 6, 7), (3, 2, 2, 4), {"padding": "same"}),  # even kernels: the extra pad goes last
        ((1, 2, 6, 7), (3, 2, 3, 2), {"padding": "valid", "stride": (1, 2)}),
    ],
)
def test_conv2d_dilation_and_string_padding_match_torch(xs, ws, kw):
    b = normal(ws[0])
    compare(
        lambda x, w, b: tg.conv2d(x, w, b, **kw),
        lambda x, w, b: F.conv2d(x, w, b, **kw),
        {"x": normal(*xs), "w": normal(*ws), "b": b},
        ["x", "w", "b"],
    )


@pytest.mark.parametrize(
    "xs,ws,kw",
    [
        ((2, 3, 4, 5), (3, 2, 3, 3), {}),
        ((1, 4, 3, 4), (4, 3, 3, 2), {"stride": 2, "padding": 1, "output_padding": 1, "groups": 2}),
        ((1, 2, 4, 3), (2, 3, 2, 3), {"stride": (2, 3), "dilation": 2, "padding": (1, 0)}),
        # output_padding past the stride (allowed under dilation): rows conv never sees
        ((1, 2, 3, 3), (2, 1, 3, 2), {"stride": 1, "dilation": 3, "output_padding": 2}),
    ],
)
def test_conv_transpose2d_matches_torch(xs, ws, kw):
    b = normal(ws[1] * kw.get("groups", 1))
    compare(
        lambda x, w, b: tg.conv_transpose2d(x, w, b, **kw),
        lambda x, w, b: F.conv_transpose2d(x, w, b, **kw),
        {"x": normal(*xs), "w": normal(*ws), "b": b},
        ["x", "w", "b"],
    )


# ---------------------------------------------------------------- pooling


POOLS = [
    ((2, 3, 7, 7), 3, 2, 1, True),
    ((1, 2, 8, 6), 2, 2, 0, True),
    ((1, 2, 5, 9), (3, 2), (2, 3), (1, 1), True),
    ((1, 1, 5, 5), 2, 2, 1, True),  # a 4th ceil window would start in the padding: dropped
    ((1, 2, 8, 7), 3, 2, 0, True),
    ((2, 2, 7, 6), 3, 2, 1, False),
]


@pytest.mark.parametrize("xs,k,s,p,ceil", POOLS)
def test_max_pool2d_ceil_mode_matches_torch(xs, k, s, p, ceil):
    x = R.permutation(int(np.prod(xs))).reshape(xs) * 0.01  # no ties
    compare(
        lambda x: tg.max_pool2d(x, k, s, p, ceil_mode=ceil),
        lambda x: F.max_pool2d(x, k, s, p, ceil_mode=ceil),
        {"x": x},
        ["x"],
    )


@pytest.mark.parametrize("count_pad", [True, False])
@pytest.mark.parametrize("xs,k,s,p,ceil", POOLS)
def test_avg_pool2d_options_match_torch(xs, k, s, p, ceil, count_pad):
    compare(
        lambda x: tg.avg_pool2d(x, k, s, p, ceil_mode=ceil, count_include_pad=count_pad),
        lambda x: F.avg_pool2d(x, k, s, p, ceil_mode=ceil, count_include_pad=count_pad),
        {"x": normal(*xs)},
        ["x"],
    )


def test_pool_layers_match_torch_layers():
    x = normal(2, 3, 9, 7)
    for ours, theirs in [
        (nn.MaxPool2d(3, 2, 1, ceil_mode=True), torch.nn.MaxPool2d(3, 2, 1, ceil_mode=True)),
        (nn.AvgPool2d(2, ceil_mode=True, count_include_pad=False), torch.nn.AvgPool2d(2, ceil_mode=True)),
        (nn.Flatten(), torch.nn.Flatten()),
        (nn.Flatten(0, 2), torch.nn.Flatten(0, 2)),
        (nn.SiLU(), torch.nn.SiLU()),
        (nn.Identity(54, unused=1), torch.nn.Identity(54, unused=1)),
    ]:
        compare(lambda x, m=ours: m(x), lambda x, m=theirs: m(x), {"x": x}, ["x"])


# ---------------------------------------------------------------- losses


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("smoothing", [0.0, 0.2])
def test_cross_entropy_options_match_torch(reduction, smoothing):
    x = normal(9, 5) * 2
    t = R.integers(0, 5, 9).astype(np.int32)
    t[[1, 4]] = 3  # ignored below
    for ignore in (-100, 3):
        compare(
            lambda x, t: tg.cross_entropy(
                x, t, ignore_index=ignore, label_smoothing=smoothing, reduction=reduction
            ),
            lambda x, t: F.cross_entropy(
                x, t, ignore_index=ignore, label_smoothing=smoothing, reduction=reduction
            ),
            {"x": x, "t": t},
            ["x"],
        )


@pytest.mark.parametrize("smoothing", [0.0, 0.3])
def test_cross_entropy_with_probabilities_and_smoothing_matches_torch(smoothing):
    x, p = normal(2, 3, 6), np.abs(normal(2, 3, 6))
    p /= p.sum(-1, keepdims=True)
    compare(
        lambda x, p: tg.cross_entropy(x, p, label_smoothing=smoothing),
        lambda x, p: F.cross_entropy(x.permute(0, 2, 1), p.permute(0, 2, 1), label_smoothing=smoothing),
        {"x": x, "p": p},
        ["x", "p"],
    )


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_nll_loss_ignore_index_matches_torch(reduction):
    x = normal(4, 3, 7)
    t = R.integers(0, 7, (4, 3)).astype(np.int32)
    t[0, 1] = t[2, 2] = -100
    compare(
        lambda x, t: tg.nll_loss(tg.log_softmax(x), t, reduction=reduction),
        lambda x, t: F.nll_loss(F.log_softmax(x, -1).permute(0, 2, 1), t, reduction=reduction),
        {"x": x, "t": t},
        ["x"],
    )


def test_every_target_ignored_gives_nan_as_in_torch():
    x, t = normal(3, 4), np.full(3, -100, np.int32)
    out, _ = run(lambda x, t: tg.cross_entropy(x, t), {"x": x, "t": t})
    assert np.isnan(out) and torch.isnan(F.cross_entropy(torch.tensor(x), torch.tensor(t).long()))


# ---------------------------------------------------------------- scatter_add, index_add


@pytest.mark.parametrize(
    "shape,affine,eps", [((4, 9), True, 1e-5), ((2, 3, 17), False, 1e-2), ((5, 1), True, 0.5)]
)
def test_layer_norm_matches_torch(shape, affine, eps):
    d = shape[-1]
    ins = {"x": normal(*shape) * 3.0 + 1.0, "w": normal(d), "b": normal(d)}
    if affine:
        compare(
            lambda x, w, b: tg.layer_norm(x, w, b, eps),
            lambda x, w, b: F.layer_norm(x, (d,), w, b, eps),
            ins,
            ["x", "w", "b"],
        )
    else:
        compare(
            lambda x: tg.layer_norm(x, eps=eps),
            lambda x: F.layer_norm(x, (d,), eps=eps),
            {"x": ins["x"]},
            ["x"],
        )


@pytest.mark.parametrize(
    "xs,dim,idx_shape,srcs",
    [((4, 5), 0, (6, 5), (6, 5)), ((3, 6, 2), 1, (2, 4, 2), (3, 5, 2)), ((5, 4), -1, (5, 7), (5, 7))],
)
def test_scatter_add_matches_torch(xs, dim, idx_shape, srcs):
    idx = R.integers(0, xs[dim], idx_shape).astype(np.int32)
    # PyTorch's own backward fails for a src larger than index; tgweb's is checked by
    # finite differences (tests/test_grad_fd.py)
    wrt = ["x", "s"] if idx_shape == srcs else ["x"]
    compare(
        lambda x, i, s: tg.scatter_add(x, dim, i, s),
        lambda x, i, s: torch.scatter_add(x, dim, i, s),
        {"x": normal(*xs), "i": idx, "s": normal(*srcs)},
        wrt,
    )


@pytest.mark.parametrize(
    "xs,dim,n,alpha", [((4, 5), 0, 7, 1.0), ((3, 6, 2), 1, 9, -0.5), ((2, 3), -1, 2, 2.0)]
)
def test_index_add_matches_torch(xs, dim, n, alpha):
    idx = R.integers(0, xs[dim], n).astype(np.int32)
    srcs = list(xs)
    srcs[dim] = n
    compare(
        lambda x, i, s: tg.index_add(x, dim, i, s, alpha=alpha),
        lambda x, i, s: torch.index_add(x, dim, i, s, alpha=alpha),
        {"x": normal(*xs), "i": idx, "s": normal(*srcs)},
        ["x", "s"],
    )


@pytest.mark.parametrize("xs,dim", [((7,), 0), ((3, 7), -1), ((4, 5, 3), 1), ((4, 5, 3), -3)])
def test_cumsum_matches_torch(xs, dim):
    compare(lambda x: tg.cumsum(x, dim), lambda x: torch.cumsum(x, dim), {"x": normal(*xs)}, ["x"])
    ints = R.integers(-9, 10, xs).astype(np.int32)
    out, _ = run(lambda x: tg.cumsum(x, dim), {"x": ints})
    np.testing.assert_array_equal(out, torch.cumsum(torch.from_numpy(ints), dim).numpy())


@pytest.mark.parametrize("reverse", [False, True])
def test_cumsum_moves_to_torch(reverse):
    """The kind's PyTorch form, prefix and suffix sums (a gradient's), under tg.to_torch."""
    x = normal(3, 5)

    def fn(m, x):
        return make("cumsum", (x,), axis=1, reverse=reverse) * 2.0

    module = tg.to_torch(nn.Module(), fn, inputs={"x": (3, 5)})  # no parameters: float32
    got = module(x=torch.from_numpy(x)).numpy()
    want = np.flip(np.cumsum(np.flip(x, 1), 1), 1) if reverse else np.cumsum(x, 1)
    np.testing.assert_allclose(got, want * 2.0, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------- argument errors


def trace_error(fn, **shapes):
    def build(**ins):
        return fn(**ins)

    g = tg.ir.Graph()
    with tg.ir.tracing(g), pytest.raises(tg.TraceError) as e:
        build(**{k: g.input(k, s[0], s[1]) for k, s in shapes.items()})
    return str(e.value)


F32, I32 = "f32", "i32"


@pytest.mark.parametrize(
    "fn,shapes,words",
    [
        (lambda x: tg.rope(x), {"x": ((2, 5, 7), F32)}, ["even", "(2, 5, 7)"]),
        (lambda x, p: tg.rope(x, p), {"x": ((2, 5, 8), F32), "p": ((4,), I32)}, ["positions", "(1, 4, 1)"]),
        (lambda x: tg.max_pool2d(x, 5), {"x": ((1, 1, 3, 3), F32)}, ["larger than the padded input"]),
        (lambda x: tg.avg_pool2d(x, 3, padding=2), {"x": ((1, 1, 8, 8), F32)}, ["half the kernel"]),
        (
            lambda x, w: tg.conv2d(x, w, dilation=3),
            {"x": ((1, 1, 5, 5), F32), "w": ((1, 1, 3, 3), F32)},
            ["larger than the padded input", "dilation"],
        ),
        (
            lambda x, w: tg.conv2d(x, w, stride=2, padding="same"),
            {"x": ((1, 1, 5, 5), F32), "w": ((1, 1, 3, 3), F32)},
            ["same", "stride 1"],
        ),
        (
            lambda x, w: tg.conv2d(x, w, padding="full"),
            {"x": ((1, 1, 5, 5), F32), "w": ((1, 1, 3, 3), F32)},
            ["'full'"],
        ),
        (
            lambda x, w: tg.conv_transpose2d(x, w, stride=2, output_padding=2),
            {"x": ((1, 1, 5, 5), F32), "w": ((1, 1, 3, 3), F32)},
            ["output_padding"],
        ),
        (
            lambda x, w: tg.conv_transpose2d(x, w),
            {"x": ((1, 2, 5, 5), F32), "w": ((3, 1, 3, 3), F32)},
            ["(3, 1, 3, 3)", "(1, 2, 5, 5)"],
        ),
        (
            lambda x, i, s: tg.scatter_add(x, 2, i, s),
            {"x": ((3, 4), F32), "i": ((3, 4), I32), "s": ((3, 4), F32)},
            ["dim 2", "(3, 4)"],
        ),
        (
            lambda x, i, s: tg.scatter_add(x, 0, i, s),
            {"x": ((3, 4), F32), "i": ((3, 5), I32), "s": ((3, 5), F32)},
            ["index (3, 5)"],
        ),
        (
            lambda x, i, s: tg.index_add(x, -3, i, s),
            {"x": ((3, 4), F32), "i": ((2,), I32), "s": ((2, 4), F32)},
            ["dim -3"],
        ),
        (
            lambda x, i, s: tg.index_add(x, 0, i, s),
            {"x": ((3, 4), F32), "i": ((2,), I32), "s": ((3, 4), F32)},
            ["(2, 4)"],
        ),
        (
            lambda x, t: tg.cross_entropy(x, t, label_smoothing=1.5),
            {"x": ((3, 4), F32), "t": ((3,), I32)},
            ["label_smoothing"],
        ),
        (lambda x: tg.cumsum(x, 2), {"x": ((3, 4), F32)}, ["cumsum", "axis 2", "(3, 4)"]),
        (lambda x: tg.cumsum(x > 0.0, 0), {"x": ((3, 4), F32)}, ["bool", "cast it first"]),
    ],
)
def test_bad_arguments_are_named(fn, shapes, words):
    msg = trace_error(fn, **shapes)
    for w in words:
        assert w in msg, msg
    assert "test_ops_torch_parity.py" in msg  # the user's line


# ---------------------------------------------------------------- containers


class Net(nn.Module):
    def __init__(self):
        self.layers = nn.ModuleList([nn.Linear(3, 4), nn.Linear(4, 4)])
        self.layers.append(nn.Linear(4, 2))
        self.heads = nn.ModuleDict({"a": nn.Linear(2, 1), "b": nn.Linear(2, 3)})

    def forward(self, x):
        for layer in self.layers:
            x = tg.tanh(layer(x))
        return self.heads["a"](x).sum() + self.heads["b"](x).sum()


class TorchNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList([torch.nn.Linear(3, 4), torch.nn.Linear(4, 4)])
        self.layers.append(torch.nn.Linear(4, 2))
        self.heads = torch.nn.ModuleDict({"a": torch.nn.Linear(2, 1), "b": torch.nn.Linear(2, 3)})


def test_containers_have_torchs_state_dict_keys_and_train():
    ours, theirs = Net(), TorchNet()
    assert list(ours.state_dict()) == list(theirs.state_dict())
    assert len(ours.layers) == 3 and isinstance(ours.layers[-1], nn.Linear) and len(ours.layers[1:]) == 2
    assert list(ours.heads) == ["a", "b"] and "a" in ours.heads and callable(ours.forward)
    ours.load_state_dict({k: v.numpy() for k, v in theirs.state_dict().items()})
    x = R.normal(size=(5, 3)).astype(np.float32)
    loss, grads = tg.value_and_grad(lambda m, x: m(x), ours, x=x)
    tx = torch.from_numpy(x)
    for layer in theirs.layers:
        tx = torch.tanh(layer(tx))
    want = theirs.heads["a"](tx).sum() + theirs.heads["b"](tx).sum()
    want.backward()
    assert abs(float(loss) - want.item()) < 1e-5
    for k, p in theirs.named_parameters():
        np.testing.assert_allclose(grads[k], p.grad.numpy(), rtol=1e-4, atol=1e-5, err_msg=k)


def test_container_edits_rename_as_torch_does():
    ours = nn.ModuleList([nn.Linear(1, 1), nn.Linear(1, 2)])
    ours.insert(0, nn.Linear(1, 3))
    ours[2] = nn.Linear(1, 4)
    theirs = torch.nn.ModuleList([torch.nn.Linear(1, 1), torch.nn.Linear(1, 2)])
    theirs.insert(0, torch.nn.Linear(1, 3))
    theirs[2] = torch.nn.Linear(1, 4)
    shapes = {k: tuple(v.shape) for k, v in ours.state_dict().items()}
    assert shapes == {k: tuple(v.shape) for k, v in theirs.state_dict().items()}
    d = nn.ModuleDict({"x": nn.Linear(1, 1), "y": nn.Linear(1, 2)})
    d.pop("x")
    d["z"] = nn.Linear(2, 2)
    assert list(d.state_dict()) == ["y.weight", "y.bias", "z.weight", "z.bias"]
    with pytest.raises(TypeError):
        ours.append(torch.nn.Linear(1, 1))


def test_conv_transpose_layer_has_torchs_parameter_shapes():
    ours = nn.ConvTranspose2d(4, 6, 3, stride=2, groups=2)
    theirs = torch.nn.ConvTranspose2d(4, 6, 3, stride=2, groups=2)
    assert {k: tuple(v.shape) for k, v in ours.state_dict().items()} == {
        k: tuple(v.shape) for k, v in theirs.state_dict().items()
    }
    ours.load_state_dict({k: v.detach().numpy() for k, v in theirs.state_dict().items()})
    x = R.normal(size=(1, 4, 3, 5)).astype(np.float32)
    out = tg.value_and_grad(lambda m, x: (m(x) ** 2).sum(), ours, x=x)[0]
    want = (theirs(torch.from_numpy(x)) ** 2).sum().item()
    assert abs(float(out) - want) < 1e-3 * max(1.0, abs(want))


# ---------------------------------------------------------------- tg.to_torch


class Zoo(nn.Module):
    """Every new op and layer in one model, for tg.to_torch."""

    def __init__(self):
        self.convs = nn.ModuleList(
            [nn.Conv2d(2, 4, 3, padding="same", dilation=2), nn.ConvTranspose2d(4, 2, 3, 2, 1, 1)]
        )
        self.pools = nn.ModuleDict(
            {
                "max": nn.MaxPool2d(3, 2, 1, ceil_mode=True),
                "avg": nn.AvgPool2d(2, ceil_mode=True, count_include_pad=False),
            }
        )
        self.rot = nn.RotaryEmbedding(4, interleaved=True)
        self.head = nn.Sequential(nn.Flatten(), nn.SiLU(), nn.Identity(), nn.Linear(2 * 4 * 4, 5))

    def forward(self, x, pos, idx):
        h = self.pools["avg"](self.convs[1](self.pools["max"](self.convs[0](x))))  # [N, 2, 4, 4]
        h = tg.rope(h, pos) + self.rot(h)
        h = tg.index_add(h, 1, idx, h[:, :1] * 0.5)
        return self.head(h)


def zoo_loss(m, x, pos, idx, t):
    logits = m(x, pos, idx)
    return tg.cross_entropy(logits, t, label_smoothing=0.1) + tg.nll_loss(
        tg.log_softmax(logits), t, ignore_index=1
    )


def test_a_model_of_the_new_ops_moves_to_torch():
    inputs = {"x": (3, 2, 6, 7), "pos": ((4,), "i32"), "idx": ((1,), "i32"), "t": ((3,), "i32")}
    batch = {
        "x": R.normal(size=(3, 2, 6, 7)),
        "pos": np.array([5, 0, 2, 9], np.int32),
        "idx": np.array([1], np.int32),
        "t": np.array([1, 4, 0], np.int32),
    }
    want_loss, want_grads = tg.value_and_grad(zoo_loss, Zoo(), precision="float64", **batch)
    module = tg.to_torch(Zoo(), zoo_loss, inputs=inputs).double()
    loss = module(**{k: torch.from_numpy(v) for k, v in batch.items()})
    loss.backward()
    np.testing.assert_allclose(loss.item(), float(want_loss), rtol=1e-6)
    for n, p in module.named_parameters():
        np.testing.assert_allclose(p.grad.numpy(), want_grads[n], rtol=1e-5, atol=1e-7, err_msg=n)
