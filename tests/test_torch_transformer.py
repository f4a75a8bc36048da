"""tgweb.torch.nn's attention modules (MultiheadAttention, the Transformer encoder and
decoder layers and stacks, nn.Transformer) against torch's: forward and the gradients
of inputs and parameters in float64 on the reference backend and as kernels on
lavapipe; masks of every kind; state dicts both ways; train and eval; the fused kernel
used; bad input."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from torch_layer_check import by_tgweb, check, graph_of  # noqa: E402

import tgweb as tg  # noqa: E402
import tgweb.torch as tgt  # noqa: E402

L, S, B, E, NH = 5, 7, 2, 8, 2
R = np.random.default_rng(0)
Q = R.standard_normal((L, B, E)).astype(np.float32)
KV = R.standard_normal((S, B, E)).astype(np.float32)
BOOL_MASK = R.random((L, S)) < 0.3
BOOL_MASK[:, 1] = False  # every query sees a key (PyTorch gives NaN where none)
PADDING = R.random((B, S)) < 0.3
PADDING[:, 0] = False
FLOAT_MASK = R.standard_normal((B * NH, L, S)).astype(np.float32)


def _pair(name, *args, **kwargs):
    torch.manual_seed(0)
    return getattr(torch.nn, name)(*args, **kwargs), getattr(tgt.nn, name)(*args, **kwargs)


def causal(m, n):
    """generate_square_subsequent_mask(n) of m's own namespace (torch's or tgweb's)."""
    if isinstance(m, torch.nn.Module):
        return torch.nn.Transformer.generate_square_subsequent_mask(n, dtype=torch.float64)
    return tgt.nn.Transformer.generate_square_subsequent_mask(n)


def bf(x):
    return np.ascontiguousarray(x.swapaxes(0, 1))


# name -> (constructor kwargs, call, feeds)
MHA = {
    "cross": ({}, lambda m, q, k: m(q, k, k), {"q": Q, "k": KV}),
    "self-no-weights": ({}, lambda m, q: m(q, q, q, need_weights=False), {"q": Q}),
    "bool-masks-per-head-weights": (
        {},
        lambda m, q, k, am, kpm: m(q, k, k, attn_mask=am, key_padding_mask=kpm, average_attn_weights=False),
        {"q": Q, "k": KV, "am": BOOL_MASK, "kpm": PADDING},
    ),
    "float-mask-per-head-no-weights": (
        {"batch_first": True},
        lambda m, q, k, am: m(q, k, k, attn_mask=am, need_weights=False),
        {"q": bf(Q), "k": bf(KV), "am": FLOAT_MASK},
    ),
    "kdim-vdim-bias-kv-zero-attn": (
        {"add_bias_kv": True, "add_zero_attn": True, "kdim": 3, "vdim": 5, "batch_first": True},
        lambda m, q, k, v, am, kpm: m(q, k, v, attn_mask=am, key_padding_mask=kpm),
        {
            "q": bf(Q),
            "k": bf(KV)[..., :3],
            "v": np.concatenate([bf(KV)[..., :5]], -1),
            "am": FLOAT_MASK,
            "kpm": PADDING,
        },
    ),
    "causal-hint": (
        {},
        lambda m, q: m(q, q, q, attn_mask=causal(m, L), need_weights=False, is_causal=True),
        {"q": Q},
    ),
    "unbatched": (
        {"bias": False},
        lambda m, q, k, kpm: m(q, k, k, key_padding_mask=kpm),
        {"q": Q[:, 0], "k": KV[:, 0], "kpm": PADDING[0]},
    ),
}


@pytest.mark.parametrize("case", sorted(MHA))
def test_multihead_attention_matches_torch(case):
    kw, call, feeds = MHA[case]
    ref, m = _pair("MultiheadAttention", E, NH, **kw)
    check(ref, m, call, feeds, constant=("am",))


T2 = 4  # decoder length
TGT = R.standard_normal((T2, B, E)).astype(np.float32)
LAYER = {"dim_feedforward": 12, "dropout": 0.0}

