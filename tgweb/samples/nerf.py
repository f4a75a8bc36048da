"""nerf: an MLP on Fourier features of pixel coordinates learns a 64x64 RGB image.

A pixel's centre (u, v) in [0, 1]^2 (u to the right, v down) becomes 2F features
sin(2 pi b_j . (u, v)) and cos(2 pi b_j . (u, v)) for F fixed frequency vectors b_j,
computed in the graph: b_j points at the golden angle times j, its length grows
geometrically from FREQ_MIN to FREQ_MAX cycles per image, so the frequencies cover
every direction and scale without a random matrix to ship. An MLP (2F -> 64 -> 64
-> 3, ReLU, sigmoid output) maps the features to the pixel's colour. Plain
coordinates would give a blurry fit: an MLP learns low frequencies first, and the
features hand it the high ones ("Fourier features let networks learn high frequency
functions in low dimensional domains", Tancik et al. 2020).

The target image is a training input, so another image (the page's drop target)
needs no recompile: `pixel_batch(image, step)` makes a batch from any 64x64 image.
The built-in image (`builtin_image`) is drawn in code: a sky with stars, a sun,
hills with furrows, a house, a checkered kite and rings.

Success: PSNR of the whole reconstruction against the built-in image at least 35 dB
within 1,000 Adam steps of 1,024 random pixels each (lr 2e-3). It typically passes
30 dB near step 300 and 35 dB near step 650, and ends near 38 dB.
"""

from __future__ import annotations

import array
import functools
import math

from .. import nn, ops
from ._util import flatten, make_rng

SIDE = 64
PIXELS = SIDE * SIDE
FEATURES = 64  # frequency vectors: 2 * FEATURES inputs to the MLP
FREQ_MIN, FREQ_MAX = 0.5, 24.0  # cycles per image (the pixel grid's Nyquist limit is 32)
HIDDEN = 64
BATCH = 1024
STEPS = 1000
INPUTS = {"coords": (BATCH, 2), "rgb": (BATCH, 3)}
EVAL_INPUTS = {"coords": (PIXELS, 2)}
OPTIMIZER = {
    "name": "adam",
    "lr": 2e-3,
    "betas": (0.9, 0.999),
    "eps": 1e-8,
    "schedule": None,
    "weight_decay": 0.0,
    "clip": None,
}
SUCCESS = {"metric": "psnr", "at_least": 35.0, "within_steps": STEPS}
GOLDEN_ANGLE = math.pi * (3.0 - math.sqrt(5.0))
# the built-in picture's stars, (u, v)
STARS = (
    (0.08, 0.06),
    (0.45, 0.05),
    (0.58, 0.14),
    (0.9, 0.08),
    (0.38, 0.2),
    (0.95, 0.22),
    (0.5, 0.3),
    (0.06, 0.38),
    (0.84, 0.5),
)


def _wrap(turns, offset: float = 64.0):
    """turns - round(turns), in [-0.5, 0.5): the same angle in whole turns, so that sin
    and cos see arguments in [-pi, pi], where WGSL promises their accuracy (up to
    |turns| < offset). floor is a truncating cast of the shifted, positive value."""
    shifted = turns + (offset + 0.5)
    return shifted - ops.cast(ops.cast(shifted, "i32"), "f32") - 0.5


def fourier_features(coords, features: int = FEATURES, fmin: float = FREQ_MIN, fmax: float = FREQ_MAX):
    """[n, 2] coordinates -> [n, 2 * features]: sin and cos of 2 pi b_j . coords, with
    b_j = r_j (cos(j g), sin(j g)), g the golden angle and r_j geometric from fmin to fmax
    (cycles per unit). Angles are reduced to whole turns first (see _wrap)."""
    j = ops.arange(0, features, dtype="f32")
    growth = math.log(fmax / fmin) / max(1, features - 1)
    radius = ops.exp(j * growth + math.log(fmin))
    angle = _wrap(j * (GOLDEN_ANGLE / (2 * math.pi))) * (2 * math.pi)
    b = ops.stack([radius * ops.cos(angle), radius * ops.sin(angle)], axis=0)  # [2, F], cycles
    phase = _wrap(coords @ b) * (2 * math.pi)
    return ops.concat([ops.sin(phase), ops.cos(phase)], axis=-1)


