"""Row reductions through wgpu-py with and without subgroups: GPU time per run of each
case's kernels (codegen/reduce.py: workgroup-memory trees, or subgroup folds where the
target has the "subgroups" feature).

    python benchmarks/reduce_native.py              # 1024 rows of 64 .. 65536 (a real GPU)
    python benchmarks/reduce_native.py --small      # 64 rows, shorter (lavapipe, CPU)
    python benchmarks/reduce_native.py --class gpu  # the GPU class's kernels on any adapter
    python benchmarks/reduce_native.py --subgroup-sizes 32 32   # fewer levels (true sizes only)

Each case is lowered twice for the adapter's target (or the class --class names), once
without its features and once with them; "same" marks a case whose kernels do not
change (the CPU class reduces rows up to 1024 long in plain loops). The kernels are
timed GPU-side as benchmarks/matmul_native.py times a product: R runs of all of them
recorded into one compute pass, one submit, a 4-byte readback to wait, the best of a
few repeats, the two variants in turn on the same buffers. Each output is checked
against NumPy first.
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
        ("max rows of 1024", (rows, 1024), lambda x: ops.amax(x, axis=-1), lambda x: x.max(-1)),
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


def bind(rt, prog):
    """(pipelines, bind groups) of prog's kernels on the buffers of rt, a Runtime of the
    same graph lowered for another target (the same buffers and slots): every variant
    of a case runs on the same memory (on the H200, a second Runtime's fresh 256 MiB
    buffers alone made a kernel 3x slower)."""
    import wgpu

    from tgweb.backends import native

    assert [b.size for b in prog.buffers] == [b.size for b in rt.program.buffers]
    dev = rt.device
    pipes, groups = [], []
    for k in prog.kernels:
        pipe, bgl = native.pipeline_for(k)
        entries = [
            {
                "binding": i,
                "resource": {"buffer": rt.buffers[b.buffer], "offset": 0, "size": rt.buffers[b.buffer].size},
            }
            for i, b in enumerate(k.bindings)
        ]
        if k.offsets:
            words = array.array("I", k.offsets + [0] * (-len(k.offsets) % 4))
            u = dev.create_buffer_with_data(data=words.tobytes(), usage=wgpu.BufferUsage.UNIFORM)
            entries.append(
                {"binding": len(k.bindings), "resource": {"buffer": u, "offset": 0, "size": u.size}}
            )
        pipes.append(pipe)
        groups.append(dev.create_bind_group(layout=bgl, entries=entries))
    return prog, pipes, groups


def run_seconds(rt, variant, n: int) -> float:
    """Seconds per run of a variant's kernels, n runs recorded into one compute pass and
    submitted at once, waited for by a 4-byte readback."""
    prog, pipes, groups = variant
    dev = rt.device
    out = rt.buffers[prog.outputs["y"].buffer]
    enc = dev.create_command_encoder()
    cp = enc.begin_compute_pass()
    for _ in range(n):
        for k, pipe, group in zip(prog.kernels, pipes, groups):
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


def measure(shape, fn, ref, targets, budget: float, reps: int | None):
    """For each target: (microseconds per run, max relative error, the kernels' WGSL).
    The variants share one Runtime's buffers and are timed in turn, best of 3 each;
    `reps` runs per submit, else enough for about `budget` seconds."""
    import numpy as np

    from tgweb.backends import native

    progs = [lowered(shape, fn, t) for t in targets]
    rt = native.Runtime(progs[0])
    try:
        x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
        rt.write("inputs", "x", array.array("f", x.tobytes()))
        want = np.asarray(ref(x.astype(np.float64)), np.float64)
        variants = [bind(rt, p) for p in progs]
        errs = []
        for v in variants:
            run_seconds(rt, v, 1)
            y = np.frombuffer(rt.read("outputs", "y").tobytes(), np.float32).reshape(want.shape)
            errs.append(float(np.abs(y - want).max() / max(1.0, np.abs(want).max())))
        if reps is None:
            reps = int(max(2, min(2000, budget / max(run_seconds(rt, variants[0], 1), 1e-6))))
        best = [float("inf")] * len(variants)
        for _ in range(3):
            for i, v in enumerate(variants):
                best[i] = min(best[i], run_seconds(rt, v, reps))
        return [(t * 1e6, e, [k.wgsl for k in p.kernels]) for t, e, p in zip(best, errs, progs)]
    finally:
        rt.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--small", action="store_true", help="64 rows, rows up to 16384 (lavapipe)")
    ap.add_argument("--class", dest="cls", choices=("cpu", "gpu"), help="kernels of this class")
    ap.add_argument(
        "--subgroup-sizes",
        type=int,
        nargs=2,
        metavar=("LEAST", "MOST"),
        help="instead of the adapter's bounds",
    )
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
    if args.subgroup_sizes:  # e.g. 32 32 on NVIDIA, where wgpu-py reports 4..128: fewer levels
        target = dataclasses.replace(target, subgroup_sizes=tuple(args.subgroup_sizes))
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
            (t0, e0, w0), (t1, e1, w1) = measure(shape, fn, ref, [bare, target], args.budget, args.reps)
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
