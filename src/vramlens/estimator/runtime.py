"""Memory outside live tensors: the CUDA context and workspaces, and the caching allocator's reserve.

The CUDA context and library workspaces come from :mod:`vramlens.hardware.runtime` (documented
constants by GPU generation). The reserve over live tensors is a first-order model of
PyTorch's caching allocator (c10/cuda/CUDACachingAllocator.cpp); :mod:`vramlens.allocator`
simulates it exactly from an event stream.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from vramlens.hardware.gpu import GPU
from vramlens.workload import Workload

if TYPE_CHECKING:  # imported where it is called, as runtime_overhead is
    from vramlens.hardware.runtime import RuntimeOverhead

#: The GPU assumed for the runtime overhead when none is given: a current data-centre card.
REFERENCE_GPU = "H100-SXM-80GB"


def runtime(gpu: GPU | None, w: Workload) -> RuntimeOverhead:
    """The RuntimeOverhead of this workload on this GPU (REFERENCE_GPU when None)."""
    from vramlens.hardware.catalog import get_gpu
    from vramlens.hardware.runtime import runtime_overhead

    return runtime_overhead(gpu or get_gpu(REFERENCE_GPU), training=w.training, n_gpus=w.gpus, tp=w.tp, cp=w.cp)
