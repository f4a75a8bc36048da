"""Shared fixtures of the browser tests: one HTTP server for site/, one headless
Chromium (Debian's, WebGPU on SwiftShader), one page with Pyodide + tgweb loaded
through web/tgweb.mjs, all for the whole session.

site/ is bundled by `python3 build.py test`; when missing (pytest run directly)
it is bundled here.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import threading
import time
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]


def _build():
    spec = importlib.util.spec_from_file_location("tgweb_build", ROOT / "build.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# Debian's Chromium, or a real GPU's (build.chromium: tests/browser/test_subgroup_matrix.py on the H200)
CHROMIUM, ARGS = _build().chromium()
COLD_START: dict = {}

# the harness page: tgweb.mjs and gpu.mjs (device.mjs's functions too: it re-exports them) as
# globals, served at /__test__/ by a route
HARNESS = """<!doctype html><meta charset="utf-8"><title>tgweb tests</title>
<script type="module">
import * as tgweb from "/tgweb.mjs";
import * as gpu from "/gpu.mjs";
window.tgweb = tgweb; window.gpu = gpu; window.harnessReady = true;
</script>"""
HEADERS = {
    "Content-Type": "text/html",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Embedder-Policy": "require-corp",
}


def pytest_collection_modifyitems(items):
    for item in items:
        if "tests/browser" in str(item.fspath).replace(os.sep, "/"):
            item.add_marker(pytest.mark.browser)


@pytest.fixture(scope="session")
def site_url():
    build = _build()
    if not (build.SITE / "manifest.json").exists():
        build.bundle_site()
    srv = build.make_server(build.SITE, 0)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


@pytest.fixture(scope="session")
def browser():
    assert Path(CHROMIUM).exists(), f"no Chromium at {CHROMIUM} (python3 build.py setup installs it)"
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


def open_harness(browser, site_url, init_script=None, site_snapshot=True):
    page = browser.new_page()
    page.on("pageerror", lambda e: print("pageerror:", e))
    if init_script:
        page.add_init_script(init_script)
    if not site_snapshot:
        without_site_snapshot(page)
    page.route("**/__test__/*", lambda route: route.fulfill(status=200, headers=HEADERS, body=HARNESS))
    page.goto(f"{site_url}/__test__/index.html")
    page.wait_for_function("window.harnessReady === true", timeout=20000)
    return page


@pytest.fixture(scope="session")
def page(browser, site_url):
    """The shared page: tgweb started (Pyodide + tgweb + GPU device) as window.tg;
    every event lands in window.events, and those until it started in window.startEvents."""
    page = open_harness(browser, site_url)
    t0 = time.perf_counter()
    info = page.evaluate("""async () => {
        window.events = [];
        window.tg = await tgweb.start({on: {"*": (event, data) => window.events.push([event, data])}});
        window.startEvents = [...window.events];  // kept: later tests may empty window.events
        return window.tg.info;
    }""")
    COLD_START.update(info=info, wall_s=time.perf_counter() - t0)
    print("\ntgweb cold start:", json.dumps(info["timings"]), f"wall {COLD_START['wall_s']:.2f} s")
    yield page
    page.close()
    # figures for notes and benchmarks (test-output/ is git-ignored)
    from .test_training import TIMINGS

    out = ROOT / "test-output"
    out.mkdir(exist_ok=True)
    (out / "browser_timings.json").write_text(
        json.dumps({"cold_start": COLD_START, "training": TIMINGS}, indent=1, default=str)
    )


def run_py(page, source: str, filename: str | None = None, timeout: float = 120):
    """Run Python in the shared worker: ('ok', value) or ('error', {message, pyType, ...})."""
    return page.evaluate(
        """async ([src, filename]) => {
        try { return ["ok", await window.tg.run(src, filename ? {filename} : {})]; }
        catch (e) { return ["error", {message: e.message, name: e.name, pyType: e.pyType, line: e.line,
                    kernel: e.kernel, ops: e.ops, site: e.site, stopped: e.stopped}]; }
    }""",
        [source, filename],
    )


def py(page, source: str, filename: str | None = None):
    """Run Python and return its value; a Python error fails the test with its traceback."""
    status, value = run_py(page, source, filename)
    if status != "ok":
        raise AssertionError("Python failed in the browser:\n" + value["message"])
    return value


# ---------------------------------------------------------------- the trainer page

OUT = ROOT / "test-output"
SCREENSHOTS = OUT / "screenshots"  # one per sample's view: test artifacts, git-ignored


def _site_is_stale(site: Path) -> bool:
    manifest = site / "manifest.json"
    if not manifest.exists():
        return True
    built = manifest.stat().st_mtime
    for f in _build().web_files():
        dst = site / f.relative_to(ROOT / "web")
        if not dst.exists() or f.stat().st_mtime > built:
            return True
    return False


def site_file(path: str) -> re.Pattern:
    """A route's pattern for the site's file at path at whatever version its URL names (the
    bundled site asks for its files at ?v=VERSION, build.py's _version_site), or none."""
    return re.compile(rf"^[^?#]*/{re.escape(path)}([?#].*)?$")


def without_site_snapshot(page):
    """Serve page the site's manifest.json without its "snapshot" (as a site bundled without
    a Node.js with JSPI is): a visit then boots Python and keeps a snapshot of its own."""

    def strip(route):
        manifest = route.fetch().json()
        manifest.pop("snapshot", None)
        route.fulfill(status=200, content_type="application/json", body=json.dumps(manifest))

    page.route(site_file("manifest.json"), strip)


def open_app(browser, site_url, sample: str = "", site_snapshot: bool = True):
    """The trainer page (web/index.html, opened at #sample), loaded and ready: Pyodide,
    tgweb, the GPU device and the page harness. page.problems collects page errors and
    console errors and warnings. site_snapshot=False: as if the site had no bundled snapshot."""
    build = _build()
    if _site_is_stale(build.SITE):  # pytest run directly after editing web/: bundle again
        build.bundle_site()
    page = browser.new_page(viewport={"width": 1280, "height": 1000}, accept_downloads=True)
    if not site_snapshot:
        without_site_snapshot(page)
    problems: list[str] = []
    page.on("pageerror", lambda e: problems.append(f"pageerror: {e}"))
    page.on(
        "console", lambda m: m.type in ("error", "warning") and problems.append(f"console {m.type}: {m.text}")
    )
    page.problems = problems
    page.goto(f"{site_url}/" + (f"#{sample}" if sample else ""))
    page.wait_for_function("window.app && (window.app.ready || window.app.startError)", timeout=120000)
    assert page.evaluate("window.app.startError || null") is None
    return page


@pytest.fixture(scope="module")
def app(browser, site_url, request):
    """The trainer page, loaded and ready, for one test module; opened at the sample
    named by the module's SAMPLE, if it has one."""
    sample = getattr(request.module, "SAMPLE", "")
    page = open_app(browser, site_url, sample)
    if sample:
        open_sample(page, sample)
    yield page
    page.close()


def open_sample(page, name: str):
    """Pick a sample in the gallery and wait for its source to load."""
    page.click(f"#pick-{name}")
    page.wait_for_function(
        f"window.app.state[{json.dumps(name)}].source.length > 0 && "
        f"document.getElementById('sample-title').textContent === {json.dumps(name)}",
        timeout=30000,
    )


def use_small_size(page, name: str):
    """Edit the open sample's source to its scaled-down size (a sample whose page source
    picks a size with `.sized("full")`, such as shakespeare): the full size is far too
    big for SwiftShader. Start then compiles the edited source."""
    source = page.evaluate(f"window.app.state[{json.dumps(name)}].source")
    assert source.count('.sized("full")') == 1, f"{name}: its source picks no size"
    page.fill("#source", source.replace('.sized("full")', '.sized("small")'))
    assert '.sized("full")' not in page.evaluate(f"window.app.state[{json.dumps(name)}].source")


def losses(page, name: str) -> list[list[float]]:
    """[[step, loss], ...] as the page received them for sample name."""
    return page.evaluate(f"window.app.state[{json.dumps(name)}].losses")


def train_app(page, steps: int, timeout: float = 120):
    """Train the current sample `steps` more steps through the Start button, until done."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    page.fill("#steps", str(steps))
    page.dispatch_event("#steps", "change")
    page.click("#start")
    # polled often (a short run may be over within frames), waited for long (a loaded machine)
    page.wait_for_function("document.body.dataset.state === 'running'", timeout=60_000, polling=10)
    try:
        page.wait_for_function("document.body.dataset.state === 'ready'", timeout=timeout * 1000)
    except PlaywrightTimeout:
        # say where the page was, so that a slow or stuck run can be told apart
        raise AssertionError(
            f"training did not finish in {timeout} s; "
            f"state={page.evaluate('document.body.dataset.state')!r}, "
            f"step={page.inner_text('#fig-step')!r}, status={page.inner_text('#status')!r}, "
            f"error={page.text_content('#error')!r}, log tail={page.inner_text('#log')[-600:]!r}"
        ) from None


def screenshot(page, name: str) -> Path:
    """A full-page screenshot kept as a test artifact: test-output/screenshots/<name>.png."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


# runs a Program (JSON) through web/gpu.mjs on the page's main thread: a device asked for
# what the Program needs, every output read back; returns the outputs and the device's features
_RUN_PROGRAM = """async ([program, inputs]) => {
    program = JSON.parse(program);
    const device = await gpu.requestDevice({program});
    const rt = await gpu.instantiate(device, program);
    const feeds = {};
    for (const [n, v] of Object.entries(inputs)) {
        feeds[n] = new (program.inputs[n].dtype === "i32" ? Int32Array : Float32Array)(v);
    }
    const names = Object.keys(program.outputs);
    const bufs = await rt.run(feeds, {}, names.map((n) => ["outputs", n]));
    const out = {};
    names.forEach((n, i) => {
        const T = program.outputs[n].dtype === "i32" ? Int32Array : Float32Array;
        out[n] = Array.from(new T(bufs[i]));
    });
    const features = [...device.features];
    rt.destroy(); device.destroy();
    return {out, features};
}"""


def run_against_reference(page, g, prog, seed: int = 0, rtol: float = 2e-4, atol: float = 2e-5) -> list[str]:
    """Runs Program prog (lowered from graph g) in the page on random inputs and checks
    every output against the reference backend (atol: of the largest value); returns the
    device's features."""
    from test_kernels import data_for

    from tgweb.backends.reference import Context, evaluate

    rng = np.random.default_rng(seed)
    feeds = {n: data_for(n, t.shape, t.dtype, None, rng) for n, t in g.inputs.items()}
    r = page.evaluate(_RUN_PROGRAM, [prog.to_json(), {n: v.ravel().tolist() for n, v in feeds.items()}])
    want = evaluate(g, list(g.outputs.values()), {g.inputs[n].id: v for n, v in feeds.items()}, Context())
    for (n, t), w in zip(g.outputs.items(), want):
        w = np.asarray(w)
        got = np.array(r["out"][n]).reshape(t.shape)
        scale = max(1.0, float(np.abs(w).max()))
        np.testing.assert_allclose(got, w, rtol=rtol, atol=atol * scale, err_msg=n)
    return r["features"]
