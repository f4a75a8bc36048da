"""A small classifier trained with SGD (momentum) under one of PyTorch's lr schedulers;
the test steps the scheduler after every iteration or once per epoch."""

import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH, FEATURES, CLASSES = 8, 6, 3
INPUTS = {"x": (BATCH, FEATURES), "y": ((BATCH,), torch.long)}


class Net(nn.Module):
    def __init__(self, kind):
        super().__init__()
        self.kind = kind  # which scheduler optimizer() makes
        self.fc1 = nn.Linear(FEATURES, 16)
        self.fc2 = nn.Linear(16, CLASSES)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


def model(kind):
    return Net(kind)


def optimizer(m):
    S, kind = torch.optim.lr_scheduler, m.kind
    opt = torch.optim.SGD(m.parameters(), lr=0.5, momentum=0.9)
    if kind == "step":  # PyTorch's MNIST example
        return opt, S.StepLR(opt, step_size=1, gamma=0.7)
    if kind == "onecycle":
        return opt, S.OneCycleLR(opt, max_lr=1.0, total_steps=20, cycle_momentum=False)
    warmup = S.LinearLR(opt, start_factor=0.1, total_iters=3)
    return opt, S.SequentialLR(opt, [warmup, S.CosineAnnealingLR(opt, T_max=4)], milestones=[3])


def loss(m, x, y):
    return F.cross_entropy(m(x), y)


def batch(rng):
    x = rng.standard_normal((BATCH, FEATURES)).astype("float32")
    return {"x": x, "y": (x[:, 0] > 0).astype("int64") + (x[:, 1] > 1)}
