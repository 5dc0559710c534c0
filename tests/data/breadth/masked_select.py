"""x[x > 0]: a result whose shape depends on the values, refused at once, naming the line (torch-mlir's lowering grew past 17 GB)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return x[x > 0]


def get_inputs():
    return [torch.randn(64, 64)]


def get_init_inputs():
    return []
