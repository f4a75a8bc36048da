"""tgweb: train neural networks in the browser on WebGPU, from Python.

The public surface: ops as functions (tg.matmul, tg.softmax, ...), tg.nn, tg.optim,
tg.compile, tg.value_and_grad, tg.trace, tg.export_page, tg.to_torch.
"""

from . import nn, optim  # noqa: F401
from .arrays import Array, InputError  # noqa: F401
from .compile import compile  # noqa: F401
from .export import export_page  # noqa: F401
from .ir import Graph, Tensor, TraceError  # noqa: F401
from .ops import *  # noqa: F401,F403
from .ops import __all__ as _ops_all  # noqa: F401
from .torchbridge import load_from_torch, to_torch, to_torch_optimizer  # noqa: F401
from .trace import trace, value_and_grad  # noqa: F401
from .trainer import Trainer  # noqa: F401

__version__ = "0.1.0"
