"""Cold start of the served trainer page, phase by phase: page load -> Ready (the worker's
start-up: Pyodide's wasm, its boot, the tgweb wheel and import, the GPU device) -> a
sample's first training step done (its model, trace, autodiff, optimizer, lowering, the
initial values, pipeline creation, the first step read back). Each run is a first visit in
a fresh browser context (empty cache), then a repeat visit in the same context (its HTTP
cache, the Pyodide snapshot and the compiled Programs kept: the tool waits until the first
visit has stored its snapshot, which the worker makes after the first step).

    python3 build.py bundle && .venv/bin/python tools/cold_start.py [--runs N]
        [--samples sin,addition,shakespeare] [--site DIR --site DIR2 ...]

Prints one table per sample and visit: each phase's median in ms over the runs; then the
waterfall of the last run's requests (start and end since navigation, bytes on the wire,
Content-Encoding), from Playwright's request timing. With several --site
(bundled sites, e.g. a copy of site/ from before a change), the runs alternate between them
(the machine is shared and noisy) and each site gets its column. `shakespeare` is the
sample's small size (`sized("small")`); SwiftShader needs minutes for the full one.

    .venv/bin/python tools/cold_start.py --ways [RUNS]

Page load -> Ready four ways: the served site, web/index.html from disk, dist/tgweb.html
from disk and over plain http (`python3 build.py standalone` first).
"""

from __future__ import annotations

import argparse
import functools
import http.server
import importlib.util
import json
import statistics
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
READY = "window.app && (window.app.ready || window.app.startError)"

# run in the page once it is Ready: tools/compile_phases.py's clock around tg.compile, then
# the first step; times in ms, and the page's clock (since navigation) when the step is done
FIRST_STEP_PY = r"""
import time

_T0 = time.perf_counter()
import importlib, types
from tgweb import samples
from tgweb.samples import shakespeare

_cp = types.ModuleType("compile_phases")
_cp.__file__ = "/tools/compile_phases.py"
exec(compile(PHASES_SOURCE, "compile_phases.py", "exec"), _cp.__dict__)


def _first_step(name):
    t_imports = time.perf_counter() - _T0
    sample = shakespeare.sized("small") if name == "shakespeare" else samples.get(name)
    tgc = importlib.import_module("tgweb.compile")
    from tgweb import progcache

    clock = _cp.Clock()
    t0 = time.perf_counter()
    model = sample.Model()  # shakespeare: reads the text (its vocabulary)
    t1 = time.perf_counter()
    # keyed as the trainer page keys a sample's source: the repeat visit takes the Program
    with clock.wrapped(_cp._targets("browser")), progcache.keyed("cold_start " + name, label=name):
        trainer = tgc.compile(model, sample.loss_fn, inputs=sample.INPUTS, optimizer=sample.OPTIMIZER)
    t2 = time.perf_counter()
    batch = sample.batch(0)
    t3 = time.perf_counter()
    loss = float(trainer.step(**batch).loss)
    t4 = time.perf_counter()
    c = clock.t
    rt = trainer.engine.rt._rt
    pipelines = float(getattr(rt, "pipelinesMs", float("nan")))
    ms = {
        "script's imports": t_imports,
        "model (and its data)": t1 - t0,
        "trace": c["trace"],
        "autodiff": c["autodiff"],
        "optimizer": c["graph"] - c["trace"] - c["autodiff"],
        "lowering (WGSL: emit)": c["lower"],
        "initial values": c["reset"] - c["upload"],
        "upload": c["upload"],
        "engine": c["engine"],
        "first batch": t3 - t2,
        "first step": t4 - t3,
        "compile total": t2 - t1,
    }
    out = {k: 1000 * v for k, v in ms.items()}
    out["of which emit"] = 1000 * c["emit"]
    out["of engine: pipelines"] = pipelines
    out["loss"] = loss
    return out


_first_step(SAMPLE)
"""

# the worker's phases (tg.info.timings), in the order of the table
READY_ROWS = {
    "since_page_load.start_call": "page: start() called",
    "since_page_load.worker_created": "worker created",
    "since_page_load.worker_started": "worker script running",
    "wasm": "wasm fetch + compile",
    "pyodide": "Pyodide boot or restore (+ wheel)",
    "micropip": "micropip + packaging (sites before this change)",
    "tgweb_wheel": "tgweb wheel fetch + install (before progcache)",
    "import_tgweb": "import tgweb",
    "gpu": "GPU adapter + device",
    "page_load_to_ready": "page load -> Ready",
}
# a first visit stores a snapshot in the background (the site's, or one made): the repeat visit waits for it
SNAPSHOT_KEPT = """async () => {
    const cache = window.app.programs && window.app.programs.cache;
    for (let i = 0; cache && i < 1200; i++) {
        if ((await cache.snapshots()).length) return true;
        await new Promise((r) => setTimeout(r, 50));
    }
    return false;
}"""


