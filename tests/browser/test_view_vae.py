"""The vae sample's view in headless Chromium: after some training it shows ten test
digits beside their reconstructions and the decoded latent sweep; clicking two points
of the latent plane decodes two different digits there, and the arrow keys move the
point."""

from __future__ import annotations

import json

import pytest

from .conftest import open_sample, screenshot, train_app

MOVED = """(z) => { const d = document.querySelector('#vae-probe').dataset.z;
                   return !!d && JSON.stringify(JSON.parse(d)) !== JSON.stringify(z); }"""


def probe(page):
    """(z, the 64 grey levels of the decoded digit) once no call is in flight."""
    page.wait_for_function(
        "!document.querySelector('#view-body [role=status]').textContent.startsWith('decoding')",
        timeout=60000,
    )
    status = page.inner_text("#view-body [role=status]")
    assert page.get_attribute("#vae-probe", "data-z"), f"nothing decoded: {status!r}"
    z = json.loads(page.get_attribute("#vae-probe", "data-z"))
    px = page.evaluate(
        """() => { const c = document.getElementById('vae-probe');
                   const d = c.getContext('2d').getImageData(0, 0, 8, 8).data;
                   return [...Array(64).keys()].map(i => 255 - d[4 * i]); }"""
    )
    return z, px


def test_reconstructions_sweep_and_decoding_a_point(app):
    page = app
    open_sample(page, "vae")
    train_app(page, 400, timeout=300)
    page.wait_for_selector("#vae-recon canvas")
    assert page.locator("#vae-recon figure").count() == 10
    assert page.locator("#vae-recon canvas").count() == 20  # originals and reconstructions
    # the reconstructions resemble their originals more than other digits' originals
    err = page.evaluate(
        """() => {
            const grey = (c) => { const d = c.getContext('2d').getImageData(0, 0, 8, 8).data;
                                  return [...Array(64).keys()].map(i => 1 - d[4 * i] / 255); };
            const figs = [...document.querySelectorAll('#vae-recon figure')].map(f =>
                [...f.querySelectorAll('canvas')].map(grey));
            const mse = (a, b) => a.reduce((s, v, i) => s + (v - b[i]) ** 2, 0) / 64;
            const own = figs.map(([o, r]) => mse(o, r));
            const other = figs.map(([o, r], k) => mse(figs[(k + 5) % 10][0], r));
            return [own.reduce((a, b) => a + b) / 10, other.reduce((a, b) => a + b) / 10];
        }"""
    )
    assert err[0] < err[1], err
    grid = page.locator("#vae-grid")
    assert grid.get_attribute("width") == "64" and "decoded" in grid.get_attribute("aria-label")
    figs = page.eval_on_selector_all("#view-figures dd", "ds => ds.map(d => [d.dataset.name, d.textContent])")
    assert dict(figs)["goal"].startswith("< 25.")

    page.locator("#vae-plane").scroll_into_view_if_needed()
    box = page.locator("#vae-plane").bounding_box()
    page.mouse.click(box["x"] + box["width"] * 0.2, box["y"] + box["height"] * 0.25)
    z1, px1 = probe(page)
    assert z1[0] < 0 < z1[1] and sum(px1) > 0
    page.mouse.click(box["x"] + box["width"] * 0.8, box["y"] + box["height"] * 0.75)
    page.wait_for_function(MOVED, arg=z1)
    z2, px2 = probe(page)
    assert z2[0] > 0 > z2[1]
    assert max(abs(a - b) for a, b in zip(px1, px2)) > 60, "two far apart points decode to the same digit"
    screenshot(page, "vae-probe")

    page.focus("#vae-plane")
    page.keyboard.press("ArrowUp")
    page.wait_for_function(MOVED, arg=z2)
    z3, _ = probe(page)
    assert z3[0] == pytest.approx(z2[0]) and z3[1] == pytest.approx(z2[1] + 0.1)
    assert not [p for p in page.problems if "pageerror" in p], page.problems
