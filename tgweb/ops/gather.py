"""Gathers by integer index and their scatter-add gradients: one_hot, embedding,
take_along_axis; scatter_add and index_add.

Kinds and attrs (what a kernel must implement):

- ``one_hot`` {num_classes}: i32 [...] -> f32 [..., C]; indices outside [0, C)
  give an all-zero row. No gradient.
- ``embedding`` {}: (weight [N, D] f32, idx [...] i32) -> [..., D], row idx of
  weight; an index outside [0, N) gives a zero row.
- ``embedding_grad`` {num}: (g [..., D], idx [...]) -> [num, D], the scatter-add
  of g's rows into the rows idx (out-of-range indices are skipped).
- ``take_along_axis`` {axis}: (x, idx i32) with idx.shape equal to x.shape
  except along axis -> idx.shape, out[..., k, ...] = x[..., idx[..., k, ...], ...];
  out-of-range indices give 0.
- ``take_along_axis_grad`` {axis, size}: (g, idx) -> g.shape with that axis of
  length size: scatter-add of g along axis (out-of-range indices skipped).
"""

from __future__ import annotations

from ..codegen.common import add_idx, lit, mul_idx
from ..codegen.reduce import emit_embedding_grad
from ..ir import NO_GRAD, OpError, Tensor, TensorOps, make, register
from .base import as_tensor, norm_axis, op, require_float

# ---------------------------------------------------------------- one_hot


def _infer_one_hot(ins, attrs):
    (x,) = ins
    if x.dtype != "i32":
        raise OpError(f"needs integer (i32) indices, got {x.dtype} of shape {x.shape}")
    return x.shape + (attrs["num_classes"],), "f32"


def _ref_one_hot(ctx, args, t):
    np = ctx.np
    return (args[0][..., None] == np.arange(t.attrs["num_classes"])).astype(ctx.f)


def _one_hot_wgsl(g, m) -> str:
    idx = m.inputs[0]
    nd = len(m.shape)
    k = g.load_at(idx, g.index_in(idx.shape, [g.coord(d) for d in range(nd - 1)]))
    return g.let(f"select(0.0, 1.0, {k} == i32({g.coord(nd - 1)}))")


register(
    "one_hot",
    family="gather",
    role="index",
    emit=_one_hot_wgsl,
    infer=_infer_one_hot,
    grad=NO_GRAD,
    ref=_ref_one_hot,
    index_bounds=lambda t: [(0, t.attrs["num_classes"])],
    torch=lambda tc, a, n: (
        a[0].unsqueeze(-1) == tc.torch.arange(n.attrs["num_classes"], device=a[0].device)
    ).to(tc.float),
)


@op
def one_hot(x, num_classes: int) -> Tensor:
    """f32 [..., num_classes] from i32 indices [...]; out-of-range indices give zeros."""
    x = as_tensor(x)
    if not isinstance(num_classes, int) or isinstance(num_classes, bool) or num_classes < 1:
        raise OpError(f"num_classes must be a positive int, got {num_classes!r}")
    return make("one_hot", (x,), num_classes=num_classes)


# ---------------------------------------------------------------- embedding (gather / scatter-add)


def _infer_embedding(ins, attrs):
    w, idx = ins
    if w.dtype != "f32" or w.ndim != 2:
        raise OpError(f"weight must be a float matrix [num, dim], got {w.dtype} of shape {w.shape}")
    if idx.dtype != "i32":
        raise OpError(f"indices must be integers (i32), got {idx.dtype} of shape {idx.shape}")
    return idx.shape + (w.shape[1],), "f32"


def _infer_embedding_grad(ins, attrs):
    g, idx = ins
    if g.dtype != "f32" or idx.dtype != "i32" or g.shape[:-1] != idx.shape:
        raise OpError(f"bad operands {g.dtype}{g.shape} and {idx.dtype}{idx.shape}")
    return (attrs["num"], g.shape[-1]), "f32"


