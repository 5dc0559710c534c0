import torch
import torch.nn as nn


class Model(nn.Module):
    """Conv-TasNet's 1-D block: 1x1 conv, PReLU, global layer norm (over channels and time), a dilated
    depthwise conv, PReLU, 1x1 conv, residual."""

    def __init__(self, channels=128, hidden=256, dilation=4):
        super().__init__()
        self.inp = nn.Conv1d(channels, hidden, 1)
        self.act1, self.act2 = nn.PReLU(), nn.PReLU()
        self.norm1 = nn.GroupNorm(1, hidden)
        self.depthwise = nn.Conv1d(hidden, hidden, 3, padding=dilation, dilation=dilation, groups=hidden)
        self.norm2 = nn.GroupNorm(1, hidden)
        self.out = nn.Conv1d(hidden, channels, 1)

    def forward(self, x):
        y = self.norm1(self.act1(self.inp(x)))
        y = self.norm2(self.act2(self.depthwise(y)))
        return x + self.out(y)


def get_inputs():
    return [torch.randn(4, 128, 2000)]


def get_init_inputs():
    return []
