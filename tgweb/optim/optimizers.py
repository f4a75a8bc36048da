"""SGD, Adam and AdamW as graph transformations.

`Optimizer.build(graph, params)` appends the update of every parameter as graph
nodes and declares the persistent state it needs with `graph.state` (zeros).
It returns the next value of every parameter and state by name; tgweb.compile
wraps each in `where(ok, new, old)` and records it in `graph.updates`, where the
planner makes it an in-place write into the old value's buffer.

Per-step host scalars (graph.scalar, f32, written before each step):
  lr         the current learning rate (all optimizers; weight decay uses it too)
  step_size  Adam/AdamW: lr / (1 - beta1**t)
  bc2_sqrt   Adam/AdamW: sqrt(1 - beta2**t)
where t counts applied steps, starting at 1, as in PyTorch; a skipped
(non-finite) step does not advance it. `host_scalars(t, lr)` computes them.

`update_ok(graph, gmax)` is the in-graph guarantee that the update itself is
finite: a bool scalar, from scalars only (it fuses into the global norm's kernel,
so it costs no pass over the parameters), true when an update by processed
gradients whose elements are at most gmax in magnitude cannot overflow f32, given
parameters and state below STATE_MAX in magnitude (the trainer refuses non-finite
ones on load; every applied step passed this check). Conservative: when it is
false the step is skipped, as for a non-finite gradient.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from .. import ops
from ..arrays import F32_MAX, InputError
from ..ir import Graph, Tensor
from .schedules import Schedule, Spec
from .schedules import from_spec as schedule_from_spec

STATE_MAX = 2.0**64  # the magnitude of parameters and state the bounds assume
DELTA_MAX = 2.0**100  # the largest change of a value the bounds accept
SQUARE_MAX = 2.0**63  # gradient elements whose squares certainly fit f32


def _le(x, bound: float):
    return ops.less_equal(x, bound)  # false for NaN and inf: the conservative answer


@dataclass
class ParamInfo:
    name: str
    value: Tensor  # the param node (its value before this step)
    grad: Tensor  # the processed gradient (clipped / normalised)
    decay: bool  # weight decay applies to this parameter


def _nonneg(x: Any, what: str) -> float:
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not 0 <= x <= F32_MAX:
        raise InputError(f"{what} must be a finite number >= 0, got {x!r}")
    return float(x)


def _beta(x: Any, what: str) -> float:
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not 0.0 <= x < 1.0:
        raise ValueError(f"{what} must be in [0, 1), got {x!r}")
    return float(x)


def _lr(lr: Any) -> Schedule:
    if isinstance(lr, (int, float)) and not isinstance(lr, bool):
        _nonneg(lr, "lr")
    return schedule_from_spec(lr)


class Optimizer(Spec):
    name = "abstract"
    _spec_key = "name"
    cacheable = True  # build() keeps no host state: a cached Program can stand for it (progcache)

    def __init__(self, lr) -> None:
        self.lr = _lr(lr)

    def build(self, graph: Graph, params: list[ParamInfo]) -> dict[str, dict[str, Tensor]]:
        """Append the update; returns {"params": {name: new}, "states": {name: new}}."""
        raise NotImplementedError  # pragma: no cover

    def host_scalars(self, t: int, lr: float) -> dict[str, float]:
        """The scalar values for the t-th applied step (t >= 1) at learning rate lr."""
        return {"lr": float(lr)}

    def host_state(self) -> tuple:
        """What host_scalars depends on besides (t, lr), read when a step is sent (a
        tgweb.torch optimizer's group lrs); it raises when a step cannot follow it."""
        return ()

    def update_ok(self, graph: Graph, gmax: Tensor) -> Tensor | None:
        """A bool scalar: the update cannot overflow (see the module docstring); None
        when the optimizer gives no such bound (its steps are checked on the gradients)."""
        return None


class SGD(Optimizer):
    """p -= lr * d, with d = g + wd*p (L2 into the gradient); with momentum
    b = momentum*b + d and d = b (or d + momentum*b for Nesterov), as torch.optim.SGD
    with dampening 0."""

    name = "sgd"

    def __init__(self, lr, momentum: float = 0.0, nesterov: bool = False, weight_decay: float = 0.0) -> None:
        super().__init__(lr)
        self.momentum = _nonneg(momentum, "SGD: momentum")
        self.nesterov = bool(nesterov)
        self.weight_decay = _nonneg(weight_decay, "SGD: weight_decay")
        if self.nesterov and self.momentum == 0:
            raise ValueError("SGD: nesterov needs momentum > 0")

    def build(self, graph, params):
        lr = graph.scalar("lr")
        new_p, new_s = {}, {}
        for p in params:
            d = p.grad
            if self.weight_decay and p.decay:
                d = d + self.weight_decay * p.value
            if self.momentum:
                name = f"{p.name}.momentum_buffer"
                b = self.momentum * graph.state(name, p.value.shape) + d
                new_s[name] = b
                d = d + self.momentum * b if self.nesterov else b
            new_p[p.name] = p.value - lr * d
        return {"params": new_p, "states": new_s}

    def update_ok(self, graph, gmax):
        # |d| <= gmax + wd*A; |b'| <= mu*A + |d|; |change| <= lr * (|d| + mu*|b'|)
        d = gmax + self.weight_decay * STATE_MAX
        b = self.momentum * STATE_MAX + d
        change = graph.scalar("lr") * (d + self.momentum * b)
        return ops.logical_and(_le(b, DELTA_MAX), _le(change, DELTA_MAX))


class Adam(Optimizer):
    """Adam with bias correction as torch.optim.Adam; weight_decay is L2 into the gradient."""

    name = "adam"
    decoupled = False

    def __init__(self, lr, betas=(0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0.0) -> None:
        super().__init__(lr)
        if not isinstance(betas, (tuple, list)) or len(betas) != 2:
            raise ValueError(f"{type(self).__name__}: betas must be a pair, got {betas!r}")
        self.betas = (
            _beta(betas[0], f"{type(self).__name__}: betas[0]"),
            _beta(betas[1], f"{type(self).__name__}: betas[1]"),
        )
        self.eps = _nonneg(eps, f"{type(self).__name__}: eps")
        self.weight_decay = _nonneg(weight_decay, f"{type(self).__name__}: weight_decay")

    def build(self, graph, params):
        b1, b2 = self.betas
        lr, step_size, bc2_sqrt = graph.scalar("lr"), graph.scalar("step_size"), graph.scalar("bc2_sqrt")
        new_p, new_s = {}, {}
        for p in params:
            g, w = p.grad, p.value
            wd = self.weight_decay if p.decay else 0.0
            if wd and not self.decoupled:
                g = g + wd * w
            if wd and self.decoupled:
                w = w * (1.0 - lr * wd)
            m_name, v_name = f"{p.name}.exp_avg", f"{p.name}.exp_avg_sq"
            m = graph.state(m_name, w.shape)
            v = graph.state(v_name, w.shape)
            m1 = m + (g - m) * (1.0 - b1)
            v1 = v * b2 + (g * g) * (1.0 - b2)
            denom = ops.sqrt(v1) / bc2_sqrt + self.eps
            new_p[p.name] = w - step_size * (m1 / denom)
            new_s[m_name], new_s[v_name] = m1, v1
        return {"params": new_p, "states": new_s}

    def update_ok(self, graph, gmax):
        b1, b2 = self.betas
        wd = self.weight_decay
        g = gmax if self.decoupled or not wd else gmax + wd * STATE_MAX
        # |m1| <= sqrt(v1) * (1-b1) / sqrt((1-b2)(1 - b1^2/b2)) for the moments of one
        # gradient history, so the Adam step is at most step_size times that ratio
        if b1 * b1 < b2:
            ratio = (1.0 - b1) / math.sqrt((1.0 - b2) * (1.0 - b1 * b1 / b2))
        elif self.eps > 0:
            ratio = STATE_MAX / self.eps  # |m1| / eps
        else:
            return None
        change = graph.scalar("step_size") * ratio
        if self.decoupled and wd:
            change = change + graph.scalar("lr") * (wd * STATE_MAX)
        return ops.logical_and(_le(g, SQUARE_MAX), _le(change, DELTA_MAX))

    def host_scalars(self, t, lr):
        b1, b2 = self.betas
        return {"lr": float(lr), "step_size": float(lr) / (1.0 - b1**t), "bc2_sqrt": math.sqrt(1.0 - b2**t)}


class AdamW(Adam):
    """Adam with decoupled weight decay: p *= 1 - lr*wd before the Adam step."""

    name = "adamw"
    decoupled = True

    def __init__(self, lr, betas=(0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0.01) -> None:
        super().__init__(lr, betas, eps, weight_decay)


OPTIMIZERS = {"sgd": SGD, "adam": Adam, "adamw": AdamW}  # tgweb.optim.adaptive adds its own


def from_spec(spec: Any) -> tuple[Optimizer, float | None]:
    """(optimizer, clip) from an Optimizer or plain data such as the samples' OPTIMIZER:
    {"name": "adamw", "lr": 5e-3, "schedule": {...} | None, "betas", "eps",
    "weight_decay", "momentum", "nesterov", "clip": 1.0 | None}. A schedule
    overrides lr; "decay_exclude" may only name the default mask."""
    if isinstance(spec, Optimizer):
        return spec, None
    if not isinstance(spec, dict):
        raise ValueError(f"optimizer must be a tg.optim optimizer or a dict, got {spec!r}")
    d = dict(spec)
    name = str(d.pop("name", "")).lower()
    if name not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {name!r}; known: {sorted(OPTIMIZERS)}")
    clip = d.pop("clip", None)
    sched = d.pop("schedule", None)
    excl = d.pop("decay_exclude", None)
    if excl not in (None, "biases and norms", "default"):
        raise ValueError(
            f"decay_exclude {excl!r}: only the default mask ('biases and norms') is "
            "supported as data; set Parameter.decay to override"
        )
    lr = sched if sched is not None else d.pop("lr", None)
    d.pop("lr", None)
    if lr is None:
        raise ValueError(f"optimizer {name!r}: lr is missing")
    cls = OPTIMIZERS[name]
    if name == "sgd":
        d.pop("betas", None)
        d.pop("eps", None)
    elif name in ("adam", "adamw"):
        d.pop("momentum", None)
        d.pop("nesterov", None)
    try:
        return cls(lr, **d), clip
    except TypeError as e:
        raise ValueError(f"optimizer {name!r}: {e}") from None
