"""A 3-D tensor times a matrix (KernelBench level 1 #10 in small): farm-collapse-contraction-loops makes it one
matmul of 8 x 512 rows, whose result the model's 3-D output reads through a reshape."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, a, b):
        return torch.matmul(a, b)


def get_inputs():
    return [torch.randn(8, 512, 512), torch.randn(512, 1024)]


def get_init_inputs():
    return []
