"""A constant tensor made in forward (non-splat: torch-mlir writes it as a dense_resource blob) scales the columns."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return x * torch.tensor([0.5, 2.0, -1.0, 4.0])


def get_inputs():
    return [torch.randn(32, 4)]


def get_init_inputs():
    return []
