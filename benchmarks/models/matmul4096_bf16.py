"""4096x4096x4096 matmul in bfloat16: the issue's matmul target line (peer: torch.matmul, cuBLAS)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, a, b):
        return a @ b


def get_inputs():
    return [torch.randn(4096, 4096, dtype=torch.bfloat16), torch.randn(4096, 4096, dtype=torch.bfloat16)]


def get_init_inputs():
    return []
