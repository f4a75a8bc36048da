"""Matmul throughput of tgweb's WGSL kernel through wgpu-py, next to torch.matmul in
float32 with TF32 disabled, plus ms per `addition` training step.

    python benchmarks/matmul_native.py            # 1024 and 4096 (a real GPU)
    python benchmarks/matmul_native.py --small    # 128 and 256 (lavapipe, CPU)
    python benchmarks/matmul_native.py --sizes 512 2048 --no-addition
    python benchmarks/matmul_native.py --tunings direct_block=8,serial_max=1024 serial_max=16
    python benchmarks/matmul_native.py --tiles 128x128x8x8x8 128x64x8x8x4 --no-addition

--tunings takes settings of the knobs of tgweb.codegen.target (name=value, comma
separated) for the adapter's class, one set per run of the matmuls and steps (each
on top of the one before), so one process compares kernel choices on one adapter.
--tiles forces one workgroup tile (BMxBNxBKxTMxTN, codegen/matmul.py) on every
product, one run of the matmuls per tile.

The kernel is timed GPU-side as well as one can from wgpu-py: R dispatches recorded
into one compute pass, one submit, then a 4-byte readback to wait; the best of a few
repeats. torch runs on CUDA when it is there (cuda events), else on the CPU.
"""

from __future__ import annotations

import argparse
import array
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def tgweb_matmul(n: int, reps: int) -> tuple[float, float]:
    """(GFLOP/s, max relative error against NumPy in float64)."""
    import numpy as np

    from tgweb.backends import native
    from tgweb.ir import Graph, tracing
    from tgweb.lower import lower

    g = Graph()
    with tracing(g):
        a = g.input("a", (n, n))
        b = g.input("b", (n, n))
        g.outputs["c"] = a @ b
    prog = lower(g, native.device_limits(), target=native.device_target())  # the adapter's kernels
    rt = native.Runtime(prog)
    rng = np.random.default_rng(0)
    av = rng.standard_normal((n, n)).astype(np.float32)
    bv = rng.standard_normal((n, n)).astype(np.float32)
    got = rt.run(
        {"a": array.array("f", av.tobytes()), "b": array.array("f", bv.tobytes())}, {}, [("outputs", "c")]
    )
    c = np.frombuffer(got[("outputs", "c")].tobytes(), np.float32).reshape(n, n)
    ref = av.astype(np.float64) @ bv.astype(np.float64)
    err = float(np.abs(c - ref).max() / np.abs(ref).max())
    dev = rt.device
    best = float("inf")
    for _ in range(3):
        enc = dev.create_command_encoder()
        cp = enc.begin_compute_pass()
        for _ in range(reps):  # every kernel of the product (split-k: the slices, then their sum)
            for i, kernel in enumerate(prog.kernels):
                cp.set_pipeline(rt.pipes[i])
                cp.set_bind_group(0, rt.groups[i])
                cp.dispatch_workgroups(*kernel.dispatch)
        cp.end()
        dev.queue.read_buffer(rt.buffers[0], 0, 4)  # drain earlier work
        t0 = time.perf_counter()
        dev.queue.submit([enc.finish()])
        dev.queue.read_buffer(rt.buffers[kernel.bindings[-1].buffer], 0, 4)
        best = min(best, (time.perf_counter() - t0) / reps)
    rt.close()
    return 2.0 * n**3 / best / 1e9, err


def torch_matmul(n: int, reps: int, tf32: bool = False) -> tuple[float, str]:
    try:
        import torch
    except ImportError:
        return float("nan"), "torch not installed"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.set_float32_matmul_precision("high" if tf32 else "highest")
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    a = torch.randn(n, n, device=dev, dtype=torch.float32)
    b = torch.randn(n, n, device=dev, dtype=torch.float32)
    for _ in range(2):
        torch.matmul(a, b)
    best = float("inf")
    for _ in range(3):
        if dev == "cuda":
            torch.cuda.synchronize()
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            for _ in range(reps):
                torch.matmul(a, b)
            e.record()
            torch.cuda.synchronize()
            dt = s.elapsed_time(e) / 1e3 / reps
        else:
            t0 = time.perf_counter()
            for _ in range(reps):
                torch.matmul(a, b)
            dt = (time.perf_counter() - t0) / reps
        best = min(best, dt)
    name = torch.cuda.get_device_name() if dev == "cuda" else "CPU"
    return 2.0 * n**3 / best / 1e9, f"torch {torch.__version__} on {name}"


