"""The browser backend: runs a Program on web/gpu.mjs through Pyodide's FFI.

Inside the tgweb worker (web/worker.mjs), which registers the JS module ``tgweb_js``
holding gpu.mjs and the GPU device, and in any other Pyodide with WebGPU, where
tgweb.jsbridge makes them from the package's own copy of the shim. Calls are synchronous:
GPU work that JS returns as a Promise is awaited with ``pyodide.ffi.run_sync`` (JSPI), so
scripts written for the native backend run unchanged. Outside the worker every such
promise is tracked (tgweb.jsbridge), so that a Pyodide without JSPI can await it through
the awaitable calls (trainer.step_async, ...) instead. Host data crosses as whole buffers
(array.array -> JS typed array, ArrayBuffer -> bytes), never element by element; a step
crosses once each way (gpu.mjs's runPacked: its inputs and scalars packed into one byte
array, its reads back in one ArrayBuffer), since each call between Python and JS costs
more than the packing.
"""

from __future__ import annotations

import array
import functools
import sys
import time
from typing import Any

from .. import jsbridge, worker
from ..arrays import TYPECODE
from ..codegen.target import Target, classify
from ..ir import prod
from ..program import LIMITS, Program, kernels_json
from ..step_data import ScalarWords
from . import base

# a step that reads nothing back lets the worker's event loop run only if this long has
# passed since one last did (its own GPU work is sent either way)
YIELD_EVERY_S = 0.004


def _hooks():
    """The worker's hooks (tgweb.worker.hooks()), or tgweb.jsbridge's in another Pyodide
    (which say why there is no WebGPU); ImportError outside Pyodide."""
    return jsbridge.hooks()


def available() -> bool:
    """True inside the tgweb worker with a GPU device and JSPI (run_sync) support; in
    another Pyodide, True: the device is made (or why not said) at first use."""
    h = worker.hooks()
    if h is None:
        return sys.platform == "emscripten"
    from pyodide.ffi import can_run_sync

    return h.device is not None and bool(can_run_sync())


def why_unavailable() -> str:
    """A sentence saying why available() is False ('' when it is True)."""
    if worker.hooks() is None:
        return "" if available() else "the browser backend runs in Pyodide (in a browser with WebGPU)"
    from pyodide.ffi import can_run_sync

    if not can_run_sync():
        return (
            "this browser cannot suspend WebAssembly for a GPU readback (no JSPI); "
            "tgweb needs Chrome/Edge 137+ or another browser with JS Promise Integration"
        )
    return ""


def prewarm(program: Program) -> bool:
    """In tgweb's worker: ask the GPU for a Program's pipelines now (gpu.mjs's prewarm), so
    that the browser compiles its kernels while Python goes on; the Runtime instantiated
    from it later takes them (a kernel that failed is made again there, and raises).
    False where nothing was asked for (another Pyodide: its device comes at first use)."""
    h = worker.hooks()
    if h is None or not available():
        return False
    text = program.to_json()
    h.gpu.prewarm(h.device, text)
    _texts[id(program)] = (program, text)
    while len(_texts) > 2:  # a trainer's step and initial values; one never instantiated goes
        del _texts[next(iter(_texts))]
    return True


def kernel_asker():
    """In tgweb's worker: a function that asks the GPU for a kernel's pipeline (gpu.mjs's
    prewarm) the first time a kernel of that text and those bindings comes, as lower() emits
    them; None where nothing would be asked (prewarm's rule)."""
    h = worker.hooks()
    if h is None or not available():
        return None
    asked: set = set()

    def ask(kernel) -> None:
        key = (tuple(b.access for b in kernel.bindings), kernel.wgsl)
        if key not in asked:
            asked.add(key)
            h.gpu.prewarm(h.device, kernels_json([kernel]))

    return ask


# the JSON texts prewarm made, by id of the Program (kept with it, so that the id stays its
# own): its Runtime takes its text rather than serializing the Program again
_texts: dict[int, tuple[Program, str]] = {}


def _json_of(program: Program) -> str:
    got = _texts.pop(id(program), None)
    return got[1] if got is not None else program.to_json()


def device_limits() -> dict[str, int]:
    """The GPU device's limits that Programs depend on."""
    d = _hooks().device.limits
    return {n: int(getattr(d, n)) for n in LIMITS}


def device_target() -> Target:
    """What kernels are tuned for on the page's adapter (SwiftShader: the CPU class)."""
    return classify(adapter_info())


def adapter_info() -> dict[str, str]:
    return _hooks().adapterInfo.to_py()


def describe() -> dict:
    """This page's adapter as tgweb.backends.planned plans for it ({"info", "limits"}): what
    tools/adapters.json records of a real adapter, for the Programs a site ships."""
    return {"info": adapter_info(), "limits": device_limits()}


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


def _await_tracked(h, what: str = "reading the GPU's results back"):
    """The value of a promise tracked by tgweb.jsbridge: at once when it is in, else waited
    for with run_sync where this Pyodide can; NeedsAwait (nothing waited) where it cannot."""
    if not h.done:
        if not jsbridge._can_run_sync():
            raise jsbridge.NeedsAwait(
                f"{what} must wait for the GPU, and {jsbridge.RUN_SYNC}: use the awaitable calls "
                "(`await trainer.step_async(...)`, `await result.loss_async`, "
                "`await tgweb.jsbridge.call(fn)`)"
            )
        _await(h.promise)  # the holder's promise never rejects: its failure is below
    if h.failed:
        raise _program_error(h.error)
    return h.value


