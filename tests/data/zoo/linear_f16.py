"""nn.Linear in f16: x @ W^T on tensor cores, W read in its own (out, in) layout."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, d_in, d_out):
        super().__init__()
        self.fc = nn.Linear(d_in, d_out, bias=False).half()

    def forward(self, x):
        return self.fc(x)


def get_inputs():
    return [torch.randn(512, 1024).half()]


def get_init_inputs():
    return [1024, 2048]
