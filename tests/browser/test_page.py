"""The trainer page (web/index.html) in real headless Chromium: sin trains with a falling
loss chart, addition trains, a Python error shows its message and line and the page stays
usable, and parameters download as .safetensors and load back so that the loss continues.

The tests share one page and run in order (sin first); runs are kept short because
WebGPU runs on SwiftShader (the CPU) here.
"""

from __future__ import annotations

import json
import time

from .conftest import OUT, losses, train_app


def _figures(page) -> dict:
    return {k: page.inner_text(f"#fig-{k}") for k in ("step", "loss", "rate", "params", "compile", "adapter")}


def _view_figure(page, name: str) -> str:
    return page.inner_text(f'#view-figures dd[data-name="{name}"]')


def test_sin_trains_with_a_falling_loss_chart(app):
    page = app
    assert page.get_attribute("#pick-sin", "aria-pressed") == "true"
    assert "def train(steps)" in page.input_value("#source")
    page.fill("#steps", "150")
    page.dispatch_event("#steps", "change")
    page.click("#start")
    # while it trains: the step counter advances and the chart has points
    page.wait_for_function("Number(document.getElementById('fig-step').textContent) >= 20", timeout=60000)
    first = int(page.inner_text("#fig-step"))
    page.wait_for_function(
        f"Number(document.getElementById('fig-step').textContent) > {first + 10}", timeout=30000
    )
    page.wait_for_function("document.body.dataset.state === 'ready'", timeout=120000)
    figs = _figures(page)
    chart = page.evaluate("Object.assign({}, document.getElementById('chart').dataset)")
    print("\nsin on the page:", json.dumps(figs), json.dumps(chart), page.inner_text("#status"))
    assert figs["step"] == "150"
    assert int(chart["points"]) == 150
    assert float(chart["last"]) < 0.2 * float(chart["first"]), chart  # the smoothed loss fell
    assert float(figs["loss"]) < 0.05
    assert float(figs["rate"]) > 0
    assert figs["params"] == "4,353"
    assert figs["compile"].endswith(" s") and float(figs["compile"][:-2]) > 0
    assert figs["adapter"] not in ("", "–")
    assert float(_view_figure(page, "grid MSE")) < 0.05
    assert page.locator(".view canvas.curve").count() == 1
    assert "done at step 150" in page.inner_text("#status")
    assert page.is_hidden("#error")
    OUT.mkdir(exist_ok=True)
    page.screenshot(path=str(OUT / "page_sin.png"), full_page=True)
    assert not page.problems, page.problems


def test_download_reset_load_continues(app, tmp_path):
    page = app
    if not losses(page, "sin"):
        train_app(page, 100)
    before = losses(page, "sin")
    last_step, last_loss = before[-1]
    with page.expect_download() as dl:
        page.click("#download")
    path = tmp_path / dl.value.suggested_filename
    dl.value.save_as(path)
    assert path.name == f"sin-step{int(last_step)}.safetensors"
    # the file opens with the safetensors package
    from safetensors import safe_open

    with safe_open(str(path), framework="numpy") as f:
        keys = set(f.keys())
        assert f.metadata()["steps"] == str(int(last_step))
        assert f.get_tensor("net.0.weight").shape == (64, 1)
    assert "net.4.bias" in keys and any(k.startswith("optimizer.") for k in keys)

    page.click("#reset")
    page.wait_for_function(
        "document.body.dataset.state === 'ready' && document.getElementById('fig-step').textContent === '0'",
        timeout=30000,
    )
    assert losses(page, "sin") == []
    assert float(_view_figure(page, "grid MSE")) > 20 * last_loss  # back to the untrained fit

    page.set_input_files("#load-file", str(path))
    page.wait_for_function("document.getElementById('status').textContent.includes('loaded')", timeout=30000)
    assert "with optimizer state" in page.inner_text("#status")
    train_app(page, 20)
    after = losses(page, "sin")
    print(
        f"\nloss before download {last_loss:.3g} (step {last_step}); after load: "
        f"{after[0][1]:.3g} (step {after[0][0]}) .. {after[-1][1]:.3g}"
    )
    assert after[0][0] == last_step + 1  # the step count continues
    assert after[0][1] < 3 * last_loss + 1e-3  # and so does the loss
    assert max(v for _, v in after) < 5 * last_loss + 1e-3
    assert not page.problems, page.problems


def test_python_error_shows_message_and_line(app):
    page = app
    original = page.input_value("#source")
    lines = original.split("\n")
    at = next(i for i, ln in enumerate(lines) if ln.startswith("def train(steps):")) + 1
    lines.insert(at, '    raise ValueError("boom from the page")')
    page.fill("#source", "\n".join(lines))
    page.click("#start")
    page.wait_for_selector("#error:not([hidden])", timeout=60000)
    assert "boom from the page" in page.inner_text("#error-text")
    assert page.inner_text("#error-type") == "ValueError:"
    assert page.inner_text("#error-line-no") == str(at + 1)
    assert f"line {at + 1}" in page.inner_text("#status")
    assert page.inner_text(".gutter b") == str(at + 1)
    page.click("#error-line")  # selects the line in the editor
    assert (
        page.evaluate(
            "(() => { const t = document.getElementById('source'); "
            "return t.value.slice(t.selectionStart, t.selectionEnd); })()"
        ).strip()
        == 'raise ValueError("boom from the page")'
    )

    # a syntax error: the message and the line, before anything compiles
    page.fill("#source", original.replace("import math", "import math\nx = (1,", 1))
    page.click("#start")
    page.wait_for_function("document.getElementById('error-line-no').textContent === '5'", timeout=30000)
    assert "SyntaxError" in page.inner_text("#error-type")

    # the page stays usable: the original source trains again
    page.click("#revert")
    assert page.input_value("#source") == original
    train_app(page, 10, timeout=60)
    assert page.is_hidden("#error")
    assert page.locator(".gutter b").count() == 0  # the error's line is no longer marked
    assert page.inner_text("#fig-step") == "10"
    assert "done at step 10" in page.inner_text("#status")
    assert not page.problems, page.problems


def test_addition_trains_on_the_page(app):
    page = app
    page.click("#pick-addition")
    assert page.inner_text("#sample-title") == "addition"
    t = time.perf_counter()
    train_app(page, 12, timeout=480)
    wall = time.perf_counter() - t
    got = losses(page, "addition")
    figs = _figures(page)
    print(
        f"\naddition on the page: {json.dumps(figs)} in {wall:.1f} s;",
        "losses",
        [round(v, 3) for _, v in got],
    )
    assert page.is_hidden("#error"), page.text_content("#error")
    assert [s for s, _ in got] == list(range(1, 13))
    assert figs["step"] == "12"
    assert min(v for _, v in got[-4:]) < got[0][1] - 0.2
    assert figs["params"] == "150,656"
    assert page.locator(".heat canvas").count() == 4  # the attention map of each head
    assert 0 <= float(_view_figure(page, "held-out accuracy")) <= 1
    page.screenshot(path=str(OUT / "page_addition.png"), full_page=True)
    assert not page.problems, page.problems
