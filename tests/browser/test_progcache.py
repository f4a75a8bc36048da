"""Repeat visits (issue 28): tg.compile's Programs cached in the page's IndexedDB
(tgweb/progcache.py, web/progcache.mjs), in real Chromium + Pyodide on SwiftShader.

A hit trains with exactly the losses of a compile; a source edit, a change of tgweb's
files and another adapter class each miss; a corrupt and a truncated entry are
discarded and compiled again; the trainer page lists the entries, starts a sample from
one after a reload (and Python from the memory snapshot after importing tgweb, which the
first visit's worker makes apart, after the first step, where the site carries none), and
clears them; a damaged snapshot is refused and Python boots afresh. A first visit restores
the snapshot the site was bundled with; a damaged one is refused. A repeat visit of
addition takes its trainer's and its attached program's Programs from the cache, and its
initial values from web/bulk.mjs after the snapshot's restore, and trains exactly as the
first visit; an edit of its source misses both; Start shows the view after the first
step, not before. The entries are kept within their limits,
least recently used first out; a cache kept by an older tgweb (one store for texts and
metas) is read after the upgrade, and the last visit's Programs come in the order used.
"""

from __future__ import annotations

import base64
import io
import json
import re
import urllib.request
import zipfile

from .conftest import losses, open_app, open_harness, open_sample, py, site_file, train_app

SETUP = """
import tgweb as tg
from tgweb import progcache
from tgweb.backends import browser as _browser
from tgweb.samples import sin

def cached_run(source, steps=4):
    with progcache.keyed(source, "test"):
        tr = tg.compile(sin.Model(), sin.loss_fn, inputs=sin.INPUTS, optimizer=sin.OPTIMIZER, seed=0)
    out = dict(progcache.last)
    out["losses"] = [tr.step(**sin.batch(i)).loss for i in range(steps)]
    tr.close()
    return out
"""
SOURCE = "# a sin trainer\n"

# the worker's puts go on in the background: wait until the entry is there
_WAIT_FOR = """async (key) => {
    const cache = await tgweb.openProgramCache();
    for (let i = 0; i < 200; i++) {
        if ((await cache.list()).some((e) => e.key === key)) return true;
        await new Promise((r) => setTimeout(r, 25));
    }
    return false;
}"""


def _run(page, source=SOURCE):
    got = py(page, f"cached_run({source!r})")
    if got["outcome"] != "hit":
        assert page.evaluate(_WAIT_FOR, got["key"]), "the compiled Program was not stored"
    return got


def _edit_entry(page, key, how):
    """Rewrite the stored entry's text in IndexedDB: how = "flip" one body character, "cut"
    it in half, or keep its "head" (30 characters: not even the checksum line whole)."""
    page.evaluate(
        """async ([key, how]) => {
        const db = await new Promise((res, rej) => { const r = indexedDB.open("tgweb-programs");
            r.onsuccess = () => res(r.result); r.onerror = () => rej(r.error); });
        const rec = await new Promise((res) => { db.transaction(["programs"]).objectStore("programs").get(key)
            .onsuccess = (ev) => res(ev.target.result); });
        const t = rec.text, i = t.length - 200;
        rec.text = how === "cut" ? t.slice(0, t.length >> 1) : how === "head" ? t.slice(0, 30)
            : t.slice(0, i) + (t[i] === "1" ? "2" : "1") + t.slice(i + 1);
        await new Promise((res) => { const tx = db.transaction(["programs"], "readwrite");
            tx.objectStore("programs").put(rec); tx.oncomplete = res; });
        db.close();
    }""",
        [key, how],
    )


def test_hit_trains_exactly_as_a_compile_and_stale_keys_miss(page):
    py(page, SETUP)
    page.evaluate("async () => (await tgweb.openProgramCache()).clear()")
    first = _run(page)
    assert first["outcome"] == "miss"
    hit = _run(page)
    assert hit["outcome"] == "hit" and hit["key"] == first["key"]
    assert hit["losses"] == first["losses"]  # bit-identical training
    # an edit of the source misses
    edited = _run(page, SOURCE + "# edited\n")
    assert edited["outcome"] == "miss" and edited["key"] != first["key"]
    # a change of tgweb's own files misses (this worker's copy of the package, put back after)
    changed = py(
        page,
        """
import pathlib
_f = pathlib.Path(tg.__file__).parent / "ops" / "base.py"
_old = _f.read_text()
_f.write_text(_old + "\\n# changed\\n")
progcache.build_id.cache_clear()
try:
    _got = cached_run(%r)
finally:
    _f.write_text(_old)
    progcache.build_id.cache_clear()
_got
"""
        % SOURCE,
    )
    assert changed["outcome"] == "miss" and changed["key"] not in (first["key"], edited["key"])
    # another adapter class (the GPU class's kernels run on SwiftShader too) misses
    other = py(
        page,
        f"""
from tgweb.codegen.target import Target
_real = _browser.device_target
_browser.device_target = lambda: Target("gpu", features=_real().features)
try:
    _got = cached_run({SOURCE!r})
finally:
    _browser.device_target = _real
_got
""",
    )
    assert other["outcome"] == "miss" and other["key"] != first["key"]
    assert _run(page)["outcome"] == "hit"  # the first entry is still there, and still good


