"""Backends: reference (NumPy interpreter), native (wgpu-py), browser (gpu.mjs).

An engine holds a compiled graph's parameters and state and runs it: write(kind,
name, data), read(kind, name), run(step, scalars, read) with the StepData of
tgweb.step_data.check_inputs, submit(...) (the same, returning a function that waits
for the results) and .program.
"""

from __future__ import annotations

import array
import importlib
from typing import Any, Callable

from ..arrays import to_user
from ..ir import Graph
from ..program import Program

# the package each CPython backend runs on: (module, its name, what installs it)
PACKAGES = {
    "reference": ("numpy", "NumPy", "pip install numpy"),
    "native": ("wgpu", "wgpu-py", "pip install wgpu"),
}


class MissingDependency(ImportError):
    """The package a backend runs on is not installed; the message names the backend and
    the pip command that installs what it needs."""


def missing_message(backend: str, error: BaseException) -> str:
    """What to tell a user whose `backend` cannot import its package (error: the import's
    own error): the backend, the package and the pip command."""
    _, name, install = PACKAGES[backend]
    return (
        f"the {backend} backend needs {name}, which is not installed "
        f"({type(error).__name__}: {error}): {install}"
    )


def require(backend: str, why: str | Callable[[], str] = "") -> None:
    """Raise MissingDependency, before any work, when `backend` runs on a package that
    does not import. why: a sentence on why this backend runs, added to the message (a
    function is called only then). The browser backend needs no package."""
    if backend not in PACKAGES:
        return
    try:
        importlib.import_module(PACKAGES[backend][0])
    except ImportError as e:
        text = why() if callable(why) else why
        raise MissingDependency(missing_message(backend, e) + (f". {text}" if text else "")) from None


def chosen_reason() -> str:
    """Why the default backend is the reference one: require's `why` when the user named none."""
    return f"tgweb chose the reference backend because the native one is unavailable: {why_not_native()}"


def why_not_native() -> str:
    """Why the native backend is unavailable here (for messages and `tgweb info`): wgpu-py
    missing, or the reason no adapter could be opened; "" when it is available."""
    try:
        importlib.import_module("wgpu")
    except ImportError as e:
        return missing_message("native", e)
    from . import native

    try:
        native.device_limits()  # opens the device, or raises NativeError saying why not
    except Exception as e:
        return str(e)
    return ""


def lowering_for(backend: str) -> dict | None:
    """lower()'s limits and target for a GPU backend's device (tensors over its limits
    fail there; kernels are tuned for its class); None for the reference backend, which
    runs the graph itself."""
    if backend == "reference":
        return None
    mod = _module(backend)
    return {"limits": mod.device_limits(), "target": mod.device_target()}


def _module(backend: str):
    """A GPU backend's module: the browser's is tgweb.backends.planned inside its planning()."""
    from . import planned

    return (
        planned
        if backend == "browser" and planned.active()
        else importlib.import_module(f"tgweb.backends.{backend}")
    )


def prewarm(program: Program | None, backend: str) -> bool:
    """Start compiling a Program's kernels where the device compiles them beside Python
    (the browser: Chromium's GPU process), for the make_engine that follows; True where it
    started (elsewhere pipelines are made when the engine is)."""
    if program is None or backend != "browser":
        return False
    from . import browser

    return browser.prewarm(program)


def kernel_asker(backend: str):
    """What lower() hands each kernel to as it emits it (lower's `ask`), where the device
    compiles pipelines beside Python (the browser: Chromium's GPU process, which checks the
    texts one after another): each distinct one is asked for at once, before the rest of the
    Program is emitted; None elsewhere (and outside tgweb's worker)."""
    if backend != "browser":
        return None
    from . import browser

    return browser.kernel_asker()


def reserver(backend: str):
    """(reserve, cancel): what lower() hands a training step's planned buffers to, so that
    the device creates them while Python goes on (lower's `reserve`), and what lets them go
    where the lowering fails: native.reserve and native.cancel_reserved; (None, None)
    elsewhere (the browser's worker creates them as it instantiates the Program)."""
    if backend != "native":
        return None, None
    from . import native

    return native.reserve, native.cancel_reserved


def make_engine(graph: Graph | None, program: Program | None, backend: str, precision: str, share=None):
    """The engine of one graph on one backend: a GPU backend runs `program` (the graph
    lowered with lowering_for(backend); the graph itself may be None there, as for a
    Program from the cache); the reference backend runs the graph (and lowers
    it only when asked for its plan, or reports `program` when given). share: another
    engine whose parameters this one uses (an inference program attached to a trainer)."""
    if backend == "reference":
        require("reference")
        from .reference import Engine  # NumPy: imported only when asked for

        return Engine(graph, precision, "step" if graph.updates else "forward", share, program)
    return RuntimeEngine(program, backend, share)


class RuntimeEngine:
    """A GPU backend: a Program run by that backend's Runtime (tgweb.backends.base); host
    data as array.array."""

    def __init__(self, program: Program, backend: str, share=None) -> None:
        mod = _module(backend)
        self.program = program
        shared = None
        if share is not None:
            # an inference program's states are module buffers (BatchNorm's running
            # statistics): the trainer's, as its params are; states the trainer lacks (a
            # sampler's key/value cache) are the program's own
            theirs = share.program.states
            names = (*self.program.params, *(n for n in self.program.states if n in theirs))
            shared = {n: share.rt.param_handle(n) for n in names}
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

    @property
    def can_wait(self) -> bool:
        """Whether a call may wait for the GPU (not in a Pyodide without JSPI outside
        tgweb's worker, where a Program just made is not there yet)."""
        return getattr(self.rt, "can_wait", True)

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
