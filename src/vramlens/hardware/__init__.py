"""GPU catalog (datasheet data), local detection (NVML where present) and runtime overheads."""

from vramlens.hardware.catalog import as_gpu, generic_gpu, get_gpu, list_gpus
from vramlens.hardware.detect import DetectedGPU, detect_gpus
from vramlens.hardware.gpu import GPU
from vramlens.hardware.runtime import RuntimeOverhead, runtime_overhead

__all__ = ["DetectedGPU", "GPU", "RuntimeOverhead", "as_gpu", "detect_gpus", "generic_gpu", "get_gpu", "list_gpus",
           "runtime_overhead"]
