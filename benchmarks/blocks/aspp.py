import torch
import torch.nn as nn


class Model(nn.Module):
    """DeepLab's ASPP: atrous 3x3 convs at rates 6, 12 and 18 beside a 1x1 conv and image pooling, concat,
    a 1x1 projection."""

    def __init__(self, cin=256, cout=64):
        super().__init__()
        self.branches = nn.ModuleList([nn.Conv2d(cin, cout, 1)] +
                                      [nn.Conv2d(cin, cout, 3, padding=r, dilation=r) for r in (6, 12, 18)])
        self.image = nn.Conv2d(cin, cout, 1)
        self.project = nn.Conv2d(5 * cout, cout, 1)

    def forward(self, x):
        pooled = self.image(x.mean(dim=(2, 3), keepdim=True)).expand(-1, -1, x.shape[2], x.shape[3])
        return torch.relu(self.project(torch.cat([*(torch.relu(b(x)) for b in self.branches), pooled], 1)))


def get_inputs():
    return [torch.randn(2, 256, 33, 33)]


def get_init_inputs():
    return []
