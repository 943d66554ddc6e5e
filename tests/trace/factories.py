"""Factories for `package.module:factory` tests."""

import torch
from torch import nn


def mlp():
    model = nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 8))
    return model, lambda batch, seq: (torch.randn(batch, 64),)


def bare():
    return nn.Linear(16, 4)


def broken():
    raise RuntimeError("weights not found")


class DataDependent(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x):
        return self.lin(x[x > 0].view(-1, 8))


def data_dependent():
    return DataDependent(), lambda batch, seq: (torch.randn(batch, 8),)
