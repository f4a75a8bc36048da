"""Backends: reference (NumPy interpreter), native (wgpu-py), browser (gpu.mjs).

An engine holds a compiled graph's parameters and state and runs it: write(kind,
name, data), read(kind, name), run(step, scalars, read) with the StepData of
tgweb.step_data.check_inputs, submit(...) (the same, returning a function that waits
for the results) and .program.
"""

from __future__ import annotations

import array
import importlib
from typing import Any

from ..arrays import to_user
from ..ir import Graph
from ..program import Program


def lowering_for(backend: str) -> dict | None:
    """lower()'s limits and target for a GPU backend's device (tensors over its limits
    fail there; kernels are tuned for its class); None for the reference backend, which
    runs the graph itself."""
    if backend == "reference":
        return None
    mod = importlib.import_module(f"tgweb.backends.{backend}")
    return {"limits": mod.device_limits(), "target": mod.device_target()}


def make_engine(graph: Graph, program: Program | None, backend: str, precision: str, share=None):
    """The engine of one graph on one backend: a GPU backend runs `program` (the graph
    lowered with lowering_for(backend)); the reference backend runs the graph (and lowers
    it only when asked for its plan, or reports `program` when given). share: another
    engine whose parameters this one uses (an inference program attached to a trainer)."""
    if backend == "reference":
        from .reference import Engine  # NumPy: imported only when asked for

        return Engine(graph, precision, "step" if graph.updates else "forward", share, program)
    return RuntimeEngine(program, backend, share)


class RuntimeEngine:
    """A GPU backend: a Program run by that backend's Runtime (tgweb.backends.base); host
    data as array.array."""

    def __init__(self, program: Program, backend: str, share=None) -> None:
        mod = importlib.import_module(f"tgweb.backends.{backend}")
        self.program = program
        shared = None
        if share is not None:
            # an inference program's states are module buffers (BatchNorm's running
            # statistics): the trainer's, as its params are
            shared = {n: share.rt.param_handle(n) for n in (*self.program.params, *self.program.states)}
        self.rt = mod.Runtime(self.program, shared=shared)
        self._slots = {
            "params": self.program.params,
            "states": self.program.states,
            "outputs": self.program.outputs,
            "captures": self.program.captures,
        }

    def close(self) -> None:
        """Free this program's buffers and pipelines (Trainer.close, Inference.close)."""
        self.rt.close()

    def write(self, kind: str, name: str, data: array.array, raw: Any = None) -> None:
        if name in self._slots[kind]:  # a param the program does not use has no buffer
            self.rt.write(kind, name, data)

    def read(self, kind: str, name: str):
        s = self._slots[kind][name]
        return to_user(self.rt.read(kind, name), tuple(s.shape), s.dtype)

    def run(self, step, scalars, read):
        return self.submit(step, scalars, read)()

    def submit(self, step, scalars, read):
        """Send one execution to the GPU; returns wait() -> {(kind, name): array}. The
        runtime reads the scalars its Program has, by name."""
        pending = self.rt.submit(step, scalars, read)

        def wait():
            out = {}
            for (k, n), v in pending().items():
                s = self._slots[k][n]
                out[(k, n)] = to_user(v, tuple(s.shape), s.dtype)
            return out

        return wait
