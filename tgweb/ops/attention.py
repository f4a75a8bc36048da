"""Fused scaled dot-product attention (torch.nn.functional.scaled_dot_product_attention).

q [..., Tq, D], k [..., Tk, D], v [..., Tk, Dv]; the leading dims (and a mask's)
broadcast. Score s_ij = scale * q_i . k_j (+ an additive mask); key j is visible to
query i unless is_causal hides it (j > i, top-left aligned as torch.tril), a
boolean mask is False there, or s_ij is -inf. A row with no visible key gives 0, as
PyTorch does.

Kinds (attrs {causal, scale, mask: None | "bool" | "add", dropout, stream}; inputs
(q, k, v) + (mask,) if mask + (seed,) if dropout, after the operands listed):

- ``sdpa``: -> [L..., Tq, Dv + 1]: the output O (columns 0..Dv-1) and each row's
  log-sum-exp of its visible scores (column Dv; +inf for a row with none), what the
  backward recomputes the probabilities from. The kernel walks the keys with an
  online softmax (one running max and sum per row) and never stores a Tq x Tk tensor.
- ``sdpa_grad_q`` (q, k, v, P, dO, delta, ...) -> dQ [L..., Tq, D], where P is the
  ``sdpa`` result (or its lse column alone: the kernels read P's last column) and
  delta = rowsum(dO * O) [L..., Tq, 1] (FlashAttention-2).
- ``sdpa_grad_kv`` (the same inputs) -> [L..., Tk, D + Dv]: dK then dV per key row.

In a mixed-precision graph (tgweb.ops.half) the kernels read q, k, v and dO from their
f16 copies (those are what the backward keeps); scores, the running max and sum, the
log-sum-exp and the accumulators stay f32, and so do the results.

L is the broadcast of the leading dims; gradients are summed down to each operand's
shape afterwards. Dropout drops p_ij after the softmax with the counter-based stream
of tgweb.ops.random: p_ij is kept iff uniform(seed, stream, (z * Tq + i) * Tk + j) >=
dropout (z the flat index into L), and every kernel draws the same bits. No gradient
flows to attn_mask.

The kernels (forward and backward, plain and on subgroup matrices): codegen/attention.py
and the modules beside it.
"""

from __future__ import annotations

import math

from ..codegen import attention as kernels
from ..codegen.attention_rows import FORWARD_OPERANDS, GRAD_OPERANDS, extras
from ..codegen.attention_rows import lead as _lead
from ..ir import NO_GRAD, OpError, Tensor, broadcast_shapes, make, prod, register
from . import random as rnd
from .base import as_tensor, op
from .half import half

MAX_HEAD_DIM = 256
N_OPERANDS = {"sdpa": FORWARD_OPERANDS, "sdpa_grad_q": GRAD_OPERANDS, "sdpa_grad_kv": GRAD_OPERANDS}


# ---------------------------------------------------------------- shapes


def _extras(kind: str, attrs) -> tuple[int | None, int | None]:
    """Input positions of the mask and of the seed (None where absent)."""
    return extras(N_OPERANDS[kind], attrs)


def _check_operands(q, k, v, mask) -> tuple[int, ...]:
    for name, x in (("q", q), ("k", k), ("v", v)):
        if x.dtype not in ("f32", "f16") or x.ndim < 2:
            raise OpError(
                f"{name} must be float (f32) of shape [..., T, D], got {x.dtype} of shape {x.shape}"
            )
    if q.shape[-1] != k.shape[-1] or k.shape[-2] != v.shape[-2]:
        raise OpError(
            f"q {q.shape}, k {k.shape} and v {v.shape} do not fit: q and k need the same last dim, "
            "k and v the same number of keys"
        )
    if max(q.shape[-1], v.shape[-1]) > MAX_HEAD_DIM:
        raise OpError(f"head dims up to {MAX_HEAD_DIM} are supported, got q {q.shape} and v {v.shape}")
    try:
        lead = _lead(q.shape, k.shape, v.shape, mask.shape if mask is not None else None)
        if mask is not None:
            broadcast_shapes(mask.shape[-2:], (q.shape[-2], k.shape[-2]))
            if len(mask.shape) - 2 > len(lead):
                raise OpError("")
    except OpError:
        shapes = f"q {q.shape}, k {k.shape}, v {v.shape}" + (
            f", mask {mask.shape}" if mask is not None else ""
        )
        raise OpError(f"the shapes do not broadcast: {shapes}") from None
    return lead


def _infer(kind):
    def infer(ins, attrs):
        q, k, v = ins[:3]
        mpos, spos = _extras(kind, attrs)
        lead = _check_operands(q, k, v, ins[mpos] if mpos is not None else None)
        if spos is not None and (ins[spos].shape != () or ins[spos].dtype != "i32"):
            raise OpError("the seed must be an i32 scalar")
        tq, tk, d, dv = q.shape[-2], k.shape[-2], q.shape[-1], v.shape[-1]
        shape = {"sdpa": (tq, dv + 1), "sdpa_grad_q": (tq, d), "sdpa_grad_kv": (tk, d + dv)}[kind]
        return lead + shape, "f32"

    return infer


