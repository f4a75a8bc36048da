"""The interface every GPU backend implements to run a Program (native: wgpu-py;
browser: gpu.mjs through Pyodide). All calls are plain synchronous calls: in the
browser worker, GPU readbacks are awaited with pyodide.ffi.run_sync (JSPI), so one
user script runs unchanged in CPython and in the browser. submit() queues an execution
and returns a function that waits for its read-backs, so the host can prepare the next
step while the GPU runs this one.

Host data crosses as flat array.array buffers ('f' for f32, 'i' for i32, 'I' for bool).
A step's inputs come as a StepData (tgweb.step_data.check_inputs), checked once and
sent as they are; a plain dict is checked here first (Runtime.step_data).
"""

from __future__ import annotations

import array
from typing import Any, Callable

from ..program import Program
from ..step_data import StepData, check_inputs


class DeviceLost(RuntimeError):
    """The GPU device went away (driver reset, a tab sent to the background, destroy()).
    Everything on it is gone; a Trainer made with recover_every continues on a new
    device from its last host copy."""


class Runtime:
    """One instantiated Program: its buffers and pipelines on one device."""

    name = "abstract"

    def __init__(self, program: Program, shared: dict[str, Any] | None = None) -> None:
        """Allocate buffers and create pipelines. `shared` maps param names (and the names
        of module buffers kept as states) to buffer handles of another Runtime (from
        param_handle) to use instead of new buffers."""
        raise NotImplementedError

    def write(self, kind: str, name: str, data: array.array) -> None:
        """Overwrite a param, state or input (kind 'params' | 'states' | 'inputs')."""
        raise NotImplementedError

    def read(self, kind: str, name: str) -> array.array:
        """Read back a param, state, output or capture ('params' | 'states' | 'outputs' | 'captures')."""
        raise NotImplementedError

    def run(
        self, inputs: dict[str, array.array], scalars: dict[str, float | int], read: list[tuple[str, str]]
    ) -> dict[tuple[str, str], array.array]:
        """One execution: write inputs and scalars, dispatch every kernel in one pass,
        one submit, then read back the (kind, name) slots listed in `read`."""
        return self.submit(inputs, scalars, read)()

    def submit(
        self, inputs: dict[str, array.array], scalars: dict[str, float | int], read: list[tuple[str, str]]
    ) -> Callable[[], dict[tuple[str, str], array.array]]:
        """run() without waiting: the execution is queued on the device and the returned
        function waits for the read-back values. Executions run in submission order."""
        raise NotImplementedError

    def step_data(self, inputs: dict) -> StepData:
        """The inputs of a run, checked: a StepData as it is, anything else against the
        Program's input slots (InputError naming what is wrong, before anything changes)."""
        if type(inputs) is StepData:
            return inputs
        return check_inputs(self.program.inputs, inputs, "inputs")

    def param_handle(self, name: str) -> Any:
        """The buffer holding a param (or a module buffer's state), for sharing with another Runtime."""
        raise NotImplementedError

    def close(self) -> None:
        """Release GPU resources."""
