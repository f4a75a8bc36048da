"""The native backend: runs a Program through wgpu-py (Vulkan, Metal, D3D12, or
Mesa's lavapipe on a CPU).

One device per process, asked for the adapter's own limits and for the optional
features kernels may use (subgroups, once a probe kernel shows the layout
codegen/reduce.py relies on). Pipelines are cached per device by WGSL text, and a
Program's new ones are created on threads. A run writes inputs and scalars, records
every kernel into one compute pass of one command encoder, copies the requested slots
into a staging buffer in the same encoder, submits once and maps once.
"""

from __future__ import annotations

import array
import contextlib
import os
import re
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ..arrays import TYPECODE
from ..codegen.target import FEATURES, Target, classify
from ..program import LIMITS, Program, limits_of, unmet_features, unmet_limits, wgpu_limit_name
from ..step_data import ScalarWords
from . import base, missing_message

_DEVICE: Any = None
_ADAPTER: Any = None
_ERROR: str | None = None
_PIPELINES: dict[str, Any] = {}  # WGSL text -> (pipeline, bind group layout)
_PIPELINE_USERS: dict[str, int] = {}  # WGSL text -> open Runtimes using it; closing the last frees it
_GENERATION = 0  # counts the devices opened: a Runtime claims pipelines of its own device only
_FEATURES: set[str] = set()  # WebGPU names of the optional features the device offers tgweb
# this wgpu-native's WGSL front end (Naga) takes the subgroup builtins but not the standard
# `enable subgroups;` directive, which Tint requires: that directive is dropped before compiling
_DROP_ENABLES = False


class NativeError(RuntimeError):
    """No usable GPU adapter, or a GPU-side failure."""


@contextlib.contextmanager
def _lost_guard():
    """A call on a lost device raises base.DeviceLost, and the next Runtime gets a new
    device (wgpu-py reports the loss as a validation error naming it)."""
    try:
        yield
    except Exception as e:
        if "device is lost" not in str(e).lower():
            raise
        forget_device()
        why = str(e).strip().splitlines()[-1].strip()
        raise base.DeviceLost(f"the GPU device was lost ({why})") from None


def forget_device() -> None:
    """The next use opens a new device; the pipelines of this one are forgotten, and so are
    its Runtimes' claims on them (closing one of those later frees nothing of the new)."""
    global _DEVICE, _ADAPTER, _GENERATION
    _DEVICE = _ADAPTER = None
    cancel_reserved()  # the old device's
    _PIPELINES.clear()
    _PIPELINE_USERS.clear()
    _GENERATION += 1


class KernelCompileError(RuntimeError):
    """A generated kernel failed WGSL validation; names the op kinds and the user's line."""


def _device():
    global _DEVICE, _ADAPTER, _ERROR
    if _DEVICE is not None:
        return _DEVICE
    if _ERROR is not None:
        raise NativeError(_ERROR)
    try:
        import wgpu
    except Exception as e:  # pragma: no cover - depends on the machine
        _ERROR = missing_message("native", e)
        raise NativeError(_ERROR) from None
    try:
        adapter = wgpu.gpu.request_adapter_sync(power_preference="high-performance")
    except Exception as e:  # pragma: no cover - depends on the machine
        adapter = None
        why = str(e)
    else:
        why = "no adapter returned"
    if adapter is None:  # pragma: no cover - depends on the machine
        _ERROR = (
            "no WebGPU adapter found for the native backend (" + why.strip() + "). "
            "Install a Vulkan driver (on Debian: apt-get install mesa-vulkan-drivers "
            "for lavapipe on the CPU) or use backend='reference'."
        )
        raise NativeError(_ERROR)
    # the adapter's own maxima of every limit Programs depend on
    spelled_limits = [wgpu_limit_name(k) for k in LIMITS]
    limits = {n: adapter.limits[n] for n in spelled_limits if n in adapter.limits}
    # the optional features, as this wgpu-py spells them ("subgroup")
    spelled = {f: next((n for n in names if n in adapter.features), None) for f, names in FEATURES.items()}
    spelled = {f: n for f, n in spelled.items() if n}
    _ADAPTER = adapter
    _DEVICE = adapter.request_device_sync(required_limits=limits, required_features=list(spelled.values()))
    _FEATURES.clear()
    _FEATURES.update(spelled)
    if "subgroups" in _FEATURES and not _subgroups_work(_DEVICE):
        _FEATURES.discard("subgroups")
    return _DEVICE


