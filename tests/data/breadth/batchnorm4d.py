"""BatchNorm2d over NCHW (KernelBench level 1 #33 in small): an elementwise op of four parallel loops."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.bn = nn.BatchNorm2d(8)

    def forward(self, x):
        return self.bn(x)


def get_inputs():
    return [torch.randn(2, 8, 8, 512)]


def get_init_inputs():
    return []
