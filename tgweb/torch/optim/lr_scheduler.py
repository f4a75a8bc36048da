"""torch.optim.lr_scheduler over tgweb's schedules (tgweb.optim.schedules), with
PyTorch's meaning: the lr follows the calls of scheduler.step(), whether they come after
every optimizer step or once per epoch. A scheduler counts its step() calls
(last_epoch) and writes each parameter group's "lr", which the trainer reads when it
sends a step (tgweb.torch.optim), so steps stay pipelined and nothing waits."""

from __future__ import annotations

from ...arrays import InputError
from ...optim import schedules as _s


def _initial(optimizer) -> tuple[float, list[float]]:
    """The largest of the groups' initial lrs and each group's share of it. As in
    PyTorch, a group's initial_lr is its lr when the first scheduler was made on it."""
    if not hasattr(optimizer, "_lrs"):
        raise TypeError(f"expected a tgweb.torch.optim optimizer, got {optimizer!r}")
    optimizer._lrs()  # each group's lr checked
    return optimizer.shares([float(g.setdefault("initial_lr", g["lr"])) for g in optimizer.param_groups])


class LRScheduler:
    """The lr of every group is its share of the largest initial lr times
    schedule(last_epoch), written into the group's "lr" at every step() as PyTorch
    does; the trainer reads the groups' lr when it sends a step, so steps stay
    pipelined and nothing waits."""

    def __init__(self, optimizer, schedule: _s.Schedule) -> None:
        self.optimizer, self.schedule = optimizer, schedule
        self._ratios = _initial(optimizer)[1]
        self.base_lrs = [g["initial_lr"] for g in optimizer.param_groups]
        self.last_epoch = 0
        optimizer.lr.scheduler = self
        self._publish()

    def step(self, epoch: int | None = None) -> None:
        k = self.last_epoch + 1 if epoch is None else epoch
        if isinstance(k, bool) or not isinstance(k, int) or k < 0:
            raise InputError(f"{type(self).__name__}.step: epoch must be an int >= 0, got {epoch!r}")
        self._check(k)
        self.last_epoch = k
        self._publish()

    def _check(self, k: int) -> None:
        """Raise when step() may not reach count k (OneCycleLR's end)."""

    def _publish(self) -> None:
        # PyTorch's visible state: each group's lr and get_last_lr()
        lr = self.schedule(self.last_epoch)
        self._last_lr = [lr * r for r in self._ratios]
        for g, v in zip(self.optimizer.param_groups, self._last_lr):
            g["lr"] = v

    def get_last_lr(self) -> list[float]:
        return list(self._last_lr)

    def state_dict(self) -> dict:
        return {"last_epoch": self.last_epoch, "_last_lr": list(self._last_lr)}

    def load_state_dict(self, state: dict) -> None:
        k = state.get("last_epoch") if isinstance(state, dict) else None
        if isinstance(k, bool) or not isinstance(k, int) or k < 0:
            raise InputError(f"{type(self).__name__}.load_state_dict: no int last_epoch >= 0 in {state!r}")
        self.step(k)


def _same_for_groups(name: str, optimizer, values: list) -> float:
    """One value of a setting that PyTorch applies per group in absolute terms, which
    tgweb can follow only as one schedule scaled by each group's lr share."""
    scaled = {v / r if r else v for v, r in zip(values, _initial(optimizer)[1])}
    if len(scaled) > 1:
        raise ValueError(
            f"{name} with parameter groups of different lr is not supported: tgweb scales one "
            "schedule by each group's share of the lr; give every group the same lr"
        )
    return scaled.pop()


def _per_group(optimizer, v) -> list:
    if isinstance(v, (list, tuple)):
        if len(v) != len(optimizer.param_groups):
            raise ValueError(
                f"expected {len(optimizer.param_groups)} values, one per parameter group, got {len(v)}"
            )
        return list(v)
    return [v] * len(optimizer.param_groups)


class StepLR(LRScheduler):
    def __init__(self, optimizer, step_size: int, gamma: float = 0.1) -> None:
        super().__init__(optimizer, _s.Step(_initial(optimizer)[0], step_size, gamma))


