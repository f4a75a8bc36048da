"""Nothing lost (issue 29): the trainer page keeps source edits and training runs in the
browser's storage. Real Chromium with a persistent profile (its own process, so that a
test can kill it without warning), real Pyodide, WebGPU on SwiftShader.

The tests run in order on one profile: an edit survives a reload; a run survives
SIGKILL of the whole browser and resumes with exactly the losses of a run that never
stopped; a damaged saved entry is refused with a message; a save that hits the storage
quota (a real one, set through the DevTools protocol) is reported and training goes on.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import pytest

from .conftest import ARGS, CHROMIUM, OUT, _build, _site_is_stale, losses

CRASH: dict = {}


class Chrome:
    """Chromium on a persistent profile, started by us (its process group is ours to
    kill), driven by Playwright over the DevTools protocol."""

    def __init__(self, browser_type, profile):
        self.type, self.profile, self.proc, self.browser = browser_type, profile, None, None

    def launch(self):
        port_file = self.profile / "DevToolsActivePort"
        if port_file.exists():
            port_file.unlink()
        cmd = [
            CHROMIUM,
            "--headless=new",
            f"--user-data-dir={self.profile}",
            "--remote-debugging-port=0",
            *ARGS,
        ]
        self.proc = subprocess.Popen(
            cmd + ["about:blank"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        t0 = time.monotonic()
        while not (port_file.exists() and port_file.read_text().strip()):
            assert self.proc.poll() is None, f"Chromium exited with {self.proc.returncode}"
            assert time.monotonic() - t0 < 30, "Chromium did not open its DevTools port"
            time.sleep(0.05)
        port = port_file.read_text().split()[0]
        self.browser = self.type.connect_over_cdp(f"http://127.0.0.1:{port}")
        return self.browser.contexts[0]

    def kill(self):
        """SIGKILL to the whole browser (every process of it): no unload, no flush."""
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)
        self.browser = None

    def close(self):
        if self.proc is not None and self.proc.poll() is None:
            self.kill()


@pytest.fixture(scope="module")
def chrome(browser, tmp_path_factory):
    if _site_is_stale(_build().SITE):
        _build().bundle_site()
    c = Chrome(browser.browser_type, tmp_path_factory.mktemp("profile"))
    c.context = c.launch()
    yield c
    c.close()


def _open(ctx, url: str):
    """The trainer page at url, ready (Python, tgweb and the GPU up, saved runs listed)."""
    page = ctx.new_page()
    page.set_viewport_size({"width": 1280, "height": 1000})
    problems: list[str] = []
    page.on("pageerror", lambda e: problems.append(f"pageerror: {e}"))
    page.on("console", lambda m: m.type == "error" and problems.append(f"console error: {m.text}"))
    page.problems = problems
    page.goto(url)
    page.wait_for_function("window.app && (window.app.ready || window.app.startError)", timeout=120000)
    assert page.evaluate("window.app.startError || null") is None
    return page


def _edit(page, action):
    """action() (an edit or a revert), then wait until the page has stored its outcome."""
    n = page.evaluate("window.app.kept || 0")
    action()
    page.wait_for_function(f"(window.app.kept || 0) > {n}", timeout=10000)


def _source(page, name: str) -> str:
    page.click(f"#pick-{name}")
    page.wait_for_function(f"window.app.state.{name}.source.length > 0", timeout=30000)
    return page.input_value("#source")


def test_an_edit_survives_a_reload_and_restore_forgets_it(chrome, site_url):
    page = _open(chrome.context, f"{site_url}/#names")
    original = _source(page, "names")
    edited = "# my names model, edited on the page\n" + original
    _edit(page, lambda: page.fill("#source", edited))
    assert "· edited" in page.inner_text("#pick-names")
    page.reload()
    page.wait_for_function("window.app && window.app.ready", timeout=120000)
    assert _source(page, "names") == edited
    # issue 24: a long line wraps, nothing is clipped, and its number spans its rows
    _edit(page, lambda: page.fill("#source", "x = 1  # " + "words " * 60 + "\n" + edited))
    box = page.evaluate("""(() => {
        const t = document.getElementById("source"), g = document.getElementById("gutter");
        return {sw: t.scrollWidth, cw: t.clientWidth, first: g.children[0].offsetHeight,
                lh: parseFloat(getComputedStyle(t).lineHeight), rows: g.scrollHeight, text: t.scrollHeight};
    })()""")
    assert box["sw"] <= box["cw"] and box["first"] >= 2 * box["lh"], box
    assert abs(box["rows"] - box["text"]) <= 2, box  # the numbers stay beside their lines
    page.screenshot(path=str(OUT / "page_editor_wraps.png"))
    assert "· edited" in page.inner_text("#pick-names")
    _edit(page, lambda: page.click("#revert"))
    page.reload()
    page.wait_for_function("window.app && window.app.ready", timeout=120000)
    assert _source(page, "names") == original
    assert not page.problems, page.problems
    page.close()


def _saved(page) -> list[dict]:
    return page.evaluate("window.app.runs")


def test_a_run_survives_killing_the_browser_and_resumes_exactly(chrome, site_url):
    page = _open(chrome.context, f"{site_url}/?autosave=1#sin")
    page.fill("#steps", "100000")
    page.dispatch_event("#steps", "change")
    page.click("#start")
    page.wait_for_function("window.app.saves.length >= 2", timeout=120000)  # a save every second
    assert page.evaluate("document.body.dataset.state") == "running"
    assert "Autosaved sin at step" in page.inner_text("#autosave")
    chrome.kill()  # mid-run, without warning

    chrome.context = chrome.launch()
    page = _open(chrome.context, f"{site_url}/?autosave=1")
    runs = _saved(page)
    assert [r["key"] for r in runs] == ["sin"], runs
    saved = runs[0]["calls"]
    label = page.inner_text("#resume-sin")
    assert label.startswith(f"Resume sin from step {saved} (saved ") and "steps to go" in label, label
    assert "Storage: " in page.inner_text("#storage") and " used of " in page.inner_text("#storage")
    OUT.mkdir(exist_ok=True)
    page.screenshot(path=str(OUT / "page_resume.png"), full_page=True)
    page.click("#resume-sin")
    upto = saved + 40
    page.wait_for_function(f"window.app.state.sin.losses.some(([s]) => s >= {upto})", timeout=120000)
    page.click("#stop")
    page.wait_for_function("document.body.dataset.state === 'ready'", timeout=30000)
    resumed = {s: v for s, v in losses(page, "sin") if saved < s <= upto}
    before = {s: v for s, v in losses(page, "sin") if s <= saved}
    assert len(before) == saved  # the chart's history came back with the run

    # the same sample, never stopped: from the seeded start to the same step
    page.click("#reset")
    page.wait_for_function("document.body.dataset.state === 'ready'", timeout=30000)
    page.fill("#steps", str(upto))
    page.dispatch_event("#steps", "change")
    page.click("#start")
    page.wait_for_function(f"window.app.state.sin.losses.length === {upto}", timeout=120000)
    page.wait_for_function("document.body.dataset.state === 'ready'", timeout=30000)
    whole = dict(losses(page, "sin"))
    assert resumed == {s: whole[s] for s in range(saved + 1, upto + 1)}  # exactly
    assert before == {s: whole[s] for s in range(1, saved + 1)}
    CRASH.update(saved=saved, compared=len(resumed))
    print(f"\nresumed at step {saved} after SIGKILL; {len(resumed)} steps equal an uninterrupted run's")
    assert not page.problems, page.problems
    page.close()


def test_a_damaged_saved_run_is_refused_with_a_message(chrome, site_url):
    page = _open(chrome.context, site_url)
    assert [r["key"] for r in _saved(page)] == ["sin"]
    flipped = page.evaluate("""async () => {
        const db = await new Promise((ok) => {
            indexedDB.open("tgweb-page").onsuccess = (e) => ok(e.target.result);
        });
        const get = (store, key) => new Promise((ok) => {
            db.transaction(store).objectStore(store).get(key).onsuccess = (e) => ok(e.target.result);
        });
        const ptr = await get("runs", "sin");
        const entry = await get("entries", ptr.id);
        const bytes = new Uint8Array(entry.bytes);
        bytes[bytes.length - 3] ^= 0x40;   // one bit of a parameter's float
        entry.bytes = bytes;
        const tx = db.transaction("entries", "readwrite");
        tx.objectStore("entries").put(entry);
        await new Promise((ok) => { tx.oncomplete = ok; });
        return bytes.length;
    }""")
    assert flipped > 1000
    page.reload()
    page.wait_for_function("window.app && window.app.ready", timeout=120000)
    page.click("#resume-sin")
    page.wait_for_function("window.app.runs.length === 0", timeout=10000)
    status = page.inner_text("#status")
    assert 'the saved run "sin" is damaged (checksum mismatch); it was discarded' in status, status
    assert page.inner_text("#fig-step") == "0" and not page.evaluate("window.app.state.sin.compiled")
    assert page.is_visible("#no-runs")
    page.close()


def test_a_failed_save_is_reported_and_training_goes_on(browser, tmp_path_factory, site_url):
    # a real quota, smaller than what the origin holds, in force before the page opens its
    # store: on a fresh profile, since an origin whose IndexedDB a closed page of the shared
    # profile still held open kept its old quota
    chrome = Chrome(browser.browser_type, tmp_path_factory.mktemp("quota-profile"))
    chrome.context = chrome.launch()
    try:
        blank = chrome.context.new_page()
        cdp = chrome.context.new_cdp_session(blank)
        cdp.send("Storage.overrideQuotaForOrigin", {"origin": site_url, "quotaSize": 1})
        try:
            page = _open(chrome.context, f"{site_url}/?autosave=0.2#sin")
            page.fill("#steps", "150")
            page.dispatch_event("#steps", "change")
            page.click("#start")
            page.wait_for_function("window.app.state.sin.losses.length === 150", timeout=120000)
            page.wait_for_function("document.body.dataset.state === 'ready'", timeout=30000)
            # the last save is written after the run returns: lifting the quota before it is
            # answered let it succeed and say "Autosaved" over the failure
            page.wait_for_function("window.app.tg.saving === 0", timeout=30000)
        finally:
            cdp.send("Storage.overrideQuotaForOrigin", {"origin": site_url})
            blank.close()
        text = page.inner_text("#autosave")
        assert text.startswith("Autosave failed (QuotaExceededError: ") and "training goes on" in text, text
        assert "delete saved runs to make room" in text
        assert page.evaluate("window.app.saveErrors") >= 1 and page.evaluate("window.app.saves") == []
        assert "done at step 150" in page.inner_text("#status")
        assert page.get_attribute("#autosave", "data-kind") == "error"
        page.screenshot(path=str(OUT / "page_save_failed.png"), full_page=True)
    finally:
        chrome.close()


@pytest.fixture(scope="module", autouse=True)
def _write_figures():
    yield
    if CRASH:
        OUT.mkdir(exist_ok=True)
        (OUT / "autosave_crash.json").write_text(json.dumps(CRASH))
