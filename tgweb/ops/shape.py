"""Shape ops. reshape and stop_gradient are views (no copy); permute,
broadcast_to, slice, pad and concat move data. The rest are built from these."""

from __future__ import annotations

from ..codegen.common import add_idx, lit, mul_idx, u32_lit
from ..ir import NO_GRAD, OpError, Tensor, make, prod, register
from .base import as_tensor, norm_axis, op

# ---------------------------------------------------------------- WGSL
# Each data-moving kind reads its input, stored elsewhere, at a remapped index of
# the fused group it is computed in (g: tgweb.codegen.kernel.GroupEmitter).


def _permute_wgsl(g, m) -> str:
    x = m.inputs[0]
    perm = m.attrs["perm"]
    coords = ["0u"] * len(perm)
    for d, p in enumerate(perm):
        coords[p] = g.coord(d)
    if "view" not in m.attrs:
        return g.load_at(x, g.index_in(x.shape, coords))
    # lowering folded the slices and permutes in front of it: x is the stored tensor
    # they view (tgweb.passes.views)
    shape, st, off = m.attrs["view"]
    terms = [mul_idx(c, s) for c, s, n in zip(coords, st, shape) if n != 1]
    return g.load_at(x, add_idx(u32_lit(off), *terms))


def _broadcast_wgsl(g, m) -> str:
    x = m.inputs[0]
    return g.load_at(x, g.bcast_index(x.shape))


def _slice_wgsl(g, m) -> str:
    x = m.inputs[0]
    a = m.attrs["axis"]
    coords = [g.coord(d) for d in range(len(m.shape))]
    coords[a] = add_idx(coords[a], u32_lit(m.attrs["start"]))
    return g.load_at(x, g.index_in(x.shape, coords))


def _pad_wgsl(g, m) -> str:
    x = m.inputs[0]
    a, before = m.attrs["axis"], m.attrs["before"]
    n = x.shape[a]
    coords = [g.coord(d) for d in range(len(m.shape))]
    c = coords[a]
    coords[a] = f"({c} - {before}u)" if before else c
    idx = g.index_in(x.shape, coords)
    v = g.kc.fresh()
    cond = f"{c} >= {before}u && {c} < {before + n}u" if before else f"{c} < {n}u"
    g.lines.append(f"var {v} = {lit(0, m.dtype)};")
    g.lines.append(f"if ({cond}) {{ {v} = {g.load_at(x, idx)}; }}")
    return v


def _concat_wgsl(g, m) -> str:
    a = m.attrs["axis"]
    coords = [g.coord(d) for d in range(len(m.shape))]
    c = coords[a]
    v = g.kc.fresh()
    g.lines.append(f"var {v} = {lit(0, m.dtype)};")
    off = 0
    for j, x in enumerate(m.inputs):
        n = x.shape[a]
        cc = list(coords)
        cc[a] = f"({c} - {off}u)" if off else c
        body = f"{v} = {g.load_at(x, g.index_in(x.shape, cc))};"
        if j == 0:
            g.lines.append(f"if ({c} < {off + n}u) {{ {body} }}")
        elif j == len(m.inputs) - 1:
            g.lines.append(f"else {{ {body} }}")
        else:
            g.lines.append(f"else if ({c} < {off + n}u) {{ {body} }}")
        off += n
    return v


# ---------------------------------------------------------------- reshape


def _infer_reshape(ins, attrs):
    (x,) = ins
    if prod(attrs["shape"]) != x.size:
        raise OpError(f"cannot reshape {x.shape} into {attrs['shape']}")
    return attrs["shape"], x.dtype


register(
    "reshape",
    family="shape",
    role="view",
    infer=_infer_reshape,
    grad=lambda t, g: [reshape(g, t.inputs[0].shape)],
    ref=lambda ctx, args, t: args[0].reshape(t.shape),
    torch=lambda tc, a, n: a[0].reshape(n.shape),
)


