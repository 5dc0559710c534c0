"""Per-channel mean of an NCHW tensor (BatchNorm's statistics): N and H x W are reduced, C lies between
them, so no single loop holds the reduction; it reduces in two stages (farm-reduce-in-stages)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return x.mean(dim=(0, 2, 3))


def get_inputs():
    return [torch.rand(16, 8, 32, 32)]


def get_init_inputs():
    return []
