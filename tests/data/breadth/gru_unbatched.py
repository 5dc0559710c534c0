"""A GRU over one unbatched sequence from a given state: its batch of 1 is folded away before the schedule, which
left rank-reducing inserts of the state (farm-full-rank-inserts)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(16, 24)

    def forward(self, x, h0):
        return self.gru(x, h0)


def get_inputs():
    return [torch.randn(40, 16), torch.randn(1, 24)]


def get_init_inputs():
    return []