def _build():
    spec = importlib.util.spec_from_file_location("tgweb_build", ROOT / "build.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class _Plain(http.server.SimpleHTTPRequestHandler):
    def log_message(self, fmt, *args):
        pass


def _serve(server) -> str:
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}/"


def _flat(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        elif isinstance(v, (int, float)):
            out[prefix + k] = v
    return out


def _ready_page(ctx, url: str, what: str):
    """The trainer page at url, in ctx, once it is Ready."""
    page = ctx.new_page()
    page.goto(url)
    page.wait_for_function(READY, timeout=180000)
    err = page.evaluate("window.app.startError || null")
    if err:
        sys.exit(f"{what}: the page did not start: {err}")
    return page


def visit(ctx, url: str, sample: str, waterfall: list):
    """One visit of the page at url in ctx, then sample's first step: ({row: ms}, the page). Its
    requests go into waterfall (dicts: name, start, first byte, end, bytes, encoding)."""
    requests = []

    def listen(request):  # Playwright wraps handlers: a function of ours, not list.append
        requests.append(request)

    ctx.on("requestfinished", listen)
    try:
        page = _ready_page(ctx, url, url)
        print("adapter:", json.dumps(page.evaluate("window.app.tg.info.adapter")), file=sys.stderr)
        timings = page.evaluate("window.app.tg.info.timings")
        print("snapshot:", timings.get("snapshot"), file=sys.stderr)
        ready = _flat(timings)
        got = {READY_ROWS[k]: v for k, v in ready.items() if k in READY_ROWS}
        src = (ROOT / "tools" / "compile_phases.py").read_text()
        step = page.evaluate(
            """async ([src, phases, sample]) => {
                const sent = performance.now();
                const r = await window.app.tg.run(src, {globals: {PHASES_SOURCE: phases, SAMPLE: sample}});
                return {...r, sent, done: performance.now()};
            }""",
            [FIRST_STEP_PY, src, sample],
        )
        got.update({k: v for k, v in step.items() if k not in ("sent", "done", "loss")})
        got["page: app ready, first step sent"] = step["sent"]
        got["page load -> first step done"] = step["done"]
        origin = page.evaluate("performance.timeOrigin")
        waterfall[:] = [_timed(r, origin) for r in requests]
        return got, page
    finally:
        ctx.remove_listener("requestfinished", listen)


def _timed(request, origin: float) -> dict:
    """A finished request's place in the waterfall, in ms since navigation."""
    t = request.timing  # startTime: epoch ms; the others: ms after it, -1 when not known
    start = t["startTime"] - origin
    resp = request.response() if hasattr(request, "response") else None
    headers = resp.headers if resp else {}
    try:
        size = request.sizes()["responseBodySize"]
    except Exception:  # a request the browser answered from its cache has no sizes
        size = -1
    return {
        "name": request.url.split("?")[0].split("/", 3)[-1] or "/",  # less the site's version
        "start": start,
        "first byte": start + t["responseStart"] if t["responseStart"] >= 0 else float("nan"),
        "end": start + t["responseEnd"] if t["responseEnd"] >= 0 else float("nan"),
        "bytes": size,
        "status": resp.status if resp else 0,
        "encoding": headers.get("content-encoding", ""),
    }


def one_run(browser, url: str, sample: str, waterfalls: dict) -> dict[str, dict[str, float]]:
    """A first visit in a fresh context, then a repeat visit in it: {visit: {row: ms}}."""
    ctx = browser.new_context()
    try:
        first, page = visit(ctx, url, sample, waterfalls.setdefault("first", []))
        # the site's snapshot restored, or none: either is kept in the background for the next visit
        pending = page.evaluate("window.app.tg.info.timings.snapshot") in ("bundled", "pending")
        if pending and not page.evaluate(SNAPSHOT_KEPT):
            print("warning: the first visit kept no snapshot", file=sys.stderr)
        page.close()
        repeat, page = visit(ctx, url, sample, waterfalls.setdefault("repeat", []))
        page.close()
        return {"first": first, "repeat": repeat}
    finally:
        ctx.close()


def waterfall_table(rows: list[dict]) -> str:
    """The requests in the order they started: when, how long, how big."""
    lines = [f"{'request':44s}{'start':>8s}{'1st byte':>9s}{'end':>8s}{'kB':>9s}  status encoding"]
    for r in sorted(rows, key=lambda r: r["start"]):
        kb = f"{r['bytes'] / 1e3:9.1f}" if r["bytes"] >= 0 else f"{'-':>9s}"
        name = r["name"] if len(r["name"]) <= 43 else "…" + r["name"][-42:]
        when = f"{r['start']:8.0f}{r['first byte']:9.0f}{r['end']:8.0f}"
        lines.append(f"{name:44s}{when}{kb}  {r['status']:6d} {r['encoding']}")
    return "\n".join(lines)


VISITS = ("first", "repeat")


def phases(sites: list[Path], samples: list[str], runs: int) -> None:
    from playwright.sync_api import sync_playwright

    build = _build()
    urls = {str(s): _serve(build.make_server(s, 0)) for s in sites}
    exe, args = build.chromium()  # a real GPU's where launch.sh exported GPU_CHROMIUM
    got = {(smp, s, v): [] for smp in samples for s in urls for v in VISITS}
    waterfalls = {s: {} for s in urls}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=exe, args=args)
        for _ in range(runs):
            for smp in samples:
                for s, url in urls.items():  # alternately: the machine's load drifts
                    run = one_run(browser, url, smp, waterfalls[s])
                    for v in VISITS:
                        got[smp, s, v].append(run[v])
                    done = ", ".join(f"{v} {run[v]['page load -> first step done']:.0f} ms" for v in VISITS)
                    print(f"{smp} {s}: {done}", file=sys.stderr)
        browser.close()
    for smp in samples:
        for v in VISITS:
            print(f"\n{smp}, {v} visit (median of {runs}, ms)")
            print(table({s: got[smp, s, v] for s in urls}))
    for s, falls in waterfalls.items():
        for v in VISITS:
            print(f"\nrequests of the last {v} visit ({samples[-1]}), {s} (ms since navigation)")
            print(waterfall_table(falls.get(v, [])))


