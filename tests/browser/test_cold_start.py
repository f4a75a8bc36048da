"""A first visit's start-up (issue 28): the phase timings tgweb.mjs reports, the progress
events the page shows while the worker starts, and the site's wheel without the samples'
big data files, which the worker fetches when a sample first reads them."""

from __future__ import annotations

import hashlib
import json
import re
import threading
import zipfile

from .conftest import ARGS, CHROMIUM, _build, open_app, py, run_py

SHAKESPEARE = "tinyshakespeare.txt"
FIRST_LOSS = "window.app && window.app.state.sin && window.app.state.sin.losses.length > 0"
STARTUP = [
    "downloading Pyodide",
    "compiling Pyodide (WebAssembly, as it arrives)",
    "starting Python",
    "importing tgweb",
]


def test_start_up_phases_are_timed_and_announced(page):
    info = page.evaluate("window.tg.info")
    t = info["timings"]
    for k in ("wasm", "pyodide", "import_tgweb", "gpu", "total"):
        assert isinstance(t[k], int) and t[k] >= 0, (k, t)
    assert 0 < t["wasm"] <= t["pyodide"], t  # the wasm arrives within Pyodide's boot
    # Python starts as the worker does, before the page's init message (total's start)
    assert t["pyodide"] + t["import_tgweb"] <= t["since_worker_start"] + 2, t
    at = t["since_page_load"]
    # the page's clock: start() called, then the worker running, then ready
    assert 0 <= at["start_call"] <= at["worker_created"] <= at["worker_started"] < at["ready"], t
    assert at["ready"] <= t["page_load_to_ready"] + 2, t
    assert t["total"] <= t["start_to_ready"], t
    started = [d for e, d in page.evaluate("window.startEvents") if e == "startup"]
    assert [d["text"] for d in started] == STARTUP, started
    ats = [d["at"] for d in started]  # epoch ms, in order, within the worker's life
    assert ats == sorted(ats) and t["worker_started_at"] <= ats[0] and ats[-1] <= t["ready_at"], (ats, t)


def test_pipeline_creation_is_timed(page):
    ms = py(
        page,
        """
import tgweb as tg
from tgweb import samples
sin = samples.get("sin")
_t = tg.compile(sin.Model(), sin.loss_fn, inputs=sin.INPUTS, optimizer=sin.OPTIMIZER)
_rt = _t.engine.rt._rt
_out = [float(_rt.pipelinesMs), float(_rt.setupMs), int(_rt.pipelineCount)]
_t.close()
_out
""",
    )
    pipelines, setup, count = ms
    assert count > 1 and 0 < pipelines <= setup, ms


def test_the_sites_wheel_leaves_the_text_out():
    site = _build().SITE
    (whl,) = (site / "wheels").glob("tgweb-*.whl")
    with zipfile.ZipFile(whl) as z:
        names = z.namelist()
    assert "tgweb/samples/data/names.txt" in names and not [n for n in names if SHAKESPEARE in n]
    want = hashlib.sha256((_build().ROOT / "tgweb" / "samples" / "data" / SHAKESPEARE).read_bytes()).digest()
    assert hashlib.sha256((site / "data" / SHAKESPEARE).read_bytes()).digest() == want


FETCHED = """
from pyodide.code import run_js
list(run_js("performance.getEntriesByType('resource').map((e) => e.name.split('?')[0].split('/').pop())"
            ".filter((n) => n.endsWith('.txt'))"))
"""


