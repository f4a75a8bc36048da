"""Reverse-mode autodiff as a graph transformation.

append_grad walks the graph backwards from a scalar and appends, for every op
on a path to the requested tensors, the nodes of its transpose rule (OpDef.grad).
Cotangents of a tensor used several times are summed. A requested tensor that
the loss does not reach gets an explicit zero gradient.
"""

from __future__ import annotations

from .ir import NO_GRAD, REGISTRY, Graph, Tensor, TraceError, tracing


def append_grad(
    graph: Graph, loss: Tensor, wrt: list[Tensor], seed: Tensor | None = None
) -> dict[int, Tensor]:
    """Append d loss / d t for every t in wrt; returns {t.id: gradient tensor}.
    seed: the loss's own cotangent (1.0 unless given: a dynamic loss scale)."""
    from . import ops
    from .ops.half import grad_reading_saved, loss_tail

    if loss.shape != () or loss.dtype != "f32":
        raise TraceError(
            f"the loss must be a float scalar, got {loss.dtype} of shape {loss.shape}", loss.site
        )
    # tensors that lie on a path from some wrt tensor to the loss
    wanted = {t.id for t in wrt}
    reaches: set[int] = set()
    for t in graph.tensors[: loss.id + 1]:
        if t.id in wanted or any(i.id in reaches for i in t.inputs):
            if t.dtype in ("f32", "f16"):
                reaches.add(t.id)
    # mixed precision: ops whose gradient reads an activation read its f16 copy, except
    # where the loss is formed
    exact = loss_tail(loss) if graph.saved else None
    cot: dict[int, Tensor] = {}
    with tracing(graph):
        with graph.site_override(loss.site):
            cot[loss.id] = ops.full((), 1.0) if seed is None else seed
        for t in reversed(graph.tensors[: loss.id + 1]):
            g = cot.get(t.id)
            if g is None or not t.inputs:
                continue
            rule = REGISTRY[t.kind].grad
            if rule is NO_GRAD:
                continue
            if not any(i.id in reaches for i in t.inputs):
                continue
            with graph.site_override(t.site):
                if exact is None or t.id in exact:
                    gins = rule(t, g)
                else:
                    gins = grad_reading_saved(rule, t, g, lambda x: x.id in reaches)
                for x, gx in zip(t.inputs, gins):
                    if gx is None or x.id not in reaches:
                        continue
                    if gx.shape != x.shape:  # a rule bug, not a user error
                        raise AssertionError(f"grad of {t.kind} gave {gx.shape} for {x.shape}")
                    cot[x.id] = gx if x.id not in cot else ops.add(cot[x.id], gx)
        out = {}
        for t in wrt:
            if t.id in cot:
                out[t.id] = cot[t.id]
            else:
                with graph.site_override(t.site):
                    out[t.id] = ops.zeros(t.shape)
    return out
