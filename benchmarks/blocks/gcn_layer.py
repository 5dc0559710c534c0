"""GCN layer (Kipf & Welling) on a dense adjacency: add self loops, D^-1/2 (A + I) D^-1/2, then A_hat X W + b, ReLU."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features=64, out_features=32):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(in_features, out_features))
        self.bias = nn.Parameter(torch.zeros(out_features))
        nn.init.xavier_uniform_(self.weight)

    def forward(self, x, adj):
        a = adj + torch.eye(adj.size(-1), device=adj.device)
        deg = a.sum(-1)
        d_inv_sqrt = deg.pow(-0.5)
        d_inv_sqrt[torch.isinf(d_inv_sqrt)] = 0.0
        a_hat = d_inv_sqrt.unsqueeze(-1) * a * d_inv_sqrt.unsqueeze(-2)
        return torch.relu(a_hat @ (x @ self.weight) + self.bias)


def get_inputs():
    adj = (torch.rand(4, 200, 200) < 0.05).float()
    adj = ((adj + adj.transpose(1, 2)) > 0).float()
    return [torch.randn(4, 200, 64), adj]


def get_init_inputs():
    return [64, 32]
