"""A 3-D conv and a ReLU (KernelBench level 2's Conv3d problems in small), which img2col does not take: each
thread computes 4 output channels x 4 neighbouring outputs in registers (templates.direct_conv_tiles)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv3d(8, 16, 3, padding=1)

    def forward(self, x):
        return torch.relu(self.conv(x))


def get_inputs():
    return [torch.randn(2, 8, 16, 32, 32)]


def get_init_inputs():
    return []
