"""A classifier whose forward builds tensors from Python data, as PyTorch code does: a
class-weight table for the loss and an offset table made with torch.tensor inside the
traced function (tgweb: data constants of the graph, uploaded once)."""

import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH, FEATURES, CLASSES = 6, 5, 3
INPUTS = {"x": (BATCH, FEATURES), "y": ((BATCH,), torch.long)}


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(FEATURES, 8)
        self.fc2 = nn.Linear(8, CLASSES)

    def forward(self, x):
        shift = torch.tensor([[0.5, -0.25, 0.0]])  # a per-class offset, from data
        return self.fc2(F.relu(self.fc1(x))) + shift


def model():
    return Net()


def optimizer(m):
    return torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9), None


def loss(m, x, y):
    weight = torch.tensor([1.0, 2.0, 0.5])
    return F.cross_entropy(m(x), y, weight=weight)


def batch(rng):
    return {
        "x": rng.standard_normal((BATCH, FEATURES)).astype("float32"),
        "y": rng.integers(0, CLASSES, BATCH),
    }
