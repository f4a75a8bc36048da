"""Reductions over any axes with keepdims: sum, mean, amax, amin; argmax, argmin; and
PyTorch's max/min (values and indices along one axis)."""

from __future__ import annotations

from ..codegen.reduce import reduction
from ..ir import NO_GRAD, OpError, Tensor, TensorOps, make, prod, register
from .base import as_tensor, norm_axes, norm_axis, op


def _reduced_shape(shape, axes, keepdims):
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def _infer_reduce(ins, attrs):
    (x,) = ins
    if x.dtype == "bool":
        raise OpError(f"cannot reduce a bool tensor of shape {x.shape}; cast it first")
    return _reduced_shape(x.shape, attrs["axes"], attrs["keepdims"]), x.dtype


def _expand_back(t, g):
    """g (shape of t) reshaped with kept dims and broadcast to t's input shape."""
    from .shape import broadcast_to, reshape

    x = t.inputs[0]
    kept = _reduced_shape(x.shape, t.attrs["axes"], True)
    return broadcast_to(reshape(g, kept), x.shape)


def _g_sum(t, g):
    return [_expand_back(t, g)]


def _g_max(t, g):
    from .elementwise import cast, equal

    x = t.inputs[0]
    kept = _reduced_shape(x.shape, t.attrs["axes"], True)
    from .shape import reshape

    mask = cast(equal(x, reshape(t, kept)), "f32")  # ties share the gradient equally
    count = sum(mask, t.attrs["axes"], keepdims=True)
    return [mask * reshape(g, kept) / count]


def _ref_reduce(fn):
    def ref(ctx, args, t):
        out = getattr(ctx.np, fn)(args[0], axis=t.attrs["axes"], keepdims=t.attrs["keepdims"])
        return ctx.cast(out, t.dtype)

    return ref


def _torch_reduce(fn):
    return lambda tc, a, n: getattr(tc.torch, fn)(
        a[0], dim=tuple(n.attrs["axes"]), keepdim=n.attrs["keepdims"]
    )


# kind -> (grad rule, PyTorch function); NumPy's function and the fold are the kind
_REDUCE = {
    "sum": (_g_sum, "sum"),
    "max": (_g_max, "amax"),
    "min": (_g_max, "amin"),
}

for _k, (_g, _tfn) in _REDUCE.items():
    register(
        _k,
        family="reduce",
        role="reduction",
        emit=reduction(_k),
        infer=_infer_reduce,
        grad=_g,
        ref=_ref_reduce(_k),
        torch=_torch_reduce(_tfn),
    )


def _reduce(kind, x, axis, keepdims):
    x = as_tensor(x)
    axes = norm_axes(axis, x.ndim, x.shape)
    if not axes:
        return x
    return make(kind, (x,), axes=axes, keepdims=bool(keepdims))


@op(method=True, torch=True)
def sum(x, axis=None, keepdims: bool = False) -> Tensor:  # noqa: A001 - NumPy's name
    return _reduce("sum", x, axis, keepdims)


class ValuesIndices(tuple):
    """(values, indices) of max/min along a dim, as torch.return_types.max."""

    values = property(lambda self: self[0])
    indices = property(lambda self: self[1])


def _extreme(kind, x, axis, keepdims, other):
    """PyTorch's max/min: over everything; (values, indices) along one axis; or the
    elementwise extreme of two tensors."""
    from . import elementwise

    if other is not None or isinstance(axis, TensorOps):
        if other is not None and axis is not None:
            raise OpError(f"{kind} takes either an axis or another tensor, not both")
        return getattr(elementwise, "maximum" if kind == "max" else "minimum")(
            x, axis if other is None else other
        )
    if axis is None:
        return _reduce(kind, x, None, keepdims)
    if not isinstance(axis, int) or isinstance(axis, bool):
        raise OpError(
            f"{kind} takes one axis (an int) and gives (values, indices); use a{kind} to reduce over {axis!r}"
        )
    x = as_tensor(x)
    arg = argmax if kind == "max" else argmin
    return ValuesIndices((_reduce(kind, x, axis, keepdims), arg(x, axis, keepdims)))


@op(method=True, torch=True)
def max(x, axis=None, keepdims: bool = False, other=None):  # noqa: A001 - PyTorch's name
    """PyTorch's max: max(x) the largest element; max(x, dim) the pair (values, indices)
    along dim; max(x, other) the elementwise maximum. amax reduces over several axes."""
    return _extreme("max", x, axis, keepdims, other)


@op(method=True, torch=True)
def min(x, axis=None, keepdims: bool = False, other=None):  # noqa: A001 - PyTorch's name
    """PyTorch's min; see max."""
    return _extreme("min", x, axis, keepdims, other)


@op(method=True, torch=True)
def amax(x, axis=None, keepdims: bool = False) -> Tensor:
    """The largest value over the given axes (all by default)."""
    return _reduce("max", x, axis, keepdims)


@op(method=True, torch=True)
def amin(x, axis=None, keepdims: bool = False) -> Tensor:
    return _reduce("min", x, axis, keepdims)


@op(method=True, torch=True)
def mean(x, axis=None, keepdims: bool = False) -> Tensor:
    x = as_tensor(x)
    if x.dtype != "f32":
        raise OpError(f"mean needs a float (f32) tensor, got {x.dtype} of shape {x.shape}")
    axes = norm_axes(axis, x.ndim, x.shape)
    n = prod(tuple(x.shape[a] for a in axes))
    return sum(x, axes, keepdims) * (1.0 / n)


def _infer_arg(ins, attrs):
    (x,) = ins
    if x.dtype == "bool":
        raise OpError(f"cannot take arg-extremes of a bool tensor of shape {x.shape}")
    return _reduced_shape(x.shape, (attrs["axis"],), attrs["keepdims"]), "i32"


def _ref_arg(fn):
    def ref(ctx, args, t):
        out = getattr(ctx.np, fn)(args[0], axis=t.attrs["axis"])
        if t.attrs["keepdims"]:
            out = ctx.np.expand_dims(out, t.attrs["axis"])
        return out.astype(ctx.np.int32)

    return ref


def _torch_arg(fn):
    return lambda tc, a, n: getattr(tc.torch, fn)(
        a[0], dim=n.attrs["axis"], keepdim=n.attrs["keepdims"]
    ).int()


# kind -> the fold whose value it picks and how a better value compares
_ARG = {"argmax": ("max", ">"), "argmin": ("min", "<")}

for _k, (_fold, _better) in _ARG.items():
    register(
        _k,
        family="reduce",
        role="reduction",
        emit=reduction(_fold, _better),
        infer=_infer_arg,
        grad=NO_GRAD,
        ref=_ref_arg(_k),
        torch=_torch_arg(_k),
    )


@op(method=True, torch=True)
def argmax(x, axis: int = -1, keepdims: bool = False) -> Tensor:
    """Index of the largest value along one axis (the first on ties), as i32."""
    x = as_tensor(x)
    return make("argmax", (x,), axis=norm_axis(axis, x.ndim, x.shape), keepdims=bool(keepdims))


@op(method=True, torch=True)
def argmin(x, axis: int = -1, keepdims: bool = False) -> Tensor:
    x = as_tensor(x)
    return make("argmin", (x,), axis=norm_axis(axis, x.ndim, x.shape), keepdims=bool(keepdims))
