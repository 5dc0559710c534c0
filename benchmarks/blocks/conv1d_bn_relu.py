import torch
import torch.nn as nn



class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.c = nn.Conv1d(16, 32, 5, padding=2)
        self.b = nn.BatchNorm1d(32)

    def forward(self, x):
        return torch.relu(self.b(self.c(x)))


def get_inputs():
    return [torch.randn(8, 16, 128)]


def get_init_inputs():
    return []
