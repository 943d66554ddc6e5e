"""vramlens: will this model fit on my GPU, where did my memory go, and what should I change?

The public API::

    import vramlens
    est = vramlens.estimate("llama-2-7b", mode="train", method="lora", gpu="A100-80GB")
    est.breakdown.as_dict(), est.fits, est.to_dict()
    cap = vramlens.capacity("llama-2-7b", engine="vllm", gpu="A100-80GB", context=4096)

    with vramlens.watch(model, optimizer) as w: ...   # a live run: w.report (needs torch)

    res = vramlens.fit("llama-2-7b", mode="train", batch=8, gpu="RTX-4090")  # plans that fit, fastest first

A config whose model_type no family models is traced instead (vramlens.fallback; needs the ``trace``
extra) and its figures cached on disk; ``fit`` ranks with an approximation and traces the plans it returns. Heavy parts load on first use: ``vramlens.trace`` and ``vramlens.watch`` (package ``vramlens.monitor``) need the ``trace``
extra (torch).
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

_LAZY = {
    "Breakdown": "vramlens.estimator.breakdown",
    "COMPONENTS": "vramlens.estimator.breakdown",
    "Component": "vramlens.estimator.breakdown",
    "Estimate": "vramlens.estimator.core",
    "GPU": "vramlens.hardware.gpu",
    "ModelSpec": "vramlens.models.spec",
    "TensorInfo": "vramlens.models.spec",
    "VramlensError": "vramlens.errors",
    "Workload": "vramlens.workload",
    "estimate": "vramlens.fallback",
    "fit": "vramlens.fallback",
    "get_gpu": "vramlens.hardware.catalog",
    "list_gpus": "vramlens.hardware.catalog",
    "load_model": "vramlens.models",
    "make_workload": "vramlens.workload",
    "watch": "vramlens.monitor",
    "calibrate": "vramlens.monitor",
    "capacity": "vramlens.serving",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'vramlens' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))

