"""A top-2 mixture-of-experts gate: the top-k weights scattered into a dense matrix (torch-mlir lowered
scatter to tm_tensor.scatter)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, logits):
        probs = torch.softmax(logits, dim=-1)
        weights, experts = torch.topk(probs, 2, dim=-1)
        return torch.zeros_like(probs).scatter(1, experts, weights / weights.sum(-1, keepdim=True))


def get_inputs():
    return [torch.randn(256, 8)]


def get_init_inputs():
    return []
