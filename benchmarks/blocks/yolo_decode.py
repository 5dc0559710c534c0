"""YOLOv5-style detection head decode for one level: 1x1 conv, view to (bs, na, ny, nx, no), sigmoid,
xy from grid offsets (torch.meshgrid of arange) and stride, wh as (2*sig)^2 * anchors, cat, flatten."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, nc=20, ch=128, stride=8.0):
        super().__init__()
        self.nc, self.no, self.na = nc, nc + 5, 3
        self.stride = stride
        self.register_buffer("anchors", torch.tensor([[10., 13.], [16., 30.], [33., 23.]]))
        self.m = nn.Conv2d(ch, self.no * self.na, 1)

    def _make_grid(self, nx, ny, device):
        yv, xv = torch.meshgrid(torch.arange(ny, device=device), torch.arange(nx, device=device), indexing="ij")
        grid = torch.stack((xv, yv), 2).view(1, 1, ny, nx, 2).float()
        anchor_grid = self.anchors.view(1, self.na, 1, 1, 2).expand(1, self.na, ny, nx, 2)
        return grid, anchor_grid

    def forward(self, x):
        x = self.m(x)
        bs, _, ny, nx = x.shape
        x = x.view(bs, self.na, self.no, ny, nx).permute(0, 1, 3, 4, 2).contiguous()
        grid, anchor_grid = self._make_grid(nx, ny, x.device)
        y = x.sigmoid()
        xy = (y[..., 0:2] * 2 - 0.5 + grid) * self.stride
        wh = (y[..., 2:4] * 2) ** 2 * anchor_grid
        conf = y[..., 4:]
        y = torch.cat((xy, wh, conf), -1)
        return y.view(bs, -1, self.no)


def get_inputs():
    return [torch.randn(2, 128, 32, 32)]


def get_init_inputs():
    return [20, 128, 8.0]
