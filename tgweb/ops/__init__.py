"""User-facing ops, by family. Importing this package registers every op kind and
exports every function its family module marks with @op (tgweb.ops.base.op)."""

import sys as _sys

from .. import ir as _ir
from . import attention, capture, conv, elementwise, linalg, nn, random, reduce, rope, shape  # noqa: F401 - register the kinds
from .base import PUBLIC as _PUBLIC

globals().update(_PUBLIC)
__all__ = sorted(_PUBLIC)

_ir.bind_ops(_sys.modules[__name__])  # Tensor operators (+, @, .sum(), ...) call these
