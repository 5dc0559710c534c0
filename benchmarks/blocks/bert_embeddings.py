"""BERT embeddings: word + position (from a position_ids buffer) + token-type embeddings, LayerNorm."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, vocab=3000, hidden=128, max_pos=512, type_vocab=2):
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab, hidden, padding_idx=0)
        self.position_embeddings = nn.Embedding(max_pos, hidden)
        self.token_type_embeddings = nn.Embedding(type_vocab, hidden)
        self.LayerNorm = nn.LayerNorm(hidden, eps=1e-12)
        self.register_buffer("position_ids", torch.arange(max_pos).expand((1, -1)), persistent=False)

    def forward(self, input_ids, token_type_ids):
        seq_length = input_ids.size(1)
        position_ids = self.position_ids[:, :seq_length]
        embeddings = self.word_embeddings(input_ids) + self.token_type_embeddings(token_type_ids)
        embeddings = embeddings + self.position_embeddings(position_ids)
        return self.LayerNorm(embeddings)


def get_inputs():
    return [torch.randint(0, 3000, (4, 128)), torch.randint(0, 2, (4, 128))]


def get_init_inputs():
    return [3000, 128, 512, 2]
