"""Row reductions through wgpu-py with and without subgroups: GPU time per run of each
case's kernels (codegen/reduce.py: workgroup-memory trees, or subgroup folds where the
target has the "subgroups" feature).

    python benchmarks/reduce_native.py              # 1024 rows of 64 .. 65536 (a real GPU)
    python benchmarks/reduce_native.py --small      # 64 rows, shorter (lavapipe, CPU)
    python benchmarks/reduce_native.py --class gpu  # the GPU class's kernels on any adapter

Each case is lowered twice for the adapter's target (or the class --class names), once
without its features and once with them; "same" marks a case whose kernels do not
change (the CPU class reduces rows up to 1024 long in plain loops). The kernels are
timed GPU-side as benchmarks/matmul_native.py times a product: R runs of all of them
recorded into one compute pass, one submit, a 4-byte readback to wait, the best of a
few repeats. Each output is checked against NumPy first.
"""

from __future__ import annotations

import argparse
import array
import dataclasses
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def cases(small: bool) -> list[tuple[str, tuple, object, object]]:
    """(name, input shape, tgweb function, NumPy function in float64)."""
    import numpy as np

    import tgweb as tg
    from tgweb import ops

    def softmax(x):
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)

    rows = 64 if small else 1024
    lengths = (64, 256, 1024, 4096, 16384) if small else (64, 256, 1024, 4096, 65536)
    out = [
        (f"sum rows of {n}", (rows, n), lambda x: ops.sum(x, axis=-1), lambda x: x.sum(-1)) for n in lengths
    ]
    out += [
        ("max rows of 1024", (rows, 1024), lambda x: ops.max(x, axis=-1), lambda x: x.max(-1)),
        (
            "mean of squares, rows of 4096",
            (rows, 4096),
            lambda x: ops.mean(x * x, axis=-1),
            lambda x: (x * x).mean(-1),
        ),
        ("softmax rows of 256", (rows, 256), lambda x: tg.softmax(x, axis=-1), softmax),
        ("global sum", (150_000,), lambda x: ops.sum(x), lambda x: x.sum()),
    ]
    return out


def lowered(shape, fn, target):
    from tgweb.backends import native
    from tgweb.ir import Graph, tracing
    from tgweb.lower import lower

    g = Graph()
    with tracing(g):
        g.outputs["y"] = fn(g.input("x", shape))
    return lower(g, native.device_limits(), target=target)


def gpu_seconds(rt, budget: float, reps: int | None) -> float:
    """Seconds per run of the Program's kernels: `reps` runs (else enough for about
    `budget` seconds) in one compute pass and one submit, best of 3."""
    dev, prog = rt.device, rt.program
    out = rt.buffers[prog.outputs["y"].buffer]

    def once(n: int) -> float:
        enc = dev.create_command_encoder()
        cp = enc.begin_compute_pass()
        for _ in range(n):
            for k, pipe, group in zip(prog.kernels, rt.pipes, rt.groups):
                cp.set_pipeline(pipe)
                cp.set_bind_group(0, group)
                cp.dispatch_workgroups(*k.dispatch)
        cp.end()
        cmd = enc.finish()
        dev.queue.read_buffer(out, 0, 4)  # drain earlier work
        t0 = time.perf_counter()
        dev.queue.submit([cmd])
        dev.queue.read_buffer(out, 0, 4)
        return (time.perf_counter() - t0) / n

    if reps is None:
        reps = int(max(2, min(2000, budget / max(once(1), 1e-6))))
    return min(once(reps) for _ in range(3))


def measure(shape, fn, ref, target, budget, reps):
    """(microseconds per run, max relative error, the kernels' WGSL texts)."""
    import numpy as np

    from tgweb.backends import native

    prog = lowered(shape, fn, target)
    rt = native.Runtime(prog)
    try:
        x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
        got = rt.run({"x": array.array("f", x.tobytes())}, {}, [("outputs", "y")])[("outputs", "y")]
        want = np.asarray(ref(x.astype(np.float64)), np.float64)
        y = np.frombuffer(got.tobytes(), np.float32).reshape(want.shape)
        err = float(np.abs(y - want).max() / max(1.0, np.abs(want).max()))
        return gpu_seconds(rt, budget, reps) * 1e6, err, [k.wgsl for k in prog.kernels]
    finally:
        rt.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--small", action="store_true", help="64 rows, rows up to 16384 (lavapipe)")
    ap.add_argument("--class", dest="cls", choices=("cpu", "gpu"), help="kernels of this class")
    ap.add_argument("--reps", type=int, help="runs per submit (default: about --budget of GPU time)")
    ap.add_argument("--budget", type=float, default=0.05, help="seconds of GPU work per timing")
    args = ap.parse_args()
    from tgweb.backends import native

    if not native.available():
        sys.exit("no WebGPU adapter found (install a Vulkan driver, e.g. mesa-vulkan-drivers)")
    info = native.adapter_info()
    target = native.device_target()
    if args.cls:
        target = dataclasses.replace(target, cls=args.cls, tuning={})
    print(
        f"adapter: {info.get('device', '?')} ({info.get('backend_type', '?')}, {info.get('description', '')})"
    )
    print(f"kernels of the {target.cls} class; features {list(target.features) or 'none'}", end="")
    print(f", subgroup sizes {target.subgroup_sizes}" if target.has("subgroups") else "")
    if not target.features:
        print("(the device has no optional features: both columns run the same kernels)")
    bare = dataclasses.replace(target, features=())
    head = f"{'case':<32} {'shape':>14} {'without us':>11} {'with us':>9} {'speed-up':>9} {'max rel err':>12}"
    print(head)
    for name, shape, fn, ref in cases(args.small):
        try:
            t0, e0, w0 = measure(shape, fn, ref, bare, args.budget, args.reps)
            t1, e1, w1 = measure(shape, fn, ref, target, args.budget, args.reps)
        except Exception as e:  # one case over this device's limits: say so, go on
            print(f"{name:<32} {'x'.join(map(str, shape)):>14}  failed: {str(e).splitlines()[0]}")
            continue
        same = "  (same)" if w0 == w1 else ""
        print(
            f"{name:<32} {'x'.join(map(str, shape)):>14} {t0:>11.1f} {t1:>9.1f} {t0 / t1:>8.2f}x "
            f"{max(e0, e1):>12.1e}{same}"
        )


if __name__ == "__main__":
    main()
