"""The trainer page without a server (issue 17): web/index.html opened from disk (file://)
runs from web/disk/ (written by `python3 build.py setup`), and dist/tgweb.html (`python3
build.py standalone`) holds everything in one file, opened from disk or from a plain
static host without cross-origin isolation headers. Each trains the sin sample through
the page's Start button in headless Chromium, on real Pyodide and WebGPU."""

from __future__ import annotations

import functools
import http.server
import json
import math
import shutil
import subprocess
import threading
import time

import pytest

from .conftest import OUT, ROOT, _build, losses

TIMINGS: dict = {}


def _open(browser, url: str):
    page = browser.new_page(viewport={"width": 1280, "height": 1000}, accept_downloads=True)
    problems: list[str] = []
    page.on("pageerror", lambda e: problems.append(f"pageerror: {e}"))
    # issue 24: from disk too, no console error (there was one for a module script tag)
    page.on("console", lambda m: m.type == "error" and problems.append(f"console error: {m.text}"))
    page.problems = problems
    t0 = time.perf_counter()
    page.goto(url)
    started = "window.app && (window.app.ready || window.app.startError)"
    missing = "window.tgwebDisk && window.tgwebDisk.missing"
    page.wait_for_function(f"({started}) || ({missing})", timeout=180000)
    wall = time.perf_counter() - t0
    state = page.evaluate(f"[window.app && window.app.startError, {missing}]")
    assert state == [None, None], f"the page did not start: {state}; status: {page.inner_text('#status')}"
    return page, wall


def _train(page, steps: int):
    """Start `steps` steps of sin and wait for them all (conftest's train_app waits to see
    the page running first, which a run of a few steps can finish before)."""
    want = len(losses(page, "sin")) + steps
    page.fill("#steps", str(steps))
    page.dispatch_event("#steps", "change")
    page.click("#start")
    page.wait_for_function(
        f"document.body.dataset.state === 'ready' && window.app.state.sin.losses.length === {want}",
        timeout=180000,
    )


def _stop_mid_run(page):
    """Without cross-origin isolation Stop sets the flag each step reads: a long run stops
    within a step or two, the sample keeps its parameters and can train on."""
    page.fill("#steps", "100000")
    page.dispatch_event("#steps", "change")
    page.click("#start")
    page.wait_for_function("window.app.state.sin.losses.length >= 40", timeout=60000)
    page.click("#stop")
    page.wait_for_function("document.body.dataset.state === 'ready'", timeout=30000)
    status = page.inner_text("#status")
    assert "stopped" in status, status
    steps = [s for s, _ in losses(page, "sin")]
    assert 40 <= steps[-1] < 100000 and page.get_attribute("#error", "hidden") is not None
    _train(page, 5)
    assert losses(page, "sin")[-1][0] == steps[-1] + 5


def _download_params(page):
    """Download .safetensors works without a server too (a Blob URL download)."""
    with page.expect_download() as dl:
        page.click("#download")
    data = open(dl.value.path(), "rb").read()
    n = int.from_bytes(data[:8], "little")
    header = json.loads(data[8 : 8 + n])
    tensors = {k: v for k, v in header.items() if k != "__metadata__"}
    assert tensors and all("data_offsets" in v for v in tensors.values()), header
    assert len(data) == 8 + n + max(v["data_offsets"][1] for v in tensors.values())


def _train_sin(browser, url: str, what: str, stop: bool = False) -> dict:
    page, wall = _open(browser, url + "#sin")
    try:
        info = page.evaluate("window.app.tg.info")
        assert "Ready in" in page.inner_text("#status")
        # no server, no COOP/COEP: no SharedArrayBuffer, so Stop works between steps, and
        # the page says so in its log
        assert info["crossOriginIsolated"] is False and info["stopFlag"] is False
        assert "not cross-origin isolated" in page.text_content("#log")
        page.wait_for_function("window.app.state.sin.source.length > 0", timeout=10000)
        _train(page, 20)
        got = losses(page, "sin")
        assert [s for s, _ in got] == list(range(1, 21)) or [s for s, _ in got] == list(range(20)), got
        assert all(math.isfinite(v) for _, v in got)
        assert got[-1][1] < got[0][1], got  # it learns
        assert page.get_attribute("#error", "hidden") is not None, page.text_content("#error")
        _download_params(page)
        # the text that the site's wheel leaves out is in the bundle, read on first use
        text = "from tgweb.samples import shakespeare\nlen(shakespeare.text())"
        assert page.evaluate("(src) => window.app.tg.run(src)", text) == 1115394
        if stop:
            _stop_mid_run(page)
        assert not page.problems, page.problems
        TIMINGS[what] = {
            "page_load_to_ready_s": info["timings"]["page_load_to_ready"] / 1000,
            "goto_to_ready_wall_s": round(wall, 2),
            "worker": info["timings"],
        }
        return info
    finally:
        page.close()


