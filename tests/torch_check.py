"""The check every tgweb.torch layer passes against PyTorch (tests/test_torch_layers.py,
tests/test_torch_norm.py): the same module built under both, tgweb's loaded from
torch's state dict (and the keys round-tripping back), then one compiled SGD step at
lr 1 on sum(layer(x) * w) with x a parameter: the loss is the forward, and each
parameter's change is minus its gradient (inputs' included), compared with torch's
autograd; the buffers the step updated (running statistics) too."""

from __future__ import annotations

import numpy as np
import torch

import tgweb as tg
import tgweb.torch as tgt


def _holder(ns, layer, x):
    class Holder(ns.nn.Module):
        def __init__(self):
            super().__init__()
            self.x = ns.nn.Parameter(ns.tensor(x) if ns is tgt else torch.from_numpy(x.copy()))
            self.layer = layer

    return Holder()


def compare(make, x, backend="reference", train=True, tol=2e-5, x_grad=True):
    """make(ns) builds the layer under ns (torch or tgweb.torch); x: an f32 input array.
    x_grad=False: x's gradient is not compared (a layer whose gradient in x PyTorch
    defines at ties differently)."""
    torch.manual_seed(0)
    tl = make(torch)
    tl.train(train)
    state = {k: v.detach().numpy().copy() for k, v in tl.state_dict().items()}
    gl = make(tgt)
    gl.train(train)
    gl.load_state_dict(state)
    assert set(gl.state_dict()) == set(state)
    back = make(torch)
    back.load_state_dict({k: torch.from_numpy(np.asarray(v).copy()) for k, v in gl.state_dict().items()})

    th = _holder(torch, tl, x)
    want = th.layer(th.x)
    w = np.random.default_rng(7).standard_normal(tuple(want.shape)).astype(np.float32)
    loss_t = (want * torch.from_numpy(w)).sum()
    loss_t.backward()
    grads = {n: p.grad.numpy() for n, p in th.named_parameters() if p.grad is not None}

    gh = _holder(tgt, gl, x)
    opt = tgt.optim.SGD(gh.parameters(), lr=1.0)
    tr = tg.compile(gh, lambda m, w: (m.layer(m.x) * w).sum(), {"w": w.shape}, optimizer=opt, backend=backend)
    before = tr.params()
    r = tr.step(w=w)
    assert r.ok, r.reason
    scale = max(1.0, float(np.abs(loss_t.item())))
    assert abs(r.loss - loss_t.item()) <= tol * 10 * scale, (r.loss, loss_t.item())
    after = tr.params()
    for n, g in grads.items():
        if n == "x" and not x_grad:
            continue
        got, atol = before[n] - after[n], tol * max(1.0, float(np.abs(g).max()))
        np.testing.assert_allclose(got, g, rtol=tol * 50, atol=atol, err_msg=n)
    for n, v in tr.buffers().items():
        np.testing.assert_allclose(v, th.state_dict()[n].numpy(), rtol=1e-5, atol=1e-6, err_msg=n)
    tr.close()
    return want.detach().numpy()
