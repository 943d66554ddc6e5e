"""vLLM 0.19's "non-torch forward increase memory": what is allocated outside PyTorch's caching allocator
between the worker's init snapshot and the end of the profile run, on one rank.

How vLLM 0.19.0 measures it (utils/mem_utils.py, v1/worker/gpu_worker.py): ``Worker.init_device`` first
runs ``init_worker_distributed_environment`` (the TP group's ``PyNcclCommunicator`` with its one-float
warm-up all-reduce, the ``CustomAllreduce`` IPC buffers, the ``SymmMemCommunicator`` buffer), then takes
``init_snapshot = MemorySnapshot()``, whose ``non_torch_memory`` is (total - free) - torch reserved.
``memory_profiling(init_snapshot)`` measures again after ``profile_run`` and ``profile_cudagraph_memory``;
the increase of non_torch_memory is the logged figure. So everything set up before the snapshot (the CUDA
context, the PyNccl communicator and the connections its warm-up made, the custom all-reduce's
max_size + meta buffers and 8 MiB rank data, the symmetric-memory buffer) is not in it, and what comes
later is:

1. Kernel images that CUDA's lazy loading brings into the context on first use (the profile run's
   attention, GEMM and compiled Triton kernels). Their size is no vLLM constant: vramlens takes the
   project's own H200 reading of a transformer forward's lazily loaded kernels
   (``hardware.runtime.LAZY_MODULES_INFERENCE_BYTES``, 297 MiB); the vLLM 0.19 logs show 0.24-0.27 GiB.
2. FlashInfer's all-reduce + RMSNorm fusion workspace (:func:`flashinfer_ar_workspace_bytes`), created
   while the first compile runs ``AllReduceFusionPass`` (compilation/passes/fusion/allreduce_rms_fusion.py),
   where ``enable_allreduce_rms_fusion`` (config/vllm.py) turns it on: tp > 1, compute capability 9.0 or
   10.x, no DP, no PP, and a compiled model (not enforce_eager). One workspace on a single node (the quant
   patterns reuse it: distributed/device_communicators/flashinfer_all_reduce.py ``get_fi_ar_quant_workspace``).
   Its three ``SymmDeviceMemory`` buffers are each rounded up to the driver's recommended multicast
   granularity (flashinfer 0.6.6 comm/mnnvl.py ``_get_allocation_prop``), 512 MiB on Hopper
   (:data:`FI_MC_GRANULARITY`): 1.5 GiB per rank whatever the model, where the buffers themselves take
   0.04-0.51 GiB.
3. A second NCCL communicator, at any tp > 1: the TP group's torch ``ProcessGroupNCCL``
   (``get_tp_group().device_group``), which no collective used before the snapshot (PyNccl's unique id
   travels over the gloo group), so PyTorch creates its NCCL communicator at its first use in the window:
   the profile run's logits all-gather (``LogitsProcessor`` -> ``tensor_model_parallel_all_gather`` ->
   ``DeviceCommunicatorBase.all_gather``: ``dist.all_gather_into_tensor(..., group=self.device_group)``;
   ``CudaCommunicator`` does not override it), or earlier FlashInfer's handle exchange
   (``TorchDistBackend(group=get_tp_group().device_group)``: ``all_gather_object``,
   ``broadcast_object_list``, ``barrier``). Its buffers are vramlens' NCCL model
   (``hardware.runtime.nccl_communicator_bytes`` without NVLS: the channel count NCCL's topology search
   picks, and whether its tuner takes NVLS for that all-gather, are in no log read).
4. NCCL's NVLink SHARP buffers of the PyNccl communicator, connected at run time (NCCL 2.27.5, the release
   torch 2.10 pins and the logs print, ``NCCL_RUNTIME_CONNECT`` 1 in src/init.cc) by the profile run's
   first all-reduce that goes to NCCL: one of max_num_batched_tokens x hidden x dtype bytes that is not
   fused by FlashInfer and not under the custom all-reduce's 8 MiB nor the symmetric-memory maximum
   (distributed/device_communicators/all_reduce_utils.py). NVLS needs more than 2 GPUs in the
   communicator (``ncclNvlsInit``: gpuCount <= 2 returns without it) and a multicast-capable NVSwitch;
   ``ncclNvlsBufferSetup``: nvlsTotalSize = channels (NVLS_NCHANNELS_SM90 16) x 2 x NVLS_CHUNKSIZE
   (128 KiB) x NCCL_STEPS (8) x nHeads (one per local rank).

Against the 0.19 logs (llm-d-planner, H100 SXM) the parts give 2.08 GiB at tp 2 (logged 2.06-2.10, the same
for hidden 2,048 to 8,192, as the multicast rounding makes the workspace) and 2.20 GiB at tp 4 (logged
2.13-2.21). At pp 2 (tp 1) the log shows 0.07 GiB where the kernel term gives 0.29: not explained. Not
modelled: the NCCL communicators' real channel counts (vramlens' NCCL model assumes 16) and NCCL 2.27.5's
per-allocation 2 MiB cuMem rounding of its per-channel device structures (src/channel.cc ``initChannel``,
src/include/alloc.h ``ncclCuMemAlloc``); the multicast granularity of Blackwell (10.x), where the
workspace is counted at the allocation granularity alone, a lower bound.
"""