def frequencies(features: int = FEATURES, fmin: float = FREQ_MIN, fmax: float = FREQ_MAX) -> list:
    """The b_j of fourier_features as [(bx, by), ...] in cycles per image (plain Python)."""
    growth = math.log(fmax / fmin) / max(1, features - 1)
    return [
        (
            fmin * math.exp(j * growth) * math.cos(j * GOLDEN_ANGLE),
            fmin * math.exp(j * growth) * math.sin(j * GOLDEN_ANGLE),
        )
        for j in range(features)
    ]


class Model(nn.Module):
    def __init__(self, hidden: int = HIDDEN, features: int = FEATURES) -> None:
        self.features = features
        self.net = nn.Sequential(
            nn.Linear(2 * features, hidden),
            nn.ReLU(),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            nn.Linear(hidden, 3),
        )

    def forward(self, coords):
        return ops.sigmoid(self.net(fourier_features(coords, self.features)))


def forward(model: Model, coords):
    """RGB in [0, 1], [n, 3], for pixel coordinates [n, 2]."""
    return model(coords)


def loss_fn(model: Model, coords, rgb):
    return ops.mse_loss(model(coords), rgb)


# ---------------------------------------------------------------- the image


def _smooth(edge0: float, edge1: float, x: float) -> float:
    t = min(1.0, max(0.0, (x - edge0) / (edge1 - edge0)))
    return t * t * (3.0 - 2.0 * t)


def _mix(a, b, t: float):
    return tuple(p + (q - p) * t for p, q in zip(a, b))


def scene(u: float, v: float) -> tuple[float, float, float]:
    """The built-in picture's colour at (u, v) in [0, 1]^2 (u right, v down)."""
    px = 1.0 / SIDE
    # sky: deep blue at the top to orange at the horizon
    c = _mix((0.10, 0.14, 0.45), (0.98, 0.56, 0.22), v / 0.75)
    # stars: small dots in the upper sky
    for sx, sy in STARS:
        c = _mix(c, (1.0, 1.0, 0.95), 0.9 * (1.0 - _smooth(0.4 * px, 1.0 * px, math.hypot(u - sx, v - sy))))
    # sun, with a glow
    d = math.hypot(u - 0.72, v - 0.34)
    c = _mix(c, (1.0, 0.78, 0.35), 0.5 * math.exp(-((d / 0.2) ** 2)))
    c = _mix(c, (1.0, 0.93, 0.45), 1.0 - _smooth(0.12 - px, 0.12 + px, d))
    # rings: three purple-white circles around a point of the sky
    r = math.hypot(u - 0.28, v - 0.56)
    ring = 0.5 + 0.5 * math.cos(2 * math.pi * r / 0.06)
    c = _mix(c, (0.55, 0.25, 0.75), ring * (1.0 - _smooth(0.17, 0.19, r)) * _smooth(0.04, 0.06, r))
    # a kite: a 4x4 red-white checker square turned 45 degrees
    ku, kv = (u - 0.22 + v - 0.22) / math.sqrt(2), (v - 0.22 - (u - 0.22)) / math.sqrt(2)
    if abs(ku) < 0.1 and abs(kv) < 0.1:
        checker = (math.floor((ku + 0.1) / 0.05) + math.floor((kv + 0.1) / 0.05)) % 2
        c = (0.86, 0.12, 0.16) if checker else (0.97, 0.95, 0.9)
    # hills: green, with darker furrows, over a wavy horizon
    horizon = 0.74 + 0.05 * math.sin(2 * math.pi * (1.3 * u + 0.1))
    if v > horizon:
        furrow = 0.75 + 0.25 * math.sin(2 * math.pi * (14 * (v - horizon) + 2 * u))
        c = _mix((0.10, 0.42, 0.16), (0.42, 0.70, 0.22), (v - horizon) / 0.26)
        c = tuple(ch * furrow for ch in c)
    # a house on the hill: walls, a roof, a door and two windows
    if 0.52 <= u <= 0.7 and 0.66 <= v <= 0.8:
        c = (0.93, 0.86, 0.7)
        if 0.59 <= u <= 0.63 and v >= 0.72:
            c = (0.35, 0.2, 0.1)
        elif 0.72 <= v <= 0.76 and (0.54 <= u <= 0.57 or 0.65 <= u <= 0.68):
            c = (0.25, 0.55, 0.85)
    if 0.56 <= v < 0.66 and abs(u - 0.61) <= 0.11 * (v - 0.56) / 0.1:
        c = (0.55, 0.16, 0.12)
    return c


