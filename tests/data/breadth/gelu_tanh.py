"""Linear then tanh-GELU in fp32 (wrong on the H200 before: x ** 3 called __nv_powif with a .b64 exponent)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(64, 128)

    def forward(self, x):
        return nn.functional.gelu(self.fc(x), approximate="tanh")


def get_inputs():
    return [torch.randn(32, 64)]


def get_init_inputs():
    return []
