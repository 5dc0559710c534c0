"""Swin-style shifted window attention: torch.roll shift, partition into 7x7 windows with view/permute,
multi-head attention with a relative position bias gathered from a table by a fixed index buffer,
merge windows back and roll back. (No attention mask for the shifted windows, to keep it short.)"""
import torch
import torch.nn as nn


def window_partition(x, ws):
    B, H, W, C = x.shape
    x = x.view(B, H // ws, ws, W // ws, ws, C)
    return x.permute(0, 1, 3, 2, 4, 5).contiguous().view(-1, ws * ws, C)


def window_reverse(windows, ws, H, W):
    B = int(windows.shape[0] / (H * W / ws / ws))
    x = windows.view(B, H // ws, W // ws, ws, ws, -1)
    return x.permute(0, 1, 3, 2, 4, 5).contiguous().view(B, H, W, -1)


class Model(nn.Module):
    def __init__(self, dim=96, heads=3, window=7, shift=3):
        super().__init__()
        self.dim, self.heads, self.ws, self.shift = dim, heads, window, shift
        self.scale = (dim // heads) ** -0.5
        self.relative_position_bias_table = nn.Parameter(torch.randn((2 * window - 1) ** 2, heads) * 0.02)
        coords = torch.stack(torch.meshgrid(torch.arange(window), torch.arange(window), indexing="ij"))
        coords = torch.flatten(coords, 1)
        rel = coords[:, :, None] - coords[:, None, :]
        rel = rel.permute(1, 2, 0).contiguous()
        rel[:, :, 0] += window - 1
        rel[:, :, 1] += window - 1
        rel[:, :, 0] *= 2 * window - 1
        self.register_buffer("relative_position_index", rel.sum(-1))
        self.qkv = nn.Linear(dim, dim * 3)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        B, H, W, C = x.shape
        x = torch.roll(x, shifts=(-self.shift, -self.shift), dims=(1, 2))
        xw = window_partition(x, self.ws)
        Bw, N, _ = xw.shape
        qkv = self.qkv(xw).reshape(Bw, N, 3, self.heads, C // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        attn = (q * self.scale) @ k.transpose(-2, -1)
        bias = self.relative_position_bias_table[self.relative_position_index.view(-1)].view(N, N, -1)
        attn = attn + bias.permute(2, 0, 1).contiguous().unsqueeze(0)
        attn = attn.softmax(dim=-1)
        out = (attn @ v).transpose(1, 2).reshape(Bw, N, C)
        out = self.proj(out)
        x = window_reverse(out, self.ws, H, W)
        return torch.roll(x, shifts=(self.shift, self.shift), dims=(1, 2))


def get_inputs():
    return [torch.randn(2, 28, 28, 96)]


def get_init_inputs():
    return [96, 3, 7, 3]
