"""The Program: plain, versioned, JSON-serialisable data; the only thing a backend sees.

A Program is what one compiled function (a training step, or an inference
forward) needs on the GPU:

buffers   every GPU buffer: id (its index in the list), size in bytes (a multiple
          of 4, at least 4), kind (param, grad, state, input, intermediate, output,
          capture, scalars) and a label for debugging. All buffers are STORAGE |
          COPY_SRC | COPY_DST.
kernels   in execution order. Each has WGSL text with entry point `main`, its
          bindings (binding i of @group(0) is bindings[i]: a buffer id and an
          access, "read" or "read_write"), the workgroup counts (x, y, z) to
          dispatch, for error messages the op kinds it computes and the user's
          call site, and `offsets`: u32 values for a uniform binding. Kernels with
          the same WGSL share a pipeline. In the JSON a kernel's "wgsl" is an index
          into "texts", each distinct text once (a 12-layer GPT's 545 kernels have
          the same 0.7 MB of texts as 6 layers' 287); a JSON without "texts" (an
          older one) holds each kernel's text in its "wgsl".
inputs, params, states, constants, outputs, captures
          name -> Slot: the buffer holding that tensor, its byte offset in it
          (several tensors may share one buffer, e.g. all gradients packed in one
          arena so a global norm is a single reduction), its shape and dtype.
          f32 is float32, i32 is int32, bool is one u32 (0 or 1) per element.
data      constant name -> its values (little-endian 32-bit words, base64): the data
          constants of the graph (tgweb.ops.constant), which a runtime writes into their
          slots once, when it instantiates the Program, and never again.
scalars   the per-step host scalars, in order: each is one 32-bit word of the
          buffer `scalars_buffer`, an "f32" or a "u32" (learning rate, bias
          corrections, PRNG seed, ...). The host writes them before each step.

layout    where a step's host data and the kernels' offsets go, worked out in
          Python from the rest (step_layout), written into the JSON and checked
          against the rest where a Program is loaded (one saved without it loads too)
          and read by every runtime and gpu.mjs: "inputs" lists [name, at, bytes] of
          each input in a step's packed host data (the inputs back to back, then
          "scalars": the byte where the scalar words start; "bytes": the total),
          "uniform" [offset, size] of each kernel's slice of the one uniform buffer
          holding every kernel's offsets ("uniform_bytes" long; slices are aligned to
          256 bytes, the coarsest minUniformBufferOffsetAlignment WebGPU allows).

Running a step: write each input's bytes and the scalars; dispatch every kernel
in order in one compute pass (WebGPU orders storage writes between dispatches);
submit once; read back the outputs and captures asked for. Parameters and
optimizer states persist in their buffers between steps; the host uploads their
initial values once and may read or overwrite them at any time between steps.
Two Programs can share parameters: a backend instantiating a Program may be handed
existing buffers for (some of) its params by name, and then allocates none for them.

A training step (tgweb.compile) has the outputs "loss" (f32), "ok" (bool: the
loss and every gradient were finite, so the step was applied; parameters and
states are otherwise left exactly as they were) and "grad_norm" (f32, the global
gradient norm before clipping); its scalars are "lr", "step_size" and
"bc2_sqrt" (Adam/AdamW) and "seed" (u32), whichever the graph uses. So that the
host can send a step before it has read back the DEPTH (8) steps sent before it
(tgweb.pipeline), each optimizer scalar comes again as "<name>@<j>" for j = 1..DEPTH:
its value should j of the steps still unread when this one was sent turn out
applied (the plain name: none of them); "applied_seen" (u32) says how many applied
steps of this Program's runs the host had read back. The first kernel,
"select_scalars", counts applied runs in the word after the scalars (adding the `ok`
output the last run left), and copies set j = count - applied_seen over the plain
words (tgweb.codegen.select). The Trainer counts the same, from the `ok` it reads
back. States start
at meta["state_init"][name] (0.0 for optimizer moments). meta["memory"] is the
planner's report: bytes by buffer kind, total_bytes, unpooled_total_bytes (every
intermediate in its own buffer), peak_live_bytes, and "peak": the step where most
intermediate bytes are live, those bytes, the largest live values (each with its
tensor, its first and last step and the user's line that made it) and the live
bytes by op kind; memory_text() prints it.

Kernels as tgweb.lower emits them: every storage binding is a whole buffer
(offset 0, the buffer's full size), declared `array<u32>` or, for read-only
operands loaded as vectors, `array<vec4<u32>>`; values are bitcast in the shader.
Where a tensor lives in its buffer is not in the text: a kernel with `offsets`
declares `@binding(len(bindings)) var<uniform> tg_off: array<vec4<u32>, n>`
(n = ceil(len(offsets) / 4)), which the backend fills with the offsets (zero
padded to 16 bytes); a random op's stream key is one of those words too, so the
kernels of a model's repeated layers share pipelines.
Buffer sizes are multiples of 16. A workgroup has at most 256 invocations and
16 KiB of workgroup memory; dispatch dimensions stay <= 65,535 (large index
spaces use x and y). The same WGSL text always comes with
the same bindings (count and access), so a pipeline and its layout can be shared.
More meta (optional for a backend): "dispatches", "pipelines" (unique WGSL
texts), "limits" (what the Program needs, WebGPU names), "inplace_updates" and
"copied_updates" (how parameter and state updates were written), "target" (the
adapter class its kernels were tuned for, "cpu" or "gpu", with the knobs used:
tgweb.codegen.target; every class's kernels run on any adapter, only speed differs).
"features" lists the optional WebGPU features the kernels use (their WGSL `enable`
directives), e.g. ["subgroups"] where the target had them: the device must be created
with each (gpu.mjs's requestDevice asks for them), and a device without one refuses
the Program with a message saying so, before any WGSL is compiled.

Validation: Program.validate() checks the structure once, where a Program is made
(tgweb.lower) or loaded (from_json); a backend checks only what its device can refuse.
"""

