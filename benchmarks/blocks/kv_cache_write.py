import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, heads=8, dim=64, max_len=256):
        super().__init__()
        self.register_buffer("k_cache", torch.zeros(heads, max_len, dim))
        self.register_buffer("v_cache", torch.zeros(heads, max_len, dim))

    def forward(self, q, k, v, positions):
        k_cache, v_cache = self.k_cache.clone(), self.v_cache.clone()
        k_cache[:, positions] = k
        v_cache[:, positions] = v
        scores = q @ k_cache.transpose(-1, -2) / 8.0
        return torch.softmax(scores, dim=-1) @ v_cache


def get_inputs():
    return [torch.randn(8, 16, 64), torch.randn(8, 16, 64), torch.randn(8, 16, 64), torch.arange(100, 116)]


def get_init_inputs():
    return []
