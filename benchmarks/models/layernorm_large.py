"""LayerNorm (affine) over the last dimension of 8192x8192 f32 (256 MB): memory-bound target line."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.norm = nn.LayerNorm(dim)

    def forward(self, x):
        return self.norm(x)


def get_inputs():
    return [torch.randn(8192, 8192)]


def get_init_inputs():
    return [8192]