def test_corrupt_and_truncated_entries_are_rebuilt(page):
    py(page, SETUP)
    first = _run(page, SOURCE + "# corrupt\n")
    cases = (("flip", "checksum mismatch"), ("cut", "checksum mismatch"), ("head", "not a cache entry"))
    for how, why in cases:
        _edit_entry(page, first["key"], how)
        got = _run(page, SOURCE + "# corrupt\n")
        assert got["outcome"].startswith("corrupt") and why in got["outcome"], got["outcome"]
        assert got["losses"] == first["losses"]  # compiled again, not run from the damage
        assert _run(page, SOURCE + "# corrupt\n")["outcome"] == "hit"  # and stored again


_PREWARMED = """
from tgweb.backends import browser as _browser
_t = _spaces['sin']['trainer']
_r, _i = _t.engine.rt._rt, _t._initial._engine.rt._rt
[_r.prewarmed, _r.pipelineCount, _i.prewarmed, _i.pipelineCount, len(_browser._texts)]
"""


def test_trainer_page_starts_from_its_programs_after_a_reload(browser, site_url):
    # a new browser context: nothing stored yet; the site as if bundled without its snapshot
    page = open_app(browser, site_url, "sin", site_snapshot=False)
    try:
        open_sample(page, "sin")
        assert page.evaluate("window.app.tg.info.timings.snapshot") == "pending"
        train_app(page, 5)
        assert page.evaluate("window.app.state.sin.info.cache") == "miss"
        # compiled afresh, the step's pipelines were asked for before its Runtime (the GPU
        # compiled them while Python planned the initial values), and theirs too
        made, count, made0, count0, untaken = _app_py(page, _PREWARMED)
        assert made == count > 0 and made0 == count0 > 0, (made, count, made0, count0)
        assert untaken == 0  # each Runtime took the JSON its prewarm made
        page.wait_for_function("document.querySelectorAll('#program-list li').length > 0", timeout=20000)
        assert page.evaluate(_SNAPSHOT_KEPT), "no snapshot was kept"
        page.wait_for_function("window.app.snapshot", timeout=20000)
        made = page.evaluate("window.app.snapshot")  # the worker's "snapshot" event
        assert made["size"] > 1 << 20 and made["ms"] > 0, made
        _reload(page)
        assert page.evaluate("window.app.tg.info.timings.snapshot") == "restored"
        # its file read by the reader the page started as it loaded (snapread.mjs), which
        # sent the bytes and then their hash: Pyodide restored from the bytes meanwhile
        assert page.evaluate("window.app.tg.info.timings.snapshot_read") == "worker"
        # its marks, in ms since the worker started (the reader may start before it), in
        # the order they must come
        ms = page.evaluate("window.app.tg.info.timings.snapshot_ms")
        for order in (
            ["started", "read", "answered", "filled", "restored"],
            ["asked", "answered"],
            ["read", "hashed", "checked", "restored"],
            ["loading", "instance", "wanted", "unpacked", "loaded", "restored"],
        ):
            assert [ms[k] for k in order] == sorted(ms[k] for k in order), ms
        # (the worker's own import of Pyodide's module script may be told it is in after
        # loadPyodide's import of it has gone on to the instance: no order between those)
        assert 0 <= ms["asked"] and ms["wanted"] <= ms["restored"] and 0 < ms["asm"], ms
        # the reader, whichever way this machine went: the file's bytes and their SHA-256
        assert page.evaluate(_READER) == {"bytes": page.evaluate(_SNAPSHOT_FILES)[0][1], "checksum": True}
        # the last visit's pipelines, asked for while Python restored: the hit's step and its
        # initial values take them (the attached program's are asked once the first loss exists)
        assert page.evaluate("window.app.tg.info.timings.prewarmed") > 0
        open_sample(page, "sin")
        train_app(page, 5)
        assert page.evaluate("window.app.state.sin.info.cache") == "hit"
        made, count, made0, count0, _ = _app_py(page, _PREWARMED)
        assert made == count > 0 and made0 == count0 > 0, (made, count, made0, count0)
        assert "from the compiled programs" in page.text_content("#log")
        entries = page.evaluate("window.app.programs.refresh()")
        want = [("sin", "forward"), ("sin", "initial"), ("sin", "step")]  # newest first
        assert [(e["label"], e["kind"]) for e in entries] == want, entries
        assert page.evaluate("window.app.state.sin.info.cache_attached") == ["hit"]
        page.click("#programs summary")
        page.click("#programs-clear")
        page.wait_for_function("document.querySelectorAll('#program-list li').length === 0", timeout=10000)
        assert page.evaluate("(async () => (await window.app.programs.cache.list()).length)()") == 0
        assert page.evaluate("(async () => (await window.app.programs.cache.snapshots()).length)()") == 0
        assert page.evaluate(_SNAPSHOT_FILES) == []  # its file went too
        # a damaged snapshot is refused (its checksum), and Python boots afresh
        _reload(page)
        assert page.evaluate("window.app.tg.info.timings.snapshot") == "pending"
        assert page.evaluate(_SNAPSHOT_KEPT), "no snapshot was kept"  # made once the page idles
        [(name, size)] = page.evaluate(_SNAPSHOT_FILES)
        [kept] = page.evaluate("window.app.programs.cache.snapshots()")
        assert [name, size] == ["memory", kept["size"]] and size > 1 << 20
        page.evaluate(_DAMAGE_SNAPSHOT)
        _reload(page)
        _boots_afresh(page, "its checksum does not match")
    finally:
        page.close()


