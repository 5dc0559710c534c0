import torch
import torch.nn as nn



class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.n = nn.LayerNorm(256).to(torch.bfloat16)
        self.l = nn.Linear(256, 256).to(torch.bfloat16)

    def forward(self, x):
        return x + self.l(self.n(x))


def get_inputs():
    return [torch.randn(128, 256, dtype=torch.bfloat16)]


def get_init_inputs():
    return []
