"""A reversed cumulative sum (KernelBench level 1 #91 in small): a flip (a gather), then cumsum, which
torch-mlir lowers to tm_tensor.scan; the frontend's scan is shifted copies (concats) and adds."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.cumsum(x.flip(1), dim=1).flip(1)


def get_inputs():
    return [torch.randn(16, 100)]


def get_init_inputs():
    return []
