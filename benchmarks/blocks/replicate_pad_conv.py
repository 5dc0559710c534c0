import torch
import torch.nn as nn


class Model(nn.Module):
    """A conv with replicate padding (edges repeated), as image-restoration networks pad."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(32, 32, 3, padding=1, padding_mode="replicate")

    def forward(self, x):
        return torch.relu(self.conv(x))


def get_inputs():
    return [torch.randn(4, 32, 96, 96)]


def get_init_inputs():
    return []
