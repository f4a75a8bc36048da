"""The shakespeare view in headless Chromium, at the sample's scaled-down size (the full
10.7M-parameter model is far too big for SwiftShader): the text drawn from the model
streams in, growing a few characters at a time until it is complete, every character of
it from the text's vocabulary; after training the validation loss has fallen and the
text is drawn from the trained model; the page names the precision it trains in."""

from __future__ import annotations

from tgweb.samples import shakespeare

from .conftest import screenshot, train_app, use_small_size

SAMPLE = "shakespeare"  # the page opens at it (conftest.app)
TEXT = "#shakespeare-text"

# records the text's length each time the view re-renders it, and whether it was done
_WATCH = """() => {
  window.shakespeareSeen = [];
  new MutationObserver(() => {
    const pre = document.querySelector('#shakespeare-text');
    if (pre) window.shakespeareSeen.push([pre.firstChild ? pre.firstChild.textContent.length : 0,
                                          pre.dataset.done, Number(pre.dataset.step)]);
  }).observe(document.getElementById('view-body'), {childList: true, subtree: true});
}"""


def shown(page) -> dict:
    return page.evaluate(
        """(sel) => { const pre = document.querySelector(sel);
        const loss = document.querySelector('#view-figures dd[data-name="validation loss"]');
        return {text: pre.firstChild.textContent, done: pre.dataset.done, step: Number(pre.dataset.step),
                loss: Number(loss.textContent)}; }""",
        TEXT,
    )


def test_text_streams_in_as_the_model_writes_it(app):
    page = app
    use_small_size(page, SAMPLE)
    page.evaluate(_WATCH)
    train_app(page, 1, timeout=240)  # compiles; show() streams text from the barely trained model
    first = shown(page)
    assert first["done"] == "true" and len(first["text"]) == 240
    train_app(page, 60, timeout=240)
    page.wait_for_function(f"document.querySelector('{TEXT}').dataset.done === 'true'", timeout=60000)
    last = shown(page)
    assert last["step"] == 61 and len(last["text"]) == 240 and last["text"] != first["text"]
    assert set(last["text"]) <= set(shakespeare.chars())
    assert last["loss"] < first["loss"] - 0.3, (first["loss"], last["loss"])  # starts near ln 65 = 4.17
    seen = page.evaluate("window.shakespeareSeen")
    streamed = [n for n, done, step in seen if step == 61 and done == "false"]
    # the last draw arrived in pieces: growing lengths short of the whole, then the whole
    assert len(set(streamed)) >= 5 and sorted(streamed) == streamed and max(streamed) < 240, seen
    status = page.inner_text("#shakespeare-status")
    assert "from the model of step 61" in status, status
    # the precision the source chose: SwiftShader is a CPU, so float32 (tests/test_sampler.py)
    assert "training in float32" in status, status
    precision = page.inner_text('#view-figures dd[data-name="precision"]')
    assert precision == "float32", precision
    screenshot(page, "shakespeare-text")
    assert not [p for p in page.problems if "pageerror" in p], page.problems
