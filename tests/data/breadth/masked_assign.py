"""A GCN's degree normalization: d[torch.isinf(d)] = 0 (index_put with a boolean mask: torch-mlir lowered it
through nonzero, a tm_tensor.scan)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, adjacency, x):
        d = adjacency.sum(-1).pow(-0.5)
        d[torch.isinf(d)] = 0.0
        return d.unsqueeze(-1) * (adjacency @ (d.unsqueeze(-1) * x))


def get_inputs():
    adjacency = (torch.rand(128, 128) > 0.9).float()
    adjacency[:8] = 0.0  # isolated nodes: degree 0, d = inf
    return [adjacency, torch.randn(128, 16)]


def get_init_inputs():
    return []
