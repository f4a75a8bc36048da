"""Views folded into strided kernels: permutes are read or written through strides.

A permute (a kind registered with perm=, its output's axis order) in front of an
operand of a `strided` kind (matmul: a transpose, attention's head split) is read
through strides, and a permute of such a node's result, when it is the result's only
reader, is written through strides. The node is replaced (same id, so its readers
read the replacement) by one whose attrs carry the views: "views" {input index:
(shape, strides) of the stored tensor read}, "out_view" (logical shape, strides into
the permuted layout). The permutes then have no readers and dead-code elimination
drops them.
"""

from __future__ import annotations

from ..ir import REGISTRY, Tensor, replace, strides


def _perm(x: Tensor):
    """The axis order of x's input that x is, if its kind is a permuting view, else None."""
    d = REGISTRY[x.kind]
    return None if d.perm is None else d.perm(x)


def _permute_view(x: Tensor):
    """(stored tensor, (shape, strides)) when x is a chain of permutes of it, else None."""
    if _perm(x) is None:
        return None
    chain = []
    while (perm := _perm(x)) is not None:
        chain.append(perm)
        x = x.inputs[0]
    shape, st = list(x.shape), strides(tuple(x.shape))
    for perm in reversed(chain):
        shape, st = [shape[p] for p in perm], [st[p] for p in perm]
    return x, (tuple(shape), tuple(st))


def fold_views(graph, roots: list[Tensor]) -> dict[int, Tensor]:
    """node id -> its replacement, for every strided node that reads or writes a view."""
    eff: dict[int, Tensor] = {}
    for t in graph.tensors:
        if not REGISTRY[t.kind].strided:
            continue
        ins, views = list(t.inputs), {}
        for j, x in enumerate(ins):
            v = _permute_view(x)
            if v is not None:
                ins[j], views[j] = v
        if views:
            eff[t.id] = replace(t, inputs=tuple(ins), attrs=dict(t.attrs, views=views))
    uses: dict[int, int] = {}
    for t in graph.tensors:
        for x in eff.get(t.id, t).inputs:
            uses[x.id] = uses.get(x.id, 0) + 1
    for t in roots:
        uses[t.id] = uses.get(t.id, 0) + 1
    for t in graph.tensors:
        if _perm(t) is not None:
            m = eff.get(t.inputs[0].id, t.inputs[0])
            if REGISTRY[m.kind].strided and uses.get(m.id) == 1:
                eff[t.id] = _write_through(t, m)
    return eff


def _write_through(t: Tensor, m: Tensor) -> Tensor:
    """m computed straight into the layout of its permute t (t's id)."""
    perm = _perm(t)
    pst = strides(t.shape)
    moved = [0] * len(perm)  # stride, in t's storage, of each axis of t's input
    for i, p in enumerate(perm):
        moved[p] = pst[i]
    if "out_view" in m.attrs:  # m already writes through strides into its own layout
        cshape, old = m.attrs["out_view"]
        ist = strides(tuple(m.shape))
        where = {ist[q]: q for q in range(len(m.shape)) if m.shape[q] > 1}
        cst = [moved[where[sj]] if cshape[j] > 1 else 0 for j, sj in enumerate(old)]
    else:
        cshape, cst = tuple(m.shape), moved
    return replace(
        t, kind=m.kind, inputs=m.inputs, attrs=dict(m.attrs, out_view=(cshape, tuple(cst))), site=m.site
    )
