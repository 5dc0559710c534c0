"""A top-p sampler's deterministic half over a vocabulary of 6,000 (an LLM head, in small): the logits sorted, their
probabilities summed in that order, the tokens past p masked. Rows past 4096 sort by a bitonic network
(workers/decompositions.py; the rank sort compares every pair of a row)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, logits):
        ordered, tokens = torch.sort(logits, dim=-1, descending=True)
        kept = torch.cumsum(torch.softmax(ordered, dim=-1), dim=-1) <= 0.9
        return torch.where(kept, ordered, torch.full_like(ordered, -1e4)), tokens


def get_inputs():
    return [torch.randn(4, 6000)]


def get_init_inputs():
    return []
