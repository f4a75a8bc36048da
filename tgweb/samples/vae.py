"""vae: a variational autoencoder with a 2-D latent learns the 8x8 handwritten digits of
`digits` (the same images, pixels in [0, 1], and the same train/test split).

Encoder: Linear 64->128, ReLU, then two heads Linear 128->2: the mean mu and the log
variance of q(z|x), a diagonal Gaussian. Decoder: Linear 2->128, ReLU, Linear 128->64:
the logits of the pixels' Bernoulli means. A training step samples z = mu + sigma * eps
with eps drawn in the graph (tgweb.randn: new numbers every step from the trainer's
per-step seed), so the gradient flows through mu and sigma (the reparameterization).

Loss, per image and averaged over the batch (nats): the negative ELBO

    -ELBO(x) = sum_pixels BCE(decoder(z), x) + KL(q(z|x) || N(0, I)),
    KL = -1/2 sum_j (1 + log sigma_j^2 - mu_j^2 - sigma_j^2).

Metric: the test set's mean negative ELBO, estimated with one fixed draw of eps per
image (`test_noise`, from a seeded Python RNG), so that it is the same number every time
it is measured. The baseline is a model that ignores its input: the Bernoulli of the
training set's mean image, with z unused (KL 0), about 27.2 nats per test image
(`mean_image_nelbo`). Success: 2 nats below that baseline (about 25.2) within 2,000 Adam
steps of batch 64; typically reached in 500-800 steps. BCE against grey pixels cannot
reach 0: the pixels' own entropy, about 13.7 nats per test image (`pixel_entropy`), is
the floor of the reconstruction term.
"""

from __future__ import annotations

import array
import functools
import math
import random

from .. import nn, ops
from . import digits
from ._util import flatten, make_rng
from .digits import BATCH, N_TEST, N_TRAIN, PIXELS, TEST_INDICES, TRAIN_INDICES

LATENT = 2
HIDDEN = 128
STEPS = 2000
INPUTS = {"x": (BATCH, PIXELS)}
EVAL_INPUTS = {"x": (N_TEST, PIXELS), "eps": (N_TEST, LATENT)}
OPTIMIZER = {
    "name": "adam",
    "lr": 6e-3,
    "betas": (0.9, 0.999),
    "eps": 1e-8,
    "schedule": None,
    "weight_decay": 0.0,
    "clip": None,
}
SUCCESS = {
    "metric": "negative_elbo",
    "below_baseline": "mean_image_nelbo",
    "margin": 2.0,
    "within_steps": STEPS,
}


class Model(nn.Module):
    def __init__(self) -> None:
        self.enc = nn.Linear(PIXELS, HIDDEN)
        self.mu = nn.Linear(HIDDEN, LATENT)
        self.logvar = nn.Linear(HIDDEN, LATENT)
        self.dec1 = nn.Linear(LATENT, HIDDEN)
        self.dec2 = nn.Linear(HIDDEN, PIXELS)

    def encode(self, x):
        """(mu, log sigma^2), each [n, 2], for images x [n, 64]."""
        h = ops.relu(self.enc(x))
        return self.mu(h), self.logvar(h)

    def decode(self, z):
        """Pixel logits [n, 64] for latents z [n, 2]."""
        return self.dec2(ops.relu(self.dec1(z)))

    def forward(self, x, eps):
        """The negative ELBO of each image [n] with the noise eps [n, 2] (standard normal)."""
        mu, logvar = self.encode(x)
        z = mu + ops.exp(0.5 * logvar) * eps
        return negative_elbo(self.decode(z), x, mu, logvar)


def negative_elbo(logits, x, mu, logvar):
    """Per image [n]: the pixels' BCE with logits (softplus(l) - x l, summed) plus the KL
    divergence of N(mu, exp(logvar)) from N(0, I)."""
    bce = ops.sum(ops.softplus(logits) - x * logits, axis=-1)
    kl = -0.5 * ops.sum(1.0 + logvar - mu * mu - ops.exp(logvar), axis=-1)
    return bce + kl


def loss_fn(model: Model, x):
    """The batch's mean negative ELBO, z sampled in the graph (a new eps every step)."""
    mu, _ = model.encode(x)
    return ops.mean(model(x, ops.randn(mu.shape)))


def forward(model: Model, x, eps):
    """The negative ELBO of each image [n] for given noise eps [n, 2] (the metric's graph)."""
    return model(x, eps)


