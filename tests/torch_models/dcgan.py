"""A small DCGAN in the style of PyTorch's examples (generator of transposed
convolutions with batch norm, discriminator of strided convolutions with LeakyReLU,
BCELoss, the examples' weights_init), trained here as one loss: the discriminator on
real and detached fake images, the generator through the discriminator."""

import torch
import torch.nn as nn

BATCH, NZ, NGF, NDF, NC = 6, 4, 4, 4, 1
INPUTS = {"real": (BATCH, NC, 8, 8), "noise": (BATCH, NZ, 1, 1)}


def weights_init(m):
    classname = m.__class__.__name__
    if classname.find("Conv") != -1:
        nn.init.normal_(m.weight, 0.0, 0.02)
    elif classname.find("BatchNorm") != -1:
        nn.init.normal_(m.weight, 1.0, 0.02)
        nn.init.constant_(m.bias, 0)


class Generator(nn.Module):
    def __init__(self):
        super().__init__()
        self.main = nn.Sequential(
            nn.ConvTranspose2d(NZ, NGF * 2, 4, 1, 0, bias=False),
            nn.BatchNorm2d(NGF * 2),
            nn.ReLU(True),
            nn.ConvTranspose2d(NGF * 2, NC, 4, 2, 1, bias=False),
            nn.Tanh(),
        )

    def forward(self, input):
        return self.main(input)


class Discriminator(nn.Module):
    def __init__(self):
        super().__init__()
        self.main = nn.Sequential(
            nn.Conv2d(NC, NDF, 4, 2, 1, bias=False),
            nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(NDF, NDF * 2, 3, 1, 1, bias=False),
            nn.BatchNorm2d(NDF * 2),
            nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(NDF * 2, 1, 4, 1, 0, bias=False),
            nn.Sigmoid(),
        )

    def forward(self, input):
        return self.main(input).view(-1, 1).squeeze(1)


class GAN(nn.Module):
    def __init__(self):
        super().__init__()
        self.netG = Generator()
        self.netG.apply(weights_init)
        self.netD = Discriminator()
        self.netD.apply(weights_init)
        self.criterion = nn.BCELoss()


def model():
    return GAN()


def optimizer(m):
    return torch.optim.Adam(m.parameters(), lr=0.01, betas=(0.5, 0.999)), None


def loss(m, real, noise):
    label = torch.full((BATCH,), 1.0)
    err_real = m.criterion(m.netD(real), label)
    fake = m.netG(noise)
    err_fake = m.criterion(m.netD(fake.detach()), label * 0.0)
    err_g = m.criterion(m.netD(fake), label)
    return err_real + err_fake + err_g


def batch(rng):
    return {
        "real": rng.uniform(-1, 1, (BATCH, NC, 8, 8)).astype("float32"),
        "noise": rng.standard_normal((BATCH, NZ, 1, 1)).astype("float32"),
    }
