import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, p=0.9, temperature=0.8):
        super().__init__()
        self.p, self.temperature = p, temperature

    def forward(self, logits):
        sorted_logits, sorted_idx = torch.sort(logits / self.temperature, dim=-1, descending=True)
        cumulative = torch.cumsum(torch.softmax(sorted_logits, dim=-1), dim=-1)
        remove = cumulative - torch.softmax(sorted_logits, dim=-1) > self.p
        sorted_logits = sorted_logits.masked_fill(remove, float("-inf"))
        return torch.softmax(sorted_logits, dim=-1), sorted_idx


def get_inputs():
    return [torch.randn(8, 32000)]


def get_init_inputs():
    return []
