"""A variational autoencoder in the style of PyTorch's VAE example: linear encoder to
mu and logvar, the reparameterisation, linear decoder with a sigmoid, the loss binary
cross-entropy summed plus the KL divergence; Adam. The noise of the reparameterisation
is an input here (the example draws it with randn_like, whose numbers differ between
PyTorch and tgweb)."""

import torch
from torch import nn
from torch.nn import functional as F

BATCH, PIXELS, HIDDEN, LATENT = 4, 64, 24, 3
INPUTS = {"x": (BATCH, PIXELS), "eps": (BATCH, LATENT)}


class VAE(nn.Module):
    def __init__(self):
        super(VAE, self).__init__()
        self.fc1 = nn.Linear(PIXELS, HIDDEN)
        self.fc21 = nn.Linear(HIDDEN, LATENT)
        self.fc22 = nn.Linear(HIDDEN, LATENT)
        self.fc3 = nn.Linear(LATENT, HIDDEN)
        self.fc4 = nn.Linear(HIDDEN, PIXELS)

    def encode(self, x):
        h1 = F.relu(self.fc1(x))
        return self.fc21(h1), self.fc22(h1)

    def reparameterize(self, mu, logvar, eps):
        std = torch.exp(0.5 * logvar)
        return mu + eps * std

    def decode(self, z):
        h3 = F.relu(self.fc3(z))
        return torch.sigmoid(self.fc4(h3))

    def forward(self, x, eps):
        mu, logvar = self.encode(x.view(-1, PIXELS))
        z = self.reparameterize(mu, logvar, eps)
        return self.decode(z), mu, logvar


def model():
    return VAE()


def optimizer(m):
    return torch.optim.Adam(m.parameters(), lr=1e-3), None


def loss(m, x, eps):
    recon_x, mu, logvar = m(x, eps)
    BCE = F.binary_cross_entropy(recon_x, x.view(-1, PIXELS), reduction="sum")
    KLD = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())
    return (BCE + KLD) / BATCH


def batch(rng):
    return {
        "x": (rng.uniform(0, 1, (BATCH, PIXELS)) > 0.5).astype("float32"),
        "eps": rng.standard_normal((BATCH, LATENT)).astype("float32"),
    }
