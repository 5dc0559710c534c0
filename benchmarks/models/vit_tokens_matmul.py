"""A ViT-B MLP's first matmul over 197 tokens (a prime), without bias: 8 images x 197 tokens x 768 -> 3072 (one matmul
of 1576 rows after farm-collapse-contraction-loops).
v0 stages 128x128 blocks of 8x8 per thread, the last block of tokens padded (32x64 blocks of 2x4, masked, before)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x, w):
        return torch.matmul(x, w)


def get_inputs():
    return [torch.randn(8, 197, 768), torch.randn(768, 3072)]


def get_init_inputs():
    return []
