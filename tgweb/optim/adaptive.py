"""Adadelta, Adagrad and RMSprop as graph transformations, with torch.optim's update
rules and defaults (weight_decay is L2 into the gradient). Like every optimizer they
append the update to the graph and keep their state with graph.state; see
tgweb.optim.optimizers. They give no overflow bound (update_ok None): their steps are
checked on the gradients."""

from __future__ import annotations

from .. import ops
from .optimizers import OPTIMIZERS, Optimizer, _nonneg


def _decayed(opt, p):
    return p.grad + opt.weight_decay * p.value if opt.weight_decay and p.decay else p.grad


def _rate(x, what: str) -> float:
    v = _nonneg(x, what)
    if v >= 1.0 and what.endswith(("rho", "alpha")):
        raise ValueError(f"{what} must be in [0, 1), got {x!r}")
    return v


class Adadelta(Optimizer):
    """v = rho v + (1-rho) g^2; d = sqrt(u + eps) / sqrt(v + eps) g; u = rho u + (1-rho) d^2;
    p -= lr d (torch.optim.Adadelta)."""

    name = "adadelta"

    def __init__(self, lr=1.0, rho: float = 0.9, eps: float = 1e-6, weight_decay: float = 0.0) -> None:
        super().__init__(lr)
        self.rho = _rate(rho, "Adadelta: rho")
        self.eps = _nonneg(eps, "Adadelta: eps")
        self.weight_decay = _nonneg(weight_decay, "Adadelta: weight_decay")

    def build(self, graph, params):
        lr, rho, eps = graph.scalar("lr"), self.rho, self.eps
        new_p, new_s = {}, {}
        for p in params:
            g = _decayed(self, p)
            vn, un = f"{p.name}.square_avg", f"{p.name}.acc_delta"
            v = graph.state(vn, p.value.shape) * rho + (g * g) * (1.0 - rho)
            u = graph.state(un, p.value.shape)
            d = ops.sqrt(u + eps) / ops.sqrt(v + eps) * g
            new_s[vn], new_s[un] = v, u * rho + (d * d) * (1.0 - rho)
            new_p[p.name] = p.value - lr * d
        return {"params": new_p, "states": new_s}


class Adagrad(Optimizer):
    """s += g^2; p -= lr_t g / (sqrt(s) + eps), lr_t = lr / (1 + (t-1) lr_decay)
    (torch.optim.Adagrad)."""

    name = "adagrad"

    def __init__(
        self,
        lr=0.01,
        lr_decay: float = 0.0,
        weight_decay: float = 0.0,
        initial_accumulator_value: float = 0.0,
        eps: float = 1e-10,
    ) -> None:  # noqa: E501
        super().__init__(lr)
        self.lr_decay = _nonneg(lr_decay, "Adagrad: lr_decay")
        self.weight_decay = _nonneg(weight_decay, "Adagrad: weight_decay")
        self.initial_accumulator_value = _nonneg(
            initial_accumulator_value, "Adagrad: initial_accumulator_value"
        )
        self.eps = _nonneg(eps, "Adagrad: eps")

    def build(self, graph, params):
        lr = graph.scalar("lr")
        new_p, new_s = {}, {}
        for p in params:
            g = _decayed(self, p)
            name = f"{p.name}.sum"
            s = graph.state(name, p.value.shape, self.initial_accumulator_value) + g * g
            new_s[name] = s
            new_p[p.name] = p.value - lr * g / (ops.sqrt(s) + self.eps)
        return {"params": new_p, "states": new_s}

    def host_scalars(self, t, lr):
        return {"lr": float(lr) / (1.0 + (t - 1) * self.lr_decay)}


class RMSprop(Optimizer):
    """s = alpha s + (1-alpha) g^2 (centered: minus the squared running mean of g);
    d = g / (sqrt(s) + eps), through a momentum buffer when momentum > 0; p -= lr d
    (torch.optim.RMSprop)."""

    name = "rmsprop"

    def __init__(
        self,
        lr=0.01,
        alpha: float = 0.99,
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        momentum: float = 0.0,
        centered: bool = False,
    ) -> None:  # noqa: E501
        super().__init__(lr)
        self.alpha = _rate(alpha, "RMSprop: alpha")
        self.eps = _nonneg(eps, "RMSprop: eps")
        self.weight_decay = _nonneg(weight_decay, "RMSprop: weight_decay")
        self.momentum = _nonneg(momentum, "RMSprop: momentum")
        self.centered = bool(centered)

    def build(self, graph, params):
        lr, a = graph.scalar("lr"), self.alpha
        new_p, new_s = {}, {}
        for p in params:
            g, shape = _decayed(self, p), p.value.shape
            sn = f"{p.name}.square_avg"
            s = new_s[sn] = graph.state(sn, shape) * a + (g * g) * (1.0 - a)
            if self.centered:
                mn = f"{p.name}.grad_avg"
                m = new_s[mn] = graph.state(mn, shape) * a + g * (1.0 - a)
                s = s - m * m
            d = g / (ops.sqrt(s) + self.eps)
            if self.momentum:
                bn = f"{p.name}.momentum_buffer"
                d = new_s[bn] = graph.state(bn, shape) * self.momentum + d
            new_p[p.name] = p.value - lr * d
        return {"params": new_p, "states": new_s}


OPTIMIZERS.update({c.name: c for c in (Adadelta, Adagrad, RMSprop)})
