"""The JupyterLite site (site/lite/, `build.py lite`): examples/notebooks/tgweb_sin_and_gpt.ipynb
opened in Jupyter Notebook (JupyterLite) with the Pyodide kernel; Run All installs tgweb
with %pip from the site, trains sin and a small GPT (the llama sample) on WebGPU in the
kernel's worker, draws the losses as SVGs and prints that they fell; nothing comes from
outside the site, no page or worker reports an error, and every cell gets its reply (an
execution count, not [*])."""

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
    return f"{site_url}{build.LITE_PATH}".rstrip("/")


ALL_ANSWERED = """[...document.querySelectorAll('.jp-CodeCell .jp-InputPrompt')]
    .every((p) => /\\[\\d+\\]/.test(p.textContent))"""


def _outputs(page) -> str:
    return "\n".join(page.locator(".jp-OutputArea-output").all_inner_texts())


def _problems(page) -> list[str]:
    """Page errors (the kernel worker's Python errors arrive so) and console errors, but
    the browser's own ask for /favicon.ico, which the site has none of."""
    out: list[str] = []
    page.on("pageerror", lambda e: out.append(f"pageerror: {e}"))
    page.on(
        "console", lambda m: m.type == "error" and "favicon" not in str(m.location) and out.append(m.text)
    )
    return out


def test_notebook_trains_sin_and_a_gpt_and_draws_their_losses(browser, site_url, lite):
    page = browser.new_page(viewport={"width": 1280, "height": 1000})
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    problems = _problems(page)
    try:
        page.goto(f"{lite}/notebooks/index.html?path=tgweb_sin_and_gpt.ipynb")
        page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=90000)
        # Run All before the kernel is up queues the cells
        page.click("text=Run", timeout=30000)
        page.click("text=Run All Cells", timeout=30000)
        t0 = time.time()
        # the notebook takes about a minute on SwiftShader (2 shared cores); a kernel that
        # runs no cell shows an error well before the bound
        while time.time() - t0 < 240 and "GPT LOSS" not in _outputs(page) and not problems:
            if page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']").count():
                break  # a traceback: reported below
            time.sleep(2)
        if not problems:  # every code cell answered: [n], not [*] (its reply lost)
            page.wait_for_function(ALL_ANSWERED, timeout=20000)
        print(f"\nJupyterLite: Run All to the GPT's loss {time.time() - t0:.1f} s")
        out = _outputs(page)
        # JupyterLab shows an SVG output as an <img> of the SVG's text
        svg = page.locator(".jp-OutputArea-output[data-mime-type='image/svg+xml'] img")
        src = urllib.parse.unquote(svg.first.get_attribute("src") or "") if svg.count() else ""
    finally:
        page.close()
    assert not problems, problems
    assert "\nLOSS FELL" in "\n" + out and "GPT LOSS FELL" in out, out[-3000:]
    points = re.search(r'points="([^"]*)"', src)
    assert points and len(points[1].split()) == 21, src[:300]  # sin's loss every 20 steps, as an SVG
    outside = [u for u in requests if not u.startswith((site_url + "/", "blob:", "data:"))]
    assert not outside, outside
