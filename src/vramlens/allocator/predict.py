"""From the estimator's peak to what PyTorch and nvidia-smi will show.

``predict_device_total`` turns a peak of live tensors (``max_memory_allocated``) into the
caching allocator's reservation (``max_memory_reserved``, first-order model of
:mod:`vramlens.allocator.analytic`) and adds what lives outside the allocator (CUDA context,
NCCL: :mod:`vramlens.hardware.runtime`), which is what nvidia-smi shows.
``predict_published_case`` applies it to a case of ``published-cases.json`` whose figure is
NVML "used" memory or reserved memory.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from vramlens.allocator.analytic import reserved_breakdown
from vramlens.allocator.config import AllocatorConfig
from vramlens.errors import UnknownGPUError
from vramlens.hardware.catalog import get_gpu
from vramlens.hardware.gpu import GPU
from vramlens.hardware.runtime import RuntimeOverhead, runtime_overhead
from vramlens.units import human_bytes


@dataclass(frozen=True, slots=True)
class DevicePrediction:
    """The three figures a user sees, bytes, with the reasoning.

    Attributes:
        peak_allocated_bytes: max_memory_allocated (given).
        peak_reserved_bytes: max_memory_reserved (first-order allocator model).
        outside_allocator_bytes: CUDA context, NCCL and other libraries.
        device_total_bytes: nvidia-smi: reserved + outside.
        runtime: the runtime parts.
        explain: one line per step.
    """

    peak_allocated_bytes: int
    peak_reserved_bytes: int
    outside_allocator_bytes: int
    device_total_bytes: int
    runtime: RuntimeOverhead
    explain: str


def predict_device_total(
    gpu: GPU | str,
    *,
    peak_allocated_bytes: int,
    persistent: Sequence[int] | Mapping[int, int] | int = (),
    training: bool,
    conf: AllocatorConfig | str | None = None,
    cuda_version: str | None = None,
    lazy_loading: bool = True,
    n_gpus: int = 1,
    tp: int = 1,
    runtime: RuntimeOverhead | None = None,
) -> DevicePrediction:
    """Predict reserved memory and nvidia-smi's figure from the estimator's peak.

    Args:
        gpu: the device, or its name.
        peak_allocated_bytes: live tensor bytes at the peak (the estimator's peak_allocated).
        persistent: the tensors of that peak that live all step (weights, optimizer states, KV
            cache), as sizes, size -> count, or one total in bytes when sizes are unknown; the
            rest of the peak counts as short-lived.
        training: two cuBLAS handles instead of one (inside the allocator; informational here).
        conf: allocator settings or a PYTORCH_CUDA_ALLOC_CONF string.
        cuda_version, lazy_loading, n_gpus, tp: see :func:`vramlens.hardware.runtime.runtime_overhead`.
        runtime: a RuntimeOverhead computed elsewhere (overrides the four above).

    Returns:
        DevicePrediction.
    """
    if isinstance(gpu, str):
        gpu = get_gpu(gpu)
    if conf is None or isinstance(conf, str):
        conf = AllocatorConfig.parse(conf)
    sizes = [persistent] if isinstance(persistent, int) else persistent
    items = sizes.items() if isinstance(sizes, Mapping) else ((s, 1) for s in sizes)
    persistent_total = sum(int(s) * int(c) for s, c in items)
    transient = max(0, peak_allocated_bytes - persistent_total)
    est = reserved_breakdown(sizes, transient, conf=conf)
    reserved = max(est.reserved_bytes, peak_allocated_bytes)
    rt = runtime or runtime_overhead(gpu, training=training, n_gpus=n_gpus, tp=tp, cuda_version=cuda_version,
                                     lazy_loading=lazy_loading)
    total = reserved + rt.outside_allocator_bytes
    explain = "\n".join([
        f"peak allocated {human_bytes(peak_allocated_bytes)} (persistent {human_bytes(persistent_total)}, "
        f"short-lived {human_bytes(transient)})",
        f"peak reserved {human_bytes(reserved)}: {est.explain}",
        rt.explain,
        f"nvidia-smi {human_bytes(total)} = reserved + {human_bytes(rt.outside_allocator_bytes)} outside the allocator",
    ])
    return DevicePrediction(peak_allocated_bytes, reserved, rt.outside_allocator_bytes, total, rt, explain)


def case_kind(case: dict[str, Any]) -> str | None:
    """"device_total" for NVML/nvidia-smi figures, "reserved" for max_memory_reserved, else None."""
    kind = str(case.get("figure", {}).get("kind", "")).lower()
    if "peak_allocated" in kind or "allocated_bytes" in kind:
        return None  # built on the allocated peak (optimum's benchmark_gptq.py: allocated + what NVML adds)
    if "nvml" in kind or "nvidia-smi" in kind or "'used'" in kind:
        return "device_total"
    if "reserved" in kind and "memory_allocated" not in kind:
        return "reserved"
    return None


def case_gpu_and_cuda(case: dict[str, Any]) -> tuple[GPU | None, str | None]:
    """The catalog GPU and CUDA version a case names ("Tesla V100-SXM2 16GB (driver ..., CUDA 11.2)")."""
    text = str(case.get("gpu") or "")
    m = re.search(r"CUDA\s+(\d+\.\d+)", text)
    cuda = m.group(1) if m else None
    name = re.sub(r"\(.*?\)", "", text).strip()
    try:
        gpu = get_gpu(name) if name else None
    except UnknownGPUError:
        gpu = None
    if gpu is None and name:
        squeezed = re.sub(r"(\d+)\s*GB", r"\1GB", name).replace(" ", "-")
        try:
            gpu = get_gpu(squeezed)
        except UnknownGPUError:
            gpu = None
    return gpu, cuda


def predict_published_case(case: dict[str, Any], *, peak_allocated_bytes: int, persistent: Sequence[int] | Mapping[int, int] | int = (),
                           training: bool, conf: AllocatorConfig | str | None = None) -> dict[str, Any] | None:
    """Predict a published case's figure from the estimator's peak; None if its kind is not ours.

    Cases measured before CUDA 11.7 (no lazy loading) use the eager context model.

    Returns:
        {"id", "kind", "published_bytes", "predicted_bytes", "error", "explain"}.
    """
    kind = case_kind(case)
    if kind is None:
        return None
    gpu, cuda = case_gpu_and_cuda(case)
    if gpu is None:
        return None
    pred = predict_device_total(gpu, peak_allocated_bytes=peak_allocated_bytes, persistent=persistent,
                                training=training, conf=conf, cuda_version=cuda)
    predicted = pred.device_total_bytes if kind == "device_total" else pred.peak_reserved_bytes
    published = int(case["figure"]["value_bytes"])
    return {"id": case.get("id"), "kind": kind, "published_bytes": published, "predicted_bytes": predicted,
            "error": predicted / published - 1, "explain": pred.explain}