def test_the_page_starts_early_and_fetches_the_text_when_first_read(browser, site_url):
    """A first visit of the trainer page: its worker starts before the page's modules have
    loaded, the status line names each start-up phase, and nothing fetches the text until
    shakespeare reads it; then the small size trains on it. A missing data file is a clear
    error."""
    page = open_app(browser, site_url)
    try:
        at = page.evaluate("window.app.tg.info.timings.since_page_load")
        assert at["worker_created"] < at["start_call"], at  # disk-loader.js made it
        assert page.evaluate("window.app.startup") == STARTUP
        page.evaluate("window.tg = window.app.tg")
        assert py(page, FETCHED) == []
        got = py(
            page,
            """
import hashlib
import tgweb as tg
from importlib import resources
from tgweb.samples import shakespeare
packaged = (resources.files("tgweb.samples") / "data" / "tinyshakespeare.txt").is_file()
s = shakespeare.sized("small")
t = tg.compile(s.Model(), s.loss_fn, inputs=s.INPUTS, optimizer=s.OPTIMIZER)
losses = [t.step(**s.batch(i)).loss for i in range(20)]
t.close()
[packaged, hashlib.sha256(shakespeare.text()).hexdigest(), shakespeare.vocab(), losses]
""",
        )
        packaged, sha, vocab, losses = got
        assert not packaged and vocab == 65
        assert sha == "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"
        assert 3.6 < losses[0] < 4.6 and losses[-1] < losses[0] - 0.3, losses  # ln 65 = 4.17
        assert py(page, FETCHED) == [SHAKESPEARE]
        status, err = run_py(page, "from tgweb import worker\nworker.fetch_data('no-such-file.txt')", "x.py")
        assert status == "error" and err["pyType"] == "FileNotFoundError", err
        assert "data/no-such-file.txt" in err["message"] and "HTTP 404" in err["message"], err
    finally:
        page.close()


def test_micropip_loads_when_a_source_uses_it(page):
    # the worker no longer loads it to install tgweb; a source that names it gets it
    assert py(page, "import micropip\nmicropip.__name__") == "micropip"


# the status line's texts as they change, from the page's load on
_WATCH_STATUS = """
window.statusSeen = [];
new MutationObserver(() => {
    const el = document.getElementById("status");
    if (el) window.statusSeen.push(el.textContent);
}).observe(document, {subtree: true, childList: true, characterData: true});
"""


def test_the_status_line_says_what_the_page_waits_for(browser, site_url):
    """While the page starts and while Start waits for the first loss, the status line names
    each phase with a ticking time, then gives the phases' times; the first loss is shown as
    soon as it exists, before training goes on."""
    page = browser.new_page()
    page.add_init_script(_WATCH_STATUS)
    try:
        page.goto(f"{site_url}/#sin")
        page.wait_for_function("window.app && (window.app.ready || window.app.startError)", timeout=120000)
        ready = page.evaluate("window.app.waits")[0]
        assert ready["what"] == "ready" and not ready.get("failed"), ready
        assert [p["text"] for p in ready["phases"]] == STARTUP, ready
        assert all(p["ms"] >= 0 for p in ready["phases"]) and ready["ms"] > 0, ready
        seen = page.evaluate("window.statusSeen")
        for text in STARTUP:  # each phase was on the line, with its time so far
            assert any(re.fullmatch(rf"Starting: {re.escape(text)}… \d+\.\d s.*", x) for x in seen), (
                text,
                seen,
            )
        status = page.inner_text("#status")
        assert status.startswith("Ready in ") and ready["summary"] in status, status
        assert re.search(r"starting Python \d+\.\d s", status), status

        page.evaluate("window.statusSeen = []")
        page.fill("#steps", "400")
        page.dispatch_event("#steps", "change")
        page.click("#start")
        page.wait_for_function("window.app.waits.length === 2", timeout=120000)
        # the first loss is on the page while the 400 steps go on
        start = page.evaluate("window.app.waits[1]")
        loss = page.evaluate("window.app.state.sin.losses[0]")
        assert page.evaluate("window.app.state.sin.losses.length") < 400
        assert start["what"] == "start" and start["sample"] == "sin" and start["loss"] == loss[1], (
            start,
            loss,
        )
        texts = [p["text"] for p in start["phases"]]
        assert texts[0].startswith("compiling the model") and texts[-1] == "running the first step", texts
        assert "compiling kernels (GPU pipelines)" in texts, texts
        seen = page.evaluate("window.statusSeen")
        assert any(
            re.match(r"sin: compiling kernels \(GPU pipelines\)… \d+\.\d s \(after compiling the model", x)
            for x in seen
        ), seen
        first = [x for x in seen if "first loss" in x]
        assert first and first[0].startswith("sin: first loss ") and "training 400 steps" in first[0], seen
        page.wait_for_function("document.body.dataset.state === 'ready'", timeout=300000)
        assert "done at step 400" in page.inner_text("#status")
    finally:
        page.close()


