"""flow: flow matching (a rectified flow) generates the 8x8 handwritten digits of `digits`.

Images (the digits sample's training images, pixels scaled from [0, 1] to [-1, 1]) are
x1; noise x0 ~ N(0, I) of the same shape. A training step draws x0 and a time t ~ U[0, 1)
per image in the graph (tgweb.randn / tgweb.rand: new numbers every step from the
trainer's per-step seed) and regresses the velocity of the straight path between them:

    x_t = (1 - t) x0 + t x1,    loss = mean (v(x_t, t) - (x1 - x0))^2.

The velocity net v: t's sinusoidal features (sin and cos of k pi t, k = 1..8) through
Linear 16->C and SiLU give a time embedding; each of three 3x3 convolutions (1->C, C->C,
C->C, padding 1, C = 16) has the embedding, through a Linear C->C of its own, added to
its output channels before a SiLU; a last 3x3 convolution C->1 gives the velocity.

Sampling integrates dx/dt = v(x, t) from noise at t = 0 to t = 1 with EULER_STEPS = 16
Euler steps (`generate`), and maps the result back to pixels in [0, 1] (clamped).

Metric (lower is better): the flow-matching loss on a fixed held-out problem
(`heldout_loss`): the 359 test images with fixed noise and one fixed time each. Its
baseline (`gaussian_loss`, about 0.725) is the best velocity that knows each pixel's
mean and variance (from the training images) but nothing of how pixels go together:
the per-pixel linear regression of x1 - x0 on x_t. Success: held-out loss below that
baseline by SUCCESS["margin"] = 0.15 (about 0.575) within 2,000 Adam steps of batch 32;
typically reached in 600-700 steps (about 0.546 after 2,000).

The view also shows how close samples come to real digits (`nn_distance_ratio`: the
mean distance from a sample to its nearest training image over the same mean for the
real test images; noise scores about 3.7, trained models 1.6-1.8) and the digit of each
sample's nearest training image (`nearest_labels`).
"""

from __future__ import annotations

import array
import functools
import math
import random

from .. import nn, ops
from . import digits
from ._util import flatten, make_rng
from .digits import N_TEST, N_TRAIN, PIXELS, SIDE, TEST_INDICES, TRAIN_INDICES

BATCH = 32  # half of digits': a step costs half as much in the browser, success comes ~20 % later
CHANNELS = 16
FREQS = 8  # sinusoidal time features: sin and cos of k pi t, k = 1..FREQS
EULER_STEPS = 16
SAMPLES_N = 64  # samples generated for the metric (one inference batch)
STEPS = 2000
INPUTS = {"x": (BATCH, 1, SIDE, SIDE)}
EVAL_INPUTS = {"x": (N_TEST, 1, SIDE, SIDE), "t": (N_TEST, 1)}
SAMPLE_INPUTS = {"x": (SAMPLES_N, 1, SIDE, SIDE), "t": (SAMPLES_N, 1)}
OPTIMIZER = {
    "name": "adam",
    "lr": 6e-3,
    "betas": (0.9, 0.999),
    "eps": 1e-8,
    "schedule": None,
    "weight_decay": 0.0,
    "clip": 1.0,
}
SUCCESS = {"metric": "heldout_loss", "below_baseline": "gaussian_loss", "margin": 0.15, "within_steps": STEPS}


def time_features(t):
    """[n, 2 * FREQS]: sin(k pi t) and cos(k pi t), k = 1..FREQS, for t [n, 1]."""
    a = t * ops.arange(math.pi, math.pi * (FREQS + 0.5), math.pi)  # [n, 1] * [FREQS] -> [n, FREQS]
    return ops.concat([ops.sin(a), ops.cos(a)], axis=1)


class Model(nn.Module):
    """The velocity net v(x_t, t) for x_t [n, 1, 8, 8] and t [n, 1]."""

    def __init__(self, channels: int = CHANNELS) -> None:
        c = channels
        self.time = nn.Linear(2 * FREQS, c)
        self.conv1 = nn.Conv2d(1, c, 3, padding=1)
        self.conv2 = nn.Conv2d(c, c, 3, padding=1)
        self.conv3 = nn.Conv2d(c, c, 3, padding=1)
        self.out = nn.Conv2d(c, 1, 3, padding=1)
        self.t1, self.t2, self.t3 = nn.Linear(c, c), nn.Linear(c, c), nn.Linear(c, c)
        self.channels = c

    def forward(self, x, t):
        n, c = x.shape[0], self.channels
        emb = ops.silu(self.time(time_features(t)))  # [n, c]

        def shift(lin):  # the time embedding as a per-channel bias [n, c, 1, 1]
            return ops.reshape(lin(emb), (n, c, 1, 1))

        h = ops.silu(self.conv1(x) + shift(self.t1))
        h = ops.silu(self.conv2(h) + shift(self.t2))
        h = ops.silu(self.conv3(h) + shift(self.t3))
        return self.out(h)


