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
          the same WGSL share a pipeline.
inputs, params, states, outputs, captures
          name -> Slot: the buffer holding that tensor, its byte offset in it
          (several tensors may share one buffer, e.g. all gradients packed in one
          arena so a global norm is a single reduction), its shape and dtype.
          f32 is float32, i32 is int32, bool is one u32 (0 or 1) per element.
scalars   the per-step host scalars, in order: each is one 32-bit word of the
          buffer `scalars_buffer`, an "f32" or a "u32" (learning rate, bias
          corrections, PRNG seed, ...). The host writes them before each step.

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
"bc2_sqrt" (Adam/AdamW) and "seed" (u32), whichever the graph uses. States start
at meta["state_init"][name] (0.0 for optimizer moments). meta["memory"] is the
planner's report: bytes by buffer kind, total_bytes, unpooled_total_bytes (every
intermediate in its own buffer) and peak_live_bytes.

Kernels as tgweb.lower emits them: every storage binding is a whole buffer
(offset 0, the buffer's full size), declared `array<u32>` or, for read-only
operands loaded as vectors, `array<vec4<u32>>`; values are bitcast in the shader.
Where a tensor lives in its buffer is not in the text: a kernel with `offsets`
declares `@binding(len(bindings)) var<uniform> tg_off: array<vec4<u32>, n>`
(n = ceil(len(offsets) / 4)), which the backend fills with the offsets (zero
padded to 16 bytes), so the kernels of a model's repeated layers share pipelines.
Buffer sizes are multiples of 16. A workgroup has at most 256 invocations and
16 KiB of workgroup memory; dispatch dimensions stay <= 65,535 (large index
spaces use x and y). The same WGSL text always comes with
the same bindings (count and access), so a pipeline and its layout can be shared.
More meta (optional for a backend): "dispatches", "pipelines" (unique WGSL
texts), "limits" (what the Program needs, WebGPU names), "inplace_updates" and
"copied_updates" (how parameter and state updates were written).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

VERSION = 2
BUFFER_KINDS = ("param", "grad", "state", "input", "intermediate", "output", "capture", "scalars")


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
class Program:
    buffers: list[Buffer] = field(default_factory=list)
    kernels: list[Kernel] = field(default_factory=list)
    inputs: dict[str, Slot] = field(default_factory=dict)
    params: dict[str, Slot] = field(default_factory=dict)
    states: dict[str, Slot] = field(default_factory=dict)
    outputs: dict[str, Slot] = field(default_factory=dict)
    captures: dict[str, Slot] = field(default_factory=dict)
    scalars: list[Scalar] = field(default_factory=list)
    scalars_buffer: int | None = None
    meta: dict[str, Any] = field(default_factory=dict)  # limits needed, counts, memory report
    version: int = VERSION

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> "Program":
        d = json.loads(text)
        if d.get("version") != VERSION:
            raise ValueError(f"Program version {d.get('version')!r} is not {VERSION}")

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
            outputs=slots(d["outputs"]),
            captures=slots(d["captures"]),
            scalars=[Scalar(**s) for s in d["scalars"]],
            scalars_buffer=d["scalars_buffer"],
            meta=d["meta"],
            version=d["version"],
        )

    def pipelines(self) -> int:
        """Unique pipelines: kernels deduplicated by WGSL text."""
        return len({k.wgsl for k in self.kernels})

    def bytes_by_kind(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for b in self.buffers:
            out[b.kind] = out.get(b.kind, 0) + b.size
        return out
