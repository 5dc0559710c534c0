"""A model whose output is a strided view of a larger tensor (KernelBench level 3 #49's final state, in
small): bufferization would copy it on the host; a copy kernel writes it instead."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)[:, 1]


def get_inputs():
    return [torch.randn(16, 3, 64)]


def get_init_inputs():
    return []
