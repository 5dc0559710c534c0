"""Linear then GroupNorm (KernelBench level 2 #37 in small): GroupNorm's default decomposition ends in
as_strided, which torch-mlir imports as gathers with an index tensor the size of the output."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(32, 64)
        self.norm = nn.GroupNorm(8, 64)

    def forward(self, x):
        return self.norm(self.fc(x))


def get_inputs():
    return [torch.randn(16, 32)]


def get_init_inputs():
    return []
