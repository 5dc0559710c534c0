"""Sigmoid focal loss (RetinaNet, as in torchvision.ops.sigmoid_focal_loss) with mean reduction."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, alpha=0.25, gamma=2.0):
        super().__init__()
        self.alpha, self.gamma = alpha, gamma

    def forward(self, inputs, targets):
        p = torch.sigmoid(inputs)
        ce_loss = F.binary_cross_entropy_with_logits(inputs, targets, reduction="none")
        p_t = p * targets + (1 - p) * (1 - targets)
        loss = ce_loss * ((1 - p_t) ** self.gamma)
        alpha_t = self.alpha * targets + (1 - self.alpha) * (1 - targets)
        loss = alpha_t * loss
        return loss.mean()


def get_inputs():
    return [torch.randn(16, 1000, 20), (torch.rand(16, 1000, 20) < 0.05).float()]


def get_init_inputs():
    return [0.25, 2.0]
