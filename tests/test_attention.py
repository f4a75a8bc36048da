"""Fused attention (tgweb/ops/attention.py) against torch.nn.functional.scaled_dot_product_attention:
the reference in float64, and the kernels of both adapter classes on lavapipe, forward
and backward; dropout's bits; memory linear in T; bad input."""

from __future__ import annotations

import array

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import tgweb as tg
from tgweb.backends import native
from tgweb.backends.reference import Context, evaluate
from tgweb.codegen.target import Target
from tgweb.grad import append_grad
from tgweb.ir import Graph, TraceError, tracing
from tgweb.lower import lower

GPU = Target("gpu", "test", "the GPU class's kernels, run on lavapipe")
SEED = 987654

# name -> (q, k, v shapes, mask (kind, shape) or None, is_causal, scale); T not a multiple
# of any tile (16) or workgroup (16, 64), Tq != Tk, broadcast heads, Dv != D, D % 4 != 0
CASES = {
    "plain": ((2, 3, 7, 16), (2, 3, 9, 16), (2, 3, 9, 16), None, False, None),
    "causal-d64": ((1, 2, 37, 64), (1, 2, 37, 64), (1, 2, 37, 64), None, True, None),
    "bool-mask": ((2, 2, 19, 16), (2, 2, 23, 16), (2, 2, 23, 16), ("bool", (19, 23)), False, None),
    "add-mask": ((2, 2, 19, 16), (2, 1, 19, 16), (2, 1, 19, 16), ("add", (2, 1, 19, 19)), False, None),
    "d128": ((1, 1, 21, 128), (1, 1, 21, 128), (1, 1, 21, 128), None, True, None),
    "odd-dims": ((3, 5, 10), (3, 6, 10), (3, 6, 6), None, False, 0.3),
}


def arrays(name, rng):
    qs, ks, vs, mask, _, _ = CASES[name]
    out = {n: rng.standard_normal(s) for n, s in (("q", qs), ("k", ks), ("v", vs))}
    if mask:
        kind, shape = mask
        if kind == "bool":
            m = rng.random(shape) < 0.7
            m[3] = False  # a row that sees nothing: 0, as in PyTorch
            out["mask"] = m
        else:
            m = rng.standard_normal(shape)
            m[..., 2] = -np.inf  # a hidden key
            out["mask"] = m
    return out


def attention(name, dropout=0.0):
    _, _, _, mask, causal, scale = CASES[name]

    def fn(q, k, v, mask=None):
        return tg.scaled_dot_product_attention(q, k, v, mask, dropout, causal, scale)

    return fn


def build(fn, feeds):
    """Graph with outputs y = fn(**inputs) and the gradients of sum(y * cot)."""
    g = Graph()
    with tracing(g):
        ins = {n: g.input(n, a.shape, "bool" if a.dtype == bool else "f32") for n, a in feeds.items()}
        y = fn(**ins)
        cot = g.input("cot", y.shape)
        wrt = [ins[n] for n in ("q", "k", "v")]
        grads = append_grad(g, tg.sum(y * cot), wrt)
    g.outputs["y"] = y
    for n, t in zip("qkv", wrt):
        g.outputs["g" + n] = grads[t.id]
    return g


def with_cot(feeds, g, rng):
    return dict(feeds, cot=rng.standard_normal(g.inputs["cot"].shape))


def reference(g, feeds, precision="float64"):
    ctx = Context(precision)
    ctx.scalars = {"seed": SEED}
    outs = evaluate(g, list(g.outputs.values()), {g.inputs[n].id: v for n, v in feeds.items()}, ctx)
    return dict(zip(g.outputs, outs))


def on_device(g, feeds, target):
    prog = lower(g, target=target)
    rt = native.Runtime(prog)
    try:
        host = {
            n: array.array(
                "I" if v.dtype == bool else "f",
                v.astype(np.uint32 if v.dtype == bool else np.float32).ravel(),
            )
            for n, v in feeds.items()
        }
        got = rt.run(host, {s.name: SEED for s in prog.scalars}, [("outputs", n) for n in g.outputs])
    finally:
        rt.close()
    return {n: np.array(got[("outputs", n)]).reshape(t.shape) for n, t in g.outputs.items()}, prog


def by_torch(name, feeds):
    _, _, _, mask, causal, scale = CASES[name]
    t = {n: torch.tensor(feeds[n], dtype=torch.float64, requires_grad=True) for n in "qkv"}
    m = torch.tensor(feeds["mask"]) if mask else None
    y = F.scaled_dot_product_attention(t["q"], t["k"], t["v"], m, is_causal=causal, scale=scale)
    (y * torch.tensor(feeds["cot"])).sum().backward()
    return {"y": y.detach().numpy(), **{"g" + n: t[n].grad.numpy() for n in "qkv"}}


def compare(got, want, rtol, atol):
    for n, w in want.items():
        scale = max(1.0, float(np.abs(w).max()))
        np.testing.assert_allclose(got[n], w, rtol=rtol, atol=atol * scale, err_msg=n)


@pytest.mark.parametrize("name", sorted(CASES))
def test_reference_matches_torch(name):
    rng = np.random.default_rng(1)
    feeds = arrays(name, rng)
    g = build(attention(name), feeds)
    feeds = with_cot(feeds, g, rng)
    compare(reference(g, feeds), by_torch(name, feeds), 1e-9, 1e-10)


