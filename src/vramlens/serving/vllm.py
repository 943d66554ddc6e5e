"""vLLM: gpu_memory_utilization, the profiled activation peak, and the paged KV block pool.

The arithmetic every release since 0.4 shares (V0 ``Worker.determine_num_available_blocks``, V1
``Worker.determine_available_memory``; the logs name the parts: "model weights take X; non_torch_memory
takes Y; PyTorch activation peak memory takes Z", in 0.19 "Total non KV cache memory: ...;
torch peak memory increase: ...; non-torch forward increase memory: ...; weights memory: ..."):

1. available = gpu_memory_utilization x total - (weights + activation peak + non-torch).
2. ``kv_cache_utils.get_kv_cache_config``: one page per layer holds ``block_size`` tokens,
   page = 2 (K, V) x block_size x n_kv/tp x head_dim x dtype bytes (``FullAttentionSpec.page_size_bytes``;
   multi-head latent attention: 1 x block_size x (kv_lora_rank + qk_rope_head_dim), on every rank);
   num_blocks = available // page // layers-per-group.
3. ``_report_kv_cache_config``: "GPU KV cache size: num_blocks // groups x block_size tokens",
   "Maximum concurrency for max_model_len tokens per request: num_blocks / blocks per request".

What differs between releases (``--version``, see :func:`vllm_release`): whether the CUDA context
is inside the profiled non-torch memory, the sampler the profile run warms up, the scheduler
defaults, and whether an MoE's fused-expert workspace outlives the forward (0.19's WorkspaceManager,
:func:`moe_workspace_bytes`). The weights include the rotary cos/sin cache (``ServedModel.rope_cache_bytes``).

Sliding-window layers (Gemma 2/3, Mistral v0.1, gpt-oss) as V1's hybrid KV cache manager allocates
them (``_get_kv_cache_groups_uniform_page_size``): layers of each attention type are cut into groups
of ``min`` layers (``max`` when max < 1.5 min), each group has its own block table and all groups
share ``group_size`` tensors of num_blocks pages; a sliding layer needs
cdiv(min(window - 1 + max_num_batched_tokens, max_model_len), block_size) + 1 blocks per request
(``SlidingWindowSpec.max_memory_usage_bytes``). Chunked local attention (Llama 4's
``attention_chunk_size`` layers, ServedModel.chunked_local) gets groups of its own where the release's
VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE default turns the hybrid manager on for it
(VllmRelease.chunked_local_hybrid: "1" in 0.19.0's envs.py), a chunked layer needing
cdiv(min(chunk + max_num_batched_tokens, max_model_len), block_size) blocks per request
(``ChunkedLocalAttentionSpec.max_memory_usage_bytes``); where it is off ("There is a latency regression when
using chunked local attention with the hybrid KV cache manager. Disabling it, by default", vllm/config/vllm.py,
pull 21761) every layer's cache is as long as a full layer's. Llama 4 loads whole (vision tower and projector,
ServedModel from the catalog's whole build: vramlens.serving.api.resolve_model), MXFP4 experts as the
TRITON backend lays them out (:func:`mxfp4_moe_bytes`), and 0.19's Triton sampler keeps a top-k buffer
sized by the GPU's SM count (:func:`topk_buffer_bytes`). CUDA graphs are captured after the KV cache is
allocated (V0, and V1 through 0.19: its log shows VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS off and
"CUDA graph pool memory: ... (actual)" after the KV cache), so their pool comes out of the
(1 - utilization) headroom and changes no block count.

Speculative decoding (``--speculative-config``, read in the 0.19.0 wheel; :mod:`vramlens.serving.speculative`
for the drafts' weights): ``GPUModelRunner.load_model`` loads the drafter inside the same
``DeviceMemoryProfiler`` as the target (``self.drafter.load_model(self.model)``), so "model weights take"
includes the draft's kept tensors (a shared embedding or lm_head is deleted from the draft before the
measure ends: ``torch.cuda.max_memory_allocated`` after ``reset_peak_memory_stats``). The draft's
attention layers register in the same forward context, so ``get_kv_cache_spec`` returns target and
draft layers together: all full attention of one page size makes one group of L + L_draft layers
(``_get_kv_cache_groups_uniform_spec``, num_blocks = available // page // (L + L_draft)); pages of
two sizes one ``UniformTypeKVCacheSpecs`` group (num_blocks = available // (L page + L_draft
page_draft), ``get_kv_cache_config_from_groups``). The profile run's ``_dummy_run`` runs
``drafter.dummy_run(num_tokens)`` after the target's forward, whose output it still holds (EAGLE-3 also
the three auxiliary hidden states), and ``_dummy_sampler_run`` warms up the rejection sampler after the sampler
(:data:`REJECTION_BYTES`), for every method, ngram included. The drafter's CUDA graphs are captured with the target's, after the
KV cache. A target whose cache is hybrid (sliding or chunked layers) is not modelled with a draft.
A hybrid state model (Gated DeltaNet: Qwen3-Next) is, as 0.19.0 does it, with ``mtp`` (``qwen3_next_mtp``) or
``ngram``: the conv state keeps num_speculative_tokens more rows, each state layer num_speculative_tokens more
blocks per request, and the MTP layer's FullAttentionSpec counts with the target's attention layers in the
groups (:func:`hybrid_pages`, :func:`hybrid_speculative_problems`).
"""

from __future__ import annotations

from dataclasses import dataclass
from math import lcm

from vramlens.errors import ConfigError, EngineRefusal
from vramlens.hardware.gpu import GPU
from vramlens.hardware.runtime import context_bytes_for, cublas_workspace_bytes, nccl_communicator_bytes
from vramlens.models.hybrid import HybridLayout
from vramlens.serving.common import (
    CUDA_GRAPH_BYTES,
    MXFP4_BLOCK,
    ServedModel,
    kv_cell_bytes,
    kv_heads_per_gpu,
    mxfp4_bytes,
    parse_version,
    roofline,
    stage_layers,
    stage_weight_bytes,
)
from vramlens.serving.result import Capacity, EngineFigure
from vramlens.serving.speculative import KINDS, VLLM_METHODS, Draft, draft_for, draft_problems
from vramlens.serving.vllm_nontorch import vllm019_non_torch
from vramlens.units import DTYPE_BYTES, GiB, ceil_div, round_up

