"""KV cache: keys and values of every past token, per layer.

Bytes = 2 (K and V) x layers x tokens x n_kv x d_head x bytes, per sequence, times batch
(Pope et al. 2022, "Efficiently Scaling Transformer Inference", §2). With GQA/MQA n_kv < a.
Sliding-window layers keep at most ``sliding_window`` tokens (transformers'
``DynamicSlidingWindowLayer``). Paged caches (vLLM, Kwon et al. 2023) allocate whole blocks of
``kv_block`` tokens per sequence. Encoder-decoder decoders also cache the cross-attention
keys/values of the encoder's s tokens.

LLaMA-13B (40 layers, 40 heads x 128) in fp16: 2 * 40 * 5120 * 2 B = 819,200 B = 800 KiB per token.
"""

from __future__ import annotations

from vramlens.models.spec import ModelSpec
from vramlens.units import DTYPE_BYTES, round_up
from vramlens.workload import Workload


def kv_dtype_bytes(w: Workload) -> int:
    return DTYPE_BYTES[w.kv_dtype or w.compute_dtype]


def sliding_layers(spec: ModelSpec) -> int:
    """How many decoder layers use a sliding window (and so cap their cache): the family's fact
    (``ModelSpec.sliding_layer_ids``, laid out as each config class's ``layer_types``)."""
    return spec.n_sliding_layers


def kv_bytes_per_token(spec: ModelSpec, w: Workload, tp: int = 1) -> int:
    """Bytes one token adds to the cache across all decoder layers (no window, no paging)."""
    kv = max(1, spec.n_kv_heads // tp)
    return 2 * spec.n_decoder_layers * kv * spec.head_dim * kv_dtype_bytes(w)


def kv_cache_bytes(spec: ModelSpec, w: Workload, tokens: int, batch: int, tp: int = 1) -> int:
    """Cache bytes for ``batch`` sequences of ``tokens`` tokens each."""
    if spec.kind == "encoder":
        return 0
    kv = max(1, spec.n_kv_heads // tp)
    per_layer_token = 2 * kv * spec.head_dim * kv_dtype_bytes(w)
    L = spec.n_decoder_layers
    n_slide = sliding_layers(spec)
    win = spec.sliding_window or tokens
    full_tokens = tokens
    slide_tokens = min(tokens, win)
    if w.kv_block:
        full_tokens = round_up(full_tokens, w.kv_block)
        slide_tokens = round_up(slide_tokens, w.kv_block)
    total = per_layer_token * batch * ((L - n_slide) * full_tokens + n_slide * slide_tokens)
    if spec.kind == "encoder-decoder":
        total += per_layer_token * batch * L * w.seq  # cross-attention keys/values of the encoder output
    return total
