"""tgweb in any Pyodide: the WebGPU device and the run shim for a Pyodide that tgweb's own
worker (web/worker.mjs) did not start: a user's page or module worker, PyScript, a notebook.

The worker registers the JS module tgweb_js (tgweb.worker.hooks()) before any tgweb code
runs. Elsewhere hooks() makes the part of it the browser backend needs (gpu, device,
adapterInfo) here: the shim (web/device.mjs + web/gpu.mjs, which the wheel carries; see
tgweb.export._gpu_source) is imported as one module from a Blob URL, so nothing is fetched,
and the browser is asked through it for an adapter and a device.

Waiting for the GPU. tgweb's calls are synchronous. Where one must wait for the GPU (a
step's loss, the device at first use), it suspends WebAssembly with pyodide.ffi.run_sync,
which needs JavaScript Promise Integration (JSPI: Chrome/Edge 137+) and Python entered
through an async call (pyodide.runPythonAsync, a notebook cell, PyScript's async scripts).
Without it, the same work goes through awaitable calls, and a synchronous call that would
have to wait raises NeedsAwait naming the one to use:

    await tgweb.jsbridge.setup()              # the device (or tg.compile through call())
    r = await trainer.step_async(**batch)     # never waits for the GPU inside
    loss = await r.loss_async                 # waits for that step
    params = await tgweb.jsbridge.call(trainer.params)  # any other call that reads back

Outside tgweb's worker every GPU promise a Runtime makes is tracked here, so that those
calls can wait for what a synchronous call would have waited for. The worker's runtimes
track nothing: its path is unchanged.
"""

from __future__ import annotations

import collections
import functools
from typing import Any, Callable

from . import worker

# the browsers with WebGPU, named where it is missing (device.mjs's noWebGPU says the same
# from JavaScript, once its module is loaded)
BROWSERS = "Chrome/Edge 113+, Safari 26+, Firefox 141+"
RUN_SYNC = (
    "this Pyodide cannot wait for the GPU inside a synchronous call (that needs JavaScript Promise "
    "Integration, in Chrome/Edge 137+, and Python run through pyodide.runPythonAsync or top-level await)"
)
DEPTH_STEPS = 8  # tgweb.pipeline.DEPTH: the steps a trainer sends before it waits for the oldest

_pending: collections.deque = collections.deque()  # (holder, kind): tracked GPU work, oldest first
_setup: dict[str, Any] = {}  # "hooks" once made; "task": the setup under way (an asyncio task)


class NeedsAwait(RuntimeError):
    """A synchronous call had to wait for the GPU where this Pyodide cannot (no JSPI); the
    message names the awaitable call to use. wait(): what to await before trying again
    (None: settle())."""

    def __init__(self, message: str, wait: Callable[[], Any] | None = None) -> None:
        super().__init__(message)
        self.wait = wait


class NoWebGPU(RuntimeError):
    """This browser (or this context) has no WebGPU, or no GPU adapter."""


class _Hooks:
    """What tgweb uses of the worker's tgweb_js outside it: the shim, the device, the
    adapter, and bulk (web/bulk.mjs: initial values and finite checks in one pass)."""

    def __init__(self, gpu: Any, device: Any, adapter_info: Any) -> None:
        self.gpu, self.device, self.adapterInfo = gpu, device, adapter_info
        self.bulk = None


@functools.cache
def _js_import() -> Callable:
    """JavaScript's import(), which no object holds: a function made once by run_js."""
    from pyodide.code import run_js

    return run_js("(url) => import(url)")


async def _import_text(text: str) -> Any:
    """A JavaScript module from its text (the package's own files: nothing is fetched)."""
    from js import URL, Blob, Object
    from pyodide.ffi import to_js

    js_type = to_js({"type": "text/javascript"}, dict_converter=Object.fromEntries)
    url = URL.createObjectURL(Blob.new(to_js([text]), js_type))
    try:
        return await _js_import()(url)
    finally:
        URL.revokeObjectURL(url)


async def _make_hooks(power_preference: str | None) -> _Hooks:
    from js import Object, console
    from pyodide.ffi import JsException, create_once_callable, create_proxy, to_js

    from .export import _gpu_source, js_files

    # the shim (device.mjs + gpu.mjs as one module), and bulk.mjs (as the worker's hooks)
    shim = await _import_text(_gpu_source())
    (bulk,) = js_files(("bulk.mjs",))
    asked = {"powerPreference": power_preference} if power_preference else {}
    opts = to_js(asked, dict_converter=Object.fromEntries)
    try:
        adapter = await shim.requestAdapter(opts)
    except JsException as e:  # device.mjs says why: no navigator.gpu (naming browsers), or no adapter
        raise NoWebGPU(str(getattr(e, "message", e))) from None
    hooks = _Hooks(shim, None, shim.adapterInfo(adapter))
    hooks.bulk = await _import_text(bulk.read_text(encoding="utf-8"))

    def lost(why: str) -> None:
        # every later call on the device fails with `why`; the next Program gets a new one
        console.warn(f"tgweb: {why}; the next compile asks for a new device")
        _setup.pop("hooks", None)

    options = {
        "adapter": adapter,
        "onLost": create_once_callable(lost),
        "onError": create_proxy(lambda err: console.error(f"tgweb (WebGPU): {err.message}")),
    }
    hooks.device = await shim.requestDevice(to_js(options, dict_converter=Object.fromEntries))
    return hooks


