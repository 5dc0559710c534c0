"""x[rows] = values with an integer index: lowered to tm_tensor.scatter, which nothing here lowers (an index_put
of a boolean mask or a scatter along a dim is decomposed; this form is not): the frontend refuses it, naming the op."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x, rows, values):
        x = x.clone()
        x[rows] = values
        return x


def get_inputs():
    return [torch.randn(64, 32), torch.tensor([3, 17, 40]), torch.randn(3, 32)]


def get_init_inputs():
    return []
