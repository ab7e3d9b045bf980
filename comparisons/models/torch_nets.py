"""The torch half of each built-in pair; `flax_nets.py` mirrors it class for class."""
from __future__ import annotations

import torch
from torch import nn


class MLP(nn.Module):
    """Linear -> tanh -> Linear -> tanh -> Linear."""

    def __init__(self, features: int = 12, hidden: int = 32, classes: int = 5):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(features, hidden), nn.Linear(hidden, hidden)
        self.out = nn.Linear(hidden, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(torch.tanh(self.fc2(torch.tanh(self.fc1(x)))))


class CNNBN(nn.Module):
    """Two (Conv2d, BatchNorm2d, ReLU) stages with a max-pool between, global average pool, Linear.

    Takes NCHW. Global average pooling leaves no spatial layout for the Linear layer to depend on.
    """

    def __init__(self, channels: int = 3, width: int = 8, classes: int = 5, momentum: float = 0.1):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, width, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(width, momentum=momentum)
        self.conv2 = nn.Conv2d(width, 2 * width, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(2 * width, momentum=momentum)
        self.fc = nn.Linear(2 * width, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = nn.functional.max_pool2d(torch.relu(self.bn1(self.conv1(x))), 2)
        x = torch.relu(self.bn2(self.conv2(x)))
        return self.fc(x.mean(dim=(2, 3)))


class TransformerBlock(nn.Module):
    """Pre-LN block: x + MHA(LN(x)), then x + MLP(LN(x)); exact (erf) GELU. Takes (B, T, E)."""

    def __init__(self, dim: int = 16, heads: int = 4, hidden: int = 32):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.fc1, self.fc2 = nn.Linear(dim, hidden), nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.ln1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.fc2(nn.functional.gelu(self.fc1(self.ln2(x))))


class EmbeddingLSTM(nn.Module):
    """Embedding -> one-layer LSTM (batch first, zero initial state) -> Linear on the last step."""

    def __init__(self, vocab: int = 20, dim: int = 8, hidden: int = 16, classes: int = 5):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.lstm = nn.LSTM(dim, hidden, batch_first=True)
        self.out = nn.Linear(hidden, classes)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        states, _ = self.lstm(self.embed(tokens))
        return self.out(states[:, -1])
