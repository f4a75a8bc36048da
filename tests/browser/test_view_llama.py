"""The llama view in headless Chromium: moving the temperature slider and pressing Sample
brings new names drawn at that temperature, through the sampler graph attached once (the
temperature is an input: Python reports it was traced once and the trainer's program is
unchanged); a low temperature gives less varied letters than a high one."""

from __future__ import annotations

import re

from .conftest import screenshot, train_app

NAMES = "#llama-names"


SAMPLE = "llama"  # the page opens at it (conftest.app)


def answer(page) -> dict:
    d = page.evaluate(
        """(sel) => { const ul = document.querySelector(sel);
        return {...ul.dataset, names: [...ul.querySelectorAll("li")].map((li) => li.textContent)}; }""",
        NAMES,
    )
    return {
        "names": d["names"],
        "temperature": float(d["temperature"]),
        "traces": int(d["traces"]),
        "entropy": float(d["entropy"]),
    }


def top_bar(page) -> float:
    """The likeliest first letter's probability (%) as the bar chart's label states it."""
    label = page.get_attribute("#llama-first", "aria-label")
    return float(re.search(r"\(([0-9.]+) %\)", label).group(1))


def sample_at(page, key: str, shown: str) -> dict:
    """Move the slider with the keyboard (Home: 0.1, End: 2), press Sample, wait for the names."""
    page.focus("#llama-temperature")
    page.keyboard.press(key)
    assert page.inner_text("#llama-temperature-value") == shown
    page.click("#llama-sample")
    page.wait_for_function(
        f"document.querySelector('{NAMES}').dataset.temperature === String({float(shown)}) && "
        "!document.getElementById('llama-sample').disabled",
        timeout=60000,
    )
    return answer(page)


def test_the_slider_sets_the_temperature_without_recompiling(app):
    page = app
    train_app(page, 60, timeout=240)
    page.wait_for_function(f"document.querySelectorAll('{NAMES} li').length === 12", timeout=30000)
    first = answer(page)
    assert first["temperature"] == 1.0 and first["traces"] == 1
    kernels = page.evaluate("window.app.state.llama.info.kernels")
    compiled = page.evaluate("window.app.state.llama.compiled.length")

    cold = sample_at(page, "Home", "0.10")
    assert cold["traces"] == 1, "a new temperature compiled the sampler again"
    assert len(cold["names"]) == 12 and cold["names"] != first["names"]
    hot = sample_at(page, "End", "2.00")
    assert hot["traces"] == 1 and len(hot["names"]) == 12 and hot["names"] != cold["names"]
    # the temperature reached the graph: the distributions sampled from are sharp at 0.1, flat at 2
    assert cold["entropy"] < 0.5 * first["entropy"] and hot["entropy"] > first["entropy"], (cold, first, hot)
    assert len(set(cold["names"])) < len(set(hot["names"])) or cold["entropy"] < 0.3
    status = page.inner_text("#llama-status")
    assert "temperature 2.00" in status and "compiled once" in status, status
    # nothing was compiled again: same trainer program, same source
    assert page.evaluate("window.app.state.llama.info.kernels") == kernels
    assert page.evaluate("window.app.state.llama.compiled.length") == compiled
    # the bars follow the slider at once (no call): the likeliest first letter is likelier when cold
    page.focus("#llama-temperature")
    page.keyboard.press("Home")
    sharp = top_bar(page)
    page.keyboard.press("End")
    flat = top_bar(page)
    assert sharp > flat, (sharp, flat)
    screenshot(page, "llama-temperature")
    assert not [p for p in page.problems if "pageerror" in p], page.problems
