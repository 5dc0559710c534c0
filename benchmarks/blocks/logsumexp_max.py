import torch
import torch.nn as nn



class Model(nn.Module):

    def forward(self, x):
        return torch.logsumexp(x, dim=1) + x.max(dim=1).values


def get_inputs():
    return [torch.randn(128, 512)]


def get_init_inputs():
    return []
