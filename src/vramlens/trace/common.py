"""What the single-device trace (api) and the FSDP trace (fsdp) share: the workload, names, phases, reserved."""

from __future__ import annotations

import contextlib
import warnings
from typing import Any

from vramlens.errors import VramlensError
from vramlens.trace.events import HOST_TAGS
from vramlens.workload import Workload, make_workload


def resolve_workload(workload: Workload | None, kwargs: dict[str, Any]) -> Workload:
    """The validated run: ``workload`` with ``kwargs`` applied, or a new one from ``kwargs``."""
    if workload is None:
        return make_workload(**kwargs)
    if kwargs:
        return workload.replace(**kwargs)
    return workload.validated()


def name_of(model: Any) -> str:
    """The name a trace reports for ``model``: a catalog name, a spec's name, a config's path or class."""
    if isinstance(model, str):
        return model
    name = getattr(model, "name", None)
    if isinstance(name, str):
        return name
    if isinstance(model, dict):
        return str(model.get("_name_or_path") or (model.get("architectures") or ["config"])[0])
    return type(model).__name__


@contextlib.contextmanager
def quiet_third_party():
    """Keep transformers' and peft's deprecation chatter (about their own internals) out of traces."""
    with warnings.catch_warnings():
        for cat in (FutureWarning, DeprecationWarning):
            warnings.filterwarnings("ignore", category=cat, module=r"(transformers|peft)(\.|$)")
        # peft telling that it switched LoRA to GPT-2's transposed Conv1D layout, as it must
        warnings.filterwarnings("ignore", message="fan_in_fan_out is set to False", category=UserWarning)
        yield


def phase_max(phase_peaks) -> tuple[tuple[str, int], ...]:
    """The largest peak of each phase over the steps, in first-seen order."""
    out: dict[str, int] = {}
    for _s, p, b in phase_peaks:
        out[p] = max(out.get(p, 0), b)
    return tuple(out.items())


def simulated_reserved(events, notes: list[str], alloc_conf: str | None = None) -> int | None:
    """peak_reserved from the caching-allocator simulator (vramlens.allocator), when it is there."""
    try:
        from vramlens.allocator import simulate
    except ImportError:
        notes.append("peak_reserved = peak_allocated: the allocator simulator (vramlens.allocator) is not available")
        return None
    res = simulate(((e.action, e.storage, e.nbytes) for e in events if e.tag not in HOST_TAGS), alloc_conf)
    conf = f" with PYTORCH_CUDA_ALLOC_CONF={alloc_conf}" if alloc_conf else ""
    notes.append(f"peak_reserved from the caching-allocator simulator replaying the trace's events{conf}")
    return res.peak_reserved_bytes


def runner_layers(runner, model) -> int:
    """The model's block count from its config (0 for a factory or an unreadable config)."""
    from vramlens.trace.build import config_layers, is_factory
    from vramlens.trace.runner import config_of

    if is_factory(model):
        return 0
    try:
        return config_layers(config_of(model))
    except VramlensError:
        return 0


def cuda_unavailable_reason() -> str | None:
    """Why a run on CUDA cannot happen here (the GPU scripts' check), or None."""
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return f"torch {torch.__version__} sees no CUDA device"
    return None