async def setup(power_preference: str | None = None) -> dict:
    """Make tgweb's WebGPU device in this Pyodide (once; inside tgweb's worker it is there
    already); returns the adapter's description. With JSPI the first compile does this by
    itself; without it, await this first. Raises NoWebGPU saying why there is none."""
    h = worker.hooks()
    if h is None:
        if "hooks" not in _setup:
            task = _setup.get("task")
            if task is None:
                import asyncio

                task = _setup["task"] = asyncio.ensure_future(_make_hooks(power_preference))
            try:
                _setup["hooks"] = await task
            finally:
                _setup.pop("task", None)
        h = _setup["hooks"]
    return h.adapterInfo.to_py()


def made() -> Any:
    """The hooks if they are there (the worker's, or made here), else None: for what only
    helps when they are (bulk), and never makes the device."""
    h = worker.hooks()
    return h if h is not None else _setup.get("hooks")


def hooks() -> Any:
    """The browser backend's hooks: tgweb_js inside tgweb's worker, else this module's
    (made now, waiting with run_sync where this Pyodide can; else NeedsAwait)."""
    h = worker.hooks()
    if h is not None:
        return h
    made = _setup.get("hooks")
    if made is not None:
        return made
    import sys

    if sys.platform != "emscripten":
        raise ImportError("the browser backend runs in Pyodide (in a browser with WebGPU)")
    from pyodide.ffi import can_run_sync, run_sync

    if not can_run_sync():
        why = f"tgweb needs its WebGPU device first, and {RUN_SYNC}: `await tgweb.jsbridge.setup()`"
        raise NeedsAwait(why, setup)
    run_sync(setup())
    return _setup["hooks"]


# ---------------------------------------------------------------- tracked GPU work


@functools.cache
def _track_js() -> Callable:
    """A JS function: promise -> {done, value, error, promise} (a promise's state, which
    JavaScript does not let one read), whose promise never rejects."""
    from pyodide.code import run_js

    return run_js(
        "(p) => { const h = {done: false, failed: false}; h.promise = p.then("
        "(v) => { h.done = true; h.value = v; }, "
        "(e) => { h.done = h.failed = true; h.error = e; }); return h; }"
    )


def track(promise: Any, kind: str = "read") -> Any:
    """Follow a GPU promise (kind "step": a training step's read-back; "read"; "setup": a
    Program being instantiated); returns its holder."""
    h = _track_js()(promise)
    _prune()
    _pending.append((h, kind))
    return h


def _prune() -> None:
    while _pending and _pending[0][0].done:
        _pending.popleft()


def _can_run_sync() -> bool:
    from pyodide.ffi import can_run_sync

    return bool(can_run_sync())


def _blocking(for_step: bool) -> list:
    """The tracked work a call must wait for before it can go on without waiting: all of
    it, or for a step, every setup and read and the steps beyond DEPTH_STEPS - 1 unread."""
    undone = [(h, k) for h, k in _pending if not h.done]
    if not for_step:
        return [h for h, _ in undone]
    steps = [h for h, k in undone if k == "step"]
    return [h for h, k in undone if k != "step"] + steps[: max(0, len(steps) - (DEPTH_STEPS - 1))]


def check(what: str, hint: str, for_step: bool = False) -> None:
    """Raise NeedsAwait (naming `hint`, the awaitable call) if `what` would have to wait for
    tracked GPU work here and cannot; nothing is changed before it is raised."""
    if not _pending:
        return  # tgweb's worker tracks nothing: its steps pay for this test only
    _prune()
    if _pending and _blocking(for_step) and not _can_run_sync():
        raise NeedsAwait(f"{what} must wait for the GPU, and {RUN_SYNC}: use {hint}")


async def settle(for_step: bool = False) -> None:
    """Wait (asynchronously) for the tracked GPU work a synchronous call would wait for."""
    while True:
        _prune()
        todo = _blocking(for_step)
        if not todo:
            return
        await todo[0].promise


async def call(fn: Callable, *args: Any, **kwargs: Any) -> Any:
    """fn(*args, **kwargs) in a Pyodide that cannot wait inside it (no JSPI): each time it
    stops for the GPU (NeedsAwait), what it waits for is awaited and it is called again. For
    calls that change nothing before they wait: tg.compile, trainer.params(), checkpoint(),
    an inference call's read-back. Inside tgweb's worker, or with JSPI, it is just fn()."""
    while True:
        try:
            return fn(*args, **kwargs)
        except NeedsAwait as e:
            await (e.wait() if e.wait is not None else settle())
