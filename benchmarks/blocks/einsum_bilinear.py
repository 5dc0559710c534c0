import torch
import torch.nn as nn



class Model(nn.Module):

    def forward(self, a, b, w):
        return torch.einsum('bi,oij,bj->bo', a, w, b)


def get_inputs():
    return [torch.randn(32, 16), torch.randn(32, 24), torch.randn(8, 16, 24)]


def get_init_inputs():
    return []
