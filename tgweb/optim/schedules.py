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
            d[k] = _plain(v)
        return d

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({args})"


def _plain(v: Any) -> Any:
    if isinstance(v, Spec):
        return v.to_dict()
    return [_plain(x) for x in v] if isinstance(v, tuple) else v


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
    """Half a cosine from start down to end in `steps` steps, then end; with
    periodic=True back up and down again (PyTorch's CosineAnnealingLR with T_max=steps,
    eta_min=end, whose lr past T_max follows the same cosine)."""

    kind = "cosine"

    def __init__(self, start: float, steps: int, end: float = 0.0, periodic: bool = False) -> None:
        self.start, self.end = _rate(start, "cosine: start"), _rate(end, "cosine: end")
        self.steps = _count(steps, "cosine: steps")
        if not isinstance(periodic, bool):
            raise InputError(f"cosine: periodic must be True or False, got {periodic!r}")
        self.periodic = periodic

    def __call__(self, t: int) -> float:
        if self.periodic:
            t %= 2 * self.steps
            t = min(t, 2 * self.steps - t)  # cos(pi t / steps) is symmetric about steps
        f = min(t, self.steps) / self.steps
        return _anneal(self.start, self.end, f, "cos")


def _anneal(start: float, end: float, f: float, how: str) -> float:
    """From start (f = 0) to end (f = 1), along half a cosine or a line."""
    if how == "cos":
        return end + (start - end) / 2.0 * (math.cos(math.pi * f) + 1.0)
    return start + (end - start) * f


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


class OneCycle(Schedule):
    """PyTorch's OneCycleLR: from max_lr/div_factor up to max_lr in the first pct_start
    of total_steps, then down to max_lr/div_factor/final_div_factor (three_phase: back to
    max_lr/div_factor first), along half cosines (anneal="cos") or lines ("linear");
    past total_steps the lr stays at its value there (PyTorch refuses to step further)."""

    kind = "onecycle"

    def __init__(
        self,
        max_lr: float,
        total_steps: int,
        pct_start: float = 0.3,
        div_factor: float = 25.0,
        final_div_factor: float = 1e4,
        three_phase: bool = False,
        anneal: str = "cos",
    ) -> None:
        self.max_lr = _rate(max_lr, "onecycle: max_lr")
        self.total_steps = _count(total_steps, "onecycle: total_steps")
        if isinstance(pct_start, bool) or not isinstance(pct_start, (int, float)) or not 0 <= pct_start <= 1:
            raise InputError(f"onecycle: pct_start must be a number in [0, 1], got {pct_start!r}")
        self.pct_start = float(pct_start)
        for name, v in (("div_factor", div_factor), ("final_div_factor", final_div_factor)):
            if not _rate(v, f"onecycle: {name}") > 0:
                raise InputError(f"onecycle: {name} must be > 0, got {v!r}")
        self.div_factor, self.final_div_factor = float(div_factor), float(final_div_factor)
        if not isinstance(three_phase, bool):
            raise InputError(f"onecycle: three_phase must be True or False, got {three_phase!r}")
        if anneal not in ("cos", "linear"):
            raise InputError(f"onecycle: anneal must be 'cos' or 'linear', got {anneal!r}")
        self.three_phase, self.anneal = three_phase, anneal
        ends = [0.0] + [end for end, _, _ in self._phases()]
        if any(b == a for a, b in zip(ends, ends[1:])):  # a phase of length 0 would divide by 0
            raise InputError(
                f"onecycle: the phases end at steps {ends[1:]}, one of them where it starts; "
                f"change pct_start ({self.pct_start:g}) or total_steps ({self.total_steps})"
            )

    def _phases(self) -> list[tuple[float, float, float]]:
        """(end step, start lr, end lr) of each phase, as PyTorch places them."""
        top, first = self.max_lr, self.max_lr / self.div_factor
        low, up = first / self.final_div_factor, self.pct_start * self.total_steps - 1
        last = float(self.total_steps - 1)
        if self.three_phase:
            return [
                (up, first, top),
                (2 * self.pct_start * self.total_steps - 2, top, first),
                (last, first, low),
            ]
        return [(up, first, top), (last, top, low)]

    def __call__(self, t: int) -> float:
        t = min(t, self.total_steps)
        begin, phases = 0.0, self._phases()
        for i, (end, lo, hi) in enumerate(phases):
            if t <= end or i == len(phases) - 1:
                return _anneal(lo, hi, (t - begin) / (end - begin), self.anneal)
            begin = end
        raise AssertionError("unreachable: the last phase always answers")  # pragma: no cover


class Sequence(Schedule):
    """schedules[0] until milestones[0], then schedules[1] from its own t = 0 until
    milestones[1], ... (PyTorch's SequentialLR)."""

    kind = "sequence"

    def __init__(self, schedules, milestones) -> None:
        self.schedules = tuple(from_spec(s) for s in schedules)
        ms = tuple(milestones)
        for m in ms:
            _count(m, "sequence: each milestone")
        if list(ms) != sorted(set(ms)) or len(ms) != len(self.schedules) - 1:
            raise InputError(
                f"sequence: milestones must be increasing, one fewer than the schedules "
                f"({len(self.schedules)}), got {list(ms)}"
            )
        self.milestones = ms

    def __call__(self, t: int) -> float:
        i = sum(1 for m in self.milestones if m <= t)
        return self.schedules[i](t - (self.milestones[i - 1] if i else 0))


KINDS = {c.kind: c for c in (Constant, Linear, Cosine, Warmup, Step, MultiStep, OneCycle, Sequence)}


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
