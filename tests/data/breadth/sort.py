"""torch.sort and argsort by ranks (frontend.sort_decomposition; torch-mlir's own lowering is tm_tensor.sort,
which nothing here lowers), the order used to gather rows, as an MoE dispatch or a top-p sampler does."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x, tokens):
        values, order = torch.sort(x, dim=1, descending=True)
        return values, torch.gather(tokens, 1, torch.argsort(x, dim=1).unsqueeze(-1).expand(-1, -1, 8)), order


def get_inputs():
    return [torch.randn(16, 100), torch.randn(16, 100, 8)]


def get_init_inputs():
    return []
