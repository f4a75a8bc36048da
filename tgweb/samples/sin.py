"""sin: an MLP (1 -> 64 -> 64 -> 1, ReLU) regresses y = sin x on [-pi, pi].

Success: MSE below 1e-3 on a fixed grid of 200 points within 1,000 Adam steps.
"""

from __future__ import annotations

import array
import math

from .. import nn, ops
from ._util import flatten, make_rng

BATCH = 256
STEPS = 1000
INPUTS = {"x": (BATCH, 1), "y": (BATCH, 1)}
GRID_SIZE = 200
EVAL_INPUTS = {"x": (GRID_SIZE, 1)}
# the fixed evaluation grid: 200 evenly spaced points from -pi to pi, inclusive
GRID = [-math.pi + 2 * math.pi * i / (GRID_SIZE - 1) for i in range(GRID_SIZE)]
OPTIMIZER = {
    "name": "adam",
    "lr": 5e-3,
    "betas": (0.9, 0.999),
    "eps": 1e-8,
    "schedule": None,
    "weight_decay": 0.0,
    "clip": None,
}
SUCCESS = {"metric": "mse", "below": 1e-3, "within_steps": STEPS}


class Model(nn.Module):
    def __init__(self, hidden: int = 64) -> None:
        self.net = nn.Sequential(
            nn.Linear(1, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, 1)
        )

    def forward(self, x):
        return self.net(x)


def forward(model: Model, x):
    """Predictions [n, 1] for inputs x [n, 1]."""
    return model(x)


def loss_fn(model: Model, x, y):
    return ops.mse_loss(model(x), y)


def batch(step: int, rng=0) -> dict[str, array.array]:
    """BATCH points x ~ U[-pi, pi] and y = sin x, as flat float arrays."""
    r = make_rng(step, rng)
    xs = [r.uniform(-math.pi, math.pi) for _ in range(BATCH)]
    return {"x": array.array("f", xs), "y": array.array("f", [math.sin(v) for v in xs])}


def grid() -> dict[str, array.array]:
    """The evaluation inputs (EVAL_INPUTS): the 200-point grid."""
    return {"x": array.array("f", GRID)}


def metric(predict) -> float:
    """Mean squared error against sin on GRID. predict(x) gets the grid as {"x": flat
    array of 200 floats} (shape EVAL_INPUTS) and returns 200 predictions (any nesting)."""
    pred = flatten(predict(grid()))
    if len(pred) != GRID_SIZE:
        raise ValueError(f"predict returned {len(pred)} values, expected {GRID_SIZE}")
    return sum((float(p) - math.sin(x)) ** 2 for p, x in zip(pred, GRID)) / GRID_SIZE
