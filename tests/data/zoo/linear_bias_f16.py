"""nn.Linear in f16 with its bias: torch's addmm extends x and W^T to f32 before the matmul; narrowed
back (mlir.narrow_matmul_operands), one tensor-core kernel reads x, W and the bias as the model holds them."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, d_in, d_out):
        super().__init__()
        self.fc = nn.Linear(d_in, d_out).half()

    def forward(self, x):
        return self.fc(x)


def get_inputs():
    return [torch.randn(512, 1024).half()]


def get_init_inputs():
    return [1024, 2048]