KERNEL_CASES = [(n, t) for n in sorted(CASES) for t in ("cpu", "gpu") if not (n == "d128" and t == "cpu")]


@pytest.mark.native
@pytest.mark.parametrize("name,cls", KERNEL_CASES, ids=[f"{n}-{c}" for n, c in KERNEL_CASES])
def test_kernels_match_torch(name, cls):
    rng = np.random.default_rng(2)
    feeds = arrays(name, rng)
    g = build(attention(name), feeds)
    feeds = with_cot(feeds, g, rng)
    got, prog = on_device(g, feeds, GPU if cls == "gpu" else Target())
    ops = [k.ops for k in prog.kernels]
    assert ["sdpa"] in ops and ["sdpa_grad_q"] in ops and ["sdpa_grad_kv"] in ops, ops
    wgsl = "".join(k.wgsl for k in prog.kernels)
    assert ("var<workgroup> tv0" in wgsl) == (cls == "gpu")  # the GPU class's tiles only
    compare(got, by_torch(name, feeds), 2e-4, 2e-5)


@pytest.mark.native
@pytest.mark.parametrize("cls", ["cpu", "gpu"])
def test_dropout_kernels_draw_the_reference_bits(cls):
    """Forward and backward kernels against the reference, whose gradient is checked by
    finite differences with the same seed (tests/test_grad_fd.py)."""
    rng = np.random.default_rng(3)
    feeds = arrays("add-mask", rng)
    g = build(attention("add-mask", dropout=0.3), feeds)
    feeds = with_cot(feeds, g, rng)
    got, _ = on_device(g, feeds, GPU if cls == "gpu" else Target())
    compare(got, reference(g, feeds, "float32"), 2e-4, 2e-5)


@pytest.mark.native
def test_dropout_keeps_one_minus_p():
    """With equal scores and v the identity, O[i, j] is nonzero iff weight (i, j) is kept."""
    n, p = 64, 0.25
    feeds = {
        "q": np.zeros((4, n, 8)),
        "k": np.zeros((4, n, 8)),
        "v": np.broadcast_to(np.eye(n), (4, n, n)).copy(),
    }
    g = build(lambda q, k, v: tg.scaled_dot_product_attention(q, k, v, dropout_p=p), feeds)
    got, _ = on_device(g, with_cot(feeds, g, np.random.default_rng(0)), Target())
    kept = got["y"] != 0
    assert abs(kept.mean() - (1 - p)) < 0.02, kept.mean()
    np.testing.assert_allclose(got["y"][kept], 1 / (n * (1 - p)), rtol=1e-5)


def _gpt_layer_peak(t: int) -> int:
    """Planned bytes (all buffers) of a training step of one attention layer, B=4, H=4, D=64."""
    from tgweb import nn

    b, h, d = 4, 4, 64
    c = h * d

    class Layer(nn.Module):
        def __init__(self):
            self.qkv = nn.Linear(c, 3 * c)
            self.out = nn.Linear(c, c)

        def forward(self, x):
            q, k, v = (
                tg.permute(tg.reshape(tg.narrow(self.qkv(x), -1, j * c, c), (b, t, h, d)), (0, 2, 1, 3))
                for j in range(3)
            )
            y = tg.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.out(tg.reshape(tg.permute(y, (0, 2, 1, 3)), (b, t, c)))

    trainer = tg.compile(
        Layer(),
        lambda m, x: tg.mean(m(x) * m(x)),
        inputs={"x": ((b, t, c), "f32")},
        optimizer={"name": "adam", "lr": 1e-3},
        backend="reference",
    )
    return trainer.memory_report()["total_bytes"]


def test_attention_memory_is_linear_in_t():
    small, large = _gpt_layer_peak(256), _gpt_layer_peak(2048)
    assert large <= 12 * small, (small, large)  # the T x T weights would make it ~40x


@pytest.mark.parametrize(
    "call,words",
    [
        (lambda q, k, v: tg.scaled_dot_product_attention(q, k[:, :5], v), "do not fit"),
        (lambda q, k, v: tg.scaled_dot_product_attention(q, k, v, dropout_p=1.0), "dropout_p"),
        (lambda q, k, v: tg.scaled_dot_product_attention(q, k, v, scale=float("nan")), "scale"),
        (lambda q, k, v: tg.scaled_dot_product_attention(q, k, v, attn_mask=tg.zeros((3, 6))), "broadcast"),
        (lambda q, k, v: tg.scaled_dot_product_attention(q, k, v, attn_mask=tg.cast(q, "i32")), "attn_mask"),
        (lambda q, k, v: tg.scaled_dot_product_attention(q, k, v, is_causal=1), "is_causal"),
        (
            lambda q, k, v: tg.scaled_dot_product_attention(q, k, v, tg.zeros((6, 6)), is_causal=True),
            "not both",
        ),
    ],
)
def test_bad_input_is_named(call, words):
    g = Graph()
    with tracing(g):
        q, k, v = (g.input(n, (2, 6, 8)) for n in "qkv")
        before = len(g.tensors)
        with pytest.raises(TraceError, match=words):
            call(q, k, v)
    assert all(t.kind != "sdpa" for t in g.tensors[before:])


def test_head_dims_past_256_are_refused():
    g = Graph()
    with tracing(g):
        q = g.input("q", (2, 300))
        with pytest.raises(TraceError, match="head dims up to 256"):
            tg.scaled_dot_product_attention(q, q, q)