# each invocation checks that its subgroup is the block of consecutive invocations from
# a multiple of the subgroup size on, in order (what codegen/reduce.py's subgroup folds
# assume; WGSL does not promise it): 1 where it is
_SUBGROUP_PROBE = """enable subgroups;
@group(0) @binding(0) var<storage, read_write> ok: array<u32>;
@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) li: u32, @builtin(subgroup_size) size: u32,
        @builtin(subgroup_invocation_id) id: u32) {
  let first = subgroupMin(li);
  ok[li] = select(0u, 1u, id == li % size && first == li - id);
}
"""


def _subgroups_work(dev) -> bool:
    """Whether the device compiles and runs subgroup operations the way the kernels use
    them; sets _DROP_ENABLES when its WGSL front end wants no `enable` directive."""
    global _DROP_ENABLES
    import wgpu

    module = None
    for drop in (False, True):
        try:
            module = dev.create_shader_module(code=_wgsl_for(_SUBGROUP_PROBE, drop))
        except Exception:
            continue
        _DROP_ENABLES = drop
        break
    if module is None:
        return False
    try:
        pipe = dev.create_compute_pipeline(layout="auto", compute={"module": module, "entry_point": "main"})
        buf = dev.create_buffer(size=4 * 256, usage=wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC)
        group = dev.create_bind_group(
            layout=pipe.get_bind_group_layout(0),
            entries=[{"binding": 0, "resource": {"buffer": buf, "offset": 0, "size": buf.size}}],
        )
        enc = dev.create_command_encoder()
        cp = enc.begin_compute_pass()
        cp.set_pipeline(pipe)
        cp.set_bind_group(0, group)
        cp.dispatch_workgroups(1)
        cp.end()
        dev.queue.submit([enc.finish()])
        ok = array.array("I", bytes(dev.queue.read_buffer(buf)))
        buf.destroy()
    except Exception:  # pragma: no cover - depends on the driver
        return False
    return all(v == 1 for v in ok)


def _wgsl_for(wgsl: str, drop_enables: bool) -> str:
    """The WGSL text as this device's compiler takes it (Naga wants `enable f16;`)."""
    if not drop_enables or not wgsl.startswith("enable "):
        return wgsl
    return "".join(ln for ln in wgsl.splitlines(keepends=True) if not ln.startswith("enable subgroups"))


def available() -> bool:
    """Whether a WebGPU adapter can be opened through wgpu-py."""
    try:
        _device()
        return True
    except Exception:
        return False


def adapter_info() -> dict:
    """The adapter's description (vendor, device, backend), or {} when there is none;
    "features": the optional features the device was created with (WebGPU names)."""
    if not available():
        return {}
    return dict(_ADAPTER.info, features=sorted(_FEATURES))


def device_features() -> set[str]:
    """The optional WebGPU features the device offers tgweb's kernels ("subgroups")."""
    _device()
    return set(_FEATURES)


def device_target() -> Target:
    """What kernels are tuned for on this adapter (lavapipe: the CPU class)."""
    return classify(adapter_info())


def device_limits() -> dict:
    """The limits of the device tgweb opened (camelCase keys, as lower() takes them)."""
    return limits_of(_device().limits)


