"""The storages behind tensors: what both backends file under a category (one home for the walk)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import torch


def storages(tensors: Iterable[Any]) -> Iterator[tuple[int, Any]]:
    """(id of its untyped storage, the storage) for each tensor of ``tensors`` that has one; anything
    else (None, non-tensors, tensors without storage such as some subclasses) is skipped."""
    for t in tensors:
        if not isinstance(t, torch.Tensor):
            continue
        try:
            st = t.untyped_storage()
        except (NotImplementedError, RuntimeError):
            continue
        yield id(st), st
