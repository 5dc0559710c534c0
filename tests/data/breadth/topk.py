"""torch.topk (5 of 1000 per row): torch-mlir lowers it to tm_tensor ops the compile stage cannot read;
the frontend decomposes it into 5 rounds of max-with-index."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.topk(x, 5, dim=1).values


def get_inputs():
    return [torch.randn(64, 1000)]


def get_init_inputs():
    return []
