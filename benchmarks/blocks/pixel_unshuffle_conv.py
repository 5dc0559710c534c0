"""pixel_unshuffle by 2 (space-to-depth) followed by a 1x1 Conv2d."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.c = nn.Conv2d(cin * 4, cout, 1)

    def forward(self, x):
        return self.c(F.pixel_unshuffle(x, 2))


def get_inputs():
    return [torch.randn(4, 16, 32, 32)]


def get_init_inputs():
    return [16, 32]
