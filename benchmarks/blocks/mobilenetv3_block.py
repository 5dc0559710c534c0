"""MobileNetV3 inverted residual: 1x1 expand + BN + hardswish, depthwise 5x5 + BN + hardswish,
squeeze-excite with hardsigmoid, 1x1 project + BN, residual (eval)."""
import torch
import torch.nn as nn
import torch.nn.functional as F


def _make_divisible(v, divisor=8):
    new_v = max(divisor, int(v + divisor / 2) // divisor * divisor)
    if new_v < 0.9 * v:
        new_v += divisor
    return new_v


class SqueezeExcitation(nn.Module):
    def __init__(self, ch, squeeze_ch):
        super().__init__()
        self.fc1 = nn.Conv2d(ch, squeeze_ch, 1)
        self.fc2 = nn.Conv2d(squeeze_ch, ch, 1)

    def forward(self, x):
        s = F.adaptive_avg_pool2d(x, 1)
        s = F.relu(self.fc1(s), inplace=True)
        s = F.hardsigmoid(self.fc2(s), inplace=True)
        return s * x


class Model(nn.Module):
    def __init__(self, cin=40, expanded=120, kernel=5):
        super().__init__()
        self.expand = nn.Sequential(nn.Conv2d(cin, expanded, 1, bias=False), nn.BatchNorm2d(expanded),
                                    nn.Hardswish(inplace=True))
        self.dw = nn.Sequential(nn.Conv2d(expanded, expanded, kernel, padding=kernel // 2, groups=expanded,
                                          bias=False),
                                nn.BatchNorm2d(expanded), nn.Hardswish(inplace=True))
        self.se = SqueezeExcitation(expanded, _make_divisible(expanded // 4))
        self.project = nn.Sequential(nn.Conv2d(expanded, cin, 1, bias=False), nn.BatchNorm2d(cin))
        self.eval()

    def forward(self, x):
        y = self.expand(x)
        y = self.dw(y)
        y = self.se(y)
        y = self.project(y)
        return x + y


def get_inputs():
    return [torch.randn(4, 40, 28, 28)]


def get_init_inputs():
    return [40, 120, 5]
