import torch
import torch.nn as nn



class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.m = nn.MultiheadAttention(128, 4, batch_first=True)

    def forward(self, x):
        return self.m(x, x, x)[0]


def get_inputs():
    return [torch.randn(2, 64, 128)]


def get_init_inputs():
    return []
