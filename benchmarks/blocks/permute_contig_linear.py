import torch
import torch.nn as nn



class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.l = nn.Linear(16, 16)

    def forward(self, x):
        return self.l(x.permute(0, 2, 3, 1).contiguous()).permute(0, 3, 1, 2)


def get_inputs():
    return [torch.randn(2, 16, 8, 8)]


def get_init_inputs():
    return []
