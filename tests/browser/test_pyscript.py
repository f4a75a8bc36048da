"""examples/pyscript.html: PyScript (@pyscript/core, bundled by build.py) runs the page's
`<script type="py">`, which installs the site's tgweb wheel and trains sin on WebGPU in
the main thread, showing the loss; nothing comes from outside the site."""

from __future__ import annotations


def test_pyscript_page_trains_sin_offline(browser, site_url):
    page = browser.new_page()
    problems: list[str] = []
    requests: list[str] = []
    page.on("pageerror", lambda e: problems.append(f"pageerror: {e}"))
    page.on("console", lambda m: m.type == "error" and problems.append(f"console: {m.text}"))
    page.on("request", lambda r: requests.append(r.url))
    try:
        page.goto(f"{site_url}/examples/pyscript.html")
        # PyScript shows a Python error in the page (.py-error); the script marks the body when done
        page.wait_for_function(
            "document.body.dataset.state === 'done' || document.querySelector('.py-error') !== null",
            timeout=240000,
        )
        error = page.evaluate("document.querySelector('.py-error')?.textContent || null")
        assert error is None, error
        status = page.inner_text("#status")
        losses = [float(x) for x in page.evaluate("document.body.dataset.losses").split(",")]
        points = page.get_attribute("#line", "points")
    finally:
        page.close()
    assert status.startswith("done: 500 steps"), status
    assert len(losses) == 26 and losses[-1] < 0.05 * losses[0], losses
    assert len(points.split()) == len(losses)  # the curve drawn
    outside = [u for u in requests if not (u.startswith(site_url + "/") or u.startswith(("blob:", "data:")))]
    assert not outside, outside
    assert not problems, problems
