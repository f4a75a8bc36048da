"""Tensor's operators and methods (+, @, <, x[i], .T, .reshape(), .sum(), ...): each
forwards to the op of tgweb.ops, looked up when called. tgweb.ops installs them on
ir.TensorOps (the base of Tensor, nn.Parameter and tgweb.torch's host tensors) once
every family is loaded: the ones below, and a method for every op whose @op says
method=True (the op with the tensor first)."""

from __future__ import annotations

from types import FunctionType

from ..ir import DTYPES, TensorOps, TraceError, bound_ops, dtype_name, user_site
from .base import METHODS

_ops = bound_ops


class _Methods:
    """The operators and the methods that are not simply an op with the tensor first."""

    def __add__(self, o):
        return _ops().add(self, o)

    def __radd__(self, o):
        return _ops().add(o, self)

    def __sub__(self, o):
        return _ops().sub(self, o)

    def __rsub__(self, o):
        return _ops().sub(o, self)

    def __mul__(self, o):
        return _ops().mul(self, o)

    def __rmul__(self, o):
        return _ops().mul(o, self)

    def __truediv__(self, o):
        return _ops().div(self, o)

    def __rtruediv__(self, o):
        return _ops().div(o, self)

    def __pow__(self, o):
        return _ops().pow(self, o)

    def __matmul__(self, o):
        return _ops().matmul(self, o)

    def __rmatmul__(self, o):
        return _ops().matmul(o, self)

    def __neg__(self):
        return _ops().neg(self)

    def __abs__(self):
        return _ops().abs(self)

    def __lt__(self, o):
        return _ops().less(self, o)

    def __gt__(self, o):
        return _ops().greater(self, o)

    def __le__(self, o):
        return _ops().less_equal(self, o)

    def __ge__(self, o):
        return _ops().greater_equal(self, o)

    def __getitem__(self, idx):
        if isinstance(idx, TensorOps):  # rows picked by an integer tensor: an embedding lookup
            if idx.dtype != "i32":
                raise TraceError(
                    f"indexing by a {idx.dtype} tensor (a boolean mask) gives a shape that depends "
                    "on the data, which a static graph cannot have: use tg.where(mask, x, 0)",
                    user_site(),
                )
            return _ops().embedding(self, idx)
        return _ops().getitem(self, idx)

    @property
    def T(self):
        return _ops().transpose(self)

    @property
    def mT(self):
        return _ops().swapaxes(self, -1, -2)

    def reshape(self, *shape):
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        return _ops().reshape(self, shape)

    view = reshape

    def permute(self, *axes):
        if len(axes) == 1 and isinstance(axes[0], (tuple, list)):
            axes = tuple(axes[0])
        return _ops().permute(self, axes)

    def expand(self, *shape):
        """PyTorch's expand: -1 keeps an axis's size."""
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        lead = len(shape) - self.ndim
        full = tuple(d if d != -1 else self.shape[i - lead] for i, d in enumerate(shape))
        return _ops().broadcast_to(self, full)

    def astype(self, dtype):
        return _ops().cast(self, dtype)

    def to(self, *args, **kwargs):
        """PyTorch's to(device or dtype): a dtype casts, a device changes nothing."""
        for a in (*args, *kwargs.values()):
            if dtype_name(a) in DTYPES:
                return _ops().cast(self, dtype_name(a))
        return self

    def masked_fill(self, mask, value):
        return _ops().where(mask, value, self)

    def float(self):
        return _ops().cast(self, "f32")

    def long(self):
        return _ops().cast(self, "i32")

    int = long

    def bool(self):
        return _ops().cast(self, "bool")


def _forward(name: str):
    """A Tensor method that calls the op of the same name on the tensor."""

    def method(self, *args, **kwargs):
        return getattr(_ops(), name)(self, *args, **kwargs)

    method.__name__ = name
    return method


def install() -> None:
    """Puts the operators and methods on TensorOps (called by tgweb.ops once loaded)."""
    for name, value in vars(_Methods).items():
        if isinstance(value, (FunctionType, property)):  # not __module__, __doc__, ...
            setattr(TensorOps, name, value)
    for name in sorted(METHODS):
        setattr(TensorOps, name, _forward(name))
