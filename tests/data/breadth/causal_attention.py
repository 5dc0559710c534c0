"""Causal self-attention as minGPT writes it (KernelBench level 3 #43 in small): the softmax over the masked
4-D scores [batch, heads, rows, columns] is one row kernel of three dims of rows; the mask over fewer dims
([1, 1, rows, columns]) is a kernel of its own that the row kernel reads."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("bias", torch.tril(torch.ones(256, 256)).view(1, 1, 256, 256))

    def forward(self, q, k, v):
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias == 0, float("-inf"))
        return F.softmax(att, dim=-1) @ v


def get_inputs():
    return [torch.randn(4, 4, 256, 64), torch.randn(4, 4, 256, 64), torch.randn(4, 4, 256, 64)]


def get_init_inputs():
    return []
