"""Every sample of the page's gallery (web/page/gallery.mjs), opened in headless Chromium:
it is also a tgweb.samples module, it trains 20 steps through Start with a finite and
falling loss (a policy-gradient sample: a finite loss and a better success figure), its
view renders (figures and a drawing), and a screenshot of the page is
kept in test-output/screenshots/<name>.png. One page serves all samples, in gallery order.

Interactive views get tests of their own (test_view_<name>.py) that drive them.
"""

from __future__ import annotations

import math
import re

import pytest

from tgweb import samples
from tgweb.samples import success_bound

from .conftest import ROOT, losses, open_sample, screenshot, train_app, use_small_size

GALLERY = re.findall(r'\{ name: "(\w+)"', (ROOT / "web" / "page" / "gallery.mjs").read_text())
STEPS = 20


def test_gallery_and_samples_agree():
    assert sorted(GALLERY) == sorted(samples.SAMPLES), "web/page/gallery.mjs and tgweb.samples differ"
    for name in GALLERY:
        assert (ROOT / "web" / "page" / "samples" / f"{name}.py").exists(), name


def _first_figure(page) -> float:
    """The view's first figure: each sample's success figure."""
    page.wait_for_selector("#view-figures dd", timeout=30000)
    return float(page.inner_text("#view-figures dd >> nth=0"))


@pytest.mark.parametrize("name", GALLERY)
def test_sample_trains_and_shows_its_view(app, name):
    page = app
    mod = samples.get(name)
    # policy-gradient samples (their batches are played by the policy) minimise a
    # surrogate whose value is no measure of progress: their success figure must improve
    policy_gradient = getattr(mod, "BATCH_NEEDS_POLICY", False)
    open_sample(page, name)
    if hasattr(mod, "sized"):  # shakespeare: only its scaled-down size trains in SwiftShader
        use_small_size(page, name)
    if policy_gradient:
        train_app(page, 1, timeout=240)
        before = _first_figure(page)
    train_app(page, STEPS, timeout=240)
    assert page.inner_text("#error-text") == "" or page.is_hidden("#error"), page.inner_text("#error-text")
    got = [v for _, v in losses(page, name)]
    assert len(got) >= STEPS, f"{name}: {len(got)} losses after {STEPS} steps"
    assert all(math.isfinite(v) for v in got), f"{name}: non-finite loss {got}"
    if policy_gradient:
        after = _first_figure(page)
        better = after > before if success_bound(mod)[0] == "at_least" else after < before
        assert better, f"{name}: its success figure went from {before} to {after} in {STEPS} steps"
    else:
        k = max(1, len(got) // 4)
        first, last = sum(got[:k]) / k, sum(got[-k:]) / k
        assert last < first, f"{name}: the loss did not fall in {STEPS} steps: {got}"
    # the view: at least one figure, and something drawn beside it
    page.wait_for_selector("#view-figures dd", timeout=30000)
    drawn = "#view-body canvas, #view-body svg, #view-body img, #view-body li, #view-body pre"
    assert page.locator(drawn).count() > 0, (
        f"{name}: the view drew nothing: {page.inner_html('#view-body')[:400]}"
    )
    screenshot(page, name)
    assert not [p for p in page.problems if "pageerror" in p], page.problems
