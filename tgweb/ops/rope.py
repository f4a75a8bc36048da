"""Rotary position embedding (RoPE) on x [..., T, D].

Kind and attrs:

- ``rope`` {base, interleaved, inverse}: (x [..., T, D] f32[, pos i32]) -> x's shape.
  Pair (a, b) of the last axis at position t is rotated by angle t * base^(-2f/D)
  (f the pair's number): (a cos - b sin, b cos + a sin). interleaved=False pairs
  element f with f + D/2 (Hugging Face Llama's ``rotate_half``); interleaved=True
  pairs 2f with 2f + 1 (GPT-J, Meta's Llama). Without pos the position of an
  element is its index along T; pos has x's rank with a last axis of 1 and
  broadcasts over x's leading axes. inverse rotates by minus the angle: a rotation's
  transpose is its inverse, so the gradient of rope is rope with inverse flipped.
"""

from __future__ import annotations

import math

from ..codegen.common import f32_lit
from ..ir import OpError, Tensor, make, register
from .base import as_tensor, op


def _inv_freq(base: float, d: int) -> list[float]:
    """base^(-2f/D) for each pair f (computed in double, stored as f32 literals)."""
    return [1.0 / base ** (2 * f / d) for f in range(d // 2)]


def _pairing(idx, d: int, interleaved: bool):
    """For idx = arange(D) (NumPy or PyTorch): each element's pair number, its
    partner's index, and whether it is the pair's first element (a - b sin)."""
    if interleaved:
        return idx // 2, idx ^ 1, idx % 2 == 0
    return idx % (d // 2), (idx + d // 2) % d, idx < d // 2


def _rotate(x, pos, inv_freq, idx, attrs, xp_cos, xp_sin):
    """x * cos + x[partner] * sign * sin, the same code for NumPy and PyTorch arrays."""
    f, partner, first = _pairing(idx, x.shape[-1], attrs["interleaved"])
    angle = pos * inv_freq[f]
    sign = (1 - 2 * first) * (-1 if attrs["inverse"] else 1)
    return x * xp_cos(angle) + x[..., partner] * sign * xp_sin(angle)


def _infer_rope(ins, attrs):
    x = ins[0]
    if x.dtype != "f32" or x.ndim < 2:
        raise OpError(f"x must be float (f32) of shape [..., T, D], got {x.dtype} of shape {x.shape}")
    if x.shape[-1] % 2:
        raise OpError(f"the last axis D must be even to rotate pairs, got shape {x.shape}")
    if len(ins) == 2:
        pos = ins[1]
        if pos.dtype != "i32":
            raise OpError(f"positions must be integers (i32), got {pos.dtype} of shape {pos.shape}")
        fits = all(p in (1, n) for p, n in zip(pos.shape, x.shape))
        if pos.ndim != x.ndim or pos.shape[-1] != 1 or not fits:
            raise OpError(
                f"positions of shape {pos.shape} do not broadcast to x's leading axes {x.shape[:-1]}"
            )
    return x.shape, "f32"


def _ref_rope(ctx, args, t):
    np, x = ctx.np, args[0]
    d = x.shape[-1]
    pos = args[1] if len(args) == 2 else np.arange(x.shape[-2]).reshape(-1, 1)
    inv = np.asarray(_inv_freq(t.attrs["base"], d), ctx.f)
    return _rotate(x, pos.astype(ctx.f), inv, np.arange(d), t.attrs, np.cos, np.sin).astype(ctx.f)


def _rope_wgsl(g, m) -> str:
    x = m.inputs[0]
    nd, d, a = len(m.shape), m.shape[-1], m.attrs
    c = g.coord(nd - 1)
    if a["interleaved"]:
        f, partner, first = f"({c} / 2u)", f"({c} ^ 1u)", f"(({c} & 1u) == 0u)"
    else:
        h = d // 2
        f, partner, first = f"({c} % {h}u)", f"select({c} - {h}u, {c} + {h}u, {c} < {h}u)", f"({c} < {h}u)"
    table = g.kc.fresh("freq")
    freqs = ", ".join(f32_lit(v) for v in _inv_freq(a["base"], d))
    g.kc.decls.append(f"var<private> {table}: array<f32, {d // 2}> = array<f32, {d // 2}>({freqs});")
    if len(m.inputs) == 2:
        pos = g.load_at(m.inputs[1], g.bcast_index(m.inputs[1].shape))
    else:
        pos = g.coord(nd - 2)
    # WGSL promises sin/cos accuracy only on [-pi, pi] (SwiftShader drifts by 3e-4 at 10
    # rad): reduce by 2pi split in two parts, the first exact in k * hi (Cody-Waite)
    turns = g.let(f"round(f32({pos}) * {table}[{f}] * {f32_lit(1 / (2 * math.pi))})")
    angle = g.let(
        f"(f32({pos}) * {table}[{f}] - {turns} * 6.28125) - {turns} * {f32_lit(2 * math.pi - 6.28125)}"
    )
    lo, hi = ("-1.0", "1.0") if a["inverse"] else ("1.0", "-1.0")  # second, first of a pair
    s = g.let(f"select({lo}, {hi}, {first}) * sin({angle})")
    row = g.let(f"{g.ivar} - {c}")  # the flat index of the row's first element
    xv, xp = g.load_at(x, f"{row} + {c}"), g.load_at(x, f"{row} + {partner}")
    return g.let(f"{xv} * cos({angle}) + {xp} * {s}")


def _g_rope(t, g):
    a = dict(t.attrs, inverse=not t.attrs["inverse"])
    return [make("rope", (g,) + tuple(t.inputs[1:]), **a)] + [None] * (len(t.inputs) - 1)


def _torch_rope(tc, a, n):
    torch, x = tc.torch, a[0]
    d = x.shape[-1]
    pos = a[1] if len(a) == 2 else torch.arange(x.shape[-2], device=x.device).unsqueeze(-1)
    inv = torch.tensor(_inv_freq(n.attrs["base"], d), dtype=x.dtype, device=x.device)
    idx = torch.arange(d, device=x.device)
    return _rotate(x, pos.to(x.dtype), inv, idx, n.attrs, torch.cos, torch.sin)


register(
    "rope",
    family="nn",
    role="index",
    emit=_rope_wgsl,
    infer=_infer_rope,
    grad=_g_rope,
    ref=_ref_rope,
    torch=_torch_rope,
)


def _positions(positions, x: Tensor) -> tuple[Tensor, ...]:
    """() for the default arange(T), else positions as an input of x's rank whose last
    axis is 1 (a [T] tensor or one broadcastable to x's leading axes [..., T])."""
    from .shape import reshape

    if positions is None:
        return ()
    p = as_tensor(positions)
    if p.ndim == 0 or p.ndim > x.ndim - 1:
        raise OpError(f"positions must have shape [T] or x's leading axes {x.shape[:-1]}, got {p.shape}")
    return (reshape(p, (1,) * (x.ndim - 1 - p.ndim) + p.shape + (1,)),)


@op
def rope(x, positions=None, base: float = 10000.0, interleaved: bool = False) -> Tensor:
    """Rotary position embedding on x [..., T, D] (D even): pair f of the last axis at
    position t is rotated by t * base^(-2f/D). interleaved=False pairs the two halves
    (Hugging Face's ``x * cos + rotate_half(x) * sin``), True adjacent elements (GPT-J,
    Meta). positions (i32, [T] or broadcastable to x's leading axes) default to
    arange(T). One fused kernel; its gradient is the inverse rotation."""
    x = as_tensor(x)
    if x.ndim < 2:
        raise OpError(f"x must have shape [..., T, D], got {x.shape}")
    if not isinstance(base, (int, float)) or isinstance(base, bool) or not base > 0:
        raise OpError(f"base must be a positive number, got {base!r}")
    return make(
        "rope",
        (x,) + _positions(positions, x),
        base=float(base),
        interleaved=bool(interleaved),
        inverse=False,
    )
