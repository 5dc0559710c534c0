"""Top-2 mixture of experts: softmax router, topk, renormalized gate weights scattered into a dense
(tokens, experts) matrix, every expert (SiLU MLP) run densely, combined by the gate weights."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Expert(nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.w1 = nn.Linear(d, h)
        self.w2 = nn.Linear(h, d)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)))


class Model(nn.Module):
    def __init__(self, d=128, h=256, n_experts=4, k=2):
        super().__init__()
        self.k = k
        self.gate = nn.Linear(d, n_experts, bias=False)
        self.experts = nn.ModuleList([Expert(d, h) for _ in range(n_experts)])

    def forward(self, x):
        B, T, D = x.shape
        x = x.view(-1, D)
        probs = F.softmax(self.gate(x), dim=-1)
        topv, topi = torch.topk(probs, self.k, dim=-1)
        topv = topv / topv.sum(dim=-1, keepdim=True)
        weights = torch.zeros_like(probs).scatter(1, topi, topv)
        expert_out = torch.stack([e(x) for e in self.experts], dim=1)  # (N, E, D)
        y = torch.einsum("ne,ned->nd", weights, expert_out)
        return y.view(B, T, D)


def get_inputs():
    return [torch.randn(4, 64, 128)]


def get_init_inputs():
    return [128, 256, 4, 2]
