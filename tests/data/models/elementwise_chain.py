"""relu(x * 2 + 1) over a 256x256 tensor (KernelBench format)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x * 2.0 + 1.0)


def get_inputs():
    return [torch.randn(256, 256)]


def get_init_inputs():
    return []
