"""The Programs a served site ships (tools/ship_programs.py, made in CPython by
tgweb.backends.planned), in real Chromium + Pyodide on SwiftShader.

The site is shipped for this Chromium's own adapter (as tools/adapters.json records a real
one): its entries for addition are the very keys and texts a first visit's compile keeps,
byte for byte; a first visit of the shipped site takes its trainer's, its initial values'
and its attached program's Programs from the site (outcome "shipped"; their pipelines asked
for while Python started, the page having opened at that sample), keeps them in the
origin's cache, and trains and predicts exactly as the compiled visit; a damaged shipped
entry is refused and compiled again.
"""

from __future__ import annotations

import importlib.util
import json
import threading
from pathlib import Path

from .conftest import ROOT, _build, losses, open_app, open_sample, train_app
from .test_progcache import _app_py, _visit_addition

_KEPT = """async (label) => {
    const { openProgramCache } = await import("/progcache.mjs");
    const cache = await openProgramCache();
    const keys = (await cache.list()).filter((e) => e.label === label).map((e) => e.key);
    const out = {};
    for (const k of keys) out[k] = await cache.get(k);
    return out;
}"""
# the kept entries' kinds of a label, once the worker's puts are in
_KINDS = (
    "(label) => window.app.programs.refresh()"
    ".then((l) => l.filter((e) => e.label === label).map((e) => e.kind).sort())"
)


def _tool():
    spec = importlib.util.spec_from_file_location("tgweb_ship_programs", ROOT / "tools" / "ship_programs.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _kept(page, label: str) -> dict[str, str]:
    page.wait_for_function(f"({_KINDS})({json.dumps(label)}).then((k) => k.length === 3)", timeout=20000)
    return page.evaluate(_KEPT, label)


def _shipped_site(tmp: Path, adapter: dict, samples: list[str]) -> Path:
    """site/ as links, its manifest naming the Programs shipped for `adapter`."""
    site = _build().SITE
    out = tmp / "site"
    for f in site.rglob("*"):
        if f.is_file() and not f.name.startswith("manifest.json"):  # nor its .gz, .zst
            dst = out / f.relative_to(site)
            dst.parent.mkdir(parents=True, exist_ok=True)
            dst.symlink_to(f)
    got = _tool().ship(out, [adapter], samples)
    assert got["entries"] > 0, got
    manifest = json.loads((site / "manifest.json").read_text())
    programs = {"dir": "programs/", "keys": got["keys"], "adapters": got["adapters"]}
    (out / "manifest.json").write_text(json.dumps({**manifest, "programs": programs}))
    return out


def _serve(site: Path) -> tuple[str, object]:
    srv = _build().make_server(site, 0)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{srv.server_address[1]}", srv


def test_a_first_visit_takes_the_programs_the_site_ships(browser, site_url, tmp_path):
    page = open_app(browser, site_url, "addition")  # a new browser context: nothing stored
    try:
        info, first_losses, _, predicted = _visit_addition(page)
        assert (info["cache"], info["cache_attached"]) == ("miss", ["miss"])
        kept = _kept(page, "addition")
        adapter = _app_py(page, "from tgweb.backends import browser\nbrowser.describe()")
    finally:
        page.close()
    assert adapter["info"]["isFallbackAdapter"] is True  # SwiftShader, as the tests run
    site = _shipped_site(tmp_path, {"name": "this Chromium's", **adapter}, ["sin", "addition"])
    shipped = {p.stem: p.read_text() for p in (site / "programs").glob("*.txt")}
    # planned in CPython: the keys and entries the browser's own compile made, byte for byte
    assert set(kept) <= set(shipped) and all(shipped[k] == t for k, t in kept.items())
    sin_keys = set(_tool().entries({"name": "", **adapter}, ["sin"]))
    assert len(sin_keys) == 3 and not sin_keys & set(kept)
    url, srv = _serve(site)
    try:
        page = open_app(browser, url, "addition")
        try:
            info, again, drawn, predicted_again = _visit_addition(page)
            assert (info["cache"], info["cache_attached"]) == ("shipped", ["shipped"])
            assert drawn == 0  # the shipped initial values' program drew them on the GPU
            assert again == first_losses and predicted_again == predicted
            assert "from the programs the site ships" in page.text_content("#log")
            # the page opened at #addition: the worker asked for those Programs' pipelines while
            # Python started, and the trainer's Runtime found every one of them asked for
            runtime = "_r = _spaces['addition']['trainer'].engine.rt._rt\n[_r.prewarmed, _r.pipelineCount]"
            made, count = _app_py(page, runtime)
            assert made == count > 0, (made, count)
            assert page.evaluate("window.app.tg.info.timings.shipped_fetched") == len(kept) == 3
            # kept in the origin's own cache, as a compile's entries are
            assert _kept(page, "addition") == kept
            assert not page.problems, page.problems
        finally:
            page.close()
        # a damaged shipped entry (sin's step) is refused and compiled again
        step = next(k for k in sin_keys if _name(shipped[k]) == "step")
        path = site / "programs" / f"{step}.txt"
        text = path.read_text()
        path.unlink()  # a link: the tool's file is not touched
        path.write_text(text[:-200] + ("1" if text[-200] != "1" else "2") + text[-199:])
        page = open_app(browser, url, "sin")
        try:
            open_sample(page, "sin")
            train_app(page, 3)
            got = page.evaluate("window.app.state.sin.info")
            assert got["cache"] == "corrupt: checksum mismatch", got
            assert len(losses(page, "sin")) == 3
        finally:
            page.close()
    finally:
        srv.shutdown()


def _name(entry: str) -> str:
    """The name of a cache entry's Program ("step", "initial values", "forward")."""
    body = json.loads(entry.split("\n", 2)[2])
    return json.loads(body["program"])["meta"]["name"]
