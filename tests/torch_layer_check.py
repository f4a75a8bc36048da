"""A tgweb.torch layer against the torch layer of the same state dict: outputs, and the
gradients of the inputs and of every parameter of sum(out_k * cot_k), the cotangents
random. tgweb runs on the reference backend in float64 (the test is about the
algorithm: it should agree to rounding) or as kernels on lavapipe (float32). Shared by
tests/test_torch_rnn.py and tests/test_torch_transformer.py."""

from __future__ import annotations

import array

import numpy as np
import torch

from tgweb.backends import native
from tgweb.backends.reference import Context, evaluate
from tgweb.grad import append_grad
from tgweb.ir import Graph, tracing
from tgweb.lower import lower
from tgweb.trace import _as_tensors

SEED = 4242


def flat(out) -> list:
    """The tensors of a layer's result (tuples nested as PyTorch returns them), Nones left out."""
    if out is None:
        return []
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in flat(o)]
    return [out]


def paired(ref, m):
    """Load ref's (a torch module's) state dict into m (a tgweb.torch module), ref in float64."""
    m.load_state_dict({k: v.detach().numpy() for k, v in ref.state_dict().items()})
    return ref.double()


def by_torch(ref, call, feeds: dict[str, np.ndarray], rng, constant=()):
    """(results by name, cotangents): y0.. outputs, g_<param> and gi_<input> gradients
    (not of the inputs named in constant: masks, which take no gradient in tgweb)."""
    ins = {
        n: torch.tensor(a, dtype=torch.float64, requires_grad=n not in constant)
        if a.dtype.kind == "f"
        else torch.tensor(a)
        for n, a in feeds.items()
    }
    ref.zero_grad(set_to_none=True)
    outs = flat(call(ref, **ins))
    cots = [rng.standard_normal(tuple(o.shape)).astype(np.float32) for o in outs]
    sum((o * torch.tensor(c, dtype=torch.float64)).sum() for o, c in zip(outs, cots)).backward()
    got = {f"y{k}": o.detach().numpy() for k, o in enumerate(outs)}
    for n, p in ref.named_parameters():
        got["g_" + n] = p.grad.numpy() if p.grad is not None else np.zeros(tuple(p.shape))
    for n, t in ins.items():
        if t.requires_grad:
            got["gi_" + n] = t.grad.numpy() if t.grad is not None else np.zeros(tuple(t.shape))
    return got, cots


def _dtype(a: np.ndarray) -> str:
    return {"f": "f32", "b": "bool"}.get(a.dtype.kind, "i32")


def graph_of(m, call, feeds: dict[str, np.ndarray], cots: list, constant=()) -> tuple[Graph, dict]:
    """The graph of the same results, every parameter an input (so both backends take it
    as a feed), and the feeds it takes."""
    g = Graph()
    params = m.named_parameters()
    all_feeds = dict(feeds)
    with tracing(g):
        wrt = {}
        for n, p in params:
            t = g.input("p_" + n.replace(".", "__"), p.shape)
            g.param_tensors[id(p)] = t
            wrt["g_" + n] = t
            all_feeds[t.attrs["name"]] = np.frombuffer(p.value, np.float32).reshape(p.shape)
        ins = {n: g.input(n, a.shape, _dtype(a)) for n, a in feeds.items()}
        wrt.update({"gi_" + n: t for n, t in ins.items() if t.dtype == "f32" and n not in constant})
        outs = _as_tensors(flat(call(m, **ins)))
        loss = None
        for k, (o, c) in enumerate(zip(outs, cots)):
            cot = g.input(f"cot{k}", c.shape)
            all_feeds[f"cot{k}"] = c
            term = (o * cot).sum()
            loss = term if loss is None else loss + term
        grads = append_grad(g, loss, list(wrt.values()))
    g.outputs.update({f"y{k}": o for k, o in enumerate(outs)})
    g.outputs.update({n: grads[t.id] for n, t in wrt.items()})
    return g, all_feeds


def by_tgweb(m, call, feeds, cots, backend: str = "reference", constant=()) -> dict[str, np.ndarray]:
    g, all_feeds = graph_of(m, call, feeds, cots, constant)
    if backend == "reference":
        ctx = Context("float64")
        ctx.scalars = {"seed": SEED}
        fed = {
            g.inputs[n].id: np.asarray(v, np.float64 if v.dtype.kind == "f" else v.dtype)
            for n, v in all_feeds.items()
        }
        return dict(zip(g.outputs, evaluate(g, list(g.outputs.values()), fed, ctx)))
    prog = lower(g)
    rt = native.Runtime(prog)
    try:
        host = {n: _host(v) for n, v in all_feeds.items()}
        got = rt.run(host, {s.name: SEED for s in prog.scalars}, [("outputs", n) for n in g.outputs])
    finally:
        rt.close()
    return {n: np.array(got[("outputs", n)]).reshape(t.shape) for n, t in g.outputs.items()}


def _host(v: np.ndarray) -> array.array:
    if v.dtype.kind == "b":
        return array.array("I", v.astype(np.uint32).ravel())
    if v.dtype.kind in "iu":
        return array.array("i", v.astype(np.int32).ravel())
    return array.array("f", v.astype(np.float32).ravel())


def check(ref, m, call, feeds, backend="reference", rtol=None, atol=None, seed=0, constant=()) -> dict:
    """Compare tgweb's m with torch's ref (whose state dict m is given here) on feeds;
    float64 on the reference backend, float32 tolerances on the kernels."""
    ref = paired(ref, m)
    want, cots = by_torch(ref, call, feeds, np.random.default_rng(seed), constant)
    got = by_tgweb(m, call, feeds, cots, backend, constant)
    rtol = rtol or (1e-9 if backend == "reference" else 2e-4)
    atol = atol or (1e-10 if backend == "reference" else 2e-5)
    assert set(got) == set(want), (sorted(got), sorted(want))
    for n, w in want.items():
        scale = max(1.0, float(np.abs(w).max()))
        np.testing.assert_allclose(got[n], w, rtol=rtol, atol=atol * scale, err_msg=n)
    return got