def step_ms(sample: str, steps: int) -> tuple[float, dict]:
    from tgweb import samples

    s = samples.get(sample)
    tr = samples.compile(s, backend="native", seed=0, precision="float32")  # beside torch fp32/tf32
    batches = [s.batch(i) for i in range(steps + 3)]
    t0 = time.perf_counter()  # warm-up: 3 steps and 1 s (an idle GPU clocks itself down)
    for i in range(3):
        tr.step(**batches[i])
    while time.perf_counter() - t0 < 1.0:
        tr.step(**batches[0])
    t0 = time.perf_counter()
    for i in range(steps):
        loss = tr.step(**batches[3 + i]).loss
    dt = (time.perf_counter() - t0) / steps
    float(loss)
    meta = tr.program.meta
    return dt * 1e3, {"dispatches": meta["dispatches"], "pipelines": meta["pipelines"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--small", action="store_true", help="small sizes, for lavapipe")
    ap.add_argument("--sizes", type=int, nargs="*")
    ap.add_argument("--no-addition", action="store_true", help="skip the training-step timing")
    ap.add_argument("--tunings", nargs="*", default=[None], help="knob=value,... (tgweb.codegen.target)")
    ap.add_argument("--tiles", nargs="*", default=[None], help="BMxBNxBKxTMxTN, one run each")
    args = ap.parse_args()
    from tgweb.backends import native

    if not native.available():
        sys.exit("no WebGPU adapter found (install a Vulkan driver, e.g. mesa-vulkan-drivers)")
    info = native.adapter_info()
    sizes = args.sizes or ([128, 256] if args.small else [1024, 4096])
    print(
        f"adapter: {info.get('device', '?')} ({info.get('backend_type', '?')}, {info.get('description', '')})"
    )
    from tgweb.codegen.target import TUNING

    cls = native.device_target().cls
    for tuning in args.tunings:
        if tuning:
            TUNING[cls].update((k, int(v)) for k, v in (kv.split("=") for kv in tuning.split(",")))
        for tile in args.tiles:
            if tile:
                TUNING[cls]["tiles"] = ((*map(int, tile.split("x")), 0),)
            print(f"\n== {cls} tuning {TUNING[cls]}")
            _run(args, sizes)


def _run(args, sizes) -> None:
    print(
        f"{'n':>6} {'tgweb GFLOP/s':>14} {'torch GFLOP/s':>14} {'ratio':>7} "
        f"{'torch TF32 GFLOP/s':>19} {'ratio':>7} {'max rel err':>12}"
    )
    what = ""
    for n in sizes:
        reps = max(5, min(500, int(1e12 / n**3))) if not args.small else 2  # >= ~20 ms of GPU work
        gf, err = tgweb_matmul(n, reps)
        tf, what = torch_matmul(n, reps)
        t32, _ = torch_matmul(n, reps, tf32=True)
        print(f"{n:>6} {gf:>14.1f} {tf:>14.1f} {gf / tf:>7.1%} {t32:>19.1f} {gf / t32:>7.1%} {err:>12.2e}")
    print(f"({what}, float32: TF32 off, and on for reference; tgweb computes in plain fp32)")
    if not args.no_addition:
        for sample in ("sin", "addition"):
            runs = [step_ms(sample, 3 if args.small else 50) for _ in range(1 if args.small else 3)]
            meta = runs[0][1]
            print(
                f"{sample} training step, loss read every step: "
                + ", ".join(f"{ms:.2f}" for ms, _ in runs)
                + f" ms ({meta['dispatches']} dispatches, {meta['pipelines']} pipelines, one submit)"
            )


if __name__ == "__main__":
    main()
