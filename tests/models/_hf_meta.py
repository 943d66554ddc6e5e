"""Build the transformers model for a config on the meta device and list its tensors."""

from __future__ import annotations

import warnings


def hf_tensors(config: dict, architecture: str | None = None
               ) -> tuple[list[tuple[str, tuple[int, ...]]], list[tuple[str, tuple[int, ...], str]]]:
    """(parameters, buffers) of ``architectures[0]`` (or ``architecture``) built from ``config`` on meta.

    Parameters as (name, shape) in ``named_parameters()`` order (tied weights once); buffers
    as (name, shape, dtype) in ``named_buffers()`` order, dtype "float" for floating buffers
    (vramlens records those as dtype None: they follow the model's dtype).
    """
    import torch
    import transformers
    from transformers import AutoConfig

    cfg = dict(config)
    model_type = cfg.pop("model_type")
    architecture = architecture or config["architectures"][0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hf_cfg = AutoConfig.for_model(model_type, **cfg)
        cls = getattr(transformers, architecture)
        with torch.device("meta"):
            model = cls(hf_cfg)
    params = [(n, tuple(p.shape)) for n, p in model.named_parameters()]
    buffers = [
        (n, tuple(b.shape), "float" if b.dtype.is_floating_point else str(b.dtype).removeprefix("torch."))
        for n, b in model.named_buffers()
    ]
    return params, buffers


def ours(spec) -> tuple[list, list]:
    """The same two lists from a ModelSpec."""
    params = [(t.name, t.shape) for t in spec.tensors if t.role != "buffer"]
    buffers = [(t.name, t.shape, t.dtype or "float") for t in spec.tensors if t.role == "buffer"]
    return params, buffers
