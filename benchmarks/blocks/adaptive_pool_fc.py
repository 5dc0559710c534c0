import torch
import torch.nn as nn



class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.p = nn.AdaptiveAvgPool2d((1, 1))
        self.f = nn.Linear(64, 10)

    def forward(self, x):
        return self.f(torch.flatten(self.p(x), 1))


def get_inputs():
    return [torch.randn(8, 64, 7, 7)]


def get_init_inputs():
    return []
