"""torch.nn: tgweb's layers as torch.nn.Module subclasses, with PyTorch's default
initialisation drawn when they are made."""

from __future__ import annotations

import math

from ... import nn as _nn
from ...nn import init as _init
from . import functional, init  # noqa: F401
from .module import Module, Parameter  # noqa: F401


def _torch_layer(core, fix=None):
    """core (a tgweb.nn layer) as a torch Module; fix(self, *args, **kwargs) redraws what
    PyTorch initialises differently. device= and dtype= are accepted and ignored."""

    def __init__(self, *args, device=None, dtype=None, **kwargs):
        Module.__init__(self)
        core.__init__(self, *args, **kwargs)
        if fix is not None:
            fix(self, *args, **kwargs)

    return type(core.__name__, (Module, core), {"__init__": __init__, "__doc__": core.__doc__})


def _bias_from_fan_in(self, *args, **kwargs):
    """PyTorch draws biases of Linear and Conv2d uniform in +-1/sqrt(fan_in)."""
    if self.bias is not None:
        a = 1.0 / math.sqrt(_init.fans(self.weight.shape)[0])
        self.bias.value = _init.uniform(-a, a)(self.bias.shape, _generator())


def _generator():
    from .._host import GENERATOR

    return GENERATOR


def _layer_norm_args(self, normalized_shape, eps=1e-5, elementwise_affine=True, bias=True):
    if not bias:
        self.bias = None


class LayerNorm(_torch_layer(_nn.LayerNorm, _layer_norm_args)):
    def __init__(
        self, normalized_shape, eps=1e-5, elementwise_affine=True, bias=True, device=None, dtype=None
    ):
        dim = normalized_shape if isinstance(normalized_shape, int) else normalized_shape[-1]
        if not isinstance(normalized_shape, int) and len(normalized_shape) != 1:
            raise ValueError("LayerNorm over more than the last axis is not supported")
        super().__init__(dim, eps, elementwise_affine)
        _layer_norm_args(self, dim, eps, elementwise_affine, bias)


Linear = _torch_layer(_nn.Linear, _bias_from_fan_in)
Conv2d = _torch_layer(_nn.Conv2d, _bias_from_fan_in)
ConvTranspose2d = _torch_layer(_nn.ConvTranspose2d, _bias_from_fan_in)
Embedding = _torch_layer(_nn.Embedding)
ModuleList = _torch_layer(_nn.ModuleList)
ModuleDict = _torch_layer(_nn.ModuleDict)
Sequential = _torch_layer(_nn.Sequential)
Dropout = _torch_layer(_nn.Dropout)
MaxPool2d = _torch_layer(_nn.MaxPool2d)
AvgPool2d = _torch_layer(_nn.AvgPool2d)
Flatten = _torch_layer(_nn.Flatten)
Identity = _torch_layer(_nn.Identity)
GELU = _torch_layer(_nn.GELU)
Tanh = _torch_layer(_nn.Tanh)
Sigmoid = _torch_layer(_nn.Sigmoid)


def _inplace_arg(core):
    """An activation taking PyTorch's inplace= (a traced graph has no in-place ops: ignored)."""

    def __init__(self, inplace: bool = False):
        Module.__init__(self)

    return type(core.__name__, (Module, core), {"__init__": __init__, "__doc__": core.__doc__})


ReLU, SiLU = _inplace_arg(_nn.ReLU), _inplace_arg(_nn.SiLU)
RNN = _torch_layer(_nn.RNN)
LSTM = _torch_layer(_nn.LSTM)
GRU = _torch_layer(_nn.GRU)
RNNCell = _torch_layer(_nn.RNNCell)
LSTMCell = _torch_layer(_nn.LSTMCell)
GRUCell = _torch_layer(_nn.GRUCell)

# the rest of the everyday set (extra.py), the losses (losses.py), normalization (norm.py)
from .extra import (  # noqa: E402,F401
    CELU,
    ELU,
    SELU,
    AdaptiveAvgPool1d,
    AdaptiveAvgPool2d,
    AdaptiveMaxPool1d,
    AdaptiveMaxPool2d,
    AvgPool1d,
    CircularPad1d,
    CircularPad2d,
    ConstantPad1d,
    ConstantPad2d,
    Conv1d,
    ConvTranspose1d,
    Hardsigmoid,
    Hardswish,
    Hardtanh,
    LeakyReLU,
    LogSigmoid,
    LogSoftmax,
    MaxPool1d,
    Mish,
    PixelShuffle,
    PixelUnshuffle,
    PReLU,
    ReflectionPad1d,
    ReflectionPad2d,
    ReLU6,
    ReplicationPad1d,
    ReplicationPad2d,
    Softmax,
    Softmax2d,
    Softplus,
    Softsign,
    Tanhshrink,
    Upsample,
    UpsamplingBilinear2d,
    UpsamplingNearest2d,
    ZeroPad1d,
    ZeroPad2d,
)
from .losses import (  # noqa: E402,F401
    BCELoss,
    BCEWithLogitsLoss,
    CrossEntropyLoss,
    HuberLoss,
    KLDivLoss,
    L1Loss,
    MSELoss,
    NLLLoss,
    SmoothL1Loss,
)
from .norm import (  # noqa: E402,F401
    BatchNorm1d,
    BatchNorm2d,
    BatchNorm3d,
    GroupNorm,
    InstanceNorm1d,
    InstanceNorm2d,
    InstanceNorm3d,
)
from .transformer import (  # noqa: E402,F401 - it builds on the layers above
    MultiheadAttention,
    Transformer,
    TransformerDecoder,
    TransformerDecoderLayer,
    TransformerEncoder,
    TransformerEncoderLayer,
)
