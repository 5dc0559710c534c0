"""Linear + bias + ReLU, then Linear + bias: a two-layer MLP."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, d_in, d_hidden, d_out):
        super().__init__()
        self.fc1 = nn.Linear(d_in, d_hidden)
        self.fc2 = nn.Linear(d_hidden, d_out)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


def get_inputs():
    return [torch.randn(256, 512)]


def get_init_inputs():
    return [512, 1024, 256]
