"""An LSTM classifier in the style of PyTorch's MNIST RNN example: each image row is a
time step of an nn.LSTM (batch_first), the last step's output goes through a linear
layer and log_softmax; nll_loss, Adadelta with StepLR."""

import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH, SIDE, CLASSES = 4, 8, 10
INPUTS = {"data": (BATCH, 1, SIDE, SIDE), "target": ((BATCH,), torch.long)}


class Net(nn.Module):
    def __init__(self):
        super(Net, self).__init__()
        self.rnn = nn.LSTM(input_size=SIDE, hidden_size=16, batch_first=True)
        self.batchnorm = nn.BatchNorm1d(16)
        self.fc1 = nn.Linear(16, 12)
        self.fc2 = nn.Linear(12, CLASSES)

    def forward(self, input):
        # Shape of input is (batch_size, 1, rows, columns): one row per time step
        input = input.reshape(-1, SIDE, SIDE)
        output, hidden = self.rnn(input)
        output = output[:, -1, :]
        output = self.batchnorm(output)
        output = self.fc1(output)
        output = F.relu(output)
        output = self.fc2(output)
        return F.log_softmax(output, dim=1)


def model():
    return Net()


def optimizer(m):
    opt = torch.optim.Adadelta(m.parameters(), lr=1.0)
    return opt, torch.optim.lr_scheduler.StepLR(opt, step_size=5, gamma=0.7)


def loss(m, data, target):
    return F.nll_loss(m(data), target)


def batch(rng):
    return {
        "data": rng.standard_normal((BATCH, 1, SIDE, SIDE)).astype("float32"),
        "target": rng.integers(0, CLASSES, BATCH),
    }
