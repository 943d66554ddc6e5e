"""Memory a PyTorch process holds beyond its tensors: CUDA context, cuBLAS workspaces, NCCL.

nvidia-smi's "used" figure for a process is the caching allocator's reservation plus what
lives outside it. This module gives the outside part (and the library workspaces that sit
inside the allocator), from documented constants with their sources. Every figure can be
overridden by the caller, because they vary with driver, CUDA and PyTorch builds.

Inside or outside the allocator (PyTorch >= 2.0, ``aten/src/ATen/cuda/CublasHandlePool.cpp``):

- **cuBLAS workspace: inside.** ``getNewWorkspace()`` allocates it through
  ``CUDACachingAllocator`` (explicit workspaces came with pytorch/pytorch pulls 83461/85292,
  2022, so that CUDA graph captures stop growing memory; the default size with pull 91564,
  early 2023). It shows in ``memory_allocated()``; one per (handle, stream), and each thread
  has its own handle: inference uses one, training two (the Python thread's forward and
  autograd's device thread for backward). Older PyTorch let cuBLAS allocate it itself, outside
  the count.
- **cuBLASLt workspace: inside**, a separate 1 MiB (``CUBLASLT_WORKSPACE_SIZE``, KiB) per
  handle and stream unless ``TORCH_CUBLASLT_UNIFIED_WORKSPACE=1`` shares the cuBLAS one.
- **CUDA context: outside.** Driver state plus the loaded kernel images (modules).
- **NCCL buffers: outside** (NCCL calls ``cudaMalloc``/``cuMem*`` itself).
- **cuDNN**: its workspaces come from the caching allocator per call (transient, inside); its
  kernels load lazily into the context. Not modelled separately (transformer workloads do not
  call it); pass ``extra_outside_bytes`` for convolutional models measured elsewhere.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from vramlens.errors import InputError
from vramlens.hardware.gpu import GPU
from vramlens.units import MiB, human_bytes

# ---------------------------------------------------------------------------------------------
# CUDA context. Lazy module loading (CUDA_MODULE_LOADING=LAZY) exists since CUDA 11.7, and
# PyTorch sets it when the user has not, since 1.13 (pytorch/pytorch pull 86509). Before CUDA
# 11.7 every kernel of every loaded library went into the context at creation ("took >1000MB",
# ptrblck in pytorch/pytorch issue 107667).
# ---------------------------------------------------------------------------------------------

#: Lazy loading, CUDA 11.7/11.8: pull 86509 measured 287_047_680 bytes used after
#: ``torch.randn(20, 16, 50, 100).cuda()``; minus that tensor's 20 MiB allocator segment.
LAZY_CONTEXT_CUDA_11_BYTES = 287_047_680 - 20 * MiB

#: Lazy loading, CUDA 12 and later: published figures are "~300MB" (ptrblck, pytorch issue
#: 107667, Aug 2023), "around 400MB" (ptrblck, pytorch issue 109888, Sep 2023) and 426 MiB
#: (unslothai/unsloth-zoo pull 1053: PyTorch 2.10+cu130, RTX 6000 Ada, context only). We take
#: 400 MiB, inside that range; the spread is about +-15%.
LAZY_CONTEXT_CUDA_12_BYTES = 400 * MiB

#: Eager loading forced on CUDA >= 11.7 (CUDA_MODULE_LOADING=EAGER): pull 86509 measured
#: 666_632_192 bytes with the same 20 MiB tensor segment.
EAGER_CONTEXT_CUDA_11_7_BYTES = 666_632_192 - 20 * MiB

#: CUDA 11.0-11.6 builds (no lazy loading): the mean of three published measurements of a
#: process holding (almost) no tensors: 1105 MiB (pytorch issue 60150, torch 1.7.1+cu110, after
#: empty_cache), 1486 MiB (issue 49877, RTX 3090, torch 1.7.1+cu110: 1644 MiB minus its 158 MiB
#: tensor) and 1685 MiB (issue 55277, RTX 3090, torch 1.8.2+cu111: 1687 MiB minus a 2 MiB
#: segment). Spread about +-20%.
EAGER_CONTEXT_CUDA_11_0_BYTES = (1105 + 1486 + 1685) * MiB // 3

#: CUDA 10.x builds: mean of 721 MiB (issue 55277, GTX 1080, torch 1.8.2+cu101) and 877 MiB
#: (issue 49877, RTX 2080 Ti, torch 1.6+cu101: 1035 MiB minus 158 MiB of tensor).
EAGER_CONTEXT_CUDA_10_BYTES = (721 + 877) * MiB // 2

#: Lazy loading loads a kernel image into the context the first time one of its kernels runs, so
#: a real workload's context outgrows the figures above, which were read after one tiny op.
#: Measured by scripts/gpu_allocator_validate.py (validation/allocator-gpu.json: device used
#: minus the allocator's reservation) on an H200, torch 2.11+cu130, driver 580, for a
#: 1024-wide transformer: 697 MiB outside the allocator after bf16 forwards, 751-767 MiB (mean
#: 759) after training steps. Less the 400 MiB context above, the kernels of a transformer's
#: forward take 297 MiB and those of its forward, backward and optimizer 359 MiB. One machine's
#: reading (other GPUs load their own architecture's images); pass context_bytes to override.
LAZY_MODULES_INFERENCE_BYTES = 697 * MiB - LAZY_CONTEXT_CUDA_12_BYTES
LAZY_MODULES_TRAINING_BYTES = 759 * MiB - LAZY_CONTEXT_CUDA_12_BYTES

#: What vramlens assumes when no CUDA version is given: a current PyTorch wheel.
DEFAULT_CUDA_VERSION = "12.4"

# ---------------------------------------------------------------------------------------------
# cuBLAS workspaces (aten/src/ATen/cuda/CublasHandlePool.cpp, parseChosenWorkspaceSize):
# default CUBLAS_WORKSPACE_CONFIG ":4096:2:16:8" = 2 x 4096 KiB + 8 x 16 KiB, except on sm_90
# (Hopper) where it is ":4096:8" = 32 MiB. CUBLASLT_WORKSPACE_SIZE defaults to 1024 KiB.
# ---------------------------------------------------------------------------------------------
CUBLAS_WORKSPACE_DEFAULT_BYTES = 4096 * 1024 * 2 + 16 * 1024 * 8  # 8_519_680
CUBLAS_WORKSPACE_SM90_BYTES = 4096 * 8 * 1024  # 33_554_432
CUBLASLT_WORKSPACE_DEFAULT_BYTES = 1024 * 1024

# ---------------------------------------------------------------------------------------------
# NCCL (NVIDIA/nccl src/init.cc): per channel and per receiving connection, one buffer per
# protocol: Simple = NCCL_BUFFSIZE (DEFAULT_BUFFSIZE 1 << 22), LL = 8 lines x 512 threads x
# 8 steps x 16 B, LL128 = 120 elements x 640 threads x 8 steps x 8 B.
# ---------------------------------------------------------------------------------------------
NCCL_SIMPLE_BUFFSIZE = 1 << 22  # 4_194_304
NCCL_LL_BUFFSIZE = 8 * 512 * 8 * 16  # 524_288
NCCL_LL128_BUFFSIZE = 120 * 640 * 8 * 8  # 4_915_200
#: Receiving connections per channel: one from the ring, one (on average) from the tree.
NCCL_CONNECTIONS_PER_CHANNEL = 2
#: Typical channel counts in NCCL INFO logs ("16 coll channels" on 8 x H800, NVIDIA/nccl issue
#: 892); PCIe-only systems use few (2 to 4).
NCCL_CHANNELS_NVLINK = 16
NCCL_CHANNELS_PCIE = 2
#: NVLink SHARP (Hopper and later behind NVSwitch, more than 2 ranks): NCCL INFO log
#: "nvlsPerRankSize 301989888 nvlsTotalSize 2415919104" on 8 GPUs (vllm-project/vllm issue
#: 9699); every rank binds the whole multicast buffer, per_rank x ranks.
NCCL_NVLS_PER_RANK_BYTES = 301_989_888
#: GPUs of one NVLink domain (the NVSwitches of one HGX/DGX server: 8). NVLS multicast buffers
#: are bound by the ranks that share the NVSwitch fabric; a communicator spanning several servers
#: runs NVLS within each one (NVLS-tree), so a rank binds per_rank x the local ranks, not the job's.
#: (A GB200 NVL72 rack is one domain of 72: pass nvlink_domain=72.)
NVLINK_DOMAIN_GPUS = 8


@dataclass(frozen=True, slots=True)
class RuntimeOverhead:
    """Memory of one process on one GPU beyond its tensors, bytes.

    Attributes:
        context_bytes: CUDA context (driver state and kernel images): outside the allocator.
        workspace_bytes: cuBLAS and cuBLASLt workspaces: INSIDE the caching allocator (they show
            in memory_allocated and memory_reserved), listed here so the total is explained.
        nccl_bytes: NCCL communicator buffers: outside the allocator.
        outside_allocator_bytes: what nvidia-smi shows on top of memory_reserved():
            context + NCCL + any extra given.
        explain: one line per part, with its rule.
    """

    context_bytes: int
    workspace_bytes: int
    nccl_bytes: int
    outside_allocator_bytes: int
    explain: str

    @property
    def total_bytes(self) -> int:
        """Everything listed: outside the allocator plus the workspaces inside it."""
        return self.outside_allocator_bytes + self.workspace_bytes


def _version(text: str | None) -> tuple[int, int]:
    m = re.match(r"^\s*(\d+)(?:\.(\d+))?", text or DEFAULT_CUDA_VERSION)
    if not m:
        raise InputError(f"cuda_version={text!r} is not a version: write e.g. 12.4 or 11.8")
    return int(m.group(1)), int(m.group(2) or 0)


def context_bytes_for(cuda_version: str | None = None, *, lazy_loading: bool = True) -> tuple[int, str]:
    """The CUDA context size for a CUDA version and module-loading mode, with its reason."""
    v = _version(cuda_version)
    if v < (11, 0):
        return EAGER_CONTEXT_CUDA_10_BYTES, f"CUDA {v[0]}.{v[1]}: eager module loading (mean of published CUDA 10 measurements)"
    if v < (11, 7):
        return EAGER_CONTEXT_CUDA_11_0_BYTES, (
            f"CUDA {v[0]}.{v[1]} < 11.7: no lazy loading, all kernels loaded (mean of 3 published measurements)")
    if not lazy_loading:
        return EAGER_CONTEXT_CUDA_11_7_BYTES, "CUDA_MODULE_LOADING=EAGER (pytorch pull 86509 measurement)"
    if v < (12, 0):
        return LAZY_CONTEXT_CUDA_11_BYTES, f"CUDA {v[0]}.{v[1]} lazy loading (pytorch pull 86509 measurement)"
    return LAZY_CONTEXT_CUDA_12_BYTES, f"CUDA {v[0]}.{v[1]} lazy loading (published 300-426 MiB)"


def parse_cublas_workspace_config(config: str) -> int:
    """Bytes of one cuBLAS workspace for a CUBLAS_WORKSPACE_CONFIG value (":4096:8" = 32 MiB).

    Same rule as PyTorch's parseChosenWorkspaceSize: the sum of SIZE KiB x COUNT over every
    ``:SIZE:COUNT`` pair.

    Raises:
        InputError: no ``:SIZE:COUNT`` pair in the text (PyTorch warns and uses its default).
    """
    pairs = re.findall(r":([0-9]+):([0-9]+)", config)
    if not pairs:
        raise InputError(
            f"CUBLAS_WORKSPACE_CONFIG={config!r} has no :SIZE:COUNT pair: write e.g. :4096:8 or :16:8")
    return sum(int(size) * 1024 * int(count) for size, count in pairs)


def cublas_workspace_bytes(gpu: GPU, config: str | None = None) -> int:
    """One cuBLAS workspace on ``gpu``: the config if given, else PyTorch's default for its arch."""
    if config:
        return parse_cublas_workspace_config(config)
    if gpu.compute_capability == (9, 0):
        return CUBLAS_WORKSPACE_SM90_BYTES
    return CUBLAS_WORKSPACE_DEFAULT_BYTES


