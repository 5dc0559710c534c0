"""x[rows] = values with a 2-D integer index tensor: lowered to tm_tensor.scatter, which nothing here lowers (an
index_put of one boolean mask or of 1-D index tensors of adjacent dims is decomposed; this form is not): the
frontend refuses it, naming the op."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x, rows, values):
        x = x.clone()
        x[rows] = values
        return x


def get_inputs():
    return [torch.randn(64, 32), torch.tensor([[3, 17], [40, 41]]), torch.randn(2, 2, 32)]


def get_init_inputs():
    return []
