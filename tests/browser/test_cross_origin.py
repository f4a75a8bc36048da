"""Embedding from another origin: a page served from one origin loads tgweb.mjs from
the site's origin (a static host with CORS, no isolation headers on the page) and
trains; without cross-origin isolation only the interrupt-anywhere option degrades."""

from __future__ import annotations

import http.server
import threading

PAGE = """<!doctype html><meta charset="utf-8"><title>embed</title><script type="module">
import { start } from "SITE/tgweb.mjs";
try {
  const tg = await start();
  const loss = await tg.run(`
import tgweb as tg
from tgweb.samples import sin
tr = tg.compile(sin.Model(), sin.loss_fn, inputs=sin.INPUTS, optimizer=sin.OPTIMIZER)
[tr.step(**sin.batch(i)).loss for i in range(5)]
`);
  const isolated = self.crossOriginIsolated;
  window.result = { loss, isolated, stopFlag: tg.info.stopFlag, origin: location.origin };
} catch (e) { window.result = { error: e.message }; }
</script>"""


def test_a_page_on_another_origin_embeds_tgweb(browser, site_url, tmp_path):
    (tmp_path / "index.html").write_text(PAGE.replace("SITE", site_url))

    class Handler(http.server.SimpleHTTPRequestHandler):  # plain: no COOP/COEP headers
        def __init__(self, *a, **kw):
            super().__init__(*a, directory=str(tmp_path), **kw)

        def log_message(self, *a):
            pass

    srv = http.server.ThreadingHTTPServer(("localhost", 0), Handler)  # localhost != 127.0.0.1
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    page = browser.new_page()
    try:
        page.goto(f"http://localhost:{srv.server_address[1]}/index.html")
        page.wait_for_function("window.result", timeout=120000)
        r = page.evaluate("window.result")
        assert "error" not in r, r
        assert r["origin"] != site_url and r["isolated"] is False and r["stopFlag"] is False
        assert len(r["loss"]) == 5 and r["loss"][-1] < r["loss"][0]
    finally:
        page.close()
        srv.shutdown()
        srv.server_close()
