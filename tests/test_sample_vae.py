"""The vae sample: its negative ELBO (against NumPy), its in-graph noise (against the
counter hash, also under PyTorch), its baseline and latent grid, and training to
SUCCESS on the reference backend."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from conftest import train_to_success

import tgweb as tg
from tgweb import samples
from tgweb.ops import random as rng_ops
from tgweb.samples import digits, success_bound, vae


def _np_nelbo(p, x, eps):
    relu = lambda v: np.maximum(v, 0)  # noqa: E731
    lin = lambda name, v: v @ p[name + ".weight"].T + p[name + ".bias"]  # noqa: E731 - PyTorch layout
    h = relu(lin("enc", x))
    mu, logvar = lin("mu", h), lin("logvar", h)
    z = mu + np.exp(0.5 * logvar) * eps
    logits = lin("dec2", relu(lin("dec1", z)))
    bce = (np.logaddexp(0, logits) - x * logits).sum(-1)
    kl = -0.5 * (1 + logvar - mu**2 - np.exp(logvar)).sum(-1)
    return bce + kl


def test_negative_elbo_equals_numpy_and_the_metric_is_fixed():
    tr = samples.compile("vae", backend="reference", seed=2)
    for s in range(20):
        tr.step(**vae.batch(s, 2))
    f = tr.attach(vae.forward, inputs=vae.EVAL_INPUTS)
    inputs = vae.test_inputs()
    got = f.run(**inputs).output
    p = {k: np.asarray(v, np.float64).reshape(tr.graph.params[k].shape) for k, v in tr.params().items()}
    x = np.asarray(inputs["x"], np.float64).reshape(-1, 64)
    eps = np.asarray(inputs["eps"], np.float64).reshape(-1, 2)
    np.testing.assert_allclose(got, _np_nelbo(p, x, eps), rtol=2e-5)
    m = vae.metric(lambda g: f.run(**g).output)
    assert m == vae.metric(lambda g: f.run(**g).output) == pytest.approx(got.mean(), rel=1e-6)
    assert abs(np.mean(eps)) < 0.15 and abs(np.std(eps) - 1) < 0.1  # the fixed noise is N(0, 1)
    with pytest.raises(ValueError, match="expected 359"):
        vae.metric(lambda g: [1.0, 2.0])


def test_training_draws_new_noise_in_the_graph():
    tr = samples.compile("vae", backend="reference", seed=0)
    assert "randn" in {t.kind for t in tr.graph.tensors}
    # the same batch and parameters, two seeds: two losses (the noise), the same mean
    x = np.asarray(vae.batch(0)["x"], np.float32).reshape(vae.BATCH, 64)
    ts = [
        tg.compile(
            vae.Model(),
            vae.loss_fn,
            inputs=vae.INPUTS,
            optimizer={"name": "sgd", "lr": 0.0},
            backend="reference",
            seed=s,
        )
        for s in (0, 1)
    ]
    for t in ts[1:]:
        t.load_params(ts[0].params())
    a, b = (t.step(x=x).loss for t in ts)
    assert a != b and abs(a - b) < 2.0


@pytest.mark.parametrize("seed", [0, 7, -3])
def test_random_ops_under_pytorch_draw_tgwebs_numbers(seed):
    module = tg.to_torch(vae.Model(), lambda m, x: (tg.rand((3, 5)), tg.randn((4, 3))), inputs=vae.INPUTS)
    module.rng_seed = seed
    u, n = module(x=torch.zeros(vae.INPUTS["x"]))
    want_u = [rng_ops.uniform(seed, 0, c) for c in range(15)]
    np.testing.assert_array_equal(u.numpy().ravel(), np.float32(want_u))
    want_n = []
    for i in range(12):
        u1, u2 = rng_ops.uniform(seed, 1, 2 * i), rng_ops.uniform(seed, 1, 2 * i + 1)
        want_n.append(math.sqrt(-2 * math.log(1 - u1)) * math.cos(2 * math.pi * u2))
    np.testing.assert_allclose(n.numpy().ravel(), want_n, rtol=1e-5, atol=1e-6)


def test_baseline_floor_and_latent_grid():
    tr_px = np.asarray(digits.images(digits.TRAIN_INDICES), np.float64).reshape(-1, 64)
    te_px = np.asarray(digits.images(digits.TEST_INDICES), np.float64).reshape(-1, 64)
    m = np.clip(tr_px.mean(0), 1e-6, 1 - 1e-6)
    want = -(te_px * np.log(m) + (1 - te_px) * np.log(1 - m)).sum(1).mean()
    assert vae.mean_image_nelbo() == pytest.approx(want, rel=1e-9)
    assert 0 < vae.pixel_entropy() < vae.mean_image_nelbo()
    assert success_bound(vae) == ("below", pytest.approx(want - 2.0))
    assert vae.normal_quantile(0.5) == pytest.approx(0, abs=1e-12)
    assert vae.normal_quantile(0.975) == pytest.approx(1.959964, abs=1e-6)
    g = vae.latent_grid(8)
    assert len(g) == 64 and g[0] == [pytest.approx(-1.959964, abs=1e-6), pytest.approx(1.959964, abs=1e-6)]
    assert g[7][0] > g[0][0] and g[7][1] == g[0][1]  # z1 rises along a row
    assert g[8][1] < g[0][1] and g[8][0] == g[0][0]  # z2 falls down the rows
    with pytest.raises(ValueError, match="0 < p < 1"):
        vae.normal_quantile(1.0)
    with pytest.raises(ValueError, match="side"):
        vae.latent_grid(1)
    with pytest.raises(ValueError, match="spread"):
        vae.latent_grid(8, spread=1.0)


def test_vae_reaches_success_on_the_reference_backend(tmp_path):
    _, tr = train_to_success("vae", 100, tmp_path, trained=True)
    # the decoder's sweep of the latent plane gives distinct digits, not one blur
    dec = tr.attach(vae.decode, inputs={"z": (64, 2)}).run(z=vae.latent_grid(8)).output
    assert dec.shape == (64, 64) and ((dec >= 0) & (dec <= 1)).all()
    assert np.abs(dec[0] - dec[63]).max() > 0.5


def test_data_baseline_and_grid_without_numpy():
    from test_no_numpy import run_without_numpy

    out = run_without_numpy("""
        from tgweb.samples import vae
        assert len(vae.batch(3, 1)["x"]) == 64 * 64 and len(vae.test_noise()) == 359 * 2
        assert len(vae.latent_grid(8)) == 64
        print(round(vae.mean_image_nelbo(), 3), round(vae.metric(lambda g: [1.5] * 359), 3))
    """)
    assert out.split() == [f"{vae.mean_image_nelbo():.3f}", "1.5"]
