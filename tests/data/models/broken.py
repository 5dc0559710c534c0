"""A malformed model file: no get_inputs(), so it cannot be loaded (the others in a batch go on)."""
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return x


def get_init_inputs():
    return []
