"""A depthwise 3x3 conv of KernelBench's shape (level 1 #82: 16 x 64 x 512 x 512, no padding; peer: cuDNN)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(64, 64, 3, groups=64, bias=False)

    def forward(self, x):
        return self.conv(x)


def get_inputs():
    return [torch.randn(16, 64, 512, 512)]


def get_init_inputs():
    return []
