"""Modules, parameters, initialisers, layers and losses."""

from . import init  # noqa: F401
from .layers import (  # noqa: F401
    GELU,
    AvgPool2d,
    Conv2d,
    ConvTranspose2d,
    Dropout,
    Embedding,
    Flatten,
    Identity,
    LayerNorm,
    Linear,
    MaxPool2d,
    ReLU,
    RMSNorm,
    RotaryEmbedding,
    Sequential,
    Sigmoid,
    SiLU,
    Tanh,
)
from .module import Module, ModuleDict, ModuleList, Parameter  # noqa: F401
from .rnn import GRU, LSTM, RNN, GRUCell, LSTMCell, RNNCell  # noqa: F401
