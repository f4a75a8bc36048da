"""The nerf sample: its Fourier features (against plain Python), image, batches and
PSNR, and training to SUCCESS on the reference backend."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from conftest import train_to_success

from tgweb import samples
from tgweb.samples import nerf

ROOT = Path(__file__).resolve().parents[1]


def test_fourier_features_are_sin_and_cos_of_the_frequencies():
    tr = samples.compile("nerf", backend="reference")
    feats = tr.attach(lambda model, coords: nerf.fourier_features(coords), inputs={"coords": (5, 2)})
    pts = np.array([[0.0, 0.0], [0.5, 0.25], [1.0, 1.0], [0.123, 0.987], [0.75, 0.1]], np.float32)
    got = np.asarray(feats.run(coords=pts).output)
    freqs = nerf.frequencies()
    assert got.shape == (5, 2 * nerf.FEATURES) and len(freqs) == nerf.FEATURES
    for n, (u, v) in enumerate(pts.astype(np.float64)):
        phase = [2 * math.pi * (bx * u + by * v) for bx, by in freqs]
        want = [math.sin(p) for p in phase] + [math.cos(p) for p in phase]
        # the graph builds b_j in f32: a direction off by ~1e-5 rad moves a phase of up to
        # 34 turns by up to ~3e-3 rad; sin and cos themselves see [-pi, pi] only
        np.testing.assert_allclose(got[n], want, atol=5e-3)
    np.testing.assert_allclose(got[:, : nerf.FEATURES] ** 2 + got[:, nerf.FEATURES :] ** 2, 1.0, atol=1e-5)
    lengths = [math.hypot(bx, by) for bx, by in freqs]
    assert lengths[0] == pytest.approx(nerf.FREQ_MIN) and lengths[-1] == pytest.approx(nerf.FREQ_MAX)
    assert all(b > a for a, b in zip(lengths, lengths[1:]))


def test_builtin_image_is_colorful_and_detailed():
    img = nerf.builtin_image()
    assert len(img) == nerf.PIXELS * 3 and img.typecode == "f" and all(0 <= v <= 1 for v in img)
    assert img == nerf.builtin_image()  # cached and deterministic
    px = np.asarray(img).reshape(64, 64, 3)
    assert px.std(axis=(0, 1)).min() > 0.15  # every channel varies
    hue_spread = (px.max(axis=2) - px.min(axis=2)).mean()
    assert hue_spread > 0.3  # colours, not greys
    # detail: plenty of strong edges between neighbouring pixels
    edges = (np.abs(np.diff(px, axis=0)).sum(axis=2) > 0.3).sum() + (
        np.abs(np.diff(px, axis=1)).sum(axis=2) > 0.3
    ).sum()
    assert edges > 300
    # the sun is yellow, the ground green, a star white
    assert tuple(px[int(0.34 * 64), int(0.72 * 64)].round(1)) == pytest.approx((1.0, 0.9, 0.5), abs=0.1)
    g = px[62, 5]
    assert g[1] > g[0] and g[1] > g[2]
    sx, sy = nerf.STARS[0]
    assert px[int(sy * 64), int(sx * 64)].min() > 0.6


def test_coords_and_pixel_batches():
    c = nerf.coords()["coords"]
    assert (
        len(c) == nerf.PIXELS * 2
        and c[0] == c[1] == 0.5 / 64
        and c[2] == 1.5 / 64
        and c[2 * 64 + 1] == 1.5 / 64
    )
    a, b = nerf.batch(3, 1), nerf.batch(3, 1)
    assert a == b and nerf.batch(4, 1) != a
    assert len(a["coords"]) == nerf.BATCH * 2 and len(a["rgb"]) == nerf.BATCH * 3
    img = nerf.builtin_image()
    for k in range(0, nerf.BATCH, 97):  # each colour is the image's pixel at those coordinates
        u, v = a["coords"][2 * k], a["coords"][2 * k + 1]
        i = int(v * 64) * 64 + int(u * 64)
        assert tuple(a["rgb"][3 * k : 3 * k + 3]) == tuple(img[3 * i : 3 * i + 3])
    other = [0.25] * (nerf.PIXELS * 3)
    assert set(nerf.pixel_batch(other, 0)["rgb"]) == {0.25}
    with pytest.raises(ValueError, match="12288"):
        nerf.pixel_batch([0.0] * 10, 0)


def test_check_image_and_psnr():
    ok = nerf.check_image([[0.5, 0.25, 1.0]] * nerf.PIXELS)
    assert len(ok) == nerf.PIXELS * 3 and ok[:3].tolist() == [0.5, 0.25, 1.0]
    with pytest.raises(ValueError, match="64x64x3 = 12288 values, got 3"):
        nerf.check_image([0.1, 0.2, 0.3])
    with pytest.raises(ValueError, match="in \\[0, 1\\]; value 7 is 2"):
        nerf.check_image([0.0] * 7 + [2.0] + [0.0] * (nerf.PIXELS * 3 - 8))
    with pytest.raises(ValueError, match="in \\[0, 1\\]"):
        nerf.check_image([float("nan")] * (nerf.PIXELS * 3))
    with pytest.raises(ValueError, match="numbers"):
        nerf.check_image(["x"] * (nerf.PIXELS * 3))
    img = nerf.builtin_image()
    assert nerf.psnr(img) == math.inf
    assert nerf.psnr([min(1.0, v + 0.1) if v < 0.9 else v - 0.1 for v in img]) == pytest.approx(
        20.0, abs=1e-3
    )
    assert nerf.psnr([0.0] * len(img), [1.0] * len(img)) == pytest.approx(0.0)
    with pytest.raises(ValueError):
        nerf.psnr([0.0])
    assert nerf.metric(lambda c: img) == math.inf


def test_nerf_reaches_success_on_the_reference_backend(tmp_path):
    train_to_success("nerf", 50, tmp_path)
