import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.up1 = nn.ConvTranspose2d(128, 64, 4, stride=2, padding=1)
        self.up2 = nn.ConvTranspose2d(64, 32, 4, stride=2, padding=1)
        self.out = nn.ConvTranspose2d(32, 3, 3, stride=2, padding=1, output_padding=1)

    def forward(self, z):
        x = torch.relu(self.up1(z))
        x = torch.relu(self.up2(x))
        return torch.sigmoid(self.out(x))


def get_inputs():
    return [torch.randn(8, 128, 16, 16)]


def get_init_inputs():
    return []
