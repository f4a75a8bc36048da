"""Layers with PyTorch's constructor arguments, parameter names and layouts."""

from __future__ import annotations

from .. import ops
from ..ir import TraceError, user_site
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


class LayerNorm(Module):
    def __init__(self, dim: int, eps: float = 1e-5, elementwise_affine: bool = True) -> None:
        self.eps = float(eps)
        self.weight = self.param((dim,), init.ones()) if elementwise_affine else None
        self.bias = self.param((dim,), init.zeros()) if elementwise_affine else None

    def forward(self, x):
        return ops.layer_norm(x, self.weight, self.bias, self.eps)


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


def _kernel_pair(kernel_size) -> tuple[int, int]:
    return (kernel_size, kernel_size) if isinstance(kernel_size, int) else tuple(kernel_size)


def _check_groups(name: str, cin: int, cout: int, groups: int) -> None:
    if cin % groups or cout % groups:
        raise ValueError(f"{name}: channels {cin}->{cout} do not divide into {groups} groups")


class Conv2d(Module):
    """NCHW convolution; weight [out, in/groups, kh, kw], bias [out]; padding an int,
    a pair, "same" or "valid"."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size,
        stride=1,
        padding=0,
        dilation=1,
        groups: int = 1,
        bias: bool = True,
    ) -> None:
        _check_groups("Conv2d", in_channels, out_channels, groups)
        self.stride, self.padding, self.dilation, self.groups = stride, padding, dilation, groups
        shape = (out_channels, in_channels // groups) + _kernel_pair(kernel_size)
        self.weight = self.param(shape, init.fan_in_uniform())
        self.bias = self.param((out_channels,), init.zeros()) if bias else None

    def forward(self, x):
        return ops.conv2d(x, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)


class ConvTranspose2d(Module):
    """NCHW transposed convolution; weight [in, out/groups, kh, kw], bias [out]."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size,
        stride=1,
        padding=0,
        output_padding=0,
        groups: int = 1,
        bias: bool = True,
        dilation=1,
    ) -> None:
        _check_groups("ConvTranspose2d", in_channels, out_channels, groups)
        self.stride, self.padding, self.output_padding = stride, padding, output_padding
        self.groups, self.dilation = groups, dilation
        shape = (in_channels, out_channels // groups) + _kernel_pair(kernel_size)
        self.weight = self.param(shape, init.fan_in_uniform())
        self.bias = self.param((out_channels,), init.zeros()) if bias else None

    def forward(self, x):
        return ops.conv_transpose2d(
            x,
            self.weight,
            self.bias,
            self.stride,
            self.padding,
            self.output_padding,
            self.groups,
            self.dilation,
        )


class MaxPool2d(Module):
    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode: bool = False) -> None:
        self.kernel_size, self.stride, self.padding, self.ceil_mode = kernel_size, stride, padding, ceil_mode

    def forward(self, x):
        return ops.max_pool2d(x, self.kernel_size, self.stride, self.padding, self.ceil_mode)


class AvgPool2d(Module):
    def __init__(
        self, kernel_size, stride=None, padding=0, ceil_mode: bool = False, count_include_pad: bool = True
    ) -> None:
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding
        self.ceil_mode, self.count_include_pad = ceil_mode, count_include_pad

    def forward(self, x):
        return ops.avg_pool2d(
            x, self.kernel_size, self.stride, self.padding, self.ceil_mode, self.count_include_pad
        )


class Flatten(Module):
    """Axes start_dim..end_dim merged into one (torch.nn.Flatten's defaults keep the batch)."""

    def __init__(self, start_dim: int = 1, end_dim: int = -1) -> None:
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, x):
        shape = tuple(x.shape)
        a, b = (d + len(shape) if d < 0 else d for d in (self.start_dim, self.end_dim))
        if not 0 <= a <= b < len(shape):
            raise TraceError(
                f"Flatten: start_dim {self.start_dim} and end_dim {self.end_dim} do not fit shape {shape}",
                user_site(),
            )
        merged = 1
        for d in shape[a : b + 1]:
            merged *= d
        return ops.reshape(x, shape[:a] + (merged,) + shape[b + 1 :])


class Identity(Module):
    """Returns its input (any constructor arguments are ignored, as in PyTorch)."""

    def __init__(self, *args, **kwargs) -> None:
        pass

    def forward(self, x):
        return x


class RotaryEmbedding(Module):
    """Rotary position embedding over the last axis (dim, even) of x [..., T, dim];
    forward(x, positions=None) is tg.rope. No parameters."""

    def __init__(self, dim: int, base: float = 10000.0, interleaved: bool = False) -> None:
        if not isinstance(dim, int) or dim < 2 or dim % 2:
            raise ValueError(f"RotaryEmbedding: dim must be a positive even int, got {dim!r}")
        self.dim, self.base, self.interleaved = dim, float(base), bool(interleaved)

    def forward(self, x, positions=None):
        if x.shape[-1] != self.dim:
            raise TraceError(
                f"RotaryEmbedding({self.dim}): x's last axis must be {self.dim}, got shape {tuple(x.shape)}",
                user_site(),
            )
        return ops.rope(x, positions, self.base, self.interleaved)


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


class SiLU(_Fn):
    fn = staticmethod(ops.silu)


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
