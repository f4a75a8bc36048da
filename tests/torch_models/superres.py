"""A sub-pixel super-resolution net in the style of PyTorch's super_resolution example:
convolutions with ReLU, a last convolution to upscale**2 channels and PixelShuffle, the
weights orthogonal with ReLU's gain; MSE against the high-resolution image, Adam."""

import torch
import torch.nn as nn
import torch.nn.init as init

BATCH, SIDE, UPSCALE = 2, 6, 2
INPUTS = {"low": (BATCH, 1, SIDE, SIDE), "high": (BATCH, 1, SIDE * UPSCALE, SIDE * UPSCALE)}


class Net(nn.Module):
    def __init__(self, upscale_factor):
        super(Net, self).__init__()
        self.relu = nn.ReLU()
        self.conv1 = nn.Conv2d(1, 8, (5, 5), (1, 1), (2, 2))
        self.conv2 = nn.Conv2d(8, 8, (3, 3), (1, 1), (1, 1))
        self.conv3 = nn.Conv2d(8, 4, (3, 3), (1, 1), (1, 1))
        self.conv4 = nn.Conv2d(4, upscale_factor**2, (3, 3), (1, 1), (1, 1))
        self.pixel_shuffle = nn.PixelShuffle(upscale_factor)
        self._initialize_weights()

    def forward(self, x):
        x = self.relu(self.conv1(x))
        x = self.relu(self.conv2(x))
        x = self.relu(self.conv3(x))
        return self.pixel_shuffle(self.conv4(x))

    def _initialize_weights(self):
        init.orthogonal_(self.conv1.weight, init.calculate_gain("relu"))
        init.orthogonal_(self.conv2.weight, init.calculate_gain("relu"))
        init.orthogonal_(self.conv3.weight, init.calculate_gain("relu"))
        init.orthogonal_(self.conv4.weight)


def model():
    m = Net(UPSCALE)
    m.criterion = nn.MSELoss()
    return m


def optimizer(m):
    return torch.optim.Adam(m.parameters(), lr=0.01), None


def loss(m, low, high):
    return m.criterion(m(low), high)


def batch(rng):
    low = rng.uniform(0, 1, (BATCH, 1, SIDE, SIDE)).astype("float32")
    high = low.repeat(UPSCALE, axis=2).repeat(UPSCALE, axis=3)
    return {"low": low, "high": (high + 0.05 * rng.standard_normal(high.shape)).astype("float32")}
