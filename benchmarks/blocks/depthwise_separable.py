import torch
import torch.nn as nn



class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.d = nn.Conv2d(16, 16, 3, padding=1, groups=16)
        self.p = nn.Conv2d(16, 32, 1)

    def forward(self, x):
        return self.p(torch.relu(self.d(x)))


def get_inputs():
    return [torch.randn(2, 16, 32, 32)]


def get_init_inputs():
    return []
