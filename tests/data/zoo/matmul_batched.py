"""Batched matmul: torch.bmm over 16 pairs of 256x128 @ 128x256."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, a, b):
        return torch.bmm(a, b)


def get_inputs():
    return [torch.randn(16, 256, 128), torch.randn(16, 128, 256)]


def get_init_inputs():
    return []
