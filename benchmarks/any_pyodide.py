"""Step rate of the samples in tgweb's own worker, in a Pyodide of the user's own
(tgweb.jsbridge: the page's main thread, a module worker of its own; PyScript runs on the
main thread's path) and in JupyterLite's Pyodide kernel (site/lite/, its REPL: the kernel's
worker), in one run of this machine's Chromium, with the start-up of each.

    .venv/bin/python benchmarks/any_pyodide.py [--steps N] [--samples sin addition]

Each context compiles the sample (not timed in the rate), runs one step to build its
pipelines, then times its steps (sin 300, addition 20: 1.5 steps/s on SwiftShader; --steps
sets all) --repeat times, keeping the best, on 16 batches made beforehand (the rate is tgweb's,
not the sample's batch maker) and reads the last loss back. Start-up: from a fresh page to
Python with tgweb ready (tgweb.start; loadPyodide + micropip.install + import tgweb;
JupyterLite's page, its kernel, `%pip install tgweb` and `import tgweb`).
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
import urllib.parse
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

STEPS = {"sin": 300, "addition": 20}  # timed steps per sample, by default

RATE = """
import json, time
import tgweb
from tgweb import samples
out = {{}}
for name, steps in {steps!r}.items():
    mod = samples.get(name)
    t0 = time.perf_counter()
    tr = samples.compile(mod)
    batches = [mod.batch(i) for i in range(16)]
    float(tr.step(**batches[0]).loss)
    t1 = time.perf_counter()
    best = 0.0
    for rep in range({repeat}):  # the best of them: the machine's other work only slows a run
        ta = time.perf_counter()
        for i in range(steps):
            r = tr.step(**batches[i % 16])
        loss = float(r.loss)
        best = max(best, steps / (time.perf_counter() - ta))
    tr.close()
    out[name] = {{"compile_and_first_step_s": t1 - t0, "steps_per_s": best, "loss": loss}}
json.dumps(out)
"""


# the text of the JupyterLite page's outputs (not its inputs, which hold the markers too)
OUTPUTS = "[...document.querySelectorAll('.jp-OutputArea-output')].map((e) => e.innerText).join('\\n')"


def _jupyterlite(browser, build, url: str, code: str) -> tuple[float, dict]:
    """(start-up s, RATE's result) in JupyterLite's REPL, whose URL's `code` runs in the
    Pyodide kernel: a cell is entered asynchronously, so tgweb's synchronous calls wait
    through JSPI there as in the other contexts."""
    if not (build.SITE / "lite" / "jupyter-lite.json").exists():
        build.bundle_lite()
    cells = [
        "%pip install tgweb",
        "import tgweb\nprint('TGWEB READY')",
        code + "\nprint('RATE', json.dumps(out))",
    ]
    query = urllib.parse.urlencode(
        [("kernel", "python"), *(("code", c) for c in cells)], quote_via=urllib.parse.quote
    )
    page = browser.new_page()
    try:
        t0 = time.perf_counter()
        page.goto(f"{url}{build.LITE_PATH}repl/index.html?{query}")
        for marker in ("TGWEB READY", "RATE "):
            page.wait_for_function(
                f"(o => o.includes({marker!r}) || o.includes('Error'))({OUTPUTS})",
                timeout=600000,
                polling=100,
            )
            if marker == "TGWEB READY":
                start = time.perf_counter() - t0
        out = page.evaluate(OUTPUTS)
    finally:
        page.close()
    if "RATE " not in out:
        raise SystemExit(f"JupyterLite failed: {out[-2000:]}")
    return start, json.loads(out.split("RATE ", 1)[1].splitlines()[0])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--samples", nargs="+", default=["sin", "addition"])
    ap.add_argument("--repeat", type=int, default=3, help="time the steps this many times, keep the best")
    a = ap.parse_args()
    from browser import conftest
    from browser.test_any_pyodide import _open, _wheel
    from playwright.sync_api import sync_playwright

    build = conftest._build()
    if not (build.SITE / "manifest.json").exists():
        build.bundle_site()
    srv = build.make_server(build.SITE, 0)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{srv.server_address[1]}"
    steps = {n: a.steps or STEPS.get(n, 20) for n in a.samples}
    code = RATE.format(steps=steps, repeat=a.repeat)
    rows = {}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=conftest.CHROMIUM, args=conftest.ARGS)
        print(f"Chromium {browser.version}, steps timed: {steps}, best of {a.repeat}", flush=True)

        page = conftest.open_harness(browser, url)
        t0 = time.perf_counter()
        page.evaluate("async () => { window.tg = await tgweb.start({}); }")
        start = time.perf_counter() - t0
        rows["tgweb's worker"] = (start, json.loads(conftest.py(page, code)))
        page.close()

        t0 = time.perf_counter()
        page = _open(browser, url)
        page.evaluate("() => window.py.runPython('import tgweb')")
        start = time.perf_counter() - t0
        rows["any Pyodide, main thread"] = (
            start,
            json.loads(page.evaluate("(c) => window.py.runPythonAsync(c)", code)),
        )

        # the module worker boots its own Pyodide, and says when it was ready
        got = page.evaluate("([w, c]) => window.inWorker(w, c)", [_wheel(url), code])
        if "error" in got:
            raise SystemExit(f"the module worker failed: {got['error']}")
        res = json.loads(got["value"])
        rows["any Pyodide, module worker"] = (got["bootMs"] / 1000, res)
        page.close()
        rows["JupyterLite (kernel's worker)"] = _jupyterlite(browser, build, url, code)
        browser.close()
    srv.shutdown()

    base = rows["tgweb's worker"][1]
    print(f"{'context':28s} {'start-up s':>10s}", *(f"{n + ' steps/s':>20s}" for n in a.samples))
    for ctx, (start, res) in rows.items():
        cells = [
            f"{res[n]['steps_per_s']:9.1f} ({res[n]['steps_per_s'] / base[n]['steps_per_s']:4.2f}x)"
            for n in a.samples
        ]
        print(f"{ctx:28s} {start:10.2f}", *(f"{c:>20s}" for c in cells))
    print(
        "compile + first step, s:",
        {c: {n: round(r[n]["compile_and_first_step_s"], 2) for n in r} for c, (_, r) in rows.items()},
    )


if __name__ == "__main__":
    main()
