"""Cold start of the trainer page, page load to "Ready" (Pyodide, tgweb and the GPU device
up), four ways: the served site (cross-origin isolated), web/index.html from disk,
dist/tgweb.html from disk and dist/tgweb.html from a plain static server (no special
headers). Each load is in a fresh browser context (empty cache).

    python3 build.py standalone && .venv/bin/python tools/cold_start.py [RUNS]

Prints, per way, the median and every run in seconds (the page's own
tg.info.timings.page_load_to_ready).
"""

from __future__ import annotations

import functools
import http.server
import importlib.util
import statistics
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
READY = "window.app && (window.app.ready || window.app.startError)"


def _build():
    spec = importlib.util.spec_from_file_location("tgweb_build", ROOT / "build.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class _Plain(http.server.SimpleHTTPRequestHandler):
    def log_message(self, fmt, *args):
        pass


def _serve(server) -> str:
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}/"


def main(runs: int) -> None:
    from playwright.sync_api import sync_playwright

    build = _build()
    if not (build.SITE / "manifest.json").exists():
        build.bundle_site()
    single = build.DIST / "tgweb.html"
    if not single.exists():
        sys.exit("dist/tgweb.html is missing: run `python3 build.py standalone` first")
    handler = functools.partial(_Plain, directory=str(build.DIST))
    plain = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    ways = {
        "served site (build.py serve)": _serve(build.make_server(build.SITE, 0)),
        "web/index.html from disk": (ROOT / "web" / "index.html").as_uri(),
        "dist/tgweb.html from disk": single.as_uri(),
        "dist/tgweb.html over plain http": _serve(plain) + single.name,
    }
    got: dict[str, list[float]] = {k: [] for k in ways}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=build.CHROMIUM_ARGS)
        for _ in range(runs):
            for way, url in ways.items():
                ctx = browser.new_context()
                page = ctx.new_page()
                page.goto(url)
                page.wait_for_function(READY, timeout=180000)
                err = page.evaluate("window.app.startError || null")
                if err:
                    sys.exit(f"{way}: the page did not start: {err}")
                got[way].append(page.evaluate("window.app.tg.info.timings.page_load_to_ready") / 1000)
                ctx.close()
        browser.close()
    for way, times in got.items():
        each = ", ".join(f"{t:.1f}" for t in times)
        print(f"{way:34s} median {statistics.median(times):5.1f} s   runs {each}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3)
