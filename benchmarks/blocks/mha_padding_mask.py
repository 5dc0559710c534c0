import torch
import torch.nn as nn


class Model(nn.Module):
    """nn.MultiheadAttention (batch first) over padded sequences: a boolean key padding mask per sequence."""

    def __init__(self, dim=256, heads=8):
        super().__init__()
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)

    def forward(self, x, padding):
        out, _ = self.attn(x, x, x, key_padding_mask=padding, need_weights=False)
        return out


def get_inputs():
    padding = torch.zeros(8, 128, dtype=torch.bool)
    padding[:, 100:] = True
    return [torch.randn(8, 128, 256), padding]


def get_init_inputs():
    return []