from __future__ import annotations

from dataclasses import dataclass

from vramlens.hardware.gpu import GPU
from vramlens.hardware.runtime import LAZY_MODULES_INFERENCE_BYTES, nccl_communicator_bytes, nvls_capable
from vramlens.units import MiB, round_up

#: vLLM 0.19 ``FI_ALLREDUCE_FUSION_MAX_SIZE_MB`` (compilation/passes/fusion/allreduce_rms_fusion.py): the
#: largest all-reduce input, in MiB, FlashInfer's fused all-reduce + RMSNorm takes, by compute capability
#: (vLLM keys 90, 100, 103) and TP size; ``PassConfig.flashinfer_max_size`` returns None for other sizes.
FI_FUSION_MAX_SIZE_MIB: dict[tuple[int, int], dict[int, float]] = {
    (9, 0): {2: 64, 4: 2, 8: 0.5},
    (10, 0): {2: 64, 4: 32, 8: 1},
    (10, 3): {2: 64, 4: 64, 8: 2},
}
#: flashinfer 0.6.6 (the release vLLM 0.19.0 requires) comm/trtllm_ar.py: ``BarrierFlagCount`` int32 flags
#: per rank, each buffer rounded up to 2 MiB (``round_up(size, 1 << 21)``), ``MAX_COMM_SIZE`` caps the
#: Lamport region.
FI_BARRIER_FLAG_COUNT = 256
FI_BUFFER_ALIGN = 1 << 21
FI_MAX_COMM_SIZE = 2_147_483_647 & ~((1 << 21) - 1)
#: flashinfer 0.6.6 comm/mnnvl.py ``SymmDeviceMemory``: each buffer is one cuMemCreate of
#: round_up(size + SIGNAL_PAD_SIZE, granularity) on the rank's own GPU.
FI_SIGNAL_PAD = 2048
#: CU_MEM_ALLOC_GRANULARITY_RECOMMENDED for device memory: 2 MiB on current NVIDIA GPUs (the driver
#: reports it; not read from any code here).
CU_MEM_GRANULARITY = 2 * MiB
#: flashinfer 0.6.6 comm/mnnvl.py ``SymmDeviceMemory._get_allocation_prop``: the allocation, already rounded to
#: CU_MEM_GRANULARITY, is rounded up again to cuMulticastGetGranularity(CU_MULTICAST_GRANULARITY_RECOMMENDED),
#: also with ``enable_multicast=False`` as ``trtllm_create_ipc_workspace_for_all_reduce_fusion`` passes it.
#: The driver's value, by compute capability major: Hopper 512 MiB, "the recommended buffer size for NVLS,
#: returned by cuMulticastGetGranularity" (github:microsoft/mscclpp include/mscclpp/nvls.hpp at commit
#: 6c1fa5307ca91b31ed36c477def9a66a4e434f2d, ``DefaultNvlsBufferSize = (1 << 29)``). No value is read for
#: Blackwell: CU_MEM_GRANULARITY there (a lower bound).
FI_MC_GRANULARITY: dict[int, int] = {9: 512 * MiB}
#: vLLM 0.19 ``CustomAllreduce(max_size=8192 * 1024)``, lowered further by CUSTOM_ALL_REDUCE_MAX_SIZES
#: (64 and 32 MiB at tp 2 and 4 on 9.0, so 8 MiB stays); ``should_custom_ar``: input < max_size.
CUSTOM_AR_MAX_BYTES = 8192 * 1024
#: vLLM 0.19 ``SYMM_MEM_ALL_REDUCE_MAX_SIZES`` (all_reduce_utils.py), MiB by capability and TP size;
#: ``should_use_symm_mem``: input < max_size.
SYMM_MEM_MAX_MIB: dict[tuple[int, int], dict[int, int]] = {
    (9, 0): {2: 64, 4: 32, 6: 64, 8: 64},
    (10, 0): {2: 8, 4: 32, 6: 128, 8: 128},
    (10, 3): {2: 4, 4: 32, 6: 32, 8: 64},
}
#: NCCL 2.27.5 src/transport/nvls.cc: NVLS_NCHANNELS_SM90, NCCL_PARAM NvlsChunkSize; src/include/device.h
#: NCCL_STEPS. (Blackwell uses other channel counts: not modelled.)
NCCL_NVLS_CHANNELS_SM90 = 16
NCCL_NVLS_CHUNKSIZE = 128 * 1024
NCCL_STEPS = 8


