"""kan: a Kolmogorov-Arnold network (1 -> 4 -> 1) fits y = sin(pi x) on [-1, 1].

Every edge of a KAN carries a learned function of one variable, and a node sums its
incoming edges. Here each edge function is

    phi(x) = w_b * silu(x) + w_s * sum_k c_k B_k(x)

with B_k the cubic B-splines of a uniform grid of G intervals on [lo, hi] (G + 3 of
them, on knots extended three intervals past each end). The bases are computed in the
graph from x with elementwise ops only (see `bspline_bases`). Outside [lo, hi] the
spline term is held at its value at the nearest end (x is clamped) and the SiLU term
carries the slope, so a second-layer input that leaves its grid stays well defined.

The first layer's grid spans [-1, 1], the inputs' range; the second layer's spans
[-2, 2], room for the hidden values the first layer learns to produce.

Success: MSE below 1e-5 on a fixed grid of 201 points within 1,000 Adam steps (batch
128, lr 0.02 with a cosine decay). It is typically reached in 200-300 steps.
"""

from __future__ import annotations

import array
import math

from .. import nn, ops
from ._util import flatten, make_rng

WIDTH = 4  # hidden nodes: 4 edges into the hidden layer, 4 out of it
GRID = 8  # spline intervals per edge
ORDER = 3  # cubic
RANGES = ((-1.0, 1.0), (-2.0, 2.0))  # each layer's spline grid
BATCH = 128
STEPS = 1000
INPUTS = {"x": (BATCH, 1), "y": (BATCH, 1)}
GRID_SIZE = 201
EVAL_INPUTS = {"x": (GRID_SIZE, 1)}
# the fixed evaluation grid: 201 evenly spaced points from -1 to 1, inclusive
EVAL_GRID = [-1.0 + 2.0 * i / (GRID_SIZE - 1) for i in range(GRID_SIZE)]
OPTIMIZER = {
    "name": "adam",
    "lr": 2e-2,
    "betas": (0.9, 0.999),
    "eps": 1e-8,
    "schedule": {"kind": "cosine", "start": 2e-2, "steps": STEPS},
    "weight_decay": 0.0,
    "clip": None,
}
SUCCESS = {"metric": "mse", "below": 1e-5, "within_steps": STEPS}


def target(x: float) -> float:
    """The function the network learns: sin(pi x)."""
    return math.sin(math.pi * x)


def n_bases(grid: int = GRID) -> int:
    """How many cubic B-splines a grid of `grid` intervals has: grid + 3."""
    return grid + ORDER


def cardinal_cubic(u: float) -> float:
    """The cardinal cubic B-spline N(u), nonzero on (0, 4), peak 2/3 at u = 2 (plain
    Python; the graph computes the same with elementwise ops)."""
    s = abs(u - 2.0)
    return (max(0.0, 2.0 - s) ** 3 - 4.0 * max(0.0, 1.0 - s) ** 3) / 6.0


def bspline_bases(x, lo: float, hi: float, grid: int = GRID):
    """The G + 3 cubic B-spline bases of a uniform grid on [lo, hi] at x (a tensor of
    any shape [...]): a tensor [..., G + 3]. x is clamped to [lo, hi] first.

    B_k(x) = N((x - t_k) / h) with knots t_k = lo + (k - 3) h, h = (hi - lo) / G, and
    N the cardinal cubic B-spline, written without branches as
    N(u) = (relu(2 - |u - 2|)^3 - 4 relu(1 - |u - 2|)^3) / 6: its two pieces on
    |u - 2| < 1 and 1 <= |u - 2| < 2 are the difference of two truncated cubics."""
    h = (hi - lo) / grid
    xc = ops.clamp(x, lo, hi)
    # u_k = (x - t_k) / h - 2 = (x - lo) / h + 1 - k: the distance from basis k's centre
    k = ops.arange(0, n_bases(grid), dtype="f32")
    s = ops.abs(ops.unsqueeze((xc - lo) * (1.0 / h) + 1.0, -1) - k)
    outer = ops.relu(2.0 - s)
    inner = ops.relu(1.0 - s)
    return (outer * outer * outer - 4.0 * (inner * inner * inner)) * (1.0 / 6.0)


class KANLayer(nn.Module):
    """in_features -> out_features, one learned function per (input, output) edge;
    output j = sum over inputs i of phi_ij(x_i).

    Parameters: base [in, out] (w_b, the SiLU residual's weight), scale [in, 1, out]
    (w_s), coef [in, G + 3, out] (the spline coefficients c_k of each edge)."""

    def __init__(
        self, in_features: int, out_features: int, lo: float = -1.0, hi: float = 1.0, grid: int = GRID
    ) -> None:
        if not (isinstance(grid, int) and grid >= 1):
            raise ValueError(f"grid must be a positive int, got {grid!r}")
        if not hi > lo:
            raise ValueError(f"the grid range must have lo < hi, got [{lo}, {hi}]")
        self.in_features, self.out_features = in_features, out_features
        self.lo, self.hi, self.grid = float(lo), float(hi), grid
        bound = 1.0 / math.sqrt(in_features)
        self.base = self.param((in_features, out_features), nn.init.uniform(-bound, bound))
        self.scale = self.param((in_features, 1, out_features), nn.init.constant(1.0))
        self.coef = self.param((in_features, n_bases(grid), out_features), nn.init.normal(0.1))

    def forward(self, x):
        n = x.shape[0]
        b = bspline_bases(x, self.lo, self.hi, self.grid)  # [n, in, K]
        k = n_bases(self.grid)
        spline = b.reshape(n, self.in_features * k) @ (self.scale * self.coef).reshape(
            self.in_features * k, self.out_features
        )
        return ops.silu(x) @ self.base + spline


