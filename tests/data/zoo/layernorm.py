"""LayerNorm over the last dimension (with affine weights)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.norm = nn.LayerNorm(dim)

    def forward(self, x):
        return self.norm(x)


def get_inputs():
    return [torch.randn(512, 1024)]


def get_init_inputs():
    return [1024]
