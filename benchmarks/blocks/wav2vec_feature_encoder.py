import torch
import torch.nn as nn


class Model(nn.Module):
    """wav2vec 2.0's first feature-encoder layers: strided 1-D convs on raw audio, GroupNorm, GELU."""

    def __init__(self, channels=512):
        super().__init__()
        self.conv0 = nn.Conv1d(1, channels, 10, stride=5, bias=False)
        self.norm0 = nn.GroupNorm(channels, channels)
        self.conv1 = nn.Conv1d(channels, channels, 3, stride=2, bias=False)

    def forward(self, wav):
        x = nn.functional.gelu(self.norm0(self.conv0(wav.unsqueeze(1))))
        return nn.functional.gelu(self.conv1(x))


def get_inputs():
    return [torch.randn(4, 16000)]


def get_init_inputs():
    return []