# name -> (module name, constructor, call, feeds)
STACKS = {
    "encoder-layer": ("TransformerEncoderLayer", {}, lambda m, x: m(x), {"x": KV}),
    "encoder-layer-norm-first-gelu-masks": (
        "TransformerEncoderLayer",
        {"norm_first": True, "activation": "gelu", "batch_first": True},
        lambda m, x, kpm: m(x, src_mask=causal(m, S), src_key_padding_mask=kpm),
        {"x": bf(KV), "kpm": PADDING},
    ),
    "decoder-layer": (
        "TransformerDecoderLayer",
        {},
        lambda m, t, mem, kpm: m(
            t, mem, tgt_mask=causal(m, T2), memory_key_padding_mask=kpm, tgt_is_causal=True
        ),
        {"t": TGT, "mem": KV, "kpm": PADDING},
    ),
    "decoder-layer-norm-first-no-bias": (
        "TransformerDecoderLayer",
        {"norm_first": True, "bias": False, "batch_first": True},
        lambda m, t, mem: m(t, mem),
        {"t": bf(TGT), "mem": bf(KV)},
    ),
    "transformer": (
        "Transformer",
        {"num_encoder_layers": 2, "num_decoder_layers": 2},
        lambda m, src, t, kpm: m(
            src, t, tgt_mask=causal(m, T2), src_key_padding_mask=kpm, memory_key_padding_mask=kpm
        ),
        {"src": KV, "t": TGT, "kpm": PADDING},
    ),
    "transformer-batch-first-norm-first": (
        "Transformer",
        {"num_encoder_layers": 1, "num_decoder_layers": 2, "batch_first": True, "norm_first": True},
        lambda m, src, t: m(src, t, src_mask=causal(m, S), tgt_mask=causal(m, T2)),
        {"src": bf(KV), "t": bf(TGT)},
    ),
}


def _stack(name, kw):
    if name == "Transformer":
        return _pair(name, E, NH, dim_feedforward=12, dropout=0.0, **kw)
    return _pair(name, E, NH, **LAYER, **kw)


@pytest.mark.parametrize("case", sorted(STACKS))
def test_transformer_modules_match_torch(case):
    name, kw, call, feeds = STACKS[case]
    check(*_stack(name, kw), call, feeds)


@pytest.mark.parametrize("norm", [False, True], ids=["no-norm", "norm"])
def test_encoder_stack_matches_torch(norm):
    """TransformerEncoder copies its layer (the copies start equal, as PyTorch's) and a
    host causal mask is recognised as causal: the kernel reads no mask."""
    torch.manual_seed(0)
    refs = [torch.nn.TransformerEncoderLayer(E, NH, **LAYER)] + ([torch.nn.LayerNorm(E)] if norm else [])
    ours = [tgt.nn.TransformerEncoderLayer(E, NH, **LAYER)] + ([tgt.nn.LayerNorm(E)] if norm else [])
    ref = torch.nn.TransformerEncoder(refs[0], 3, refs[1] if norm else None, enable_nested_tensor=False)
    m = tgt.nn.TransformerEncoder(ours[0], 3, ours[1] if norm else None)
    ours_sd = m.state_dict()
    np.testing.assert_array_equal(ours_sd["layers.0.linear1.weight"], ours_sd["layers.2.linear1.weight"])
    host_mask = tgt.nn.Transformer.generate_square_subsequent_mask(S)
    check(ref, m, lambda m, x: m(x, mask=host_mask if m is not ref else causal(m, S)), {"x": KV})
    g, _ = graph_of(m, lambda m, x: m(x, mask=host_mask), {"x": KV}, [KV])
    sdpa = [t for t in g.tensors if t.kind == "sdpa"]
    assert len(sdpa) == 3 and all(t.attrs["causal"] and t.attrs["mask"] is None for t in sdpa)


CONSTRUCTED = {
    "MultiheadAttention": lambda ns: ns.nn.MultiheadAttention(E, NH),
    "MultiheadAttention-kdim": lambda ns: ns.nn.MultiheadAttention(E, NH, kdim=3, vdim=5, add_bias_kv=True),
    "TransformerDecoderLayer": lambda ns: ns.nn.TransformerDecoderLayer(E, NH, 12),
    "Transformer": lambda ns: ns.nn.Transformer(E, NH, 2, 1, 12),
}


