#!/usr/bin/env python3
"""The shakespeare page's pace (issue 36): its training loop beside a plain loop, and its
sampler's characters per second beside the whole-window sampler it replaced and nanoGPT's
`generate` in PyTorch on the same GPU. Prints figures; not a test.

    python3 benchmarks/page_pace.py [--size full|small] [--steps 500] [--eval-every 250]
        [--precision float32|mixed] [--rounds 1] [--json PATH]
    python3 benchmarks/page_pace.py --tiny     # the small size, 40 steps: checks the script

The page source itself (web/page/samples/shakespeare.py, its size and EVAL_EVERY edited
as benchmarks/time_to_loss.py edits them) runs natively (wgpu-py, CPython) and, when
GPU_CHROMIUM is set (../shared/tools/gpu-chromium/README.md), in tgweb's worker in
Chromium as benchmarks/bench.py launches it. In each:

  plain loop   trainer.step over the sample's batches, each loss read a step late
  page loop    the source's train(): the loss events, and every EVAL_EVERY steps the
               evaluation (40 held-out batches at full size) and 240 characters sent
               between steps and shown DEPTH steps later. The rounds start mid-period,
               so each holds --steps / EVAL_EVERY evaluations, all shown inside it.
  sampler      characters/s of LENGTH (240) characters after "\\n" on an idle GPU: the
               page's (keys and values cached, drawn on the GPU, only ids read back), and
               the whole-window sampler (one full forward and a read-back of every
               position's distribution per character)
  evaluation   seconds of metric() (each batch waited for) and of metric_later()

Natively, when PyTorch is installed: nanoGPT's generate (generate_speed.nanogpt_generate:
crop to the block, a forward of the whole context, logits of the last position /
temperature, softmax, multinomial; top-k off, as the page draws) of the same GPT for 240
characters, fp32 and bf16 autocast, timed to the last character on the device.
benchmarks/generate_speed.py times the samplers alone, for longer texts. The issue's
targets: the page loop within 1.1x the plain loop, the page's sampler at least as fast as
nanoGPT's generate.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))

from generate_speed import nanogpt_generate, run_chromium, run_native  # noqa: E402
from time_to_loss import edited  # noqa: E402

# runs the page source and times it; natively in CPython, in Chromium through tg.run (the
# globals SOURCE, STEPS, ROUNDS, WARM)
BENCH = """
import itertools
import time
from tgweb import pipeline, worker

ns = {"__name__": "__main__", "__file__": "shakespeare.py"}
t = time.perf_counter()
exec(compile(SOURCE, "shakespeare.py", "exec"), ns)
compile_s = time.perf_counter() - t
tr, sample, every, length = ns["trainer"], ns["sample"], ns["EVAL_EVERY"], ns["LENGTH"]


def plain(n):
    prev, t = None, time.perf_counter()
    for _ in range(n):
        r = tr.step(**sample.batch(tr.calls))
        if prev is not None:
            prev.loss
        prev = r
    prev.loss
    return 1000 * (time.perf_counter() - t) / n


