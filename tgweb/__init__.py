"""tgweb: train neural networks in the browser on WebGPU, from Python.

The public surface: ops as functions (tg.matmul, tg.softmax, ...), tg.nn, tg.optim,
tg.compile, tg.value_and_grad, tg.trace, tg.export_page, tg.to_torch, and tgweb.worker
(events to the page). tgweb.web is worker's older name, kept for the scripts that use it.
"""

import sys as _sys

from . import nn, optim, worker  # noqa: F401
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

# the older name of tgweb.worker: scripts written before the rename (the page's saved
# edits among them) say `from tgweb import web` or `import tgweb.web`; both get the
# same module object, so its state (handler, open autosaves, deferred metrics) is one
web = worker
_sys.modules[__name__ + ".web"] = worker
