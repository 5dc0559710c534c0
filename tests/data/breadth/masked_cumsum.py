"""A cumsum of x where a bool mask holds (KernelBench level 1 #93 in small): the mask is an input, a byte per
element in torch's memory, which the kernels must read as bytes."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x, mask):
        return torch.cumsum(x * mask, dim=1)


def get_inputs():
    x = torch.rand(64, 256)
    return [x, torch.randint(0, 2, x.shape).bool()]


def get_init_inputs():
    return []
