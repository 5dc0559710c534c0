"""DenseNet dense block of two bottleneck layers (BN-ReLU-Conv1x1-BN-ReLU-Conv3x3, eval), each
concatenating its new features onto its input with torch.cat."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class DenseLayer(nn.Module):
    def __init__(self, cin, growth, bn_size=4):
        super().__init__()
        self.norm1 = nn.BatchNorm2d(cin)
        self.conv1 = nn.Conv2d(cin, bn_size * growth, 1, bias=False)
        self.norm2 = nn.BatchNorm2d(bn_size * growth)
        self.conv2 = nn.Conv2d(bn_size * growth, growth, 3, padding=1, bias=False)

    def forward(self, features):
        x = torch.cat(features, 1)
        x = self.conv1(F.relu(self.norm1(x)))
        return self.conv2(F.relu(self.norm2(x)))


class Model(nn.Module):
    def __init__(self, cin=64, growth=32, layers=2):
        super().__init__()
        self.layers = nn.ModuleList([DenseLayer(cin + i * growth, growth) for i in range(layers)])
        self.eval()

    def forward(self, x):
        features = [x]
        for layer in self.layers:
            features.append(layer(features))
        return torch.cat(features, 1)


def get_inputs():
    return [torch.randn(4, 64, 32, 32)]


def get_init_inputs():
    return [64, 32, 2]
