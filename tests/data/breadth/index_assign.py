"""x[rows] = values, x[:, cols] = v and x[rows, cols] = v with integer indices (a cache written at given
positions): torch-mlir lowers index_put to tm_tensor.scatter, which nothing here lowers; the frontend makes
each a gather of the last value written to each position (workers/decompositions.py)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x, rows, values, cols):
        x = x.clone()
        x[rows] = values
        x[:, cols] = 0.5
        x[rows[:3], cols] = -1.0
        return x


def get_inputs():
    return [torch.randn(64, 32), torch.tensor([3, 17, 40, -2]), torch.randn(4, 32), torch.tensor([0, 31, 5])]


def get_init_inputs():
    return []
