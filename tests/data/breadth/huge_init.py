"""A model whose weights alone need about 4 GB: its lowering passes a 1 GB memory limit."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(32768, 32768))

    def forward(self, x):
        return x @ self.weight


def get_inputs():
    return [torch.randn(4, 32768)]


def get_init_inputs():
    return []
