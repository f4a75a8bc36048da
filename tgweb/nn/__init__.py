"""Modules, parameters, initialisers, layers and losses."""

from . import init  # noqa: F401
from .layers import (  # noqa: F401
    GELU,
    Conv2d,
    Dropout,
    Embedding,
    LayerNorm,
    Linear,
    ReLU,
    RMSNorm,
    Sequential,
    Sigmoid,
    Tanh,
)
from .module import Module, Parameter  # noqa: F401
