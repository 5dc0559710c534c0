"""MaxPool3d with kernel 2 and stride 2 on a 5-D tensor."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.p = nn.MaxPool3d(2, 2)

    def forward(self, x):
        return self.p(x)


def get_inputs():
    return [torch.randn(2, 16, 8, 32, 32)]


def get_init_inputs():
    return []
