"""Position ids kept in a non-persistent buffer, as BERT's embeddings keep them (torch-mlir found no value
for it: it is not in the state dict)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.positions = nn.Embedding(64, 32)
        self.register_buffer("position_ids", torch.arange(64).unsqueeze(0), persistent=False)

    def forward(self, x):
        return x + self.positions(self.position_ids[:, : x.shape[1]])


def get_inputs():
    return [torch.randn(4, 64, 32)]


def get_init_inputs():
    return []
