import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):

    def forward(self, x):
        return F.hardswish(x) + F.softplus(x)


def get_inputs():
    return [torch.randn(256, 256)]


def get_init_inputs():
    return []