# ---------------------------------------------------------------- the math, for NumPy and PyTorch


class _NumPy:
    def __init__(self, ctx):
        self.np, self.f, self.ctx = ctx.np, ctx.f, ctx

    def arr(self, a):
        return self.np.asarray(a).astype(self.f)

    def swap(self, a):
        return self.np.swapaxes(a, -1, -2)

    def tril(self, tq, tk):
        return self.np.tril(self.np.ones((tq, tk), bool))

    def uniform(self, seed, stream, n):
        return rnd._np_uniform(self.ctx, seed, stream, self.np.arange(n, dtype=self.np.uint64))

    def rowmax(self, a):
        return a.max(-1, keepdims=True)

    def rowsum(self, a):
        return a.sum(-1, keepdims=True)

    def __getattr__(self, name):  # exp, log, where, isinf, concatenate, ...
        return getattr(self.np, name)


class _Torch:
    def __init__(self, tc):
        self.torch, self.tc = tc.torch, tc

    def arr(self, a):
        return a.to(self.tc.float)

    def swap(self, a):
        return a.transpose(-1, -2)

    def tril(self, tq, tk):
        return self.torch.ones(tq, tk, dtype=self.torch.bool, device=self.tc.device).tril()

    def uniform(self, seed, stream, n):
        i = self.torch.arange(n, dtype=self.torch.int64, device=self.tc.device)
        return rnd._torch_uniform(self.tc, seed, stream, i).to(self.tc.float)

    def rowmax(self, a):
        return a.amax(-1, keepdim=True)

    def rowsum(self, a):
        return a.sum(-1, keepdim=True)

    def concatenate(self, xs, axis):
        return self.torch.cat(xs, axis)

    def __getattr__(self, name):  # exp, log, where, isinf, ...
        return getattr(self.torch, name)


def _scores(xp, kind, args, t):
    """(s with hidden entries -inf, the dropout factor per entry, lead) for the node's inputs."""
    a = t.attrs
    q, k = xp.arr(args[0]), xp.arr(args[1])
    mpos, spos = _extras(kind, a)
    s = (q @ xp.swap(k)) * a["scale"]
    tq, tk = s.shape[-2], s.shape[-1]
    vis = xp.tril(tq, tk) if a["causal"] else None
    if a["mask"] == "add":
        s = s + xp.arr(args[mpos])
    elif a["mask"] == "bool":
        m = args[mpos] != 0
        vis = m if vis is None else (m & vis)
    lead = _lead(args[0].shape, args[1].shape, args[2].shape, args[mpos].shape if mpos is not None else None)
    s = xp.broadcast_to(s, lead + (tq, tk))  # v's and the mask's leading dims too
    if vis is not None:
        s = xp.where(vis, s, -math.inf)
    keep = 1.0
    if a["dropout"]:
        u = xp.uniform(args[spos], a["stream"], prod(lead) * tq * tk).reshape(lead + (tq, tk))
        keep = xp.where(u >= a["dropout"], 1.0 / (1.0 - a["dropout"]), 0.0)
    return s, keep


def _forward(xp, args, t):
    s, keep = _scores(xp, "sdpa", args, t)
    m = xp.rowmax(s)
    m = xp.where(xp.isinf(m), 0.0, m)  # a row with no visible key
    e = xp.exp(s - m)
    total = xp.rowsum(e)
    some = total > 0
    lse = xp.where(some, m + xp.log(xp.where(some, total, 1.0)), math.inf)
    out = (e / xp.where(some, total, 1.0) * keep) @ xp.arr(args[2])
    return xp.concatenate([out, lse], -1)


def _backward(xp, kind, args, t):
    """dQ, or dK and dV side by side, from the saved log-sum-exp (FlashAttention-2)."""
    s, keep = _scores(xp, kind, args, t)
    v, lse, do, delta = (xp.arr(args[j]) for j in (2, 3, 4, 5))
    lse = lse[..., -1:]
    p = xp.exp(s - lse)  # 0 where s is -inf or the row has no visible key (lse = inf)
    ds = p * ((do @ xp.swap(v)) * keep - delta)
    if kind == "sdpa_grad_q":
        return (ds @ xp.arr(args[1])) * t.attrs["scale"]
    dk = (xp.swap(ds) @ xp.arr(args[0])) * t.attrs["scale"]
    return xp.concatenate([dk, xp.swap(p * keep) @ do], -1)


# ---------------------------------------------------------------- the kinds


def _output_grad(t: Tensor, g: Tensor) -> Tensor:
    """dO from the cotangent of [O | lse]: the log-sum-exp column is internal, so g is
    normally dO padded with a zero column (narrow's gradient), taken as it is."""
    from .shape import narrow

    dv = t.shape[-1] - 1
    if g.kind == "pad" and g.attrs["axis"] == g.ndim - 1 and (g.attrs["before"], g.attrs["after"]) == (0, 1):
        return g.inputs[0]
    return narrow(g, -1, 0, dv)