from __future__ import annotations

import base64
import json
import re
from dataclasses import dataclass, field, fields
from typing import Any

from .ir import prod

VERSION = 2
BUFFER_KINDS = ("param", "grad", "state", "constant", "input", "intermediate", "output", "capture", "scalars")
ACCESS = ("read", "read_write")
SLOT_DTYPES = ("f32", "i32", "bool")
MAX_GROUPS = 65535  # workgroups per dispatch dimension (WebGPU's default limit)
UNIFORM_ALIGN = 256  # the coarsest minUniformBufferOffsetAlignment a device may ask for


# WebGPU's default limits (the spec's guaranteed minimums): what lowering assumes without
# an adapter, and the names of every limit a Program's kernels and buffers depend on
LIMITS = {
    "maxStorageBufferBindingSize": 134217728,
    "maxBufferSize": 268435456,
    "maxStorageBuffersPerShaderStage": 8,
    "maxComputeWorkgroupStorageSize": 16384,
    "maxComputeInvocationsPerWorkgroup": 256,
    "maxComputeWorkgroupsPerDimension": 65535,
    "maxComputeWorkgroupSizeX": 256,
    "maxComputeWorkgroupSizeY": 256,
}


def wgpu_limit_name(name: str) -> str:
    """A limit's name as wgpu-py spells it: maxBufferSize -> max-buffer-size."""
    return "".join("-" + c.lower() if c.isupper() else c for c in name)


def limits_of(limits=None) -> dict[str, int]:
    """LIMITS overridden by a device's values, whichever spelling it uses
    (maxBufferSize, max_buffer_size, max-buffer-size)."""
    out = dict(LIMITS)
    canon = {k.lower(): k for k in LIMITS}
    for k, v in dict(limits or {}).items():
        key = canon.get(k.replace("-", "").replace("_", "").lower())
        if key is not None and v is not None:
            out[key] = int(v)
    return out


