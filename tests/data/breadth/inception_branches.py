"""Two conv branches concatenated along the channels, as GoogleNet's inception blocks and DenseNet's layers
are: 48 and 40 output channels (no multiple of 64). The 1x1 one (a reduction of 32: no img2col) is fused into the
copy that writes its part of the concatenation; v0 computed it one output per thread (GoogleNet's 224x224
inception module 0.22x of eager), now each thread computes 4 channels x 4 neighbouring outputs, as for a conv
fused into a bias. The 3x3 one (a reduction of 288) is an img2col matmul."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.narrow = nn.Conv2d(32, 48, 1)
        self.wide = nn.Conv2d(32, 40, 3, padding=1)

    def forward(self, x):
        return torch.cat([self.narrow(x), self.wide(x)], 1)


def get_inputs():
    return [torch.randn(4, 32, 56, 56)]


def get_init_inputs():
    return []