#: The release followed when none is given: the newest checked against published logs.
DEFAULT_VERSION = "0.19"
OLDEST_VERSION = (0, 4, 0)
#: ``--kv-cache-dtype`` choices (vLLM CacheConfig) -> bytes per element; "auto" is the model dtype.
KV_CACHE_DTYPES = {"auto": 0, "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1}
#: ``--dtype`` choices (vLLM ModelConfig) -> vramlens dtype; "auto" is the checkpoint's (common.py).
DTYPES = {"auto": None, "half": "fp16", "float16": "fp16", "bfloat16": "bf16", "float": "fp32", "float32": "fp32"}
#: ``--block-size`` choices (vLLM 0.10 CacheConfig.block_size: Literal[1, 8, 16, 32, 64, 128]).
BLOCK_SIZES = (1, 8, 16, 32, 64, 128)
#: ``--quantization`` -> vramlens' quantization formula (estimator/weights.py); bitsandbytes loads
#: 4-bit NF4 in vLLM (``BitsAndBytesConfig`` default load_in_4bit).
QUANTIZATIONS = {"awq": "awq-4bit", "gptq": "gptq-4bit", "fp8": "fp8", "bitsandbytes": "nf4"}
#: V0 SchedulerConfig defaults for ``vllm serve``: max_num_seqs 256; max_num_batched_tokens
#: max(max_model_len, 2048) without chunked prefill, and 2048 (``_DEFAULT_MAX_NUM_BATCHED_TOKENS``)
#: with it, which EngineArgs turns on for max_model_len > 32K.
DEFAULT_MAX_NUM_SEQS = 256
DEFAULT_MAX_NUM_BATCHED_TOKENS = 2048
CHUNKED_PREFILL_FROM = 32_768
#: V1 EngineArgs ``_set_default_args`` for the OPENAI_API_SERVER usage context on a GPU of at least
#: 70 GiB: max_num_batched_tokens 8192, max_num_seqs 1024 (the 0.19 log: "Defaulting
#: max_num_batched_tokens to 8192 for OPENAI_API_SERVER usage context", "Defaulting max_num_seqs to
#: 1024"); smaller GPUs keep 2048 and 256. Chunked prefill is always on in V1.
LARGE_GPU_BYTES = 70 * GiB
LARGE_GPU_MAX_NUM_BATCHED_TOKENS, LARGE_GPU_MAX_NUM_SEQS = 8192, 1024
#: Bytes per logits element alive at the sampler's peak in the profile run's ``_dummy_sampler_run``
#: (on top of the model-dtype logits from ``compute_logits``, b bytes, which the caller still holds):
#: "sort" - V0 ``Sampler._apply_top_k_top_p`` and V1 ``apply_top_k_top_p`` (the dummy requests set
#: top_k and top_p) while ``logits.sort`` runs: the fp32 logits (``logits.to(torch.float)``) 4, the
#: sorted values 4 and int64 indices 8, and PyTorch's segmented sort scratch for rows over 4,096
#: values (aten/src/ATen/native/cuda/Sort.cu ``segmented_sort_pairs_by_full_sort``: two int64
#: index-and-segment arrays, 16, and cub's alternate key buffer, 4; sized from the kernel's structure,
#: not counted byte by byte: the logged peaks of 0.6.4, 0.8.2 and 0.11 are within 8% of it): 36 B;
#: "triton" - V1's Triton top-k/top-p kernel (``apply_top_k_top_p_triton``, no sort): fp32 logits 4,
#: the softmax probabilities 4 and ``random_sample``'s exponential noise 4: 12 B.
SAMPLER_BYTES = {"sort": 36, "triton": 12}
#: Bytes per logits element alive at the rejection sampler's peak in 0.19's ``_dummy_sampler_run`` with a
#: speculative config, beyond 3 model-dtype copies (3b: the ``torch.randn(num_tokens + num_reqs, V)`` logits of one
#: draft and one bonus token per request, 2b, and the bonus rows ``logits[bonus_logits_indices]`` still named in
#: ``RejectionSampler.forward``, b): per target row, ``raw_target_logits.to(torch.float32)`` 4, its ``clone()``
#: (the default raw logprobs mode) 4, ``rejection_sample``'s fp32 ``softmax`` 4, and ``sample_recovered_tokens``'
#: exponential noise ``q`` 4 and ``q.reciprocal()`` 4 (v1/sample/rejection_sampler.py): 20 B. Read, not measured.
REJECTION_BYTES = 20
#: vLLM 0.19 ``WorkspaceManager.get_simultaneous`` (v1/worker/workspace.py) rounds each view it carves
#: from its one buffer up to 256 bytes.
WORKSPACE_ALIGN = 256
#: Bytes per token and chosen expert of the router's top-k outputs (vLLM 0.19
#: fused_moe/router/fused_topk_router.py ``fused_topk``): topk_weights fp32 4, topk_ids int32 4,
#: token_expert_indices int32 4.
TOPK_BYTES = 12
#: vLLM 0.19 ``apply_top_k_top_p`` (v1/sample/ops/topk_topp_sampler.py) runs the Triton kernel for
#: batches of at least this many rows, PyTorch's sort below it.
TRITON_TOPK_MIN_ROWS = 8
#: vLLM 0.19's MXFP4 MoE on the TRITON backend (fused_moe/oracle/mxfp4.py, chosen on compute
#: capability 9.x: the logs' "Using 'TRITON' Mxfp4 MoE backend"): ``mxfp4_round_up_hidden_size_and_intermediate_size``
#: rounds each rank's expert width up to 64 on CUDA; triton_kernels' Hopper layouts
#: (``HopperMXValueLayout.swizzle_data``, ``HopperMXScaleLayout.swizzle_data`` with ``_swizzle_mxfp4``'s
#: num_warps 8) pad the packed values' two dimensions to 64 and the scales' rows to 2 x 8 x 2 x 8 = 256.
MXFP4_TRITON_WIDTH_ALIGN = 64
MXFP4_HOPPER_VALUE_ALIGN = 64
MXFP4_HOPPER_SCALE_ROWS_ALIGN = 256


@dataclass(frozen=True, slots=True)
class VllmRelease:
    """What one vLLM release does differently in the start-up arithmetic.

    ``context_in_budget``: the CUDA context (and anything else outside PyTorch before the weights)
    counts in the profiled non-torch memory. 0.6.3-0.6.4 (V0 worker.py) and V1 0.8.0-0.9.1
    (gpu_worker.py) take non-torch = (total - free) - torch allocated after the profile run, so the
    context is in it; 0.4-0.6.2 take init_gpu_memory - free, and V0 0.6.5+ and V1 0.9.2+
    ``memory_profiling`` subtract a baseline snapshot taken after the context exists (pull 10511,
    pull 19312), so it is not. ``sampler``: a key of SAMPLER_BYTES (the sort path through 0.11,
    whose logs show a sampler peak of 9.5 logits copies; the Triton path by 0.19, 3.5 copies; the
    release between that switched is not pinned here). ``large_gpu_defaults``: V1's 8192 / 1024
    scheduler defaults on >= 70 GiB GPUs (logged by 0.11 and 0.19; taken from 0.10).
    ``moe_workspace``: MoE experts run in a workspace the process keeps (:func:`moe_workspace_bytes`,
    read in 0.19; the release that brought vLLM's WorkspaceManager is not pinned here, older ones
    keep the per-call intermediate caches of :func:`profile_peak_bytes`).
    ``chunked_local_hybrid``: chunked local attention layers (Llama 4) get KV cache groups of their own
    in the hybrid KV cache manager. vLLM pull 21761 added VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE
    with the manager off for them by default ("There is a latency regression when using chunked local
    attention with the hybrid KV cache manager. Disabling it, by default", vllm/config.py); 0.19.0's
    envs.py defaults it to "1" (the Scout log's compile factors: 'VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE':
    True), after pull 29627 turned it on; that release is not pinned here, so releases before 0.19 keep
    every chunked layer's cache at full length.
    ``profile_window``: what the profile window holds is read from 0.19.0's code: the non-torch increase
    after the init snapshot (:mod:`vramlens.serving.vllm_nontorch`) and PyTorch's cuBLAS workspace,
    allocated by the process's first GEMM, in the torch peak. Older releases keep vramlens' NCCL model
    (and the CUDA context where ``context_in_budget``) and no workspace: their code for it is not read.
    """

    version: tuple[int, int, int]
    v1: bool
    context_in_budget: bool
    sampler: str
    large_gpu_defaults: bool
    moe_workspace: bool = False
    chunked_local_hybrid: bool = False
    profile_window: bool = False

    @property
    def name(self) -> str:
        return f"vLLM {'.'.join(map(str, self.version))} ({'V1' if self.v1 else 'V0'} engine)"


def vllm_release(version: tuple[int, int, int], gpu: GPU, use_v1: bool | None = None) -> VllmRelease:
    """The behaviour of ``version`` on ``gpu`` (see VllmRelease).

    V1 is the default engine from 0.8.0 on GPUs of compute capability 8.0 and up; older GPUs (T4,
    V100) fall back to V0 (0.8.2 on a T4: "Compute Capability < 8.0 is not supported by the V1
    Engine. Falling back to V0."), taken to last until 0.10. ``use_v1`` is VLLM_USE_V1 (0.8-0.10),
    which overrides the choice; a GPU given by size alone has no compute capability and gets V1.
    """
    cc = gpu.compute_capability
    v1 = version >= (0, 8, 0) and (cc is None or cc >= (8, 0) or version >= (0, 10, 0))
    if use_v1 is not None and (0, 8, 0) <= version < (0, 11, 0):
        v1 = use_v1
    if v1:
        in_budget = version < (0, 9, 2)
    else:
        in_budget = (0, 6, 3) <= version < (0, 6, 5)
    return VllmRelease(version=version, v1=v1, context_in_budget=in_budget,
                       sampler="triton" if version >= (0, 19, 0) else "sort",
                       large_gpu_defaults=v1 and version >= (0, 10, 0), moe_workspace=version >= (0, 19, 0),
                       chunked_local_hybrid=v1 and version >= (0, 19, 0), profile_window=v1 and version >= (0, 19, 0))


def vllm_problems(m: ServedModel, *, tp: int, pp: int, gpu_memory_utilization: float, max_model_len: int,
                  max_num_seqs: int, max_num_batched_tokens: int, kv_cache_dtype: str, block_size: int) -> list[str]:
    """What vLLM would refuse at start-up, in its own words (vllm/config.py, 0.6-0.19)."""
    p = []
    if not 0 < gpu_memory_utilization <= 1:
        p.append(f"GPU memory utilization must be within (0, 1]. Got {gpu_memory_utilization}. "
                 "(vLLM CacheConfig; pass --gpu-memory-utilization 0.9)")
    if max_model_len > m.max_position and not m.rope_scaled:
        p.append(f"User-specified max_model_len ({max_model_len}) is greater than the derived max_model_len "
                 f"(max_position_embeddings={m.max_position} in model's config.json). This may lead to incorrect "
                 "model outputs or CUDA errors (vLLM refuses it unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1)")
    if m.n_heads % tp:
        p.append(f"Total number of attention heads ({m.n_heads}) must be divisible by tensor parallel size ({tp}).")
    if pp > m.n_layers:
        p.append(f"pipeline parallel size ({pp}) exceeds the {m.n_layers} layers of {m.name}")
    if kv_cache_dtype not in KV_CACHE_DTYPES:
        p.append(f"Unknown kv cache dtype: {kv_cache_dtype}: choose from {', '.join(KV_CACHE_DTYPES)} "
                 "(kv_cache_dtype, --kv-cache-dtype)")
    if block_size not in BLOCK_SIZES:
        p.append(f"block_size={block_size} is not one of {', '.join(map(str, BLOCK_SIZES))} (vLLM CacheConfig)")
    if max_num_batched_tokens < max_num_seqs:
        p.append(f"max_num_batched_tokens ({max_num_batched_tokens}) must be greater than or equal to "
                 f"max_num_seqs ({max_num_seqs}).")
    return p


def moe_workspace_bytes(m: ServedModel, *, tokens: int, tp: int, b: int) -> int:
    """The fused-MoE workspace vLLM 0.19 allocates in the profile run's forward and keeps, in bytes.

    Read in the vllm 0.19.0 release (model_executor/layers/fused_moe/): unquantized experts run on
    the TRITON backend by default on CUDA (oracle/unquantized.py; the logs: "Using TRITON backend for
    Unquantized MoE"), ``TritonExperts`` (fused_moe.py) inside ``FusedMoEKernelModularImpl``
    (modular_kernel.py). ``_allocate_buffers`` takes ``TritonExperts.workspace_shapes`` for M tokens
    (the whole forward: M_chunk = M_full, 0.19's modular kernel does not chunk): workspace13
    (M, k, max(N/2, K)), workspace2 (M, k, max(N, K)) and the output (M, K), with N = the rank's
    rows of w13 = 2 f / tp (gate and up), K = hidden, k = experts per token, all in the activation
    dtype b (``workspace_dtype``); workspace13 and the output share one region of
    max(M k max(N/2, K), M K) elements. ``current_workspace_manager().get_simultaneous`` carves that
    region and workspace2 from one buffer, each rounded up to WORKSPACE_ALIGN bytes
    (v1/worker/workspace.py); the WorkspaceManager keeps that buffer for the process and only grows
    it, so every MoE layer reuses it and it is still held while the profile run's sampler runs.
    ``TritonExperts.apply`` keeps its three intermediate caches in it (cache1 and cache3 in
    workspace2, cache2 in workspace13). 0 for a dense model and for experts served as MXFP4, which go
    through a monolithic kernel (oracle/mxfp4.py) that does not use the manager.
    """
    if m.experts_per_token <= 0 or m.mxfp4_experts:
        return 0
    k, n, h = m.experts_per_token, 2 * m.ffn // tp, m.hidden
    region13 = max(tokens * k * max(n // 2, h), tokens * h)
    region2 = tokens * k * max(n, h)
    return round_up(region13 * b, WORKSPACE_ALIGN) + round_up(region2 * b, WORKSPACE_ALIGN)


def topk_buffer_bytes(*, rows: int, vocab: int, sms: int | None) -> int:
    """The per-program buffer vLLM 0.19's Triton top-k/top-p kernel allocates and keeps, in bytes.

    ``apply_top_k_top_p_triton`` (v1/sample/ops/topk_topp_triton.py) launches min(SMs, rows) programs
    (``num_compute_units``) and takes its scratch from ``_TRITON_BUFFER_CACHE``: on a miss it allocates
    ``logits.new_empty((min(next_power_of_2(programs), SMs), vocab))``, fp32 like the logits it is
    given (4 B), and keeps it for the process, so it is alive at the sampler's peak. 0 below
    TRITON_TOPK_MIN_ROWS rows (the sort path) and where the GPU's SM count is unknown (a GPU given by
    size; the caller notes it).
    """
    if sms is None or rows < TRITON_TOPK_MIN_ROWS:
        return 0
    programs = min(sms, rows)
    return min(1 << (programs - 1).bit_length(), sms) * vocab * 4


def mxfp4_moe_bytes(m: ServedModel, *, tp: int, b: int) -> tuple[int, int]:
    """(vLLM 0.19's bytes, the ServedModel's bytes) of the MXFP4 experts on one TP rank.

    ``Mxfp4MoEMethod.create_weights`` (quantization/mxfp4.py) makes, per MoE layer and rank,
    w13 (E, 2 f', h/2) and w2 (E, h, f'/2) packed uint8, their E8M0 scales (E, 2 f', h/32) and
    (E, h, f'/32), and bf16 biases (E, 2 f') and (E, h) (w2's bias whole on every rank), with
    f' = round_up(f / tp, MXFP4_TRITON_WIDTH_ALIGN). ``_setup_kernel`` on the TRITON backend then
    swizzles values and scales into new tensors (``convert_to_mxfp4_moe_kernel_format`` ->
    ``_swizzle_mxfp4``: values padded to MXFP4_HOPPER_VALUE_ALIGN in both dimensions, scales' rows to
    MXFP4_HOPPER_SCALE_ROWS_ALIGN and columns to 2), frees the unswizzled values (``del
    layer.w13_weight``) but keeps the unswizzled scales registered on the layer (``w13_weight_scale``,
    ``w2_weight_scale``: only the other backends ``replace_parameter`` them), and replaces the biases
    by fp32 copies. The ServedModel holds f x h MXFP4 experts (4.25 bits) and model-dtype biases,
    split evenly over the ranks.
    """
    e, f, h, layers = m.n_experts, m.ffn, m.hidden, m.expert_layers
    fp = round_up(ceil_div(f, tp), MXFP4_TRITON_WIDTH_ALIGN)
    va, sa = MXFP4_HOPPER_VALUE_ALIGN, MXFP4_HOPPER_SCALE_ROWS_ALIGN
    values = e * (round_up(2 * fp, va) * round_up(h // 2, va) + round_up(h, va) * round_up(fp // 2, va))
    scales = e * (2 * fp * (h // MXFP4_BLOCK) + h * (fp // MXFP4_BLOCK))
    swizzled = e * (round_up(2 * fp, sa) * round_up(h // MXFP4_BLOCK, 2) + round_up(h, sa) * round_up(fp // MXFP4_BLOCK, 2))
    biases = e * (2 * fp + h) * 4 if m.expert_bias_numel else 0
    served = mxfp4_bytes(e * 2 * f * h) + mxfp4_bytes(e * f * h) + m.expert_bias_numel * b
    return layers * (values + scales + swizzled + biases), ceil_div(layers * served, tp)


def profile_peak_bytes(m: ServedModel, *, tokens: int, rows: int, tp: int, b: int, sampler: str,
                       moe_workspace: bool = False, topk_buffer: int = 0) -> tuple[int, str]:
    """The torch peak of vLLM's ``profile_run``: the larger of its two phases.

    The forward over ``tokens`` tokens (``_dummy_run(max_num_batched_tokens)``): the residual stream
    and its normed copy (2 T h) plus the larger of the MLP's working set (fused gate_up output 2 f and
    the SiLU-and-mul output f: 3 T f / tp, f = k x f_expert for MoE) and attention's (fused qkv output
    (a + 2 n_kv) d / tp; FlashAttention keeps no T x T matrix), in b-byte elements. Then the sampler
    over one logits row per dummy request (``_dummy_sampler_run``; the logits are gathered to the full
    vocabulary on every TP rank): rows x V x (b + SAMPLER_BYTES[sampler]), while the forward's output
    T x h x b is still held. ``topk_buffer`` (:func:`topk_buffer_bytes`, the Triton sampler's kept
    scratch) is alive in the sampler phase too.

    With ``moe_workspace`` (0.19, VllmRelease.moe_workspace) a MoE's expert caches are views of
    :func:`moe_workspace_bytes`, which is held in both phases; beside it an MoE layer holds, per token,
    the router's logits (E x b: one per routed expert, the gate's output dtype), the top-k outputs
    (k x TOPK_BYTES), the layer's output (h x b: ``torch.empty_like(hidden_states)`` in the kernel's
    ``apply``) and a shared expert's gate_up and SiLU-and-mul outputs (3 f_shared / tp x b). The
    expert ids that ``moe_align_block_size`` pads per expert to BLOCK_SIZE_M (T k + E (BLOCK_SIZE_M -
    1) int32, under 1 MiB for these models; the block size comes from per-GPU tuned config files) are
    not counted, nor a dense MLP layer after the first MoE layer (Llama 4 Maverick's interleaved
    ones; ServedModel keeps the experts' width only).
    """
    attn = (m.n_heads + 2 * m.n_kv_heads) * m.head_dim // tp
    ws = moe_workspace_bytes(m, tokens=tokens, tp=tp, b=b) if moe_workspace else 0
    if ws:
        layer = (m.n_experts * b + m.experts_per_token * TOPK_BYTES + m.hidden * b
                 + 3 * m.shared_expert_ffn // tp * b)
        forward = tokens * (2 * m.hidden * b + max(layer, attn * b)) + ws
    else:
        f = m.ffn * max(1, m.experts_per_token)
        mlp = 3 * f // tp
        forward = tokens * b * (2 * m.hidden + max(mlp, attn))
    sampling = rows * m.vocab * (b + SAMPLER_BYTES[sampler]) + tokens * m.hidden * b + ws + topk_buffer
    phase = "forward" if forward >= sampling else f"sampler ({sampler})"
    held = (f" + MoE workspace {ws:,}" if ws else "") + (f" + top-k buffer {topk_buffer:,}" if topk_buffer else "")
    return max(forward, sampling), (
        f"max(forward {forward:,}, sampler {rows} rows x {m.vocab:,} x (b + {SAMPLER_BYTES[sampler]}) B + "
        f"hidden {tokens * m.hidden * b:,}{held}) = {phase}")


#: CacheConfig.block_size when not given and the model is not hybrid.
DEFAULT_BLOCK_SIZE = 16
#: ``HybridAttentionMambaModelConfig.verify_and_update_config`` (vllm/model_executor/models/config.py): the
#: attention block size it picks is a multiple of the kernel's alignment, 16 ("FlashAttention (FA) requires
#: block size to be multiple of 16"), or 32 on compute capability 10.x for head size 256 under FlashInfer
#: (the default backend there: "head size 256 and block size 16 is not supported on blackwell").
KERNEL_BLOCK_ALIGNMENT = 16
BLACKWELL_HEAD256_ALIGNMENT = 32


#: ``--mamba-cache-mode`` choices (vLLM 0.15.0-0.19.0 CacheConfig.mamba_cache_mode: MambaCacheMode).
MAMBA_CACHE_MODES = ("none", "align", "all")
#: The first release with ``--mamba-cache-mode`` (absent from the 0.14.0 wheel, in 0.15.0's vllm/config/cache.py).
MAMBA_CACHE_MODE_FROM = (0, 15, 0)
#: The first release that keeps prefix caching on for a hybrid model: 0.11.0's ``MambaModelConfig`` turns it off
#: for every one ("Hybrid or mamba-based model detected: disabling prefix caching since it is not yet
#: supported."), 0.11.1's keeps it for models with ``supports_mamba_prefix_caching`` (both wheels read).
HYBRID_PREFIX_CACHING_FROM = (0, 11, 1)
#: The first release whose Mamba align mode asserts block_size <= max_num_batched_tokens (vllm/config/vllm.py
#: ``VllmConfig.__post_init__``: in the 0.17.0 wheel, not in 0.16.0's).
ALIGN_BATCH_CHECK_FROM = (0, 17, 0)
#: ``ModelConfig.get_mamba_chunk_size`` when the config has neither ``mamba_chunk_size`` nor ``chunk_size``
#: (vllm/config/model.py, 0.11.1-0.19.0: ``chunk_size = 2048``).
DEFAULT_MAMBA_CHUNK_SIZE = 2048
#: The first release whose ``get_kv_cache_configs`` groups the whole model's layers (``global_kv_cache_groups``,
#: in the 0.11.0 wheel, not in 0.10.2's) and gives each pipeline stage its layers of every group.
HYBRID_PP_FROM = (0, 11, 0)
#: Mixers whose vLLM model classes have ``SupportsMambaPrefixCaching`` (model_executor/models/, 0.11.1-0.19.0:
#: bamba, falcon_h1, granitemoehybrid, jamba, nemotron_h, and the pure mamba, mamba2, zamba2): the Mamba1/2
#: hybrids vramlens reads; Qwen3NextForCausalLM (Gated DeltaNet) and Lfm2ForCausalLM (short convolutions) lack it.
MAMBA_PREFIX_CACHING_MIXERS = ("mamba1", "mamba2")


@dataclass(frozen=True, slots=True)
class HybridPages:
    """vLLM's page unification for a hybrid model: the attention block size and the state page.

    ``mode``: the Mamba cache mode vLLM runs ("none": prefix caching off; "all" and "align" as
    ``--mamba-cache-mode`` names them, "all" also for 0.11.1-0.14's prefix caching, which allocates alike).
    ``state_block_size``: ``CacheConfig.mamba_block_size``, the MambaSpec's block size.
    """

    block_size: int
    state_bytes: int
    page_bytes: int
    notes: tuple[str, ...]
    figures: tuple[EngineFigure, ...]
    mode: str = "none"
    state_block_size: int = 0
    #: num_speculative_tokens: ``MambaSpec.num_speculative_blocks`` (vllm/model_executor/layers/mamba/abstract.py
    #: ``get_kv_cache_spec``, 0.19.0)
    num_spec: int = 0

    def state_blocks(self, tokens: int) -> int:
        """Blocks one state layer needs for a request of ``tokens`` (``MambaSpec.max_memory_usage_bytes`` //
        page, vllm/v1/kv_cache_interface.py 0.15.0-0.19.0: "all" cdiv(max_model_len, block_size), "align" 2,
        "none" 1; 0.11.1-0.14.0: cdiv(max_model_len, block_size), one block when mamba_block_size is
        max_model_len, i.e. without prefix caching; 0.10-0.11.0: one page). With speculative decoding (0.19.0)
        "align" and "none" keep ``num_speculative_blocks`` more: 2 + n and 1 + n."""
        if self.mode == "all":
            return ceil_div(tokens, self.state_block_size)
        return (2 if self.mode == "align" else 1) + self.num_spec


def hybrid_problems(h: HybridLayout, rel: VllmRelease, *, tp: int, pp: int) -> list[str]:
    """What vramlens does not follow (or vLLM refuses) for a hybrid model."""
    p = []
    if not rel.v1 or rel.version < (0, 10, 0):
        p.append(f"{rel.name}: hybrid (attention + recurrent state) models are modelled for the V1 engine only "
                 "(vLLM 0.10 or later): pass --vllm-version 0.19")
    if pp > 1 and rel.version < HYBRID_PP_FROM:
        # vLLM serves these models over pipeline stages (their classes have SupportsPP); 0.10 groups each stage's
        # layers on their own (get_kv_cache_configs calls get_kv_cache_config per worker), not laid out here
        p.append(f"pp={pp}: pipeline parallelism of a hybrid model is modelled from vLLM 0.11 (KV cache groups of "
                 f"the whole model, split over the stages): {rel.name} groups each stage's layers on its own: pass "
                 "--vllm-version 0.19 or use --tp")
    if not h.n_attention:
        p.append("a model of recurrent-state blocks only (no attention block) is not modelled: vLLM sizes its pages "
                 "from the state alone")
    why = h.tp_problem(tp)
    if why:
        p.append(f"{why} (vLLM's MambaStateShapeCalculator divides them over the ranks): choose another --tp")
    return p


def group_ratio(rel: VllmRelease) -> float:
    """``_get_kv_cache_groups_uniform_page_size``'s threshold: layers of two kinds are grouped by the larger count
    when it is under this many times the smaller, else by the smaller (vllm/v1/core/kv_cache_utils.py: 1.5 in the
    0.18.0 and 0.19.0 wheels, 1.25 in 0.12.0-0.17.0; 0.10.2-0.11.2 always group by the smaller: 1)."""
    return 1.5 if rel.version >= (0, 18, 0) else 1.25 if rel.version >= (0, 12, 0) else 1.0


def pp_partitions(n_layers: int, pp: int) -> list[int]:
    """Blocks per pipeline stage: vLLM ``get_pp_indices`` (vllm/distributed/utils.py, 0.11.0-0.19.0) without
    VLLM_PP_LAYER_PARTITION: n // pp each, the remainder one each to the stages before the last, from the
    second-to-last backwards."""
    parts = [n_layers // pp] * pp
    for i in range(2, n_layers % pp + 2):
        parts[-i] += 1
    return parts


def hybrid_stage_groups(h: HybridLayout, pp: int, group_size: int) -> tuple[list[int], list[int]]:
    """(layers of the largest group on each stage, attention layers on each stage) for a hybrid over ``pp`` stages.

    vLLM 0.11-0.19 ``get_kv_cache_configs`` groups the whole model's layers (``_get_kv_cache_groups_uniform_page_size``:
    of a kind's n layers, in model order, group i of cdiv(n, group_size) takes layers[i::cdiv(n, group_size)]), then
    gives each stage the layers of every group it holds; a stage's pool is available // (page x its largest group),
    and every stage keeps the smallest stage's number of blocks (vllm/v1/core/kv_cache_utils.py).
    """
    stage: list[int] = []
    for s, n in enumerate(pp_partitions(len(h.kinds), pp)):
        stage += [s] * n
    attention = [i for i in range(len(h.kinds)) if h.has_kv(i)]
    state = [i for i in range(len(h.kinds)) if h.has_state(i)]
    largest = [0] * pp
    for layers in (attention, state):
        n_groups = ceil_div(len(layers), group_size) if layers else 0
        for g in range(n_groups):
            counts = [0] * pp
            for i in layers[g::n_groups]:
                counts[stage[i]] += 1
            largest = [max(a, c) for a, c in zip(largest, counts, strict=True)]
    return largest, [sum(1 for i in attention if stage[i] == s) for s in range(pp)]


def hybrid_cache_mode(h: HybridLayout, rel: VllmRelease, *, enable_prefix_caching: bool | None,
                      mamba_cache_mode: str | None) -> tuple[str, tuple[str, ...]]:
    """(the Mamba cache mode vLLM runs, its log lines) for a hybrid model, as ``MambaModelConfig`` decides.

    ``--enable-prefix-caching`` is off by default for hybrid models in every release read (0.10.2-0.19.0:
    ``ModelConfig.is_prefix_caching_supported`` is False for attn_type "hybrid", "the feature is still
    experimental"). Given: 0.10 and 0.11.0 turn it off again; 0.11.1-0.14 keep it for the models with
    ``supports_mamba_prefix_caching`` (MAMBA_PREFIX_CACHING_MIXERS) and turn it off for the others; from 0.15
    ``--mamba-cache-mode`` "none" becomes "all" for those models and "align" for the others, "all" given for
    the others falls back to "align", and a mode given without prefix caching is set to "none"
    (vllm/model_executor/models/config.py MambaModelConfig.verify_and_update_config in each wheel).
    """
    supported = h.mixer in MAMBA_PREFIX_CACHING_MIXERS
    v = rel.version
    if not enable_prefix_caching:
        if mamba_cache_mode not in (None, "none"):
            return "none", ("Mamba cache mode is set to 'none' when prefix caching is disabled (vLLM)",)
        return "none", ()
    if v < HYBRID_PREFIX_CACHING_FROM:
        return "none", ("Hybrid or mamba-based model detected: disabling prefix caching since it is not yet "
                        "supported. (vLLM; it is kept from 0.11.1 for Mamba hybrids)",)
    if v < MAMBA_CACHE_MODE_FROM:
        if not supported:
            return "none", ("Hybrid or mamba-based model detected without support for prefix caching: disabling. "
                            f"(vLLM: the {h.mixer} model classes lack supports_mamba_prefix_caching)",)
        return "all", ("Warning: Prefix caching is currently enabled. Its support for Mamba layers is experimental. "
                       "(vLLM; the state of every block_size-th token is cached, as 0.15's mode 'all')",)
    logs: tuple[str, ...] = ()
    mode = mamba_cache_mode or "none"
    if mode == "none":
        mode = "all" if supported else "align"
        logs += (f"Mamba cache mode is set to '{mode}' for ... by default when prefix caching is enabled (vLLM)",)
    if mode == "all" and not supported:
        mode = "align"
        logs += ("Hybrid or mamba-based model detected without support for prefix caching with Mamba cache 'all' "
                 "mode: falling back to 'align' mode. (vLLM)",)
    return mode, logs + (f"Warning: Prefix caching in Mamba cache '{mode}' mode is currently enabled. (vLLM)",)


def hybrid_pages(m: ServedModel, h: HybridLayout, gpu: GPU, *, tp: int, b: int, kv_b: int,
                 block_size: int | None, mode: str = "none", max_model_len: int = 0,
                 logs: tuple[str, ...] = (), num_spec: int = 0) -> HybridPages:
    """The attention block size and the padded state page vLLM V1 gives a hybrid model.

    ``HybridAttentionMambaModelConfig.verify_and_update_config`` (vllm/model_executor/models/config.py;
    read at commit 0144dd5b0d2d, in the 0.10.2, 0.11.1, 0.12.0, 0.15.0 and 0.19.0 wheels): one token's
    attention page a1 = 2 x n_kv/tp x head_dim x kv bytes (``FullAttentionSpec(block_size=1).page_size_bytes``);
    the state page S = ``MambaSpec.page_size_bytes`` = the conv and ssm states of one block for one request
    (:meth:`HybridLayout.state_bytes`: the conv state in the model dtype, ``mamba_cache_dtype`` "auto"; the
    ssm state in ``mamba_ssm_cache_dtype``).

    ``mode`` (:func:`hybrid_cache_mode`) "none" (prefix caching off, vLLM's default for hybrid models) and
    "align": block_size = align x cdiv(S, align x a1), unless the user's is at least that ("Setting attention
    block size to N tokens to ensure that attention page size is >= mamba page size"); mamba_block_size =
    max_model_len ("none") or that block size ("align"). "all": the block is the Mamba2 SSD kernel's chunk
    c = lcm(chunk_size, align) (``get_mamba_chunk_size``: the config's mamba_chunk_size or chunk_size, else
    2048) times cdiv(cdiv(S, a1), c), and mamba_block_size is that block even where a larger user block size
    is kept. The state page is then padded to block_size x a1 ("Padding mamba page size by X% ..."), so both
    kinds of layer share one page size and one block pool (``_get_kv_cache_groups_uniform_page_size``).

    ``num_spec`` (num_speculative_tokens, vLLM 0.19.0): the Gated DeltaNet conv state keeps K - 1 + num_spec
    rows (qwen3_next.py ``get_mamba_state_shape_from_config`` passes num_spec to
    ``MambaStateShapeCalculator.gated_delta_net_state_shape``; the block size follows that larger state), and
    each state layer holds num_spec more blocks per request (``MambaSpec.num_speculative_blocks``).
    """
    cc = gpu.compute_capability
    align = BLACKWELL_HEAD256_ALIGNMENT if cc is not None and cc[0] == 10 and m.head_dim == 256 \
        else KERNEL_BLOCK_ALIGNMENT
    a1 = kv_cell_bytes(m, tp, kv_b)
    ssm_b = DTYPE_BYTES[h.ssm_dtype] if h.ssm_dtype else b
    state = h.state_bytes(tp, b, ssm_b, num_spec)
    if mode == "all":
        chunk = lcm(h.chunk_size or DEFAULT_MAMBA_CHUNK_SIZE, align)
        need = chunk * ceil_div(ceil_div(state, a1), chunk)
        how = (f"lcm({h.chunk_size or DEFAULT_MAMBA_CHUNK_SIZE} chunk, {align}) x cdiv(cdiv({state:,}, {a1:,}), "
               f"{chunk}) = {need}")
    else:
        need = align * ceil_div(state, align * a1)
        how = f"{align} x cdiv({state:,}, {align} x {a1:,}) = {need}"
    bs = block_size if block_size is not None and block_size >= need else need
    state_bs = need if mode == "all" else bs if mode == "align" else max_model_len
    page = bs * a1
    conv, ssm = h.shapes(tp, num_spec)
    padding = 100 * (page - state) / state
    spec = f" + {num_spec} speculative" if num_spec else ""
    per_request = {"none": f"1{spec} block(s) per request (mamba_block_size = max_model_len)",
                   "align": f"2{spec} blocks per request (mamba_block_size = {bs})",
                   "all": f"cdiv(max_model_len, {state_bs}) blocks per request (mamba_block_size = {state_bs})"}
    notes = (
        f"hybrid: {h.n_attention} attention blocks keep KV pages, {h.n_state} {h.mixer} blocks a fixed state per "
        f"request: conv {conv} x {b} B" + (f" + ssm {ssm} x {ssm_b} B" if ssm else "")
        + f" = {state:,} B per block (MambaSpec); "
        f"attention block size = {how}"
        + (f", the given {block_size} kept" if bs != need else "")
        + f"; the state page padded by {padding:.2f}% to {page:,} B (HybridAttentionMambaModelConfig)",
        *(f"hybrid: {line}" for line in logs),
        f"hybrid: Mamba cache mode '{mode}'" + (" (prefix caching off for the state)" if mode == "none" else "")
        + f": each state layer holds {per_request[mode]} (MambaSpec.max_memory_usage_bytes)",
        f"hybrid: not modelled: the {h.mixer} mixers' own working set in the profile run (the activation peak counts "
        "attention and the MLP/MoE), and the state each decode step reads and writes (the speed counts the KV cache)",
    )
    figures = (EngineFigure("attention_block_size", "Setting attention block size to (tokens)", bs),
               EngineFigure("mamba_page_padding", "Padding mamba page size by (%)", round(padding, 2)))
    return HybridPages(bs, state, page, notes, figures, mode, state_bs, num_spec)


def vllm_capacity(m: ServedModel, gpu: GPU, *, gpus: int, tp: int, pp: int, context: int | None,
                  gpu_memory_utilization: float = 0.9, max_model_len: int | None = None,
                  max_num_seqs: int | None = None, max_num_batched_tokens: int | None = None,
                  kv_cache_dtype: str = "auto", block_size: int | None = None, enforce_eager: bool = False,
                  version: str = DEFAULT_VERSION, use_v1: bool | None = None,
                  speculative_config: dict | None = None, draft: ServedModel | None = None,
                  enable_prefix_caching: bool | None = None, mamba_cache_mode: str | None = None) -> Capacity:
    """vLLM's start-up memory arithmetic for ``m`` on ``gpu`` (see the module docstring).

    ``block_size`` None is vLLM's default: 16 tokens, or for a hybrid model the size
    :func:`hybrid_pages` raises it to.
    ``speculative_config``: ``--speculative-config`` as a dict (method, num_speculative_tokens; the
    ``model`` key's inventory resolved into ``draft`` by vramlens.serving.api).
    ``enable_prefix_caching`` (None: vLLM's default, off for hybrid models) and ``mamba_cache_mode``
    ("none", "align", "all"; vLLM 0.15 and later) change a hybrid model's pages (:func:`hybrid_cache_mode`);
    a plain transformer's figures do not depend on them.

    Raises:
        ConfigError: settings vLLM refuses (each in vLLM's words), a version before 0.4, or a hybrid
            model in a release or layout vramlens does not follow (V0, pipeline parallelism).
        EngineRefusal: no room for the KV cache, or not for one max_model_len request.
    """
    parsed = parse_version(version)
    if parsed is None or parsed < OLDEST_VERSION:
        raise ConfigError(f"version={version!r} is not a vLLM release vramlens follows: give 0.4 or later, "
                          f"e.g. version='{DEFAULT_VERSION}' (--vllm-version {DEFAULT_VERSION})")
    newest = parse_version(DEFAULT_VERSION)
    assert newest is not None
    later: tuple[str, ...] = ()
    if parsed[:2] > newest[:2]:
        # no release after the newest one read is known here: its arithmetic is the newest one's
        later = (f"vLLM {version} is later than the newest release whose code vramlens follows "
                 f"({DEFAULT_VERSION}): its start-up arithmetic is used",)
    rel = vllm_release(parsed, gpu, use_v1)
    # Worker.requested_memory = gpu_memory_utilization x the total torch.cuda.mem_get_info() reports: CUDA's
    # device total (GPU.capacity_bytes; nvidia-smi's where the catalog has none, GPU.capacity_note)
    total = gpu.capacity_bytes
    mml = max_model_len or m.max_position
    if rel.v1:  # chunked prefill always on
        # the large-GPU defaults key on current_platform.get_device_total_memory(): NVML's memory.total on
        # CUDA (vllm/platforms/cuda.py NvmlCudaPlatform, commit 002db49), nvidia-smi's figure
        large = rel.large_gpu_defaults and gpu.nvidia_smi_bytes >= LARGE_GPU_BYTES
        mnbt = max_num_batched_tokens or (LARGE_GPU_MAX_NUM_BATCHED_TOKENS if large else DEFAULT_MAX_NUM_BATCHED_TOKENS)
        seqs = max_num_seqs or (LARGE_GPU_MAX_NUM_SEQS if large else DEFAULT_MAX_NUM_SEQS)
    else:
        mnbt = max_num_batched_tokens or (DEFAULT_MAX_NUM_BATCHED_TOKENS if mml > CHUNKED_PREFILL_FROM
                                          else max(mml, DEFAULT_MAX_NUM_BATCHED_TOKENS))
        seqs = max_num_seqs or DEFAULT_MAX_NUM_SEQS
    problems = vllm_problems(m, tp=tp, pp=pp, gpu_memory_utilization=gpu_memory_utilization, max_model_len=mml,
                             max_num_seqs=seqs, max_num_batched_tokens=mnbt, kv_cache_dtype=kv_cache_dtype,
                             block_size=DEFAULT_BLOCK_SIZE if block_size is None else block_size)
    if mamba_cache_mode is not None and mamba_cache_mode not in MAMBA_CACHE_MODES:
        problems.append(f"mamba_cache_mode={mamba_cache_mode!r} is not one of {', '.join(MAMBA_CACHE_MODES)} (vLLM "
                        "CacheConfig.mamba_cache_mode): pass --mamba-cache-mode align or all")
    elif mamba_cache_mode is not None and parsed < MAMBA_CACHE_MODE_FROM:
        problems.append(f"--mamba-cache-mode is a flag of vLLM 0.15 and later (CacheConfig.mamba_cache_mode): "
                        f"version {version} given: pass --vllm-version 0.19 or leave the flag out")
    if m.hybrid is not None:
        problems += hybrid_problems(m.hybrid, rel, tp=tp, pp=pp)
    mode: str = "none"
    mode_logs: tuple[str, ...] = ()
    if m.hybrid is not None and not problems:
        mode, mode_logs = hybrid_cache_mode(m.hybrid, rel, enable_prefix_caching=enable_prefix_caching,
                                            mamba_cache_mode=mamba_cache_mode)
    spec = vllm_speculative(speculative_config, m, draft, version=parsed) if speculative_config is not None else None
    if spec is not None and problems == [] and m.hybrid is not None:
        problems += hybrid_speculative_problems(m.hybrid, rel, spec[0], pp=pp)
    elif spec is not None and problems == [] and (pp > 1 or m.n_sliding):
        problems.append("speculative decoding is modelled for one pipeline stage and a KV cache of full-attention "
                        f"layers only: {m.name} at pp={pp}" + (f" has {m.n_sliding} sliding or chunked layers"
                                                                 if m.n_sliding else "")
                        + (" is a hybrid model" if m.hybrid is not None else ""))
    if problems:
        raise ConfigError(problems)
    b = DTYPE_BYTES[m.dtype]
    kv_b = KV_CACHE_DTYPES[kv_cache_dtype] or b
    d = draft_for(KINDS[spec[0]], m, draft, tp=tp, kv_b=kv_b, fc_split=True) if spec is not None else None
    requested = int(total * gpu_memory_utilization)  # Worker.requested_memory
    weights = stage_weight_bytes(m, tp, pp) + m.rope_cache_bytes
    weight_notes: tuple[str, ...] = ()
    draft_rope = 0
    if d is not None and spec is not None:
        # a draft model with a rotary cache of another size gets its own (get_rope caches one per shape)
        if draft is not None and d.kind == "draft_model" and (draft.rotary_dim, draft.max_position) != (
                m.rotary_dim, m.max_position):
            draft_rope = draft.rope_cache_bytes
        weights += d.weights_bytes + draft_rope
        weight_notes += (f"speculative {spec[0]}, {spec[1]} tokens: draft weights {d.why}"
                         + (f" + its rotary cache {draft_rope:,} B" if draft_rope else "")
                         + " (loaded in GPUModelRunner.load_model's DeviceMemoryProfiler)",)
    cc = gpu.compute_capability
    if m.mxfp4_experts and m.expert_layers and rel.version >= (0, 19, 0):
        if cc is not None and (9, 0) <= cc < (10, 0):
            layout, served = mxfp4_moe_bytes(m, tp=tp, b=b)
            weights += (layout - served) * stage_layers(m, pp) // m.n_layers  # the busiest stage's share
            weight_notes = (f"MXFP4 experts on the TRITON backend: {layout:,} B per rank as vLLM lays them out "
                            f"(widths rounded to {MXFP4_TRITON_WIDTH_ALIGN}, Hopper swizzle padding, unswizzled "
                            f"scales kept, fp32 biases) in place of {served:,} B (mxfp4_moe_bytes)",)
        else:
            weight_notes = ("MXFP4 experts at 4.25 bits: vLLM's per-backend layout is modelled for compute "
                            "capability 9.x (the TRITON backend) only",)
    # V0's profile run builds max_num_seqs dummy sequences; V1's min(num_tokens, max_num_reqs) requests
    rows = min(seqs, mnbt) if rel.v1 else seqs
    sampler = rel.sampler if rel.sampler != "triton" or rows >= TRITON_TOPK_MIN_ROWS else "sort"
    topk = topk_buffer_bytes(rows=rows, vocab=m.vocab, sms=gpu.sms) if sampler == "triton" else 0
    if sampler == "triton" and gpu.sms is None:
        weight_notes += (f"{gpu.name} has no SM count: the Triton sampler's kept top-k buffer (min(SMs, rows) "
                         "x vocabulary x 4 B, topk_buffer_bytes) is left out",)
    act, act_why = profile_peak_bytes(m, tokens=mnbt, rows=rows, tp=tp, b=b, sampler=sampler,
                                      moe_workspace=rel.moe_workspace, topk_buffer=topk)
    if d is not None:
        # the rejection sampler's warm-up after the sampler's: one draft and one bonus row per dummy request
        ws = moe_workspace_bytes(m, tokens=mnbt, tp=tp, b=b) if rel.moe_workspace else 0
        rej = rows * m.vocab * (3 * b + REJECTION_BYTES) + mnbt * m.hidden * b + ws + topk
        if rej > act:
            act, act_why = rej, (f"rejection sampler {rows} rows x {m.vocab:,} x (3b + {REJECTION_BYTES}) B + hidden "
                                 f"{mnbt * m.hidden * b:,}" + (f" + MoE workspace {ws:,}" if ws else "")
                                 + (f" + top-k buffer {topk:,}" if topk else "") + f" = {rej:,} (above {act_why})")
        else:
            act_why += f"; rejection sampler {rej:,} below it"
    if d is not None and d.kind != "ngram":
        dact, dwhy = drafter_peak_bytes(m, draft, d, tokens=mnbt, tp=tp, b=b)
        if dact > act:
            act, act_why = dact, f"{dwhy} (above {act_why})"
        else:
            act_why += f"; drafter dummy run {dact:,} below it"
    if rel.profile_window:
        # the process's first GEMM runs in the profile run: PyTorch's cuBLAS workspace (CublasHandlePool.cpp,
        # through the caching allocator) is in the torch peak increase
        blas = cublas_workspace_bytes(gpu)
        act += blas
        act_why += f" + cuBLAS workspace {blas:,} (first GEMM of the process)"
    ctx, _ = context_bytes_for(None)
    nontorch_notes: tuple[str, ...] = ()
    if rel.profile_window:
        nt = vllm019_non_torch(gpu, tp=tp, pp=pp, hidden=m.hidden, b=b, max_num_batched_tokens=mnbt,
                               enforce_eager=enforce_eager)
        outside = nt.total
        outside_why = (f"CUDA context and the NCCL, custom all-reduce and symmetric-memory set-up before the init "
                       f"snapshot, not counted; after it {outside / 2**20:,.0f} MiB (vllm_nontorch.vllm019_non_torch)")
        nontorch_notes = tuple(f"non-torch part: {n}" for n in nt.notes)
    else:
        nccl = nccl_communicator_bytes(gpu, tp) + (nccl_communicator_bytes(gpu, 2, nvls=False) if pp > 1 else 0)
        outside = nccl + (ctx if rel.context_in_budget else 0)
        outside_why = (f"CUDA context {ctx / 2**20:,.0f} MiB (inside the profile in this release) + "
                       if rel.context_in_budget else "CUDA context before the baseline snapshot, not counted; "
                       ) + f"NCCL {nccl / 2**20:,.0f} MiB"
    available = requested - weights - act - outside
    kv_heads = kv_heads_per_gpu(m, tp)
    hybrid_notes: tuple[str, ...] = ()
    hybrid_figures: tuple[EngineFigure, ...] = ()
    hp = HybridPages(0, 0, 0, (), ())  # a plain transformer's: not read
    if m.hybrid is not None:
        hp = hybrid_pages(m, m.hybrid, gpu, tp=tp, b=b, kv_b=kv_b, block_size=block_size, mode=mode,
                          max_model_len=mml, logs=mode_logs, num_spec=spec[1] if spec is not None else 0)
        block_size = hp.block_size
        if mode == "align" and rel.version >= ALIGN_BATCH_CHECK_FROM and block_size > mnbt:
            # VllmConfig.__post_init__ (vllm/config/vllm.py, 0.17.0-0.19.0) asserts it
            raise ConfigError(f"In Mamba cache align mode, block_size ({block_size}) must be <= max_num_batched_tokens "
                              f"({mnbt}). (vLLM): pass --max-num-batched-tokens {block_size} or more")
        hybrid_notes, hybrid_figures = hp.notes, hp.figures
    block_size = DEFAULT_BLOCK_SIZE if block_size is None else block_size
    page = block_size * kv_cell_bytes(m, tp, kv_b)  # AttentionSpec.page_size_bytes, one layer
    layers = stage_layers(m, pp)
    draft_layers = d.kv_layers if d is not None else 0
    draft_page = block_size * d.kv_cell if d is not None else 0
    # chunked local layers (Llama 4) have groups of their own only where the release turns the hybrid
    # manager on for them (VllmRelease.chunked_local_hybrid); else they are cached at full length
    n_slide = 0 if m.chunked_local and not rel.chunked_local_hybrid else ceil_div(m.n_sliding, pp)
    local = "chunked" if m.chunked_local else "sliding"
    n_full = layers - n_slide
    whole_group = 0  # a hybrid's group size over the whole model
    if m.hybrid is not None:  # attention layers and state layers (MambaSpec) grouped as sliding ones are
        # an MTP draft's full-attention layers have the target's FullAttentionSpec: they count with its attention
        # layers in _get_kv_cache_groups_uniform_page_size (same_type_layers), 0.19.0
        n_full, n_state = m.hybrid.n_attention + draft_layers, m.hybrid.n_state
        lo, hi = min(n_full, n_state), max(n_full, n_state)
        group_size = (hi if hi < group_ratio(rel) * lo else lo) if lo else hi
        kinds = [(k, ceil_div(n, group_size)) for k, n in (("full", n_full), ("state", n_state)) if n]
        layers = m.hybrid.n_attention  # the target's own (the draft's are counted in kv_per_token apart)
        whole_group = group_size
        if pp > 1:  # the busiest stage's largest group sets every stage's number of blocks
            largest, stage_attention = hybrid_stage_groups(m.hybrid, pp, group_size)
            group_size, layers = max(largest), max(stage_attention)
            hybrid_notes += (f"hybrid: pp={pp}: stages of {', '.join(map(str, pp_partitions(m.n_layers, pp)))} "
                             f"blocks (get_pp_indices) hold {', '.join(map(str, stage_attention))} attention layers; "
                             f"groups of {whole_group} layers over the whole model, of at most "
                             f"{', '.join(map(str, largest))} layers on each stage: blocks = available // page // "
                             f"{group_size} on every stage (get_kv_cache_configs)",)
    elif n_full and n_slide:  # hybrid: _get_kv_cache_groups_uniform_page_size
        lo, hi = min(n_full, n_slide), max(n_full, n_slide)
        group_size = hi if hi < group_ratio(rel) * lo else lo
        kinds = [("full", ceil_div(n_full, group_size)), (local, ceil_div(n_slide, group_size))]
    else:
        group_size = layers
        kinds = [(local if n_slide else "full", 1)]
    n_groups = sum(n for _k, n in kinds)
    # one block of every group's layers; a draft's layers join the one full-attention group
    # (_get_kv_cache_groups_uniform_spec with one page size, UniformTypeKVCacheSpecs with two)
    uniform = draft_page in (0, page)
    if uniform and m.hybrid is None:
        group_size += draft_layers
    block_bytes = page * group_size if uniform else page * layers + draft_page * draft_layers

    def blocks_per_request(tokens: int) -> int:
        need = 0
        for kind, n in kinds:
            if kind == "full":
                need += n * ceil_div(tokens, block_size)
            elif kind == "state":  # MambaSpec.max_memory_usage_bytes // page (HybridPages.state_blocks)
                need += n * hp.state_blocks(tokens)
            elif kind == "chunked":  # ChunkedLocalAttentionSpec.max_memory_usage_bytes: no partial block
                need += n * ceil_div(min((m.sliding_window or tokens) + mnbt, tokens), block_size)
            else:  # SlidingWindowSpec.max_memory_usage_bytes
                need += n * (ceil_div(min((m.sliding_window or tokens) - 1 + mnbt, tokens), block_size) + 1)
        return need

    if available <= 0:
        raise EngineRefusal(
            "No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing "
            f"the engine (vLLM: {gpu_memory_utilization} x {total / GiB:.2f} GiB = {requested / GiB:.2f} GiB does not "
            f"cover weights {weights / GiB:.2f} GiB + activation peak {act / GiB:.2f} GiB + non-torch "
            f"{outside / GiB:.2f} GiB)")
    num_blocks = available // block_bytes  # get_num_blocks: available // page // layers per group
    needed = block_bytes * blocks_per_request(mml)
    if m.hybrid is not None and rel.version >= (0, 14, 0):
        # _max_memory_usage_bytes_from_groups: group size x page x the groups' blocks of a request; 0.14-0.16
        # check the whole model's groups against the smallest stage's memory, 0.17-0.19 each stage's own
        needed = page * (whole_group if rel.version < (0, 17, 0) else group_size) * blocks_per_request(mml)
    elif m.hybrid is not None:  # check_enough_kv_cache_memory: each layer's max_memory_usage_bytes, stage by stage
        h = m.hybrid
        needed = max(page * sum(ceil_div(mml, block_size) * h.has_kv(i) + hp.state_blocks(mml) * h.has_state(i)
                                for i in range(lo, hi)) for lo, hi in _stage_bounds(len(h.kinds), pp))
    if needed > available:
        fit = _max_len(blocks_per_request, num_blocks, mml)
        raise EngineRefusal(
            f"The model's max seq len ({mml}) is larger than the maximum number of tokens that can be stored in KV "
            f"cache ({num_blocks // n_groups * block_size}). Try increasing `gpu_memory_utilization` or decreasing "
            f"`max_model_len` when initializing the engine (vLLM; {needed / GiB:.2f} GiB KV cache needed, "
            f"{available / GiB:.2f} GiB available; the estimated maximum model length is {fit})")
    # _report_kv_cache_config: num_blocks // groups x the smallest block size of the groups (a MambaSpec's is
    # mamba_block_size: max_model_len without prefix caching, HybridPages.state_block_size)
    kv_tokens = num_blocks // n_groups * (min(block_size, hp.state_block_size) if m.hybrid is not None
                                          else block_size)
    concurrency_mml = num_blocks / blocks_per_request(mml)
    ctx = context or mml
    conc = num_blocks / blocks_per_request(ctx)
    running = max(1, min(int(conc), seqs))
    kv_per_token = kv_cell_bytes(m, tp, kv_b) * layers + (d.kv_cell * d.kv_layers if d is not None else 0)
    speed = roofline(m, gpu, weights_per_gpu=weights, kv_per_token_per_gpu=kv_per_token, running=running,
                     context=ctx, tp=tp, pp=pp, compute_dtype=m.dtype)
    graphs = 0 if enforce_eager else CUDA_GRAPH_BYTES
    kv_bytes = num_blocks * block_bytes
    draft_kv = num_blocks * draft_page * draft_layers
    figures = (
        EngineFigure("total_gpu_memory", "total_gpu_memory (GiB)", round(total / GiB, 2)),
        EngineFigure("model_weights", "model weights take (GiB)", round(weights / GiB, 2)),
        EngineFigure("non_torch_memory", "non_torch_memory takes (GiB)", round(outside / GiB, 2)),
        EngineFigure("activation_peak", "PyTorch activation peak memory takes (GiB)", round(act / GiB, 2)),
        EngineFigure("available_kv_cache_memory", "Available KV cache memory (GiB)", round(available / GiB, 2)),
        EngineFigure("num_gpu_blocks", "# GPU blocks", num_blocks),
        EngineFigure("gpu_kv_cache_tokens", "GPU KV cache size (tokens)", kv_tokens),
        EngineFigure("max_concurrency", f"Maximum concurrency for {mml:,} tokens per request (x)",
                     round(concurrency_mml, 2)),
        *hybrid_figures,
        EngineFigure("cuda_graph_memory", "Graph capturing took (GiB, allowance)", round(graphs / GiB, 2)),
    )
    notes = later + weight_notes + (
        f"{rel.name}: available = {gpu_memory_utilization} x {total:,} - weights {weights:,} (rotary cache "
        f"{m.rope_cache_bytes:,} included) - activation {act:,} - non-torch {outside:,} = {available:,} B "
        "(Worker.determine_available_memory)",
        (f"page = {block_size} tokens x {m.kv_latent} latent (kv_lora_rank + qk_rope_head_dim) x {kv_b} B = {page:,} B "
         "per layer (MLA: one latent vector, every rank); " if m.kv_latent else
         f"page = 2 x {block_size} tokens x {kv_heads} kv heads x {m.head_dim} x {kv_b} B = {page:,} B per layer; ")
        +
        (f"blocks = available // page // {group_size} layers per group = {num_blocks:,} (get_num_blocks)" if uniform
         else f"blocks = available // ({layers} x page + {draft_layers} draft layers x {draft_page:,} B) = "
              f"{num_blocks:,} (UniformTypeKVCacheSpecs)")
        + (f"; the draft's {draft_layers} attention layer(s) share the pool" if draft_layers else ""),
        f"activation peak at max_num_batched_tokens={mnbt:,}, max_num_seqs={seqs}: {act_why} (profile_run)",
        f"non-torch: {outside_why}",
        *nontorch_notes,
        *hybrid_notes,
        f"KV groups: {', '.join(f'{n} {k}' for k, n in kinds)} of {group_size} layers (hybrid KV cache manager)",
        "CUDA graphs captured after the KV cache: from the (1 - utilization) headroom" if graphs
        else "enforce_eager: no CUDA graphs",
    )
    return Capacity(
        engine="vllm", accounting=f"{rel.name} (Worker.determine_available_memory, kv_cache_utils)", model=m.name, gpu=gpu.name, gpus=gpus, tp=tp, pp=pp,
        gpu_bytes=total, budget_bytes=requested, weights_bytes=weights, non_torch_bytes=outside,
        cuda_graph_bytes=graphs, activation_bytes=act, kv_cache_bytes=kv_bytes, kv_bytes_per_token=kv_per_token,
        kv_tokens=kv_tokens, max_model_len=mml, context=ctx, concurrency=conc, max_running=running,
        decode_tokens_s=speed.decode_tokens_s, decode_tokens_s_total=speed.decode_tokens_s_total,
        ttft_s=speed.ttft_s, figures=figures, notes=notes,
        speculative=f"{spec[0]}, {spec[1]} tokens, draft {d.name}" if d is not None and spec is not None else "",
        draft_weights_bytes=d.weights_bytes + draft_rope if d is not None else 0, draft_kv_cache_bytes=draft_kv)


def vllm_speculative(config: dict, m: ServedModel, draft: ServedModel | None, *,
                     version: tuple[int, int, int]) -> tuple[str, int]:
    """(method, num_speculative_tokens) of ``--speculative-config``, as vLLM 0.19's SpeculativeConfig
    settles them (``__post_init__``: no method is "ngram" when model is "ngram", else "draft_model";
    the MTP aliases become "mtp"), or ConfigError in vLLM's words (``_verify_args``)."""
    method = config.get("method")
    model = config.get("model")
    n = config.get("num_speculative_tokens")
    p = []
    if version < (0, 10, 0):
        p.append(f"speculative decoding is modelled for vLLM 0.10 and later (the V1 engine's EagleProposer; "
                 f"0.19.0 read): version {'.'.join(map(str, version))} given")
    if method is None:
        method = "ngram" if model in ("ngram", "[ngram]") else "draft_model"
    elif isinstance(method, str) and method.endswith("_mtp"):
        method = "mtp"  # "method `%s` is deprecated and replaced with mtp."
    if method not in VLLM_METHODS:
        p.append(f"speculative method {method!r} is not one of {', '.join(VLLM_METHODS)} (vLLM 0.19 SpeculativeConfig; "
                 "medusa, mlp_speculator, suffix and ngram_gpu are not modelled)")
        raise ConfigError(p)
    if n is None:
        p.append("num_speculative_tokens must be provided with speculative model unless the draft model config "
                 "contains an n_predict parameter.")
    elif n <= 0:
        p.append(f"Expected num_speculative_tokens to be greater than zero ({n}).")
    if model is None and method in ("eagle", "eagle3", "draft_model") and n is not None:
        p.append("num_speculative_tokens was provided but without speculative model.")
    elif method == "ngram" and draft is None:
        pass
    else:
        p += draft_problems(KINDS[method], m, None if model in ("ngram", "[ngram]") else draft,
                            model_flag="the speculative config's model")
    if method == "draft_model" and draft is not None and draft.vocab != m.vocab:
        p.append(f"Target and draft model should have the same vocabulary size. Target model vocab_size={m.vocab}. "
                 f"Draft model vocab_size={draft.vocab}. Using models with different tokenizers can cause "
                 "out-of-bounds errors during speculative decoding.")
    if p:
        raise ConfigError(p)
    assert isinstance(n, int)
    return method, n


def hybrid_speculative_problems(h: HybridLayout, rel: VllmRelease, method: str, *, pp: int) -> list[str]:
    """What vramlens does not follow of speculative decoding on a hybrid model, each in one line.

    Read in the 0.19.0 wheel only, for Gated DeltaNet (Qwen3-Next): ``MambaSpec.num_speculative_blocks``
    (vllm/v1/kv_cache_interface.py, mamba/abstract.py), the conv state's num_spec rows (qwen3_next.py), the
    ``qwen3_next_mtp`` drafter (qwen3_next_mtp.py: a full-attention block whose KV pages join the attention
    group) and ngram (no draft layers)."""
    p = []
    what = "speculative decoding on a hybrid model"
    if rel.version < (0, 19, 0):
        p.append(f"{what} is modelled as vLLM 0.19.0 sizes it (MambaSpec.num_speculative_blocks and the conv "
                 f"state's num_spec rows; earlier releases not read): pass --vllm-version 0.19")
    if h.mixer != "gated_deltanet":
        p.append(f"{what} is modelled for Gated DeltaNet (Qwen3-Next) only; the {h.mixer} mixers' speculative state "
                 "shapes were not read: drop --speculative-config")
    if method not in ("mtp", "ngram"):
        p.append(f"{what} is modelled for the mtp (qwen3_next_mtp) and ngram methods only; how {method}'s draft "
                 "layers join the state groups was not read: use mtp or ngram")
    if pp > 1:
        p.append(f"{what} is modelled for one pipeline stage: pp={pp} given: use --tp")
    return p


def drafter_peak_bytes(m: ServedModel, draft: ServedModel | None, d: Draft, *, tokens: int, tp: int,
                       b: int) -> tuple[int, str]:
    """The torch peak while the profile run's ``drafter.dummy_run(num_tokens)`` runs: the target's
    output hidden states it still holds (T x h; EAGLE-3 three more, its auxiliary layers), the
    drafter's input (EAGLE/MTP: ``fc`` / ``eh_proj`` over T x k h) and the drafter's own forward,
    sized as :func:`profile_peak_bytes` sizes the target's (residual and normed copies, the larger of
    the MLP's and attention's working set)."""
    src = draft or m
    held = tokens * m.hidden * b * (4 if d.kind == "eagle3" else 1)
    fc_in = tokens * src.hidden * b * {"eagle": 2, "eagle3": 3, "mtp": 2}.get(d.kind, 0)
    f = src.ffn * max(1, src.experts_per_token)
    attn = (src.n_heads + 2 * src.n_kv_heads) * src.head_dim // tp
    forward = tokens * b * (2 * src.hidden + max(3 * f // tp, attn))
    total = held + fc_in + forward
    return total, (f"drafter dummy run: target hidden states held {held:,} + draft input {fc_in:,} + draft forward "
                   f"{forward:,} = {total:,}")


def _stage_bounds(n_layers: int, pp: int) -> list[tuple[int, int]]:
    """(first, end) block of each stage (:func:`pp_partitions`)."""
    out, start = [], 0
    for n in pp_partitions(n_layers, pp):
        out.append((start, start + n))
        start += n
    return out


def _max_len(blocks_per_request, num_blocks: int, limit: int) -> int:
    """The longest request the pool holds (vLLM ``estimate_max_model_len``: a binary search)."""
    lo, hi, best = 1, limit, 0
    while lo <= hi:
        mid = (lo + hi) // 2
        if blocks_per_request(mid) <= num_blocks:
            best, lo = mid, mid + 1
        else:
            hi = mid - 1
    return best