# the bytes of the WGSL types tgweb's kernels declare in workgroup memory
_SCALAR_BYTES = {"f16": 2, "f32": 4, "u32": 4, "i32": 4}
_WORKGROUP_VAR = re.compile(r"^var<workgroup> \w+: (.+);$", re.M)


def _type_bytes(t: str) -> int:
    t = t.strip()
    if t in _SCALAR_BYTES:
        return _SCALAR_BYTES[t]
    if t.startswith("vec") and t[4] == "<":
        return int(t[3]) * _type_bytes(t[5:-1])
    if t.startswith("array<"):
        inner, _, n = t[6:-1].rpartition(",")
        return _type_bytes(inner) * int(n)
    raise ValueError(f"workgroup memory of an unknown WGSL type {t!r}")


def workgroup_bytes(wgsl: str) -> int:
    """The workgroup memory a kernel declares (its `var<workgroup>` lines; tgweb's types
    pack without padding: scalars, vec4s, arrays of them)."""
    return sum(_type_bytes(t) for t in _WORKGROUP_VAR.findall(wgsl))


def unmet_limits(program: "Program", device: dict) -> list[str]:
    """What the Program needs (meta["limits"]) beyond a device's limits (any spelling)."""
    have = limits_of(device)
    return [
        f"the Program needs {k} = {v}, the device allows {have[k]}"
        for k, v in program.meta.get("limits", {}).items()
        if k in have and v > have[k]
    ]


# a WGSL `enable` extension -> the WebGPU feature a device needs for it (same name unless listed)
_ENABLE_FEATURE = {
    "f16": "shader-f16",
    "chromium_experimental_subgroup_matrix": "chromium-experimental-subgroup-matrix",
}


def wgsl_features(kernels) -> list[str]:
    """The WebGPU features kernels need: what their WGSL `enable` directives name."""
    out = set()
    for text in {k.wgsl for k in kernels}:  # a repeated layer's kernels share texts
        for line in text.splitlines():
            if not line.startswith("enable "):
                break  # directives come first
            for name in line[len("enable ") :].rstrip().rstrip(";").split(","):
                out.add(_ENABLE_FEATURE.get(name.strip(), name.strip()))
    return sorted(out)


def unmet_features(program: "Program", device) -> list[str]:
    """Why a device created with the features `device` cannot run the Program: one
    sentence per feature its kernels use (meta["features"]) that the device lacks."""
    t = program.meta.get("target") or {}
    made_for = t.get("description") or t.get("vendor") or "another adapter"
    return [
        f"the Program's kernels use the WebGPU feature {f!r} (compiled for {made_for}), which "
        "this device does not have; compile the function again for this device (its kernels "
        "then do without)"
        for f in program.meta.get("features", [])
        if f not in set(device)
    ]


def memory_text(report: dict) -> str:
    """meta["memory"] for people: the planned bytes by kind, then the peak of live
    intermediates, by op kind and its largest values with the line that made each."""

    def mb(n: int) -> str:
        return f"{n / 1e6:,.1f} MB"

    kinds = sorted(report.get("bytes_by_kind", {}).items(), key=lambda kv: -kv[1])
    lines = [f"planned {mb(report.get('total_bytes', 0))}: " + ", ".join(f"{k} {mb(n)}" for k, n in kinds)]
    budget = report.get("budget")
    if budget:
        done = budget["recomputed"]
        lines.append(
            f"max_memory {mb(budget['max_memory'])} ({mb(budget['unbudgeted_bytes'])} without): "
            f"{len(done)} values recomputed in the backward pass, "
            f"{budget['recomputed_flops'] / 1e9:,.1f} GFLOP more a step"
        )
        for e in done:
            lines.append(
                f"  recomputed {e['tensor']}: {mb(e['bytes'])} freed at the peak, "
                f"{e['flops'] / 1e9:,.2f} GFLOP, at {e['site'] or '?'}"
            )
    peak = report.get("peak")
    if peak:
        live = mb(peak["intermediate_bytes"])
        lines.append(f"peak at step {peak['step']} ({peak['kernel']}): {live} of intermediates live")
        lines.append("  by op kind: " + ", ".join(f"{k} {mb(n)}" for k, n in peak["by_kind"].items()))
        for e in peak["largest"]:
            s, t = e["steps"]
            lines.append(f"  {mb(e['bytes']):>10}  {e['tensor']}, steps {s}..{t}, at {e['site'] or '?'}")
    return "\n".join(lines)


