import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(512, 1024)
        self.act = nn.RReLU()
        self.drop = nn.AlphaDropout(0.1)
        self.fc2 = nn.Linear(1024, 256)

    def forward(self, x):
        return self.fc2(self.drop(self.act(self.fc1(x))))


def get_inputs():
    return [torch.randn(64, 512)]


def get_init_inputs():
    return []