def page(n):
    plain((every // 2 - tr.calls) % every or every)  # start mid-period: every report shown inside
    t = time.perf_counter()
    ns["train"](n)
    worker.flush()
    tr.steps  # every step read back
    return 1000 * (time.perf_counter() - t) / n


def per_s(draw, n):
    tr.steps  # an idle GPU
    t = time.perf_counter()
    got = "".join(itertools.islice(draw(), n))
    return len(got) / (time.perf_counter() - t)


def seconds(fn):
    tr.steps
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


plain(WARM)
page(WARM)  # every program's pipelines made, the GPU clocked up
out = {"compile_s": compile_s, "precision": tr.precision, "eval_every": every, "depth": pipeline.DEPTH,
       "plain_ms": [], "page_ms": []}
for _ in range(ROUNDS):
    out["plain_ms"].append(plain(STEPS))
    out["page_ms"].append(page(STEPS))
cached = lambda: sample.stream_cached(ns["sampler"], ahead=length)
full = tr.attach(sample.sample_probs, inputs=sample.SAMPLE_INPUTS)
window = lambda: sample.stream(lambda b: full.run(**b).output)
out["cached_chars_per_s"] = [per_s(cached, length) for _ in range(3)]
out["window_chars_per_s"] = [per_s(window, length) for _ in range(2)]
ev = ns["evaluate"]
out["eval_s"] = seconds(lambda: sample.metric(lambda b: ev.run(**b).output))
out["eval_later_s"] = seconds(lambda: sample.metric_later(ev.submit)())
tr.close()
out
"""


def page_source(size: str, eval_every: int | None, precision: str | None) -> str:
    source = edited((ROOT / "web/page/samples/shakespeare.py").read_text(), size, eval_every)
    if precision is not None:
        line = "PRECISION = sample.choose_precision()"
        if source.count(line) != 1:
            raise ValueError(f"the shakespeare page source no longer has the line {line!r}")
        source = source.replace(line, f"PRECISION = {precision!r}")
    return source


def native(globals_: dict) -> dict:
    return run_native(BENCH, globals_)


def chromium(page, globals_: dict) -> dict:
    return run_chromium(page, BENCH, globals_)


def report(where: str, r: dict) -> list[str]:
    if "error" in r or "skipped" in r:
        return [f"{where}: {r.get('error') or r['skipped']}"]
    plain, page = statistics.median(r["plain_ms"]), statistics.median(r["page_ms"])
    return [
        f"{where}: {r['precision']}, compile {r['compile_s']:.1f} s, "
        f"evaluation every {r['eval_every']} steps",
        f"  plain loop {plain:.2f} ms/step, page loop {page:.2f} ms/step: "
        f"{page / plain:.3f}x (target <= 1.1x)",
        f"  sampler: cached {max(r['cached_chars_per_s']):,.0f} chars/s, "
        f"whole window {max(r['window_chars_per_s']):,.0f} chars/s",
        f"  evaluation: metric {r['eval_s']:.3f} s, metric_later {r['eval_later_s']:.3f} s",
    ]


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", choices=("full", "small"), default="full")
    ap.add_argument(
        "--steps", type=int, default=500, help="steps a round of each loop (a multiple of --eval-every)"
    )
    ap.add_argument("--eval-every", type=int, help="the source's EVAL_EVERY (250)")
    ap.add_argument("--precision", choices=("float32", "mixed"), help="instead of the source's choice")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--tiny", action="store_true", help="the small size, 40 steps: checks the script runs")
    ap.add_argument("--chromium", action="store_true", help="Chromium without GPU_CHROMIUM too (SwiftShader)")
    ap.add_argument("--json", metavar="PATH", help="also write every measurement as JSON")
    a = ap.parse_args(argv)
    if a.tiny:
        a.size, a.steps, a.eval_every = "small", 40, 20
    every = a.eval_every or 250
    if a.steps % every or every // 2 <= 8:  # a report is shown DEPTH (8) steps after it is sent
        raise SystemExit(f"--steps must be a multiple of EVAL_EVERY ({every}), and EVAL_EVERY over 16")
    g = {"SOURCE": page_source(a.size, a.eval_every, a.precision), "STEPS": a.steps, "ROUNDS": a.rounds}
    g["WARM"] = every if a.tiny else 2 * every
    from tgweb.samples import shakespeare

    cfg = shakespeare.SIZES[a.size]
    results, lines = {}, []
    results["native"] = native(g)
    lines += report("tgweb native", results["native"])
    if os.environ.get("GPU_CHROMIUM") or a.chromium:
        import bench  # its Chromium, flags and site server

        with bench.tgweb_page() as (page, adapter):
            page.set_default_timeout(0)
            results["chromium"] = chromium(page, g)
            lines += report(f"tgweb chromium ({adapter})", results["chromium"])
    else:
        lines.append(
            "tgweb chromium: skipped, GPU_CHROMIUM is not set (../shared/tools/gpu-chromium/README.md)"
        )
    try:
        import torch  # noqa: F401
    except ImportError:
        lines.append("nanoGPT generate: skipped, PyTorch is not installed")
    else:
        for mode in ("fp32", "bf16"):
            r = results[f"torch {mode}"] = nanogpt_generate(cfg, 240, mode)
            lines.append(f"nanoGPT generate ({r['where']}): {max(r['chars_per_s']):,.0f} chars/s")
    print(f"shakespeare {a.size} ({cfg.layers} layers, {cfg.dim} wide, block {cfg.block}); "
          f"{math.prod((cfg.batch, cfg.block)):,} tokens a step")  # fmt: skip
    print("\n".join(lines))
    if a.json:
        Path(a.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
