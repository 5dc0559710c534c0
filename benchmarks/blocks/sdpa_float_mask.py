import torch
import torch.nn as nn


class Model(nn.Module):
    """scaled_dot_product_attention with an additive float mask (a bias per query and key)."""

    def forward(self, q, k, v, bias):
        return nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=bias)


def get_inputs():
    return [torch.randn(2, 8, 256, 64), torch.randn(2, 8, 256, 64), torch.randn(2, 8, 256, 64), torch.randn(256, 256)]


def get_init_inputs():
    return []
