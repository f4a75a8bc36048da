"""The browser backend: runs a Program on web/gpu.mjs through Pyodide's FFI.

Only usable inside the tgweb worker (web/worker.mjs), which registers the JS
module ``tgweb_js`` holding gpu.mjs and the GPU device. Calls are synchronous:
GPU work that JS returns as a Promise is awaited with ``pyodide.ffi.run_sync``
(JSPI), so scripts written for the native backend run unchanged. Host data
crosses as whole buffers (array.array -> JS typed array, ArrayBuffer -> bytes),
never element by element; a step crosses once each way (gpu.mjs's runPacked: its
inputs and scalars packed into one byte array, its reads back in one ArrayBuffer),
since each call between Python and JS costs more than the packing.
"""

from __future__ import annotations

import array
import functools
import time
from typing import Any

from .. import worker
from ..arrays import TYPECODE
from ..codegen.target import Target, classify
from ..ir import prod
from ..program import LIMITS, Program
from ..step_data import ScalarWords
from . import base

# a step that reads nothing back lets the worker's event loop run only if this long has
# passed since one last did (its own GPU work is sent either way)
YIELD_EVERY_S = 0.004


def _hooks():
    """The worker's hooks (tgweb.worker.hooks()); ImportError outside the worker."""
    h = worker.hooks()
    if h is None:
        raise ImportError("tgweb_js: not inside the tgweb worker (web/worker.mjs)")
    return h


def available() -> bool:
    """True inside the tgweb worker with a GPU device and JSPI (run_sync) support."""
    h = worker.hooks()
    if h is None:
        return False
    from pyodide.ffi import can_run_sync

    return h.device is not None and bool(can_run_sync())


def why_unavailable() -> str:
    """A sentence saying why available() is False ('' when it is True)."""
    if worker.hooks() is None:
        return "the browser backend runs only inside the tgweb worker (web/worker.mjs)"
    from pyodide.ffi import can_run_sync

    if not can_run_sync():
        return (
            "this browser cannot suspend WebAssembly for a GPU readback (no JSPI); "
            "tgweb needs Chrome/Edge 137+ or another browser with JS Promise Integration"
        )
    return ""


def device_limits() -> dict[str, int]:
    """The GPU device's limits that Programs depend on."""
    d = _hooks().device.limits
    return {n: int(getattr(d, n)) for n in LIMITS}


def device_target() -> Target:
    """What kernels are tuned for on the page's adapter (SwiftShader: the CPU class)."""
    return classify(adapter_info())


def adapter_info() -> dict[str, str]:
    return _hooks().adapterInfo.to_py()


@functools.cache
def _ffi():
    """pyodide.ffi, imported once (an import statement in _await costs each step)."""
    from pyodide import ffi

    return ffi


def _await(promise):
    ffi = _ffi()
    try:
        return ffi.run_sync(promise)
    except ffi.JsException as e:
        raise _program_error(e) from None


class BrowserError(RuntimeError):
    """A failure reported by gpu.mjs: WGSL compile errors name the kernel's ops and call site."""

    def __init__(self, message: str, kernel: str = "", ops: list[str] | None = None, site: str = "") -> None:
        super().__init__(message)
        self.kernel, self.ops, self.site = kernel, ops or [], site


def _program_error(e) -> Exception:
    js = getattr(e, "js_error", None) or e  # the JS Error object (ProgramError)
    msg = str(getattr(js, "message", None) or e)
    if getattr(js, "lost", False) is True:
        return base.DeviceLost(msg)  # gpu.mjs's one sentence: "the GPU device was lost (...)"
    kernel = str(getattr(js, "kernel", "") or "") if js is not None else ""
    site = str(getattr(js, "site", "") or "") if js is not None else ""
    ops = getattr(js, "ops", None) if js is not None else None
    ops = [str(o) for o in ops] if ops is not None and hasattr(ops, "__iter__") else []
    return BrowserError(msg, kernel, ops, site)


def _to_js_bytes(data) -> Any:
    """A JS Uint8Array copy of a buffer (array.array, memoryview, bytes), in one memcpy."""
    from pyodide.ffi import to_js

    mv = memoryview(data).cast("B")
    return to_js(mv)


def _from_js(buf, typecode: str) -> array.array:
    out = array.array(typecode)
    out.frombytes(buf.to_bytes() if hasattr(buf, "to_bytes") else bytes(buf))
    return out