def test_trace_visit_follows_a_repeat_visits_worker(browser, site_url):
    """tools/trace_visit.py in this machine's Chromium: a first visit and a repeat visit
    traced in one profile; the repeat restored the kept snapshot, and the trace shows the
    worker streaming Pyodide's wasm (its bytes in order) and V8 hashing them, compiling
    Pyodide's module script, and the CPU time of Chromium's threads until the first loss."""
    import sys

    sys.path.insert(0, str(_build().ROOT / "tools"))
    import trace_visit

    # a Chromium of its own, connected through this session's Playwright
    first, repeat = trace_visit.main(_build().SITE, "sin", 2, 0.0, 8.0, None, chromium=browser.browser_type)
    assert (first["visit"], repeat["visit"]) == ("first", "repeat")
    assert repeat["timings"]["snapshot"] == "restored", repeat["timings"]
    for r in (first, repeat):
        lo, hi = r["bytes"]
        assert 0 < r["stream"] <= lo <= hi < r["first_loss_ms"], r
        assert any(name == "wasm.FinishStreaming" and at >= hi for at, _, name in r["steps"]), r["steps"]
        assert isinstance(r["code_cache"], bool) and all(d >= 8 for _, d, _ in r["tasks"]), r
        # every thread's CPU time until the first loss, the page's worker among them
        cpu = r["cpu"]
        assert cpu["total"] >= sum(ms for _, _, ms in cpu["threads"][:3]) > 0, cpu
        assert any(t.startswith("DedicatedWorker") for _, t, _ in cpu["threads"]), cpu["threads"]
        # Pyodide's module script, compiled on the worker's thread (Chromium keeps a script's
        # code only from its second compile on: a first visit's is compiled afresh)
        assert [n for _, _, n, _ in r["scripts"]].count("pyodide.asm.mjs") == 1, r["scripts"]
    assert all(cached == 0 for _, _, name, cached in first["scripts"]), first["scripts"]


def test_a_repeat_visit_asks_the_server_for_the_page_alone(browser, tmp_path):
    """The bundled site asks for each of its files at its version (build.py's _version_site,
    web/versioned.mjs) and the server lets the browser keep those for good: a repeat visit
    asks the server for the page alone (no revalidation of the site's files, which a visitor
    far from the server waits for, one round trip after another), restores the kept
    snapshot, takes the cached Programs and trains. The first visit asked for every file at
    its version: Pyodide's own at Pyodide's, the others at the site's. (A profile on disk, as
    a visitor's: an incognito context's cache in memory keeps no file over a few MB.)"""
    build = _build()
    manifest = json.loads((build.SITE / "manifest.json").read_text())
    versions = {"site": manifest["version"], "pyodide": manifest["pyodide_files"]["version"]}
    srv = build.make_server(build.SITE, 0)
    asked: list[str] = []
    srv.RequestHandlerClass.log_request = lambda handler, *a: asked.append(handler.path)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{srv.server_address[1]}/?autostart#sin"
    ctx = browser.browser_type.launch_persistent_context(
        tmp_path / "profile", executable_path=CHROMIUM, args=ARGS, headless=True
    )
    try:
        page = ctx.new_page()
        page.goto(url)
        page.wait_for_function("window.app && window.app.snapshot", timeout=120000)
        page.close()
        first, asked[:] = list(asked), []
        page = ctx.new_page()
        page.goto(url)
        page.wait_for_function(FIRST_LOSS, timeout=120000)
        assert asked == ["/?autostart"], asked
        t = page.evaluate("window.app.tg.info.timings")
        assert t["snapshot"] == "restored", t
        assert page.evaluate("window.app.state.sin.info.cache") == "hit"
        assert page.evaluate("window.app.state.sin.losses.length") > 0
    finally:
        ctx.close()
        srv.shutdown()
        srv.server_close()
    assert first[0] == "/?autostart" and len(first) > 30, first
    for path in first[1:]:
        name, _, query = path.partition("?")
        pyodide = name.removeprefix("/pyodide/") in manifest["pyodide_files"]["files"]
        assert query.endswith(f"v={versions['pyodide' if pyodide else 'site']}"), path