def forward(model: Model, x, t):
    """The velocity [n, 1, 8, 8] at x_t [n, 1, 8, 8] and times t [n, 1]."""
    return model(x, t)


def flow_loss(model: Model, x0, x1, t):
    """Mean squared error between v(x_t, t) and x1 - x0, x_t = (1 - t) x0 + t x1."""
    tt = ops.reshape(t, (t.shape[0], 1, 1, 1))
    xt = (1.0 - tt) * x0 + tt * x1
    return ops.mean((model(xt, t) - (x1 - x0)) ** 2)


def loss_fn(model: Model, x):
    """flow_loss with x0 ~ N(0, I) and t ~ U[0, 1) drawn in the graph; x in [-1, 1]."""
    n = x.shape[0]
    return flow_loss(model, ops.randn(x.shape), x, ops.rand((n, 1)))


# ---------------------------------------------------------------- data


def to_model(pixels) -> list[float]:
    """Pixels in [0, 1] -> the model's [-1, 1]."""
    return [2.0 * p - 1.0 for p in pixels]


def to_pixels(values) -> list[float]:
    """The model's values -> pixels, clamped to [0, 1]."""
    return [min(1.0, max(0.0, 0.5 * (v + 1.0))) for v in values]


def batch(step: int, rng=0) -> dict[str, array.array]:
    """BATCH training images drawn uniformly (with replacement), scaled to [-1, 1]: x flat
    f32 [32 * 64]. (Noise and times are drawn in the graph.)"""
    r = make_rng(step, rng)
    idx = [TRAIN_INDICES[r.randrange(N_TRAIN)] for _ in range(BATCH)]
    return {"x": array.array("f", to_model(digits.images(idx)))}


def eval_noise(n: int = SAMPLES_N, seed: int = 1234) -> array.array:
    """Fixed N(0, 1) starting points: flat f32 [n * 64], the same for a seed every time."""
    r = random.Random(seed)
    return array.array("f", [r.gauss(0.0, 1.0) for _ in range(n * PIXELS)])


@functools.lru_cache(maxsize=1)
def heldout() -> tuple[list[float], list[float], list[float]]:
    """The held-out flow-matching problem: x0 (fixed N(0, 1) noise), x1 (the 359 test
    images in [-1, 1]) and t (one time per image, evenly spread over [0, 1) in a fixed
    shuffled order), flat lists of N_TEST * 64, N_TEST * 64 and N_TEST values."""
    x1 = to_model(digits.images(TEST_INDICES))
    x0 = list(eval_noise(N_TEST, seed=99))
    t = [(i + 0.5) / N_TEST for i in range(N_TEST)]
    random.Random(7).shuffle(t)
    return x0, x1, t


