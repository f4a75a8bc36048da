"""tgweb in a Pyodide of the user's own (tgweb.jsbridge): a plain page loads Pyodide from the
site, installs the site's wheel with micropip, and `import tgweb` trains sin on WebGPU
(SwiftShader), in the page's main thread and in a module worker of its own; without JSPI
(Python run synchronously) the synchronous calls say which awaitable call to use, and the
awaitable ones train."""

from __future__ import annotations

import json
import urllib.request

import pytest

# the user's page: Pyodide and micropip from the site, tgweb from the site's wheel
PAGE = """<!doctype html><meta charset="utf-8"><title>any pyodide</title>
<script type="module">
import { loadPyodide } from "/pyodide/pyodide.mjs";
window.boot = async (wheel) => {
  window.py = await loadPyodide({ indexURL: "/pyodide/" });
  await window.py.loadPackage("micropip", { messageCallback: () => {} });
  await window.py.pyimport("micropip").install(wheel);
};
window.inWorker = (wheel, code) => new Promise((resolve) => {
  const w = new Worker("/__anypyodide__/worker.mjs", { type: "module" });
  w.onmessage = (ev) => { resolve(ev.data); w.terminate(); };
  w.onerror = (ev) => resolve({ error: String(ev.message) });
  w.postMessage({ wheel, code });
});
window.ready = true;
</script>"""

WORKER = """import { loadPyodide } from "/pyodide/pyodide.mjs";
self.onmessage = async (ev) => {
  try {
    const py = await loadPyodide({ indexURL: "/pyodide/" });
    await py.loadPackage("micropip", { messageCallback: () => {} });
    await py.pyimport("micropip").install(ev.data.wheel);
    py.runPython("import tgweb");
    const bootMs = performance.now(); // since the worker was made (its time origin)
    self.postMessage({ value: await py.runPythonAsync(ev.data.code), bootMs });
  } catch (e) {
    self.postMessage({ error: String(e && e.message || e) });
  }
};"""

# the synchronous API, as in tgweb's worker: run with runPythonAsync, where run_sync (JSPI) waits
TRAIN = """
import json, time
import tgweb as tg
from tgweb import worker
from tgweb.samples import sin

tr = tg.compile(sin.Model(), sin.loss_fn, inputs=sin.INPUTS, optimizer=sin.OPTIMIZER)
losses = []
t0 = time.perf_counter()
for i in range(300):
    r = tr.step(**sin.batch(i))
    if i % 50 == 0 or i == 299:
        losses.append(r.loss)
json.dumps({"losses": losses, "backend": tr.backend, "in_worker": worker.in_browser(),
            "steps_per_s": 300 / (time.perf_counter() - t0), "adapter": tg.backends.browser.adapter_info()})
"""

# the initial values, drawn in bulk by web/bulk.mjs (which the wheel carries too)
INIT = """
import json, random
import tgweb as tg
from tgweb.nn import init
from tgweb.samples import sin

tr = tg.compile(sin.Model(), sin.loss_fn, inputs=sin.INPUTS, optimizer=sin.OPTIMIZER)
json.dumps({"drawer": type(init._bulk(random.Random(0), "gauss", 10**5)).__name__,
            "w": list(tr.params()["net.2.weight"].tolist()[0])})
"""

# without waiting inside a call: the synchronous calls refuse, the awaitable ones train
SYNC_REFUSES = """
import tgweb as tg
from tgweb.samples import sin
try:
    tg.compile(sin.Model(), sin.loss_fn, inputs=sin.INPUTS, optimizer=sin.OPTIMIZER)
    out = "compiled"
except tg.jsbridge.NeedsAwait as e:
    out = str(e)
out
"""

AWAITABLE = """
import json
import tgweb as tg
from tgweb.samples import sin

async def main():
    tr = await tg.jsbridge.call(tg.compile, sin.Model(), sin.loss_fn, inputs=sin.INPUTS,
                                optimizer=sin.OPTIMIZER)
    losses, refused = [], ""
    for i in range(300):
        r = await tr.step_async(**sin.batch(i))
        if i % 50 == 0 or i == 299:
            losses.append(await r.loss_async)
    try:
        tr.params()
    except tg.jsbridge.NeedsAwait as e:
        refused = str(e)
    params = await tg.jsbridge.call(tr.params)
    from pyodide.ffi import can_run_sync
    return json.dumps({"losses": losses, "params": sorted(params), "steps": tr.steps, "refused": refused,
                       "jspi": can_run_sync()})
main
"""


# a browser without WebGPU: navigator.gpu is missing
NO_WEBGPU = "Object.defineProperty(Navigator.prototype, 'gpu', {get: () => undefined});"