def _ref_embedding(ctx, args, t):
    np = ctx.np
    w, idx = args
    valid = (idx >= 0) & (idx < w.shape[0])
    return w[np.where(valid, idx, 0)] * valid[..., None]


def _ref_embedding_grad(ctx, args, t):
    np = ctx.np
    g, idx = args
    out = np.zeros((t.attrs["num"], g.shape[-1]), ctx.f)
    valid = (idx >= 0) & (idx < t.attrs["num"])
    np.add.at(out, idx[valid], g[valid])
    return out


def _g_embedding(t, g):
    w, idx = t.inputs
    return [make("embedding_grad", (g, idx), num=w.shape[0]), None]


def _g_embedding_grad(t, g):
    _, idx = t.inputs
    return [make("embedding", (g, idx)), None]


def _embedding_wgsl(g, m) -> str:
    w, idx = m.inputs
    nd = len(m.shape)
    num, dim = w.shape
    k = g.let(g.load_at(idx, g.index_in(idx.shape, [g.coord(d) for d in range(nd - 1)])))
    v = g.kc.fresh()
    g.lines.append(f"var {v} = 0.0;")
    widx = add_idx(mul_idx(f"u32({k})", dim), g.coord(nd - 1))
    g.lines.append(f"if ({k} >= 0i && {k} < {num}i) {{ {v} = {g.load_at(w, widx)}; }}")
    return v


# indices outside their range give zeros, as in tgweb's kernels
def _torch_embedding(tc, a, n):
    w, idx = a
    ok = (idx >= 0) & (idx < w.shape[0])
    return w[idx.clamp(0, w.shape[0] - 1).long()] * ok.unsqueeze(-1)


register(
    "embedding",
    family="gather",
    role="index",
    emit=_embedding_wgsl,
    infer=_infer_embedding,
    grad=_g_embedding,
    ref=_ref_embedding,
    index_bounds=lambda t: [(1, t.inputs[0].shape[0])],
    torch=_torch_embedding,
)
register(
    "embedding_grad",
    family="gather",
    role="kernel",
    emit=emit_embedding_grad,
    infer=_infer_embedding_grad,
    grad=_g_embedding_grad,
    ref=_ref_embedding_grad,
)


@op(torch=True)
def embedding(weight, idx) -> Tensor:
    """Rows of weight [num, dim] picked by integer indices [...] -> [..., dim]
    (torch.nn.functional.embedding's argument order is (idx, weight); tgweb takes
    the table first). The gradient is a scatter-add into the table."""
    if not isinstance(weight, TensorOps) and hasattr(weight, "weight"):  # an nn.Embedding passed whole
        weight = weight.weight
    return make("embedding", (as_tensor(weight), as_tensor(idx)))


# ---------------------------------------------------------------- take_along_axis


def _infer_take(ins, attrs):
    x, idx = ins
    a = attrs["axis"]
    if idx.dtype != "i32":
        raise OpError(f"indices must be integers (i32), got {idx.dtype} of shape {idx.shape}")
    if idx.ndim != x.ndim or any(d != e for i, (d, e) in enumerate(zip(x.shape, idx.shape)) if i != a):
        raise OpError(f"indices of shape {idx.shape} must match {x.shape} except on axis {a}")
    return idx.shape, x.dtype


def _infer_take_grad(ins, attrs):
    g, idx = ins
    a = attrs["axis"]
    if g.shape != idx.shape or g.dtype != "f32":
        raise OpError(f"bad operands {g.dtype}{g.shape} and {idx.dtype}{idx.shape}")
    return g.shape[:a] + (attrs["size"],) + g.shape[a + 1 :], "f32"


def _ref_take(ctx, args, t):
    np = ctx.np
    x, idx = args
    a = t.attrs["axis"]
    valid = (idx >= 0) & (idx < x.shape[a])
    out = np.take_along_axis(x, np.where(valid, idx, 0), a)
    return np.where(valid, out, 0)


