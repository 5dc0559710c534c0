"""Linears whose weight is square like their output (KernelBench level 3's DeepNarrowMLP: 1024 x 1024 layers
over 1024 rows): torch-mlir's CSE gives the weight's transpose and the layer's output one tensor.empty, and
the staged matmul's per-K-step transpose of the weight then wrote into a slice of its own output, which
bufferization copied into a private scratch tile per thread (8 KB of stack, 92 s of ptxas, a kernel that
timed out on the GPU)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 1024))

    def forward(self, x):
        return self.layers(x)


def get_inputs():
    return [torch.randn(1024, 1024)]


def get_init_inputs():
    return []