class Runtime(base.Runtime):
    """One Program instantiated on the worker's GPU device through gpu.mjs."""

    name = "browser"

    def __init__(self, program: Program, shared: dict[str, Any] | None = None) -> None:
        if not available():
            raise RuntimeError(why_unavailable() or "the browser backend is not available")
        from js import Object, Uint8Array
        from pyodide.ffi import to_js

        hooks = _hooks()
        self.program = program
        self._gpu = hooks.gpu
        js_shared = to_js(dict(shared or {}), dict_converter=Object.fromEntries)
        options = to_js({"shared": js_shared}, dict_converter=Object.fromEntries)
        # the worker's device, or its replacement once a lost one has been replaced
        device = _await(hooks.nextDevice()) if hasattr(hooks, "nextDevice") else hooks.device
        self._rt = _await(self._gpu.instantiate(device, program.to_json(), options))
        self.setup_ms = float(self._rt.setupMs)
        self._to_js = to_js
        # one step crosses into JS once: its inputs, then its scalar words, packed as the
        # Program's layout says into one reused bytearray (gpu.mjs's runPacked)
        layout = program.layout
        self._inputs_at = {n: at for n, at, _ in layout.inputs}
        self._scalars_at = layout.scalars
        self._scalar_words = ScalarWords(program.scalars)
        self._packed = bytearray(layout.bytes)
        # its JS twin, refilled each step (assign: one memcpy, cheaper than a new typed array
        # from to_js); writeBuffer copies what it is given at once, so reusing it is safe
        self._packed_js = Uint8Array.new(layout.bytes)
        self._yielded = 0.0  # when a step last let the worker's event loop run (perf_counter)
        # read list -> (gpu.mjs read plan, [(key, at, nbytes, typecode)])
        self._plans: dict[tuple, tuple] = {}

    def _slot(self, kind: str, name: str):
        slots = getattr(self.program, kind, None)
        if not isinstance(slots, dict):
            raise ValueError(f"unknown slot kind {kind!r}")
        if name not in slots:
            raise KeyError(f"the Program has no {kind[:-1]} {name!r}; it has {sorted(slots)}")
        return slots[name]

    def _check_len(self, kind: str, name: str, data) -> None:
        slot = self._slot(kind, name)
        n = prod(slot.shape)
        got = len(memoryview(data).cast("B")) // 4
        if got != n:
            raise ValueError(f"{kind} {name!r}: expected {n} values for shape {slot.shape}, got {got}")

    def write(self, kind: str, name: str, data: array.array) -> None:
        if kind not in ("params", "states", "inputs"):
            raise ValueError(f"cannot write {kind!r}; writable: params, states, inputs")
        self._check_len(kind, name, data)
        self._rt.write(kind, name, _to_js_bytes(data))

    def read(self, kind: str, name: str) -> array.array:
        slot = self._slot(kind, name)
        return _from_js(_await(self._rt.read(kind, name)), TYPECODE[slot.dtype])

    def read_many(self, which: list[tuple[str, str]]) -> dict[tuple[str, str], array.array]:
        """Several slots in one GPU round trip (one submit, one map), e.g. all params."""
        from pyodide.ffi import to_js

        slots = [self._slot(k, n) for k, n in which]
        bufs = _await(self._rt.readMany(to_js([[k, n] for k, n in which])))
        return {kn: _from_js(b, TYPECODE[s.dtype]) for kn, s, b in zip(which, slots, bufs)}

    def _plan(self, read) -> tuple:
        """The read plan of a list of (kind, name) slots, checked and made once per list."""
        key = tuple(read)
        try:
            plan = self._plans.get(key)
        except TypeError:  # [kind, name] lists rather than tuples
            key = tuple((k, n) for k, n in read)
            plan = self._plans.get(key)
        if plan is None:
            slots = [self._slot(k, n) for k, n in key]
            spans, at = [], 0
            for kn, slot in zip(key, slots):
                nbytes = 4 * prod(slot.shape)
                spans.append((kn, at, nbytes, TYPECODE[slot.dtype]))
                at += nbytes
            if len(self._plans) >= 64:  # a few lists are used over and over; never grow without end
                self._plans.clear()
            plan = self._plans[key] = (self._rt.readPlan(self._to_js([list(kn) for kn in key])), spans)
        return plan

    def submit(self, inputs, scalars, read):
        worker.check_stop()  # before the step: a stopped script changes nothing on the GPU
        if self._rt is None:
            raise BrowserError("this Program instance was closed")
        packed = self._packed
        for n, v in self.step_data(inputs).items():  # checked: each of its slot's length
            at = self._inputs_at[n]
            mv = memoryview(v).cast("B")
            packed[at : at + mv.nbytes] = mv
        self._scalar_words.pack_into(packed, self._scalars_at, scalars)
        js_plan, spans = self._plan(read)
        self._packed_js.assign(packed)
        ffi = _ffi()
        try:
            promise = self._rt.runPacked(self._packed_js, js_plan)  # submitted now
        except ffi.JsException as e:
            raise _program_error(e) from None
        if not spans:
            # nothing to read: the promise is already resolved, and suspending Python to
            # await it is most of such a step's host time (benchmarks/RESULTS.md, "The
            # browser backend's step host time"); but the worker's event loop must still
            # run now and then (a stop message, GPU callbacks)
            now = time.perf_counter()
            if now - self._yielded < YIELD_EVERY_S:
                return dict
            self._yielded = now

        def wait():
            raw = _await(promise).to_bytes()
            out = {}
            for kn, at, nbytes, typecode in spans:
                a = array.array(typecode)
                a.frombytes(raw[at : at + nbytes])
                out[kn] = a
            return out

        return wait

    def param_handle(self, name: str) -> Any:
        return self._rt.paramBuffer(name)

    def close(self) -> None:
        if getattr(self, "_rt", None) is not None:
            self._rt.destroy()
            self._rt = None
