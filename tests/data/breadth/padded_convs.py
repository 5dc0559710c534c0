"""A transposed conv to 34 x 34 pixels (1156: no multiple of 64), then a 3x3 conv padded by 1, 64 channels each
(KernelBench level 1 #57 and the convs of level 3's networks, in small): v0 took one output per thread for both,
the padded conv because its input's padding copy was fused into it. Both run through img2col now, 8 channels x
a run of pixels per thread, the padding and the transposed conv's flipped weights kernels of their own."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.ConvTranspose2d(16, 64, 3, bias=False)
        self.conv = nn.Conv2d(64, 64, 3, padding=1)

    def forward(self, x):
        return self.conv(torch.relu(self.up(x)))


def get_inputs():
    return [torch.randn(2, 16, 32, 32)]


def get_init_inputs():
    return []
