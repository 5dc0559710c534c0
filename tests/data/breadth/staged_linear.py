"""A Linear (x @ W.T + b) and a ReLU: torch-mlir lowers W.T as a linalg.transpose, which ran as a kernel of its
own writing the transposed weight out every forward (level 2's GEMMs: 5-25% of their time, the MLPs'
batch-128 layers more). The staged matmul transposes each K step's tile of W as its threads stage it."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(1024, 2048)

    def forward(self, x):
        return torch.relu(self.linear(x))


def get_inputs():
    return [torch.randn(512, 1024)]


def get_init_inputs():
    return []