# the worker keeps its snapshot in the background: wait until it is there
_SNAPSHOT_KEPT = """async () => {
    for (let i = 0; i < 1200; i++) {
        if ((await window.app.programs.cache.snapshots()).length) return true;
        await new Promise((r) => setTimeout(r, 50));
    }
    return false;
}"""
# the kept snapshot's bytes: a file of the origin's private file system (its key is in IndexedDB)
_SNAPSHOT_FILES = """async () => {
    const root = await navigator.storage.getDirectory();
    const dir = await root.getDirectoryHandle("tgweb-snapshots", { create: true });
    const out = [];
    for await (const [name, handle] of dir.entries()) out.push([name, (await handle.getFile()).size]);
    return out;
}"""
# snapread.mjs run as the worker's reader runs it, against the checksum its record keeps
_READER = """async () => {
    const w = new Worker("snapread.mjs", { type: "module", name: "tgweb-snapshot-reader" });
    // its answers: the bytes, then their hash (or an error)
    const got = await new Promise((res) => {
        const all = {};
        w.onmessage = (e) => { Object.assign(all, e.data); if (!e.data.bytes) res(all); };
        w.postMessage(null);
    });
    w.terminate();
    const db = window.app.programs.cache.db;
    const infos = await new Promise((res) => {
        const all = db.transaction(["snapshots"]).objectStore("snapshots").getAll();
        all.onsuccess = () => res(all.result.filter((r) => r.key.startsWith("size ")));
    });
    const checksum = infos.length === 1 && got.sha256 === infos[0].sha256;
    return { bytes: got.bytes ? got.bytes.byteLength : got.error, checksum };
}"""
_DAMAGE_SNAPSHOT = """async () => {
    const dir = await (await navigator.storage.getDirectory()).getDirectoryHandle("tgweb-snapshots");
    for await (const [name, handle] of dir.entries()) {
        const at = 1000, file = await handle.getFile();
        const byte = new Uint8Array(await file.slice(at, at + 1).arrayBuffer());
        const w = await handle.createWritable({ keepExistingData: true });
        await w.write({ type: "write", position: at, data: new Uint8Array([byte[0] ^ 1]) });
        await w.close();
    }
}"""


# the kept snapshot moved into IndexedDB, as a page opened from disk (no file system) keeps
# it, and as it was kept before snapshots went to files
_SNAPSHOT_TO_INDEXEDDB = """async () => {
    const dir = await (await navigator.storage.getDirectory()).getDirectoryHandle("tgweb-snapshots");
    const bytes = await (await (await dir.getFileHandle("memory")).getFile()).arrayBuffer();
    const db = window.app.programs.cache.db;
    const [info] = await new Promise((res) => {
        const all = db.transaction(["snapshots"]).objectStore("snapshots").getAll();
        all.onsuccess = () => res(all.result);
    });
    const key = info.key.slice("size ".length);
    await new Promise((res) => { const tx = db.transaction(["snapshots"], "readwrite");
        tx.objectStore("snapshots").put({ key: info.key, size: info.size });
        tx.objectStore("snapshots").put({ key, bytes, sha256: info.sha256, size: info.size });
        tx.oncomplete = res; });
    await dir.removeEntry("memory");
}"""


def _boots_afresh(page, why: str) -> None:
    """The page refused its snapshot, saying why, and booted Python: a sample still trains."""
    snap = page.evaluate("window.app.tg.info.timings.snapshot")
    assert snap == f"refused: {why}", snap
    open_sample(page, "sin")
    train_app(page, 3)


def _reload(page):
    page.reload()
    page.wait_for_function("window.app && (window.app.ready || window.app.startError)", timeout=120000)
    assert page.evaluate("window.app.startError || null") is None


_GLOBALS = "import js\n[js.self.location.protocol, js.navigator.gpu is not None, js.self == js.globalThis]"