def heldout_inputs() -> dict[str, array.array]:
    """EVAL_INPUTS for the held-out problem: x = x_t and t."""
    x0, x1, t = heldout()
    xt = [(1.0 - t[i // PIXELS]) * a + t[i // PIXELS] * b for i, (a, b) in enumerate(zip(x0, x1))]
    return {"x": array.array("f", xt), "t": array.array("f", t)}


def heldout_loss(velocity_fn) -> float:
    """The flow-matching loss (mean squared velocity error per pixel) on the held-out
    problem. velocity_fn(EVAL_INPUTS feeds) returns the velocity [359, 1, 8, 8] (any
    nesting or flat)."""
    x0, x1, _ = heldout()
    v = flatten(velocity_fn(heldout_inputs()))
    if len(v) != len(x0):
        raise ValueError(f"velocity_fn returned {len(v)} values, expected {len(x0)}")
    return sum((p - (b - a)) ** 2 for p, a, b in zip(v, x0, x1)) / len(v)


@functools.lru_cache(maxsize=1)
def pixel_moments() -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Each pixel's mean and variance over the training images, in [-1, 1] units."""
    px = to_model(digits.images(TRAIN_INDICES))
    mean = [sum(px[i * PIXELS + p] for i in range(N_TRAIN)) / N_TRAIN for p in range(PIXELS)]
    var = [sum((px[i * PIXELS + p] - mean[p]) ** 2 for i in range(N_TRAIN)) / N_TRAIN for p in range(PIXELS)]
    return tuple(mean), tuple(var)


def gaussian_velocity(xt: float, t: float, mean: float, var: float) -> float:
    """The best velocity for one pixel that knows only its mean and variance: the linear
    regression of x1 - x0 on x_t (exact when the pixel is Gaussian and independent)."""
    cov = t * var - (1.0 - t)  # Cov(x1 - x0, x_t)
    var_xt = (1.0 - t) ** 2 + t * t * var
    return mean + cov / var_xt * (xt - t * mean)


@functools.lru_cache(maxsize=1)
def gaussian_loss() -> float:
    """The baseline: heldout_loss of gaussian_velocity, a velocity that knows each
    pixel's mean and variance but nothing of how pixels go together (about 0.72)."""
    mean, var = pixel_moments()
    x0, x1, t = heldout()
    feeds = heldout_inputs()["x"]
    err = 0.0
    for i, (a, b, xt) in enumerate(zip(x0, x1, feeds)):
        p = i % PIXELS
        err += (gaussian_velocity(xt, t[i // PIXELS], mean[p], var[p]) - (b - a)) ** 2
    return err / len(x0)


# ---------------------------------------------------------------- sampling


def euler(velocity_fn, noise=None, steps: int = EULER_STEPS):
    """Euler integration of dx/dt = v(x, t) from x = noise at t = 0 to t = 1 in `steps`
    equal steps: yields x (a flat list, the model's [-1, 1] units) after each step.
    velocity_fn({"x": flat f32 [SAMPLES_N * 64], "t": flat f32 [SAMPLES_N]}) returns the
    velocity (any nesting or flat); noise: flat SAMPLES_N * 64 values (default
    eval_noise())."""
    if isinstance(steps, bool) or not isinstance(steps, int) or not 1 <= steps <= 1000:
        raise ValueError(f"steps must be an int from 1 to 1000, got {steps!r}")
    x = [float(v) for v in (eval_noise() if noise is None else noise)]
    if len(x) != SAMPLES_N * PIXELS:
        raise ValueError(f"noise has {len(x)} values, expected {SAMPLES_N * PIXELS} ({SAMPLES_N} images)")
    if not all(math.isfinite(v) for v in x):
        raise ValueError("noise must be finite")
    dt = 1.0 / steps
    for k in range(steps):
        t = array.array("f", [k * dt] * SAMPLES_N)
        v = flatten(velocity_fn({"x": array.array("f", x), "t": t}))
        if len(v) != len(x):
            raise ValueError(f"velocity_fn returned {len(v)} values, expected {len(x)}")
        x = [a + dt * b for a, b in zip(x, v)]
        yield x


def images_of(x) -> list[list[float]]:
    """Flat model values of SAMPLES_N images -> SAMPLES_N pixel lists in [0, 1]."""
    return [to_pixels(x[i * PIXELS : (i + 1) * PIXELS]) for i in range(len(x) // PIXELS)]


def generate(velocity_fn, noise=None, steps: int = EULER_STEPS) -> list[list[float]]:
    """SAMPLES_N samples as pixel lists (64 values in [0, 1] each, clamped): the end of
    euler(velocity_fn, noise, steps)."""
    *_, x = euler(velocity_fn, noise, steps)
    return images_of(x)


# ---------------------------------------------------------------- the metric


@functools.lru_cache(maxsize=1)
def _train_set() -> tuple[tuple[float, ...], ...]:
    px = digits.images(TRAIN_INDICES)
    return tuple(tuple(px[i * PIXELS : (i + 1) * PIXELS]) for i in range(N_TRAIN))


def nearest(images) -> list[tuple[float, int]]:
    """For each image (64 pixels in [0, 1]): (Euclidean distance to the nearest training
    image, the index into digits.TRAIN_INDICES of that image)."""
    train = _train_set()
    out = []
    for k, img in enumerate(images):
        img = [float(v) for v in img]
        if len(img) != PIXELS:
            raise ValueError(f"image {k} has {len(img)} pixels, expected {PIXELS}")
        best, arg = math.inf, -1
        for j, ref in enumerate(train):
            d = 0.0
            for a, b in zip(img, ref):
                d += (a - b) * (a - b)
                if d >= best:
                    break
            if d < best:
                best, arg = d, j
        out.append((math.sqrt(best), arg))
    return out


def nearest_labels(images) -> list[int]:
    """The digit of each image's nearest training image."""
    return digits.labels([TRAIN_INDICES[j] for _, j in nearest(images)])


@functools.lru_cache(maxsize=1)
def reference_distance() -> float:
    """The mean distance from a real test image to its nearest training image."""
    return sum(d for d, _ in nearest(digits.image(i) for i in TEST_INDICES)) / len(TEST_INDICES)


def nn_distance_ratio(images) -> float:
    """Mean nearest-training-image distance of images over reference_distance()."""
    images = list(images)
    if not images:
        raise ValueError("no images")
    return sum(d for d, _ in nearest(images)) / len(images) / reference_distance()


def metric(velocity_fn) -> float:
    """The held-out flow-matching loss (see heldout_loss); lower is better."""
    return heldout_loss(velocity_fn)


def threshold() -> float:
    """The held-out loss to stay below: gaussian_loss() - SUCCESS["margin"]."""
    return gaussian_loss() - SUCCESS["margin"]
