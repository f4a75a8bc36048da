"""Parameter initialisers. Each is a small object: called with (shape, rng) it
returns the values as a flat array('f'); `kind` tells the optimizer whether the
parameter is a gain or offset (zeros/ones: no weight decay by default)."""

from __future__ import annotations

import array
import math
import random

from ..ir import prod


def fans(shape: tuple[int, ...]) -> tuple[int, int]:
    """(fan_in, fan_out) as PyTorch computes them: [out, in, *kernel]."""
    if len(shape) < 2:
        return shape[0] if shape else 1, shape[0] if shape else 1
    rf = prod(shape[2:])
    return shape[1] * rf, shape[0] * rf


class Init:
    kind = "random"

    def __call__(self, shape: tuple[int, ...], rng: random.Random) -> array.array:
        raise NotImplementedError  # pragma: no cover - every subclass defines it

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({args})"


class normal(Init):
    def __init__(self, std: float = 1.0, mean: float = 0.0) -> None:
        if std < 0:
            raise ValueError(f"normal: std must be >= 0, got {std}")
        self.std, self.mean = float(std), float(mean)

    def __call__(self, shape, rng):
        g, m, s = rng.gauss, self.mean, self.std
        return array.array("f", [g(m, s) for _ in range(prod(shape))])


class uniform(Init):
    def __init__(self, low: float = -1.0, high: float = 1.0) -> None:
        if high < low:
            raise ValueError(f"uniform: high {high} is below low {low}")
        self.low, self.high = float(low), float(high)

    def __call__(self, shape, rng):
        u, lo, w = rng.random, self.low, self.high - self.low
        return array.array("f", [lo + w * u() for _ in range(prod(shape))])


class kaiming(Init):
    """Normal with std gain / sqrt(fan_in) (He et al.; gain sqrt(2) suits ReLU)."""

    def __init__(self, gain: float = math.sqrt(2.0)) -> None:
        self.gain = float(gain)

    def __call__(self, shape, rng):
        return normal(self.gain / math.sqrt(fans(shape)[0]))(shape, rng)


class xavier(Init):
    """Uniform in +-gain*sqrt(6 / (fan_in + fan_out)) (Glorot and Bengio)."""

    def __init__(self, gain: float = 1.0) -> None:
        self.gain = float(gain)

    def __call__(self, shape, rng):
        fi, fo = fans(shape)
        a = self.gain * math.sqrt(6.0 / (fi + fo))
        return uniform(-a, a)(shape, rng)


class fan_in_uniform(Init):
    """Uniform in +-1/sqrt(fan_in): PyTorch's default for Linear and Conv2d weights."""

    def __call__(self, shape, rng):
        a = 1.0 / math.sqrt(fans(shape)[0])
        return uniform(-a, a)(shape, rng)


class constant(Init):
    def __init__(self, value: float) -> None:
        self.value = float(value)

    @property
    def kind(self):  # type: ignore[override]
        return "zeros" if self.value == 0 else "ones" if self.value == 1 else "constant"

    def __call__(self, shape, rng):
        return array.array("f", [self.value]) * prod(shape)


def zeros() -> constant:
    return constant(0.0)


def ones() -> constant:
    return constant(1.0)


class from_array(Init):
    """Fixed values (NumPy array, nested list, ...), checked against the shape."""

    kind = "fixed"

    def __init__(self, values) -> None:
        self.values = values

    def __call__(self, shape, rng):
        from ..arrays import from_user

        return from_user(self.values, shape, "f32", "init.from_array")