def test_js_is_the_globals_on_the_visit_that_makes_the_snapshot(browser, site_url):
    """A Pyodide that can make a snapshot has a `js` module that records paths through a
    proxy on which accessors (self, location, navigator) throw "Illegal invocation": the
    snapshot is made by a Pyodide of its own in another worker, and user code gets the
    globals themselves."""
    page = open_harness(browser, site_url, site_snapshot=False)
    try:
        page.evaluate("async () => { window.tg = await tgweb.start(); }")
        assert page.evaluate("window.tg.info.timings.snapshot") == "pending"
        assert py(page, _GLOBALS) == ["http:", True, True]
    finally:
        page.close()


_RUNTIME = """
import js, sys
from pyodide.ffi import run_sync
[run_sync(js.Promise.resolve(7)), sys.executable, sys.argv, __import__("os").environ.get("_")]
"""


def test_a_first_visit_restores_the_sites_snapshot(browser, site_url):
    """The site carries Python's memory after importing tgweb, made when it was bundled
    (tools/site_snapshot.mjs, in Node.js): a first visit restores it, Python can suspend
    (run_sync: the Program cache's reads need it) and sees the globals and nothing of the
    build machine, a sample trains, and the snapshot's bytes are kept for the next visit."""
    why = "the site carries no snapshot: bundling it needs Node.js 24 (npm ci installs it)"
    assert "snapshot" in page_manifest(site_url), why
    page = open_app(browser, site_url, "sin")  # a new browser context: nothing stored
    try:
        assert page.evaluate("window.app.tg.info.timings.snapshot") == "bundled"
        assert page.evaluate("window.app.tg.info.timings.snapshot_read") == "site"
        assert _app_py(page, _GLOBALS) == ["http:", True, True]
        ran, executable, argv, underscore = _app_py(page, _RUNTIME)
        assert ran == 7 and argv == [""], (ran, argv)
        assert "site_snapshot" not in executable + str(underscore), (executable, underscore)
        open_sample(page, "sin")
        train_app(page, 3)
        # after the first step, the bytes it restored are kept in IndexedDB: read from there,
        # a repeat visit restores faster than from the site (no fetch, no gzip)
        assert page.evaluate(_SNAPSHOT_KEPT), "the site's snapshot was not kept"
        page.wait_for_function("window.app.snapshot", timeout=20000)
        assert page.evaluate("window.app.snapshot.from") == "site"
        _reload(page)
        assert page.evaluate("window.app.tg.info.timings.snapshot") == "restored"
        assert _app_py(page, _RUNTIME)[0] == 7
        page.evaluate(_SNAPSHOT_TO_INDEXEDDB)
        assert page.evaluate(_SNAPSHOT_FILES) == []
        _reload(page)
        assert page.evaluate("window.app.tg.info.timings.snapshot") == "restored"
        assert page.evaluate("window.app.tg.info.timings.snapshot_read") == "indexeddb"
        assert _app_py(page, _RUNTIME)[0] == 7
    finally:
        page.close()


# what the snapshot holds done (tgweb.worker.preload): the build id hashed, the harness's
# and the samples' modules imported
_PRELOADED = """
import sys
from tgweb import progcache
[progcache.build_id.cache_info().currsize, "tgweb.io.checkpoint" in sys.modules,
 "tgweb.samples.addition" in sys.modules]
"""


def test_the_snapshot_is_kept_once_the_page_says_so(browser, site_url):
    """A first visit says it kept the site's snapshot ("snapshot" event) only once IndexedDB
    has committed it: a page closed right then leaves it for the next visit, which restores
    it. Each visit asks for Pyodide's wasm once (the worker compiles it as it arrives and
    Pyodide takes that module), and its Python holds what the snapshot had done: the build
    id hashed and the page's modules imported, before anything ran."""
    assert "snapshot" in page_manifest(site_url)
    ctx = browser.new_context()
    try:
        asked = []
        wasm = site_file("pyodide/pyodide.asm.wasm")
        ctx.on("request", lambda r: wasm.match(r.url) and asked.append(r.url))
        page = ctx.new_page()
        page.goto(f"{site_url}/?autostart#sin")
        page.wait_for_function("window.app && window.app.snapshot", timeout=120000)
        assert page.evaluate("window.app.snapshot.from") == "site", page.evaluate("window.app.snapshot")
        assert len(asked) == 1, asked
        page.close()  # at once: the snapshot must be in IndexedDB already
        page = ctx.new_page()
        page.goto(f"{site_url}/#sin")
        page.wait_for_function("window.app && (window.app.ready || window.app.startError)", timeout=120000)
        assert page.evaluate("window.app.startError || null") is None
        assert page.evaluate("window.app.tg.info.timings.snapshot") == "restored"
        assert page.evaluate("window.app.tg.info.timings.wasm") > 0
        assert len(asked) == 2, asked
        assert _app_py(page, _PRELOADED) == [1, True, True]
        # Emscripten's wrappers of JS functions, a tiny module each, were compiled once for
        # each distinct module while Python restored; the constructor is the original after
        small = page.evaluate("window.app.tg.info.timings.small_modules")
        assert small["shared"] > small["compiled"] > 0, small
        assert _app_py(page, _SMALL_MODULES_AFTER) == [True, False], "WebAssembly.Module is still shared"
        # the wheel's files, written by the restore's file system hook: each as its RECORD says
        count, bad = _app_py(page, _WHEEL_FILES)
        assert count > 100 and bad == [], (count, bad)
        open_sample(page, "sin")
        train_app(page, 2)
    finally:
        ctx.close()


