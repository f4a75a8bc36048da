"""The canvas sample's view in headless Chromium: train a little, draw a "1" on the pad
with the mouse, and the ten probabilities (summing to 1) appear; add strokes that make
a "0" of it and they change; Clear empties them."""

from __future__ import annotations

import math

from .conftest import open_sample, screenshot, train_app


def probs(page) -> list[float]:
    vals = page.eval_on_selector_all("#canvas-probs li", "lis => lis.map(li => li.dataset.prob)")
    assert len(vals) == 10
    return [float(v) for v in vals] if all(vals) else []


def wait_for_answer(page, before: list[float] | None = None) -> list[float]:
    """The probabilities once no call is in flight and they differ from `before`."""
    page.wait_for_function(
        """(before) => {
            const v = [...document.querySelectorAll('#canvas-probs li')].map(li => li.dataset.prob);
            const st = document.querySelector('#view-body [role=status]').textContent;
            const changed = before === null || v.some((x, i) => Number(x) !== before[i]);
            return v.every(x => x) && !st.startsWith('predicting') && changed;
        }""",
        arg=before,
        timeout=60000,
    )
    return probs(page)


def stroke(page, pts):
    page.locator("#canvas-pad").scroll_into_view_if_needed()
    box = page.locator("#canvas-pad").bounding_box()
    x0, y0, w, h = box["x"], box["y"], box["width"], box["height"]
    page.mouse.move(x0 + pts[0][0] * w, y0 + pts[0][1] * h)
    page.mouse.down()
    for x, y in pts[1:]:
        page.mouse.move(x0 + x * w, y0 + y * h, steps=4)
    page.mouse.up()


def test_drawing_a_digit_shows_live_probabilities(app):
    page = app
    open_sample(page, "canvas")
    train_app(page, 300, timeout=300)
    page.wait_for_selector("#canvas-pad")
    assert probs(page) == []  # nothing drawn yet
    stroke(page, [(0.5, 0.1), (0.5, 0.5), (0.5, 0.9)])  # a "1"
    one = wait_for_answer(page)
    assert abs(sum(one) - 1) < 1e-4 and all(0 <= p <= 1 for p in one), one
    assert page.inner_text("#canvas-answer").startswith("It reads ")
    # the 8x8 image the model sees has ink in the middle columns only
    seen = page.evaluate(
        """() => { const g = document.getElementById('canvas-seen').getContext('2d');
                   const d = g.getImageData(0, 0, 8, 8).data;
                   return [...Array(64).keys()].map(i => 255 - d[4 * i]); }"""
    )
    cols = [sum(seen[r * 8 + c] for r in range(8)) for c in range(8)]
    assert cols[3] > 0 and cols[4] > 0 and cols[0] == cols[7] == 0, cols
    assert max(range(10), key=one.__getitem__) == 1, one
    screenshot(page, "canvas-one")

    # more strokes turn it into a "0": the probabilities change and favour 0
    ring = [
        (0.5 + 0.3 * math.sin(t * math.pi / 12), 0.5 - 0.4 * math.cos(t * math.pi / 12)) for t in range(25)
    ]
    stroke(page, ring)
    zero = wait_for_answer(page, one)
    assert abs(sum(zero) - 1) < 1e-4 and zero != one
    assert zero[0] > one[0], (one, zero)
    screenshot(page, "canvas-zero")

    # the drawing survives a re-render (resize)
    page.set_viewport_size({"width": 1100, "height": 900})
    page.wait_for_selector("#canvas-probs li[data-prob]")
    page.wait_for_function("document.querySelector('#canvas-probs li').dataset.prob !== ''", timeout=30000)

    page.click("#canvas-clear")
    assert probs(page) == []
    assert page.inner_text("#canvas-answer") == ""
    assert not [p for p in page.problems if "pageerror" in p], page.problems
