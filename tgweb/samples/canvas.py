"""canvas: an MLP with dropout classifies the 8x8 handwritten digits of `digits` (the
same images, labels and train/test split), and reads digits people draw on the page.

Model: Linear 64->128, ReLU, Dropout(0.2); Linear 128->64, ReLU, Dropout(0.2);
Linear 64->10. Dropout is active in training steps only (`loss_fn`); `forward`, the
inference graph, runs without it. AdamW (lr 2e-3, decoupled weight decay 1e-2 on the
weights, not the biases), gradients clipped to a global norm of 1, batch 64.

Success: >= 97 % accuracy on the 359 test images within 1,500 steps (typically
reached in 300-600 steps, a few seconds on the reference backend).

A drawing becomes an input as the data set's images were made: the UCI optdigits
bitmaps are 32x32 binary images with the digit scaled to the full height (its aspect
kept) and centred, and each 8x8 pixel counts the ink in a 4x4 block (0..16), which
`digits` scales to [0, 1]. `rasterize` does the same to pen strokes given as points in
any coordinates (e.g. canvas pixels).
"""

from __future__ import annotations

import array
import math

from .. import nn, ops
from . import digits
from ._util import flatten, make_rng
from .digits import BATCH, CLASSES, EVAL_BATCH, N_TRAIN, PIXELS, TEST_INDICES, TRAIN_INDICES

HIDDEN = (128, 64)
DROPOUT = 0.2
STEPS = 1500
INPUTS = {"x": (BATCH, PIXELS), "y": ((BATCH,), "i32")}
EVAL_INPUTS = {"x": (EVAL_BATCH, PIXELS)}
DRAW_INPUTS = {"x": (1, PIXELS)}  # one drawn digit, for the page's live predictions
OPTIMIZER = {
    "name": "adamw",
    "lr": 2e-3,
    "betas": (0.9, 0.999),
    "eps": 1e-8,
    "schedule": None,
    "weight_decay": 0.01,
    "decay_exclude": "biases and norms",
    "clip": 1.0,
}
SUCCESS = {"metric": "accuracy", "at_least": 0.97, "within_steps": STEPS}

BITMAP = 32  # the side of optdigits' binary bitmaps
BLOCK = BITMAP // digits.SIDE  # 4: each 8x8 pixel counts a 4x4 block of bits
PEN = 2.2  # the pen's radius in bitmap pixels: strokes about as thick as the data set's


class Model(nn.Module):
    def __init__(self) -> None:
        self.fc1 = nn.Linear(PIXELS, HIDDEN[0])
        self.drop1 = nn.Dropout(DROPOUT)
        self.fc2 = nn.Linear(HIDDEN[0], HIDDEN[1])
        self.drop2 = nn.Dropout(DROPOUT)
        self.fc3 = nn.Linear(HIDDEN[1], CLASSES)

    def forward(self, x, training: bool = True):
        """Logits [n, 10] for images x [n, 64]; dropout only while training."""
        self.drop1.train(training)
        self.drop2.train(training)
        h = self.drop1(ops.relu(self.fc1(x)))
        h = self.drop2(ops.relu(self.fc2(h)))
        return self.fc3(h)


def forward(model: Model, x):
    """Logits [n, 10], without dropout (inference)."""
    return model(x, training=False)


def probabilities(model: Model, x):
    """Softmax probabilities [n, 10], without dropout (the page's live predictions)."""
    return ops.softmax(model(x, training=False), axis=-1)


def loss_fn(model: Model, x, y):
    return ops.cross_entropy(model(x, training=True), y)


def batch(step: int, rng=0) -> dict[str, array.array]:
    """BATCH training images drawn uniformly (with replacement): x flat f32 [64 * 64]
    in [0, 1], y flat i32 [64]."""
    r = make_rng(step, rng)
    idx = [TRAIN_INDICES[r.randrange(N_TRAIN)] for _ in range(BATCH)]
    return {"x": digits.images(idx), "y": array.array("i", digits.labels(idx))}


def test_inputs() -> dict[str, array.array]:
    """The evaluation inputs (EVAL_INPUTS): the 359 test images."""
    return {"x": digits.images(TEST_INDICES)}


def metric(logits_fn, indices=TEST_INDICES) -> float:
    """Accuracy on the test images (or on indices). logits_fn({"x": flat f32 array of
    EVAL_BATCH images}) returns logits [EVAL_BATCH, 10] (see digits.predictions)."""
    return digits.metric(logits_fn, indices)


