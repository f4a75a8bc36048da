"""A transformer network in the style of PyTorch's fast_neural_style example: reflection
padded convolutions, instance norms with affine parameters, residual blocks, nearest
upsampling through F.interpolate; trained on a content loss plus a Gram-matrix style
loss, as the example's loop does (its VGG features replaced by the images themselves)."""

import torch
import torch.nn.functional as F

BATCH, SIDE = 2, 8
INPUTS = {"x": (BATCH, 3, SIDE, SIDE), "style": (1, 3, SIDE, SIDE)}


class ConvLayer(torch.nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride):
        super(ConvLayer, self).__init__()
        self.reflection_pad = torch.nn.ReflectionPad2d(kernel_size // 2)
        self.conv2d = torch.nn.Conv2d(in_channels, out_channels, kernel_size, stride)

    def forward(self, x):
        return self.conv2d(self.reflection_pad(x))


class ResidualBlock(torch.nn.Module):
    def __init__(self, channels):
        super(ResidualBlock, self).__init__()
        self.conv1 = ConvLayer(channels, channels, kernel_size=3, stride=1)
        self.in1 = torch.nn.InstanceNorm2d(channels, affine=True)
        self.conv2 = ConvLayer(channels, channels, kernel_size=3, stride=1)
        self.in2 = torch.nn.InstanceNorm2d(channels, affine=True)
        self.relu = torch.nn.ReLU()

    def forward(self, x):
        residual = x
        out = self.relu(self.in1(self.conv1(x)))
        out = self.in2(self.conv2(out))
        return out + residual


class UpsampleConvLayer(torch.nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride, upsample=None):
        super(UpsampleConvLayer, self).__init__()
        self.upsample = upsample
        self.reflection_pad = torch.nn.ReflectionPad2d(kernel_size // 2)
        self.conv2d = torch.nn.Conv2d(in_channels, out_channels, kernel_size, stride)

    def forward(self, x):
        if self.upsample:
            x = torch.nn.functional.interpolate(x, mode="nearest", scale_factor=self.upsample)
        return self.conv2d(self.reflection_pad(x))


class TransformerNet(torch.nn.Module):
    def __init__(self):
        super(TransformerNet, self).__init__()
        self.conv1 = ConvLayer(3, 4, kernel_size=5, stride=1)
        self.in1 = torch.nn.InstanceNorm2d(4, affine=True)
        self.conv2 = ConvLayer(4, 8, kernel_size=3, stride=2)
        self.in2 = torch.nn.InstanceNorm2d(8, affine=True)
        self.res1 = ResidualBlock(8)
        self.res2 = ResidualBlock(8)
        self.deconv1 = UpsampleConvLayer(8, 4, kernel_size=3, stride=1, upsample=2)
        self.in3 = torch.nn.InstanceNorm2d(4, affine=True)
        self.deconv2 = ConvLayer(4, 3, kernel_size=5, stride=1)
        self.relu = torch.nn.ReLU()

    def forward(self, X):
        y = self.relu(self.in1(self.conv1(X)))
        y = self.relu(self.in2(self.conv2(y)))
        y = self.res2(self.res1(y))
        y = self.relu(self.in3(self.deconv1(y)))
        return self.deconv2(y)


def gram_matrix(y):
    (b, ch, h, w) = y.size()
    features = y.view(b, ch, w * h)
    features_t = features.transpose(1, 2)
    return features.bmm(features_t) / (ch * h * w)


def model():
    return TransformerNet()


def optimizer(m):
    return torch.optim.Adam(m.parameters(), lr=1e-3), None


def loss(m, x, style):
    y = m(x)
    content_loss = F.mse_loss(y, x)
    gram_style = gram_matrix(style)
    style_loss = F.mse_loss(gram_matrix(y), gram_style.expand(BATCH, 3, 3))
    return content_loss + 10.0 * style_loss


def batch(rng):
    return {
        "x": rng.uniform(0, 1, (BATCH, 3, SIDE, SIDE)).astype("float32"),
        "style": rng.uniform(0, 1, (1, 3, SIDE, SIDE)).astype("float32"),
    }
