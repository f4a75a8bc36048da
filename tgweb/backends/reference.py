"""The reference backend: a NumPy interpreter of the Graph, op by op.

It is the oracle for every kernel test. Float tensors are evaluated in float32
or, for finite-difference checks, float64.
"""

from __future__ import annotations

from typing import Iterable

import numpy as np

from ..ir import REGISTRY, Graph, Tensor


class Context:
    """What a reference implementation gets besides its inputs."""

    def __init__(self, precision: str = "float32", seed: int = 0) -> None:
        if precision not in ("float32", "float64"):
            raise ValueError(f"precision must be 'float32' or 'float64', got {precision!r}")
        self.np = np
        self.f = np.dtype(precision)
        self.seed = seed
        self.scalars: dict[str, float] = {}

    def npdtype(self, dtype: str):
        return {"f32": self.f, "i32": np.int32, "bool": np.bool_}[dtype]

    def cast(self, a, dtype: str):
        a = np.asarray(a)
        want = self.npdtype(dtype)
        if a.dtype != want:
            if dtype == "i32" and a.dtype.kind == "f":
                a = np.trunc(a)
            a = a.astype(want)
        return a


def evaluate(
    graph: Graph, outputs: Iterable[Tensor], feeds: dict[int, "np.ndarray"], ctx: Context | None = None
) -> list[np.ndarray]:
    """Values of outputs; feeds maps tensor ids of inputs, params and states to arrays.
    Scalars not fed come from ctx.scalars by name."""
    ctx = ctx or Context()
    outputs = list(outputs)
    last = max((t.id for t in outputs), default=-1)
    needed = _needed(graph, outputs)
    vals: dict[int, np.ndarray] = {}
    for t in graph.tensors[: last + 1]:
        if t.id not in needed:
            continue
        if t.kind == "scalar" and t.id not in feeds:
            vals[t.id] = ctx.cast(ctx.scalars[t.attrs["name"]], t.dtype)
            continue
        if t.kind in ("input", "param", "state", "scalar"):
            if t.id not in feeds:
                raise KeyError(f"no value fed for {t.kind} {t.attrs['name']!r}")
            v = ctx.cast(feeds[t.id], t.dtype)
            if v.shape != t.shape:
                raise ValueError(f"{t.kind} {t.attrs['name']!r}: expected shape {t.shape}, got {v.shape}")
            vals[t.id] = v
            continue
        v = REGISTRY[t.kind].ref(ctx, [vals[i.id] for i in t.inputs], t)
        v = ctx.cast(v, t.dtype)
        if v.shape != t.shape:  # a reference bug, never a user error
            raise AssertionError(f"{t.kind}: reference gave {v.shape}, graph says {t.shape}")
        vals[t.id] = v
    return [vals[t.id] for t in outputs]


def _needed(graph: Graph, outputs: list[Tensor]) -> set[int]:
    need = {t.id for t in outputs}
    for t in reversed(graph.tensors):
        if t.id in need:
            need.update(i.id for i in t.inputs)
    return need
