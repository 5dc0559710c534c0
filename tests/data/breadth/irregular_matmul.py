"""A matmul whose M, N and K (1000, 700, a prime 67) have no divisor near a register-tiled block or K step."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, a, b):
        return torch.matmul(a, b)


def get_inputs():
    return [torch.randn(1000, 67), torch.randn(67, 700)]


def get_init_inputs():
    return []
