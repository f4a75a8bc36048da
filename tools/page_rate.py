"""How fast the trainer page trains a sample once it has started: the steps it reports per
second over a window of training after its first loss (the step of the last loss on the
page, read at the window's two ends), on a first visit in a fresh browser context.

    python3 build.py bundle && .venv/bin/python tools/page_rate.py [--runs N] [--settle S]
        [--window S] [--site DIR --site DIR2 ...] SAMPLE

With several --site (bundled sites: a copy of site/ from before a change) the runs alternate
between them (the machine's load drifts) and each site's median is printed. For kernel
choices that trade set-up time against step time (benchmarks/RESULTS.md); on the H200 machine
launch.sh exports GPU_CHROMIUM (the adapter is printed).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from repeat_visit import FIRST_LOSS, _build, serve_sites  # noqa: E402

LAST_STEP = "(n) => { const l = window.app.state[n].losses; return [l[l.length - 1][0], performance.now()]; }"


def rate(page, sample: str, settle: float, window: float) -> float:
    """Steps per second over `window` seconds, from `settle` seconds after the first loss."""
    page.wait_for_function(FIRST_LOSS, arg=sample, timeout=600_000, polling=10)
    time.sleep(settle)
    step0, t0 = page.evaluate(LAST_STEP, sample)
    time.sleep(window)
    step1, t1 = page.evaluate(LAST_STEP, sample)
    return (step1 - step0) / ((t1 - t0) / 1000)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("sample")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument(
        "--settle", type=float, default=3.0, help="seconds after the first loss before the window"
    )
    ap.add_argument("--window", type=float, default=10.0, help="seconds of training counted")
    ap.add_argument("--site", type=Path, action="append", help="a bundled site (default: site/)")
    args = ap.parse_args(argv)
    from playwright.sync_api import sync_playwright

    build = _build()
    urls = serve_sites(build, args.site or [build.SITE])
    exe, launch_args = build.chromium()
    got: dict[str, list[float]] = {name: [] for name in urls}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=exe, args=launch_args)
        try:
            for _ in range(args.runs):
                for name, url in urls.items():
                    ctx = browser.new_context()
                    try:
                        page = ctx.new_page()
                        page.goto(f"{url}/?autostart#{args.sample}")
                        got[name].append(rate(page, args.sample, args.settle, args.window))
                        if len(got[name]) == 1:
                            print(
                                "adapter:",
                                json.dumps(page.evaluate("window.app.tg.info.adapter")),
                                flush=True,
                            )
                    finally:
                        ctx.close()
                    print(f"{name} {args.sample} {got[name][-1]:.1f} steps/s", flush=True)
        finally:
            browser.close()
    for name, rates in got.items():
        runs = ", ".join(f"{r:.1f}" for r in rates)
        print(f"{name:15s} {args.sample:10s} {statistics.median(rates):8.1f} steps/s (median)   {runs}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
