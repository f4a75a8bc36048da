"""The compiled Programs a served site ships for the trainer page's samples, so that a first
visit on a described adapter finds its sample's Programs as a repeat visit does (issue 38).

    .venv/bin/python tools/ship_programs.py SITE_DIR [--adapters FILE] [--samples a,b]
    .venv/bin/python tools/ship_programs.py --describe NAME [SITE_DIR]   # this Chromium's adapter

For each adapter of FILE (default: tools/adapters.json, adapters as the page's worker sees
them, each taken from a real one: `tg.run("from tgweb.backends import browser;
browser.describe()")`) it runs each sample's page source as the page's Start does
(web/page/harness.py's page_exec, inside tgweb.backends.planned.planning: the "browser"
backend on that adapter, planned without it) and writes each cache entry it makes to
SITE_DIR/programs/KEY.txt, the key being the one that visit computes (tgweb's build, the
sample's source, the adapter's class). The page's worker asks the site for a key its own
cache lacks (web/progcache.mjs); an entry is checked as any cached one is, and an edited
source, another tgweb or another adapter class has other keys: those compile as before.
Prints one JSON line: {"keys", "adapters", "failed" (by adapter, the samples whose page
source failed to run there, with the error: their Programs compile in the tab as before),
"entries", "bytes", "seconds"}. build.py lists the keys and the adapters (each with its keys
by sample) in the site's manifest: the worker asks only for those keys, and on an adapter
that matches one listed asks the GPU for the pipelines of the samples the page opens with
while Python starts.
--describe NAME prints the record of the adapter the trainer page gets in this machine's
Chromium (build.py's: a real GPU's where launch.sh exported GPU_CHROMIUM), for adapters.json.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

from tgweb import progcache  # noqa: E402
from tgweb.backends import planned  # noqa: E402

ADAPTERS = ROOT / "tools" / "adapters.json"
SAMPLES = ROOT / "web" / "page" / "samples"


def _harness():
    spec = importlib.util.spec_from_file_location("tgweb_page_harness", ROOT / "web" / "page" / "harness.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class _Store(progcache.MemoryStore):
    """A MemoryStore that also keeps which label (sample) each entry is of."""

    def __init__(self) -> None:
        super().__init__()
        self.labels: dict[str, list[str]] = {}

    def put(self, key: str, text: str, info: dict) -> None:
        super().put(key, text, info)
        self.labels.setdefault(info["label"], []).append(key)


def planned_entries(adapter: dict, samples: list[str]) -> tuple[dict[str, str], dict[str, list[str]], dict]:
    """Each cache entry (key -> text) the samples' page sources make on `adapter`, the keys
    of each sample in the order its run made them, and the error of each sample whose run
    failed (its entries made before the error are kept: each is whole, and a visit compiles
    the rest)."""
    harness = _harness()
    store = _Store()
    failed = {}
    progcache.use(store)
    try:
        with planned.planning(adapter):
            for name in samples:
                source = (SAMPLES / f"{name}.py").read_text()
                try:
                    harness.page_exec(name, source, f"{name}.py", show=False)
                except Exception as e:
                    failed[name] = f"{type(e).__name__}: {e}"
                harness._spaces.pop(name, None)
    finally:
        progcache.use(None)
    return dict(store), store.labels, failed


def entries(adapter: dict, samples: list[str]) -> dict[str, str]:
    """Each cache entry (key -> text) the samples' page sources make on `adapter`; raises
    RuntimeError naming a sample whose run failed."""
    got, _, failed = planned_entries(adapter, samples)
    if failed:
        raise RuntimeError(f"planning failed for {failed}")
    return got


def ship(site: Path, adapters: list[dict], samples: list[str]) -> dict:
    """Write the entries to site/programs/; returns what the site's manifest lists of them
    ("keys"; "adapters": each adapter's description and its keys by sample, with which
    the worker asks for a sample's pipelines while Python starts) and figures."""
    t0 = time.perf_counter()
    out = site / "programs"
    made: dict[str, str] = {}
    listed, failed = [], {}
    for a in adapters:
        got, labels, errors = planned_entries(a, samples)
        listed.append({**planned.check(a), "name": a["name"], "labels": labels})
        made.update(got)
        if errors:
            failed[a["name"]] = errors
    if made:
        out.mkdir(parents=True, exist_ok=True)
    for key, text in made.items():
        (out / f"{key}.txt").write_text(text)
    return {
        "keys": sorted(made),
        "adapters": listed,
        "failed": failed,
        "entries": len(made),
        "bytes": sum(len(t) for t in made.values()),
        "seconds": round(time.perf_counter() - t0, 2),
    }


def describe(name: str, site: Path | None = None) -> dict:
    """The adapter the trainer page's worker gets in this machine's Chromium, named (the
    page served from site, default: site/, bundled if it is not there)."""
    import tempfile
    import threading

    from playwright.sync_api import sync_playwright
    from repeat_visit import _build

    build = _build()
    if site is None and not (build.SITE / "manifest.json").exists():
        build.bundle_site()
    srv = build.make_server(site or build.SITE, 0)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    exe, args = build.chromium()
    with sync_playwright() as p, tempfile.TemporaryDirectory() as profile:
        ctx = p.chromium.launch_persistent_context(profile, executable_path=exe, args=args, headless=True)
        try:
            page = ctx.new_page()
            page.goto(f"http://127.0.0.1:{srv.server_address[1]}/")
            page.wait_for_function("window.app && window.app.ready", timeout=300_000)
            got = page.evaluate(
                "window.app.tg.run('from tgweb.backends import browser\\nbrowser.describe()')"
            )
        finally:
            ctx.close()
            srv.shutdown()
    return {"name": name, **got}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("site", type=Path, nargs="?")
    ap.add_argument("--describe", metavar="NAME", help="print this Chromium's adapter for adapters.json")
    ap.add_argument("--adapters", type=Path, default=ADAPTERS)
    ap.add_argument("--samples", default="", help="comma-separated sample names (default: every sample)")
    a = ap.parse_args(argv)
    if a.describe:
        print(json.dumps(describe(a.describe, a.site), indent=1))
        return 0
    if a.site is None:
        ap.error("name the site's folder (or --describe NAME)")
    adapters = json.loads(a.adapters.read_text())
    samples = a.samples.split(",") if a.samples else sorted(p.stem for p in SAMPLES.glob("*.py"))
    print(json.dumps(ship(a.site, adapters, samples)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