def _g_sdpa(t: Tensor, g: Tensor):
    from .elementwise import unbroadcast
    from .reduce import sum as rsum
    from .shape import narrow

    q, k, v = t.inputs[:3]
    d, dv = q.shape[-1], v.shape[-1]
    do = _output_grad(t, g)
    # mixed precision: O's f16 copy and lse's own copy (made in the forward), not t
    o, lse = t.graph.kept.get(t.id, (narrow(t, -1, 0, dv), t))
    delta = rsum(do * o, -1, keepdims=True)
    # mixed precision: the kernels read dO from its f16 copy, as they read q, k and v
    ins = (q, k, v, lse, half(do), delta) + tuple(t.inputs[3:])
    dq = make("sdpa_grad_q", ins, **t.attrs)
    dkv = make("sdpa_grad_kv", ins, **t.attrs)
    grads = [dq, narrow(dkv, -1, 0, d), narrow(dkv, -1, d, dv)]
    return [unbroadcast(x, y.shape) for x, y in zip(grads, (q, k, v))] + [None] * (len(t.inputs) - 3)


register(
    "sdpa",
    family="attention",
    role="kernel",
    strided=True,
    emit=kernels.forward,
    infer=_infer("sdpa"),
    grad=_g_sdpa,
    ref=lambda ctx, args, t: _forward(_NumPy(ctx), args, t),
    torch=lambda tc, a, n: _forward(_Torch(tc), a, n),
)
for _kind, _emitter in (("sdpa_grad_q", kernels.grad_q), ("sdpa_grad_kv", kernels.grad_kv)):
    register(
        _kind,
        family="attention",
        role="kernel",
        strided=True,
        emit=_emitter,
        infer=_infer(_kind),
        grad=NO_GRAD,
        ref=lambda ctx, args, t: _backward(_NumPy(ctx), t.kind, args, t),
        torch=lambda tc, a, n: _backward(_Torch(tc), n.kind, a, n),
    )


def _check_args(attn_mask, dropout_p, is_causal, scale) -> None:
    if isinstance(dropout_p, bool) or not isinstance(dropout_p, (int, float)) or not 0 <= dropout_p < 1:
        raise OpError(f"dropout_p must be a number in [0, 1), got {dropout_p!r}")
    if not isinstance(is_causal, bool):
        raise OpError(f"is_causal must be True or False, got {is_causal!r}")
    if scale is not None and (
        isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(scale)
    ):
        raise OpError(f"scale must be a finite number or None, got {scale!r}")
    if attn_mask is not None and is_causal:
        raise OpError("give attn_mask or is_causal=True, not both (as PyTorch)")
    if attn_mask is not None and attn_mask.dtype not in ("bool", "f32"):
        raise OpError(
            f"attn_mask must be bool (True: attend) or float (added to the scores), "
            f"got {attn_mask.dtype} of shape {attn_mask.shape}"
        )


@op
def scaled_dot_product_attention(
    q, k, v, attn_mask=None, dropout_p: float = 0.0, is_causal: bool = False, scale: float | None = None
) -> Tensor:
    """softmax(q @ k^T * scale + mask) @ v, as torch.nn.functional.scaled_dot_product_attention:
    q [..., Tq, D], k [..., Tk, D], v [..., Tk, Dv] with broadcasting leading dims;
    attn_mask bool (True: attend) or float (added), broadcastable to [..., Tq, Tk];
    is_causal hides key j from query i < j (top-left aligned, instead of a mask);
    dropout_p drops attention weights (tgweb's per-step random stream); scale
    defaults to 1 / sqrt(D). One kernel, no Tq x Tk tensor stored; its gradient two
    kernels that recompute the weights from each row's saved log-sum-exp. No gradient
    flows to attn_mask."""
    from .shape import narrow, reshape

    # mixed precision: the operands are read from their f16 copies (what the backward keeps);
    # the softmax statistics and the accumulation stay f32
    q, k, v = (half(as_tensor(x)) for x in (q, k, v))
    mask = None if attn_mask is None else as_tensor(attn_mask)
    _check_args(mask, dropout_p, is_causal, scale)
    if mask is not None and mask.ndim < 2:
        mask = reshape(mask, (1,) * (2 - mask.ndim) + mask.shape)
    _check_operands(q, k, v, mask)
    kinds = {"bool": "bool", "f32": "add"}
    attrs = {
        "causal": is_causal,
        "scale": float(1.0 / math.sqrt(q.shape[-1]) if scale is None else scale),
        "mask": kinds[mask.dtype] if mask is not None else None,
        "dropout": float(dropout_p),
        "stream": -1,
    }
    ins = (q, k, v) + ((mask,) if mask is not None else ())
    if dropout_p:
        attrs["stream"] = rnd.next_stream(q.graph)
        ins += (q.graph.scalar("seed", "i32"),)
    t = make("sdpa", ins, **attrs)
    out = narrow(t, -1, 0, v.shape[-1])
    g = t.graph
    if out.id in g.saved:
        # mixed precision: the backward reads O through the f16 copy the next product reads
        # and lse from a copy of its own, so [O | lse] (f32) is not kept for the backward
        g.kept[t.id] = (g.saved[out.id], narrow(t, -1, v.shape[-1], 1))
    return out
