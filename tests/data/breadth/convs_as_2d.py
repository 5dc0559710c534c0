"""A 3-D conv of 64 channels with its bias and a ReLU (KernelBench level 2's Conv3d problems in small), a strided
1-D conv and a 3-D transposed conv of stride 1: each lowers as a 2-D conv that v0 takes through img2col
(workers/decompositions.py: conv_as_2d_decomposition), the 3-D ones over their input stacked once per depth tap.
A strided 3-D transposed conv's phases stay 3-D convs."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv3d = nn.Conv3d(8, 64, 3, padding=1, stride=(2, 1, 1))
        self.conv1d = nn.Conv1d(32, 64, 5, stride=2)
        self.up3d = nn.ConvTranspose3d(16, 64, 3, padding=1, bias=False)
        self.up3d_strided = nn.ConvTranspose3d(8, 64, 3, stride=2, padding=1, output_padding=1)

    def forward(self, volume, signal, small):
        return torch.relu(self.conv3d(volume)), self.conv1d(signal), self.up3d(small), self.up3d_strided(volume)


def get_inputs():
    return [torch.randn(2, 8, 10, 16, 16), torch.randn(4, 32, 256), torch.randn(2, 16, 6, 8, 8)]


def get_init_inputs():
    return []
