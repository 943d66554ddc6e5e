"""Tiny real CPU training loops for the watch tests (line numbers matter: the leak test reads them)."""

import torch
import torch.nn as nn

IN, HIDDEN, OUT, BATCH = 64, 128, 1, 32


def tiny_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(IN, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, OUT))


def train(model, opt, steps: int, *, history: list | None = None, grow_batch: bool = False) -> None:
    for i in range(steps):
        x = torch.randn(BATCH * (i + 1) if grow_batch else BATCH, IN)
        loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        if history is not None:
            history.append(model(x).pow(2).mean())  # LEAK: a logged loss that keeps its graph