def _raw_recorder():
    """record(pass, steps): each (pipeline, bind group, x, y, z) of `steps` set and
    dispatched in a compute pass straight through wgpu-native's C functions (steps hold
    the objects' C handles: Runtime._steps). wgpu-py's methods check and convert every
    argument and capture errors around each call: half of a step's host time in a
    Program of 200 kernels. Errors in a pass still surface, at its end() or the
    encoder's finish(), which go through wgpu-py. None when this wgpu-py does not
    expose its C library where this expects it."""
    try:
        from wgpu.backends.wgpu_native._ffi import ffi, lib

        set_pipeline = lib.wgpuComputePassEncoderSetPipeline
        set_group = lib.wgpuComputePassEncoderSetBindGroup
        dispatch = lib.wgpuComputePassEncoderDispatchWorkgroups
        null = ffi.NULL
    except (ImportError, AttributeError):  # pragma: no cover - another wgpu-py layout
        return None

    def record(cp, steps) -> None:
        h = cp._internal
        for pipe, group, x, y, z in steps:
            set_pipeline(h, pipe)
            set_group(h, 0, group, 0, null)
            dispatch(h, x, y, z)

    return record


def _raw_bind_group():
    """make(device, layout, [(buffer, offset, size)]): a bind group of those buffer ranges
    at bindings 0, 1, ... built straight in wgpu-native's C structs (a GPUBindGroup of
    wgpu-py's, which releases it). wgpu-py's create_bind_group checks and converts every
    entry in Python: three quarters of the engine's bind groups' time for the 12-layer GPT
    (450 of them). Errors are still raised, by wgpu-py's error capture around the call.
    None when this wgpu-py does not expose its C library where this expects it."""
    try:
        from wgpu.backends.wgpu_native import _api
        from wgpu.backends.wgpu_native._ffi import ffi

        create, wrap = _api.libf.wgpuDeviceCreateBindGroup, _api.GPUBindGroup
        no_label = _api.to_c_string_view("")
    except (ImportError, AttributeError):  # pragma: no cover - another wgpu-py layout
        return None

    def make(device, layout, ranges):
        entries = ffi.new("WGPUBindGroupEntry[]", len(ranges))
        for i, (buf, offset, size) in enumerate(ranges):
            e = entries[i]
            e.binding, e.buffer, e.offset, e.size = i, buf._internal, offset, size
        desc = ffi.new("WGPUBindGroupDescriptor *")
        desc.label, desc.layout = no_label, layout._internal
        desc.entries, desc.entryCount = entries, len(ranges)
        return wrap("", create(device._internal, desc), device)

    return make


def _method_bind_group(device, layout, ranges):
    """make(device, layout, ranges) through wgpu-py's create_bind_group."""
    entries = [
        {"binding": i, "resource": {"buffer": buf, "offset": offset, "size": size}}
        for i, (buf, offset, size) in enumerate(ranges)
    ]
    return device.create_bind_group(layout=layout, entries=entries)


def _method_recorder(cp, steps) -> None:
    """record(pass, steps) through wgpu-py's methods (steps hold the objects)."""
    for pipe, group, x, y, z in steps:
        cp.set_pipeline(pipe)
        cp.set_bind_group(0, group)
        cp.dispatch_workgroups(x, y, z)


def _compile_error(kernel, err: Exception) -> KernelCompileError:
    msg = str(err)
    lines = _wgsl_for(kernel.wgsl, _DROP_ENABLES).splitlines()  # the text the compiler saw
    where = ""
    m = re.search(r"wgsl:(\d+):(\d+)", msg)
    if m:
        ln = int(m.group(1))
        if 1 <= ln <= len(lines):
            where = f"\n  WGSL line {ln}: {lines[ln - 1].strip()}"
    core = msg.strip().splitlines()
    short = next((c for c in core if "error" in c.lower() and "In wgpu" not in c), msg.strip())
    return KernelCompileError(
        f"WGSL kernel {kernel.name} (op {', '.join(kernel.ops) or '?'}) failed to compile: "
        f"{short.strip()}{where}\n  at {kernel.site or '<unknown>'}\n\ncompiler output:\n{msg}"
    )


