"""Conv2d, ReLU and a per-channel bias (KernelBench level 2 #1 in small): a direct conv of 4 output loops."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3)
        self.bias = nn.Parameter(torch.randn(8, 1, 1))

    def forward(self, x):
        return torch.relu(self.conv(x)) + self.bias


def get_inputs():
    return [torch.randn(2, 3, 130, 130)]


def get_init_inputs():
    return []
