"""A padded 3-D average pooling (KernelBench level 1 #46 in small) and an unpadded one after a ReLU (level 2's
pools after a transposed 3-D conv): torch-mlir lowered each to pooling_ndhwc_sum between two transposes of the
whole tensor; the frontend makes each a conv of each channel alone with a kernel of 1/27 (1/8), in NCDHW."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.padded = nn.AvgPool3d(3, stride=2, padding=1)
        self.halving = nn.AvgPool3d(2)

    def forward(self, x):
        return self.padded(x), self.halving(torch.relu(x))


def get_inputs():
    return [torch.rand(2, 4, 10, 12, 36)]


def get_init_inputs():
    return []
