"""CrossEntropyLoss with label_smoothing=0.1 on logits and integer class targets."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.l = nn.CrossEntropyLoss(label_smoothing=0.1)

    def forward(self, x, t):
        return self.l(x, t)


def get_inputs():
    return [torch.randn(64, 100), torch.randint(0, 100, (64,))]


def get_init_inputs():
    return []
