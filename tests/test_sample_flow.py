"""The flow sample: its time features, flow-matching loss, Euler sampler, held-out metric
and baseline, nearest-image measure, and training to SUCCESS on the reference backend."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from conftest import train_to_success

from tgweb import samples
from tgweb.samples import digits, flow

N = flow.SAMPLES_N


def test_time_features_and_the_loss_are_what_the_docstring_says():
    tr = samples.compile("flow", backend="reference", seed=0)
    t = np.array([[0.0], [0.3], [0.99]], np.float32)
    feats = tr.attach(lambda m, t: flow.time_features(t), inputs={"t": (3, 1)}).run(t=t).output
    k = np.pi * np.arange(1, flow.FREQS + 1)
    np.testing.assert_allclose(feats, np.concatenate([np.sin(t * k), np.cos(t * k)], 1), atol=1e-5)
    # flow_loss: the velocity's squared error against x1 - x0 at x_t = (1 - t) x0 + t x1
    rng = np.random.default_rng(0)
    x0, x1 = (rng.normal(size=(4, 1, 8, 8)).astype(np.float32) for _ in range(2))
    tt = rng.uniform(size=(4, 1)).astype(np.float32)
    shape = {"x0": (4, 1, 8, 8), "x1": (4, 1, 8, 8), "t": (4, 1)}
    got = tr.attach(flow.flow_loss, inputs=shape).run(x0=x0, x1=x1, t=tt).output
    xt = (1 - tt[:, :, None, None]) * x0 + tt[:, :, None, None] * x1
    v = tr.attach(flow.forward, inputs={"x": (4, 1, 8, 8), "t": (4, 1)}).run(x=xt, t=tt).output
    assert float(got) == pytest.approx(float(((v - (x1 - x0)) ** 2).mean()), rel=1e-5)


def test_the_velocity_depends_on_time():
    tr = samples.compile("flow", backend="reference", seed=0)
    run = tr.attach(flow.forward, inputs={"x": (2, 1, 8, 8), "t": (2, 1)})
    x = np.zeros((2, 1, 8, 8), np.float32)
    out = run.run(x=x, t=np.array([[0.1], [0.9]], np.float32)).output
    assert not np.allclose(out[0], out[1])


def test_euler_follows_a_straight_path_exactly():
    # the velocity of the straight path from the noise to `target`: (target - x) / (1 - t)
    target = [((i * 7) % 17) / 8.0 - 1.0 for i in range(N * 64)]

    def straight(feeds):
        t = feeds["t"]
        return [(y - x) / (1.0 - t[i // 64]) for i, (x, y) in enumerate(zip(feeds["x"], target))]

    want = flow.images_of(target)
    for steps in (1, 3, 16):
        got = flow.generate(straight, steps=steps)
        assert np.allclose(got, want, atol=1e-5), steps
    frames = list(flow.euler(straight, steps=4))
    assert len(frames) == 4 and np.allclose(frames[-1], target, atol=1e-5)
    assert all(0.0 <= p <= 1.0 for img in want for p in img) and len(want) == N


def test_bad_arguments_are_named():
    zero = lambda feeds: [0.0] * (N * 64)  # noqa: E731
    for bad in (0, -1, 1.5, True, 1001):
        with pytest.raises(ValueError, match="steps must be"):
            flow.generate(zero, steps=bad)
    with pytest.raises(ValueError, match="noise has 3 values"):
        flow.generate(zero, noise=[0.0, 1.0, 2.0])
    with pytest.raises(ValueError, match="finite"):
        flow.generate(zero, noise=[float("nan")] * (N * 64))
    with pytest.raises(ValueError, match="returned 5 values"):
        flow.generate(lambda feeds: [0.0] * 5)
    with pytest.raises(ValueError, match="returned 5 values"):
        flow.heldout_loss(lambda feeds: [0.0] * 5)
    with pytest.raises(ValueError, match="image 0 has 3 pixels"):
        flow.nearest([[0.0] * 3])
    with pytest.raises(ValueError, match="no images"):
        flow.nn_distance_ratio([])


def test_data_noise_and_heldout_problem():
    b = flow.batch(3, 1)
    assert b == flow.batch(3, 1) and b != flow.batch(4, 1)
    x = np.asarray(b["x"])
    assert x.shape == (flow.BATCH * 64,) and x.min() >= -1 and x.max() <= 1 and (x == -1).mean() > 0.3
    train = {tuple(flow.to_model(digits.image(i))) for i in digits.TRAIN_INDICES}
    assert all(tuple(float(v) for v in x[k * 64 : (k + 1) * 64]) in train for k in range(flow.BATCH))
    assert flow.eval_noise() == flow.eval_noise() and flow.eval_noise() != flow.eval_noise(seed=5)
    z = np.asarray(flow.eval_noise(2000))
    assert abs(z.mean()) < 0.02 and abs(z.std() - 1) < 0.02
    x0, x1, t = flow.heldout()
    assert sorted(t) == pytest.approx([(i + 0.5) / digits.N_TEST for i in range(digits.N_TEST)])
    assert x1 == flow.to_model(digits.images(digits.TEST_INDICES))

    def oracle(feeds):  # knows x0 and x1: the exact target velocity
        return [b - a for a, b in zip(x0, x1)]

    assert flow.heldout_loss(oracle) == 0.0
    xt = flow.heldout_inputs()["x"]
    assert xt[64 * 5 + 9] == pytest.approx((1 - t[5]) * x0[64 * 5 + 9] + t[5] * x1[64 * 5 + 9], abs=1e-6)


def test_the_gaussian_baseline_is_the_best_per_pixel_linear_velocity():
    # on Gaussian data the formula equals least squares fitted on samples
    r = random.Random(0)
    mean, var, t = 0.3, 0.5, 0.6
    x0 = [r.gauss(0, 1) for _ in range(40000)]
    x1 = [r.gauss(mean, math.sqrt(var)) for _ in range(40000)]
    xt = np.array([(1 - t) * a + t * b for a, b in zip(x0, x1)])
    u = np.array([b - a for a, b in zip(x0, x1)])
    slope, intercept = np.polyfit(xt, u, 1)
    for x in (-1.0, 0.0, 0.8):
        assert flow.gaussian_velocity(x, t, mean, var) == pytest.approx(slope * x + intercept, abs=0.02)
    # the held-out baseline: near the expectation over uniform t of the per-pixel formula
    m, v = flow.pixel_moments()
    assert len(m) == 64 and min(v) >= 0 and m[0] == pytest.approx(-1.0, abs=0.01)  # a corner is blank
    expected = np.mean(
        [
            (v[p] + 1) - (s * v[p] - (1 - s)) ** 2 / ((1 - s) ** 2 + s * s * v[p])
            for p in range(64)
            for s in np.linspace(0.0005, 0.9995, 400)
        ]
    )
    assert flow.gaussian_loss() == pytest.approx(expected, rel=0.05)
    assert samples.success_bound(flow) == ("below", pytest.approx(flow.gaussian_loss() - 0.15))


def test_nearest_images_and_the_distance_ratio():
    some = [digits.TRAIN_INDICES[k] for k in (0, 5, 700)]
    near = flow.nearest([digits.image(i) for i in some])
    assert [d for d, _ in near] == [0.0, 0.0, 0.0]
    assert [digits.TRAIN_INDICES[j] for _, j in near] == some
    assert flow.nearest_labels([digits.image(i) for i in some]) == digits.labels(some)
    assert 0.5 < flow.reference_distance() < 3.0
    noise = [[random.Random(k).random() for _ in range(64)] for k in range(20)]
    assert flow.nn_distance_ratio(noise) > 2.0  # noise is far from every digit
    tests = [digits.image(i) for i in digits.TEST_INDICES[:40]]
    assert 0.7 < flow.nn_distance_ratio(tests) < 1.3


def test_flow_reaches_success_on_the_reference_backend(tmp_path):
    _, tr = train_to_success("flow", 50, tmp_path, trained=True)
    sampler = tr.attach(flow.forward, inputs=flow.SAMPLE_INPUTS)
    images = flow.generate(lambda f: sampler.run(**f).output)
    ratio, labels = flow.nn_distance_ratio(images), flow.nearest_labels(images)
    print(f"flow: samples' nearest-image ratio {ratio:.2f}, nearest digits {sorted(set(labels))}")
    # the samples look like digits of many kinds, not noise and not one digit
    assert ratio < 2.2 and len(set(labels)) >= 8, (ratio, labels)


def test_everything_the_page_runs_works_without_numpy():
    from test_no_numpy import run_without_numpy  # tests/ is on sys.path under pytest

    out = run_without_numpy("""
        from tgweb.compile import build_training_graph
        from tgweb.lower import lower
        from tgweb.trace import trace
        import tgweb as tg
        from tgweb.samples import flow
        opt, clip = tg.optim.from_spec(flow.OPTIMIZER)
        lower(build_training_graph(flow.Model(), flow.loss_fn, flow.INPUTS, opt, clip))
        trace(flow.forward, flow.Model(), flow.SAMPLE_INPUTS)
        assert len(flow.batch(0)["x"]) == flow.BATCH * 64 == 32 * 64
        zero = lambda feeds: [0.0] * len(feeds["x"])
        images = flow.generate(zero, steps=2)
        assert len(images) == flow.SAMPLES_N and len(flow.nearest_labels(images[:3])) == 3
        print(round(flow.heldout_loss(zero), 4), round(flow.gaussian_loss(), 4))
    """)
    loss, base = map(float, out.split())
    assert loss > base > 0.5
