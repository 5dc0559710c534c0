import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.ConvTranspose3d(32, 16, kernel_size=2, stride=2)
        self.norm = nn.InstanceNorm3d(16)
        self.conv = nn.Conv3d(32, 16, 3, padding=1)

    def forward(self, x, skip):
        x = torch.relu(self.norm(self.up(x)))
        return self.conv(torch.cat([x, skip], dim=1))


def get_inputs():
    return [torch.randn(2, 32, 8, 16, 16), torch.randn(2, 16, 16, 32, 32)]


def get_init_inputs():
    return []