NO_GPU_SAYS = """
import tgweb as tg
from tgweb.samples import sin
try:
    tg.compile(sin.Model(), sin.loss_fn, inputs=sin.INPUTS, optimizer=sin.OPTIMIZER)
    out = "compiled"
except tg.jsbridge.NoWebGPU as e:
    out = str(e)
out
"""


def _wheel(site_url: str) -> str:
    with urllib.request.urlopen(f"{site_url}/manifest.json") as r:
        return f"{site_url}/{json.load(r)['wheel']}"


# a browser without JavaScript Promise Integration (Safari's, Firefox's): Pyodide finds none
NO_JSPI = "delete WebAssembly.Suspending; delete WebAssembly.promising;"


def _open(browser, site_url, init_script=None):
    page = browser.new_page()
    if init_script:
        page.add_init_script(init_script)
    page.on("pageerror", lambda e: print("pageerror:", e))
    page.route(
        "**/__anypyodide__/index.html", lambda r: r.fulfill(status=200, content_type="text/html", body=PAGE)
    )
    page.route(
        "**/__anypyodide__/worker.mjs",
        lambda r: r.fulfill(status=200, content_type="text/javascript", body=WORKER),
    )
    page.goto(f"{site_url}/__anypyodide__/index.html")
    page.wait_for_function("window.ready === true", timeout=20000)
    page.evaluate("(w) => window.boot(w)", _wheel(site_url))
    return page


@pytest.fixture(scope="module")
def user_page(browser, site_url):
    page = _open(browser, site_url)
    yield page
    page.close()


@pytest.fixture(scope="module")
def no_jspi_page(browser, site_url):
    page = _open(browser, site_url, NO_JSPI)
    yield page
    page.close()


def _falls(losses: list[float]) -> None:
    assert len(losses) == 7 and all(x == x for x in losses), losses
    assert losses[-1] < 0.2 * losses[0], losses


def test_sync_calls_without_jspi_name_the_awaitable_ones(user_page):
    # runPython: Python entered synchronously, where nothing can wait for the GPU even with JSPI
    msg = user_page.evaluate("(code) => window.py.runPython(code)", SYNC_REFUSES)
    assert "cannot wait for the GPU" in msg and "await tgweb.jsbridge.setup()" in msg, msg


def test_trains_sin_in_the_main_thread(user_page):
    out = json.loads(user_page.evaluate("(code) => window.py.runPythonAsync(code)", TRAIN))
    print("main thread:", {k: v for k, v in out.items() if k != "adapter"})
    assert out["backend"] == "browser" and out["in_worker"] is False
    _falls(out["losses"])


def test_initial_values_are_drawn_in_bulk_as_cpython_draws_them(user_page):
    import tgweb as tg
    from tgweb.samples import sin

    out = json.loads(user_page.evaluate("(code) => window.py.runPythonAsync(code)", INIT))
    ref = tg.compile(
        sin.Model(), sin.loss_fn, inputs=sin.INPUTS, optimizer=sin.OPTIMIZER, backend="reference"
    )
    assert out["drawer"] == "_JsDraw"
    assert out["w"] == ref.params()["net.2.weight"].tolist()[0]


def test_awaitable_calls_train_sin_without_jspi(no_jspi_page):
    out = no_jspi_page.evaluate(
        "async (code) => { const main = window.py.runPython(code); try { return await main(); } "
        "finally { main.destroy(); } }",
        AWAITABLE,
    )
    out = json.loads(out)
    _falls(out["losses"])
    assert out["jspi"] is False  # the awaitable path itself, not run_sync
    assert (
        "await tgweb.jsbridge.call" in out["refused"] and "JavaScript Promise Integration" in out["refused"]
    ), out
    assert out["steps"] == 300 and "net.0.weight" in out["params"], out


def test_trains_sin_in_a_module_worker(user_page, site_url):
    got = user_page.evaluate("([w, code]) => window.inWorker(w, code)", [_wheel(site_url), TRAIN])
    assert "error" not in got, got["error"]
    out = json.loads(got["value"])
    print("module worker:", {k: v for k, v in out.items() if k != "adapter"})
    assert out["backend"] == "browser" and out["in_worker"] is False
    _falls(out["losses"])


def test_without_webgpu_the_error_says_so_and_names_browsers(browser, site_url):
    page = _open(browser, site_url, NO_WEBGPU)
    try:
        msg = page.evaluate("(code) => window.py.runPythonAsync(code)", NO_GPU_SAYS)
    finally:
        page.close()
    assert "WebGPU is not available" in msg and "Chrome/Edge" in msg and "Safari" in msg, msg
