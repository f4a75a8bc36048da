"""The Python side of the browser worker (web/worker.mjs): events from Python to the
page, the page's stop request, the worker's JS hooks (hooks()) and the site's data files
(fetch_data). `tgweb.web` is this module's older name: the same module, for the scripts
(and the page's saved edits) written with it.

Inside the browser worker every call here reaches the page as an event its handlers
receive (``tg.on("progress", fn)`` in web/tgweb.mjs). In CPython the events go to a
handler set with ``set_handler`` (none by default), so one script runs unchanged in
both places::

    from tgweb import worker
    for step in range(n):
        r = trainer.step(**batch)
        worker.metric("loss", r)  # the step's loss, sent once it is read back
        worker.check_stop()       # raises worker.Stopped once the page asked to stop
    worker.flush()                # the last step's metric

A metric given a StepResult (trainer.step's result) does not wait for the GPU: the
event goes out once the step's results are in, which the next trainer.step brings
(steps are pipelined, see Trainer.step); flush() waits for and sends what is left.
Reading r.loss yourself waits for that step, which costs a GPU round trip each step.

autosave(trainer, every_s=30) keeps a training run: its checkpoint goes to the page
(or the CPython handler) as an "autosave" event every every_s seconds of the loop.
"""

from __future__ import annotations

import functools
import json
import math
import time
from typing import Any, Callable

_handler: Callable[[str, Any], None] | None = None
_deferred: list[tuple[Any, dict]] = []  # metrics of steps still on the GPU, in order
_autosaves: list[Autosave] = []  # open ones: metric() gives each its chance to save


class Stopped(Exception):
    """The page asked the running script to stop (tg.stop() in tgweb.mjs)."""


@functools.cache
def hooks():
    """The worker's JS hooks (web/worker.mjs: emit, emitBytes, stopRequested, gpu, device,
    nextDevice, adapterInfo, programCache, bulk, fetchData), or None outside it; looked up
    once (a failed import searches the whole path again)."""
    try:
        import tgweb_js  # registered by web/worker.mjs before any tgweb code runs

        return tgweb_js
    except ImportError:
        return None


async def run_file(source: str, filename: str, ns: dict) -> None:
    """Run a page's Python file in ns (tgweb.mjs's start({prelude})): compiled from its text
    as Python compiles a module, where runPythonAsync parses it into ast objects first, to
    find a last expression whose value a prelude does not need (on a repeat visit that
    parse held the page's first Start by 0.05-0.1 s here). Top-level await is allowed."""
    import ast
    import inspect

    done = eval(compile(source, filename, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT), ns)
    if inspect.iscoroutine(done):
        await done


def preload() -> None:
    """Import what the browser worker, the trainer page and its samples import before a
    first step, and hash tgweb's files for the Program cache's keys (progcache.build_id:
    0.1 s in a browser). web/progcache.mjs runs this before it takes a memory snapshot, so
    that a visit restoring one finds all of it done. Nothing here may ask for the worker's
    hooks: the snapshot is taken where there are none, and hooks() keeps its first answer."""
    import importlib

    from tgweb import progcache, samples
    from tgweb.backends import browser  # noqa: F401  (the worker's backend)
    from tgweb.io import checkpoint, safetensors  # noqa: F401  (the page's harness)

    for name in samples.SAMPLES:
        importlib.import_module(f"{samples.__name__}.{name}")
    progcache.build_id()


@functools.cache
def _stop_flag():
    """hooks().stopRequested, or None outside the worker: looked up once, since each
    lookup crosses into JS."""
    h = hooks()
    return h.stopRequested if h is not None else None


def in_browser() -> bool:
    """True inside the tgweb browser worker."""
    return hooks() is not None


def fetch_data(name: str) -> bytes:
    """The site's data file data/NAME (a sample's text), fetched by the worker; the running
    source waits for it."""
    h = hooks()
    if h is None:
        raise FileNotFoundError(f"data/{name}: only the tgweb worker fetches data files from its site")
    from pyodide.ffi import JsException, run_sync

    try:
        return run_sync(h.fetchData(name)).to_bytes()
    except JsException as e:
        raise FileNotFoundError(f"data/{name}: the page could not fetch it from its site ({e})") from None


def set_handler(fn: Callable[[str, Any], None] | None) -> None:
    """Outside the browser: fn(event, data) receives every emitted event (None: drop them)."""
    global _handler
    _handler = fn


def jsonable(x: Any) -> Any:
    """x as plain JSON data: arrays become (nested) lists, non-finite floats None,
    tuples lists, dict keys strings."""
    if x is None or isinstance(x, (bool, str)):
        return x
    if isinstance(x, int):
        return x
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple, set, frozenset)):
        return [jsonable(v) for v in x]
    if isinstance(x, (bytes, bytearray, memoryview)):
        return list(memoryview(x).cast("B"))
    if hasattr(x, "tolist"):  # NumPy arrays and scalars, tgweb.Array, array.array
        return jsonable(x.tolist())
    if hasattr(x, "to_py"):  # a JsProxy
        return jsonable(x.to_py())
    if hasattr(x, "__float__"):
        return jsonable(float(x))
    return repr(x)


def to_json(x: Any) -> str:
    """The JSON text of jsonable(x) (what tgweb.mjs's run() resolves to)."""
    return json.dumps(jsonable(x), allow_nan=False)


