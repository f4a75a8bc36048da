"""Tensors held on the host (made in a module's __init__, or from data anywhere): host
values plus the recipe that rebuilds them as graph nodes when a traced forward reads
them, so that `nn.Parameter(torch.ones(n))` and `register_buffer("mask",
torch.tril(...))` work. One made from data (no recipe) is a data constant of the graph
(tgweb.ops.constant); a buffer its module updates (BatchNorm's running statistics) is
graph state (Graph.buffer_tensors). Pure Python: the browser has no NumPy."""

from __future__ import annotations

import random
from typing import Any, Callable

from .. import ops
from ..ir import TensorOps, TraceError, current_graph, prod, user_site
from ..ops.constant import constant

GENERATOR = random.Random(0)  # torch.manual_seed reseeds it


class HostTensor(TensorOps):
    """A tensor held on the host: flat values, shape, dtype ("f32", "i32", "bool"), and
    recipe() -> the same value as graph nodes (None: made from data, not traceable)."""

    def __init__(self, values: list, shape: tuple[int, ...], dtype: str, recipe: Callable | None) -> None:
        self.values, self.shape, self.dtype, self.recipe = list(values), tuple(shape), dtype, recipe
        self._cache: tuple[Any, Any] = (None, None)
        self.requires_grad = False

    def _t(self):
        g = current_graph()
        if g is None:
            raise TraceError(
                "this host tensor is used outside tracing; only its values exist here", user_site()
            )
        if self._cache[0] is not g:
            state = g.buffer_tensors.get(id(self))  # a buffer the forward updates: graph state
            if state is not None:
                self._cache = (g, state)
            elif self.recipe is None:  # made from data: a constant the graph holds
                self._cache = (g, constant(self.values, self.shape, self.dtype))
            else:
                self._cache = (g, self.recipe())
        return self._cache[1]

    def reshape(self, *shape):
        if current_graph() is not None:
            return super().reshape(*shape)
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        if -1 in shape:
            known = prod(tuple(d for d in shape if d != -1))
            shape = tuple(prod(self.shape) // known if d == -1 else d for d in shape)
        if prod(shape) != prod(self.shape):
            raise TraceError(f"cannot view shape {self.shape} as {shape}", user_site())
        return HostTensor(self.values, shape, self.dtype, self._then(lambda t: ops.reshape(t, shape)))

    view = reshape

    def _then(self, fn: Callable) -> Callable | None:
        return None if self.recipe is None else (lambda: fn(self._t()))

    def tolist(self):
        return _nest(self.values, self.shape)

    def numpy(self):
        import numpy as np

        npd = {"f32": np.float32, "i32": np.int64, "bool": np.bool_}[self.dtype]
        return np.array(self.values, npd).reshape(self.shape)

    __array__ = lambda self, dtype=None, copy=None: (
        self.numpy() if dtype is None else self.numpy().astype(dtype)
    )  # noqa: E731

    def item(self):
        if len(self.values) != 1:
            raise ValueError(f"item() needs a one-element tensor, not shape {self.shape}")
        return self.values[0]

    def __repr__(self) -> str:
        return f"tensor({self.tolist()!r}, dtype={self.dtype})"


def _nest(flat, shape):
    if not shape:
        return flat[0]
    step = prod(shape[1:])
    return [_nest(flat[i * step : (i + 1) * step], shape[1:]) for i in range(shape[0])]


def flatten_data(data) -> tuple[list, tuple[int, ...]]:
    """(flat values, shape) of nested lists, numbers, NumPy arrays or HostTensors."""
    if isinstance(data, HostTensor):
        return list(data.values), data.shape
    if hasattr(data, "tolist") and hasattr(data, "shape"):
        return flatten_data(data.tolist())
    if isinstance(data, (list, tuple)):
        if not data:
            raise ValueError("empty tensors are not supported")
        parts = [flatten_data(d) for d in data]
        if any(p[1] != parts[0][1] for p in parts):
            raise ValueError("ragged nested lists do not make a tensor")
        return [v for p in parts for v in p[0]], (len(data),) + parts[0][1]
    if isinstance(data, (bool, int, float)):
        return [data], ()
    raise TypeError(f"cannot make a tensor from {type(data).__name__}")


def cast_values(values: list, dtype: str) -> list:
    return (
        [float(v) for v in values]
        if dtype == "f32"
        else [bool(v) for v in values]
        if dtype == "bool"
        else [int(v) for v in values]
    )
