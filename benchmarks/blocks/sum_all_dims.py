import torch
import torch.nn as nn



class Model(nn.Module):

    def forward(self, x):
        return x.sum() / x.abs().max()


def get_inputs():
    return [torch.randn(33, 65, 17)]


def get_init_inputs():
    return []
