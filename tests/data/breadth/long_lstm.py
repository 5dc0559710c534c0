"""A two-layer LSTM over 100 time steps (batch first): torch-mlir would unroll 200 cell steps; the frontend
keeps one time loop per layer (workers/recurrent.py)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(8, 16, num_layers=2, batch_first=True)

    def forward(self, x):
        return self.lstm(x)[0]


def get_inputs():
    return [torch.randn(4, 100, 8)]


def get_init_inputs():
    return []
