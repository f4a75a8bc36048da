"""tg.export_page: a trained model as one HTML file run by gpu.mjs alone, opened from
disk (file://) in headless Chromium, giving what the attached inference graph gives."""

from __future__ import annotations

import numpy as np
import pytest

import tgweb as tg
from tgweb import nn
from tgweb.samples import sin


class Tagger(nn.Module):
    def __init__(self):
        self.emb = nn.Embedding(11, 6)
        self.out = nn.Linear(6, 3)

    def forward(self, tok, scale):
        return self.out(tg.tanh(self.emb(tok) * scale))


def _open(browser, path):
    page = browser.new_page()
    try:
        page.goto(path.as_uri())
        page.wait_for_function("window.tgReady || window.tgError", timeout=60000)
        return page.evaluate("window.tgError || null"), page.evaluate("window.tgResult"), page
    except Exception:
        page.close()
        raise


def test_exported_sin_page_matches_python(browser, tmp_path):
    tr = tg.compile(sin.Model(), sin.loss_fn, inputs=sin.INPUTS, optimizer=sin.OPTIMIZER, backend="reference")
    for i in range(20):
        tr.step(**sin.batch(i))
    inf = tr.attach(sin.forward, inputs=sin.EVAL_INPUTS)
    x = np.linspace(-3, 3, 200, dtype=np.float32).reshape(200, 1)
    out = tg.export_page(inf, tmp_path / "sin.html", title="sin", example={"x": x})
    assert out["bytes"] < 1_000_000 and (tmp_path / "sin.html").stat().st_size == out["bytes"]
    err, got, page = _open(browser, tmp_path / "sin.html")
    try:
        assert err is None, err
        np.testing.assert_allclose(np.array(got["output"]).reshape(200, 1), inf.run(x=x).output, atol=1e-5)
        # a new input through the form runs again, on the same weights
        page.fill("textarea[data-input=x]", ", ".join(["0.5"] * 200))
        page.click("#tg-run")
        page.wait_for_function("window.tgResult.output[0] !== " + repr(got["output"][0]))
        again = page.evaluate("window.tgResult.output")
        want = inf.run(x=np.full((200, 1), 0.5, np.float32)).output
        np.testing.assert_allclose(np.array(again).reshape(200, 1), want, atol=1e-5)
        page.fill("textarea[data-input=x]", "1, two, 3")
        page.click("#tg-run")
        page.wait_for_function("document.getElementById('tg-status').className === 'err'")
        assert "not a list of numbers" in page.inner_text("#tg-status")
    finally:
        page.close()


def test_exported_page_takes_integer_inputs(browser, tmp_path):
    model = Tagger()
    tr = tg.compile(
        model,
        lambda m, tok, scale, y: ((m(tok, scale) - y) ** 2).mean(),
        inputs={"tok": ((5,), "i32"), "scale": (1,), "y": (5, 3)},
        optimizer=tg.optim.Adam(0.05),
        backend="reference",
    )
    rng = np.random.default_rng(0)
    for _ in range(5):
        tr.step(
            tok=rng.integers(0, 11, 5).astype(np.int32),
            scale=np.ones(1, np.float32),
            y=rng.standard_normal((5, 3)).astype(np.float32),
        )
    inf = tr.attach(lambda m, tok, scale: m(tok, scale), inputs={"tok": ((5,), "i32"), "scale": (1,)})
    ex = {"tok": np.array([3, 1, 4, 1, 5], np.int32), "scale": np.array([0.7], np.float32)}
    tg.export_page(inf, tmp_path / "tagger.html", example=ex)
    err, got, page = _open(browser, tmp_path / "tagger.html")
    page.close()
    assert err is None, err
    np.testing.assert_allclose(np.array(got["output"]).reshape(5, 3), inf.run(**ex).output, atol=1e-5)


def test_export_refuses_unknown_example_inputs(tmp_path):
    tr = tg.compile(sin.Model(), sin.loss_fn, inputs=sin.INPUTS, optimizer=sin.OPTIMIZER, backend="reference")
    inf = tr.attach(sin.forward, inputs=sin.EVAL_INPUTS)
    with pytest.raises(ValueError, match="does not take: \\['z'\\]"):
        tg.export_page(inf, tmp_path / "x.html", example={"z": [1.0]})
    assert not (tmp_path / "x.html").exists()