# every file the installed tgweb wheel's RECORD names, against the hash it gives there (read
# as written: importlib.metadata.files leaves out the files that are missing)
_WHEEL_FILES = """
import base64, csv, hashlib
from importlib import metadata
dist = metadata.distribution("tgweb")
rows = [r for r in csv.reader(dist.read_text("RECORD").splitlines()) if r and r[1]]
def wrong(path, hashed):
    try:
        data = dist.locate_file(path).read_bytes()
    except OSError:
        return True
    mode, _, value = hashed.partition("=")
    return base64.urlsafe_b64encode(hashlib.new(mode, data).digest()).rstrip(b"=").decode() != value
[len(rows), [path for path, hashed, *_ in rows if wrong(path, hashed)]]
"""


# in the worker, once Python runs: the constructor is the browser's own, and each module new
_SMALL_MODULES_AFTER = """
from js import Uint8Array, WebAssembly
from pyodide.ffi import to_js
empty = Uint8Array.new(to_js([0, 97, 115, 109, 1, 0, 0, 0]))
["[native code]" in str(WebAssembly.Module), WebAssembly.Module.new(empty) == WebAssembly.Module.new(empty)]
"""


_UNZIP = """async (b64) => {
    const { unzip } = await import("/progcache.mjs");
    const zip = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
    try {
        const files = await unzip(zip);
        return files.map(([name, bytes]) => [name, Array.from(bytes)]);
    } catch (e) {
        return String(e.message);
    }
}"""


def _zip_b64(entries, damage_at=None):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name, data, how in entries:
            z.writestr(name, data, compress_type=how)
    raw = bytearray(buf.getvalue())
    if damage_at is not None:
        raw[raw.index(damage_at) + len(damage_at) - 1] ^= 1
    return base64.b64encode(bytes(raw)).decode()


def test_the_restoring_worker_unzips_a_wheel_as_pythons_zipfile(page):
    """A restored visit unpacks the tgweb wheel in JavaScript (progcache.mjs's unzip, while the
    snapshot's bytes come): stored and deflated entries come out as Python wrote them, a
    directory entry is skipped, and a damaged entry, a method it cannot read or bytes that
    are no zip archive are refused, naming the entry."""
    body = bytes(range(256)) * 40
    good = [
        ("pkg/__init__.py", b"x = 1\n", zipfile.ZIP_STORED),
        ("pkg/data.bin", body, zipfile.ZIP_DEFLATED),
        ("pkg/sub/", b"", zipfile.ZIP_STORED),
    ]
    got = page.evaluate(_UNZIP, _zip_b64(good))
    assert got == [["pkg/__init__.py", list(b"x = 1\n")], ["pkg/data.bin", list(body)]]
    # one byte of the stored file's text changed: its CRC-32 no longer matches
    assert page.evaluate(_UNZIP, _zip_b64(good[:1], damage_at=b"x = 1")) == (
        "pkg/__init__.py: damaged in the zip archive"
    )
    assert page.evaluate(_UNZIP, _zip_b64([("a.txt", b"abc" * 50, zipfile.ZIP_BZIP2)])) == (
        "a.txt: zip method 12 (stored or deflated only)"
    )
    junk = base64.b64encode(b"not a zip" * 10).decode()
    assert page.evaluate(_UNZIP, junk) == "not a zip archive (no end of central directory)"


