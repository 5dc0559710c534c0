"""ResNet-style Conv2d 3x3 (64 -> 64 channels, padding 1) on a batch of 32 56x56 images: conv target line (peer: cuDNN through torch)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, padding=1, bias=False)

    def forward(self, x):
        return self.conv(x)


def get_inputs():
    return [torch.randn(32, 64, 56, 56)]


def get_init_inputs():
    return [64]
