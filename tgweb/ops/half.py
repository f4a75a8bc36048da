"""precision="mixed": the f16 copies of matmul operands.

In a graph traced with precision "mixed" (Graph.precision), every operand of a
product, forward and backward, is read from its `to_f16` copy: the value rounded to
binary16 and stored in two bytes (tgweb.codegen.kernel), one copy per tensor. The
product accumulates in f32 and its result is f32; everything else (parameters,
gradients, optimizer state, losses, normalisation statistics) stays f32. The forward
operands' copies are what the backward products read, so the activations kept for
the backward pass take half the memory. The gradient of a copy is the f32 cotangent
itself (it is not rounded again).

The other activations the backward pass reads are kept as f16 too (saved, grad_reading_saved):
while the forward is traced, each activation gets an f16 copy and a `from_f16` view of it
(f32 values over f16 storage); an op whose gradient (for an input that wants one: not a
dropout's mask) reads an activation then reads that view, in the forward as in the
backward (as an f16 op reads its rounded input under
PyTorch's autocast: GELU's input, layer norm's input and normalized value, the logits).
Both passes see the same rounded value, so rematerialization recomputes from the f16
copy bit for bit, and the f32 value lives only until its other forward readers ran (the
residual stream stays f32).
"""

from __future__ import annotations

from ..codegen.kernel import round_half
from ..ir import REGISTRY, OpError, Tensor, make, prod, register, root


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
    if x.kind == "from_f16":  # a saved activation: its copy is already f16
        return x.inputs[0]
    if x.id not in g.halves:
        d = REGISTRY[x.kind]
        if d.role == "view" or d.perm is not None:
            # the copy of the stored tensor, seen through the same view: a product still
            # reads a permuted operand through strides instead of a transposed copy
            g.halves[x.id] = make(x.kind, (half(x.inputs[0]),) + tuple(x.inputs[1:]), **x.attrs)
        else:
            g.halves[x.id] = make("to_f16", (x,))
    return g.halves[x.id]


def _infer_f32(ins, attrs):
    (x,) = ins
    if x.dtype != "f16":
        raise OpError(f"from_f16 takes an f16 tensor, got {x.dtype} {x.shape}")
    return tuple(x.shape), "f32"


# an f16 tensor read as f32: a view (kernels' loads unpack the stored halves)
register(
    "from_f16",
    family="elementwise",
    role="view",
    infer=_infer_f32,
    grad=lambda t, g: [g],
    ref=lambda ctx, args, t: args[0],
    torch=lambda tc, a, n: a[0],
)


def _saveable(t: Tensor) -> bool:
    """Whether t is an activation the backward may keep as f16: computed, f32, and not a
    per-row statistic (a last dim of 1: log-sum-exp, norms) or a scalar."""
    d = REGISTRY[t.kind]
    return not (
        t.dtype != "f32"
        or d.role in ("leaf", "const", "view")
        or d.perm is not None
        or REGISTRY[root(t).kind].role in ("leaf", "const")
        or not t.shape
        or t.shape[-1] == 1
        or prod(t.shape) < 2
    )


def copy_early(t: Tensor) -> None:
    """Graph.on_add while a mixed forward is traced: each activation's f16 copy and its
    f32 view, made right after it so that a forward op may read them (unused ones are
    dropped as dead code)."""
    if _saveable(t):
        t.graph.saved[t.id] = make("from_f16", (half(t),))


def loss_tail(loss: Tensor) -> set[int]:
    """Ids of the nodes that form the loss from the last products' outputs (a squared
    error, a cross-entropy and the mean over them): they read f32 values, so the loss
    is computed from what the model gave, not from f16 copies of it."""
    tail, todo = set(), [loss]
    while todo:
        t = todo.pop()
        if t.id not in tail and not REGISTRY[t.kind].strided:
            tail.add(t.id)
            todo.extend(t.inputs)
    return tail


def grad_reading_saved(rule, t: Tensor, g: Tensor, needed=lambda x: True):
    """rule(t, g) with t reading, from now on, the f16 copy (copy_early) of each input its
    gradient reads; the other inputs stay as they were. Products and attention read f16
    copies of their operands already. needed(x): whether input x needs its gradient; a
    copy only the gradient of one that does not reads (a dropout's product with its mask,
    whose gradient for the mask nothing wants) is left out, so the forward reads the f32
    value and nothing keeps a copy of it."""
    saved = t.graph.saved
    ins = t.inputs
    alt = tuple(saved.get(x.id, x) for x in ins)
    if REGISTRY[t.kind].strided or all(a is x for a, x in zip(alt, ins)):
        return rule(t, g)
    mark = len(t.graph.tensors)
    t.inputs = alt
    try:
        out = rule(t, g)
    finally:
        t.inputs = tuple(
            a if a.id in _read(t.graph.tensors[mark:], ins, out, needed) else x for x, a in zip(ins, alt)
        )
    return out


def _read(new: list, ins, out, needed) -> set[int]:
    """Ids of the tensors that the new nodes computing the wanted gradients (out[i] for
    the inputs needed) read, and those gradients themselves."""
    by_id = {n.id: n for n in new}
    wanted = [gx for x, gx in zip(ins, out or ()) if gx is not None and needed(x)]
    live, todo = set(), [gx for gx in wanted if gx.id in by_id]
    while todo:
        n = todo.pop()
        if n.id not in live:
            live.add(n.id)
            todo.extend(x for x in n.inputs if x.id in by_id)
    return {x.id for i in live for x in by_id[i].inputs} | {gx.id for gx in wanted}
