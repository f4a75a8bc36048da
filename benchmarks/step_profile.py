#!/usr/bin/env python3
"""Where a training step's host time goes in the browser worker: cProfile (inside
Pyodide) of a sample's pipelined steps and of steps read every 10th, beside the same
steps timed without the profiler. Prints figures; not a test.

    python3 benchmarks/step_profile.py [--sample addition] [--steps 60]

Launches Chromium as benchmarks/bench.py does (GPU_CHROMIUM and GPU_CHROMIUM_FLAGS
from ../shared/tools/gpu-chromium's launch.sh select a real GPU) and prints the adapter.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench  # noqa: E402  (its Chromium, flags and site server)

SOURCE = """
import cProfile, io, pstats, time
from tgweb import samples
name, steps = SAMPLE, STEPS
tr = samples.compile(name)
mod = samples.get(name)
bs = [mod.batch(i) for i in range(8)]
for i in range(10):
    tr.step(**bs[i % 8]).loss

def pipelined(n):
    prev = None
    for i in range(n):
        r = tr.step(**bs[i % 8])
        if prev is not None:
            prev.loss
        prev = r
    prev.loss

def at_once(n):
    for i in range(n):
        tr.step(**bs[i % 8]).loss

out = {}
for label, fn in (("pipelined", pipelined), ("at_once", at_once)):
    t = time.perf_counter()
    fn(steps)
    out[label + "_ms"] = (time.perf_counter() - t) / steps * 1000
    prof = cProfile.Profile()
    prof.enable()
    fn(steps)
    prof.disable()
    s = io.StringIO()
    pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(14)
    out[label + "_profile"] = s.getvalue()
out
"""


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sample", default="addition")
    ap.add_argument("--steps", type=int, default=60)
    a = ap.parse_args(argv)
    with bench.tgweb_page() as (page, adapter):
        got = page.evaluate(
            "([src, sample, steps]) => window.tg.run(src, { globals: { SAMPLE: sample, STEPS: steps } })",
            [SOURCE, a.sample, a.steps],
        )
    print("adapter:", adapter)
    for label in ("pipelined", "at_once"):
        print(f"\n== {a.sample}, {label}: {got[label + '_ms']:.2f} ms/step (without the profiler)")
        print(got[label + "_profile"])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
