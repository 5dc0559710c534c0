"""ConvTranspose2d with kernel 4, stride 2, padding 1 and groups=2."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.t = nn.ConvTranspose2d(cin, cout, 4, stride=2, padding=1, groups=2)

    def forward(self, x):
        return self.t(x)


def get_inputs():
    return [torch.randn(4, 32, 16, 16)]


def get_init_inputs():
    return [32, 16]
