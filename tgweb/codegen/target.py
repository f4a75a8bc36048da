"""What the kernels are tuned for: the adapter's class, read from its info.

CPU implementations of WebGPU (SwiftShader in Chromium, Mesa's lavapipe natively)
and real GPUs want opposite kernels. On a CPU a workgroup runs on one thread and a
barrier is a context switch per invocation group, so register blocks read
straight from memory and serial loops win; on a GPU thousands of invocations must
be in flight, so products want many workgroups and long rows want workgroup
trees. The choice is a small table keyed by class (measured on both: see
benchmarks/RESULTS.md); the Program records the target it was made for
(meta["target"]), and the tests run every variant on lavapipe and SwiftShader.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

# class -> the knobs the emitters read
TUNING = {
    "cpu": {
        "direct_block": 8,  # outputs per invocation side of the register-blocked matmul
        "tiled_min_outputs": 1 << 20,  # products this large use workgroup-memory tiles
        "tiled_min_tiles": 0,  # ... if they make at least this many 64 x 64 tiles
        # tiled products: (BM, BN, BK, TM, TN, least): the first tile that makes at least
        # `least` workgroups (codegen/matmul.py)
        "tiles": ((128, 128, 8, 8, 8, 256), (64, 64, 16, 4, 4, 0)),
        "serial_max": 1024,  # rows up to this long are reduced by one invocation each
        "sumsq_workgroup": 16,  # invocations of the global norm's workgroup (a barrier per halving)
        "sumsq_block": 0,  # elements per workgroup of the global norm (0: one workgroup)
        "split_k_chunk": 0,  # products split along k into slices at least this long (0: never)
        "split_k_tiles": 0,  # ... until they make this many 64 x 64 tiles
        "attention_rows": 16,  # rows (queries, or keys for dK/dV) per attention workgroup
        "attention_tile": 0,  # rows of the other side staged in workgroup memory (0: none)
        # f16 products through subgroup matrices (codegen/matmul.py): (BM, BN, BK, WM, WN,
        # least), WM x WN subgroups each owning a (BM/WM) x (BN/WN) block of C; the first
        # that makes at least `least` workgroups. Only an emulating test Target runs them here.
        "matrix_tiles": ((64, 64, 16, 2, 2, 0),),
        # f16 elements of padding after each row of a subgroup-matrix kernel's staged tiles
        # (16 bytes: rows stay 16-byte aligned for the matrix loads, and 8 rows of a load
        # fall in different banks instead of one)
        "matrix_pad": 8,
    },
    # tiles for every product that is not skinny, and workgroup trees for any row longer
    # than 16; the figures behind each knob: benchmarks/RESULTS.md ("GPU class tuning")
    "gpu": {
        "direct_block": 4,
        "tiled_min_outputs": 0,
        "tiled_min_tiles": 0,  # register blocks are slower even for few-tile products
        "tiles": (
            (128, 128, 8, 8, 16, 1024),
            (64, 128, 8, 8, 8, 256),
            (64, 64, 16, 8, 8, 128),
            (64, 64, 16, 4, 4, 0),
        ),
        "serial_max": 16,
        "sumsq_workgroup": 256,
        "sumsq_block": 16384,
        "split_k_chunk": 128,
        "split_k_tiles": 2048,
        "attention_rows": 64,
        "attention_tile": 16,
        # f16 products on subgroup matrices; the first that fits the device's workgroup
        # memory (Target.workgroup_bytes) and makes enough workgroups. 128 x 128 by 2 x 2
        # subgroups (64 x 64 of C each: 4 x 4 result matrices of 16 x 16) with k slices of
        # 32 takes 41 KiB with the padding: devices that raise maxComputeWorkgroupStorageSize
        # (48 KiB on the H200). Within WebGPU's default 16 KiB: 4 subgroups of 32 x 64
        # (64 x 32) of C, 2 x 4 (4 x 2) matrices each, BK = 16
        "matrix_tiles": (
            (128, 128, 32, 2, 2, 512),
            (64, 128, 16, 2, 2, 512),
            (128, 64, 16, 2, 2, 512),
            (64, 64, 16, 2, 2, 0),
        ),
        "matrix_pad": 8,
    },
}

# optional WebGPU features kernels may use: WebGPU's name -> the other spellings adapters use
# (wgpu-py says "subgroup")
FEATURES = {
    "subgroups": ("subgroups", "subgroup"),
    "shader-f16": ("shader-f16",),
    # Chromium's subgroup matrices (tensor cores), with their configurations in
    # adapter.info.subgroupMatrixConfigs (Target.matrix_configs); wgpu-py has none
    "chromium-experimental-subgroup-matrix": ("chromium-experimental-subgroup-matrix",),
}
MATRIX_FEATURE = "chromium-experimental-subgroup-matrix"
# the component types a subgroup-matrix configuration may name (GPUSubgroupMatrixComponentType)
MATRIX_TYPES = ("f32", "f16", "u32", "i32", "u8", "i8")
SUBGROUP_SIZES = (4, 128)  # the spec's bounds of an adapter's subgroupMinSize / subgroupMaxSize
DEFAULT_WORKGROUP_BYTES = 16384  # WebGPU's default maxComputeWorkgroupStorageSize

_CPU_WORDS = ("swiftshader", "lavapipe", "llvmpipe", "softpipe", "warp", "cpu")


@dataclass(frozen=True)
class Target:
    """cls: "cpu" (an emulator) or "gpu"; vendor and description from adapter info.
    features: the optional WebGPU features the kernels may use, by their WebGPU names
    ("subgroups", "shader-f16": f16 storage for precision="mixed"); the device running
    them must have been created with each.
    subgroup_sizes: (least, most) invocations per subgroup the adapter reports (the
    spec's bounds, 4 and 128, when it says nothing).
    matrix_configs: the adapter's subgroup-matrix configurations, (component type, result
    type, M, N, K) each (adapter.info.subgroupMatrixConfigs; only with the feature
    chromium-experimental-subgroup-matrix).
    emulate_matrices: tests only: the subgroup-matrix kernel's matrix types and builtins
    are emitted as ordinary WGSL with the same results (codegen/sgmat.py), so lavapipe runs
    the rest of its text; the Program then needs neither feature.
    workgroup_bytes: the workgroup memory one kernel may declare (the device's
    maxComputeWorkgroupStorageSize: lower() sets it from the limits it is given; WebGPU's
    default 16 KiB without). Only the subgroup-matrix products take more than 16 KiB, so
    every other kernel runs on any device."""

    cls: str = "cpu"
    vendor: str = ""
    description: str = ""
    tuning: dict = field(default_factory=dict, compare=False)
    features: tuple = ()
    subgroup_sizes: tuple = SUBGROUP_SIZES
    matrix_configs: tuple = ()
    emulate_matrices: bool = False
    workgroup_bytes: int = DEFAULT_WORKGROUP_BYTES

    def __post_init__(self) -> None:
        if self.cls not in TUNING:
            raise ValueError(f"target class must be one of {sorted(TUNING)}, got {self.cls!r}")
        if not self.tuning:
            object.__setattr__(self, "tuning", dict(TUNING[self.cls]))
        unknown = set(self.features) - set(FEATURES)
        if unknown:
            raise ValueError(f"unknown target features {sorted(unknown)}; known: {sorted(FEATURES)}")
        object.__setattr__(self, "features", tuple(sorted(set(self.features))))
        object.__setattr__(self, "subgroup_sizes", tuple(int(n) for n in self.subgroup_sizes))
        configs = tuple(tuple(c) for c in self.matrix_configs) if self.has(MATRIX_FEATURE) else ()
        object.__setattr__(self, "matrix_configs", configs)

    def has(self, feature: str) -> bool:
        return feature in self.features

    def knob(self, name: str) -> int:
        return self.tuning[name]

    def to_meta(self) -> dict:
        return {
            "class": self.cls,
            "vendor": self.vendor,
            "description": self.description,
            "tuning": json.loads(json.dumps(self.tuning)),  # tuples as lists, as JSON keeps them
            "features": list(self.features),
            **({"subgroup_sizes": list(self.subgroup_sizes)} if self.has("subgroups") else {}),
            **({"matrix_configs": [list(c) for c in self.matrix_configs]} if self.matrix_configs else {}),
            **({"emulate_matrices": True} if self.emulate_matrices else {}),
            **(
                {"workgroup_bytes": self.workgroup_bytes}
                if self.workgroup_bytes != DEFAULT_WORKGROUP_BYTES
                else {}
            ),
        }


def classify(info: dict | None) -> Target:
    """The Target of an adapter from its info: wgpu-py's adapter.info (adapter_type
    "CPU" for lavapipe) or the browser's GPUAdapterInfo (isFallbackAdapter, or
    SwiftShader's vendor and architecture). No info: the CPU class, the safe
    choice for emulators and what the reference backend plans for. info["features"]
    (added by the backends: what the device was created with) lists the optional
    features; the subgroup size bounds come with them."""
    info = dict(info or {})
    words = " ".join(
        str(info.get(k, ""))
        for k in ("vendor", "architecture", "device", "description", "adapter_type", "backend_type")
    ).lower()
    cpu = (
        not info
        or info.get("isFallbackAdapter") is True
        or str(info.get("adapter_type", "")).upper() == "CPU"
        or any(w in words for w in _CPU_WORDS)
    )
    offered = {str(f) for f in info.get("features") or ()}
    features = tuple(f for f, names in FEATURES.items() if offered & set(names))
    return Target(
        "cpu" if cpu else "gpu",
        str(info.get("vendor", "")),
        str(info.get("description", "")),
        features=features,
        subgroup_sizes=_subgroup_sizes(info),
        matrix_configs=matrix_configs(info.get("subgroupMatrixConfigs")),
    )


def matrix_configs(raw) -> tuple:
    """The well-formed entries of adapter.info.subgroupMatrixConfigs as (component type,
    result type, M, N, K) tuples; anything else (missing, not a list, unknown types, sizes
    that are not positive multiples of 4 up to 64) is left out, so bad data means no matrix
    kernels, never a crash."""
    out = []
    for c in raw if isinstance(raw, (list, tuple)) else ():
        if not isinstance(c, dict):
            continue
        ty, res = c.get("componentType"), c.get("resultComponentType")
        dims = [c.get(k) for k in ("M", "N", "K")]
        if ty not in MATRIX_TYPES or res not in MATRIX_TYPES:
            continue
        if not all(type(d) is int and 4 <= d <= 64 and d % 4 == 0 for d in dims):
            continue
        out.append((ty, res, *dims))
    return tuple(sorted(set(out)))


def _subgroup_sizes(info: dict) -> tuple[int, int]:
    """(least, most) subgroup size from adapter info: the browser's subgroupMinSize /
    subgroupMaxSize, wgpu-py's subgroup_min_size / subgroup_max_size (which some
    versions spell stackgroup_...), else the spec's bounds."""
    out = []
    for i, end in enumerate(("min", "max")):
        for key in (f"subgroup{end.title()}Size", f"subgroup_{end}_size", f"stackgroup_{end}_size"):
            if isinstance(info.get(key), int) and info[key] > 0:
                out.append(info[key])
                break
        else:
            out.append(SUBGROUP_SIZES[i])
    return (out[0], out[1])
