"""Learning-rate schedules as data.

A schedule maps the optimizer step t (0 for the first step it governs) to a
learning rate. It is resolved on the host once per step and handed to the graph
as the scalar "lr"; nothing about it is baked into the compiled Program, so
`Trainer.set_lr` can switch schedules at any time (the new one starts at t = 0 on
the next step). Every schedule round-trips through `to_dict()` / `from_spec()`.
"""

from __future__ import annotations

import math
from typing import Any

from ..arrays import F32_MAX, InputError


def _rate(x: Any, what: str) -> float:
    # the lr reaches the GPU as an f32: beyond F32_MAX it would be inf there
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not 0 <= x <= F32_MAX:
        raise InputError(f"{what} must be a finite number >= 0 (at most {F32_MAX:.7g}), got {x!r}")
    return float(x)


def _count(x: Any, what: str, minimum: int = 1) -> int:
    if isinstance(x, bool) or not isinstance(x, int) or x < minimum:
        raise InputError(f"{what} must be an int >= {minimum}, got {x!r}")
    return x


class Spec:
    """Plain-data form shared by schedules and optimizers: to_dict() is {key: its kind
    or name, every attribute} (nested schedules as their dicts), repr() the constructor."""

    _spec_key = "kind"

    def to_dict(self) -> dict:
        d = {self._spec_key: getattr(self, self._spec_key)}
        for k, v in vars(self).items():
            d[k] = v.to_dict() if isinstance(v, Spec) else (list(v) if isinstance(v, tuple) else v)
        return d

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({args})"


class Schedule(Spec):
    kind = "abstract"

    def __call__(self, t: int) -> float:
        raise NotImplementedError  # pragma: no cover - every subclass defines it

    def __eq__(self, other) -> bool:
        return type(self) is type(other) and vars(self) == vars(other)


class Constant(Schedule):
    kind = "constant"

    def __init__(self, lr: float) -> None:
        self.lr = _rate(lr, "constant: lr")

    def __call__(self, t: int) -> float:
        return self.lr


class Linear(Schedule):
    """From start to end in `steps` steps, then end."""

    kind = "linear"

    def __init__(self, start: float, end: float, steps: int) -> None:
        self.start, self.end = _rate(start, "linear: start"), _rate(end, "linear: end")
        self.steps = _count(steps, "linear: steps")

    def __call__(self, t: int) -> float:
        f = min(t, self.steps) / self.steps
        return self.start + (self.end - self.start) * f


class Cosine(Schedule):
    """Half a cosine from start down to end in `steps` steps, then end
    (PyTorch's CosineAnnealingLR with T_max=steps, eta_min=end)."""

    kind = "cosine"

    def __init__(self, start: float, steps: int, end: float = 0.0) -> None:
        self.start, self.end = _rate(start, "cosine: start"), _rate(end, "cosine: end")
        self.steps = _count(steps, "cosine: steps")

    def __call__(self, t: int) -> float:
        f = min(t, self.steps) / self.steps
        return self.end + (self.start - self.end) * 0.5 * (1.0 + math.cos(math.pi * f))


class Warmup(Schedule):
    """Linear warm-up for `steps` steps from `start` to then(0), then `then` (shifted)."""

    kind = "warmup"

    def __init__(self, steps: int, then: Any, start: float = 0.0) -> None:
        self.steps = _count(steps, "warmup: steps")
        self.then = from_spec(then)
        self.start = _rate(start, "warmup: start")

    def __call__(self, t: int) -> float:
        if t < self.steps:
            return self.start + (self.then(0) - self.start) * (t + 1) / self.steps
        return self.then(t - self.steps)


class Step(Schedule):
    """lr * gamma ** (t // step_size) (PyTorch's StepLR)."""

    kind = "step"

    def __init__(self, lr: float, step_size: int, gamma: float = 0.1) -> None:
        self.lr = _rate(lr, "step: lr")
        self.step_size = _count(step_size, "step: step_size")
        self.gamma = _rate(gamma, "step: gamma")

    def __call__(self, t: int) -> float:
        return self.lr * self.gamma ** (t // self.step_size)


class MultiStep(Schedule):
    """lr * gamma ** (number of milestones <= t) (PyTorch's MultiStepLR)."""

    kind = "multistep"

    def __init__(self, lr: float, milestones, gamma: float = 0.1) -> None:
        self.lr = _rate(lr, "multistep: lr")
        ms = tuple(milestones)
        for m in ms:
            _count(m, "multistep: each milestone")
        if list(ms) != sorted(set(ms)):
            raise InputError(f"multistep: milestones must be increasing, got {list(ms)}")
        self.milestones = ms
        self.gamma = _rate(gamma, "multistep: gamma")

    def __call__(self, t: int) -> float:
        return self.lr * self.gamma ** sum(1 for m in self.milestones if m <= t)


KINDS = {c.kind: c for c in (Constant, Linear, Cosine, Warmup, Step, MultiStep)}


def from_spec(spec: Any) -> Schedule:
    """A Schedule from a number (constant), a Schedule, or a dict {"kind": ..., args}."""
    if isinstance(spec, Schedule):
        return spec
    if isinstance(spec, (int, float)) and not isinstance(spec, bool):
        return Constant(spec)
    if isinstance(spec, dict):
        args = dict(spec)
        kind = args.pop("kind", None)
        if kind not in KINDS:
            raise InputError(f"unknown schedule kind {kind!r}; known: {sorted(KINDS)}")
        try:
            return KINDS[kind](**args)
        except TypeError as e:
            raise InputError(f"schedule {kind!r}: {e}") from None
    raise InputError(f"a learning rate must be a number >= 0, a Schedule or a schedule dict, got {spec!r}")