class ProgramError(ValueError):
    """A Program that is not internally consistent (a bad saved file, or a compiler bug)."""


def _with_texts(d: dict) -> dict:
    """A Program's JSON dict with each kernel's "wgsl" index into "texts" replaced by the text."""
    texts = d.get("texts")
    if texts is None:  # written before the texts were kept once: each kernel has its own
        return d
    if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
        raise ProgramError("texts: expected a list of WGSL strings")
    kernels = []
    for i, k in enumerate(d["kernels"]):
        at = k.get("wgsl") if isinstance(k, dict) else None
        if not isinstance(at, int) or isinstance(at, bool) or not 0 <= at < len(texts):
            raise ProgramError(f"kernel {i}: wgsl {at!r} is not an index into the {len(texts)} texts")
        kernels.append(dict(k, wgsl=texts[at]))
    return dict(d, kernels=kernels)


def kernels_json(kernels: list["Kernel"]) -> str:
    """Kernels as a JSON array, each as a Program's JSON has it but with its text in place
    (gpu.mjs's prewarm takes such an array)."""
    return json.dumps([_fields_of(k) for k in kernels], separators=(",", ":"), default=_fields_of)


def _fields_of(obj) -> dict:
    """A dataclass (Kernel, Binding, Slot, ...) for json.dumps: its fields, in order."""
    names = _FIELD_NAMES.get(type(obj))
    if names is None:
        try:
            names = _FIELD_NAMES[type(obj)] = tuple(f.name for f in fields(obj))
        except TypeError:
            raise TypeError(f"{type(obj).__name__} is not JSON serializable") from None
    return {n: getattr(obj, n) for n in names}


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def _need(ok: bool, message: str) -> None:
    if not ok:
        raise ProgramError(message)


@dataclass
class Buffer:
    id: int
    size: int
    kind: str
    label: str = ""


@dataclass
class Binding:
    buffer: int
    access: str  # "read" | "read_write"


@dataclass
class Kernel:
    name: str
    wgsl: str
    bindings: list[Binding]
    dispatch: tuple[int, int, int]
    ops: list[str] = field(default_factory=list)
    site: str = ""
    offsets: list[int] = field(default_factory=list)  # u32s of its uniform binding


@dataclass
class Slot:
    buffer: int
    shape: tuple[int, ...]
    dtype: str
    offset: int = 0  # bytes from the buffer's start (kernels bake it into their WGSL)


@dataclass
class Scalar:
    name: str
    type: str  # "f32" | "u32"


@dataclass
class Layout:
    """Where a step's host data and the kernels' offsets go (see the module docstring)."""

    inputs: list[tuple[str, int, int]]  # name, byte in the packed step data, bytes
    scalars: int  # the byte where the scalar words start
    bytes: int  # the packed step data: the inputs, then 4 bytes per scalar
    uniform: list[tuple[int, int]]  # each kernel's slice of the uniform buffer: offset, size
    uniform_bytes: int


def _parsed_layout(d) -> Layout:
    """A Layout from its JSON form; ProgramError where it is not one."""
    try:
        inputs = [(n, at, nb) for n, at, nb in d["inputs"]]
        uniform = [(o, n) for o, n in d["uniform"]]
        return Layout(inputs, d["scalars"], d["bytes"], uniform, d["uniform_bytes"])
    except (KeyError, TypeError, ValueError) as e:
        raise ProgramError(f"layout: not a step layout ({type(e).__name__}: {e})") from None


