"""A dilated, padded conv (KernelBench level 1 #80 in small): img2col takes no dilation, so v0 keeps it direct."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(4, 8, (3, 5), padding=(2, 1), dilation=(2, 3), bias=False)

    def forward(self, x):
        return self.conv(x)


def get_inputs():
    return [torch.randn(2, 4, 32, 32)]


def get_init_inputs():
    return []
