"""The cartpole view in headless Chromium: after a few training steps, "Play an episode"
asks the page script for an episode played by the current policy and animates it; the
status names the episode's length, and the greedy switch is honoured."""

from __future__ import annotations

import re

from .conftest import open_sample, screenshot, train_app


def _episode_done(page):
    page.wait_for_function(
        "/Balanced|fell/.test(document.getElementById('cp-status').textContent)", timeout=120000
    )
    return page.inner_text("#cp-status")


def test_play_an_episode_animates_the_policy(app):
    page = app
    open_sample(page, "cartpole")
    train_app(page, 10, timeout=240)
    page.wait_for_selector("#cp-play")
    _episode_done(page)  # the view plays the new policy once by itself
    page.check("#cp-greedy")
    page.click("#cp-play")
    page.wait_for_function(
        "/^Playing: greedy/.test(document.getElementById('cp-status').textContent)", timeout=60000
    )
    # the scene changes while the episode plays
    first = page.evaluate("document.querySelector('canvas.cp-scene').toDataURL()")
    page.wait_for_timeout(300)
    second = page.evaluate("document.querySelector('canvas.cp-scene').toDataURL()")
    assert first != second, "the cart-pole canvas did not animate"
    text = _episode_done(page)
    n = int(page.get_attribute("#cp-status", "data-return"))
    assert 1 <= n <= 200
    m = re.search(r"(\d+) steps \(greedy actions, policy after training step (\d+)\)", text)
    assert m and int(m.group(1)) == n and int(m.group(2)) == 10, text
    # the return curve has the 10 training steps and the 100-episode evaluation is a figure
    value = float(page.inner_text('#view-figures dd[data-name="mean return (100 episodes)"]'))
    assert 8 <= value <= 200
    screenshot(page, "cartpole-episode")
    assert not [p for p in page.problems if "pageerror" in p], page.problems