def pipeline_for(kernel):
    """The pipeline and bind group layout of a kernel, cached by its WGSL text."""
    import wgpu

    hit = _PIPELINES.get(kernel.wgsl)
    if hit is not None:
        return hit
    dev = _device()
    entries = [
        {
            "binding": i,
            "visibility": wgpu.ShaderStage.COMPUTE,
            "buffer": {
                "type": wgpu.BufferBindingType.storage
                if b.access == "read_write"
                else wgpu.BufferBindingType.read_only_storage
            },
        }
        for i, b in enumerate(kernel.bindings)
    ]
    if kernel.offsets:
        entries.append(
            {
                "binding": len(kernel.bindings),
                "visibility": wgpu.ShaderStage.COMPUTE,
                "buffer": {"type": wgpu.BufferBindingType.uniform},
            }
        )
    try:
        module = dev.create_shader_module(code=_wgsl_for(kernel.wgsl, _DROP_ENABLES))
        bgl = dev.create_bind_group_layout(entries=entries)
        layout = dev.create_pipeline_layout(bind_group_layouts=[bgl])
        pipe = dev.create_compute_pipeline(layout=layout, compute={"module": module, "entry_point": "main"})
    except Exception as e:
        raise _compile_error(kernel, e) from None
    _PIPELINES[kernel.wgsl] = (pipe, bgl)
    return pipe, bgl


def create_pipelines(kernels) -> None:
    """The pipelines of kernels not cached yet, one per distinct WGSL text, created on
    threads: wgpu-native compiles a shader with Python's lock released, so the driver
    compiles several at once. A failing kernel raises as pipeline_for would, the first in
    the kernels' order, and leaves none of these pipelines cached."""
    todo = list({k.wgsl: k for k in kernels if k.wgsl not in _PIPELINES}.values())
    if len(todo) < 2:
        return
    _device()  # opened once, before the threads
    try:
        with ThreadPoolExecutor(min(len(todo), os.cpu_count() or 1)) as pool:
            for _ in pool.map(pipeline_for, todo):
                pass
    except Exception:
        for k in todo:
            if k.wgsl not in _PIPELINE_USERS:
                _PIPELINES.pop(k.wgsl, None)
        raise


# A Program's buffers created ahead, on a thread, while Python goes on with it (lowering
# emits its kernels, the trainer plans its initial values): [(its buffer list, future of
# {buffer id: GPU buffer})]. NVIDIA's driver takes about 26 us a MB to create a buffer
# (benchmarks/RESULTS.md): 90 ms for the 12-layer GPT's 3.6 GB.
_RESERVED: list = []
_RESERVING = {"threads": 0, "interval": None}  # reservations running; the switch interval they replaced
_RESERVE_LOCK = threading.Lock()
_RESERVE_SWITCH_S = 0.0002  # Python's thread switch interval while one runs (default 0.005)


def reserve(buffers) -> None:
    """Start creating the buffers of a Program being lowered (lower's `reserve`), on a
    thread; the Runtime made from it takes them (_allocate). The thread releases Python's
    lock inside each driver call but needs it between them: while it runs, the thread
    switch interval is short, or a thread waits 5 ms for every buffer while Python lowers.
    Where the device cannot be opened nothing is reserved (the Runtime says why)."""
    try:
        dev = _device()
    except NativeError:
        return
    wanted = list(buffers)

    def create():
        try:
            return {b.id: _storage_buffer(dev, b) for b in wanted}
        finally:
            _reservation_ended()

    cancel_reserved()  # a Program lowered before and never instantiated: its buffers go
    with _RESERVE_LOCK:
        if not _RESERVING["threads"]:
            _RESERVING["interval"] = sys.getswitchinterval()
            sys.setswitchinterval(min(_RESERVING["interval"], _RESERVE_SWITCH_S))
        _RESERVING["threads"] += 1
    pool = ThreadPoolExecutor(1, thread_name_prefix="tgweb-buffers")
    try:
        _RESERVED.append((buffers, dev, pool.submit(create)))
    except BaseException:  # no thread could start: nothing reserved
        _reservation_ended()
        raise
    finally:
        pool.shutdown(wait=False)


