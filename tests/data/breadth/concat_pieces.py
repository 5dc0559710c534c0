"""A concat whose first piece an elementwise kernel computes from a row-normalized input (the shape of
cdist's matmul form): canonicalization folds that piece's slice of the concat's empty tensor into an
empty tensor of its own, and the host then copied it into place; eliminate_empty_tensors writes it in place."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, a):
        a = a / a.norm(dim=-1, keepdim=True)
        return torch.cat([a * -2, a.pow(2).sum(-1, keepdim=True), torch.ones_like(a[:, :1])], dim=1)


def get_inputs():
    return [torch.randn(64, 32)]


def get_init_inputs():
    return []
