"""A ViT MLP's first Linear over 197 tokens (a prime: blocks of one row and one output per thread before),
with its bias."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(256, 2048)

    def forward(self, x):
        return self.fc(x)


def get_inputs():
    return [torch.randn(2, 197, 256)]


def get_init_inputs():
    return []