def nvls_capable(gpu: GPU) -> bool:
    """NVLink fabric fast enough for NVLS: Hopper or later SXM parts (>= 900 GB/s per GPU)."""
    return gpu.vendor == "nvidia" and gpu.interconnect_bytes_s >= 900e9


def nccl_communicator_bytes(gpu: GPU, ranks: int, *, channels: int | None = None,
                            buffsize: int | None = None, nvls: bool | None = None,
                            nvlink_domain: int = NVLINK_DOMAIN_GPUS) -> int:
    """Device memory of one NCCL communicator of ``ranks`` ranks, on each rank (NVLS buffers for the
    ranks of one NVLink domain of ``nvlink_domain`` GPUs)."""
    if ranks <= 1:
        return 0
    if channels is None:
        channels = NCCL_CHANNELS_NVLINK if gpu.interconnect_bytes_s > gpu.pcie_bytes_s else NCCL_CHANNELS_PCIE
    simple = NCCL_SIMPLE_BUFFSIZE if buffsize is None else buffsize
    per_connection = simple + NCCL_LL_BUFFSIZE + NCCL_LL128_BUFFSIZE
    total = channels * NCCL_CONNECTIONS_PER_CHANNEL * per_connection
    use_nvls = (nvls_capable(gpu) and ranks > 2) if nvls is None else (nvls and ranks > 2)
    if use_nvls:
        total += NCCL_NVLS_PER_RANK_BYTES * min(ranks, max(1, nvlink_domain))
    return total


