"""The kan view in headless Chromium: after training to the sample's SUCCESS on the page
(WebGPU), the fit meets the goal and every one of the 8 learned edges has its own plot,
and the plots change as the edges learn."""

from __future__ import annotations

import re

from tgweb.samples import kan

from .conftest import open_app, open_sample, screenshot, train_app

# the pixels of every edge plot, as data URLs, in the view's order
EDGE_PIXELS = "() => [...document.querySelectorAll('#view-body .kan-edges canvas')].map((c) => c.toDataURL())"


def test_kan_reaches_its_goal_in_the_browser_and_plots_every_edge(browser, site_url):
    page = open_app(browser, site_url, "kan")
    try:
        open_sample(page, "kan")
        train_app(page, 50, timeout=240)
        figs = page.locator("#view-body .kan-edges figure")
        assert figs.count() == 8
        labels = [figs.nth(k).inner_text() for k in range(8)]
        assert labels == [f"φ x → h{s}" for s in "₁₂₃₄"] + [f"φ h{s} → y" for s in "₁₂₃₄"], labels
        aria = page.locator("#view-body .kan-edges canvas").first.get_attribute("aria-label")
        assert aria == "learned edge function x to h₁"
        assert page.locator("#view-body canvas.kan-fit").count() == 1
        early = page.evaluate(EDGE_PIXELS)
        train_app(page, 350, timeout=240)
        status = page.inner_text("#status")
        mse = float(page.inner_text('#view-figures dd[data-name="grid MSE"]'))
        print(f"kan in Chromium: grid MSE {mse:.3g} at step 400; {status}")
        assert mse < kan.SUCCESS["below"], f"grid MSE {mse} after 400 steps in the browser"
        late = page.evaluate(EDGE_PIXELS)
        assert len(late) == 8 and all(a != b for a, b in zip(early, late)), "an edge plot did not change"
        rate = re.search(r"([\d.]+) steps/s", status)
        assert rate and float(rate.group(1)) > 0
        screenshot(page, "kan-trained")
        assert not [p for p in page.problems if "pageerror" in p], page.problems
    finally:
        page.close()