@pytest.mark.parametrize("name", sorted(CONSTRUCTED))
def test_state_dict_round_trips_with_torch(name):
    """The same names in the same order and shapes, loaded strictly both ways; tgweb's
    initial values follow PyTorch's scheme (xavier in_proj, zero biases of attention)."""
    torch.manual_seed(0)
    ref, m = CONSTRUCTED[name](torch), CONSTRUCTED[name](tgt)
    ours, theirs = m.state_dict(), ref.state_dict()
    assert list(ours) == list(theirs)
    assert [n for n, _ in m.named_parameters()] == [n for n, _ in ref.named_parameters()]
    for k, v in theirs.items():
        assert tuple(ours[k].shape) == tuple(v.shape), k
        if k.endswith(("in_proj_bias", "out_proj.bias")):
            assert not ours[k].any(), k
        if k.endswith("weight") and v.ndim == 2:  # xavier-uniform or Linear's bound
            fan_out, fan_in = v.shape
            bound = max(np.sqrt(6 / (fan_in + fan_out)), 1 / np.sqrt(fan_in))
            assert 0 < np.abs(ours[k]).max() <= bound, k
    ref.load_state_dict({k: torch.from_numpy(v) for k, v in ours.items()}, strict=True)
    torch.manual_seed(1)
    other = CONSTRUCTED[name](torch).state_dict()
    m.load_state_dict({k: v.numpy() for k, v in other.items()})
    for k, v in m.state_dict().items():
        np.testing.assert_array_equal(v, other[k].numpy())


def test_attention_dropout_in_training_only():
    """Training drops attention weights (the returned weights are the dropped ones the
    output is made of: each is 0 or its eval value / (1 - p)); eval matches torch."""
    ref, m = _pair("MultiheadAttention", E, NH, dropout=0.5)
    ref.eval(), m.eval()
    call = lambda m, q, k: m(q, k, k, average_attn_weights=False)  # noqa: E731
    check(ref, m, call, {"q": Q, "k": KV})
    rng = np.random.default_rng(0)
    cots = [rng.standard_normal(s).astype(np.float32) for s in ((L, B, E), (B, NH, L, S))]
    evaluated = by_tgweb(m, call, {"q": Q, "k": KV}, cots)["y1"]
    m.train()
    trained = by_tgweb(m, call, {"q": Q, "k": KV}, cots)["y1"]
    kept = trained != 0
    assert 0.3 < kept.mean() < 0.7
    np.testing.assert_allclose(trained[kept], evaluated[kept] * 2, rtol=1e-12)


@pytest.mark.native
@pytest.mark.parametrize(
    "case", ["bool-masks-per-head-weights", "kdim-vdim-bias-kv-zero-attn", "causal-hint"]
)
def test_multihead_attention_kernels_match_torch(case):
    kw, call, feeds = MHA[case]
    check(*_pair("MultiheadAttention", E, NH, **kw), call, feeds, backend="native", constant=("am",))


@pytest.mark.native
@pytest.mark.parametrize("case", ["encoder-layer-norm-first-gelu-masks", "transformer"])
def test_transformer_kernels_match_torch(case):
    name, kw, call, feeds = STACKS[case]
    check(*_stack(name, kw), call, feeds, backend="native")


@pytest.mark.parametrize(
    "call,match",
    [
        (lambda m, q: m(q, q[0], q), "all be batched \\(3-D\\) or all unbatched"),
        (lambda m, q: m(q, q, q, is_causal=True), "is_causal=True needs attn_mask"),
        (lambda m, q: m(q, q, q, attn_mask=q[0, :, :2] > 0), r"attn_mask must have shape \(5, 5\)"),
        (
            lambda m, q: m(q, q, q, key_padding_mask=q[:, :, 0] > 0),
            r"key_padding_mask must have shape \(2, 5\)",
        ),
        (lambda m, q: m(q, q, q, attn_mask=(q[:, 0, :5] > 0).int()), "attn_mask must be bool or float"),
    ],
)
def test_bad_input_is_refused(call, match):
    with pytest.raises(tg.TraceError, match=match):
        tg.value_and_grad(lambda m, q: call(m, q)[0].sum(), tgt.nn.MultiheadAttention(E, NH), q=Q)


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="embed_dim 8 is not divisible by num_heads 3"):
        tgt.nn.MultiheadAttention(E, 3)
    with pytest.raises(ValueError, match="activation should be 'relu' or 'gelu'"):
        tgt.nn.TransformerEncoderLayer(E, NH, activation="tanh")


def test_every_layer_is_listed_in_torch_md():
    import inspect
    import pathlib
    import re

    doc = (pathlib.Path(__file__).resolve().parents[1] / "docs" / "TORCH.md").read_text()
    # the layers' sections (below the generated table of functions): a row names a layer in
    # code, alone (`nn.LSTM`) or among others (`BatchNorm1d, BatchNorm2d`)
    layers = doc[doc.index("\n## tgweb.torch.nn") :]
    names = [n for n, c in vars(tgt.nn).items() if inspect.isclass(c) and issubclass(c, tgt.nn.Module)]
    missing = [n for n in names if not re.search(rf"`[^`\n]*\b{n}\b[^`\n]*`", layers)]
    assert not missing, f"docs/TORCH.md has no row for {missing}"