def _ref_take_grad(ctx, args, t):
    np = ctx.np
    g, idx = args
    a = t.attrs["axis"]
    out = np.zeros(t.shape, ctx.f)
    valid = (idx >= 0) & (idx < t.attrs["size"])
    where = list(np.indices(idx.shape))
    where[a] = idx
    np.add.at(out, tuple(w[valid] for w in where), g[valid])
    return out


def _g_take(t, g):
    x, idx = t.inputs
    if x.dtype != "f32":
        return [None, None]
    keep = {"ignore": t.attrs["ignore"]} if "ignore" in t.attrs else {}  # still a handled target
    return [
        make("take_along_axis_grad", (g, idx), axis=t.attrs["axis"], size=x.shape[t.attrs["axis"]], **keep),
        None,
    ]


def _g_take_grad(t, g):
    _, idx = t.inputs
    return [make("take_along_axis", (g, idx), axis=t.attrs["axis"]), None]


def _take_wgsl(g, m) -> str:
    x, idx = m.inputs
    a = m.attrs["axis"]
    coords = [g.coord(d) for d in range(len(m.shape))]
    k = g.let(g.load_at(idx, g.bcast_index(idx.shape)))
    coords[a] = f"u32({k})"
    v = g.kc.fresh()
    g.lines.append(f"var {v} = {lit(0, m.dtype)};")
    g.lines.append(
        f"if ({k} >= 0i && {k} < {x.shape[a]}i) {{ {v} = {g.load_at(x, g.index_in(x.shape, coords))}; }}"
    )
    return v


def _take_grad_wgsl(g, m) -> str:
    # out[.., j, ..] = sum over k of gr[.., k, ..] where idx[.., k, ..] == j: a loop over
    # the index axis, so no atomics and a fixed summation order
    gr, idx = m.inputs
    a = m.attrs["axis"]
    coords = [g.coord(d) for d in range(len(m.shape))]
    kk = g.kc.fresh("k")
    cc = list(coords)
    cc[a] = kk
    gi = g.index_in(gr.shape, cc)
    v = g.kc.fresh()
    g.lines.append(f"var {v} = 0.0;")
    g.lines.append(f"for (var {kk} = 0u; {kk} < {gr.shape[a]}u; {kk} = {kk} + 1u) {{")
    g.lines.append(f"  if ({g.load_at(idx, gi)} == i32({coords[a]})) {{ {v} = {v} + {g.load_at(gr, gi)}; }}")
    g.lines.append("}")
    return v


def _torch_take(tc, a, n):
    x, idx = a
    size = x.shape[n.attrs["axis"]]
    ok = (idx >= 0) & (idx < size)
    return tc.torch.take_along_dim(x, idx.clamp(0, size - 1).long(), n.attrs["axis"]) * ok


def _torch_take_grad(tc, a, n):
    g, idx = a
    axis, size = n.attrs["axis"], n.attrs["size"]
    ok = (idx >= 0) & (idx < size)
    shape = list(g.shape)
    shape[axis] = size
    out = tc.torch.zeros(shape, dtype=g.dtype, device=g.device)
    return out.scatter_add(axis, idx.clamp(0, size - 1).long(), g * ok)


register(
    "take_along_axis",
    family="gather",
    role="index",
    emit=_take_wgsl,
    infer=_infer_take,
    grad=_g_take,
    ref=_ref_take,
    # a loss's ignore_index is a target the loss handles itself (it picks 0 there)
    index_bounds=lambda t: [
        (1, t.inputs[0].shape[t.attrs["axis"]], *([t.attrs["ignore"]] if "ignore" in t.attrs else []))
    ],
    torch=_torch_take,
)
register(
    "take_along_axis_grad",
    family="gather",
    role="index",
    emit=_take_grad_wgsl,
    infer=_infer_take_grad,
    grad=_g_take_grad,
    ref=_ref_take_grad,
    index_bounds=lambda t: [(1, t.attrs["size"], *([t.attrs["ignore"]] if "ignore" in t.attrs else []))],
    torch=_torch_take_grad,  # scatter_add, index_add
)


