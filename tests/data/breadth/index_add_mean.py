"""A GNN's mean aggregation: edge messages summed into their target nodes by index_add and scatter_add
(frontend.index_add_decomposition, scatter_add_decomposition; torch-mlir's own lowering is tm_tensor.scatter)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, messages, targets, degree):
        summed = torch.zeros(degree.shape[0], messages.shape[1]).index_add_(0, targets, messages)
        counted = torch.zeros(degree.shape[0], 1).scatter_add_(0, targets.unsqueeze(1), torch.ones(targets.shape[0], 1))
        return summed / counted.clamp(min=1)


def get_inputs():
    targets = torch.randint(0, 100, (800,))
    return [torch.randn(800, 16), targets, torch.bincount(targets, minlength=100).float()]


def get_init_inputs():
    return []
