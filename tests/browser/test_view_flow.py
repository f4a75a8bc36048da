"""The flow view in headless Chromium: samples appear after training; choosing the number
of Euler steps, new noise and the fixed noise again each bring samples back from Python
(the grid's pixels change, and the fixed noise gives the same samples again)."""

from __future__ import annotations

from .conftest import screenshot, train_app

GRID = "#flow-grid"
# a checksum of the grid canvas's pixels, to tell drawings apart
CHECKSUM = """(sel) => { const c = document.querySelector(sel);
  const d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
  let s = 0; for (let i = 0; i < d.length; i += 4) s = (s * 31 + d[i]) % 1000000007; return s; }"""


SAMPLE = "flow"  # the page opens at it (conftest.app)


def grid(page) -> dict:
    d = page.evaluate(f"({{...document.querySelector('{GRID}').dataset}})")
    d["sum"] = page.evaluate(CHECKSUM, GRID)
    return d


def wait_for(page, **want):
    cond = " && ".join(f"document.querySelector('{GRID}').dataset.{k} === '{v}'" for k, v in want.items())
    page.wait_for_function(f"{cond} && !document.getElementById('flow-new').disabled", timeout=90000)
    return grid(page)


def test_euler_steps_and_noise_come_back_from_python(app):
    page = app
    train_app(page, 40, timeout=300)
    first = wait_for(page, steps="16", seed="1234", step="40")
    assert len(first["labels"]) == 64 and set(first["labels"]) <= set("0123456789")
    assert page.inner_text('#view-figures dd[data-name="held-out loss"]')
    page.select_option("#flow-steps", "4")
    four = wait_for(page, steps="4", seed="1234")
    assert four["sum"] != first["sum"]
    label = page.get_attribute("#flow-paths", "aria-label")
    assert "t = 0, 0.25, 0.5, 0.75, 1" in label, label
    assert "4 Euler steps" in page.inner_text("#flow-status")
    page.click("#flow-new")
    page.wait_for_function(f"document.querySelector('{GRID}').dataset.seed !== '1234'", timeout=90000)
    fresh = wait_for(page, steps="4")
    assert fresh["sum"] != four["sum"] and "new noise" in page.inner_text("#flow-status")
    page.click("#flow-fixed")
    again = wait_for(page, steps="4", seed="1234")
    assert again["sum"] == four["sum"] and again["labels"] == four["labels"]  # same noise, same model
    screenshot(page, "flow-euler")
    assert not [p for p in page.problems if "pageerror" in p], page.problems
