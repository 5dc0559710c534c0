"""Half-precision matmul + ReLU: its tolerance is the f16 mode's."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, a, b):
        return torch.relu(a @ b)


def get_inputs():
    return [torch.randn(256, 512, dtype=torch.float16), torch.randn(512, 256, dtype=torch.float16)]


def get_init_inputs():
    return []
