#!/usr/bin/env python3
"""GPU time of each kernel of a sample's training step inside the whole step, natively:
a timestamp written before every dispatch of one compute pass (wgpu's
timestamp-query-inside-passes), so each kernel is timed on the step's own data and
after the kernels it follows, not alone. Also the whole step recorded 5 times in one
pass, and, with --tuning, the same for the step lowered with other GPU-class knobs.
Parameters stay zero: no initial values are drawn (the timings do not depend on them).
Prints figures; not a test.

    python3 benchmarks/kernel_times.py [--sample shakespeare] [--size full]
        [--top 40] [--tuning '{"split_k_tiles": 1024}' ...] [--precision mixed]
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import wgpu  # noqa: E402
from wgpu.backends.wgpu_native import GPUAdapter  # noqa: E402
from wgpu.backends.wgpu_native._ffi import lib  # noqa: E402

from tgweb import samples  # noqa: E402
from tgweb.backends import native  # noqa: E402
from tgweb.compile import build_training_graph  # noqa: E402
from tgweb.lower import lower  # noqa: E402
from tgweb.optim.optimizers import from_spec  # noqa: E402

_TIMESTAMPS = ["timestamp-query", "timestamp-query-inside-passes"]
_request = GPUAdapter.request_device_sync


def _with_timestamps(self, *, required_features=(), **kw):
    # the native backend's device, plus the features this profile needs
    return _request(self, required_features=list(required_features) + _TIMESTAMPS, **kw)


GPUAdapter.request_device_sync = _with_timestamps


def program_for(mod, overrides: dict, precision: str = "float32"):
    opt, clip = from_spec(mod.OPTIMIZER)
    graph = build_training_graph(mod.Model(), mod.loss_fn, mod.INPUTS, opt, clip, None, precision)
    target = native.device_target()
    target = dataclasses.replace(target, tuning={**target.tuning, **overrides})
    return lower(graph, name="step", limits=native.device_limits(), target=target)


def whole_ms(rt, copies: int = 5) -> float:
    """Best of 3: the step recorded `copies` times in one pass, less an empty pass."""

    def run(n):
        enc = rt.device.create_command_encoder()
        cp = enc.begin_compute_pass()
        for _ in range(n):
            rt._record(cp, rt._steps)
        cp.end()
        rt.device.queue.submit([enc.finish()])
        rt.device.queue.read_buffer(rt.buffers[0], 0, 4)

    def best(n):
        out = 1e9
        for _ in range(3):
            t = time.perf_counter()
            run(n)
            out = min(out, time.perf_counter() - t)
        return out

    run(1)
    return (best(copies) - best(0)) / copies * 1e3


def kernel_ms(rt, reps: int = 5) -> list[float]:
    """Median over `reps` steps of each kernel's time: from the timestamp before its
    dispatch to the one before the next."""
    n = len(rt._steps)
    qs = rt.device.create_query_set(type="timestamp", count=n + 1)
    usage = wgpu.BufferUsage.QUERY_RESOLVE | wgpu.BufferUsage.COPY_SRC
    dst = rt.device.create_buffer(size=8 * (n + 1), usage=usage)
    period = lib.wgpuQueueGetTimestampPeriod(rt.device.queue._internal)
    runs = []
    for _ in range(reps):
        enc = rt.device.create_command_encoder()
        cp = enc.begin_compute_pass()
        for i, step in enumerate(rt._steps):
            cp._write_timestamp(qs, i)
            rt._record(cp, [step])
        cp._write_timestamp(qs, n)
        cp.end()
        enc.resolve_query_set(qs, 0, n + 1, dst, 0)
        rt.device.queue.submit([enc.finish()])
        ticks = rt.device.queue.read_buffer(dst).cast("Q")
        runs.append([(ticks[i + 1] - ticks[i]) * period * 1e-6 for i in range(n)])
    return [statistics.median(r[i] for r in runs) for i in range(n)]


def report(label: str, rt, top: int) -> None:
    ks = rt.program.kernels
    times = kernel_ms(rt)
    print(
        f"== {label}: whole step {whole_ms(rt):.2f} ms; timestamps sum {sum(times):.2f} ms, {len(ks)} kernels"
    )
    rows = sorted(zip(times, ks), key=lambda r: -r[0])
    for t, k in rows[:top]:
        ops = ",".join(sorted(set(k.ops or [])))[:50]
        print(f"{t:8.3f} ms  {k.name[:48]:48s} {str(tuple(k.dispatch)):16s} {ops}")
    by = collections.defaultdict(lambda: [0.0, 0])
    for t, k in rows:
        key = ",".join(sorted(set(k.ops or []))) or k.name
        by[key][0] += t
        by[key][1] += 1
    print("by ops:")
    for key, (t, c) in sorted(by.items(), key=lambda x: -x[1][0])[:top]:
        print(f"{t:8.2f} ms  x{c:<4d} {key[:90]}")
    sys.stdout.flush()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sample", default="shakespeare")
    ap.add_argument("--size", default="full", help="for samples with sizes (shakespeare)")
    ap.add_argument("--top", type=int, default=40)
    ap.add_argument("--tuning", action="append", default=[], help="JSON of GPU-class knobs to override")
    ap.add_argument("--precision", default="float32", help='"float32" or "mixed" (needs shader-f16)')
    a = ap.parse_args()
    mod = samples.get(a.sample)
    if hasattr(mod, "sized"):
        mod = mod.sized(a.size)
    print("adapter:", native.adapter_info().get("device"), flush=True)
    for over in [{}] + [json.loads(s) for s in a.tuning]:
        t0 = time.perf_counter()
        program = program_for(mod, over, a.precision)
        rt = native.Runtime(program)
        print(f"lowered and set up in {time.perf_counter() - t0:.1f} s; tuning {over or 'as is'}", flush=True)
        report(json.dumps(over) if over else "as is", rt, a.top)
        rt.close()


if __name__ == "__main__":
    main()
