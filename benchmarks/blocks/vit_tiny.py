"""A tiny ViT: conv patch embedding, cls token by cat + expand, learned position embedding,
two nn.TransformerEncoderLayer (batch_first, pre-norm, eval), final LayerNorm, head on token 0."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, img=56, patch=4, dim=64, heads=4, depth=2, classes=10):
        super().__init__()
        n = (img // patch) ** 2
        self.patch_embed = nn.Conv2d(3, dim, patch, stride=patch)
        self.cls_token = nn.Parameter(torch.randn(1, 1, dim) * 0.02)
        self.pos_embed = nn.Parameter(torch.randn(1, n + 1, dim) * 0.02)
        self.blocks = nn.ModuleList([
            nn.TransformerEncoderLayer(dim, heads, dim * 4, dropout=0.0, activation="gelu",
                                       batch_first=True, norm_first=True)
            for _ in range(depth)])
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, classes)
        self.eval()

    def forward(self, x):
        x = self.patch_embed(x).flatten(2).transpose(1, 2)
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        x = torch.cat((cls, x), dim=1) + self.pos_embed
        for blk in self.blocks:
            x = blk(x)
        x = self.norm(x)
        return self.head(x[:, 0])


def get_inputs():
    return [torch.randn(2, 3, 56, 56)]


def get_init_inputs():
    return []
