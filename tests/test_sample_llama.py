"""The llama sample: its Llama parts (RMSNorm, rotary attention, SwiGLU, tied head, no
biases), its sampler (temperature as an input, letter-by-letter drawing) and training to
SUCCESS on the reference backend."""

from __future__ import annotations

import array
import math

import numpy as np
import pytest

import tgweb as tg
from tgweb import samples
from tgweb.samples import llama, names


def test_parameters_are_llamas_no_bias_no_position_table_tied_head():
    tr = samples.compile("llama", backend="reference", seed=0)
    params = tr.params()
    assert not [n for n in params if n.endswith("bias")]
    assert "tok_embeddings.weight" in params and not [n for n in params if "pos" in n or "head" in n]
    assert params["tok_embeddings.weight"].shape == (llama.VOCAB, llama.DIM)
    for i in range(llama.LAYERS):
        for part in ("w1", "w3"):
            assert params[f"layers.{i}.feed_forward.{part}.weight"].shape == (llama.HIDDEN, llama.DIM)
        assert params[f"layers.{i}.feed_forward.w2.weight"].shape == (llama.DIM, llama.HIDDEN)
        assert params[f"layers.{i}.attention_norm.weight"].shape == (llama.DIM,)  # RMSNorm: gain only


def _numpy_forward(p, tokens):
    """The model written out in NumPy (float64), as Llama defines it."""
    x = p["tok_embeddings.weight"][tokens]
    b, t, d = x.shape
    h, hd = llama.HEADS, llama.DIM // llama.HEADS

    def rms(v, w):
        return v / np.sqrt((v * v).mean(-1, keepdims=True) + 1e-6) * w

    inv = 1.0 / 10000.0 ** (np.arange(hd // 2) * 2 / hd)
    ang = np.arange(t)[:, None] * inv[None, :]
    cos, sin = np.concatenate([np.cos(ang)] * 2, -1), np.concatenate([np.sin(ang)] * 2, -1)

    def rope(v):  # halves rotated (Hugging Face's rotate_half)
        rot = np.concatenate([-v[..., hd // 2 :], v[..., : hd // 2]], -1)
        return v * cos + rot * sin

    def heads(v):
        return v.reshape(b, t, h, hd).transpose(0, 2, 1, 3)

    for i in range(llama.LAYERS):
        pre = f"layers.{i}."
        a = rms(x, p[pre + "attention_norm.weight"])
        q = rope(heads(a @ p[pre + "attention.wq.weight"].T))
        k = rope(heads(a @ p[pre + "attention.wk.weight"].T))
        v = heads(a @ p[pre + "attention.wv.weight"].T)
        s = q @ k.transpose(0, 1, 3, 2) / math.sqrt(hd) + np.triu(np.full((t, t), -np.inf), 1)
        w = np.exp(s - s.max(-1, keepdims=True))
        w /= w.sum(-1, keepdims=True)
        x = x + (w @ v).transpose(0, 2, 1, 3).reshape(b, t, d) @ p[pre + "attention.wo.weight"].T
        f = rms(x, p[pre + "ffn_norm.weight"])
        g = f @ p[pre + "feed_forward.w1.weight"].T
        swiglu = (g / (1 + np.exp(-g))) * (f @ p[pre + "feed_forward.w3.weight"].T)
        x = x + swiglu @ p[pre + "feed_forward.w2.weight"].T
    return rms(x, p["norm.weight"]) @ p["tok_embeddings.weight"].T


def test_forward_is_the_llama_computation():
    tr = samples.compile("llama", backend="reference", seed=3)
    for s in range(3):  # move off the initial weights (norm gains included)
        tr.step(**llama.batch(s))
    p = {k: np.asarray(v, np.float64) for k, v in tr.params().items()}
    tokens = np.asarray(llama.batch(7)["tokens"], np.int32).reshape(llama.BATCH, llama.CTX)
    out = tr.attach(llama.forward, inputs={"tokens": llama.INPUTS["tokens"]}).run(tokens=tokens).output
    np.testing.assert_allclose(out, _numpy_forward(p, tokens), rtol=2e-4, atol=2e-5)


def test_temperature_is_an_input_and_shapes_the_distribution():
    tr = samples.compile("llama", backend="reference", seed=0)
    for s in range(30):
        tr.step(**llama.batch(s))
    traces = []

    def graph(model, tokens, temperature):
        traces.append(1)
        return llama.sample_probs(model, tokens, temperature)

    sampler = tr.attach(graph, inputs=llama.SAMPLE_INPUTS)
    logit = tr.attach(llama.forward, inputs={"tokens": llama.SAMPLE_INPUTS["tokens"]})
    tokens = np.asarray(llama.batch(1)["tokens"], np.int32).reshape(-1, llama.CTX)[: llama.SAMPLE_BATCH]
    z = logit.run(tokens=tokens).output.astype(np.float64)
    ent = []
    for t in (0.25, 1.0, 3.0):
        p = sampler.run(tokens=tokens, temperature=[[t]]).output
        want = np.exp(z / t - (z / t).max(-1, keepdims=True))
        np.testing.assert_allclose(p, want / want.sum(-1, keepdims=True), rtol=1e-4, atol=1e-6)
        ent.append(float(-(p * np.log(np.maximum(p, 1e-30))).sum(-1).mean()))
    assert ent[0] < ent[1] < ent[2]
    assert len(traces) == 1  # three temperatures, one compilation


def test_sample_names_draws_from_the_distribution_it_is_given():
    def fixed(batch):  # always "a" at the first position, then the end
        assert len(batch["tokens"]) == llama.SAMPLE_BATCH * llama.CTX and len(batch["temperature"]) == 1
        rows = []
        for _ in range(llama.SAMPLE_BATCH):
            for pos in range(llama.CTX):
                p = [0.0] * llama.VOCAB
                p[1 if pos == 0 else llama.BOUNDARY] = 1.0
                rows.append(p)
        return rows

    out, entropy = llama.sample_names(fixed, 15, temperature=0.7, rng=1)
    assert out == ["a"] * 15 and entropy == 0.0
    uniform = [[1.0 / llama.VOCAB] * llama.VOCAB] * (llama.SAMPLE_BATCH * llama.CTX)
    many, entropy = llama.sample_names(lambda b: uniform, 24, rng=5)
    assert len(many) == 24 and len(set(many)) > 12 and max(map(len, many)) <= llama.MAX_LEN
    assert entropy == pytest.approx(math.log(llama.VOCAB))
    assert many == llama.sample_names(lambda b: uniform, 24, rng=5)[0]  # seeded


def test_bad_arguments_are_named():
    uniform = [[1.0 / llama.VOCAB] * llama.VOCAB] * (llama.SAMPLE_BATCH * llama.CTX)
    for bad in (0, -1, 9.0, float("nan"), "hot", None):
        with pytest.raises(ValueError, match="temperature must be"):
            llama.sample_names(lambda b: uniform, 3, temperature=bad)
    with pytest.raises(ValueError, match="n must be"):
        llama.sample_names(lambda b: uniform, -2)
    with pytest.raises(ValueError, match="returned 5 values"):
        llama.sample_names(lambda b: [0.2] * 5, 1)
    nan = [[float("nan")] * llama.VOCAB] * (llama.SAMPLE_BATCH * llama.CTX)
    with pytest.raises(ValueError, match="not usable"):
        llama.sample_names(lambda b: nan, 1)
    with pytest.raises(ValueError):
        tg.compile(llama.Model(dim=30, heads=4), llama.loss_fn, inputs=llama.INPUTS, backend="reference")


def test_data_and_baseline_are_the_names_samples():
    assert llama.batch(4, 2) == names.batch(4, 2)
    assert llama.SUCCESS["below_baseline"] == "bigram_loss" and llama.bigram_loss() == names.bigram_loss()
    assert samples.success_bound(llama) == ("below", pytest.approx(names.bigram_loss() - 0.2))
    assert isinstance(llama.batch(0)["tokens"], array.array)


def test_everything_the_page_runs_works_without_numpy():
    from test_no_numpy import run_without_numpy  # tests/ is on sys.path under pytest

    out = run_without_numpy("""
        from tgweb.compile import build_training_graph
        from tgweb.lower import lower
        from tgweb.trace import trace
        import tgweb as tg
        from tgweb.samples import llama
        opt, clip = tg.optim.from_spec(llama.OPTIMIZER)
        lower(build_training_graph(llama.Model(), llama.loss_fn, llama.INPUTS, opt, clip))
        trace(llama.sample_probs, llama.Model(), llama.SAMPLE_INPUTS)
        flat = [1.0 / llama.VOCAB] * (llama.SAMPLE_BATCH * llama.CTX * llama.VOCAB)
        names, entropy = llama.sample_names(lambda feeds: flat, 5, temperature=0.5, rng=1)
        print(len(names), round(entropy, 4))
    """)
    assert out.split() == ["5", f"{math.log(27):.4f}"]
