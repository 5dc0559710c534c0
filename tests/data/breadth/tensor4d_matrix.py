"""A 4-D tensor times a matrix by einsum (KernelBench level 1 #11 in small): torch-mlir's batch_matmul of one
batch, then a transpose that moves only a dim of 1."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, a, b):
        return torch.einsum("bijl,lk->bijk", a, b)


def get_inputs():
    return [torch.randn(2, 16, 32, 64), torch.randn(64, 96)]


def get_init_inputs():
    return []
