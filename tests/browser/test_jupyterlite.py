"""The JupyterLite site (site/lite/, `build.py lite`): examples/notebooks/tgweb_sin_and_gpt.ipynb
opened in Jupyter Notebook (JupyterLite) with the Pyodide kernel; Run All installs tgweb
with %pip from the site, trains sin and a small GPT (the llama sample) on WebGPU in the
kernel's worker, draws the losses as SVGs and prints that they fell; nothing comes from
outside the site."""

from __future__ import annotations

import re
import time
import urllib.parse

import pytest


@pytest.fixture(scope="module")
def lite(site_url):
    from .conftest import _build

    build = _build()
    if not (build.SITE / "lite" / "jupyter-lite.json").exists():
        build.bundle_lite()  # after a fresh bundle of site/ (conftest's site_url)
    return f"{site_url}/lite"


def _outputs(page) -> str:
    return "\n".join(page.locator(".jp-OutputArea-output").all_inner_texts())


def test_notebook_trains_sin_and_draws_its_loss(browser, site_url, lite):
    page = browser.new_page(viewport={"width": 1280, "height": 1000})
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    try:
        page.goto(f"{lite}/notebooks/index.html?path=tgweb_sin_and_gpt.ipynb")
        page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=90000)
        # the kernel is up once its status shows idle; Run All before that queues the cells
        page.click("text=Run", timeout=30000)
        page.click("text=Run All Cells", timeout=30000)
        t0 = time.time()
        while time.time() - t0 < 400 and "GPT LOSS" not in _outputs(page):
            if page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']").count():
                break  # a traceback: reported below
            time.sleep(2)
        out = _outputs(page)
        # JupyterLab shows an SVG output as an <img> of the SVG's text
        svg = page.locator(".jp-OutputArea-output[data-mime-type='image/svg+xml'] img")
        src = urllib.parse.unquote(svg.first.get_attribute("src") or "") if svg.count() else ""
    finally:
        page.close()
    assert "\nLOSS FELL" in "\n" + out and "GPT LOSS FELL" in out, out[-3000:]
    points = re.search(r'points="([^"]*)"', src)
    assert points and len(points[1].split()) == 21, src[:300]  # sin's loss every 20 steps, as an SVG
    outside = [u for u in requests if not u.startswith((site_url + "/", "blob:", "data:"))]
    assert not outside, outside
