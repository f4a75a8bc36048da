"""A visit's worker, traced (issue 38): the trainer page opened N times in one browser
profile (the first visit, then repeat visits), each under Chromium's own tracing, and
what held the tgweb worker's thread while Python started: when Pyodide's wasm arrived,
whether V8 took it from its code cache, Pyodide's module scripts (compiled afresh or taken
from V8's cache), the worker thread's long tasks.

    python3 build.py bundle && .venv/bin/python tools/trace_visit.py [--site DIR]
        [--visits N] [--linger S] [--out DIR] [SAMPLE]

For each visit it prints the first loss and the compile (ms since navigation), the
worker's timings (tgweb.mjs's tg.info.timings), then, in ms since navigation: the
wasm's stream (its first and last chunk of bytes), V8's hashing of them
(wasm.FinishStreaming), its code cache (the compiled code taken from an earlier visit:
Chromium's v8.wasm.moduleCacheHit, or V8's wasm.Deserialize) and Pyodide's instantiation,
and every task of at least --long ms on the worker's thread (compiling and running
scripts, messages, garbage collection). The first visit stays open until the page has
kept its snapshot, then --linger seconds more (V8 writes the wasm's code cache while a tab
stays open). --out keeps each visit's trace (Chrome's JSON: chrome://tracing or Perfetto
open it). Sample: sin unless named. On the H200 machine launch.sh exports GPU_CHROMIUM (the
adapter is printed).

Last, each visit's busiest threads of all of Chromium's processes from navigation to the
first loss: the CPU time of their top-level tasks (the trace's thread time), and the sum
over every thread. A sum near the number of cores times the first loss's time says the
visit waits for the CPU, and the threads say whose work it is (on SwiftShader: the GPU
process's pool compiling pipelines).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from repeat_visit import FIRST_LOSS, KEPT_SNAPSHOT_MS, _build  # noqa: E402

CATEGORIES = [
    "v8.wasm",
    "v8",
    "devtools.timeline",
    "blink.user_timing",
    "disabled-by-default-v8.wasm.detailed",
    "disabled-by-default-devtools.timeline",  # v8.wasm.moduleCacheHit: V8's code cache taken
    "toplevel",  # every thread's tasks, with their thread time (thread_cpu)
]
# the threads listed by thread_cpu's table
BUSIEST = 8
# the worker thread's tasks worth a line: script compiled or run, a message handled, a GC
TASKS = {
    "v8.compileModule",
    "v8.evaluateModule",
    "v8.callFunction",
    "HandlePostMessage",
    "MajorGC",
    "v8.compile",
}


def _navigation(events: list[dict]) -> tuple[dict, float] | None:
    """The first event of the wasm's stream, and the page's navigation (the last one before
    the worker streamed the wasm, in the trace's microseconds); None without both."""
    starts = [e for e in events if e["name"] == "wasm.StartStreamingCompilation"]
    if not starts:
        return None
    start = min(starts, key=lambda e: e["ts"])
    navs = [e["ts"] for e in events if e["name"] == "navigationStart" and e["ts"] <= start["ts"]]
    return (start, max(navs)) if navs else None


def wasm_timeline(events: list[dict], long_ms: float) -> dict:
    """From one visit's trace events: the wasm's stream, V8's steps with it, and the long
    tasks of the thread that streamed it (the tgweb worker's), in ms since navigation.
    Empty where no wasm was streamed (a page that never started tgweb)."""
    found = _navigation(events)
    if found is None:
        return {}
    start, t0 = found
    tid = start["tid"]

    def ms(e, key="ts"):
        return round((e[key] - t0) / 1000, 1)

    chunks = [ms(e) for e in events if e["name"] == "wasm.OnBytesReceived" and e.get("tid") == tid]
    steps = [
        (ms(e), round(e.get("dur", 0) / 1000, 1), e["name"])
        for e in events
        if e["name"] in ("wasm.FinishStreaming", "wasm.Deserialize")
        or (e["name"] == "wasm.SyncInstantiate" and e.get("dur", 0) >= 3000)
    ]
    tasks = [
        (ms(e), round(e["dur"] / 1000, 1), e["name"])
        for e in events
        if e.get("tid") == tid
        and e.get("ph") == "X"
        and e["name"] in TASKS
        and e.get("dur", 0) >= long_ms * 1000
    ]
    # Pyodide's module scripts compiled on that thread, and the code V8 took from its cache
    scripts = [
        (
            ms(e),
            round(e.get("dur", 0) / 1000, 1),
            url.split("?")[0].rsplit("/", 1)[-1],
            data.get("consumedCacheSize", 0),
        )
        for e in events
        if e.get("tid") == tid and e["name"] == "v8.compileModule"
        for data in [e.get("args", {}).get("data", {})]
        for url in [data.get("url", "")]
        if "/pyodide/" in url
    ]
    return {
        "scripts": sorted(scripts),
        "stream": ms(start),
        "bytes": (chunks[0], chunks[-1]) if chunks else None,
        # Chromium says so in its own event; wasm.Deserialize is V8's, where it traces it
        "code_cache": any(name == "wasm.Deserialize" for _, _, name in steps)
        or any(e["name"] == "v8.wasm.moduleCacheHit" for e in events),
        "steps": sorted(steps),
        "tasks": sorted(tasks),
    }


def thread_cpu(events: list[dict], until_ms: float) -> dict:
    """The CPU time of every thread's top-level tasks (category "toplevel", their thread
    time "tdur") from the page's navigation (the last before the wasm's stream, as
    wasm_timeline) until until_ms after it, a task across either end counted in proportion:
    {"threads": [(process, thread, ms)] busiest first, "total": ms}. Empty without both."""
    found = _navigation(events)
    if found is None:
        return {}
    t0 = found[1]
    t1 = t0 + until_ms * 1000
    names: dict = {}
    for e in events:
        if e.get("ph") == "M" and e["name"] in ("process_name", "thread_name"):
            key = e.get("pid") if e["name"] == "process_name" else (e.get("pid"), e.get("tid"))
            names[key] = e.get("args", {}).get("name", "")
    busy: dict = {}
    for e in events:
        if e.get("cat") != "toplevel" or e.get("ph") != "X" or not e.get("dur") or "tdur" not in e:
            continue
        inside = min(e["ts"] + e["dur"], t1) - max(e["ts"], t0)
        if inside > 0:
            key = (e.get("pid"), e.get("tid"))
            busy[key] = busy.get(key, 0.0) + e["tdur"] * inside / e["dur"] / 1000
    rows = sorted(
        ((names.get(k[0], str(k[0])), names.get(k, str(k[1])), round(ms, 1)) for k, ms in busy.items()),
        key=lambda r: -r[2],
    )
    return {"threads": rows, "total": round(sum(busy.values()), 1)} if rows else {}


def _launch(exe: str, args: list[str], profile: str) -> tuple[subprocess.Popen, str]:
    """Chromium with a DevTools port of its own choosing (read back from the profile)."""
    proc = subprocess.Popen(
        [exe, *args, "--headless", "--remote-debugging-port=0", f"--user-data-dir={profile}", "about:blank"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    port_file = Path(profile) / "DevToolsActivePort"
    for _ in range(300):
        if port_file.exists() and port_file.read_text().strip():
            return proc, f"http://127.0.0.1:{port_file.read_text().split()[0]}"
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    proc.kill()
    sys.exit(f"{exe} did not open its DevTools port")


def main(
    site: Path, sample: str, visits: int, linger: float, long_ms: float, out: Path | None, chromium=None
):
    """The visits' results, printed as they come. chromium: Playwright's BrowserType to
    connect with (one already running in this thread, as under pytest), else its own."""
    if chromium is None:
        from playwright.sync_api import sync_playwright

        with sync_playwright() as p:
            return main(site, sample, visits, linger, long_ms, out, p.chromium)
    build = _build()
    if site == build.SITE and not (site / "manifest.json").exists():
        build.bundle_site()
    srv = build.make_server(site, 0)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{srv.server_address[1]}/?autostart#{sample}"
    exe, args = build.chromium()
    results = []
    # the profile's folder goes even where a Chromium process wrote into it at the end
    with (
        tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as profile,
        tempfile.TemporaryDirectory() as traces,
    ):
        proc, endpoint = _launch(exe, args, profile)
        browser = None
        try:
            browser = chromium.connect_over_cdp(endpoint)
            ctx = browser.contexts[0]
            for v in range(visits):
                page = ctx.new_page()
                path = Path(traces) / f"visit{v}.json"
                browser.start_tracing(path=str(path), categories=CATEGORIES)
                try:
                    page.goto(url)
                    page.wait_for_function(FIRST_LOSS, arg=sample, timeout=600_000, polling=10)
                    r = {
                        "visit": "first" if v == 0 else "repeat",
                        "first_loss_ms": round(page.evaluate("performance.now()")),
                        "compile_ms": round(
                            1000 * page.evaluate(f"window.app.state[{json.dumps(sample)}].info.compile_s")
                        ),
                        "timings": page.evaluate("window.app.tg.info.timings"),
                        "adapter": page.evaluate("window.app.tg.info.adapter"),
                    }
                    if v == 0:
                        page.wait_for_function("window.app.snapshot", timeout=KEPT_SNAPSHOT_MS)
                        page.wait_for_timeout(linger * 1000)
                finally:
                    browser.stop_tracing()
                    page.close()
                events = json.loads(path.read_text())["traceEvents"]
                r.update(wasm_timeline(events, long_ms))
                r["cpu"] = thread_cpu(events, r["first_loss_ms"])
                if out:
                    out.mkdir(parents=True, exist_ok=True)
                    path.replace(out / f"{sample}-visit{v}.json")
                results.append(r)
                _print(r, v)
        finally:
            _quit(proc, browser)
    return results


def _quit(proc: subprocess.Popen, browser) -> None:
    """Chromium asked to quit (its processes then stop writing into the profile), else killed."""
    try:
        if browser is not None:
            browser.new_browser_cdp_session().send("Browser.close")
        proc.wait(timeout=20)
    except Exception:
        proc.kill()
        proc.wait()


def _print(r: dict, v: int) -> None:
    if v == 0:
        a = r["adapter"]
        print(f"adapter: {a.get('vendor')} {a.get('architecture')} {a.get('description')}")
    t = {k: x for k, x in r["timings"].items() if not k.endswith("_at")}
    print(f"visit {v} ({r['visit']}): first loss {r['first_loss_ms']} ms, compile {r['compile_ms']} ms")
    print(f"  timings {json.dumps(t)}")
    if "stream" not in r:
        print("  (no wasm streamed in this trace)")
        return
    b = r["bytes"]
    print(
        f"  wasm: stream at {r['stream']}, bytes {b[0]}-{b[1]}" if b else f"  wasm: stream at {r['stream']}"
    )
    print(f"  V8's code cache: {'used' if r['code_cache'] else 'not used'}")
    for at, dur, name, cached in r["scripts"]:
        took = f"{cached} bytes of code from the cache" if cached else "compiled afresh"
        print(f"  {at:8.1f} {dur:6.1f}  {name} ({took})")
    for at, dur, name in r["steps"]:
        print(f"  {at:8.1f} {dur:6.1f}  {name}")
    print("  the worker thread's long tasks:")
    for at, dur, name in r["tasks"]:
        print(f"  {at:8.1f} {dur:6.1f}  {name}")
    cpu = r.get("cpu")
    if cpu:
        print(f"  CPU time until the first loss: {cpu['total']:.0f} ms in all; the busiest threads:")
        for process, thread, ms in cpu["threads"][:BUSIEST]:
            print(f"  {ms:8.1f}  {process} / {thread}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--site", type=Path, help="a bundled site (default: site/)")
    ap.add_argument(
        "--visits", type=int, default=3, help="visits in one profile (default 3: a first, two repeats)"
    )
    ap.add_argument(
        "--linger", type=float, default=5.0, metavar="S", help="the first visit's extra seconds open"
    )
    ap.add_argument(
        "--long", type=float, default=8.0, metavar="MS", help="shortest task listed (default 8 ms)"
    )
    ap.add_argument("--out", type=Path, help="keep each visit's trace here")
    ap.add_argument("sample", nargs="?", default="sin")
    a = ap.parse_args()
    main((a.site or _build().SITE).resolve(), a.sample, a.visits, a.linger, a.long, a.out)
