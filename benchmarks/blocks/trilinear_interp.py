"""F.interpolate trilinear 2x upsampling of a 5-D tensor with align_corners=False."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):

    def forward(self, x):
        return F.interpolate(x, scale_factor=2, mode="trilinear", align_corners=False)


def get_inputs():
    return [torch.randn(2, 8, 6, 12, 12)]


def get_init_inputs():
    return []
