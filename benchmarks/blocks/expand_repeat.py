import torch
import torch.nn as nn



class Model(nn.Module):

    def forward(self, x):
        return x.unsqueeze(1).expand(-1, 4, -1).reshape(-1, 32) + x.repeat(4, 1)


def get_inputs():
    return [torch.randn(16, 32)]


def get_init_inputs():
    return []