@op(torch=True)
def take_along_axis(x, indices, axis: int) -> Tensor:
    """numpy.take_along_axis without broadcasting: indices (i32) have x's shape except
    along axis; out-of-range indices give 0."""
    x, idx = as_tensor(x), as_tensor(indices)
    return make("take_along_axis", (x, idx), axis=norm_axis(axis, x.ndim, x.shape))


# ---------------------------------------------------------------- scatter_add, index_add
# Both are take_along_axis_grad (a scatter-add along one axis that loops over the index
# axis per output element: deterministic, no atomics) added to x; the gradient for src
# is the gather take_along_axis, for x the cotangent itself.


def _dim(dim, x: Tensor) -> int:
    if not isinstance(dim, int) or isinstance(dim, bool) or not -x.ndim <= dim < x.ndim:
        raise OpError(f"dim {dim!r} is out of range for x of shape {x.shape}")
    return dim % x.ndim


def _scatter_into(x: Tensor, a: int, idx: Tensor, src: Tensor) -> Tensor:
    """x + the scatter-add of src (idx's shape) along axis a, zero-padded to x's shape."""
    from .shape import pad

    s = make("take_along_axis_grad", (src, idx), axis=a, size=x.shape[a])
    for ax in range(x.ndim):
        s = pad(s, ax, 0, x.shape[ax] - s.shape[ax])
    return x + s


@op(torch=True)
def scatter_add(x, dim: int, index, src) -> Tensor:
    """torch.scatter_add: out = x, then out[..., index[i, j, ...], ...] += src[i, j, ...]
    along dim (index i32 of x's rank, no larger than src anywhere nor than x off dim).
    An index outside [0, x.shape[dim]) adds nothing (the trainer refuses such inputs)."""
    from .shape import narrow

    x, idx, src = as_tensor(x), as_tensor(index), as_tensor(src)
    require_float("scatter_add", x, src)
    a = _dim(dim, x)
    if idx.dtype != "i32":
        raise OpError(f"index must be integers (i32), got {idx.dtype} of shape {idx.shape}")
    if not idx.ndim == src.ndim == x.ndim:
        raise OpError(f"x {x.shape}, index {idx.shape} and src {src.shape} must have the same rank")
    if any(i > s for i, s in zip(idx.shape, src.shape)) or any(
        i > n for d, (i, n) in enumerate(zip(idx.shape, x.shape)) if d != a
    ):
        raise OpError(f"index {idx.shape} is larger than src {src.shape}, or than x {x.shape} off dim {a}")
    for ax in range(src.ndim):
        src = narrow(src, ax, 0, idx.shape[ax])
    return _scatter_into(x, a, idx, src)


@op(torch=True)
def index_add(x, dim: int, index, src, alpha: float = 1.0) -> Tensor:
    """torch.index_add: out = x, then out[..., index[i], ...] += alpha * src[..., i, ...]
    along dim, for a 1-D i32 index of length L and src of x's shape with L along dim."""
    from .shape import broadcast_to, reshape

    x, idx, src = as_tensor(x), as_tensor(index), as_tensor(src)
    require_float("index_add", x, src)
    a = _dim(dim, x)
    if idx.dtype != "i32" or idx.ndim != 1:
        raise OpError(f"index must be a 1-D integer (i32) tensor, got {idx.dtype} of shape {idx.shape}")
    want = x.shape[:a] + idx.shape + x.shape[a + 1 :]
    if src.shape != want:
        raise OpError(f"src must have shape {want} (x's with index's length on dim {a}), got {src.shape}")
    lined = reshape(idx, tuple(n if d == a else 1 for d, n in enumerate(want)))
    return _scatter_into(x, a, broadcast_to(lined, want), src * alpha if alpha != 1.0 else src)
