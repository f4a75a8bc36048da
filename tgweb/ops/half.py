"""precision="mixed": the f16 copies of matmul operands.

In a graph traced with precision "mixed" (Graph.precision), every operand of a
product, forward and backward, is read from its `to_f16` copy: the value rounded to
binary16 and stored in two bytes (tgweb.codegen.kernel), one copy per tensor. The
product accumulates in f32 and its result is f32; everything else (parameters,
gradients, optimizer state, losses, normalisation statistics) stays f32. The forward
operands' copies are what the backward products read, so the activations kept for
the backward pass take half the memory. The gradient of a copy is the f32 cotangent
itself (it is not rounded again).
"""

from __future__ import annotations

from ..codegen.kernel import round_half
from ..ir import REGISTRY, OpError, Tensor, make, register


def _infer(ins, attrs):
    (x,) = ins
    if x.dtype != "f32":
        raise OpError(f"to_f16 takes an f32 tensor, got {x.dtype} {x.shape}")
    return tuple(x.shape), "f16"


def _ref(ctx, args, t):
    # the reference keeps f16 values in its float dtype, rounded as binary16 rounds them
    (x,) = args
    return x.astype(ctx.np.float16).astype(x.dtype)


register(
    "to_f16",
    family="elementwise",
    role="elementwise",
    infer=_infer,
    grad=lambda t, g: [g],
    ref=_ref,
    emit=lambda g, n: round_half(g.kc, g.args(n)[0]),
    torch=lambda tc, a, n: a[0].to(tc.torch.float16).to(a[0].dtype),
)


def half(x: Tensor) -> Tensor:
    """x's f16 copy where x's graph is mixed-precision (made once per tensor), else x."""
    g = x.graph
    if g is None or g.precision != "mixed" or x.dtype != "f32":
        return x
    if x.id not in g.halves:
        d = REGISTRY[x.kind]
        if d.role == "view" or d.perm is not None:
            # the copy of the stored tensor, seen through the same view: a product still
            # reads a permuted operand through strides instead of a transposed copy
            g.halves[x.id] = make(x.kind, (half(x.inputs[0]),) + tuple(x.inputs[1:]), **x.attrs)
        else:
            g.halves[x.id] = make("to_f16", (x,))
    return g.halves[x.id]
