"""A bf16 Linear of 64 rows and a GELU: too few rows for the staged tensor-core tiles of larger matmuls, and
bf16 mma.sync needs staged tiles (no bf16 fragments in convert-vector-to-gpu): v0 takes a small staged one."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.l = nn.Linear(256, 512).to(torch.bfloat16)

    def forward(self, x):
        return F.gelu(self.l(x))


def get_inputs():
    return [torch.randn(64, 256, dtype=torch.bfloat16)]


def get_init_inputs():
    return []
