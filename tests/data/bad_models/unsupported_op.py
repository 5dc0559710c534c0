"""A model torch-mlir cannot lower to linalg: an FFT."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.fft.fft(x).real


def get_inputs():
    return [torch.randn(8, 16)]


def get_init_inputs():
    return []
