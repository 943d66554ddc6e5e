"""transformers ``generate()``: no pool, the cache grows with the batch (DynamicCache).

Follows transformers 4.45+: the weights load in the checkpoint's dtype; ``generate`` on a batch of
B prompts of s tokens keeps a DynamicCache of 2 x layers x B x s x n_kv x head_dim x dtype bytes
(sliding-window layers capped at their window, ``DynamicSlidingWindowLayer``: vramlens.estimator's
``kv_cache_bytes`` rule; multi-head latent attention keeps its latent, kv_lora_rank + qk_rope_head_dim
per token and layer, transformers >= 5 ``DeepseekV3Attention``) and computes logits for the last prompt position only
(``logits_to_keep=1``). Nothing is reserved up front, so "capacity" is how many requests of
``context`` tokens fit beside the weights: each costs its cache plus its share of the prefill
activations (common.profile_activation_bytes at s tokens, one logits row).
``device_map="auto"`` spreads layers over several GPUs (taken as pipeline stages); no tensor parallelism.

Gated DeltaNet hybrids (Qwen3-Next, ServedModel.hybrid): transformers 5's ``DynamicCache`` keeps, for each
linear-attention block, a ``LinearAttentionLayer`` (cache_utils.py ``lazy_initialization``): the conv state
(B, conv_dim, linear_conv_kernel_dim) in the activations' dtype (``torch.zeros((*conv_states.shape[:-1],
conv_kernel_size), dtype=conv_states.dtype)``; conv_dim = 2 k_heads k_dim + v_heads v_dim) and the recurrent
state (B, v_heads, k_dim, v_dim) as the kernel returns it, fp32 (modeling_qwen3_next.py
``torch_chunk_gated_delta_rule`` casts query, key and value ``.to(torch.float32)`` and builds the state from
them); only the attention blocks' DynamicLayers grow with the context. Mamba hybrids are refused here (their
state's dtype depends on which kernel path transformers takes), as is a hybrid over several GPUs.
"""

from __future__ import annotations

from vramlens.errors import ConfigError, EngineRefusal
from vramlens.hardware.gpu import GPU
from vramlens.hardware.runtime import CUBLAS_WORKSPACE_DEFAULT_BYTES, CUBLASLT_WORKSPACE_DEFAULT_BYTES
from vramlens.models.hybrid import ATTENTION
from vramlens.serving.common import (
    ServedModel,
    kv_cell_bytes,
    kv_read_tokens,
    non_torch_bytes,
    profile_activation_bytes,
    refuse_hybrid,
    roofline,
    stage_layers,
    stage_weight_bytes,
)
from vramlens.serving.result import Capacity, EngineFigure
from vramlens.units import DTYPE_BYTES, GiB

ACCOUNTING = "transformers 4.45+ generate() with DynamicCache"


