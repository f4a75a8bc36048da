"""torch.optim.lr_scheduler mapped onto tgweb's schedules (tgweb.optim.schedules),
which the trainer resolves each step: a scheduler here counts OPTIMIZER STEPS (as
PyTorch does when scheduler.step() follows every optimizer.step()), and its step() is
a no-op. Make the scheduler before tg.compile: it sets the optimizer's schedule."""

from __future__ import annotations

from ...optim import schedules as _s


class LRScheduler:
    def __init__(self, optimizer, schedule) -> None:
        self.optimizer = optimizer
        optimizer.lr = schedule
        self.schedule = schedule

    def step(self, *args) -> None:
        pass  # the trainer advances the schedule with every applied step

    def get_last_lr(self):
        return [self.schedule(0) * g["lr"] / self.optimizer._base for g in self.optimizer.param_groups]


def StepLR(optimizer, step_size: int, gamma: float = 0.1):  # noqa: N802 - PyTorch's names
    return LRScheduler(optimizer, _s.Step(optimizer._base, step_size, gamma))


def MultiStepLR(optimizer, milestones, gamma: float = 0.1):  # noqa: N802
    return LRScheduler(optimizer, _s.MultiStep(optimizer._base, milestones, gamma))


def CosineAnnealingLR(optimizer, T_max: int, eta_min: float = 0.0):  # noqa: N802,N803
    return LRScheduler(optimizer, _s.Cosine(optimizer._base, T_max, eta_min))


def LinearLR(optimizer, start_factor: float = 1.0 / 3, end_factor: float = 1.0, total_iters: int = 5):  # noqa: N802
    b = optimizer._base
    return LRScheduler(optimizer, _s.Linear(b * start_factor, b * end_factor, total_iters))