def _reservation_ended() -> None:
    """The thread switch interval as it was, once no reservation runs."""
    with _RESERVE_LOCK:
        _RESERVING["threads"] -= 1
        if not _RESERVING["threads"]:
            sys.setswitchinterval(_RESERVING["interval"])


def _storage_buffer(dev, b):
    """A GPU buffer for the Program's buffer b: storage, copied from and to."""
    import wgpu

    usage = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST
    return dev.create_buffer(size=b.size, usage=usage, label=b.label[:60])


def cancel_reserved() -> None:
    """Destroy the buffers reserved for a Program no Runtime took (its lowering failed, or
    another compile came first), once they are made."""
    while _RESERVED:
        _RESERVED.pop()[2].add_done_callback(_destroy_reserved)


def _destroy_reserved(future) -> None:
    if future.exception() is None:
        for buf in future.result().values():
            with contextlib.suppress(Exception):  # (on a lost device)
                buf.destroy()


def _reserved(buffers, device) -> dict:
    """{buffer id: GPU buffer} that reserve() created for this buffer list on this device,
    or {} (none, or their creation failed: the Runtime creates them and says why)."""
    for k, (listed, dev, future) in enumerate(_RESERVED):
        if listed is buffers and dev is device:
            del _RESERVED[k]
            try:
                return future.result()
            except Exception:
                return {}
    return {}