class Model(nn.Module):
    def __init__(self, width: int = WIDTH, grid: int = GRID) -> None:
        self.layers = nn.ModuleList(
            [
                KANLayer(1, width, *RANGES[0], grid=grid),
                KANLayer(width, 1, *RANGES[1], grid=grid),
            ]
        )

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def forward(model: Model, x):
    """Predictions [n, 1] for inputs x [n, 1]."""
    return model(x)


def loss_fn(model: Model, x, y):
    return ops.mse_loss(model(x), y)


def batch(step: int, rng=0) -> dict[str, array.array]:
    """BATCH points x ~ U[-1, 1] and y = sin(pi x), as flat float arrays."""
    r = make_rng(step, rng)
    xs = [r.uniform(-1.0, 1.0) for _ in range(BATCH)]
    return {"x": array.array("f", xs), "y": array.array("f", [target(v) for v in xs])}


def grid() -> dict[str, array.array]:
    """The evaluation inputs (EVAL_INPUTS): the 201-point grid."""
    return {"x": array.array("f", EVAL_GRID)}


def metric(predict) -> float:
    """Mean squared error against sin(pi x) on EVAL_GRID. predict(x) gets the grid as
    {"x": flat array of 201 floats} (shape EVAL_INPUTS) and returns 201 predictions."""
    pred = flatten(predict(grid()))
    if len(pred) != GRID_SIZE:
        raise ValueError(f"predict returned {len(pred)} values, expected {GRID_SIZE}")
    return sum((float(p) - target(x)) ** 2 for p, x in zip(pred, EVAL_GRID)) / GRID_SIZE


# ---------------------------------------------------------------- edges, in plain Python


def _silu(v: float) -> float:
    return v / (1.0 + math.exp(-v)) if v >= -60.0 else 0.0


class Edges:
    """The learned edge functions, evaluated in plain Python from a trainer's parameters
    (trainer.params(): name -> array, nested lists or flat lists) for the page's plots.

    edge(layer, i, j, x) is phi_ij of layer `layer` (0 or 1) at x; forward(x) the
    network's output, the same as the graph's up to float32 rounding."""

    def __init__(self, params: dict, width: int = WIDTH, grid: int = GRID) -> None:
        self.width, self.grid, self.k = width, grid, n_bases(grid)
        self.shapes = ((1, width), (width, 1))
        self.layers = []
        for li, (fin, fout) in enumerate(self.shapes):
            p = {}
            for part, size in (("base", fin * fout), ("scale", fin * fout), ("coef", fin * self.k * fout)):
                name = f"layers.{li}.{part}"
                if name not in params:
                    raise KeyError(f"no parameter {name!r} (got {sorted(params)})")
                flat = [float(v) for v in flatten(params[name])]
                if len(flat) != size:
                    raise ValueError(f"{name} has {len(flat)} values, expected {size}")
                p[part] = flat
            self.layers.append(p)

    def edge(self, layer: int, i: int, j: int, x: float) -> float:
        """phi_ij(x) of a layer: input i, output j."""
        fin, fout = self.shapes[layer]
        if not (0 <= i < fin and 0 <= j < fout):
            raise IndexError(f"layer {layer} has edges ({fin} inputs, {fout} outputs), not ({i}, {j})")
        p, (lo, hi) = self.layers[layer], RANGES[layer]
        h = (hi - lo) / self.grid
        xc = min(hi, max(lo, x))
        u = (xc - lo) / h + 3.0  # u - k is basis k's argument to N
        first = max(0, int(math.floor(u)) - 3)  # only 4 bases are nonzero at x
        spline = sum(
            p["coef"][(i * self.k + k) * fout + j] * cardinal_cubic(u - k)
            for k in range(first, min(self.k, first + 4))
        )
        return p["base"][i * fout + j] * _silu(x) + p["scale"][i * fout + j] * spline

    def hidden(self, x: float) -> list[float]:
        """The hidden layer's values at input x."""
        return [self.edge(0, 0, j, x) for j in range(self.width)]

    def forward(self, x: float) -> float:
        return sum(self.edge(1, i, 0, v) for i, v in enumerate(self.hidden(x)))

    def curves(self, points: int = 41) -> list[dict]:
        """Every edge as {"layer", "i", "j", "x": [...], "y": [...]}: the first layer's on
        [-1, 1], the second layer's on the range its input (hidden node i) covers as x
        runs over [-1, 1] (widened to at least 0.2)."""
        if points < 2:
            raise ValueError(f"points must be at least 2, got {points}")
        xs = [-1.0 + 2.0 * t / (points - 1) for t in range(points)]
        out = [
            {"layer": 0, "i": 0, "j": j, "x": xs, "y": [self.edge(0, 0, j, x) for x in xs]}
            for j in range(self.width)
        ]
        hid = [self.hidden(x) for x in xs]
        for i in range(self.width):
            lo, hi = min(h[i] for h in hid), max(h[i] for h in hid)
            mid, half = (lo + hi) / 2, max(0.1, (hi - lo) / 2)
            hs = [mid - half + 2 * half * t / (points - 1) for t in range(points)]
            out.append({"layer": 1, "i": i, "j": 0, "x": hs, "y": [self.edge(1, i, 0, v) for v in hs]})
        return out
