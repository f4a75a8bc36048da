"""Neural-network ops: softmax family, one_hot, gathers and their scatter-add
gradients, scatter_add and index_add, and the losses (cross_entropy, nll_loss,
mse_loss).

Kinds and attrs (what a kernel must implement):

- ``softmax`` / ``log_softmax`` {axis}: over one axis, max-subtracted.
- ``causal_softmax`` {}: softmax over the last axis of x [..., T, S] where entry
  (i, j) of each T x S matrix is visible iff j <= i (top-left aligned, like
  ``torch.tril``); hidden entries come out exactly 0.
- ``normalize`` {eps}: over the last axis, (x - mean) / sqrt(var + eps) with the
  biased variance (a layer norm without its scale and shift). One kernel per row.
- ``normalize_grad`` {eps}: (x, g) -> the gradient of normalize at x for the output
  gradient g. No gradient of its own.
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

The losses compose these kinds; class axis last: logits [..., C] with integer
targets [...] (shape logits.shape[:-1]), unlike PyTorch's [N, C, ...].
"""

from __future__ import annotations

from ..codegen.common import add_idx, lit, mul_idx
from ..codegen.reduce import emit_embedding_grad, normalize, softmax
from ..ir import NO_GRAD, OpError, Tensor, TensorOps, make, register
from .base import as_tensor, norm_axis, op, require_float


def _infer_float_same(ins, attrs):
    (x,) = ins
    if x.dtype != "f32":
        raise OpError(f"needs a float (f32) tensor, got {x.dtype} of shape {x.shape}")
    return x.shape, "f32"


# ---------------------------------------------------------------- softmax family


def _np_softmax(np, x, axis):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _g_softmax(t, g):
    from .reduce import sum as rsum

    axis = t.attrs.get("axis", -1) % t.ndim
    return [t * (g - rsum(g * t, axis, keepdims=True))]


def _g_log_softmax(t, g):
    from .elementwise import exp
    from .reduce import sum as rsum

    return [g - exp(t) * rsum(g, t.attrs["axis"], keepdims=True)]


def _ref_log_softmax(ctx, args, t):
    np, x, axis = ctx.np, args[0], t.attrs["axis"]
    z = x - x.max(axis=axis, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=axis, keepdims=True))


def _causal_mask(np, shape):
    rows, cols = shape[-2], shape[-1]
    return np.arange(cols)[None, :] <= np.arange(rows)[:, None]


def _ref_causal_softmax(ctx, args, t):
    np, x = ctx.np, args[0]
    mask = _causal_mask(np, x.shape)
    y = _np_softmax(np, np.where(mask, x, -np.inf), -1)
    return np.where(mask, y, 0)


def _infer_causal(ins, attrs):
    (x,) = ins
    if x.ndim < 2:
        raise OpError(f"needs scores of rank >= 2 ([..., T, S]), got shape {x.shape}")
    return _infer_float_same(ins, attrs)


def _torch_causal(tc, a, n):
    x = a[0]
    t, s = x.shape[-2], x.shape[-1]
    keep = tc.torch.ones(t, s, dtype=tc.torch.bool, device=x.device).tril()
    return tc.torch.softmax(x.masked_fill(~keep, float("-inf")), -1).masked_fill(~keep, 0.0)


register(
    "softmax",
    family="nn",
    role="kernel",
    emit=softmax(),
    infer=_infer_float_same,
    grad=_g_softmax,
    ref=lambda ctx, args, t: _np_softmax(ctx.np, args[0], t.attrs["axis"]),
    torch=lambda tc, a, n: tc.torch.softmax(a[0], n.attrs["axis"]),
)
register(
    "log_softmax",
    family="nn",
    role="kernel",
    emit=softmax(log=True),
    infer=_infer_float_same,
    grad=_g_log_softmax,
    ref=_ref_log_softmax,
    torch=lambda tc, a, n: tc.torch.log_softmax(a[0], n.attrs["axis"]),
)
register(
    "causal_softmax",
    family="nn",
    role="kernel",
    emit=softmax(causal=True),
    infer=_infer_causal,
    grad=_g_softmax,
    ref=_ref_causal_softmax,
    torch=_torch_causal,
)


@op
def softmax(x, axis: int = -1) -> Tensor:
    x = as_tensor(x)
    require_float("softmax", x)
    return make("softmax", (x,), axis=norm_axis(axis, x.ndim, x.shape))


@op
def log_softmax(x, axis: int = -1) -> Tensor:
    x = as_tensor(x)
    require_float("log_softmax", x)
    return make("log_softmax", (x,), axis=norm_axis(axis, x.ndim, x.shape))


@op
def causal_softmax(scores) -> Tensor:
    """Softmax over the last axis of attention scores [..., T, S] with query i seeing
    keys j <= i only; the hidden weights are exactly 0. One fused kernel."""
    x = as_tensor(scores)
    require_float("causal_softmax", x)
    return make("causal_softmax", (x,))


# ---------------------------------------------------------------- layer norm