def step_layout(program: "Program") -> Layout:
    """A Program's Layout, from its input slots, scalars and kernels' offsets."""
    inputs, at = [], 0
    for name, s in program.inputs.items():
        inputs.append((name, at, 4 * prod(s.shape)))
        at += 4 * prod(s.shape)
    uniform, off = [], 0
    for k in program.kernels:
        size = 16 * -(-len(k.offsets) // 4)  # whole vec4<u32>s
        uniform.append((off, size))
        off += -(-size // UNIFORM_ALIGN) * UNIFORM_ALIGN
    return Layout(inputs, at, at + 4 * len(program.scalars), uniform, max(off, 16))


@dataclass
class Program:
    buffers: list[Buffer] = field(default_factory=list)
    kernels: list[Kernel] = field(default_factory=list)
    inputs: dict[str, Slot] = field(default_factory=dict)
    params: dict[str, Slot] = field(default_factory=dict)
    states: dict[str, Slot] = field(default_factory=dict)
    constants: dict[str, Slot] = field(default_factory=dict)
    outputs: dict[str, Slot] = field(default_factory=dict)
    captures: dict[str, Slot] = field(default_factory=dict)
    scalars: list[Scalar] = field(default_factory=list)
    scalars_buffer: int | None = None
    data: dict[str, str] = field(default_factory=dict)  # constant name -> base64 of its bytes
    meta: dict[str, Any] = field(default_factory=dict)  # limits needed, counts, memory report
    version: int = VERSION

    @property
    def layout(self) -> Layout:
        """Where a step's host data and the kernels' offsets go (see the module docstring)."""
        return step_layout(self)

    def to_json(self) -> str:
        """The Program as JSON: dataclasses as objects of their fields, in order (what
        asdict gives, without its deep copy of every kernel: json reads them as they are)."""
        d = _fields_of(self)
        index: dict[str, int] = {}
        kernels = [dict(_fields_of(k), wgsl=index.setdefault(k.wgsl, len(index))) for k in self.kernels]
        d.update(kernels=kernels, texts=list(index), layout=self.layout)
        return json.dumps(d, separators=(",", ":"), default=_fields_of)

    @classmethod
    def from_json(cls, text: str) -> "Program":
        """A Program from its JSON text, validated (ProgramError names what is wrong)."""
        try:
            d = json.loads(text)
            if not isinstance(d, dict) or d.get("version") != VERSION:
                got = d.get("version") if isinstance(d, dict) else type(d).__name__
                raise ProgramError(f"Program version {got!r} is not {VERSION}")
            prog = cls._from_dict(_with_texts(d))
        except (KeyError, TypeError, ValueError) as e:
            if isinstance(e, ProgramError):
                raise
            raise ProgramError(f"not a tgweb Program: {type(e).__name__}: {e}") from None
        prog.validate()
        # a Program saved before Programs carried their layout has none: computed as it is
        if "layout" in d and _parsed_layout(d["layout"]) != prog.layout:
            raise ProgramError("layout does not match the inputs, scalars and kernels' offsets")
        return prog

    @classmethod
    def _from_dict(cls, d: dict) -> "Program":

        def slots(m):
            return {k: Slot(v["buffer"], tuple(v["shape"]), v["dtype"], v["offset"]) for k, v in m.items()}

        return cls(
            buffers=[Buffer(**b) for b in d["buffers"]],
            kernels=[
                Kernel(
                    k["name"],
                    k["wgsl"],
                    [Binding(**b) for b in k["bindings"]],
                    tuple(k["dispatch"]),
                    list(k["ops"]),
                    k["site"],
                    list(k.get("offsets", [])),
                )
                for k in d["kernels"]
            ],
            inputs=slots(d["inputs"]),
            params=slots(d["params"]),
            states=slots(d["states"]),
            constants=slots(d.get("constants", {})),
            outputs=slots(d["outputs"]),
            captures=slots(d["captures"]),
            scalars=[Scalar(**s) for s in d["scalars"]],
            scalars_buffer=d["scalars_buffer"],
            data=dict(d.get("data", {})),
            meta=d["meta"],
            version=d["version"],
        )

    def validate(self) -> None:
        """Check the Program's internal consistency once, where it is made or loaded, so that
        a backend (gpu.mjs included) checks only what the device itself can refuse."""
        for i, b in enumerate(self.buffers):
            _need(b.id == i, f"buffer {i} has id {b.id}")
            _need(
                isinstance(b.size, int) and b.size >= 4 and b.size % 4 == 0,
                f"buffer {i}: size {b.size!r} is not a multiple of 4 bytes >= 4",
            )
            _need(b.kind in BUFFER_KINDS, f"buffer {i}: unknown kind {b.kind!r}")
        nb = len(self.buffers)
        for k in self.kernels:
            for j, bd in enumerate(k.bindings):
                _need(0 <= bd.buffer < nb, f"kernel {k.name}: binding {j} names buffer {bd.buffer}")
                _need(bd.access in ACCESS, f"kernel {k.name}: binding {j} access {bd.access!r}")
            _need(
                len(k.dispatch) == 3 and all(isinstance(n, int) and 1 <= n <= MAX_GROUPS for n in k.dispatch),
                f"kernel {k.name}: dispatch {k.dispatch!r} is not 3 counts in 1..{MAX_GROUPS}",
            )
            _need(
                all(isinstance(o, int) and 0 <= o < 2**32 for o in k.offsets),
                f"kernel {k.name}: offsets must be u32 values",
            )
        for kind in ("inputs", "params", "states", "constants", "outputs", "captures"):
            for name, s in getattr(self, kind).items():
                what = f"{kind[:-1]} {name!r}"
                _need(0 <= s.buffer < nb, f"{what}: buffer {s.buffer} does not exist")
                _need(s.dtype in SLOT_DTYPES, f"{what}: dtype {s.dtype!r}")
                _need(all(isinstance(n, int) and n >= 1 for n in s.shape), f"{what}: shape {s.shape!r}")
                end = s.offset + 4 * prod(s.shape)
                _need(
                    s.offset % 4 == 0 and end <= self.buffers[s.buffer].size,
                    f"{what}: bytes {s.offset}..{end} do not fit buffer {s.buffer}",
                )
        self._validate_data()
        used = set(wgsl_features(self.kernels)) - set(self.meta.get("features", []))
        _need(
            not used, f"kernels use the WebGPU features {sorted(used)}, which meta['features'] does not list"
        )
        _need(all(s.type in ("f32", "u32") for s in self.scalars), "scalar types must be f32 or u32")
        if self.scalars:
            _need(
                self.scalars_buffer is not None
                and 0 <= self.scalars_buffer < nb
                and 4 * len(self.scalars) <= self.buffers[self.scalars_buffer].size,
                "scalars_buffer is missing or too small for the scalars",
            )

    def _validate_data(self) -> None:
        _need(set(self.data) == set(self.constants), "data must hold exactly the constants' values")
        for name, text in self.data.items():
            try:
                n = len(base64.b64decode(text, validate=True))
            except (TypeError, ValueError):
                raise ProgramError(f"data {name!r} is not base64 text") from None
            want = 4 * prod(self.constants[name].shape)
            _need(n == want, f"data {name!r} holds {n} bytes, its constant {want}")

    def constant_bytes(self, name: str) -> bytes:
        """A data constant's values, as the runtimes upload them."""
        return base64.b64decode(self.data[name])

    def pipelines(self) -> int:
        """Unique pipelines: kernels deduplicated by WGSL text."""
        return len({k.wgsl for k in self.kernels})

    def bytes_by_kind(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for b in self.buffers:
            out[b.kind] = out.get(b.kind, 0) + b.size
        return out
