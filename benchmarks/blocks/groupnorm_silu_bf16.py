"""GroupNorm with 8 groups followed by SiLU, all in bfloat16."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.n = nn.GroupNorm(8, c).to(torch.bfloat16)

    def forward(self, x):
        return F.silu(self.n(x))


def get_inputs():
    return [torch.randn(4, 64, 32, 32, dtype=torch.bfloat16)]


def get_init_inputs():
    return [64]
