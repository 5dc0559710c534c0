"""Sum over the last dimension of a 128x256 tensor (KernelBench format)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.sum(x, dim=1)


def get_inputs():
    return [torch.randn(128, 256)]


def get_init_inputs():
    return []
