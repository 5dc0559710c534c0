import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.c = nn.Conv2d(8, 8, 3)

    def forward(self, x):
        return self.c(F.pad(x, (1, 1, 1, 1), mode='reflect'))


def get_inputs():
    return [torch.randn(2, 8, 32, 32)]


def get_init_inputs():
    return []
