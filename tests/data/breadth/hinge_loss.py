"""Hinge loss to one value (KernelBench level 1 #100 in small): the targets broadcast along the columns, so
the mean's two loops do not collapse into one; it reduces in two stages (farm-reduce-in-stages)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, predictions, targets):
        return torch.mean(torch.clamp(1 - predictions * targets, min=0))


def get_inputs():
    return [torch.rand(256, 4096), torch.randint(0, 2, (4096,)).float() * 2 - 1]


def get_init_inputs():
    return []
