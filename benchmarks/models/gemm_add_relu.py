"""An f32 Linear without bias, a bias add and a ReLU at KernelBench level 2's GEMM size (1024 x 8192 ->
8192): the matmul fused into its elementwise epilogue."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.gemm = nn.Linear(8192, 8192, bias=False)
        self.bias = nn.Parameter(torch.randn(8192))

    def forward(self, x):
        return torch.relu(self.gemm(x) + self.bias)


def get_inputs():
    return [torch.rand(1024, 8192)]


def get_init_inputs():
    return []
