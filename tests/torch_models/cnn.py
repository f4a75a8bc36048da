"""A CNN classifier in the style of PyTorch's MNIST example, trained with Adadelta and
StepLR, on 12x12 single-channel images."""

import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH, SIDE, CLASSES = 4, 12, 5
INPUTS = {"x": (BATCH, 1, SIDE, SIDE), "y": ((BATCH,), torch.long)}


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 4, 3, 1)
        self.conv2 = nn.Conv2d(4, 8, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(8 * 4 * 4, 16)
        self.fc2 = nn.Linear(16, CLASSES)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        x = F.max_pool2d(x, 2)
        x = self.dropout1(x)
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        x = self.dropout2(x)
        return F.log_softmax(self.fc2(x), dim=1)


def model():
    return Net().eval()  # dropout off: PyTorch's random numbers are not tgweb's


def optimizer(m):
    opt = torch.optim.Adadelta(m.parameters(), lr=1.0)
    return opt, torch.optim.lr_scheduler.StepLR(opt, step_size=5, gamma=0.7)


def loss(m, x, y):
    return F.nll_loss(m(x), y)


def batch(rng):
    return {
        "x": rng.standard_normal((BATCH, 1, SIDE, SIDE)).astype("float32"),
        "y": rng.integers(0, CLASSES, BATCH),
    }
