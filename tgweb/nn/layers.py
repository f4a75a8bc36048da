"""Layers with PyTorch's constructor arguments, parameter names and layouts."""

from __future__ import annotations

from .. import ops
from . import init
from .module import Module


class Linear(Module):
    """y = x W^T + b with weight [out, in] and bias [out]."""

    def __init__(
        self, in_features: int, out_features: int, bias: bool = True, weight_init: init.Init | None = None
    ) -> None:
        self.weight = self.param((out_features, in_features), weight_init or init.fan_in_uniform())
        self.bias = self.param((out_features,), init.zeros()) if bias else None

    def forward(self, x):
        y = ops.matmul(x, ops.transpose(self.weight))
        return y + self.bias if self.bias is not None else y


def _normalize(x, eps, axis=-1):
    mu = ops.mean(x, axis, keepdims=True)
    xc = x - mu
    var = ops.mean(xc * xc, axis, keepdims=True)
    return xc * ops.rsqrt(var + eps)


class LayerNorm(Module):
    def __init__(self, dim: int, eps: float = 1e-5, elementwise_affine: bool = True) -> None:
        self.eps = float(eps)
        self.weight = self.param((dim,), init.ones()) if elementwise_affine else None
        self.bias = self.param((dim,), init.zeros()) if elementwise_affine else None

    def forward(self, x):
        y = _normalize(x, self.eps)
        return y * self.weight + self.bias if self.weight is not None else y


class RMSNorm(Module):
    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        self.eps = float(eps)
        self.weight = self.param((dim,), init.ones())

    def forward(self, x):
        return x * ops.rsqrt(ops.mean(x * x, -1, keepdims=True) + self.eps) * self.weight


class Embedding(Module):
    """weight [num_embeddings, dim]; the lookup's gradient is a scatter-add."""

    def __init__(self, num_embeddings: int, embedding_dim: int, weight_init: init.Init | None = None) -> None:
        self.weight = self.param((num_embeddings, embedding_dim), weight_init or init.normal(1.0))

    def forward(self, idx):
        return ops.embedding(self.weight, idx)


class Conv2d(Module):
    """NCHW convolution; weight [out, in/groups, kh, kw], bias [out]."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size,
        stride=1,
        padding=0,
        groups: int = 1,
        bias: bool = True,
    ) -> None:
        kh, kw = (kernel_size, kernel_size) if isinstance(kernel_size, int) else kernel_size
        if in_channels % groups or out_channels % groups:
            raise ValueError(
                f"Conv2d: channels {in_channels}->{out_channels} do not divide into {groups} groups"
            )
        self.stride, self.padding, self.groups = stride, padding, groups
        self.weight = self.param((out_channels, in_channels // groups, kh, kw), init.fan_in_uniform())
        self.bias = self.param((out_channels,), init.zeros()) if bias else None

    def forward(self, x):
        return ops.conv2d(
            x, self.weight, self.bias, stride=self.stride, padding=self.padding, groups=self.groups
        )


class Sequential(Module):
    """Layers applied in order, named "0", "1", ... as in PyTorch."""

    def __init__(self, *layers) -> None:
        for i, layer in enumerate(layers):
            setattr(self, str(i), layer)
        self._n = len(layers)

    def forward(self, x):
        for i in range(self._n):
            x = getattr(self, str(i))(x)
        return x


class _Fn(Module):
    fn = None

    def forward(self, x):
        return type(self).fn(x)


class ReLU(_Fn):
    fn = staticmethod(ops.relu)


class Tanh(_Fn):
    fn = staticmethod(ops.tanh)


class Sigmoid(_Fn):
    fn = staticmethod(ops.sigmoid)


class GELU(Module):
    def __init__(self, approximate: str = "none") -> None:
        self.approximate = approximate

    def forward(self, x):
        return ops.gelu(x, self.approximate)


class Dropout(Module):
    """Zeroes elements with probability p while training (scaling the rest by
    1 / (1 - p)); set ``.training = False`` (or call ``.eval()``) for inference."""

    def __init__(self, p: float = 0.5) -> None:
        if not 0 <= p <= 1:
            raise ValueError(f"Dropout: p must be in [0, 1], got {p}")
        self.p = float(p)
        self.training = True

    def train(self, mode: bool = True) -> "Dropout":
        self.training = bool(mode)
        return self

    def eval(self) -> "Dropout":
        return self.train(False)

    def forward(self, x):
        return ops.dropout(x, self.p, self.training)
