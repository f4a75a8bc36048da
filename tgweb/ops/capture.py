"""capture(name, x): expose an activation to the caller of a step or a run."""

from __future__ import annotations

from ..ir import OpError, Tensor, check_name
from .base import as_tensor, op


@op
def capture(name: str, x) -> Tensor:
    """Record x under name; its value comes back with the step's result. Returns x."""
    x = as_tensor(x)
    check_name(name, "capture")
    if name in x.graph.captures:
        raise OpError(f"capture name {name!r} is used twice")
    x.graph.captures[name] = x
    return x
