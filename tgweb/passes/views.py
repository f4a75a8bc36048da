"""Views folded into strided kernels: permutes and slices are read through strides.

A chain of permutes (kinds registered with perm=, their output's axis order), slices
(window=: a range of one axis) and views (reshape) in front of an operand of a
`strided` kind (matmul: a transpose, attention's q, k and v cut from one product) is
read through strides and an element offset into the stored tensor, and a permute of
such a node's result, when it is the result's only reader, is written through strides.
The node is replaced (same id, so its readers read the replacement) by one whose attrs
carry the views: "views" {input index: (shape, strides, offset) of the stored tensor
read}, "out_view" (logical shape, strides into the permuted layout). A permute that no
strided kind absorbs but that reads such a chain itself reads the stored tensor through
the chain's view (attrs "view"): one copy instead of a slice and a permute. The chains
then have no readers, and lowering drops them as dead code (tgweb.lower.computed_nodes).
A part of a node that its gradient keeps (graph.kept) stays a copy of its own: read
through a view, it would keep the whole node alive until the backward pass.
"""

from __future__ import annotations

from ..ir import REGISTRY, Tensor, replace, strides


def _perm(x: Tensor):
    """The axis order of x's input that x is, if its kind is a permuting view, else None."""
    d = REGISTRY[x.kind]
    return None if d.perm is None else d.perm(x)


def _moves(x: Tensor) -> bool:
    """Whether x is a permute or a slice (a view that moves data when computed)."""
    d = REGISTRY[x.kind]
    return d.perm is not None or d.window is not None


def view_of(x: Tensor):
    """(stored tensor, (shape, strides, element offset)) when x is a chain of permutes,
    slices and reshapes of it holding a permute or a slice, else None (also where a
    reshape merges axes that the chain made non-contiguous)."""
    chain = []
    while _moves(x) or REGISTRY[x.kind].role == "view":
        chain.append(x)
        x = x.inputs[0]
    if not any(_moves(c) for c in chain) or REGISTRY[x.kind].role == "const":
        return None
    shape, st, off = tuple(x.shape), strides(tuple(x.shape)), 0
    for c in reversed(chain):
        d = REGISTRY[c.kind]
        if d.perm is not None:
            perm = d.perm(c)
            shape, st = tuple(shape[p] for p in perm), tuple(st[p] for p in perm)
        elif d.window is not None:
            a, lo, hi = d.window(c)
            off += lo * st[a]
            shape = shape[:a] + (hi - lo,) + shape[a + 1 :]
        else:
            st = restride(shape, st, tuple(c.shape))
            if st is None:
                return None
            shape = tuple(c.shape)
    return x, (shape, st, off)


def restride(shape, st, new):
    """The strides of a reshape to `new` of a tensor of `shape` laid out with strides
    `st`, or None when an axis of `new` spans axes that are not contiguous together."""
    old = [(n, s) for n, s in zip(shape, st) if n != 1]
    out, k, rem, inner = [], 0, 1, 0
    for n in new:
        if n == 1:
            out.append(0)
            continue
        while rem % n:  # take in the next axis, which must continue this block
            if k == len(old) or (rem > 1 and inner != old[k][0] * old[k][1]):
                return None
            rem, inner, k = rem * old[k][0], old[k][1], k + 1
        rem //= n
        out.append(inner * rem)
    return tuple(out)


def fold_views(graph, roots: list[Tensor]) -> dict[int, Tensor]:
    """node id -> its replacement, for every strided node that reads or writes a view."""
    eff: dict[int, Tensor] = {}
    # the parts of a node its gradient keeps (graph.kept: attention's lse column in a
    # mixed graph) stay copies of their own, so that the whole node need not live until
    # the backward reads them
    kept = {p.id for parts in graph.kept.values() for p in parts}
    for t in graph.tensors:
        if not REGISTRY[t.kind].strided:
            continue
        ins, views = list(t.inputs), {}
        for j, x in enumerate(ins):
            v = None if x.id in kept else view_of(x)
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
        if _perm(t) is None:
            continue
        m = eff.get(t.inputs[0].id, t.inputs[0])
        if REGISTRY[m.kind].strided and uses.get(m.id) == 1:
            eff[t.id] = _write_through(t, m)
        elif (v := view_of(t.inputs[0])) is not None:
            eff[t.id] = replace(t, inputs=(v[0],), attrs=dict(t.attrs, view=v[1]))
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
