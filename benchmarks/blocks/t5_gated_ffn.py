import math

import torch
import torch.nn as nn


class Model(nn.Module):
    """T5 v1.1's layer: RMS LayerNorm (no mean, no bias), gated-GELU feed-forward ("gelu_new"), residual."""

    def __init__(self, d_model=512, d_ff=1024):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d_model))
        self.wi_0 = nn.Linear(d_model, d_ff, bias=False)
        self.wi_1 = nn.Linear(d_model, d_ff, bias=False)
        self.wo = nn.Linear(d_ff, d_model, bias=False)

    def forward(self, x):
        variance = x.pow(2).mean(-1, keepdim=True)
        h = self.weight * (x * torch.rsqrt(variance + 1e-6))
        g = self.wi_0(h)
        gelu = 0.5 * g * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (g + 0.044715 * torch.pow(g, 3.0))))
        return x + self.wo(gelu * self.wi_1(h))


def get_inputs():
    return [torch.randn(8, 128, 512)]


def get_init_inputs():
    return []
