import torch
import torch.nn as nn


class Model(nn.Module):
    """A ResNeXt bottleneck: 1x1, grouped 3x3 (32 groups), 1x1, BatchNorms, ReLU, identity residual."""

    def __init__(self, channels=256, width=128, groups=32):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(channels, width, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(),
            nn.Conv2d(width, width, 3, padding=1, groups=groups, bias=False), nn.BatchNorm2d(width), nn.ReLU(),
            nn.Conv2d(width, channels, 1, bias=False), nn.BatchNorm2d(channels))

    def forward(self, x):
        return torch.relu(x + self.body(x))


def get_inputs():
    return [torch.randn(8, 256, 28, 28)]


def get_init_inputs():
    return []
