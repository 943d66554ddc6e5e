"""The storages behind tensors: what both backends file under a category (one home for the walk)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import torch


def storages(tensors: Iterable[Any]) -> Iterator[tuple[int, Any]]:
    """(id of its untyped storage, the storage) for each tensor of ``tensors`` that has one; anything
    else (None, non-tensors, tensors without storage such as some subclasses) is skipped.

    A wrapper tensor subclass (torchao's quantized optimizer states: codes, scale, qmap) is walked into
    the tensors it is made of (``__tensor_flatten__``): its own storage is a placeholder of the outer
    shape and dtype, not memory that exists.
    """
    from torch.utils._python_dispatch import is_traceable_wrapper_subclass

    for t in tensors:
        if not isinstance(t, torch.Tensor):
            continue
        if is_traceable_wrapper_subclass(t):
            attrs, _ = t.__tensor_flatten__()
            yield from storages(getattr(t, a) for a in attrs)
            continue
        try:
            st = t.untyped_storage()
        except (NotImplementedError, RuntimeError):
            continue
        yield id(st), st
