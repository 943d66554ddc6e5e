"""KV cache: keys and values of every past token, per layer.

Bytes = 2 (K and V) x layers x tokens x n_kv x d_head x bytes, per sequence, times batch
(Pope et al. 2022, "Efficiently Scaling Transformer Inference", §2). With GQA/MQA n_kv < a.
Sliding-window layers keep at most ``sliding_window`` tokens (transformers'
``DynamicSlidingWindowLayer``). Paged caches (vLLM, Kwon et al. 2023) allocate whole blocks of
``kv_block`` tokens per sequence. Encoder-decoder decoders also cache the cross-attention
keys/values of the encoder's s tokens. Multi-head latent attention (DeepSeek V2/V3) caches one
latent per token and layer instead, kv_lora_rank + qk_rope_head_dim wide (ModelSpec.kv_latent),
in transformers >= 5 as in vLLM and SGLang; it is not split by tensor parallelism.

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


def layer_token_bytes(spec: ModelSpec, w: Workload, tp: int = 1) -> int:
    """Cache bytes of one token in one layer: K and V of the (local) KV heads, or MLA's latent."""
    if spec.kv_latent:
        return spec.kv_latent * kv_dtype_bytes(w)
    kv = max(1, spec.n_kv_heads // tp)
    return 2 * kv * spec.head_dim * kv_dtype_bytes(w)


def kv_bytes_per_token(spec: ModelSpec, w: Workload, tp: int = 1) -> int:
    """Bytes one token adds to the cache across all decoder layers (no window, no paging)."""
    return spec.n_decoder_layers * layer_token_bytes(spec, w, tp)


def decode_bytes(spec: ModelSpec, w: Workload, prompt: int, total: int, batch: int, tp: int = 1) -> int:
    """The cache's peak while ``generate`` decodes from ``prompt`` to ``total`` tokens (transformers).

    Each step appends with ``torch.cat`` (cache_utils.py): ``DynamicLayer.update`` reassigns the
    keys before concatenating the values, so one layer's old keys (or MLA's kv_lora_rank part of
    the latent) are alive beside the new cache; ``DynamicSlidingWindowLayer.update`` concatenates
    both before reassigning, so a sliding layer's old keys and values are, and the first step's old
    ones are the whole prompt (the window is a view of it after prefill). The peak is at the first
    or at the last step.
    """
    if spec.kind == "encoder" or total <= prompt:
        return 0
    L = spec.n_decoder_layers
    n_slide = sliding_layers(spec)
    per_token = layer_token_bytes(spec, w, tp)
    half = spec.mla.kv_lora_rank * kv_dtype_bytes(w) if spec.mla is not None else per_token // 2
    win = spec.sliding_window or total
    peaks = []
    for before, after in ((prompt, prompt + 1), (total - 1, total)):
        steady = kv_cache_bytes(spec, w, after, batch, tp)
        transient = half * batch * before if n_slide < L else 0
        if n_slide:
            old = before if before == prompt else min(before + 1, win)  # the storage the last cat made
            transient = max(transient, per_token * batch * old)
        peaks.append(steady + transient)
    return max(peaks)


def kv_cache_bytes(spec: ModelSpec, w: Workload, tokens: int, batch: int, tp: int = 1, *,
                   prefill: bool = False) -> int:
    """Cache bytes for ``batch`` sequences of ``tokens`` tokens each.

    ``prefill``: the cache right after a prefill of ``tokens`` tokens in transformers, before any
    decode step: a sliding layer still holds the whole prompt, since
    ``DynamicSlidingWindowLayer.update`` keeps its last ``sliding_window - 1`` tokens as a view of
    the concatenated prompt; the next step's ``torch.cat`` replaces it with the window.
    """
    if spec.kind == "encoder":
        return 0
    per_layer_token = layer_token_bytes(spec, w, tp)
    L = spec.n_decoder_layers
    n_slide = sliding_layers(spec)
    win = spec.sliding_window or tokens
    full_tokens = tokens
    slide_tokens = tokens if prefill else min(tokens, win)
    if w.kv_block:
        full_tokens = round_up(full_tokens, w.kv_block)
        slide_tokens = round_up(slide_tokens, w.kv_block)
    total = per_layer_token * batch * ((L - n_slide) * full_tokens + n_slide * slide_tokens)
    if spec.kind == "encoder-decoder":
        total += per_layer_token * batch * L * w.seq  # cross-attention keys/values of the encoder output
    return total
