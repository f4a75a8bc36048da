"""GPU time of tgweb's matmul kernels in this machine's Chromium (WebGPU on
SwiftShader), for the shapes the samples train with, from timestamp queries.

    python3 benchmarks/matmul_browser.py                 # the sample shapes
    python3 benchmarks/matmul_browser.py --shape 256x64x64:nt
    python3 benchmarks/matmul_browser.py --sizes 1024 4096 [--tiles 128x128x8x8x8 ...]

A shape is MxKxN with an optional :FLAGS, t marking a stored transpose of A
and/or B (as the backward pass reads them): "nn", "tn", "nt". Each product is
lowered to a one-kernel Program here in CPython and replayed by gpu.mjs in the
bench page; the figures are the median GPU time of the kernel over five replays
and the Program's setup time (its buffers and pipeline: mostly the pipeline).

--sizes times square products n x n x n instead, with the kernels tgweb picks for the
page's adapter (on a real GPU, the GPU class's tiles; --tiles forces tiles, one run
each): the median GPU time of R dispatches in one compute pass, in GFLOP/s.

    python3 benchmarks/matmul_browser.py --sizes 4096 --f16   # fp32, f16, subgroup matrices

--f16 adds, for each size, the product of f16 copies with f32 accumulation
(precision="mixed"'s products; the copies' own kernels are not timed) through the plain
f16 tiles and, where the adapter offers chromium-experimental-subgroup-matrix with an
f16 -> f32 configuration, through subgroup matrices (else it says so and skips that
column); each checked against NumPy on 64 sampled entries. On the H200, Chromium needs
f16 turned on: `GPU_CHROMIUM_F16=1 . .gpuchrome/launch.sh` (../shared/tools/gpu-chromium).
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

# (M, K, N, flags): sin's MLP (batch 256, width 64) and addition's transformer
# (1,024 token rows, width 64, MLP 256), forward, input gradient and weight gradient
SHAPES = [
    (256, 64, 64, "nn"),
    (256, 64, 64, "nt"),
    (64, 256, 64, "tn"),
    (1024, 64, 64, "nn"),
    (1024, 64, 256, "nn"),
    (1024, 256, 64, "nn"),
    (1024, 256, 64, "nt"),
    (64, 1024, 256, "tn"),
    (256, 1024, 64, "tn"),
]


# shakespeare's products (batch 64 x block 256 = 16384 rows, width 384): c_attn's
# [16384, 384] x [384, 1152] and the MLP's 384 -> 1536 -> 384, forward, input gradient (B
# read transposed) and weight gradient (A read transposed)
MODEL_SHAPES = [
    (16384, 384, 1152, "nn"),
    (16384, 1152, 384, "nt"),
    (384, 16384, 1152, "tn"),
    (16384, 384, 1536, "nn"),
    (16384, 1536, 384, "nn"),
]
WORKGROUP_BYTES = "async () => (await navigator.gpu.requestAdapter()).limits.maxComputeWorkgroupStorageSize"


def parse(s: str):
    dims, _, flags = s.partition(":")
    m, k, n = (int(x) for x in dims.split("x"))
    return m, k, n, flags or "nn"


def program(m: int, k: int, n: int, flags: str, target=None, half: bool = False, limits=None):
    """A one-product Program (half: of the operands' f16 copies, as precision="mixed" reads them),
    lowered for `limits` (the device's; WebGPU's defaults without)."""
    from tgweb.ir import Graph, make, tracing
    from tgweb.lower import lower

    ta, tb = flags[0] == "t", flags[1] == "t"
    g = Graph()
    with tracing(g):
        a = g.input("a", (k, m) if ta else (m, k))
        b = g.input("b", (n, k) if tb else (k, n))
        if half:
            a, b = make("to_f16", (a,)), make("to_f16", (b,))
        g.outputs["loss"] = make("matmul", (a, b), ta=ta, tb=tb)
    return lower(g, limits, target=target)


def main(argv: list[str]) -> int:
    import bench

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", action="append", type=parse)
    ap.add_argument(
        "--block",
        help="TxU: the register-blocked kernel's T x T outputs per invocation and "
        "k steps unrolled (default: tgweb's)",
    )
    ap.add_argument("--sizes", type=int, nargs="*", help="square products n x n x n, in GFLOP/s")
    ap.add_argument("--tiles", nargs="*", default=[None], help="with --sizes: BMxBNxBKxTMxTN, one run each")
    ap.add_argument(
        "--gpu-class", action="store_true", help="with --sizes: the GPU class's kernels on any adapter"
    )
    ap.add_argument(
        "--f16",
        action="store_true",
        help="with --sizes: f16 products with f32 accumulation too, plain and on subgroup matrices",
    )
    ap.add_argument(
        "--matrix-tiles",
        nargs="*",
        default=[],
        help="with --f16: BMxBNxBKxWMxWN[xPAD] subgroup-matrix tiles to time, one run each "
        "(default: tgweb's)",
    )
    ap.add_argument(
        "--model-shapes",
        action="store_true",
        help="with --f16: also shakespeare's products (MODEL_SHAPES), forward and backward",
    )
    ap.add_argument(
        "--default-limits",
        action="store_true",
        help="lower for WebGPU's default limits (16 KiB of workgroup memory), not the adapter's",
    )
    a = ap.parse_args(argv)
    if a.block:
        from tgweb.codegen import matmul
        from tgweb.codegen.target import TUNING

        TUNING["cpu"]["direct_block"], matmul.DIRECT_U = (int(x) for x in a.block.split("x"))
    shapes = a.shape or SHAPES
    srv, url = bench.serve_bench_site()
    from playwright.sync_api import sync_playwright

    rnd = random.Random(0)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=bench.CHROMIUM, args=bench.ARGS)
        ctx, page, logs = bench._new_page(browser, url)
        page.set_default_timeout(600_000)
        if a.sizes:
            shapes = [(n, n, n, "nn") for n in a.sizes] + (MODEL_SHAPES if a.model_shapes else [])
            _square(page, shapes, a.tiles, a.gpu_class, a.f16, a.matrix_tiles, a.default_limits)
            shapes = []
        print(f"{'shape':>22} {'kernel':>30} {'dispatch':>14} {'GPU ms':>8} {'GFLOP/s':>8} {'setup ms':>9}")
        for m, k, n, flags in shapes:
            prog = program(m, k, n, flags)
            data = {
                "a": [rnd.uniform(-1, 1) for _ in range(m * k)],
                "b": [rnd.uniform(-1, 1) for _ in range(k * n)],
            }
            r = page.evaluate(
                "([p, b]) => harness.tgwebReplica(p, {}, {}, b, {warmup: 2, steps: 3, blocks: 1})",
                [prog.to_json(), [data]],
            )
            (kr,) = r["kernels"]
            ms = kr["ts_ms"]
            print(
                f"{f'{m}x{k}x{n}:{flags}':>22} {kr['kernel'][:30]:>30} {str(kr['dispatch']):>14} "
                f"{ms:8.3f} {2 * m * n * k / ms / 1e6:8.2f} {r['instantiate_ms']:9.0f}",
                flush=True,
            )
        ctx.close()
        browser.close()
    srv.shutdown()
    return 0


def _square(page, shapes, tiles, gpu_class, f16=False, matrix_tiles=(), default_limits=False) -> None:
    import bench

    from tgweb.codegen.target import Target

    print(f"adapter: {page.evaluate('() => harness.adapterInfo()')}")
    wg = page.evaluate(WORKGROUP_BYTES)
    limits = None if default_limits else {"maxComputeWorkgroupStorageSize": wg}
    print(f"adapter's maxComputeWorkgroupStorageSize {wg}; lowered for {limits or 'the defaults'}")
    for tile in tiles:
        target = Target("gpu", "forced") if gpu_class else bench.page_target(page)
        if tile:
            target.tuning["tiles"] = ((*map(int, tile.split("x")), 0),)
        print(f"== {target.cls} class, tiles {target.tuning['tiles']}")
        for shape in shapes:
            _time(page, shape, target, "fp32", limits=limits)
            if f16:
                _f16_columns(page, shape, target, matrix_tiles, limits)


def _time(page, shape, target, label: str, half: bool = False, limits=None) -> None:
    """One product's median GPU time (only its matmul kernel where half), in TFLOP/s, and
    how many of 64 sampled entries NumPy finds wrong; shape (M, K, N, flags)."""
    m, k, n, flags = shape
    name = f"{m}x{k}x{n}:{flags}" if (m, k, flags) != (n, n, "nn") else f"{n}^2"
    reps = max(1, min(20, int(4e11 / (m * n * k))))
    opts = {"reps": reps, "only": "matmul" if half else None, "samples": 64}
    prog = program(m, k, n, flags, target, half, limits)
    if any("subgroupMatrix" in k.wgsl for k in prog.kernels) != label.startswith(("subgroup", "matrices")):
        print(f"  {name:>20} {label:>17}: skipped, the tile does not fit (the plain kernels would run)")
        return
    try:
        r = page.evaluate("([p, o]) => harness.tgwebKernelTime(p, o)", [prog.to_json(), opts])
    except Exception as e:  # a WGSL form Tint refuses, say: the message, and the next column
        print(f"  {name:>20} {label:>17}: failed: {str(e)[:2000]}", flush=True)
        return
    check = f", {_wrong(r['samples'], half)}/64 wrong" if r["samples"] else ""
    wg = prog.meta["limits"]["maxComputeWorkgroupStorageSize"]
    print(
        f"  {name:>20} {label:>17}: {r['ms']:8.3f} ms, {2 * m * n * k / r['ms'] / 1e9:7.2f} TFLOP/s "
        f"({r['kernel']}, dispatch {r['dispatch']}, {reps} per pass, {wg} B of workgroup memory{check})",
        flush=True,
    )


def _f16_columns(page, shape, target, matrix_tiles=(), limits=None) -> None:
    """The f16 product through the plain f16 tiles, then through subgroup matrices (or
    why not), with tgweb's tile or each of matrix_tiles."""
    import dataclasses

    from tgweb.codegen import sgmat
    from tgweb.codegen.target import MATRIX_FEATURE

    if not target.has("shader-f16"):
        print(f"  {shape} f16: skipped, this adapter has no shader-f16 (features {list(target.features)})")
        return
    plain = dataclasses.replace(target, features=tuple(f for f in target.features if f != MATRIX_FEATURE))
    _time(page, shape, plain, "f16 tiles", half=True, limits=limits)
    if sgmat.config(target) is None:
        print(
            f"  {shape} subgroup matrices: skipped, this adapter does not offer {MATRIX_FEATURE} with an "
            f"f16 -> f32 configuration, subgroups and one subgroup size (features {list(target.features)}, "
            f"configurations {list(target.matrix_configs)}, subgroup sizes {target.subgroup_sizes})"
        )
        return
    for tile in matrix_tiles or [None]:
        t = target
        if tile:  # BMxBNxBKxWMxWN[xPAD]: that tile alone, its rows padded by PAD f16 (default 0)
            dims = [int(x) for x in tile.split("x")]
            tuning = dict(target.tuning, matrix_tiles=((*dims[:5], 0),), matrix_pad=(dims[5:] or [0])[0])
            t = dataclasses.replace(target, tuning=tuning)
        _time(page, shape, t, f"matrices {tile}" if tile else "subgroup matrices", half=True, limits=limits)


def _wrong(samples, half: bool) -> int:
    """Sampled entries off from NumPy's float64 sum of the same (f16-rounded) operands by
    more than 1e-3 of the sum of the terms' magnitudes."""
    import numpy as np

    wrong = 0
    for s in samples:
        a, b = np.array(s["a"], np.float32), np.array(s["b"], np.float32)
        if half:
            a, b = a.astype(np.float16), b.astype(np.float16)
        terms = a.astype(np.float64) * b.astype(np.float64)
        wrong += not abs(s["c"] - terms.sum()) <= 1e-3 * max(np.abs(terms).sum(), 1e-30)
    return wrong


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
