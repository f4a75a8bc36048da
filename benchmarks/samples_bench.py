#!/usr/bin/env python3
"""Every sample's training step in Chromium, in tgweb's worker: compile time, dispatches
per step, and ms per step (pipelined steps, every loss read one step late, as the page's
loops read them), one sample after another in one page. Prints a Markdown table for
benchmarks/RESULTS.md; not a test.

    python3 benchmarks/samples_bench.py [--steps 20] [--only NAME ...]

Batches are made before the timed steps (for the reinforcement-learning samples, played
by their initial policy), so the figures are the step alone. Chromium is launched as
benchmarks/bench.py does; the adapter it ran on is printed with the table.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))

import bench  # noqa: E402  (its Chromium, flags and site server)

from tgweb import samples  # noqa: E402

SOURCE = """
import time
import tgweb as tg
from tgweb import samples
mod = samples.get(NAME)
t = time.perf_counter()
tr = samples.compile(NAME, seed=0)
compile_s = time.perf_counter() - t
bs = [mod.batch(i) for i in range(4)]
for i in range(3):
    tr.step(**bs[i % 4]).loss
per, prev = [], None
for i in range(STEPS):
    t = time.perf_counter()
    r = tr.step(**bs[i % 4])
    if prev is not None:
        prev.loss
    per.append(1000 * (time.perf_counter() - t))
    prev = r
prev.loss
out = {"compile_s": compile_s, "ms": per, "dispatches": len(tr.program.kernels),
       "params": sum(len(v) if hasattr(v, "__len__") else v.size for v in tr.params().values())}
tr.close()
out
"""


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--only", action="append")
    a = ap.parse_args(argv)
    names = a.only or list(samples.SAMPLES)
    rows = []
    with bench.tgweb_page() as (page, adapter):
        for name in names:
            got = page.evaluate(
                "([src, name, steps]) => window.tg.run(src, { globals: { NAME: name, STEPS: steps } })"
                ".catch((e) => ({ error: String(e.message).split('\\n').slice(-2).join(' ') }))",
                [SOURCE, name, a.steps],
            )
            if "error" in got:
                rows.append(f"| {name} | error: {got['error'][:120]} | | | |")
            else:
                ms, c = statistics.median(got["ms"]), got["compile_s"]
                rows.append(f"| {name} | {got['params']:,} | {c:.2f} | {got['dispatches']} | {ms:.1f} |")
            print(rows[-1], flush=True)
    print(f"\nadapter: {adapter}\n")
    print("| sample | parameters | compile, s | dispatches per step | ms/step (median) |")
    print("|---|---|---|---|---|")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
