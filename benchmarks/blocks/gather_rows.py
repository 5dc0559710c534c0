import torch
import torch.nn as nn



class Model(nn.Module):

    def forward(self, x, idx):
        return torch.gather(x, 1, idx)


def get_inputs():
    return [torch.randn(32, 100), torch.randint(0, 100, (32, 10))]


def get_init_inputs():
    return []