class MultiStepLR(LRScheduler):
    def __init__(self, optimizer, milestones, gamma: float = 0.1) -> None:
        super().__init__(optimizer, _s.MultiStep(_initial(optimizer)[0], milestones, gamma))


class ExponentialLR(LRScheduler):
    def __init__(self, optimizer, gamma: float) -> None:
        super().__init__(optimizer, _s.Step(_initial(optimizer)[0], 1, gamma))


class CosineAnnealingLR(LRScheduler):
    def __init__(self, optimizer, T_max: int, eta_min: float = 0.0) -> None:  # noqa: N803 - PyTorch's name
        if eta_min:
            _same_for_groups("CosineAnnealingLR's eta_min", optimizer, _per_group(optimizer, eta_min))
        super().__init__(optimizer, _s.Cosine(_initial(optimizer)[0], T_max, eta_min, periodic=True))


class LinearLR(LRScheduler):
    def __init__(
        self, optimizer, start_factor: float = 1.0 / 3, end_factor: float = 1.0, total_iters: int = 5
    ) -> None:
        b = _initial(optimizer)[0]
        super().__init__(optimizer, _s.Linear(b * start_factor, b * end_factor, total_iters))


class LambdaLR(LRScheduler):
    """lr = base lr * lr_lambda(last_epoch); one function for every group."""

    def __init__(self, optimizer, lr_lambda) -> None:
        fns = _per_group(optimizer, lr_lambda)
        if len(set(fns)) > 1:
            raise ValueError(
                "LambdaLR: one lr_lambda per parameter group is not supported; pass one function"
            )
        super().__init__(optimizer, _Lambda(_initial(optimizer)[0], fns[0]))


class _Lambda(_s.Schedule):
    kind = "torch_lambda"

    def __init__(self, lr: float, fn) -> None:
        self.lr, self.fn = lr, fn

    def __call__(self, t: int) -> float:
        return self.lr * self.fn(t)

    def to_dict(self) -> dict:
        raise TypeError("a Python function is not plain data")


class OneCycleLR(LRScheduler):
    """PyTorch's OneCycleLR for the lr. cycle_momentum=True (PyTorch's default) also
    cycles momentum/beta1, which a compiled tgweb optimizer holds fixed: it is refused."""

    def __init__(
        self,
        optimizer,
        max_lr,
        total_steps: int | None = None,
        epochs: int | None = None,
        steps_per_epoch: int | None = None,
        pct_start: float = 0.3,
        anneal_strategy: str = "cos",
        cycle_momentum: bool = True,
        base_momentum: float = 0.85,
        max_momentum: float = 0.95,
        div_factor: float = 25.0,
        final_div_factor: float = 1e4,
        three_phase: bool = False,
    ) -> None:
        if cycle_momentum:
            raise ValueError(
                "OneCycleLR: cycle_momentum=True (PyTorch's default) changes the optimizer's "
                "momentum or beta1 every step, which tgweb's compiled update holds fixed; "
                "pass cycle_momentum=False"
            )
        if total_steps is None:
            if epochs is None or steps_per_epoch is None:
                raise ValueError("OneCycleLR: give total_steps, or epochs and steps_per_epoch")
            total_steps = epochs * steps_per_epoch
        top = _same_for_groups("OneCycleLR's max_lr", optimizer, _per_group(optimizer, max_lr))
        self.total_steps = total_steps
        schedule = _s.OneCycle(
            top, total_steps, pct_start, div_factor, final_div_factor, three_phase, anneal_strategy
        )
        super().__init__(optimizer, schedule)

    def _check(self, k: int) -> None:
        if k > self.total_steps:
            raise ValueError(
                f"Tried to step {k} times. The specified number of total steps is {self.total_steps}"
            )


class SequentialLR(LRScheduler):
    """schedulers[i] from milestones[i-1] on, each from its own start (PyTorch's)."""

    def __init__(self, optimizer, schedulers, milestones) -> None:
        for i, s in enumerate(schedulers):
            if getattr(s, "optimizer", None) is not optimizer:
                raise ValueError(f"SequentialLR: scheduler {i} belongs to another optimizer")
        super().__init__(optimizer, _s.Sequence([s.schedule for s in schedulers], milestones))
        self._schedulers = list(schedulers)
