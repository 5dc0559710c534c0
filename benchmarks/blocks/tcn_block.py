"""TCN temporal block: two dilated causal Conv1d (pad both sides, then chomp the tail), ReLU,
1x1 downsample on the residual, final ReLU."""
import torch
import torch.nn as nn


class Chomp1d(nn.Module):
    def __init__(self, chomp):
        super().__init__()
        self.chomp = chomp

    def forward(self, x):
        return x[:, :, :-self.chomp].contiguous()


class Model(nn.Module):
    def __init__(self, cin=32, cout=64, kernel=3, dilation=4):
        super().__init__()
        pad = (kernel - 1) * dilation
        self.net = nn.Sequential(
            nn.Conv1d(cin, cout, kernel, padding=pad, dilation=dilation), Chomp1d(pad), nn.ReLU(),
            nn.Conv1d(cout, cout, kernel, padding=pad, dilation=dilation), Chomp1d(pad), nn.ReLU())
        self.downsample = nn.Conv1d(cin, cout, 1)
        self.relu = nn.ReLU()

    def forward(self, x):
        return self.relu(self.net(x) + self.downsample(x))


def get_inputs():
    return [torch.randn(4, 32, 256)]


def get_init_inputs():
    return [32, 64, 3, 4]
