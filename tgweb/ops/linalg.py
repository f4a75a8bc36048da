"""Matrix multiplication with NumPy batch broadcasting.

The node kind "matmul" takes flags ta/tb: the stored operand is the transpose
(over its last two axes) of the logical one. Gradients use them, so the backward
pass reads transposed operands through strides instead of copying them.
"""

from __future__ import annotations

from ..codegen.matmul import emit_matmul, operand_layout, pairs_ok
from ..ir import OpError, Tensor, broadcast_shapes, make, prod, register, replace
from .base import as_tensor, op
from .half import half


def _logical(t: Tensor, trans: bool) -> tuple[int, int]:
    r, c = t.shape[-2], t.shape[-1]
    return (c, r) if trans else (r, c)


def _infer_matmul(ins, attrs):
    a, b = ins
    if a.dtype not in ("f32", "f16") or b.dtype not in ("f32", "f16"):
        raise OpError(f"needs float (f32) tensors, got {a.dtype} {a.shape} and {b.dtype} {b.shape}")
    if a.ndim < 2 or b.ndim < 2:
        raise OpError(f"operands need rank >= 2, got {a.shape} and {b.shape}")
    m, k = _logical(a, attrs["ta"])
    k2, n = _logical(b, attrs["tb"])
    if k != k2:
        raise OpError(
            f"inner dimensions differ: {a.shape} @ {b.shape}"
            + (" (transposed)" if attrs["ta"] or attrs["tb"] else "")
        )
    try:
        batch = broadcast_shapes(a.shape[:-2], b.shape[:-2])
    except OpError:
        raise OpError(f"batch dimensions do not broadcast: {a.shape} @ {b.shape}") from None
    return batch + (m, n), "f32"


def _product(a: Tensor, b: Tensor, ta: bool, tb: bool) -> Tensor:
    """The matmul node, its operands read from their f16 copies in a mixed-precision graph."""
    return make("matmul", (half(a), half(b)), ta=ta, tb=tb)


def _g_matmul(t, g):
    from .elementwise import unbroadcast

    a, b = t.inputs
    g = half(g)  # one f16 copy of the cotangent serves both products
    ta, tb = t.attrs["ta"], t.attrs["tb"]
    # C = A B with A = op(a), B = op(b):  dA = g B^T,  dB = A^T g
    if ta:  # a stores A^T, so da = dA^T = B g^T
        da = _product(b, g, tb, True)
    else:
        da = _product(g, b, False, not tb)
    if b.ndim == 2 and a.ndim > 2 and not ta:
        # a shared weight (a Linear layer): fold a's batch dims into K, one matmul
        # instead of a batched product summed over the batch (reshapes are free)
        from .shape import reshape

        a2 = reshape(a, (-1, a.shape[-1]))
        g2 = reshape(g, (-1, g.shape[-1]))
        db = _product(g2, a2, True, False) if tb else _product(a2, g2, True, False)
        return [unbroadcast(da, a.shape), db]
    if tb:  # b stores B^T, so db = dB^T = g^T A
        db = _product(g, a, True, ta)
    else:
        db = _product(a, g, not ta, False)
    return [unbroadcast(da, a.shape), unbroadcast(db, b.shape)]


def _ref_matmul(ctx, args, t):
    a, b = args
    if t.attrs["ta"]:
        a = ctx.np.swapaxes(a, -1, -2)
    if t.attrs["tb"]:
        b = ctx.np.swapaxes(b, -1, -2)
    return ctx.np.matmul(a, b)


def _split_k(m: Tensor, target, new_id):
    """On a GPU, a product of few output tiles and a long k (a weight gradient: 64 x 256
    outputs over 1,024 rows) runs on a few multiprocessors. Split k into S slices: one
    product batched over the slices (S times the workgroups, operands read through
    strided views, nothing copied), then a sum over the batch, which also takes over
    the product's fused epilogue. A product written transposed (a folded permute) is
    computed as B^T A^T instead. None where it does not apply."""
    chunk, want = target.knob("split_k_chunk"), target.knob("split_k_tiles")
    if not chunk or len(m.shape) != 2:
        return None
    views = m.attrs.get("views", {})
    a, b = m.inputs
    ba, _, M, K, am, ak, ao = operand_layout(a, views.get(0), m.attrs["ta"])
    bb, _, _, N, bk, bn, bo = operand_layout(b, views.get(1), m.attrs["tb"])
    # (operand, rows, row stride, k stride, offset) and (operand, cols, k stride, col stride, offset)
    left, right = (a, M, am, ak, ao), (b, N, bk, bn, bo)
    if "out_view" in m.attrs:
        if tuple(m.attrs["out_view"][1]) != (1, M):
            return None
        left, right = (b, N, bn, bk, bo), (a, M, ak, am, ao)  # C^T = B^T A^T, written contiguously
    tiles = -(-M // 64) * -(-N // 64)
    S = 1
    while K % (2 * S) == 0 and K // (2 * S) >= chunk and tiles * 2 * S <= want:
        S *= 2
    if ba or bb or S < 2:
        return None
    ks, (x, P, ps, pk, xo), (y, Q, qk, qs, yo) = K // S, left, right
    views = {0: ((S, P, ks), (ks * pk, ps, pk), xo), 1: ((S, ks, Q), (ks * qk, qk, qs), yo)}
    attrs = {"ta": False, "tb": False, "views": views}
    parts = replace(m, id=new_id(), inputs=(x, y), attrs=attrs, shape=(S, P, Q))
    return [parts, replace(m, kind="sum", inputs=(parts,), attrs={"axes": (0,), "keepdims": False})]


def _flops_matmul(m: Tensor) -> int:
    """A multiply and an add per output element and step of k."""
    a = m.inputs[0]
    k = operand_layout(a, m.attrs.get("views", {}).get(0), m.attrs["ta"])[3]
    return 2 * prod(m.shape) * k


def _torch_matmul(tc, a, n):
    x, y = a
    return tc.torch.matmul(x.mT if n.attrs["ta"] else x, y.mT if n.attrs["tb"] else y)


register(
    "matmul",
    family="linalg",
    role="kernel",
    emit=emit_matmul,
    epilogue=True,
    strided=True,
    rewrite=_split_k,
    infer=_infer_matmul,
    grad=_g_matmul,
    ref=_ref_matmul,
    torch=_torch_matmul,
    flops=_flops_matmul,
    pairs=pairs_ok,
)


@op(method=True, torch=True)
def matmul(a, b) -> Tensor:
    """a @ b as in NumPy: batch dims broadcast, 1-D operands get a unit axis added and removed."""
    from .shape import reshape

    a, b = as_tensor(a), as_tensor(b)
    if a.ndim == 0 or b.ndim == 0:
        raise OpError(f"matmul does not take scalars: {a.shape} @ {b.shape}")
    va, vb = a.ndim == 1, b.ndim == 1
    if va:
        a = reshape(a, (1,) + a.shape)
    if vb:
        b = reshape(b, b.shape + (1,))
    if a.shape[-1] != b.shape[-2]:
        raise OpError(f"inner dimensions differ: {a.shape} @ {b.shape}")
    out = _product(a, b, False, False)
    if va or vb:
        shape = out.shape
        if vb:
            shape = shape[:-1]
        if va:
            shape = shape[:-2] + shape[-1:] if not vb else shape[:-1]
        out = reshape(out, shape)
    return out
