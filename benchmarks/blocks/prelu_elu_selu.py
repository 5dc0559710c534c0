"""Per-channel PReLU, then ELU, then SELU applied in a chain."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.p = nn.PReLU(c, init=0.1)
        self.e = nn.ELU(alpha=0.5)
        self.s = nn.SELU()

    def forward(self, x):
        return self.s(self.e(self.p(x)))


def get_inputs():
    return [torch.randn(4, 32, 24, 24)]


def get_init_inputs():
    return [32]
