"""UNet decoder step: ConvTranspose2d 2x upsample, concat with a skip tensor, Conv2d 3x3 + ReLU."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, cin, cskip, cout):
        super().__init__()
        self.up = nn.ConvTranspose2d(cin, cin // 2, 2, stride=2)
        self.c = nn.Conv2d(cin // 2 + cskip, cout, 3, padding=1)

    def forward(self, x, skip):
        y = torch.cat([self.up(x), skip], dim=1)
        return torch.relu(self.c(y))


def get_inputs():
    return [torch.randn(2, 64, 16, 16), torch.randn(2, 32, 32, 32)]


def get_init_inputs():
    return [64, 32, 32]