def transformers_capacity(m: ServedModel, gpu: GPU, *, gpus: int, tp: int, pp: int, context: int | None,
                          max_batch: int | None = None) -> Capacity:
    """How many ``context``-token requests one ``generate()`` batch holds on ``gpu``.

    Raises:
        ConfigError: tp > 1 (transformers generate has no tensor parallelism here).
        EngineRefusal: not even one request fits beside the weights.
    """
    h = m.hybrid
    if h is not None and (h.mixer != "gated_deltanet" or max(pp, gpus) > 1):
        refuse_hybrid(m, "transformers generate()" + (" over several GPUs" if h.mixer == "gated_deltanet" else ""))
    if tp > 1:
        raise ConfigError("transformers generate() has no tensor parallelism: use --gpus N for device_map='auto' "
                          "(layers spread over the GPUs)")
    stages = max(pp, gpus)
    if stages > m.n_layers:
        raise ConfigError(f"device_map='auto' over {stages} GPUs exceeds the {m.n_layers} layers of {m.name}")
    b = DTYPE_BYTES[m.dtype]
    ctx = context or m.max_position
    layers = stage_layers(m, stages)
    weights = stage_weight_bytes(m, 1, stages)
    outside, outside_why = non_torch_bytes(gpu, 1, 1)
    workspace = CUBLAS_WORKSPACE_DEFAULT_BYTES + CUBLASLT_WORKSPACE_DEFAULT_BYTES
    state_per_request = 0
    if h is not None:  # the attention blocks' DynamicLayers grow; each linear-attention block keeps a fixed state
        layers = h.kinds.count(ATTENTION)
        conv_dim = 2 * h.k_heads * h.k_dim + h.v_heads * h.v_dim
        state_per_request = h.n_state * (conv_dim * h.conv_kernel * b + h.v_heads * h.k_dim * h.v_dim * 4)
    kv_per_token = kv_cell_bytes(m, 1, b) * layers  # MLA: DynamicCache keeps the latent (modeling_deepseek_v3.py)
    # = kv_per_token x ctx without sliding layers, plus a hybrid's fixed states
    kv_per_request = int(kv_per_token * kv_read_tokens(m, ctx)) + state_per_request
    act_per_request = profile_activation_bytes(m, ctx, 1, 1, b)
    # PyTorch's caching allocator runs out at CUDA's total (GPU.capacity_bytes; nvidia-smi's where the catalog has none)
    free = gpu.capacity_bytes - outside - workspace - weights
    per_request = kv_per_request + act_per_request
    fit = max(0, free // per_request)
    if fit < 1:
        raise EngineRefusal(
            f"torch.OutOfMemoryError: CUDA out of memory (transformers: one {ctx:,}-token request needs "
            f"{per_request / GiB:.2f} GiB of cache and activations, {max(free, 0) / GiB:.2f} GiB is left beside the "
            f"weights {weights / GiB:.2f} GiB): shorten the context, quantize, or use more GPUs")
    running = min(fit, max_batch) if max_batch else fit
    speed = roofline(m, gpu, weights_per_gpu=weights, kv_per_token_per_gpu=kv_per_token, running=running,
                     context=ctx, tp=1, pp=stages, compute_dtype=m.dtype)
    figures = (
        EngineFigure("max_batch", f"generate() batch of {ctx:,}-token requests that fits", int(fit)),
        EngineFigure("kv_per_request_gib", "DynamicCache per request (GiB)", round(kv_per_request / GiB, 3)),
    )
    notes = (
        f"fits = (GPU {gpu.capacity_bytes:,} - {outside_why} - cuBLAS {workspace:,} - weights {weights:,}) // "
        f"(cache {kv_per_request:,} + prefill activations {act_per_request:,}) = {fit}",
    ) + ((f"hybrid: the cache per request is {layers} attention blocks' K and V plus {h.n_state} Gated DeltaNet "
          f"states of {state_per_request // max(1, h.n_state):,} B (conv (conv_dim, {h.conv_kernel}) x {b} B, recurrent "
          f"({h.v_heads}, {h.k_dim}, {h.v_dim}) x 4 B); the prefill activations keep the attention/MLP model",)
         if h is not None else ())
    return Capacity(
        engine="transformers", accounting=ACCOUNTING, model=m.name, gpu=gpu.name, gpus=stages, tp=1, pp=stages,
        gpu_bytes=gpu.capacity_bytes, budget_bytes=gpu.capacity_bytes, weights_bytes=weights,
        non_torch_bytes=outside, cuda_graph_bytes=0, activation_bytes=act_per_request * running,
        kv_cache_bytes=kv_per_request * running, kv_bytes_per_token=kv_per_token, kv_tokens=int(fit) * ctx,
        max_model_len=m.max_position, context=ctx, concurrency=float(fit), max_running=int(running),
        decode_tokens_s=speed.decode_tokens_s, decode_tokens_s_total=speed.decode_tokens_s_total,
        ttft_s=speed.ttft_s, figures=figures, notes=notes)
