"""The site's tgweb wheel (the one `build.py wheel` hands out) installs with micropip in a
plain Pyodide page and fetches nothing beyond itself: its NumPy and wgpu-py requirements
are CPython's only. (The site's worker unpacks the wheel without micropip.)"""

from __future__ import annotations

import json
import urllib.request

PAGE = """<!doctype html><meta charset="utf-8"><title>micropip</title>
<script type="module">
import { loadPyodide } from "/pyodide/pyodide.mjs";
window.boot = async () => {
  window.py = await loadPyodide({ indexURL: "/pyodide/" });
  await window.py.loadPackage("micropip", { messageCallback: () => {} });
};
window.ready = true;
</script>"""

INSTALLED = """
import json, micropip
import tgweb
from tgweb.samples import sin
from tgweb.trace import trace

graph, _ = trace(sin.loss_fn, sin.Model(), sin.INPUTS)
json.dumps({"version": tgweb.__version__, "installed": sorted(micropip.list()), "nodes": len(graph.tensors),
            "file": tgweb.__file__})
"""


def test_micropip_installs_the_wheel_and_nothing_else(browser, site_url):
    with urllib.request.urlopen(f"{site_url}/manifest.json") as r:
        manifest = json.load(r)
    wheel_url = f"{site_url}/{manifest['wheel']}"
    page = browser.new_page()
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    page.route(
        "**/__micropip__/*", lambda route: route.fulfill(status=200, content_type="text/html", body=PAGE)
    )
    try:
        page.goto(f"{site_url}/__micropip__/index.html")
        page.wait_for_function("window.ready === true", timeout=20000)
        page.evaluate("window.boot()")  # Pyodide and micropip (with packaging), from the site
        assert all(u.startswith(site_url + "/") for u in requests), requests
        booted = len(requests)
        out = page.evaluate(
            """async ([url, code]) => {
                await window.py.pyimport("micropip").install(url);
                return window.py.runPython(code);
            }""",
            [wheel_url, INSTALLED],
        )
        assert requests[booted:] == [wheel_url]  # the wheel alone: no NumPy, no wgpu-py, no index
    finally:
        page.close()
    out = json.loads(out)
    assert out["version"] == manifest["tgweb"] and out["nodes"] > 0
    assert "tgweb" in out["installed"] and not {"numpy", "wgpu"} & set(out["installed"]), out["installed"]
    assert "site-packages/tgweb/" in out["file"], out["file"]
