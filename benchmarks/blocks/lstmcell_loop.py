import torch
import torch.nn as nn


class Model(nn.Module):
    """An nn.LSTMCell stepped in a Python loop over 8 steps (a decoder), the last hidden state projected."""

    def __init__(self, inp=64, hidden=128):
        super().__init__()
        self.cell = nn.LSTMCell(inp, hidden)
        self.out = nn.Linear(hidden, 10)

    def forward(self, x, h, c):
        for t in range(x.shape[0]):
            h, c = self.cell(x[t], (h, c))
        return self.out(h)


def get_inputs():
    return [torch.randn(8, 16, 64), torch.zeros(16, 128), torch.zeros(16, 128)]


def get_init_inputs():
    return []
