"""Repeat visits (issue 28): the trainer page, page load -> first training step done, on a
first visit (a fresh browser profile) and on the repeat visit after it (the same profile:
the HTTP cache and the page's IndexedDB, compiled Programs included, kept).

    python3 build.py bundle && .venv/bin/python tools/repeat_visit.py [RUNS] [SAMPLE ...]

Each run opens /?autostart#SAMPLE twice in one new profile and prints, per visit, the time
from navigation to the first loss on the page, the worker's start-up phases and the
sample's compile (its source run: tracing and lowering, or the cached Programs of the
trainer and of what it attaches). Samples:
sin and addition unless named. Run it on the H200 machine for the issue's targets.
"""

from __future__ import annotations

import importlib.util
import json
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIRST_LOSS = "(n) => window.app && window.app.state[n] && window.app.state[n].losses.length > 0"


def _build():
    spec = importlib.util.spec_from_file_location("tgweb_build", ROOT / "build.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def visit(ctx, url: str, sample: str) -> dict:
    page = ctx.new_page()
    try:
        page.goto(f"{url}/?autostart#{sample}")
        page.wait_for_function(FIRST_LOSS, arg=sample, timeout=600_000, polling=10)
        ms = page.evaluate("performance.now()")
        info = page.evaluate(f"window.app.state[{json.dumps(sample)}].info")
        t = page.evaluate("window.app.tg.info.timings")
        return {
            "first_step_s": ms / 1000,
            "compile_s": info["compile_s"],
            "cache": info.get("cache"),
            "adapter": page.evaluate("window.app.tg.info.adapter"),
            "timings": t,
        }
    finally:
        page.close()


def main(runs: int, samples: list[str]) -> None:
    from playwright.sync_api import sync_playwright

    build = _build()
    if not (build.SITE / "manifest.json").exists():
        build.bundle_site()
    srv = build.make_server(build.SITE, 0)
    import threading

    threading.Thread(target=srv.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{srv.server_address[1]}"
    exe, args = build.chromium()  # a real GPU's where launch.sh exported GPU_CHROMIUM
    got: dict = {(s, v): [] for s in samples for v in ("first", "repeat")}
    with sync_playwright() as p:
        for _ in range(runs):
            for sample in samples:
                with tempfile.TemporaryDirectory() as profile:
                    ctx = p.chromium.launch_persistent_context(
                        profile, executable_path=exe, args=args, headless=True
                    )
                    try:
                        for v in ("first", "repeat"):
                            r = visit(ctx, url, sample)
                            got[(sample, v)].append(r)
                            print(f"{sample:9s} {v:6s} {json.dumps(r)}", flush=True)
                    finally:
                        ctx.close()
    srv.shutdown()
    print("\nsample    visit   page load -> first step (median, s)   compile (s)   runs")
    for (sample, v), rs in got.items():
        firsts = [r["first_step_s"] for r in rs]
        comp = statistics.median(r["compile_s"] for r in rs)
        each = ", ".join(f"{x:.2f}" for x in firsts)
        print(f"{sample:9s} {v:6s}  {statistics.median(firsts):6.2f}{'':30s}{comp:6.2f}   {each}")


if __name__ == "__main__":
    args = sys.argv[1:]
    n = int(args.pop(0)) if args and args[0].isdigit() else 3
    main(n, args or ["sin", "addition"])
