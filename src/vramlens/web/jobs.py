"""The work of the estimate and fit endpoints, as plain functions of plain values.

They run in a worker process (see ``budget``), so they take and return only what pickles
simply (strings, dicts, numbers) and import nothing of the web framework.
"""

from __future__ import annotations

from typing import Any


def _model(model: str | dict | None) -> Any:
    if isinstance(model, dict):
        # a pasted config goes straight to the pure builder: no loader, no path, no hub
        from vramlens.models.inventory import spec_from_config

        return spec_from_config(model, source="pasted config.json", where="the pasted config")
    return model


def estimate_job(model: str | dict | None, top: dict[str, Any], work: dict[str, Any]) -> dict:
    """The same call as ``vramlens estimate``: ``Estimate.to_dict()``."""
    from vramlens.fallback import estimate  # an unmodelled model_type is traced (and cached)

    est = estimate(_model(model), gpu=top["gpu"], params=top["params"], headroom=top["headroom"], **work)
    return est.to_dict()


def fit_job(model: str | dict | None, top: dict[str, Any], work: dict[str, Any], method_locked: bool,
            n: int) -> dict:
    """The same search as ``vramlens fit``: ``FitResult.to_dict()`` with the top ``n`` plans (traced, and
    cached, for an unmodelled model_type, as ``vramlens fit``)."""
    from vramlens.advise.emit import configs
    from vramlens.fallback import fit

    work = dict(work)
    gpus = work.pop("gpus")
    result = fit(_model(model), gpu=top["gpu"], params=top["params"], gpus=gpus, headroom=top["headroom"],
                 method_locked=method_locked, max_plans=n, **work)
    d = result.to_dict(configs)
    d["plans"] = d["plans"][:n]
    return d


#: The dtype comparison's columns: (label, the settings that make it) for inference and for
#: training. Training cannot update int8/int4 weights, so those columns train LoRA adapters over
#: quantized weights (LoRA over int8, QLoRA over NF4), as the Hugging Face calculator assumes.
COMPARE_DTYPES = ("fp32", "bf16", "int8", "int4")
_COMPARE: dict[str, dict[str, dict[str, Any]]] = {
    "inference": {
        "fp32": {"dtype": "fp32", "quant": None},
        "bf16": {"dtype": "bf16", "quant": None},
        "int8": {"dtype": "bf16", "quant": "int8"},
        "int4": {"dtype": "bf16", "quant": "int4"},
    },
    "train": {
        "fp32": {"dtype": "fp32", "quant": None, "method": "full"},
        "bf16": {"dtype": "bf16", "quant": None, "method": "full"},
        "int8": {"dtype": "bf16", "quant": "int8", "method": "lora"},
        "int4": {"dtype": "bf16", "quant": None, "method": "qlora"},
    },
}
#: Settings that only training takes: an inference cell drops them (estimate refuses ZeRO there).
_TRAIN_ONLY = {"zero": 0, "fsdp": False, "offload": "none"}


def _spec(model: str | dict | None, params: str | None) -> Any:
    """The ModelSpec, loaded once for a job that estimates many workloads of one model."""
    from vramlens.models import load_model

    m = _model(model)
    return load_model(m, params=params) if m is not None else load_model(params=params)


def _cell(spec: Any, top: dict[str, Any], work: dict[str, Any], gpu: str | None) -> dict:
    """One estimate as the figures a table cell needs, or the one-line reason it cannot be made."""
    from vramlens.errors import VramlensError
    from vramlens.estimator import estimate

    try:
        est = estimate(spec, gpu=gpu, headroom=top["headroom"], **work).to_dict()
    except VramlensError as e:
        return {"error": str(e).splitlines()[0] if str(e) else type(e).__name__}
    return {k: est[k] for k in ("device_total_bytes", "peak_allocated_bytes", "peak_reserved_bytes", "fits",
                                "headroom_bytes")}


def compare_job(model: str | dict | None, top: dict[str, Any], work: dict[str, Any]) -> dict:
    """The dtype table: fp32/bf16/int8/int4 x inference/training, the rest of the workload as given."""
    spec = _spec(model, top["params"])
    rows = []
    for mode, cols in _COMPARE.items():
        cells = {}
        for label in COMPARE_DTYPES:
            w = {**work, "mode": mode, "amp": None, **cols[label]}
            if mode == "inference":
                w.update(_TRAIN_ONLY)
            cells[label] = {**_cell(spec, top, w, top["gpu"]), "settings": cols[label]}
        rows.append({"mode": mode, "cells": cells})
    return {"model": spec.name, "dtypes": list(COMPARE_DTYPES), "rows": rows}


def gpu_matrix_job(model: str | dict | None, top: dict[str, Any], work: dict[str, Any]) -> dict:
    """Every catalog GPU with whether the workload fits on it (one GPU of each, as ``--gpus`` says)."""
    from vramlens.hardware.catalog import list_gpus

    spec = _spec(model, top["params"])
    rows = []
    for g in sorted(list_gpus(), key=lambda g: (g.capacity_bytes, g.name)):
        rows.append({"name": g.name, "vendor": g.vendor, "usable_bytes": g.capacity_bytes,
                     **_cell(spec, top, work, g.name)})
    return {"model": spec.name, "gpus": rows}


def model_job(model: str | dict | None, top: dict[str, Any]) -> dict:
    """The model card: the architecture's sizes, where they came from, and what was assumed."""
    spec = _spec(model, top["params"])
    return {
        "name": spec.name, "model_type": spec.model_type, "architecture": spec.architecture, "kind": spec.kind,
        "params": spec.params, "layers": spec.n_layers, "hidden_size": spec.hidden_size,
        "heads": spec.n_heads, "kv_heads": spec.n_kv_heads, "head_dim": spec.head_dim, "ffn_size": spec.ffn_size,
        "vocab_size": spec.vocab_size, "context_length": spec.max_position, "experts": spec.n_experts,
        "experts_per_token": spec.experts_per_token, "sliding_window": spec.sliding_window,
        "tied_embeddings": spec.tied_embeddings, "torch_dtype": spec.torch_dtype, "source": spec.source,
        "assumed": list(spec.assumed),
    }


def capacity_job(model: str, engine: str, gpu: str, layout: dict[str, Any], settings: dict[str, Any]) -> dict:
    """The same call as ``vramlens capacity --json``: ``Capacity.to_dict()``."""
    from vramlens.serving import capacity

    return capacity(model, engine, gpu=gpu, **layout, **settings).to_dict()
