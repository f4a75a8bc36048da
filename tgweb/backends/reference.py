"""The reference backend: a NumPy interpreter of the Graph, op by op, and the Engine
that trains with it (params and states as host arrays).

It is the oracle for every kernel test. Float tensors are evaluated in float32
or, for finite-difference checks, float64.
"""

from __future__ import annotations

import array
from typing import Any, Iterable

import numpy as np

from ..ir import REGISTRY, Graph, Tensor
from ..pipeline import APPLIED_READ, Selector
from ..step_data import StepData


class Context:
    """What a reference implementation gets besides its inputs."""

    def __init__(self, precision: str = "float32", seed: int = 0) -> None:
        if precision == "mixed":  # a mixed graph rounds to f16 in its own to_f16 nodes
            precision = "float32"
        if precision not in ("float32", "float64"):
            raise ValueError(f"precision must be 'float32', 'mixed' or 'float64', got {precision!r}")
        self.np = np
        self.f = np.dtype(precision)
        self.seed = seed
        self.scalars: dict[str, float] = {}

    def npdtype(self, dtype: str):
        # f16 values (precision="mixed") are kept in the float dtype, rounded (ops/half.py)
        return {"f32": self.f, "f16": self.f, "i32": np.int32, "bool": np.bool_}[dtype]

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


class Engine:
    """Params and states as NumPy arrays on the host; each run evaluates the graph and
    writes graph.updates back. Its Program (planned as on the GPU backends, for the
    memory report) is lowered the first time it is asked for, unless it is given."""

    def __init__(self, graph: Graph, precision: str, name: str, share=None, program=None) -> None:
        self.np, self.graph, self.name = np, graph, name
        self._program = program
        self.ctx = Context(precision)
        self.f = self.ctx.f
        self.values: dict[str, dict[str, Any]] = {"params": {}, "states": {}}
        if share is not None:
            # the same dicts: updates are seen (module buffers too); states the shared
            # engine's graph lacks (an inference program's own, a sampler's key/value
            # cache) are this engine's alone, as on the GPU backends
            theirs = share.values["states"]
            mine = {n: theirs for n in graph.states if n in share.graph.states}
            self.values = {"params": share.values["params"], "states": _Split(mine)}
        self._leaf = {"params": graph.params, "states": graph.states}
        self._out = [
            (k, n, t)
            for k, d in (("outputs", graph.outputs), ("captures", graph.captures))
            for n, t in d.items()
        ]
        self._upd = list(graph.updates.items())
        self._selector = Selector()  # a training step's select_scalars kernel, on the host

    @property
    def program(self):
        if self._program is None:
            from ..lower import lower

            self._program = lower(self.graph, name=self.name)
        return self._program

    def _array(self, data: array.array, raw: Any, shape, dtype: str):
        np = self.np
        # float64 runs keep a float64 NumPy value as given (exact trajectories)
        if dtype == "f32" and self.f == np.float64 and isinstance(raw, np.ndarray) and raw.dtype.kind == "f":
            return np.array(raw, np.float64).reshape(shape)
        npd = {"f32": np.float32, "i32": np.int32, "bool": np.uint32}[dtype]
        a = np.frombuffer(data.tobytes(), npd).reshape(shape)
        return a.astype(bool) if dtype == "bool" else a.astype(self.ctx.npdtype(dtype))

    def write(self, kind: str, name: str, data: array.array, raw: Any = None) -> None:
        t = self._leaf[kind][name]
        self.values[kind][name] = self._array(data, raw, t.shape, "f32")

    def read(self, kind: str, name: str):
        return self.values[kind][name].copy()

    def run(self, step: StepData, scalars: dict, read: list[tuple[str, str]]) -> dict:
        g = self.graph
        feeds = {t.id: self._array(step[n], step.given[n], t.shape, t.dtype) for n, t in g.inputs.items()}
        for kind in ("params", "states"):  # those not set yet (a first reset) are never read
            have = self.values[kind]
            feeds.update((t.id, have[n]) for n, t in getattr(g, kind).items() if n in have)
        counted = APPLIED_READ in g.scalars  # a training step: its ok outputs are counted
        self.ctx.scalars = self._selector.select(scalars)
        asked = {(k, n) for k, n in read}
        want = asked | ({("outputs", "ok")} if counted else set())
        outs = [(k, n, t) for k, n, t in self._out if (k, n) in want]
        with self.np.errstate(all="ignore"):  # a non-finite step is detected in the graph
            vals = evaluate(g, [t for _, _, t in outs] + [u for _, u in self._upd], feeds, self.ctx)
        got = {(k, n): v for (k, n, _), v in zip(outs, vals)}
        if counted:
            self._selector.ran(bool(got[("outputs", "ok")]))
            if ("outputs", "ok") not in asked:
                del got[("outputs", "ok")]
        for (n, _), v in zip(self._upd, vals[len(outs) :]):
            kind = "params" if n in g.params else "states"
            self.values[kind][n] = v
        return got

    can_wait = True  # everything is here at once

    def close(self) -> None:
        """Nothing to free: the reference engine holds no GPU memory."""

    def submit(self, step, scalars, read):
        """run() at once; the wait is free (the interface of a GPU engine's submit)."""
        got = self.run(step, scalars, read)
        return lambda: got


class _Split(dict):
    """States kept here, except those `shared` maps (name -> the sharing engine's dict),
    which are read from and written to that dict."""

    def __init__(self, shared: dict) -> None:
        super().__init__()
        self.shared = shared

    def __getitem__(self, n):
        return self.shared[n][n] if n in self.shared else super().__getitem__(n)

    def __setitem__(self, n, v) -> None:
        if n in self.shared:
            self.shared[n][n] = v
        else:
            super().__setitem__(n, v)

    def __contains__(self, n) -> bool:
        return n in self.shared[n] if n in self.shared else super().__contains__(n)