@op(torch=True)
def reshape(x, shape) -> Tensor:
    """Reshape; one dimension may be -1. Free: the result aliases x's memory."""
    x = as_tensor(x)
    if isinstance(shape, int):
        shape = (shape,)
    shape = tuple(shape)
    if not all(isinstance(d, int) and not isinstance(d, bool) and (d >= 1 or d == -1) for d in shape):
        raise OpError(f"shape entries must be positive ints or -1, got {shape}")
    if shape.count(-1) > 1:
        raise OpError(f"only one -1 is allowed in a shape, got {shape} for a tensor of shape {x.shape}")
    if -1 in shape:
        known = prod(tuple(d for d in shape if d != -1))
        if x.size % known:
            raise OpError(f"cannot reshape {x.shape} into {shape}")
        shape = tuple(x.size // known if d == -1 else d for d in shape)
    if shape == x.shape:
        return x
    return make("reshape", (x,), shape=shape)


# ---------------------------------------------------------------- stop_gradient


register(
    "stop_gradient",
    family="shape",
    role="view",
    grad=NO_GRAD,
    infer=lambda ins, a: (ins[0].shape, ins[0].dtype),
    ref=lambda ctx, args, t: args[0],
    torch=lambda tc, a, n: a[0].detach(),
)


@op
def stop_gradient(x) -> Tensor:
    """x, through which no gradient flows. Free: an alias."""
    return make("stop_gradient", (as_tensor(x),))


# ---------------------------------------------------------------- permute


def _infer_permute(ins, attrs):
    (x,) = ins
    return tuple(x.shape[p] for p in attrs["perm"]), x.dtype


def _g_permute(t, g):
    inv = [0] * len(t.attrs["perm"])
    for i, p in enumerate(t.attrs["perm"]):
        inv[p] = i
    return [permute(g, tuple(inv))]


register(
    "permute",
    family="shape",
    role="index",
    emit=_permute_wgsl,
    infer=_infer_permute,
    grad=_g_permute,
    ref=lambda ctx, args, t: ctx.np.ascontiguousarray(args[0].transpose(t.attrs["perm"])),
    torch=lambda tc, a, n: a[0].permute(*n.attrs["perm"]),
    perm=lambda t: t.attrs["perm"],
)


@op(torch=True)
def permute(x, axes) -> Tensor:
    x = as_tensor(x)
    axes = tuple(axes)
    if len(axes) != x.ndim:
        raise OpError(f"permutation {axes} does not match the rank of shape {x.shape}")
    perm = tuple(norm_axis(a, x.ndim, x.shape) for a in axes)
    if sorted(perm) != list(range(x.ndim)):
        raise OpError(f"{axes} is not a permutation of the axes of shape {x.shape}")
    if perm == tuple(range(x.ndim)):
        return x
    # moving only size-1 axes keeps the memory order: a reshape does it for free
    if [p for p in perm if x.shape[p] != 1] == [i for i in range(x.ndim) if x.shape[i] != 1]:
        return reshape(x, tuple(x.shape[p] for p in perm))
    return make("permute", (x,), perm=perm)


@op(method=True, torch=True)
def transpose(x, dim0: int | None = None, dim1: int | None = None) -> Tensor:
    """PyTorch's transpose: axes dim0 and dim1 swapped; with neither given, every axis
    reversed (x.T). Permute takes a whole permutation."""
    x = as_tensor(x)
    if dim0 is None and dim1 is None:
        return permute(x, tuple(reversed(range(x.ndim))))
    if not isinstance(dim0, int) or not isinstance(dim1, int):
        raise OpError(
            f"transpose takes two axes (dim0, dim1) to swap, got {dim0!r}, {dim1!r}; "
            "use permute for a whole permutation"
        )
    return swapaxes(x, dim0, dim1)


@op(method=True, torch=True)
def swapaxes(x, a: int, b: int) -> Tensor:
    x = as_tensor(x)
    a, b = norm_axis(a, x.ndim, x.shape), norm_axis(b, x.ndim, x.shape)
    perm = list(range(x.ndim))
    perm[a], perm[b] = perm[b], perm[a]
    return permute(x, perm)


# ---------------------------------------------------------------- broadcast_to


def _infer_broadcast(ins, attrs):
    (x,) = ins
    shape = attrs["shape"]
    lead = len(shape) - x.ndim
    if lead < 0 or any(d != 1 and d != shape[lead + i] for i, d in enumerate(x.shape)):
        raise OpError(f"cannot broadcast shape {x.shape} to {shape}")
    return shape, x.dtype


def _g_broadcast(t, g):
    from .elementwise import unbroadcast

    return [unbroadcast(g, t.inputs[0].shape)]


register(
    "broadcast_to",
    family="shape",
    role="index",
    emit=_broadcast_wgsl,
    infer=_infer_broadcast,
    grad=_g_broadcast,
    ref=lambda ctx, args, t: ctx.np.ascontiguousarray(ctx.np.broadcast_to(args[0], t.shape)),
    torch=lambda tc, a, n: a[0].broadcast_to(n.shape),
)


@op(method=True, torch=True)
def broadcast_to(x, shape) -> Tensor:
    x = as_tensor(x)
    shape = tuple(shape)
    if shape == x.shape:
        return x
    if prod(shape) == x.size:  # only adds leading or size-1 axes: a reshape
        _infer_broadcast((x,), {"shape": shape})
        return reshape(x, shape)
    return make("broadcast_to", (x,), shape=shape)


# ---------------------------------------------------------------- squeeze / unsqueeze


@op(method=True, torch=True)
def squeeze(x, axis=None) -> Tensor:
    x = as_tensor(x)
    if axis is None:
        return reshape(x, tuple(d for d in x.shape if d != 1))
    axes = {norm_axis(a, x.ndim, x.shape) for a in ((axis,) if isinstance(axis, int) else axis)}
    for a in axes:
        if x.shape[a] != 1:
            raise OpError(f"cannot squeeze axis {a} of size {x.shape[a]} in shape {x.shape}")
    return reshape(x, tuple(d for i, d in enumerate(x.shape) if i not in axes))


@op(method=True, torch=True)
def unsqueeze(x, axis: int) -> Tensor:
    x = as_tensor(x)
    a = norm_axis(axis, x.ndim + 1, x.shape)
    return reshape(x, x.shape[:a] + (1,) + x.shape[a:])


# ---------------------------------------------------------------- slice and pad


def _infer_slice(ins, attrs):
    (x,) = ins
    a, start, stop = attrs["axis"], attrs["start"], attrs["stop"]
    return x.shape[:a] + (stop - start,) + x.shape[a + 1 :], x.dtype


def _ref_slice(ctx, args, t):
    a = t.attrs["axis"]
    idx = (slice(None),) * a + (slice(t.attrs["start"], t.attrs["stop"]),)
    return ctx.np.ascontiguousarray(args[0][idx])


register(
    "slice",
    family="shape",
    role="index",
    emit=_slice_wgsl,
    infer=_infer_slice,
    ref=_ref_slice,
    grad=lambda t, g: [
        pad(g, t.attrs["axis"], t.attrs["start"], t.inputs[0].shape[t.attrs["axis"]] - t.attrs["stop"])
    ],
    torch=lambda tc, a, n: a[0].narrow(n.attrs["axis"], n.attrs["start"], n.attrs["stop"] - n.attrs["start"]),
    window=lambda t: (t.attrs["axis"], t.attrs["start"], t.attrs["stop"]),
)


def _infer_pad(ins, attrs):
    (x,) = ins
    a = attrs["axis"]
    return x.shape[:a] + (attrs["before"] + x.shape[a] + attrs["after"],) + x.shape[a + 1 :], x.dtype


def _ref_pad(ctx, args, t):
    widths = [(0, 0)] * args[0].ndim
    widths[t.attrs["axis"]] = (t.attrs["before"], t.attrs["after"])
    return ctx.np.pad(args[0], widths)


def _torch_pad(tc, a, n):
    x, axis = a[0], n.attrs["axis"]
    widths = [0, 0] * (x.dim() - 1 - axis) + [n.attrs["before"], n.attrs["after"]]  # last axis first
    return tc.F.pad(x, widths)


register(
    "pad",
    family="shape",
    role="index",
    emit=_pad_wgsl,
    infer=_infer_pad,
    ref=_ref_pad,
    grad=lambda t, g: [narrow(g, t.attrs["axis"], t.attrs["before"], t.inputs[0].shape[t.attrs["axis"]])],
    torch=_torch_pad,
)


@op(method=True, torch=True)
def narrow(x, axis: int, start: int, length: int) -> Tensor:
    """x's elements start .. start+length-1 along axis (torch.narrow)."""
    x = as_tensor(x)
    a = norm_axis(axis, x.ndim, x.shape)
    n = x.shape[a]
    if start < 0:
        start += n
    if not (0 <= start and length >= 1 and start + length <= n):
        raise OpError(f"narrow({start}, {length}) is out of range for axis {a} of shape {x.shape}")
    if length == n:
        return x
    return make("slice", (x,), axis=a, start=start, stop=start + length)


@op
def pad(x, axis: int, before: int, after: int) -> Tensor:
    """Zero padding on one axis."""
    x = as_tensor(x)
    a = norm_axis(axis, x.ndim, x.shape)
    if before < 0 or after < 0:
        raise OpError(f"pad widths must be >= 0, got {before}, {after}")
    if before == after == 0:
        return x
    return make("pad", (x,), axis=a, before=before, after=after)


# ---------------------------------------------------------------- concat, stack, split


def _infer_concat(ins, attrs):
    a = attrs["axis"]
    first = ins[0]
    for t in ins[1:]:
        if t.dtype != first.dtype:
            raise OpError(f"dtypes differ: {first.dtype} and {t.dtype}")
        if t.ndim != first.ndim or any(
            d != e for i, (d, e) in enumerate(zip(t.shape, first.shape)) if i != a
        ):
            raise OpError("shapes differ off the concat axis: " + ", ".join(str(x.shape) for x in ins))
    return first.shape[:a] + (sum(t.shape[a] for t in ins),) + first.shape[a + 1 :], first.dtype


def _g_concat(t, g):
    out, off = [], 0
    for x in t.inputs:
        out.append(narrow(g, t.attrs["axis"], off, x.shape[t.attrs["axis"]]))
        off += x.shape[t.attrs["axis"]]
    return out


register(
    "concat",
    family="shape",
    role="index",
    emit=_concat_wgsl,
    infer=_infer_concat,
    grad=_g_concat,
    ref=lambda ctx, args, t: ctx.np.concatenate(args, axis=t.attrs["axis"]),
    torch=lambda tc, a, n: tc.torch.cat(a, n.attrs["axis"]),
)


@op
def concat(xs, axis: int = 0) -> Tensor:
    xs = [as_tensor(x) for x in xs]
    if not xs:
        raise OpError("concat needs at least one tensor")
    if len(xs) == 1:
        return xs[0]
    a = norm_axis(axis, xs[0].ndim, xs[0].shape)
    return make("concat", xs, axis=a)


@op(torch=True)
def stack(xs, axis: int = 0) -> Tensor:
    xs = [as_tensor(x) for x in xs]
    if not xs:
        raise OpError("stack needs at least one tensor")
    for x in xs[1:]:
        if x.shape != xs[0].shape:
            raise OpError("stack needs equal shapes, got " + ", ".join(str(x.shape) for x in xs))
    a = norm_axis(axis, xs[0].ndim + 1, xs[0].shape)
    return concat([unsqueeze(x, a) for x in xs], a)


def _parts(x: Tensor, a: int, sizes) -> list[Tensor]:
    out, off = [], 0
    for s in sizes:
        out.append(narrow(x, a, off, s))
        off += s
    return out


@op(method=True, torch=True)
def split(x, split_size_or_sections, axis: int = 0) -> list[Tensor]:
    """PyTorch's split: an int is the size of each part (the last may be smaller); a list
    gives every part's size."""
    x = as_tensor(x)
    a = norm_axis(axis, x.ndim, x.shape)
    n, size = x.shape[a], split_size_or_sections
    if isinstance(size, int) and not isinstance(size, bool):
        if size < 1:
            raise OpError(f"split size must be >= 1, got {size}")
        sizes = [min(size, n - off) for off in range(0, n, size)]
    else:
        sizes = list(size)
        if sum(sizes) != n or any(not isinstance(s, int) or s < 1 for s in sizes):
            raise OpError(f"sizes {sizes} do not add up to {n} (axis {a} of shape {x.shape})")
    return _parts(x, a, sizes)


@op(method=True, torch=True)
def chunk(x, chunks: int, axis: int = 0) -> list[Tensor]:
    """PyTorch's chunk: parts of ceil(n / chunks) along axis (fewer parts when that
    size already covers it; the last may be smaller)."""
    x = as_tensor(x)
    if isinstance(chunks, bool) or not isinstance(chunks, int) or chunks < 1:
        raise OpError(f"chunks must be an int >= 1, got {chunks!r}")
    a = norm_axis(axis, x.ndim, x.shape)
    return split(x, -(-x.shape[a] // chunks), a)


@op(torch=True)
def roll(x, shifts, axis=None) -> Tensor:
    """torch.roll: elements shifted along axis (or axes), wrapping around; with no axis,
    over the flattened tensor."""
    x = as_tensor(x)
    if axis is None:
        return reshape(roll(reshape(x, (x.size,)), shifts, 0), x.shape)
    shifts = (shifts,) if isinstance(shifts, int) else tuple(shifts)
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    if len(shifts) != len(axes):
        raise OpError(f"roll: {len(shifts)} shifts for {len(axes)} axes")
    for k, a in zip(shifts, axes):
        a = norm_axis(a, x.ndim, x.shape)
        k %= x.shape[a]
        if k:
            x = concat(_parts(x, a, [x.shape[a] - k, k])[::-1], a)
    return x


# ---------------------------------------------------------------- indexing


@op
def getitem(x, idx) -> Tensor:
    """Basic indexing: ints, slices with step 1, ..., and None (x[idx]; rows picked by an
    integer tensor, x[tensor], are an embedding lookup: TensorOps.__getitem__)."""
    x = as_tensor(x)
    if not isinstance(idx, tuple):
        idx = (idx,)
    if sum(1 for i in idx if i is Ellipsis) > 1:
        raise OpError("only one ... is allowed in an index")
    n_real = sum(1 for i in idx if i is not None and i is not Ellipsis)
    if n_real > x.ndim:
        raise OpError(f"too many indices ({n_real}) for shape {x.shape}")
    if Ellipsis in idx:
        e = idx.index(Ellipsis)
        idx = idx[:e] + (slice(None),) * (x.ndim - n_real) + idx[e + 1 :]
    else:
        idx = idx + (slice(None),) * (x.ndim - n_real)
    out_shape, axis = [], 0
    for i in idx:
        if i is None:
            out_shape.append(1)
            continue
        n = x.shape[axis]
        if isinstance(i, bool) or not isinstance(i, (int, slice)):
            raise OpError(f"unsupported index {i!r}: use ints, slices, ... or None")
        if isinstance(i, int):
            j = i + n if i < 0 else i
            if not 0 <= j < n:
                raise OpError(f"index {i} is out of range for axis {axis} of shape {x.shape}")
            x = narrow(x, axis, j, 1)
        else:
            if i.step not in (None, 1):
                raise OpError(f"slice steps other than 1 are not supported (got {i.step})")
            start, stop, _ = i.indices(n)
            if stop <= start:
                raise OpError(f"slice {i.start}:{i.stop} is empty on axis {axis} of shape {x.shape}")
            x = narrow(x, axis, start, stop - start)
            out_shape.append(stop - start)
        axis += 1
    return reshape(x, tuple(out_shape))


def _index_ranges(x: Tensor, idx) -> list[tuple[int, int, bool]]:
    """(start, stop, dropped) per axis of x for a basic index (ints, step-1 slices, ...)."""
    if not isinstance(idx, tuple):
        idx = (idx,)
    if any(i is None for i in idx):
        raise OpError("None in an assigned index is not supported")
    n_real = sum(1 for i in idx if i is not Ellipsis)
    if Ellipsis in idx:
        e = idx.index(Ellipsis)
        idx = idx[:e] + (slice(None),) * (x.ndim - n_real) + idx[e + 1 :]
    idx = idx + (slice(None),) * (x.ndim - len(idx))
    if len(idx) > x.ndim:
        raise OpError(f"too many indices ({len(idx)}) for shape {x.shape}")
    out = []
    for a, (i, n) in enumerate(zip(idx, x.shape)):
        if isinstance(i, int) and not isinstance(i, bool) and -n <= i < n:
            out.append((i % n, i % n + 1, True))
        elif isinstance(i, slice) and i.step in (None, 1) and i.indices(n)[1] > i.indices(n)[0]:
            out.append(i.indices(n)[:2] + (False,))
        else:
            raise OpError(f"unsupported or out-of-range index {i!r} on axis {a} of shape {x.shape}")
    return out


@op
def index_put(x, idx, value) -> Tensor:
    """x with x[idx] replaced by value (broadcast), as a new tensor: what item assignment
    (x[idx] = value) on a traced tensor computes. Basic indices only."""
    from .creation import arange
    from .elementwise import cast, greater_equal, less, logical_and, where

    x = as_tensor(x)
    ranges = _index_ranges(x, idx)
    region = tuple(b - a for a, b, _ in ranges)
    v = as_tensor(value, x)
    v = v if v.dtype == x.dtype else cast(v, x.dtype)
    kept = tuple(r for r, (_, _, dropped) in zip(region, ranges) if not dropped)
    v = reshape(broadcast_to(v, kept), region)
    mask = None
    for a, (start, stop, _) in enumerate(ranges):
        v = pad(v, a, start, x.shape[a] - stop)
        if (start, stop) != (0, x.shape[a]):
            pos = reshape(arange(x.shape[a]), tuple(-1 if d == a else 1 for d in range(x.ndim)))
            m = logical_and(greater_equal(pos, start), less(pos, stop))
            mask = m if mask is None else logical_and(mask, m)
    return v if mask is None else where(mask, v, x)
