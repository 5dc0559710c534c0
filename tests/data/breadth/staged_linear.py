"""A Linear (x @ W.T + b) and a GELU: torch-mlir lowers W.T as a linalg.transpose, which ran as a kernel of its
own writing the transposed weight out every forward (level 2's GEMMs: 5-25% of their time, the MLPs'
batch-128 layers more). The staged matmul transposes each K step's tile of W as its threads stage it, and
computes the GELU a row of its register tile at a time (over the whole 8 x 8 tile at once, erf's temporaries
took 164 registers a thread)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(512, 2048)

    def forward(self, x):
        return torch.nn.functional.gelu(self.linear(x))


def get_inputs():
    return [torch.randn(2048, 512)]


def get_init_inputs():
    return []