def _np_normalized(np, x, eps):
    """(xhat, 1 / sqrt(var + eps)) over the last axis."""
    d = x - x.mean(-1, keepdims=True)
    rstd = 1.0 / np.sqrt((d * d).mean(-1, keepdims=True) + eps)
    return d * rstd, rstd


def _ref_normalize_grad(ctx, args, t):
    x, g = args
    xh, rstd = _np_normalized(ctx.np, x, t.attrs["eps"])
    return rstd * (g - g.mean(-1, keepdims=True) - xh * (g * xh).mean(-1, keepdims=True))


def _infer_normalize_grad(ins, attrs):
    x, g = ins
    if g.shape != x.shape or g.dtype != "f32":
        raise OpError(f"needs a gradient of x's shape {x.shape}, got {g.dtype} {g.shape}")
    return _infer_float_same((x,), attrs)


def _infer_normalize(ins, attrs):
    (x,) = ins
    if x.ndim < 1:
        raise OpError("needs a tensor of rank >= 1 (it normalizes the last axis), got a scalar")
    return _infer_float_same(ins, attrs)


def _torch_normalize_grad(tc, a, n):
    x, g = a
    d = x - x.mean(-1, keepdim=True)
    rstd = tc.torch.rsqrt((d * d).mean(-1, keepdim=True) + n.attrs["eps"])
    xh = d * rstd
    return rstd * (g - g.mean(-1, keepdim=True) - xh * (g * xh).mean(-1, keepdim=True))


def _even_rows(t) -> bool:
    """Whether a row kernel's rows start words of an f16 tensor (an even row length)."""
    return t.shape[-1] % 2 == 0


register(
    "normalize",
    family="nn",
    role="kernel",
    emit=normalize(),
    epilogue=True,  # the gain (and a bias) multiplied in before x_hat is stored
    pairs=_even_rows,  # its f16 copy (a product's operand, mixed) stored two a word
    infer=_infer_normalize,
    grad=lambda t, g: [make("normalize_grad", (t.inputs[0], g), eps=t.attrs["eps"])],
    ref=lambda ctx, args, t: _np_normalized(ctx.np, args[0], t.attrs["eps"])[0],
    torch=lambda tc, a, n: tc.torch.nn.functional.layer_norm(a[0], a[0].shape[-1:], eps=n.attrs["eps"]),
    recompute=True,  # a layer norm's x_hat, read again by its scale's gradient
)
register(
    "normalize_grad",
    family="nn",
    role="kernel",
    emit=normalize(grad=True),
    epilogue=True,  # the residual's gradient added before dx is stored
    pairs=_even_rows,
    infer=_infer_normalize_grad,
    grad=NO_GRAD,
    ref=_ref_normalize_grad,
    torch=_torch_normalize_grad,
)


@op
def layer_norm(x, weight=None, bias=None, eps: float = 1e-5) -> Tensor:
    """Layer normalization over the last axis (torch.nn.functional.layer_norm with
    normalized_shape = x.shape[-1:]): (x - mean) / sqrt(var + eps), the variance biased,
    then times weight and plus bias when given (each of shape [x.shape[-1]]). The
    normalization is one kernel per row, and its gradient one more."""
    x = as_tensor(x)
    require_float("layer_norm", x)
    if x.ndim < 1:
        raise OpError("needs a tensor of rank >= 1 (it normalizes the last axis), got a scalar")
    eps = float(eps)
    if not eps > 0.0 or eps == float("inf"):
        raise OpError(f"eps must be a finite number > 0, got {eps!r}")
    y = make("normalize", (x,), eps=eps)
    for name, p in (("weight", weight), ("bias", bias)):
        if p is None:
            continue
        p = as_tensor(p)
        if p.shape != x.shape[-1:]:
            raise OpError(f"{name} must have shape {x.shape[-1:]} (x's last axis), got {p.shape}")
        y = y * p if name == "weight" else y + p
    return y


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
    family="nn",
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
    family="nn",
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
    family="nn",
    role="kernel",
    emit=emit_embedding_grad,
    infer=_infer_embedding_grad,
    grad=_g_embedding_grad,
    ref=_ref_embedding_grad,
)


@op
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
    family="nn",
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
    family="nn",
    role="index",
    emit=_take_grad_wgsl,
    infer=_infer_take_grad,
    grad=_g_take_grad,
    ref=_ref_take_grad,
    index_bounds=lambda t: [(1, t.attrs["size"], *([t.attrs["ignore"]] if "ignore" in t.attrs else []))],
    torch=_torch_take_grad,  # scatter_add, index_add
)


@op
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


@op
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


@op
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


# ---------------------------------------------------------------- losses


def _reduce_loss(loss: Tensor, reduction: str) -> Tensor:
    from .reduce import mean, sum

    if reduction == "mean":
        return mean(loss)
    if reduction == "sum":
        return sum(loss)
    return loss


def _check_reduction(reduction) -> None:
    if reduction not in ("mean", "sum", "none"):
        raise OpError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")