class _Deferred:
    """A gpu.mjs Runtime still being instantiated (outside tgweb's worker; in it, one that
    shares another's buffers): writes (the initial parameters) wait here until it is
    there; any other use waits for it (_await_tracked; in the worker, for the promise
    itself, whose failure names the kernel). A Pyodide without JSPI thus
    compiles without waiting, and the worker traces the next program while the GPU
    process compiles this one's pipelines."""

    def __init__(self, holder, promise=None) -> None:
        self._h, self._rt, self._writes = holder, None, []
        self._promise = promise  # in the worker: waited for itself (its error names the kernel)

    def write(self, kind: str, name: str, data) -> None:
        if self._rt is None and not self._h.done:
            self._writes.append((kind, name, data))  # data: a JS copy (to_js), safe to keep
        else:
            self.now().write(kind, name, data)

    def now(self):
        if self._rt is None:
            if self._promise is not None:
                self._rt = _await(self._promise)
            else:
                self._rt = _await_tracked(self._h, "the Program's first step or read")
            for w in self._writes:
                self._rt.write(*w)
            self._writes.clear()
        return self._rt

    def destroy(self) -> None:
        if self._rt is not None or self._h.done:
            if not self._h.failed:
                self.now().destroy()
            return
        from pyodide.ffi import create_once_callable

        h = self._h
        h.promise.then(create_once_callable(lambda _: None if h.failed else h.value.destroy()))

    def __getattr__(self, name: str):
        return getattr(self.now(), name)


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

        in_worker = worker.hooks() is not None
        hooks = _hooks()
        self.program = program
        self._gpu = hooks.gpu
        js_shared = to_js(dict(shared or {}), dict_converter=Object.fromEntries)
        options = to_js({"shared": js_shared}, dict_converter=Object.fromEntries)
        # the worker's device, or its replacement once a lost one has been replaced
        device = _await(hooks.nextDevice()) if hasattr(hooks, "nextDevice") else hooks.device
        promise = self._gpu.instantiate(device, _json_of(program), options)
        # outside the worker: GPU promises tracked (jsbridge.track), waited for at first use
        # where this Pyodide cannot wait now; reads a NeedsAwait stopped, kept for the retry
        self._track = None if in_worker else jsbridge.track
        self._parked: dict[tuple, Any] = {}
        if in_worker and not shared:
            self._rt = _await(promise)  # a WGSL error surfaces here, at compile
        elif in_worker:
            # a Program on another's buffers (an attached inference program, a trainer's
            # initial values): its pipelines compile while Python goes on (the next attach's
            # tracing and lowering, the first steps); its first use waits for them, and
            # raises there what failed
            self._rt = _Deferred(jsbridge._track_js()(promise), promise)
        else:
            self._rt = _Deferred(jsbridge.track(promise, "setup"))
            if jsbridge._can_run_sync():
                self._rt.now()  # as in the worker: a WGSL error surfaces at compile
        # whether this Runtime may wait for the GPU inside a call (the worker, or JSPI): a
        # Pyodide that cannot draws a trainer's initial values on the host (Trainer.reset)
        self.can_wait = in_worker or jsbridge._can_run_sync()
        rt = self._rt._rt if isinstance(self._rt, _Deferred) else self._rt  # None: still being set up
        self.setup_ms = float(rt.setupMs) if rt is not None else float("nan")
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
        self._parked.clear()  # a read kept from before this write is stale
        self._rt.write(kind, name, _to_js_bytes(data))

    def _result(self, key: tuple, make):
        """The value of the read make() starts: outside the worker tracked, and kept when
        this Pyodide cannot wait for it, so that tgweb.jsbridge.call's retry takes it."""
        if self._track is None:
            return _await(make())
        h = self._parked.pop(key, None)
        if h is None:
            h = self._track(make())
        try:
            return _await_tracked(h)
        except jsbridge.NeedsAwait:
            self._parked[key] = h
            raise

    def read(self, kind: str, name: str) -> array.array:
        slot = self._slot(kind, name)
        buf = self._result(("read", kind, name), lambda: self._rt.read(kind, name))
        return _from_js(buf, TYPECODE[slot.dtype])

    def read_many(self, which: list[tuple[str, str]]) -> dict[tuple[str, str], array.array]:
        """Several slots in one GPU round trip (one submit, one map), e.g. all params."""
        from pyodide.ffi import to_js

        slots = [self._slot(k, n) for k, n in which]
        key = ("many", *((k, n) for k, n in which))
        bufs = self._result(key, lambda: self._rt.readMany(to_js([[k, n] for k, n in which])))
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
        track = self._track
        if track is not None:  # outside the worker (tgweb.jsbridge)
            self._parked.clear()
            promise = track(promise, "step")
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
            raw = (_await(promise) if track is None else _await_tracked(promise)).to_bytes()
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
