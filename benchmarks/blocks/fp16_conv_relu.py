import torch
import torch.nn as nn



class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.c = nn.Conv2d(16, 32, 3, padding=1).half()

    def forward(self, x):
        return torch.relu(self.c(x))


def get_inputs():
    return [torch.randn(2, 16, 32, 32, dtype=torch.float16)]


def get_init_inputs():
    return []
