"""Find the GPUs of this machine through NVML (``nvidia-ml-py``'s ``pynvml``), never failing.

Without pynvml, without a driver, or on any NVML error the answer is an empty tuple: detection
is a convenience (``--gpu`` defaults to the local card), not something a run may trip on.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from vramlens.errors import UnknownGPUError
from vramlens.hardware.catalog import generic_gpu, get_gpu
from vramlens.hardware.gpu import GPU


@dataclass(frozen=True, slots=True)
class DetectedGPU:
    """One local device as NVML reports it, matched to the catalog where possible.

    Attributes:
        index: NVML device index.
        nvml_name: the name NVML reports ("NVIDIA H100 80GB HBM3").
        total_bytes: NVML memory.total (what nvidia-smi shows as the total).
        used_bytes: NVML memory.used at detection time.
        gpu: the catalog entry, or a generic GPU of total_bytes when the name is unknown.
        in_catalog: whether ``gpu`` came from the catalog.
    """

    index: int
    nvml_name: str
    total_bytes: int
    used_bytes: int
    gpu: GPU
    in_catalog: bool


def _as_text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def detect_gpus() -> tuple[DetectedGPU, ...]:
    """The local NVIDIA GPUs, or ``()`` when NVML is missing or fails."""
    try:
        nvml = importlib.import_module("pynvml")
    except Exception:
        return ()
    try:
        nvml.nvmlInit()
    except Exception:
        return ()
    found: list[DetectedGPU] = []
    try:
        for i in range(int(nvml.nvmlDeviceGetCount())):
            handle = nvml.nvmlDeviceGetHandleByIndex(i)
            name = _as_text(nvml.nvmlDeviceGetName(handle))
            mem = nvml.nvmlDeviceGetMemoryInfo(handle)
            total, used = int(mem.total), int(mem.used)
            try:
                gpu, known = get_gpu(name), True
            except UnknownGPUError:
                gpu, known = generic_gpu(total, name=name), False
            found.append(DetectedGPU(i, name, total, used, gpu, known))
    except Exception:
        return tuple(found)
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:
            pass
    return tuple(found)
