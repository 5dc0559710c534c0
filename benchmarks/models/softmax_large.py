"""Softmax over the last dimension of 8192x8192 f32 (256 MB): memory-bound target line."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=-1)


def get_inputs():
    return [torch.randn(8192, 8192)]


def get_init_inputs():
    return []
