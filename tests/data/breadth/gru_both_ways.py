"""A bidirectional two-layer GRU from a given initial state, returning its final hidden states (KernelBench
level 3 #42 in small): four time loops, two of them running backwards."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(6, 12, num_layers=2, bidirectional=True)
        self.h0 = torch.randn(4, 3, 12)

    def forward(self, x):
        return self.gru(x, self.h0)[1]


def get_inputs():
    return [torch.randn(20, 3, 6)]


def get_init_inputs():
    return []
