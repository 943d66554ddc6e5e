"""vLLM: gpu_memory_utilization, the profiled activation peak, and the paged KV block pool.

Follows vLLM 0.10's V1 engine (the arithmetic is unchanged from V0 0.6.4, whose log names the
same parts: "model weights take X; non_torch_memory takes Y; PyTorch activation peak memory takes
Z; the rest of the memory reserved for KV Cache is W"):

1. ``Worker.determine_available_memory`` (V0 ``determine_num_available_blocks``):
   available = gpu_memory_utilization x total - (weights + activation peak + non-torch).
2. ``kv_cache_utils.get_kv_cache_config``: one page per layer holds ``block_size`` tokens,
   page = 2 (K, V) x block_size x n_kv/tp x head_dim x dtype bytes (``FullAttentionSpec.page_size_bytes``;
   multi-head latent attention: 1 x block_size x (kv_lora_rank + qk_rope_head_dim), on every rank);
   num_blocks = available // page // layers-per-group.
3. ``_report_kv_cache_config``: "GPU KV cache size: num_blocks // groups x block_size tokens",
   "Maximum concurrency for max_model_len tokens per request: num_blocks / blocks per request".

Sliding-window layers (Gemma 2/3, Mistral v0.1, gpt-oss) as vLLM 0.10's hybrid KV cache manager
allocates them (``_get_kv_cache_groups_uniform_page_size``): layers of each attention type are cut
into groups of ``min`` layers (``max`` when max < 1.5 min), each group has its own block table and
all groups share ``group_size`` tensors of num_blocks pages; a sliding layer needs
cdiv(min(window - 1 + max_num_batched_tokens, max_model_len), block_size) + 1 blocks per request
(``SlidingWindowSpec.max_memory_usage_bytes``). CUDA graphs are captured after the KV cache is
allocated (V0 and V1 up to 0.20; 0.21 subtracts an estimate first), so their pool comes out of
the (1 - utilization) headroom and changes no block count.
"""

from __future__ import annotations

from vramlens.errors import ConfigError, EngineRefusal
from vramlens.hardware.gpu import GPU
from vramlens.serving.common import (
    CUDA_GRAPH_BYTES,
    ServedModel,
    kv_cell_bytes,
    kv_heads_per_gpu,
    non_torch_bytes,
    profile_activation_bytes,
    roofline,
    stage_layers,
    stage_weight_bytes,
)
from vramlens.serving.result import Capacity, EngineFigure
from vramlens.units import DTYPE_BYTES, GiB, ceil_div