def emit(event: str, data: Any = None) -> None:
    """Send an event to the page: handlers of tg.on(event) get the JSON value of data."""
    if not isinstance(event, str) or not event:
        raise ValueError("event must be a non-empty string")
    h = hooks()
    if h is not None:
        h.emit(event, to_json(data))
    elif _handler is not None:
        _handler(event, jsonable(data))


def progress(step: int, total: int | None = None, **extra: Any) -> None:
    """A 'progress' event: {step, total, ...extra}."""
    emit("progress", {"step": step, "total": total, **extra})


def metric(name: str, value: Any, step: int | None = None, **extra: Any) -> None:
    """A 'metric' event: {name, value, step, ...extra}. value may be a StepResult: then
    value is its loss and step (if not given) its applied-step count, and the event is
    sent once the step is read back, without waiting for it (flush() sends the rest)."""
    if hasattr(value, "ready") and hasattr(value, "loss"):  # a StepResult
        _deferred.append((value, {"name": name, "step": step, **extra}))
        _send_ready(wait=False)
    else:
        emit("metric", {"name": name, "value": value, "step": step, **extra})
    for a in tuple(_autosaves):  # here, between two steps: a checkpoint is whole
        a.tick()


def _send_ready(wait: bool) -> None:
    while _deferred and (wait or _deferred[0][0].ready):
        r, data = _deferred.pop(0)
        data["value"] = r.loss
        if data["step"] is None:
            data["step"] = r.step
        emit("metric", data)


def flush() -> None:
    """Send the metrics still waiting for their steps' results (waits for the GPU)."""
    _send_ready(wait=True)


def log(*args: Any, level: str = "info") -> None:
    """A 'log' event: {stream: 'tgweb', level, text}. (print() output also arrives as
    'log' events, with stream 'stdout' or 'stderr'.)"""
    emit("log", {"stream": "tgweb", "level": level, "text": " ".join(str(a) for a in args)})


def stop_requested() -> bool:
    """True once the page asked to stop the running script."""
    flag = _stop_flag()
    return bool(flag is not None and flag())


def check_stop() -> None:
    """Raise Stopped if the page asked to stop."""
    flag = _stop_flag()  # as stop_requested(), one call less: the browser backend asks each step
    if flag is not None and flag():
        raise Stopped("stopped by the page")


def emit_bytes(event: str, data: dict, blob: bytes | bytearray | memoryview) -> None:
    """emit(event, data) with data["bytes"] = blob, sent as binary (a Uint8Array moved to
    the page, no JSON); in CPython the handler gets bytes."""
    h = hooks()
    if h is not None:
        from pyodide.ffi import to_js

        h.emitBytes(event, to_json(data), to_js(memoryview(blob).cast("B")))
    elif _handler is not None:
        _handler(event, {**jsonable(data), "bytes": bytes(blob)})


class Autosave:
    """Sends a trainer's checkpoint (tgweb.io.checkpoint bytes) as an "autosave" event
    {name, step, calls, time, seconds, metadata, bytes} at most every every_s seconds:
    metric() calls tick() after each step. The page (web/store.mjs) keeps the last one
    in the browser's storage. Use as a context manager, or close() it."""

    def __init__(self, trainer: Any, every_s: float, name: str, metadata: dict[str, str]) -> None:
        self.trainer, self.every_s, self.name, self.metadata = trainer, every_s, name, metadata
        self.last = time.monotonic()  # the first save comes every_s after the start
        self.saves, self.seconds = 0, 0.0  # how many, and the time they took in all

    def tick(self) -> None:
        if time.monotonic() - self.last >= self.every_s:
            self.save()

    def save(self) -> dict[str, Any]:
        """Save now (waits for the steps in flight); returns the event's data."""
        from .io import checkpoint

        t0 = time.monotonic()
        blob = checkpoint.save(self.trainer, {**self.metadata, "name": self.name})
        _send_ready(wait=False)  # the metrics of the saved steps reach the page first
        tr = self.trainer
        info = {"name": self.name, "step": tr.steps, "calls": tr.calls, "time": time.time(),
                "metadata": self.metadata, "size": len(blob)}  # fmt: skip
        emit_bytes("autosave", info, blob)
        self.last = time.monotonic()
        self.saves += 1
        self.seconds += self.last - t0
        return info

    def close(self) -> None:
        if self in _autosaves:
            _autosaves.remove(self)

    def __enter__(self) -> Autosave:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def autosave(
    trainer: Any, every_s: float = 30.0, name: str = "run", metadata: dict | None = None
) -> Autosave:
    """Keep trainer's run: its checkpoint goes out as an "autosave" event at most every
    every_s seconds while a loop calls metric() (the page's samples all do), and on
    save(). name: the run's key in the page's storage; metadata: extra strings saved
    with it. The page's Start uses it; tgweb.mjs's start({autosave: true}) stores them."""
    if isinstance(every_s, bool) or not isinstance(every_s, (int, float)) or not every_s > 0:
        raise ValueError(f"autosave: every_s must be a number of seconds > 0, got {every_s!r}")
    if not isinstance(name, str) or not name:
        raise ValueError(f"autosave: name must be a non-empty string, got {name!r}")
    meta = dict(metadata or {})
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in meta.items()):
        raise ValueError("autosave: metadata must map strings to strings")
    saver = Autosave(trainer, float(every_s), name, meta)
    _autosaves.append(saver)
    return saver
