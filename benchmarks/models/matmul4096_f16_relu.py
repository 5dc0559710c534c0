"""4096x4096x4096 f16 matmul + ReLU: the matmul target line with an epilogue that the tensor-core
schedule compiles (the plain f16 matmul's lone f32->f16 cast does not yet; tests/test_compile_tensor_core.py)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, a, b):
        return torch.relu(a @ b)


def get_inputs():
    return [torch.randn(4096, 4096, dtype=torch.float16), torch.randn(4096, 4096, dtype=torch.float16)]


def get_init_inputs():
    return []
