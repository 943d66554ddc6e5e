"""The tracer as the estimator's fallback: figures for a ``model_type`` no family models.

:func:`profile` builds the real transformers model under fake tensors, traces its first
``FALLBACK_LAYERS - 1`` and ``FALLBACK_LAYERS`` blocks (two shapes, as ``vramlens trace --layers``
does), extrapolates to every block, and returns the figures as a plain JSON-able dict: the
breakdown, the per-block slopes, the parameter counts, the architecture facts and the tensor
inventory of the full model (built on ``meta``). :mod:`vramlens.fallback` caches that dict on
disk and turns it into an Estimate, so nothing here knows about GPUs, verdicts or files.
"""

from __future__ import annotations

import re
from typing import Any

from vramlens.errors import TraceError
from vramlens.units import DTYPE_ALIASES
from vramlens.workload import Workload, make_workload

#: Blocks of the larger truncated model; the smaller has one less (trace's minimum is 3, whose
#: smaller model of 2 blocks is already on the line: its first block is not also its last).
FALLBACK_LAYERS = 3
#: Version of the dict :func:`profile` returns; a cached profile of another version is traced again.
PROFILE_FORMAT = 2

_LAYER_INDEX = re.compile(r"\.(\d+)\.")


def knows(model_type: str) -> bool:
    """Whether the installed transformers has a config class for ``model_type`` (so it can build it)."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    return model_type in CONFIG_MAPPING_NAMES


def complete(config: dict[str, Any]) -> dict[str, Any]:
    """``config`` with ``architectures`` filled in when it is missing: the class AutoModelForCausalLM
    (or else AutoModel) builds for its ``model_type``, as loading it with transformers would."""
    if config.get("architectures"):
        return config
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES, MODEL_MAPPING_NAMES

    mt = config.get("model_type", "")
    arch = MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.get(mt) or MODEL_MAPPING_NAMES.get(mt)
    if not isinstance(arch, str):
        raise TraceError(f"model_type {mt!r}: transformers names no model class for it; add \"architectures\" "
                         "to the config")
    return {**config, "architectures": [arch]}


def profile(config: dict[str, Any], wl: Workload, *, steps: int = 2, progress=None) -> dict[str, Any]:
    """Trace ``config``'s transformers model under ``wl`` and return its figures as a JSON-able dict.

    Args:
        config: config.json fields whose ``model_type`` transformers knows.
        wl: the validated workload.
        steps: optimizer steps traced in training (2: step 1 and the steady state).
        progress: callable taking a one-line message.

    Returns:
        ``{"format", "model": facts, "tensors": [[name, shape, role, module, layer, dtype], ...],
        "params", "trainable_params", "n_layers", "layers_traced": [smaller, larger] truncated model's blocks
        or None, "breakdown": Breakdown.to_dict(),
        "per_layer": {component: bytes per block}, "seconds"}``. A hybrid model's truncated models hold
        whole periods of its layer pattern (:mod:`vramlens.trace.pattern`).

    Raises:
        TraceError: transformers cannot build or run the model under fake tensors.
    """
    import vramlens.trace as T  # the public front door, looked up at call time

    cfg = complete(config)
    res = T.trace(cfg, wl, steps=steps, layers=FALLBACK_LAYERS, progress=progress)
    facts, tensors = inventory(cfg, wl)
    return {
        "format": PROFILE_FORMAT,
        "model": facts,
        "tensors": tensors,
        "params": res.params,
        "trainable_params": res.trainable_params,
        "n_layers": res.n_layers,
        "layers_traced": list(res.truncated) if res.truncated is not None else None,
        "breakdown": res.breakdown.to_dict(),
        "per_layer": dict(res.per_layer),
        "seconds": round(res.seconds, 3),
    }


def inventory(cfg: dict[str, Any], wl: Workload) -> tuple[dict[str, Any], list[list[Any]]]:
    """Architecture facts and the tensor inventory of the full base model, built on ``meta`` (no memory).

    The inventory is the base model's, as an analytic ModelSpec's is (LoRA adapters are the
    workload's, counted in trainable_params): parameters (tied weights once) then buffers.
    """
    from torch import nn

    from vramlens.models.heads import head_of
    from vramlens.trace.build import build_hf
    from vramlens.trace.common import quiet_third_party

    with quiet_third_party():
        built = build_hf(cfg, make_workload(task=wl.task), meta_only=True)
    model = built.model
    conf = model.config
    kinds = {name: type(mod) for name, mod in model.named_modules()}
    rows: list[list[Any]] = []
    for name, p in model.named_parameters():
        owner, _, leaf = name.rpartition(".")
        cls = kinds.get(owner, nn.Module)
        if issubclass(cls, nn.Embedding):
            role = "position_embedding" if "position" in owner or "token_type" in owner else "embedding"
        elif leaf == "bias":
            role = "bias"
        elif "norm" in cls.__name__.lower() or "norm" in owner.rsplit(".", 1)[-1].lower():
            role = "norm"
        elif issubclass(cls, nn.Linear):
            role = "lm_head" if owner.endswith("lm_head") else "linear"
        else:
            role = "other"
        rows.append([name, list(p.shape), role, owner.rsplit(".", 1)[-1], _layer(name), None])
    for name, b in model.named_buffers():
        owner = name.rpartition(".")[0]
        rows.append([name, list(b.shape), "buffer", owner.rsplit(".", 1)[-1], _layer(name),
                     DTYPE_ALIASES.get(str(b.dtype).removeprefix("torch."))])
    arch = type(model).__name__
    enc_dec = bool(getattr(conf, "is_encoder_decoder", False))
    kind = "encoder-decoder" if enc_dec else "decoder"
    h = _int(conf, "hidden_size", "d_model", "n_embd")
    a = max(1, _int(conf, "num_attention_heads", "n_head"))
    L = built.n_layers or _int(conf, "num_hidden_layers", "n_layer", "num_layers")
    facts = {
        "name": str(cfg.get("_name_or_path") or cfg.get("model_type")),
        "model_type": str(cfg.get("model_type")),
        "architecture": arch,
        "kind": kind,
        "head": head_of(arch, kind),
        "hidden_size": h,
        "n_heads": a,
        "n_kv_heads": _int(conf, "num_key_value_heads") or a,
        "head_dim": _int(conf, "head_dim") or h // a,
        "ffn_size": _int(conf, "intermediate_size", "n_inner", "ffn_dim") or 4 * h,
        "vocab_size": _int(conf, "vocab_size"),
        "n_layers": L,
        "max_position": _int(conf, "max_position_embeddings", "n_positions") or 2048,
        "tied_embeddings": bool(getattr(conf, "tie_word_embeddings", False)),
    }
    return facts, rows


def _layer(name: str) -> int | None:
    m = _LAYER_INDEX.search(name)
    return int(m.group(1)) if m else None


def _int(conf: Any, *keys: str) -> int:
    for k in keys:
        v = getattr(conf, k, None)
        if isinstance(v, int) and not isinstance(v, bool):
            return v
    return 0


__all__ = ["FALLBACK_LAYERS", "PROFILE_FORMAT", "complete", "inventory", "knows", "profile"]
