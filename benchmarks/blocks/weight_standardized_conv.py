import torch
import torch.nn as nn


class Model(nn.Module):
    """BiT's weight-standardized conv: the weights normalized per output channel in forward, then GroupNorm."""

    def __init__(self, cin=64, cout=128):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(cout, cin, 3, 3))
        self.norm = nn.GroupNorm(32, cout)

    def forward(self, x):
        w = self.weight
        mean = w.mean(dim=(1, 2, 3), keepdim=True)
        var = w.var(dim=(1, 2, 3), keepdim=True, unbiased=False)
        w = (w - mean) / torch.sqrt(var + 1e-10)
        return torch.relu(self.norm(nn.functional.conv2d(x, w, padding=1)))


def get_inputs():
    return [torch.randn(8, 64, 56, 56)]


def get_init_inputs():
    return []
