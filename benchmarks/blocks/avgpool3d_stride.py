"""AvgPool3d with kernel 3, stride 2 and padding 1 on a 5-D tensor."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.p = nn.AvgPool3d(3, stride=2, padding=1)

    def forward(self, x):
        return self.p(x)


def get_inputs():
    return [torch.randn(2, 16, 9, 24, 24)]


def get_init_inputs():
    return []
