"""Transposed convs of stride > 1, in small: a 2-D upsampling by 2 with output padding (KernelBench level 2's
decoders, a U-Net), a grouped 3-D one with an asymmetric kernel, and a dilated 1-D one whose every other
output phase no tap reaches (level 1 #79). Each lowers as one conv per output phase and an interleave, not
as a conv over an input with zeros inserted (workers/decompositions.py)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.up2d = nn.ConvTranspose2d(16, 32, 3, stride=2, padding=1, output_padding=1)
        self.up3d = nn.ConvTranspose3d(8, 8, (3, 4, 5), stride=2, padding=(1, 1, 2), groups=2)
        self.up1d = nn.ConvTranspose1d(16, 16, 3, stride=2, padding=1, dilation=2, bias=False)

    def forward(self, image, volume, signal):
        return torch.relu(self.up2d(image)), self.up3d(volume) * 0.5, self.up1d(signal)


def get_inputs():
    return [torch.randn(4, 16, 30, 30), torch.randn(2, 8, 6, 7, 8), torch.randn(4, 16, 2048)]


def get_init_inputs():
    return []
