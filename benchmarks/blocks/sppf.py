import torch
import torch.nn as nn


class Model(nn.Module):
    """YOLOv5's SPPF: a 1x1 conv, three chained 5x5 stride-1 max pools, their concat, a 1x1 conv (SiLU)."""

    def __init__(self, cin=256, cout=256):
        super().__init__()
        hidden = cin // 2
        self.cv1 = nn.Conv2d(cin, hidden, 1)
        self.cv2 = nn.Conv2d(hidden * 4, cout, 1)
        self.pool = nn.MaxPool2d(5, stride=1, padding=2)

    def forward(self, x):
        x = nn.functional.silu(self.cv1(x))
        y1 = self.pool(x)
        y2 = self.pool(y1)
        return nn.functional.silu(self.cv2(torch.cat([x, y1, y2, self.pool(y2)], 1)))


def get_inputs():
    return [torch.randn(4, 256, 20, 20)]


def get_init_inputs():
    return []