@pytest.fixture(scope="module", autouse=True)
def _write_timings():
    yield
    if TIMINGS:
        OUT.mkdir(exist_ok=True)
        (OUT / "disk_timings.json").write_text(json.dumps(TIMINGS, indent=1))
        brief = {k: v.get("page_load_to_ready_s", v) for k, v in TIMINGS.items()}
        print("\nwithout a server:", json.dumps(brief))


@pytest.fixture(scope="module")
def disk_bundle():
    build = _build()
    build.bundle_disk()
    assert (build.DISK / "data.js").exists() and (build.DISK / "app.js").exists()
    return build.DISK


def test_index_html_from_disk_trains_sin(browser, disk_bundle):
    _train_sin(browser, (ROOT / "web" / "index.html").as_uri(), "index.html from disk")


def test_index_html_from_disk_without_its_bundle_gives_the_command(browser, tmp_path):
    """A checkout where setup has not run: the page says at once what to run, where."""
    web = tmp_path / "checkout" / "web"
    web.mkdir(parents=True)
    for name in ("index.html", "disk-loader.js", "app.css"):
        shutil.copy(ROOT / "web" / name, web / name)
    page = browser.new_page()
    try:
        t0 = time.perf_counter()
        page.goto((web / "index.html").as_uri())
        page.wait_for_function("window.tgwebDisk && window.tgwebDisk.missing", timeout=5000)
        assert time.perf_counter() - t0 < 5
        status = page.inner_text("#status")
        assert "`python3 build.py setup`" in status and str(tmp_path / "checkout") in status, status
        assert page.get_attribute("#status", "data-kind") == "error"
    finally:
        page.close()


@pytest.fixture(scope="module")
def single_file():
    build = _build()
    t0 = time.perf_counter()
    path = build.standalone()
    TIMINGS["single file"] = {"bytes": path.stat().st_size, "build_s": round(time.perf_counter() - t0, 1)}
    return path


def test_single_file_from_disk_trains_sin(browser, single_file):
    _train_sin(browser, single_file.as_uri(), "dist/tgweb.html from disk")


class _PlainHandler(http.server.SimpleHTTPRequestHandler):
    """A static host: files and their types, no COOP/COEP or other special headers."""

    def log_message(self, fmt, *args):
        pass


def test_single_file_over_plain_http_trains_sin(browser, single_file):
    handler = functools.partial(_PlainHandler, directory=str(single_file.parent))
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{srv.server_address[1]}/{single_file.name}"
        _train_sin(browser, url, "dist/tgweb.html over plain http", stop=True)
    finally:
        srv.shutdown()
        srv.server_close()


def test_a_view_module_not_written_yet_does_not_stop_the_bundle(tmp_path):
    """web/page/views/<name>.mjs that gallery.mjs imports but that is missing becomes a stub
    whose render() says so; the rest of the page is bundled as usual."""
    web = tmp_path / "web"
    shutil.copytree(ROOT / "web", web, ignore=shutil.ignore_patterns("disk", "__pycache__"))
    gallery = (web / "page" / "gallery.mjs").read_text()
    view = next(v for v in sorted((web / "page" / "views").glob("*.mjs")) if f"./views/{v.name}" in gallery)
    view.unlink()
    out = tmp_path / "out"
    subprocess.run(["node", str(ROOT / "tools" / "disk_bundle.mjs"), str(out), str(web)], check=True)
    app = (out / "app.js").read_text()
    assert f"page/views/{view.name} was missing when the page was bundled" in app
    assert "function boot()" in app and (out / "worker.js").stat().st_size > 1000
