"""Conv3d (3x3x3, padding 1) followed by ReLU on a small video-like volume."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.c = nn.Conv3d(cin, cout, 3, padding=1)

    def forward(self, x):
        return torch.relu(self.c(x))


def get_inputs():
    return [torch.randn(2, 8, 8, 16, 16)]


def get_init_inputs():
    return [8, 16]