class Runtime(base.Runtime):
    """One Program instantiated on the wgpu-py device."""

    name = "native"

    def __init__(self, program: Program, shared: dict[str, Any] | None = None) -> None:
        import wgpu

        self._wgpu = wgpu
        self.program = program
        self.device = _device()
        unmet = unmet_limits(program, self.device.limits) + unmet_features(program, _FEATURES)
        if unmet:
            raise NativeError("; ".join(unmet))
        self._allocate(shared or {})
        self._init_states()
        self._scalar_words = ScalarWords(program.scalars)
        layouts = self._create_pipelines()
        self._bind(layouts)
        self._claim_pipelines()
        self._staging = None

    # ------------------------------------------------------------ instantiation

    def _allocate(self, shared: dict[str, Any]) -> None:
        """The Program's buffers (a param in `shared`, another Runtime's buffer, is used as
        it is) and every kernel's offsets in one uniform buffer, in the slices of the
        Program's layout; _owned lists what close() destroys."""
        wgpu, program = self._wgpu, self.program
        # params, and the module buffers an inference program reads (graph states)
        param_buf = {s.buffer: n for d in (program.params, program.states) for n, s in d.items()}
        self.buffers = []
        self._owned = []
        ahead = dict(_reserved(program.buffers, self.device))  # created while it was lowered (reserve)
        for b in program.buffers:
            n = param_buf.get(b.id)
            made = ahead.pop(b.id, None)
            if n is not None and n in shared:
                self.buffers.append(shared[n])
                if made is not None:
                    made.destroy()
                continue
            buf = made if made is not None and made.size == b.size else _storage_buffer(self.device, b)
            self.buffers.append(buf)
            self._owned.append(buf)
        for buf in ahead.values():  # (none: a reservation is of this Program's buffers)
            buf.destroy()
        for n, s in program.constants.items():  # data constants: uploaded once, never written again
            self.device.queue.write_buffer(self.buffers[s.buffer], s.offset, program.constant_bytes(n))
        layout = program.layout
        self._uniform = self.device.create_buffer(
            size=layout.uniform_bytes,
            usage=wgpu.BufferUsage.UNIFORM | wgpu.BufferUsage.COPY_DST,
            label="offsets",
        )
        data = bytearray(layout.uniform_bytes)
        for k, (o, _) in zip(program.kernels, layout.uniform):
            data[o : o + 4 * len(k.offsets)] = array.array("I", k.offsets).tobytes()
        self.device.queue.write_buffer(self._uniform, 0, data)
        self._owned.append(self._uniform)

    def _init_states(self) -> None:
        """Optimizer states that start at a constant other than zero (new buffers are zeros)."""
        for n, v in self.program.meta.get("state_init", {}).items():
            if v and n in self.program.states:
                cnt = 1
                for d in self.program.states[n].shape:
                    cnt *= d
                self.write("states", n, array.array("f", [float(v)]) * cnt)

    def _create_pipelines(self) -> list:
        """self.pipes: each kernel's pipeline (shared by WGSL text, new ones compiled on
        threads); returns each kernel's bind group layout."""
        create_pipelines(self.program.kernels)
        made = [pipeline_for(k) for k in self.program.kernels]
        self.pipes = [pipe for pipe, _ in made]
        return [bgl for _, bgl in made]

    def _bind(self, layouts: list) -> None:
        """Every kernel's bind group, made once, and a step's dispatches as one list
        (self._steps, for self._record): C handles where wgpu-native's C functions can be
        called directly (self.pipes and self.groups keep the objects alive)."""
        make = _raw_bind_group() or _method_bind_group
        self.groups = []
        for k, (o, size), bgl in zip(self.program.kernels, self.program.layout.uniform, layouts):
            ranges = [(self.buffers[b.buffer], 0, self.buffers[b.buffer].size) for b in k.bindings]
            if k.offsets:
                ranges.append((self._uniform, o, size))
            self.groups.append(make(self.device, bgl, ranges))
        raw = _raw_recorder()
        self._record = raw or _method_recorder
        self._steps = [
            (pipe._internal, group._internal, *k.dispatch) if raw else (pipe, group, *k.dispatch)
            for k, pipe, group in zip(self.program.kernels, self.pipes, self.groups)
        ]

    def _claim_pipelines(self) -> None:
        """Count this Runtime among the users of its pipelines: the last to close frees them."""
        self._wgsl = {k.wgsl for k in self.program.kernels}
        self._generation = _GENERATION
        for w in self._wgsl:
            _PIPELINE_USERS[w] = _PIPELINE_USERS.get(w, 0) + 1

    # ------------------------------------------------------------ helpers

    def _slot(self, kind: str, name: str):
        table = getattr(self.program, kind, None)
        if not isinstance(table, dict) or kind not in ("inputs", "params", "states", "outputs", "captures"):
            raise KeyError(f"unknown slot kind {kind!r}")
        if name not in table:
            raise KeyError(f"no {kind[:-1]} named {name!r}; have {sorted(table)}")
        return table[name]

    @staticmethod
    def _nbytes(slot) -> int:
        n = 4
        for d in slot.shape:
            n *= d
        return n

    def _bytes(self, slot, data) -> bytes:
        if isinstance(data, array.array):
            if data.itemsize != 4:
                data = array.array(TYPECODE[slot.dtype], data)
            raw = data.tobytes()
        elif isinstance(data, (bytes, bytearray, memoryview)):
            raw = bytes(data)
        else:
            try:  # NumPy arrays and anything else with the buffer protocol
                raw = memoryview(data).cast("B").tobytes()
            except TypeError:
                raw = array.array(TYPECODE[slot.dtype], list(data)).tobytes()
        if len(raw) != self._nbytes(slot):
            raise ValueError(
                f"expected {self._nbytes(slot)} bytes for shape {slot.shape} {slot.dtype}, got {len(raw)}"
            )
        return raw

    # ------------------------------------------------------------ the interface

    def write(self, kind: str, name: str, data) -> None:
        with _lost_guard():
            self._write(kind, name, data)

    def _write(self, kind: str, name: str, data) -> None:
        if kind not in ("params", "states", "inputs"):
            raise KeyError(f"cannot write {kind!r}; write params, states or inputs")
        s = self._slot(kind, name)
        self.device.queue.write_buffer(self.buffers[s.buffer], s.offset, self._bytes(s, data))

    def read(self, kind: str, name: str) -> array.array:
        with _lost_guard():
            return self._read_many([(kind, name)], None)()[(kind, name)]

    def _read_many(self, which, encoder):
        """Copy the slots `which` to a staging buffer in `encoder` (a new one if None),
        submit it, and start mapping: returns wait() -> {key: array}."""
        wgpu = self._wgpu
        slots = [(key, self._slot(*key)) for key in which]
        total = sum((self._nbytes(s) + 3) // 4 * 4 for _, s in slots)
        if encoder is None:
            encoder = self.device.create_command_encoder()
        staging = None
        if total:
            staging = self.device.create_buffer(
                size=total, usage=wgpu.BufferUsage.MAP_READ | wgpu.BufferUsage.COPY_DST
            )
            off = 0
            for _, s in slots:
                n = self._nbytes(s)
                encoder.copy_buffer_to_buffer(self.buffers[s.buffer], s.offset, staging, off, n)
                off += n
        self.device.queue.submit([encoder.finish()])
        if staging is None:
            return dict
        mapping = staging.map_async(wgpu.MapMode.READ)

        def wait():
            with _lost_guard():
                mapping.sync_wait()
                mv = memoryview(staging.read_mapped()).cast("B")
                out, off = {}, 0
                for key, s in slots:
                    n = self._nbytes(s)
                    a = array.array(TYPECODE[s.dtype])
                    a.frombytes(bytes(mv[off : off + n]))
                    out[key] = a
                    off += n
                staging.unmap()
                staging.destroy()
                return out

        return wait

    def submit(self, inputs, scalars, read):
        with _lost_guard():
            return self._submit(inputs, scalars, read)

    def _submit(self, inputs, scalars, read):
        p, queue = self.program, self.device.queue
        for n, data in self.step_data(inputs).items():  # checked: each of its slot's length
            s = p.inputs[n]
            queue.write_buffer(self.buffers[s.buffer], s.offset, data)
        if p.scalars:
            words = bytearray(self._scalar_words.size)
            self._scalar_words.pack_into(words, 0, scalars)
            queue.write_buffer(self.buffers[p.scalars_buffer], 0, words)
        encoder = self.device.create_command_encoder()
        cp = encoder.begin_compute_pass()
        self._record(cp, self._steps)
        cp.end()
        return self._read_many(list(read), encoder)

    def param_handle(self, name: str):
        return self.buffers[self._slot("params" if name in self.program.params else "states", name).buffer]

    def close(self) -> None:
        for b in self._owned:
            try:
                b.destroy()
            except Exception:  # pragma: no cover
                pass
        self._owned, self.buffers, self.pipes, self.groups, self._steps = [], [], [], [], []
        for w in getattr(self, "_wgsl", ()) if getattr(self, "_generation", None) == _GENERATION else ():
            _PIPELINE_USERS[w] -= 1
            if not _PIPELINE_USERS[w]:  # no open Runtime runs it: let the pipeline go
                del _PIPELINE_USERS[w]
                _PIPELINES.pop(w, None)
        self._wgsl = set()


def profile(rt: Runtime, repeat: int = 1) -> list[tuple[float, str, tuple]]:
    """Seconds per kernel (each submitted and waited for alone), slowest first; for tuning."""
    import time

    out = []
    for k, step in zip(rt.program.kernels, rt._steps):
        t0 = time.perf_counter()
        for _ in range(repeat):
            enc = rt.device.create_command_encoder()
            cp = enc.begin_compute_pass()
            rt._record(cp, [step])
            cp.end()
            rt.device.queue.submit([enc.finish()])
            rt.device.queue.read_buffer(rt.buffers[k.bindings[-1].buffer], 0, 4)
        out.append(((time.perf_counter() - t0) / repeat, k.name, k.dispatch))
    out.sort(reverse=True)
    return out
