"""Events from Python to the page, and the page's stop request.

Inside the browser worker (web/worker.mjs) every call here reaches the page as
an event its handlers receive (``tg.on("progress", fn)`` in web/tgweb.mjs). In
CPython the events go to a handler set with ``set_handler`` (none by default),
so one script runs unchanged in both places::

    from tgweb import web
    for step in range(n):
        r = trainer.step(**batch)
        web.metric("loss", r)     # the step's loss, sent once it is read back
        web.check_stop()          # raises web.Stopped once the page asked to stop
    web.flush()                   # the last step's metric

A metric given a StepResult (trainer.step's result) does not wait for the GPU: the
event goes out once the step's results are in, which the next trainer.step brings
(steps are pipelined, see Trainer.step); flush() waits for and sends what is left.
Reading r.loss yourself waits for that step, which costs a GPU round trip each step.
"""

from __future__ import annotations

import functools
import json
import math
from typing import Any, Callable

_handler: Callable[[str, Any], None] | None = None
_deferred: list[tuple[Any, dict]] = []  # metrics of steps still on the GPU, in order


class Stopped(Exception):
    """The page asked the running script to stop (tg.stop() in tgweb.mjs)."""


@functools.cache
def hooks():
    """The worker's JS hooks (emit, stopRequested, gpu, device, adapterInfo), or None
    outside it; looked up once (a failed import searches the whole path again)."""
    try:
        import tgweb_js  # registered by web/worker.mjs before any tgweb code runs

        return tgweb_js
    except ImportError:
        return None


@functools.cache
def _stop_flag():
    """hooks().stopRequested, or None outside the worker: looked up once, since each
    lookup crosses into JS."""
    h = hooks()
    return h.stopRequested if h is not None else None


def in_browser() -> bool:
    """True inside the tgweb browser worker."""
    return hooks() is not None


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
