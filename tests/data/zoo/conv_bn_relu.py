"""Conv2d 3x3 (padding 1) + BatchNorm (inference) + ReLU."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, c_in, c_out):
        super().__init__()
        self.conv = nn.Conv2d(c_in, c_out, 3, padding=1)
        self.bn = nn.BatchNorm2d(c_out)

    def forward(self, x):
        return torch.relu(self.bn(self.conv(x)))


def get_inputs():
    return [torch.randn(8, 16, 32, 32)]


def get_init_inputs():
    return [16, 32]