@functools.lru_cache(maxsize=1)
def _builtin() -> tuple:
    s = 3  # 3x3 samples per pixel: smooth edges
    out = []
    for y in range(SIDE):
        for x in range(SIDE):
            acc = [0.0, 0.0, 0.0]
            for a in range(s):
                for b in range(s):
                    col = scene((x + (b + 0.5) / s) / SIDE, (y + (a + 0.5) / s) / SIDE)
                    for k in range(3):
                        acc[k] += col[k]
            out.extend(min(1.0, max(0.0, v / (s * s))) for v in acc)
    return tuple(array.array("f", out))  # float32 values, as the trainer sees them


def builtin_image() -> array.array:
    """The built-in 64x64 picture: PIXELS * 3 floats in [0, 1], row-major RGB."""
    return array.array("f", _builtin())


@functools.lru_cache(maxsize=1)
def _coords() -> tuple:
    return tuple(c for i in range(PIXELS) for c in ((i % SIDE + 0.5) / SIDE, (i // SIDE + 0.5) / SIDE))


def coords() -> dict[str, array.array]:
    """The evaluation inputs (EVAL_INPUTS): every pixel's centre (u, v), row-major."""
    return {"coords": array.array("f", _coords())}


def check_image(image) -> array.array:
    """image as PIXELS * 3 floats in [0, 1] (flat or nested, row-major RGB); a clear
    error for a wrong length or a value that is not a number in [0, 1]."""
    flat = flatten(image)
    if len(flat) != PIXELS * 3:
        raise ValueError(f"an image must have {SIDE}x{SIDE}x3 = {PIXELS * 3} values, got {len(flat)}")
    try:
        out = array.array("f", (float(v) for v in flat))
    except (TypeError, ValueError):
        raise ValueError("an image's values must be numbers in [0, 1]") from None
    bad = next((i for i, v in enumerate(out) if not 0.0 <= v <= 1.0), None)  # NaN fails too
    if bad is not None:
        raise ValueError(f"an image's values must be in [0, 1]; value {bad} is {out[bad]}")
    return out


def pixel_batch(image, step: int, rng=0) -> dict[str, array.array]:
    """BATCH random pixels (with replacement) of image (PIXELS * 3 floats, row-major RGB):
    their centres and colours. The same (step, rng) picks the same pixels."""
    if len(image) != PIXELS * 3:
        raise ValueError(f"an image must have {PIXELS * 3} values, got {len(image)}")
    r = make_rng(step, rng)
    idx = [r.randrange(PIXELS) for _ in range(BATCH)]
    xy = _coords()
    return {
        "coords": array.array("f", (xy[2 * i + k] for i in idx for k in (0, 1))),
        "rgb": array.array("f", (image[3 * i + k] for i in idx for k in (0, 1, 2))),
    }


def batch(step: int, rng=0) -> dict[str, array.array]:
    """BATCH random pixels of the built-in image (see pixel_batch)."""
    return pixel_batch(_builtin(), step, rng)


def psnr(pred, image=None) -> float:
    """Peak signal-to-noise ratio in dB of pred against image (default: the built-in one),
    both PIXELS * 3 values in [0, 1]: 10 log10(1 / MSE); inf when they are equal."""
    target = _builtin() if image is None else image
    pred = flatten(pred)
    if len(pred) != len(target) or len(pred) != PIXELS * 3:
        raise ValueError(f"psnr needs {PIXELS * 3} values on both sides, got {len(pred)} and {len(target)}")
    mse = sum((float(p) - t) ** 2 for p, t in zip(pred, target)) / len(pred)
    return math.inf if mse == 0 else -10.0 * math.log10(mse)


def metric(predict) -> float:
    """PSNR (dB) of the reconstruction against the built-in image. predict(coords) gets
    {"coords": every pixel's centre} (shape EVAL_INPUTS) and returns [PIXELS, 3] colours."""
    return psnr(predict(coords()))