def _check_class_targets(logp: Tensor, targets: Tensor) -> None:
    if targets.dtype != "i32":
        raise OpError(
            f"targets must be class indices (i32) or probabilities (f32), "
            f"got {targets.dtype} of shape {targets.shape}"
        )
    if targets.shape != logp.shape[:-1]:
        raise OpError(
            f"targets of shape {targets.shape} do not match logits {logp.shape} "
            f"(class axis last: targets must have shape {logp.shape[:-1]})"
        )


def _picked_nll(logp: Tensor, targets: Tensor, ignore_index: int) -> Tensor:
    """-logp[..., target]: the targets go to take_along_axis as they are, so the
    trainer range-checks them on the host; an ignored (out-of-range) one picks 0."""
    from .shape import reshape, unsqueeze

    picked = make("take_along_axis", (logp, unsqueeze(targets, -1)), axis=logp.ndim - 1, ignore=ignore_index)
    return -reshape(picked, targets.shape)


def _class_loss(logp: Tensor, targets: Tensor, ignore_index: int, smoothing: float, reduction: str) -> Tensor:
    """PyTorch's loss at class-index targets: (1 - e) * nll + e * mean over classes of
    -logp, 0 where the target is ignore_index; 'mean' divides by the targets kept."""
    from .elementwise import where
    from .reduce import mean, sum

    _check_class_targets(logp, targets)
    loss = _picked_nll(logp, targets, ignore_index)
    if smoothing:
        loss = loss * (1.0 - smoothing) - mean(logp, -1) * smoothing
    dropped = targets == ignore_index
    loss = where(dropped, 0.0, loss)
    if reduction == "mean":
        return sum(loss) / sum(where(dropped, 0.0, 1.0))  # all ignored: 0 / 0 = NaN, as in PyTorch
    return _reduce_loss(loss, reduction)


def _prob_loss(logp: Tensor, probs: Tensor, smoothing: float, reduction: str) -> Tensor:
    """sum over classes of -p * logp, with p mixed towards uniform by label smoothing."""
    from .reduce import sum

    if probs.shape != logp.shape:
        raise OpError(f"probability targets must have the logits' shape {logp.shape}, got {probs.shape}")
    if smoothing:
        probs = probs * (1.0 - smoothing) + smoothing / logp.shape[-1]
    return _reduce_loss(-sum(probs * logp, -1), reduction)


def _loss_args(x: Tensor, name: str, reduction, ignore_index=-100, smoothing=0.0) -> None:
    _check_reduction(reduction)
    require_float(name, x)
    if x.ndim < 1:
        raise OpError(f"{name} needs a class axis, got shape {x.shape}")
    if not isinstance(ignore_index, int) or isinstance(ignore_index, bool):
        raise OpError(f"ignore_index must be an int, got {ignore_index!r}")
    if isinstance(smoothing, bool) or not isinstance(smoothing, (int, float)) or not 0.0 <= smoothing <= 1.0:
        raise OpError(f"label_smoothing must be a number in [0, 1], got {smoothing!r}")


@op
def cross_entropy(
    logits, target, ignore_index: int = -100, label_smoothing: float = 0.0, reduction: str = "mean"
) -> Tensor:
    """Softmax cross-entropy with torch.nn.functional.cross_entropy's options, but the
    class axis LAST: logits [..., C]; target [...] i32 class indices, or f32 class
    probabilities [..., C]. Targets equal to ignore_index add nothing, and 'mean'
    averages over the others; label_smoothing mixes the target with the uniform
    distribution. reduction 'mean', 'sum' or 'none' (shape [...])."""
    logits, target = as_tensor(logits), as_tensor(target)
    _loss_args(logits, "cross_entropy", reduction, ignore_index, label_smoothing)
    logp = log_softmax(logits, -1)
    if target.dtype == "f32":
        return _prob_loss(logp, target, float(label_smoothing), reduction)
    return _class_loss(logp, target, ignore_index, float(label_smoothing), reduction)


@op
def nll_loss(log_probs, target, ignore_index: int = -100, reduction: str = "mean") -> Tensor:
    """Negative log-likelihood of log-probabilities [..., C] (class axis LAST) at
    integer targets [...]; ignore_index and reduction as in cross_entropy."""
    log_probs, target = as_tensor(log_probs), as_tensor(target)
    _loss_args(log_probs, "nll_loss", reduction, ignore_index)
    return _class_loss(log_probs, target, ignore_index, 0.0, reduction)


@op
def mse_loss(input, target, reduction: str = "mean") -> Tensor:  # noqa: A002 - PyTorch's name
    """Mean squared error; input and target must have the same shape."""
    from .elementwise import square

    a, b = as_tensor(input), as_tensor(target)
    _check_reduction(reduction)
    require_float("mse_loss", a, b)
    if a.shape != b.shape:
        raise OpError(f"input {a.shape} and target {b.shape} must have the same shape")
    return _reduce_loss(square(a - b), reduction)
