import torch
import torch.nn as nn



class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.c = nn.Conv2d(8, 16, 3, stride=2, padding=1)
        self.b = nn.BatchNorm2d(16)

    def forward(self, x):
        return torch.relu(self.b(self.c(x)))


def get_inputs():
    return [torch.randn(8, 8, 32, 32)]


def get_init_inputs():
    return []