ACCOUNTING = "vLLM 0.10 (V1 engine; V0 0.6.4+ profiling arithmetic)"
#: ``--kv-cache-dtype`` choices (vLLM CacheConfig) -> bytes per element; "auto" is the model dtype.
KV_CACHE_DTYPES = {"auto": 0, "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1}
#: ``--block-size`` choices (vLLM 0.10 CacheConfig.block_size: Literal[1, 8, 16, 32, 64, 128]).
BLOCK_SIZES = (1, 8, 16, 32, 64, 128)
#: ``--quantization`` -> vramlens' quantization formula (estimator/weights.py); bitsandbytes loads
#: 4-bit NF4 in vLLM (``BitsAndBytesConfig`` default load_in_4bit).
QUANTIZATIONS = {"awq": "awq-4bit", "gptq": "gptq-4bit", "fp8": "fp8", "bitsandbytes": "nf4"}
#: vLLM 0.6 SchedulerConfig defaults for ``vllm serve``: max_num_seqs 256; max_num_batched_tokens
#: max(max_model_len, 2048) without chunked prefill, and 2048 (``_DEFAULT_MAX_NUM_BATCHED_TOKENS``)
#: with it, which EngineArgs turns on for max_model_len > 32K.
DEFAULT_MAX_NUM_SEQS = 256
DEFAULT_MAX_NUM_BATCHED_TOKENS = 2048
CHUNKED_PREFILL_FROM = 32_768


def vllm_problems(m: ServedModel, *, tp: int, pp: int, gpu_memory_utilization: float, max_model_len: int,
                  max_num_seqs: int, max_num_batched_tokens: int, kv_cache_dtype: str, block_size: int) -> list[str]:
    """What vLLM would refuse at start-up, in its own words (vllm/config.py, 0.6-0.10)."""
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
        p.append(f"Unknown kv cache dtype: {kv_cache_dtype}: choose from {', '.join(KV_CACHE_DTYPES)}")
    if block_size not in BLOCK_SIZES:
        p.append(f"block_size={block_size} is not one of {', '.join(map(str, BLOCK_SIZES))} (vLLM CacheConfig)")
    if max_num_batched_tokens < max_num_seqs:
        p.append(f"max_num_batched_tokens ({max_num_batched_tokens}) must be greater than or equal to "
                 f"max_num_seqs ({max_num_seqs}).")
    return p


def vllm_capacity(m: ServedModel, gpu: GPU, *, gpus: int, tp: int, pp: int, context: int | None,
                  gpu_memory_utilization: float = 0.9, max_model_len: int | None = None,
                  max_num_seqs: int = DEFAULT_MAX_NUM_SEQS, max_num_batched_tokens: int | None = None,
                  kv_cache_dtype: str = "auto", block_size: int = 16, enforce_eager: bool = False) -> Capacity:
    """vLLM's start-up memory arithmetic for ``m`` on ``gpu`` (see the module docstring).

    Raises:
        ConfigError: settings vLLM refuses (each in vLLM's words).
        EngineRefusal: no room for the KV cache, or not for one max_model_len request.
    """
    mml = max_model_len or m.max_position
    mnbt = max_num_batched_tokens or (DEFAULT_MAX_NUM_BATCHED_TOKENS if mml > CHUNKED_PREFILL_FROM
                                      else max(mml, DEFAULT_MAX_NUM_BATCHED_TOKENS))
    problems = vllm_problems(m, tp=tp, pp=pp, gpu_memory_utilization=gpu_memory_utilization, max_model_len=mml,
                             max_num_seqs=max_num_seqs, max_num_batched_tokens=mnbt, kv_cache_dtype=kv_cache_dtype,
                             block_size=block_size)
    if problems:
        raise ConfigError(problems)
    b = DTYPE_BYTES[m.dtype]
    kv_b = KV_CACHE_DTYPES[kv_cache_dtype] or b
    total = gpu.capacity_bytes
    requested = int(total * gpu_memory_utilization)  # Worker.requested_memory
    weights = stage_weight_bytes(m, tp, pp)
    act = profile_activation_bytes(m, mnbt, max_num_seqs, tp, b)
    outside, outside_why = non_torch_bytes(gpu, tp, pp)
    available = requested - weights - act - outside
    kv_heads = kv_heads_per_gpu(m, tp)
    page = block_size * kv_cell_bytes(m, tp, kv_b)  # AttentionSpec.page_size_bytes, one layer
    layers = stage_layers(m, pp)
    n_slide = ceil_div(m.n_sliding, pp)
    n_full = layers - n_slide
    if n_full and n_slide:  # hybrid: _get_kv_cache_groups_uniform_page_size
        lo, hi = min(n_full, n_slide), max(n_full, n_slide)
        group_size = hi if hi < 1.5 * lo else lo
        kinds = [("full", ceil_div(n_full, group_size)), ("sliding", ceil_div(n_slide, group_size))]
    else:
        group_size = layers
        kinds = [("sliding" if n_slide else "full", 1)]
    n_groups = sum(n for _k, n in kinds)

    def blocks_per_request(tokens: int) -> int:
        need = 0
        for kind, n in kinds:
            if kind == "full":
                need += n * ceil_div(tokens, block_size)
            else:  # SlidingWindowSpec.max_memory_usage_bytes
                need += n * (ceil_div(min((m.sliding_window or tokens) - 1 + mnbt, tokens), block_size) + 1)
        return need

    if available <= 0:
        raise EngineRefusal(
            "No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing "
            f"the engine (vLLM: {gpu_memory_utilization} x {total / GiB:.2f} GiB = {requested / GiB:.2f} GiB does not "
            f"cover weights {weights / GiB:.2f} GiB + activation peak {act / GiB:.2f} GiB + non-torch "
            f"{outside / GiB:.2f} GiB)")
    num_blocks = available // page // group_size  # get_num_blocks
    needed = group_size * page * blocks_per_request(mml)
    if needed > available:
        fit = _max_len(blocks_per_request, num_blocks, mml)
        raise EngineRefusal(
            f"The model's max seq len ({mml}) is larger than the maximum number of tokens that can be stored in KV "
            f"cache ({num_blocks // n_groups * block_size}). Try increasing `gpu_memory_utilization` or decreasing "
            f"`max_model_len` when initializing the engine (vLLM; {needed / GiB:.2f} GiB KV cache needed, "
            f"{available / GiB:.2f} GiB available; the estimated maximum model length is {fit})")
    kv_tokens = num_blocks // n_groups * block_size
    concurrency_mml = num_blocks / blocks_per_request(mml)
    ctx = context or mml
    conc = num_blocks / blocks_per_request(ctx)
    running = max(1, min(int(conc), max_num_seqs))
    kv_per_token = kv_cell_bytes(m, tp, kv_b) * layers
    speed = roofline(m, gpu, weights_per_gpu=weights, kv_per_token_per_gpu=kv_per_token, running=running,
                     context=ctx, tp=tp, pp=pp, compute_dtype=m.dtype)
    graphs = 0 if enforce_eager else CUDA_GRAPH_BYTES
    kv_bytes = num_blocks * page * group_size
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
        EngineFigure("cuda_graph_memory", "Graph capturing took (GiB, allowance)", round(graphs / GiB, 2)),
    )
    notes = (
        f"available = {gpu_memory_utilization} x {total:,} - weights {weights:,} - activation {act:,} - "
        f"non-torch {outside:,} = {available:,} B (Worker.determine_available_memory)",
        (f"page = {block_size} tokens x {m.kv_latent} latent (kv_lora_rank + qk_rope_head_dim) x {kv_b} B = {page:,} B "
         "per layer (MLA: one latent vector, every rank); " if m.kv_latent else
         f"page = 2 x {block_size} tokens x {kv_heads} kv heads x {m.head_dim} x {kv_b} B = {page:,} B per layer; ")
        +
        f"blocks = available // page // {group_size} layers per group = {num_blocks:,} (get_num_blocks)",
        f"activation peak at max_num_batched_tokens={mnbt:,}, max_num_seqs={max_num_seqs}: "
        "T b (2h + max(3f/tp, (a+2kv)d/tp)) + 2 x seqs x V x 4 B (profile_run, common.py)",
        f"non-torch: {outside_why}",
        f"KV groups: {', '.join(f'{n} {k}' for k, n in kinds)} of {group_size} layers (hybrid KV cache manager)",
        "CUDA graphs captured after the KV cache: from the (1 - utilization) headroom" if graphs
        else "enforce_eager: no CUDA graphs",
    )
    return Capacity(
        engine="vllm", accounting=ACCOUNTING, model=m.name, gpu=gpu.name, gpus=gpus, tp=tp, pp=pp,
        gpu_bytes=total, budget_bytes=requested, weights_bytes=weights, non_torch_bytes=outside,
        cuda_graph_bytes=graphs, activation_bytes=act, kv_cache_bytes=kv_bytes, kv_bytes_per_token=kv_per_token,
        kv_tokens=kv_tokens, max_model_len=mml, context=ctx, concurrency=conc, max_running=running,
        decode_tokens_s=speed.decode_tokens_s, decode_tokens_s_total=speed.decode_tokens_s_total,
        ttft_s=speed.ttft_s, figures=figures, notes=notes)


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