def softmax(row) -> list[float]:
    """Probabilities from one row of logits (plain Python, stable)."""
    row = [float(v) for v in flatten(row)]
    if not row:
        raise ValueError("softmax of an empty row")
    top = max(row)
    e = [math.exp(v - top) for v in row]
    s = sum(e)
    return [v / s for v in e]


def _points(strokes) -> list[list[tuple[float, float]]]:
    if not isinstance(strokes, (list, tuple)):
        raise TypeError(
            f"strokes must be a list of strokes (lists of [x, y] points), got {type(strokes).__name__}"
        )
    out = []
    for i, stroke in enumerate(strokes):
        if not isinstance(stroke, (list, tuple)):
            raise TypeError(f"stroke {i} must be a list of [x, y] points, got {type(stroke).__name__}")
        pts = []
        for j, p in enumerate(stroke):
            if not isinstance(p, (list, tuple)) or len(p) != 2:
                raise ValueError(f"stroke {i}, point {j}: expected [x, y], got {p!r}")
            x, y = float(p[0]), float(p[1])
            if not (math.isfinite(x) and math.isfinite(y)):
                raise ValueError(f"stroke {i}, point {j}: coordinates must be finite, got {p!r}")
            pts.append((x, y))
        if pts:
            out.append(pts)
    return out


def _segment_distance(px: float, py: float, a: tuple[float, float], b: tuple[float, float]) -> float:
    dx, dy = b[0] - a[0], b[1] - a[1]
    n = dx * dx + dy * dy
    t = 0.0 if n == 0 else max(0.0, min(1.0, ((px - a[0]) * dx + (py - a[1]) * dy) / n))
    return math.hypot(px - a[0] - t * dx, py - a[1] - t * dy)


def bitmap(strokes, pen: float = PEN) -> list[list[int]]:
    """The 32x32 binary bitmap (rows of 0/1) of pen strokes, normalised as optdigits'
    bitmaps are: scaled (aspect kept) so that the ink spans the full height, or the full
    width where the drawing is wider than tall, and centred. strokes: a list of strokes,
    each a list of [x, y] points (y down, any units); a one-point stroke is a dot."""
    if not (isinstance(pen, (int, float)) and 0 < pen < BITMAP / 4):
        raise ValueError(f"pen radius must be in (0, {BITMAP / 4}) bitmap pixels, got {pen!r}")
    pts = _points(strokes)
    grid = [[0] * BITMAP for _ in range(BITMAP)]
    if not pts:
        return grid
    xs = [x for s in pts for x, _ in s]
    ys = [y for s in pts for _, y in s]
    x0, x1, y0, y1 = min(xs), max(xs), min(ys), max(ys)
    span = max(x1 - x0, y1 - y0)
    scale = (BITMAP - 2 * pen) / span if span > 0 else 0.0
    cx, cy = (x0 + x1) / 2, (y0 + y1) / 2
    half = BITMAP / 2
    for s in pts:
        q = [(half + (x - cx) * scale, half + (y - cy) * scale) for x, y in s]
        segs = list(zip(q, q[1:])) or [(q[0], q[0])]
        for a, b in segs:
            lo_c = max(0, int(math.floor(min(a[0], b[0]) - pen)))
            hi_c = min(BITMAP - 1, int(math.ceil(max(a[0], b[0]) + pen)))
            lo_r = max(0, int(math.floor(min(a[1], b[1]) - pen)))
            hi_r = min(BITMAP - 1, int(math.ceil(max(a[1], b[1]) + pen)))
            for r in range(lo_r, hi_r + 1):
                row = grid[r]
                for c in range(lo_c, hi_c + 1):
                    if not row[c] and _segment_distance(c + 0.5, r + 0.5, a, b) <= pen:
                        row[c] = 1
    return grid


def rasterize(strokes, pen: float = PEN) -> list[float]:
    """An 8x8 image (64 floats, row-major, in [0, 1] in steps of 1/16) from pen strokes,
    made as the data set's images are: `bitmap` (32x32), then the ink count of each 4x4
    block over 16. No strokes give a blank image."""
    grid = bitmap(strokes, pen)
    out = []
    for br in range(digits.SIDE):
        for bc in range(digits.SIDE):
            n = sum(
                grid[r][c]
                for r in range(br * BLOCK, (br + 1) * BLOCK)
                for c in range(bc * BLOCK, (bc + 1) * BLOCK)
            )
            out.append(n / (BLOCK * BLOCK))
    return out