def reconstruct(model: Model, x):
    """Reconstructions [n, 64] in [0, 1]: the decoded posterior mean of each image x."""
    mu, _ = model.encode(x)
    return ops.sigmoid(model.decode(mu))


def decode(model: Model, z):
    """Images [n, 64] in [0, 1] decoded from latents z [n, 2]."""
    return ops.sigmoid(model.decode(z))


def encode(model: Model, x):
    """The posterior means [n, 2] of images x [n, 64]."""
    return model.encode(x)[0]


def batch(step: int, rng=0) -> dict[str, array.array]:
    """BATCH training images drawn uniformly (with replacement): x flat f32 [64 * 64]."""
    r = make_rng(step, rng)
    return {"x": digits.images([TRAIN_INDICES[r.randrange(N_TRAIN)] for _ in range(BATCH)])}


@functools.lru_cache(maxsize=1)
def test_noise() -> array.array:
    """The metric's fixed standard-normal noise: flat f32 [359 * 2], from random.Random(0)."""
    r = random.Random(0)
    return array.array("f", [r.gauss(0.0, 1.0) for _ in range(N_TEST * LATENT)])


def test_inputs() -> dict[str, array.array]:
    """The evaluation inputs (EVAL_INPUTS): the 359 test images and the fixed noise."""
    return {"x": digits.images(TEST_INDICES), "eps": test_noise()}


def metric(nelbo_fn) -> float:
    """The test set's mean negative ELBO (nats per image). nelbo_fn(test_inputs()) returns
    the negative ELBO of each of the 359 test images (any nesting or flat)."""
    vals = [float(v) for v in flatten(nelbo_fn(test_inputs()))]
    if len(vals) != N_TEST:
        raise ValueError(f"nelbo_fn returned {len(vals)} values, expected {N_TEST}")
    return sum(vals) / N_TEST


def _bernoulli_nll(p: float, x: float) -> float:
    p = min(max(p, 1e-6), 1.0 - 1e-6)
    return -(x * math.log(p) + (1.0 - x) * math.log(1.0 - p))


@functools.lru_cache(maxsize=1)
def mean_image_nelbo() -> float:
    """The baseline: the mean negative ELBO of the test images under a model that ignores
    its input, the pixels' Bernoulli at the training set's mean image (KL 0)."""
    n = len(TRAIN_INDICES)
    sums = [0.0] * PIXELS
    for i in TRAIN_INDICES:
        for k, v in enumerate(digits.image(i)):
            sums[k] += v
    mean = [v / n for v in sums]
    total = sum(_bernoulli_nll(m, v) for i in TEST_INDICES for m, v in zip(mean, digits.image(i)))
    return total / N_TEST


def pixel_entropy(indices=TEST_INDICES) -> float:
    """The mean over images of sum_pixels H(p) for p the pixel values: the least the
    reconstruction term (BCE against the same grey pixels) can be."""
    total = 0.0
    for i in indices:
        for p in digits.image(i):
            if 0.0 < p < 1.0:
                total -= p * math.log(p) + (1.0 - p) * math.log(1.0 - p)
    return total / len(indices)


def normal_quantile(p: float) -> float:
    """The standard normal's quantile at p in (0, 1) (bisection on erf; plain Python)."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"a quantile needs 0 < p < 1, got {p!r}")
    lo, hi = -10.0, 10.0
    for _ in range(80):
        mid = (lo + hi) / 2
        if 0.5 * (1.0 + math.erf(mid / math.sqrt(2.0))) < p:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def latent_grid(side: int = 8, spread: float = 0.95) -> list[list[float]]:
    """side * side latent points, row-major (top row first, z2 falling down the rows, z1
    rising along them), at the normal quantiles of `side` evenly spaced probabilities
    spanning the central `spread` of N(0, 1): where the prior puts its mass."""
    if not (isinstance(side, int) and side >= 2):
        raise ValueError(f"side must be an int >= 2, got {side!r}")
    if not 0.0 < spread < 1.0:
        raise ValueError(f"spread must be in (0, 1), got {spread!r}")
    lo = (1.0 - spread) / 2
    q = [normal_quantile(lo + spread * k / (side - 1)) for k in range(side)]
    return [[q[c], q[side - 1 - r]] for r in range(side) for c in range(side)]
