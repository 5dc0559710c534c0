import torch
import torch.nn as nn


class Model(nn.Module):
    """Sentence embeddings: token embeddings plus positions, LayerNorm, then the mean over unmasked tokens,
    L2-normalized."""

    def __init__(self, vocab=30522, dim=384, length=128):
        super().__init__()
        self.tokens = nn.Embedding(vocab, dim)
        self.positions = nn.Embedding(length, dim)
        self.norm = nn.LayerNorm(dim)

    def forward(self, ids, mask):
        positions = torch.arange(ids.shape[1], device=ids.device)
        x = self.norm(self.tokens(ids) + self.positions(positions))
        weights = mask.unsqueeze(-1).to(x.dtype)
        pooled = (x * weights).sum(1) / weights.sum(1).clamp(min=1e-9)
        return nn.functional.normalize(pooled, dim=-1)


def get_inputs():
    mask = torch.ones(32, 128, dtype=torch.long)
    mask[:, 90:] = 0
    return [torch.randint(0, 30522, (32, 128)), mask]


def get_init_inputs():
    return []
