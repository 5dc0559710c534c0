import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.c = nn.Conv1d(32, 64, 3, padding=1)

    def forward(self, x):
        return F.glu(self.c(x), dim=1)


def get_inputs():
    return [torch.randn(4, 32, 100)]


def get_init_inputs():
    return []
