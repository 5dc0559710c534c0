"""A 512x512 by 512x256 matmul in f32: one 256-column block spans all of its output's columns."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, a, b):
        return a @ b


def get_inputs():
    return [torch.randn(512, 512), torch.randn(512, 256)]


def get_init_inputs():
    return []
