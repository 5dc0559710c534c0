import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.c = nn.Conv2d(32, 64, 3, padding=1, groups=4)

    def forward(self, x):
        return F.silu(self.c(x))


def get_inputs():
    return [torch.randn(4, 32, 28, 28)]


def get_init_inputs():
    return []