def test_a_damaged_site_snapshot_is_refused(browser, site_url):
    """One byte of the bundled snapshot changed on its way (its size kept): the manifest's
    SHA-256 refuses it, Python boots afresh and trains."""
    page = browser.new_page()

    def damage(route):
        body = bytearray(route.fetch().body())
        body[len(body) // 2] ^= 1
        route.fulfill(status=200, content_type="application/octet-stream", body=bytes(body))

    page.route(site_file("pyodide/tgweb.snapshot"), damage)
    try:
        page.goto(f"{site_url}/#sin")
        page.wait_for_function("window.app && (window.app.ready || window.app.startError)", timeout=120000)
        assert page.evaluate("window.app.startError || null") is None
        _boots_afresh(page, "pyodide/tgweb.snapshot's checksum does not match")
    finally:
        page.close()


# in the trainer page's worker: every draw of initial values on the host (web/bulk.mjs
# through the worker's hooks, or the counter stream's host form) counted; a trainer draws
# a sample's on the GPU, so none are expected
_WATCH_DRAWS = """
from tgweb.nn import init as _t_init

_t_draws = {"n": 0}

def _t_counting(f):
    def counted(*args, **kw):
        _t_draws["n"] += 1
        return f(*args, **kw)
    return counted

_t_init._JsDraw._call = _t_counting(_t_init._JsDraw._call)
_t_init.counter_values = _t_counting(_t_init.counter_values)
_t_init._js_bulk() is not None
"""
_DRAWN = "_t_draws['n']"
# the attached program's output on the held-out pairs, hashed
_PREDICTED = """
import array, hashlib as _t_hashlib
from tgweb.samples import addition as _t_add
_t_ns = _spaces["addition"]
_t_pairs = (_t_ns["HELD_OUT"] * 4)[: _t_add.EVAL_BATCH]
_t_tokens = array.array("i", [t for a, c in _t_pairs for t in _t_add.sequence(a, c)[: _t_add.CTX]])
_t_out = _t_ns["predict"].run(tokens=_t_tokens).output
_t_hashlib.sha256(str(_t_out.tolist()).encode()).hexdigest()
"""


def page_manifest(site_url) -> dict:
    with urllib.request.urlopen(f"{site_url}/manifest.json") as r:
        return json.loads(r.read())


def _app_py(page, source):
    return page.evaluate("(src) => window.app.tg.run(src)", source)


def _visit_addition(page):
    """Start addition for 3 steps with its initial values' host draws counted: (page info,
    losses, the host draws, the attached program's output)."""
    assert _app_py(page, _WATCH_DRAWS) is True  # bulk.mjs is there, in case
    page.evaluate("window.seen = []; window.app.tg.on('*', (event) => window.seen.push(event)); null")
    open_sample(page, "addition")
    train_app(page, 3, timeout=300)
    seen = page.evaluate("window.seen")
    # Start compiles and trains: the view's evaluation waits until the first loss is in
    assert "view" in seen and seen.index("metric") < seen.index("view"), seen
    info = page.evaluate("window.app.state.addition.info")
    return info, losses(page, "addition"), _app_py(page, _DRAWN), _app_py(page, _PREDICTED)


def test_repeat_visit_of_addition_takes_its_programs_and_gpu_drawn_values(browser, site_url):
    page = open_app(browser, site_url, "addition")  # a new browser context: nothing stored
    try:
        info, first_losses, drawn, predicted = _visit_addition(page)
        assert (info["cache"], info["cache_attached"]) == ("miss", ["miss"])
        assert drawn == 0, "initial values were drawn on the host, not by the trainer on the GPU"
        page.wait_for_function(
            "window.app.programs.refresh().then((l) => l.filter((e) => e.label === 'addition').length === 3)",
            timeout=20000,
        )
        kinds = sorted(e["kind"] for e in page.evaluate("window.app.programs.refresh()"))
        assert kinds == ["forward", "initial", "step"]
        assert page.evaluate(_SNAPSHOT_KEPT), "no snapshot was kept"
        _reload(page)
        assert page.evaluate("window.app.tg.info.timings.snapshot") == "restored"
        info, again, drawn_again, predicted_again = _visit_addition(page)
        assert (info["cache"], info["cache_attached"]) == ("hit", ["hit"])
        assert drawn_again == 0  # drawn on the GPU again, by the cached program
        assert again == first_losses and predicted_again == predicted
        # an edit of the source misses both (a comment: it trains as before)
        page.fill("#source", page.evaluate("window.app.state.addition.source") + "\n# edited\n")
        train_app(page, 3, timeout=300)
        info = page.evaluate("window.app.state.addition.info")
        assert (info["cache"], info["cache_attached"]) == ("miss", ["miss"])
        assert losses(page, "addition")[:3] == first_losses
    finally:
        page.close()


_LRU = """async () => {
    const cache = await tgweb.openProgramCache({maxEntries: 3, maxBytes: 1000});
    await cache.clear();
    const pause = () => new Promise((r) => setTimeout(r, 5));
    const keys = async () => (await cache.list()).map((e) => e.key).sort().join(" ");
    const out = [];
    for (const k of ["a", "b", "c"]) { await cache.put(k, "x".repeat(100), {label: "lru"}); await pause(); }
    await cache.get("a"); await pause();        // a is used again: b is the least recent now
    await cache.put("d", "x".repeat(100)); await pause();
    out.push(await keys());
    await cache.put("e", "x".repeat(750)); await pause();  // d, e and a fit in 1000 bytes; c does not
    out.push(await keys());
    await cache.put("f", "x".repeat(2000));     // alone over the limit: it stays, alone
    out.push(await keys());
    await cache.clear();
    return out;
}"""


def test_entries_are_kept_within_limits_least_recently_used_out(page):
    assert page.evaluate(_LRU) == ["a c d", "a d e", "f"]


_READ_AHEAD = """async () => {
    const { openProgramCache } = await import("/progcache.mjs");
    const cache = await openProgramCache();
    const entry = (name) => "format\\nchecksum\\n" + JSON.stringify({ program: { name } });
    await cache.put("a", entry("a"));
    await cache.put("b", entry("b"));
    const recent = (await cache.recentPrograms()).map((e) => e.program.name);
    await cache.put("b", entry("b2"));  // put again: what was read of it is let go
    const transaction = cache.db.transaction;
    let reads = 0;
    // the reads of texts counted (marking an entry used writes its meta alone)
    cache.db.transaction = function (names, mode) {
        if ([].concat(names).includes("programs") && mode !== "readwrite") reads += 1;
        return transaction.call(this, names, mode);
    };
    const out = { recent, a: await cache.get("a") };
    out.readsForA = reads;
    await cache.writes;
    reads = 0;
    out.aAgain = await cache.get("a");
    out.readsForAgain = reads >= 1;
    out.b = await cache.get("b");
    cache.db.transaction = transaction;
    await cache.clear();
    return out;
}"""


def test_the_last_visits_programs_read_ahead_answer_their_first_get(page):
    """The texts recentPrograms read (the pipelines made ahead) answer the first get of
    each without a transaction; later gets, and an entry put again since, read IndexedDB."""
    got = page.evaluate(_READ_AHEAD)
    assert got["recent"] == ["a", "b"]
    assert got["a"] == got["aAgain"] == 'format\nchecksum\n{"program":{"name":"a"}}'
    assert got["readsForA"] == 0 and got["readsForAgain"]
    assert got["b"].endswith('"b2"}}')


_NEEDED_FIRST = """async () => {
    const { openProgramCache } = await import("/progcache.mjs");
    const cache = await openProgramCache();
    await cache.clear();
    const entry = (name) => "format\\nchecksum\\n" + JSON.stringify({ program: { name } });
    const pause = () => new Promise((r) => setTimeout(r, 5));
    // used as a trainer uses them: its step compiled, its initial values, its attached
    // program; then one of a kind this page does not know, and a second trainer's step
    const used = [["s1", "step"], ["i1", "initial"], ["f1", "forward"], ["o", "other"], ["s2", "step"]];
    for (const [key, kind] of used) {
        await cache.put(key, entry(key), { label: "m", kernels: 1, kind });
        await pause();
    }
    const got = (await cache.recentPrograms()).map((e) => [e.program.name, e.kind]);
    await cache.clear();
    return got;
}"""


def test_the_last_visits_programs_come_in_the_order_a_first_step_needs_them(page):
    """recentPrograms gives the initial values first (they run first), then the steps, then
    the rest (attached programs run after the first step; the worker asks for their pipelines
    once the first loss exists), each group in the order it was used."""
    assert page.evaluate(_NEEDED_FIRST) == [
        ["i1", "initial"],
        ["s1", "step"],
        ["s2", "step"],
        ["f1", "forward"],
        ["o", "other"],
    ]


_SNAPSHOT_RECORDS = """async () => {
    const { openProgramCache } = await import("/progcache.mjs");
    const cache = await openProgramCache();
    await cache.clear();
    const info = async (key) => { const i = await cache.snapshotInfo(key); return i && i.size; };
    const out = [await info("k1")];  // the records read as the cache opened
    await cache.putSnapshot("k1", new Uint8Array(64));
    out.push(await info("k1"), await info("k2"));  // read anew: the put is seen
    const other = await openProgramCache();  // opened now: its first answer is the put's
    out.push((await other.snapshotInfo("k1")).size);
    await cache.putSnapshot("k2", new Uint8Array(32));  // the one snapshot: k1's goes
    out.push(await info("k1"), await info("k2"), (await cache.snapshots()).map((s) => s.key));
    await cache.removeSnapshot("k2");
    out.push(await info("k2"), (await cache.snapshots()).length);
    return out;
}"""


def test_the_snapshots_records_are_read_as_the_cache_opens_and_anew_after(page):
    """A cache reads its snapshots' records as it opens (a repeat visit asks once the
    manifest gave the key); what it keeps or removes after is seen by the next asks."""
    assert page.evaluate(_SNAPSHOT_RECORDS) == [None, 64, None, 64, None, 32, ["k2"], None, 0]


def _in_a_context_of_its_own(browser, site_url, script: str):
    """script evaluated on a page of the site in a new browser context: a storage that no
    worker of tgweb's holds open."""
    page = browser.new_page()
    try:
        page.goto(f"{site_url}/manifest.json")
        return page.evaluate(script)
    finally:
        page.close()


_UPGRADE = """async () => {
    // the database as tgweb kept it before version 2: each entry's text and meta in one record
    const now = Date.now(), entry = (program) => "format\\nchecksum\\n" + JSON.stringify({ program });
    const old = [["step", now - 2000, entry({ name: "step" })],
                 ["attached", now - 1000, entry({ name: "fwd" })],
                 ["stale", now - 1e7, entry({ name: "stale" })]];
    await new Promise((res, rej) => {
        const r = indexedDB.open("tgweb-programs", 1);
        r.onupgradeneeded = () => {
            for (const s of ["programs", "snapshots"]) r.result.createObjectStore(s, { keyPath: "key" });
        };
        r.onerror = () => rej(r.error);
        r.onsuccess = () => {
            const tx = r.result.transaction(["programs"], "readwrite");
            for (const [key, used, text] of old) {
                const rec = { key, text, label: key, size: text.length, time: used, used };
                tx.objectStore("programs").put(rec);
            }
            tx.oncomplete = () => { r.result.close(); res(); };
        };
    });
    const { openProgramCache } = await import("/progcache.mjs");
    const cache = await openProgramCache();
    const out = {};
    out.listed = (await cache.list()).map((e) => [e.key, e.label, e.size === e.size | 0, "text" in e]);
    out.recent = (await cache.recentPrograms()).map((e) => e.program.name);
    out.text = await cache.get("stale");
    await new Promise((r) => setTimeout(r, 5));
    await cache.put("new", entry({ name: "new" }), { label: "new" });
    await cache.remove("attached");
    out.after = (await cache.list()).map((e) => [e.key, "text" in e]);
    out.recentAfter = (await cache.recentPrograms()).map((e) => e.program.name);
    await cache.clear();
    out.cleared = (await cache.list()).length;
    return out;
}"""


def test_a_cache_kept_before_the_metas_store_is_read_after_the_upgrade(browser, site_url):
    """A page's cache made by the tgweb before the entries' metas got a store of their own
    (database version 1) is upgraded in place: the entries are listed from their metas
    (never their texts), the last visit's Programs come in the order they were used (the
    stale one out of the window), a hit reads its text, and put, remove and clear work on
    both stores."""
    got = _in_a_context_of_its_own(browser, site_url, _UPGRADE)
    assert sorted(got["listed"]) == [[k, k, True, False] for k in ("attached", "stale", "step")]
    assert got["recent"] == ["step", "fwd"]
    assert got["text"] == 'format\nchecksum\n{"program":{"name":"stale"}}'
    assert sorted(got["after"]) == [["new", False], ["stale", False], ["step", False]]
    # "stale" was used just now (the hit), "new" put after it: both newer than "step"
    assert got["recentAfter"] == ["step", "stale", "new"]
    assert got["cleared"] == 0


_OTHER_VERSIONS = """async () => {
    const open = (version) => new Promise((res, rej) => {
        const r = indexedDB.open("tgweb-programs", version);
        r.onupgradeneeded = () => {
            for (const s of ["programs", "snapshots"]) {
                if (!r.result.objectStoreNames.contains(s)) r.result.createObjectStore(s, { keyPath: "key" });
            }
        };
        r.onsuccess = () => res(r.result);
        r.onerror = () => rej(r.error);
    });
    const { openProgramCache } = await import("/progcache.mjs");
    const out = {};
    // an older tgweb's page holds version 1 open and ignores requests to close it
    const older = await open(1);
    out.blocked = await openProgramCache().then(() => "opened", (e) => e.message);
    older.close();
    await new Promise((r) => setTimeout(r, 50)); // the refused request's upgrade runs, its connection closes
    const cache = await openProgramCache();
    await cache.put("k", "format\\nchecksum\\n{}");
    out.kept = (await cache.list()).map((e) => e.key);
    // a newer tgweb's page asks for version 3: this one lets the database go, and misses
    const newer = await open(3);
    out.newer = newer.version;
    out.missed = await cache.get("k");
    newer.close();
    return out;
}"""


def test_the_cache_of_a_page_of_another_tgweb_version_neither_hangs_nor_blocks(browser, site_url):
    """A page of an older tgweb in another tab, holding the database open at its version,
    makes opening the cache fail at once, saying why (Python then compiles without it),
    rather than wait for that tab to close; an open cache lets a newer tgweb's page
    upgrade the database, and misses from then on."""
    got = _in_a_context_of_its_own(browser, site_url, _OTHER_VERSIONS)
    assert "another tgweb version" in got["blocked"], got
    assert got["kept"] == ["k"]
    assert got["newer"] == 3 and got["missed"] is None


def test_a_page_whose_snapshot_reader_does_not_start_restores_all_the_same(browser, site_url):
    """The trainer page starts the snapshot's reader as it loads (disk-loader.js); where
    that reader's script does not come, the page says so and the worker reads the file
    itself: the visit still restores the kept snapshot and trains."""
    page = open_app(browser, site_url, "sin", site_snapshot=False)
    try:
        assert page.evaluate(_SNAPSHOT_KEPT), "no snapshot was kept"
        page.route(re.compile(r"/snapread\.mjs\?reader"), lambda route: route.abort())
        _reload(page)
        assert page.evaluate("window.app.tg.info.timings.snapshot") == "restored"
        assert page.evaluate("window.app.tg.info.timings.snapshot_read") == "here"
        ms = page.evaluate("window.app.tg.info.timings.snapshot_ms")
        assert "started" not in ms and ms["read"] <= ms["checked"] <= ms["restored"], ms
        open_sample(page, "sin")
        train_app(page, 3)
    finally:
        page.close()
