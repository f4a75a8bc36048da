"""Initial values in this machine's Chromium (the tgweb worker: Pyodide without NumPy), in
seconds: every parameter of a sample drawn as Trainer.reset draws them, in bulk through
web/bulk.mjs and by the per-value loop the page ran before; then `samples.compile(SAMPLE)`
as the page runs it (trace, lowering, pipelines, the initial values drawn and uploaded),
and with --step its first step read back, each with the bulk draw and with the loop. The
first compile of the page is the cold one (a first visit); later ones reuse its pipelines.

    python3 build.py bundle && .venv/bin/python benchmarks/init_browser.py [SAMPLE] [--step | --draws]

SAMPLE defaults to shakespeare (full size). On an H200 the same command gives the figures of
issue 28's target (compile <= 5 s on a first visit).
"""

from __future__ import annotations

import argparse
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# in the worker: the bulk drawer on or off (off: the per-value loop, as before web/bulk.mjs)
SETUP = """
import random, time
from tgweb import samples
from tgweb.nn import init
from tgweb.nn.module import param_rng
_BULK = init._bulk

def drawer(bulk):
    init._bulk = _BULK if bulk else (lambda *args: None)
"""

DRAW = """
drawer({bulk})
params = list(samples.get({sample!r}).Model().named_parameters())
t0 = time.perf_counter()
n = sum(len(p.init(p.shape, param_rng(0, name))) for name, p in params)
[n, time.perf_counter() - t0]
"""

COMPILE = """
drawer({bulk})
mod = samples.get({sample!r})
t0 = time.perf_counter()
trainer = samples.compile(mod)
t1 = time.perf_counter()
if {step}:
    float(trainer.step(**mod.batch(0)).loss)
t2 = time.perf_counter()
trainer.close()
drawer(True)
[t1 - t0, t2 - t1]
"""


HOW = {True: "web/bulk.mjs", False: "per-value loop"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("sample", nargs="?", default="shakespeare")
    ap.add_argument("--step", action="store_true", help="also time the first step, read back")
    ap.add_argument("--draws", action="store_true", help="time the draws only (no compile)")
    a = ap.parse_args()
    from playwright.sync_api import sync_playwright

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from browser import conftest

    build = conftest._build()
    if not (build.SITE / "manifest.json").exists():
        build.bundle_site()
    srv = build.make_server(build.SITE, 0)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=conftest.CHROMIUM, args=conftest.ARGS)
        page = conftest.open_harness(browser, f"http://127.0.0.1:{srv.server_address[1]}")
        info = page.evaluate("async () => (window.tg = await tgweb.start({})).info")
        print(f"Chromium, adapter {info['adapter']}, Pyodide {info['pyodide']}")
        conftest.py(page, SETUP)
        # the first of each is cold (imports, the JIT; pipelines for the first compile)
        for bulk in (True, False, True, False):
            n, s = conftest.py(page, DRAW.format(bulk=bulk, sample=a.sample))
            print(f"{a.sample}: {n:,} initial values drawn in {s:.2f} s ({HOW[bulk]})")
        for bulk in () if a.draws else (True, False, True):
            c, s = conftest.py(page, COMPILE.format(bulk=bulk, sample=a.sample, step=a.step))
            step = f", first step {s:.2f} s" if a.step else ""
            print(f"{a.sample}: samples.compile {c:.2f} s{step} (initial values by {HOW[bulk]})")
        browser.close()
    srv.shutdown()


if __name__ == "__main__":
    main()
