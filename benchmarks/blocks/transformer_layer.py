import torch
import torch.nn as nn



class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.t = nn.TransformerEncoderLayer(128, 4, 256, batch_first=True, dropout=0.0)

    def forward(self, x):
        return self.t(x)


def get_inputs():
    return [torch.randn(2, 32, 128)]


def get_init_inputs():
    return []
