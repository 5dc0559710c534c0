"""A depthwise 3x3 conv on its own (KernelBench level 1 #82 in small): linalg's depthwise_conv_2d_nchw_chw
runs its loops (n, oh, ow, c) while its output is NCHW, so threads belong along ow, not c."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(16, 16, 3, padding=1, groups=16, bias=False)

    def forward(self, x):
        return self.conv(x)


def get_inputs():
    return [torch.randn(2, 16, 64, 64)]


def get_init_inputs():
    return []