@dataclass(frozen=True, slots=True)
class NonTorch:
    """One rank's non-torch increase, bytes, by part, with one note line per part."""

    modules: int
    flashinfer: int
    torch_nccl: int
    nvls: int
    notes: tuple[str, ...]

    @property
    def total(self) -> int:
        return self.modules + self.flashinfer + self.torch_nccl + self.nvls


def fusion_tokens(*, cc: tuple[int, int] | None, tp: int, hidden: int, b: int, max_num_batched_tokens: int) -> int:
    """``AllReduceFusionPass.max_token_num``: min(max size // (hidden x b), max_num_batched_tokens); 0 where
    vLLM has no FlashInfer size for this capability and TP size."""
    table = FI_FUSION_MAX_SIZE_MIB.get(cc) if cc else None
    mib = table.get(tp) if table else None
    if mib is None:
        return 0
    return min(int(mib * MiB) // (hidden * b), max_num_batched_tokens)


def flashinfer_ar_workspace_bytes(*, tp: int, tokens: int, hidden: int, fp32: bool = False,
                                  mc_granularity: int = CU_MEM_GRANULARITY) -> int:
    """One rank's FlashInfer 0.6.6 TRTLLM all-reduce fusion workspace, bytes.

    ``trtllm_create_ipc_workspace_for_all_reduce_fusion`` (comm/trtllm_ar.py) with ``use_symm_dev_mem``
    makes three ``SymmDeviceMemory`` buffers: tp x tokens x hidden x 2 B, tp x BarrierFlagCount x 4 B and
    the Lamport buffer 3 x tp x tokens x hidden x (4 with fp32 activations, else 2) B (capped at
    MAX_COMM_SIZE before the x 3); each rounded up to 2 MiB, then to the granularity after its 2,048 B
    signal pad, then to ``mc_granularity`` (the recommended multicast granularity, :data:`FI_MC_GRANULARITY`).
    The 20 B flag array it cudaMallocs beside them is left out.
    """
    if tp < 2 or tokens <= 0:
        return 0
    lamport = min(tp * tokens * hidden * (4 if fp32 else 2), FI_MAX_COMM_SIZE)
    sizes = (tp * tokens * hidden * 2, tp * FI_BARRIER_FLAG_COUNT * 4, 3 * lamport)
    return sum(round_up(round_up(round_up(s, FI_BUFFER_ALIGN) + FI_SIGNAL_PAD, CU_MEM_GRANULARITY), mc_granularity)
               for s in sizes)


def nccl_nvls_bytes(ranks: int) -> int:
    """NCCL 2.27.5 ``ncclNvlsBufferSetup`` on one rank of a single-node communicator of ``ranks`` GPUs:
    16 channels x 2 x 128 KiB x 8 steps x ``ranks`` heads (32 MiB per rank)."""
    return NCCL_NVLS_CHANNELS_SM90 * 2 * NCCL_NVLS_CHUNKSIZE * NCCL_STEPS * ranks


def vllm019_non_torch(gpu: GPU, *, tp: int, pp: int, hidden: int, b: int, max_num_batched_tokens: int,
                      enforce_eager: bool) -> NonTorch:
    """The parts of vLLM 0.19's non-torch increase that vramlens names (see the module docstring)."""
    notes = [f"kernel images loaded lazily in the profile run {LAZY_MODULES_INFERENCE_BYTES:,} B (the project's "
             "H200 reading of a transformer forward, hardware.runtime.LAZY_MODULES_INFERENCE_BYTES; not a vLLM figure)"]
    cc = gpu.compute_capability
    fused = (tp > 1 and pp == 1 and not enforce_eager and cc is not None
             and (cc == (9, 0) or cc[0] == 10))  # enable_allreduce_rms_fusion
    tokens = fusion_tokens(cc=cc, tp=tp, hidden=hidden, b=b, max_num_batched_tokens=max_num_batched_tokens) if fused else 0
    mc = FI_MC_GRANULARITY.get(cc[0], CU_MEM_GRANULARITY) if cc else CU_MEM_GRANULARITY
    mc_said = (f"{mc // MiB:,} MiB on compute capability {cc[0]}.x" if cc and mc != CU_MEM_GRANULARITY else
               "not known for this GPU: the 2 MiB allocation granularity, a lower bound")
    fi = flashinfer_ar_workspace_bytes(tp=tp, tokens=tokens, hidden=hidden, fp32=b == 4, mc_granularity=mc)
    torch_nccl = nccl_communicator_bytes(gpu, tp, nvls=False)
    if fi:
        notes.append(f"FlashInfer all-reduce fusion workspace {fi:,} B (tp {tp} x {tokens:,} tokens x hidden {hidden:,}: "
                     "three SymmDeviceMemory buffers, each rounded up to the recommended multicast granularity, "
                     f"{mc_said}; flashinfer_ar_workspace_bytes)")
    elif tp > 1:
        notes.append("no FlashInfer all-reduce fusion here (needs compute capability 9.0 or 10.x, tp 2/4/8, pp 1 "
                     "and a compiled model): no workspace")
    if torch_nccl:
        notes.append(f"the TP group's torch NCCL communicator, created at its first use in the profile window (the "
                     f"logits all-gather, or FlashInfer's handle exchange), {torch_nccl:,} B (vramlens' NCCL model "
                     "without NVLS)")
    ar_bytes = max_num_batched_tokens * hidden * b
    symm = SYMM_MEM_MAX_MIB.get(cc, {}).get(tp) if cc else None
    to_nccl = tp > 1 and max_num_batched_tokens > tokens and ar_bytes >= CUSTOM_AR_MAX_BYTES and (
        symm is None or ar_bytes >= symm * MiB)
    nvls = nccl_nvls_bytes(tp) if to_nccl and tp > 2 and nvls_capable(gpu) else 0
    if nvls:
        notes.append(f"NCCL 2.27.5 NVLS buffers {nvls:,} B, connected by the profile run's {ar_bytes:,} B all-reduce "
                     f"(16 channels x 2 x 1 MiB x {tp} heads, nccl_nvls_bytes)")
    if tp > 1:
        notes.append("not modelled: the NCCL communicators' real channel counts (vramlens' NCCL model assumes 16) "
                     "and NCCL 2.27.5's 2 MiB cuMem rounding of its per-channel device structures")
    return NonTorch(LAZY_MODULES_INFERENCE_BYTES, fi, torch_nccl, nvls, tuple(notes))