def runtime_overhead(
    gpu: GPU,
    *,
    training: bool,
    n_gpus: int = 1,
    tp: int = 1,
    cp: int = 1,
    cuda_version: str | None = None,
    lazy_loading: bool = True,
    context_bytes: int | None = None,
    cublas_workspace_config: str | None = None,
    cublaslt_workspace_bytes: int | None = None,
    nccl_channels: int | None = None,
    nccl_buffsize: int | None = None,
    nvls: bool | None = None,
    extra_outside_bytes: int = 0,
) -> RuntimeOverhead:
    """What one process holds on one GPU besides its tensors.

    Args:
        gpu: the device (its compute capability picks the cuBLAS default).
        training: two cuBLAS handles (forward thread, autograd's backward thread) instead of one.
        n_gpus: GPUs in the job; more than one adds NCCL communicators.
        tp: tensor-parallel degree: a TP communicator of ``tp`` ranks and, when
            ``n_gpus // tp > 1``, a data-parallel one of ``n_gpus // tp`` ranks.
        cp: context-parallel degree: a communicator of ``cp`` ranks for ring attention's collectives
            (the data-parallel one spans the context-parallel ranks too: torchtitan's ``dp_shard_cp``).
        cuda_version: CUDA of the PyTorch build ("12.4"); None assumes DEFAULT_CUDA_VERSION.
        lazy_loading: CUDA_MODULE_LOADING=LAZY (PyTorch's default since 1.13).
        context_bytes: a measured context size, used as is.
        cublas_workspace_config: a CUBLAS_WORKSPACE_CONFIG value.
        cublaslt_workspace_bytes: CUBLASLT_WORKSPACE_SIZE in bytes (0 when unified).
        nccl_channels, nccl_buffsize, nvls: NCCL settings (NCCL_MIN/MAX_NCHANNELS,
            NCCL_BUFFSIZE, NCCL_NVLS_ENABLE); None for NCCL's defaults as modelled here.
        extra_outside_bytes: anything else outside the allocator (cuDNN kernels, other libraries).

    Returns:
        A RuntimeOverhead whose ``explain`` names each part's rule.

    Raises:
        InputError: n_gpus or tp not positive, tp not dividing n_gpus, or a bad version/config.
    """
    if n_gpus < 1 or tp < 1:
        raise InputError(f"n_gpus={n_gpus} and tp={tp} must be >= 1")
    if n_gpus % tp:
        raise InputError(f"tp={tp} must divide n_gpus={n_gpus}")
    if context_bytes is None:
        ctx, ctx_why = context_bytes_for(cuda_version, lazy_loading=lazy_loading)
        if lazy_loading and _version(cuda_version) >= (11, 7):
            modules = LAZY_MODULES_TRAINING_BYTES if training else LAZY_MODULES_INFERENCE_BYTES
            ctx += modules
            ctx_why += (f", plus {human_bytes(modules)} of kernel images a transformer's "
                        f"{'training step' if training else 'forward'} loads (measured on an H200)")
    else:
        ctx, ctx_why = int(context_bytes), "given"
    handles = 2 if training else 1
    blas = cublas_workspace_bytes(gpu, cublas_workspace_config)
    lt = CUBLASLT_WORKSPACE_DEFAULT_BYTES if cublaslt_workspace_bytes is None else int(cublaslt_workspace_bytes)
    workspace = handles * (blas + lt)
    if cp < 1 or (n_gpus // tp) % cp:
        raise InputError(f"cp={cp} must be >= 1 and divide the {n_gpus // tp} GPUs left after tp={tp}")
    groups = [r for r in ((tp, n_gpus // tp, cp) if tp > 1 else (n_gpus, cp)) if r > 1]
    nccl = sum(nccl_communicator_bytes(gpu, r, channels=nccl_channels, buffsize=nccl_buffsize, nvls=nvls)
               for r in groups)
    outside = ctx + nccl + int(extra_outside_bytes)
    lines = [
        f"CUDA context {human_bytes(ctx)}: {ctx_why}; outside the allocator",
        f"cuBLAS workspaces {human_bytes(workspace)}: {handles} handle(s) x ({blas:,} + cuBLASLt {lt:,}) B; "
        "inside the caching allocator",
    ]
    if nccl:
        lines.append(f"NCCL {human_bytes(nccl)}: communicators of {' and '.join(map(str, groups))} ranks; outside")
    if extra_outside_bytes:
        lines.append(f"other libraries {human_bytes(int(extra_outside_bytes))}: given; outside")
    return RuntimeOverhead(ctx, workspace, nccl, outside, "\n".join(lines))
