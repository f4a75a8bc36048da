"""User-facing ops, by family. Importing this package imports every module in it, which
registers every op kind, and exports every function a family module marks with @op
(tgweb.ops.base.op): a new family is one new file here."""

import importlib as _importlib
import pkgutil as _pkgutil
import sys as _sys

from .. import ir as _ir
from . import methods as _methods
from .base import PUBLIC as _PUBLIC

for _m in sorted(m.name for m in _pkgutil.iter_modules(__path__)):
    _importlib.import_module(f"{__name__}.{_m}")

globals().update(_PUBLIC)
__all__ = sorted(_PUBLIC)

_ir.bind_ops(_sys.modules[__name__])  # Tensor operators (+, @, .sum(), ...) call these
_methods.install()  # ... which every family has marked by now