def _label(site: str) -> str:
    """A site's column: its checkout's name for a bundled site/, else the folder's own name."""
    path = Path(site)
    return path.parent.name if path.name == "site" else path.name


def table(cols: dict[str, list[dict[str, float]]]) -> str:
    rows = list(dict.fromkeys(k for runs in cols.values() for run in runs for k in run))
    width = max(len(r) for r in rows) + 2
    lines = [" " * width + "".join(f"{_label(c)[-14:]:>14s}" for c in cols)]
    for r in rows:
        cells = []
        for runs in cols.values():
            vals = [v for run in runs if isinstance(v := run.get(r), (int, float)) and v == v]
            cells.append(f"{statistics.median(vals):14.0f}" if vals else f"{'-':>14s}")
        lines.append(f"{r:{width}s}" + "".join(cells))
    return "\n".join(lines)


def ways(runs: int) -> None:
    """Page load -> Ready of the page served, from disk and as the single file."""
    from playwright.sync_api import sync_playwright

    build = _build()
    if not (build.SITE / "manifest.json").exists():
        build.bundle_site()
    single = build.DIST / "tgweb.html"
    if not single.exists():
        sys.exit("dist/tgweb.html is missing: run `python3 build.py standalone` first")
    handler = functools.partial(_Plain, directory=str(build.DIST))
    plain = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    urls = {
        "served site (build.py serve)": _serve(build.make_server(build.SITE, 0)),
        "web/index.html from disk": (ROOT / "web" / "index.html").as_uri(),
        "dist/tgweb.html from disk": single.as_uri(),
        "dist/tgweb.html over plain http": _serve(plain) + single.name,
    }
    got: dict[str, list[float]] = {k: [] for k in urls}
    exe, args = build.chromium()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=exe, args=args)
        for _ in range(runs):
            for way, url in urls.items():
                ctx = browser.new_context()
                page = _ready_page(ctx, url, way)
                got[way].append(page.evaluate("window.app.tg.info.timings.page_load_to_ready") / 1000)
                ctx.close()
        browser.close()
    for way, times in got.items():
        each = ", ".join(f"{t:.1f}" for t in times)
        print(f"{way:34s} median {statistics.median(times):5.1f} s   runs {each}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--samples", default="sin,addition,shakespeare")
    ap.add_argument("--site", action="append", type=Path, help="a bundled site (default: site/)")
    ap.add_argument("--ways", type=int, metavar="RUNS", help="page load -> Ready, four ways")
    a = ap.parse_args()
    if a.ways:
        ways(a.ways)
        return
    sites = a.site or [_build().SITE]
    phases([s.resolve() for s in sites], a.samples.split(","), a.runs)


if __name__ == "__main__":
    main()
