"""Repeat visits (issues 28 and 38): the trainer page as its visitor sees it, page load -> a
sample's first training step on the page, on a first visit (a fresh browser profile) and on
the repeat visit after it (the same profile: the HTTP cache, V8's code cache and the page's
IndexedDB, the compiled Programs and the Pyodide snapshot included, kept).

    python3 build.py bundle && .venv/bin/python tools/repeat_visit.py [--runs N]
        [--site DIR --site DIR2 ...] [--linger S] [--visits V] [--latency MS] [SAMPLE ...]

Each run opens /?autostart#SAMPLE twice in one new profile. The first visit stays open until
the page says it kept its Python snapshot for the next visit (a visitor's tab stays open
longer than the first step), then closes; the repeat visit follows in the same profile
(--visits 3 or more: more repeat visits after it, "repeat 2" and on: Chromium keeps a
script's compiled code from its second compile on, so the first repeat visit compiles
Pyodide's module script again and later ones take it from V8's cache). For
each visit it prints the time from navigation to the first loss on the page, the worker's
start-up phases (Ready, the wasm, Python's restore) and the sample's compile (its source run:
tracing and lowering, or the cached Programs of the trainer and what it attaches). Samples:
sin and addition unless named. With several --site (bundled sites, e.g. a copy of site/ from
before a change) the runs alternate between them (the machine's load drifts) and each site
gets its column. Run it on the H200 machine for the issue's targets (launch.sh exports
GPU_CHROMIUM; the adapter is printed). --latency MS: each request waits that long at the
server, as for a visitor far from it (a repeat visit asks the server for the page alone:
build.py's make_server lets the browser keep the site's versioned files).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import tempfile
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIRST_LOSS = "(n) => window.app && window.app.state[n] && window.app.state[n].losses.length > 0"
KEPT_SNAPSHOT_MS = 60_000  # how long a first visit may take to keep its snapshot


def _build():
    spec = importlib.util.spec_from_file_location("tgweb_build", ROOT / "build.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def visit(ctx, url: str, sample: str, keep: bool = False, linger: float = 0.0) -> dict:
    """One visit; keep: stay until the page has kept its Python snapshot (the first visit),
    then linger seconds more (the browser's caches, V8's compiled wasm among them, fill
    while a tab stays open)."""
    page = ctx.new_page()
    try:
        page.goto(f"{url}/?autostart#{sample}")
        page.wait_for_function(FIRST_LOSS, arg=sample, timeout=600_000, polling=10)
        ms = page.evaluate("performance.now()")
        info = page.evaluate(f"window.app.state[{json.dumps(sample)}].info")
        t = page.evaluate("window.app.tg.info.timings")
        out = {
            "first_step_s": ms / 1000,
            "ready_s": t["page_load_to_ready"] / 1000,
            "compile_s": info["compile_s"],
            "cache": info.get("cache"),
            "adapter": page.evaluate("window.app.tg.info.adapter"),
            "timings": t,
            # the page's own phases: start-up, and Start to the first loss
            "waits": page.evaluate("window.app.waits"),
        }
        if keep:
            page.wait_for_function("window.app.snapshot", timeout=KEPT_SNAPSHOT_MS)
            out["kept"] = page.evaluate("window.app.snapshot")
            page.wait_for_timeout(linger * 1000)
        return out
    finally:
        page.close()


def serve_sites(build, sites: list[Path], latency: float = 0.0) -> dict[str, str]:
    """Each site served on a port of its own (build.make_server, in a thread), by name (its
    folder's; the project's for site/): name -> URL. site/ alone is bundled first if it has
    not been."""
    if sites == [build.SITE] and not (build.SITE / "manifest.json").exists():
        build.bundle_site()
    urls = {}
    for site in sites:
        srv = build.make_server(site, 0, latency=latency)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        urls[site.name if site.name != "site" else site.parent.name] = (
            f"http://127.0.0.1:{srv.server_address[1]}"
        )
    return urls


def _names(visits: int) -> list[str]:
    return ["first", "repeat"] + [f"repeat {k}" for k in range(2, visits)]


def main(
    runs: int,
    samples: list[str],
    sites: list[Path],
    linger: float = 0.0,
    visits: int = 2,
    latency_ms: float = 0.0,
) -> None:
    from playwright.sync_api import sync_playwright

    build = _build()
    urls = serve_sites(build, sites, latency_ms / 1000)
    exe, args = build.chromium()  # a real GPU's where launch.sh exported GPU_CHROMIUM
    got: dict = {(s, smp, v): [] for s in urls for smp in samples for v in _names(visits)}
    with sync_playwright() as p:
        for _ in range(runs):
            for sample in samples:
                for site, url in urls.items():
                    with tempfile.TemporaryDirectory() as profile:
                        ctx = p.chromium.launch_persistent_context(
                            profile, executable_path=exe, args=args, headless=True
                        )
                        try:
                            for v in _names(visits):
                                r = visit(ctx, url, sample, keep=v == "first", linger=linger)
                                got[(site, sample, v)].append(r)
                                print(f"{site} {sample} {v} {json.dumps(r)}", flush=True)
                        finally:
                            ctx.close()
    a = next(iter(got.values()))[0]["adapter"]
    print(f"\nadapter: {a.get('vendor')} {a.get('architecture')} {a.get('description')}")
    head = "site            sample     visit    first step (median s)  Ready  wasm  Python  compile"
    print(head + "   each run")
    for (site, sample, v), rs in got.items():
        med = {k: statistics.median(r[k] for r in rs) for k in ("first_step_s", "ready_s", "compile_s")}
        wasm = statistics.median(r["timings"].get("wasm", float("nan")) for r in rs) / 1000
        py = statistics.median(r["timings"].get("pyodide", float("nan")) for r in rs) / 1000
        each = ", ".join(f"{r['first_step_s']:.2f}" for r in rs)
        print(
            f"{site[-15:]:15s} {sample:10s} {v:9s}{med['first_step_s']:9.2f}{'':12s}{med['ready_s']:6.2f}"
            f"{wasm:6.2f}{py:8.2f}{med['compile_s']:9.2f}   {each}"
        )
    snaps = {r["timings"].get("snapshot") for (_, _, v), rs in got.items() if v != "first" for r in rs}
    print(f"repeat visits' Python: {', '.join(sorted(map(str, snaps)))} (restored: from the kept snapshot)")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--site", action="append", type=Path, help="a bundled site (default: site/)")
    ap.add_argument(
        "--linger",
        type=float,
        default=0.0,
        metavar="S",
        help="seconds the first visit stays open after keeping its snapshot (default 0)",
    )
    ap.add_argument(
        "--visits", type=int, default=2, help="visits in each profile: the first, then repeats (default 2)"
    )
    ap.add_argument(
        "--latency",
        type=float,
        default=0.0,
        metavar="MS",
        help="each request's wait at the server (default 0)",
    )
    ap.add_argument("samples", nargs="*", default=["sin", "addition"])
    a = ap.parse_args()
    if a.visits < 2:
        ap.error("--visits must be at least 2 (a first visit and a repeat)")
    sites = [s.resolve() for s in a.site] if a.site else [_build().SITE]
    main(a.runs, a.samples, sites, a.linger, a.visits, a.latency)
