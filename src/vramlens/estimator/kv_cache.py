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

transformers before 4.42 (``--transformers-version``, :func:`legacy_decode_bytes`): generate() keeps the
previous step's whole cache beside the one each decode forward builds (the tuple cache).

transformers' caches by kind (``--cache``, transformers/cache_utils.py), :func:`cache_figures`:

* dynamic (``DynamicCache``): every token's keys and values; appending by ``torch.cat`` holds one
  layer's old and new tensors at once.
* static (``StaticCache``): ``StaticLayer.lazy_initialization`` allocates (b, n_kv, M, d) keys and
  values for M = ``max_cache_len`` tokens in every layer at the first forward (sliding layers:
  ``min(sliding_window, M)``), whatever is generated, plus a position counter per layer; updates
  are in place (``index_copy_``).
* offloaded (``DynamicCache(offloading=True)``): ``Cache.update`` prefetches layer i+1, appends to
  layer i and offloads it (``keys.to("cpu")``); the last layer prefetches the first again. On the
  GPU: the layer being updated (its new keys and values, and its old values while ``torch.cat``
  makes the new ones) and the prefetched next one, and between forwards the first layer; the other
  layers live on the host.
* quantized (``QuantizedCache``, quanto's defaults ``nbits=4, q_group_size=64, residual_length=128,
  axis 0``; hqq the same layout): the prefill quantizes every token; later tokens stay in full
  precision until ``residual_length`` of them are, when all are quantized again. Quantized bytes
  per K or V element: 1/2 (two 4-bit codes per byte) plus a scale and a shift in the compute dtype
  per group of 64 (optimum-quanto ``MaxOptimizer``). Each update dequantizes the layer and
  concatenates it with the residual and the new token: two full-precision copies of one layer.
"""

from __future__ import annotations

from dataclasses import dataclass

from vramlens.estimator.audio import encoder_tokens
from vramlens.models.spec import ModelSpec
from vramlens.units import BLOCK, DTYPE_BYTES, round_up
from vramlens.workload import Workload

#: QuantizedLayer's defaults (transformers/cache_utils.py ``QuantizedLayer.__init__``).
QUANT_NBITS = 4
QUANT_GROUP = 64
QUANT_RESIDUAL = 128


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


def legacy_decode_bytes(spec: ModelSpec, w: Workload, prompt: int, total: int, batch: int, tp: int = 1) -> int:
    """The cache's peak in a decode step of transformers < 4.42 (``Workload.legacy_cache``): the
    previous step's cache and the one the forward builds, both whole.

    transformers 4.35 (models/llama/modeling_llama.py ``LlamaAttention.forward``) makes each layer's
    new keys and values with ``torch.cat([past_key_value[0], key_states], dim=2)`` and returns
    ``past_key_value = (key_states, value_states)``; ``LlamaModel.forward`` collects them in a new tuple
    (``next_decoder_cache += (layer_outputs[...],)``), and ``generate()`` (generation/utils.py
    ``greedy_search``/``sample``) replaces ``model_kwargs["past_key_values"]`` only after the forward
    returns (``_update_model_kwargs_for_generation``). At the last layer every layer's old (S tokens)
    and new (S + 1) tensors are alive, and the old ones stay through the head. 4.36 - 4.41 run a
    DynamicCache inside the forward (``DynamicCache.from_legacy_cache`` over the same tensors, then
    ``to_legacy_cache``) while generate() still holds the tuple: the same two caches. Greedy search and
    sampling reorder nothing (``_reorder_cache`` is beam search's). An encoder-decoder's cross-attention
    keys and values are the same tensors in both tuples (counted once). The peak is at the first step
    (old: the cache as prefill left it) or the last.
    """
    return max(legacy_decode_steps(spec, w, prompt, total, batch, tp))


def legacy_decode_steps(spec: ModelSpec, w: Workload, prompt: int, total: int, batch: int,
                        tp: int = 1) -> tuple[int, int]:
    """:func:`legacy_decode_bytes` at the first and at the last decode step (old cache + new cache)."""
    if spec.kind == "encoder" or total <= prompt:
        return (0, 0)
    cross = kv_cache_bytes(spec, w, 0, batch, tp)  # the encoder-decoder's cross-attention part (0 tokens of self)
    first, last = (kv_cache_bytes(spec, w, before, batch, tp, prefill=before == prompt) - cross
                   + kv_cache_bytes(spec, w, after, batch, tp)
                   for before, after in ((prompt, prompt + 1), (total - 1, total)))
    return (first, last)


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
        # cross-attention keys/values of the encoder output (Whisper: 1,500 positions per window)
        total += per_layer_token * batch * L * encoder_tokens(spec, w)
    return total


@dataclass(frozen=True, slots=True)
class CacheFigures:
    """The KV cache of one inference run on one GPU, by phase (bytes)."""

    prefill: int     # on the GPU while a block runs in the prefill
    decode: int      # on the GPU while a block runs in a decode step (0 without new tokens)
    persistent: int  # alive between forwards (what the allocator keeps reserved)
    host: int        # in host memory (offloaded)
    formula: str
    prefill_tail: int | None = None  # on the GPU while the head computes the logits (None: prefill)
    decode_tail: int | None = None   # ... in a decode step (None: decode)


def max_cache_len(w: Workload) -> int:
    """StaticCache's length: --max-cache-len, or seq + new_tokens (generate's max_length)."""
    return w.max_cache_len or w.seq + w.new_tokens


def _layer_bytes(spec: ModelSpec, w: Workload, tokens: int, batch: int, tp: int) -> int:
    """Keys and values of one layer for ``tokens`` tokens (each tensor rounded to the allocator's block);
    MLA's two cached tensors: the kv_lora_rank latent and the rotated key part."""
    if not tokens:
        return 0
    if spec.mla is not None:
        n = kv_dtype_bytes(w) * batch * tokens
        return round_up(spec.mla.kv_lora_rank * n, BLOCK) + round_up(spec.mla.qk_rope_head_dim * n, BLOCK)
    kv = max(1, spec.n_kv_heads // tp)
    return 2 * round_up(kv * spec.head_dim * kv_dtype_bytes(w) * batch * tokens, BLOCK)


def quantized_bytes(numel: int, c: int) -> int:
    """One quantized K or V tensor of ``numel`` elements: packed 4-bit codes, a scale and a shift per group."""
    groups = -(-numel // QUANT_GROUP)
    return (round_up(-(-numel * QUANT_NBITS // 8), BLOCK) + 2 * round_up(groups * c, BLOCK)) if numel else 0


def quantized_lengths(s: int, new_tokens: int) -> tuple[int, int]:
    """(quantized tokens, full-precision residual tokens) after the prefill and ``new_tokens`` updates
    (QuantizedLayer.update: the residual is quantized with everything when it would reach 128)."""
    q, r = s, 0
    if new_tokens:
        # each update adds one token; the residual flushes when r + 1 >= residual_length
        cycles, rest = divmod(new_tokens, QUANT_RESIDUAL)
        q += cycles * QUANT_RESIDUAL
        r = rest
    return q, r


def cache_figures(spec: ModelSpec, w: Workload, tp: int = 1) -> CacheFigures:
    """The cache of ``w`` by kind (see the module docstring)."""
    b, s, n = w.batch, w.seq, w.new_tokens
    total = s + n
    L = spec.n_decoder_layers
    if spec.kind == "encoder":
        return CacheFigures(0, 0, 0, 0, "encoder: no cache")
    heads = (f"2 x {max(1, spec.n_kv_heads // tp)} kv heads x {spec.head_dim} x {kv_dtype_bytes(w)} B" if not spec.kv_latent
             else f"{spec.kv_latent} latent elements (kv_lora_rank + qk_rope_head_dim) x {kv_dtype_bytes(w)} B")
    if w.cache == "static":
        M = max_cache_len(w)
        kv = kv_cache_bytes(spec, w, M, b, tp=tp) + L * BLOCK  # + StaticLayer.cumulative_length per layer
        return CacheFigures(kv, kv if n else 0, kv, 0,
                            f"StaticCache: {L} layers x {heads} x max_cache_len {M} x batch {b}, allocated at "
                            "the first forward")
    if w.cache == "offloaded":
        one_prev = _layer_bytes(spec, w, total - 1, b, tp)
        # a prefill holds the last layer's keys and the first one's prefetched again; a decode step the
        # next layer prefetched and the layer being updated: its new keys and values and, while
        # torch.cat makes the values, its old values
        prefill = _layer_bytes(spec, w, s, b, tp) * min(2, L)
        decode = _layer_bytes(spec, w, total, b, tp) + one_prev + (one_prev // 2 if L > 1 else 0) if n else 0
        # on the host: every layer but the one prefetched (the prefetch drops its host copy)
        host = kv_cache_bytes(spec, w, total, b, tp=tp) * max(0, L - 1) // max(1, L)
        # while the head runs: only the first layer, prefetched for the next forward
        return CacheFigures(prefill, decode, _layer_bytes(spec, w, total, b, tp), host,
                            f"offloaded DynamicCache: on the GPU one layer's old and new keys and values and the next "
                            f"layer prefetched ({heads} x {total} tokens x batch {b} each); the other layers on the "
                            "host", prefill_tail=_layer_bytes(spec, w, s, b, tp) if L > 1 else 0,
                            decode_tail=_layer_bytes(spec, w, total, b, tp) if n else 0)
    if w.cache == "quantized":
        c = kv_dtype_bytes(w)
        per_token = max(1, spec.n_kv_heads // tp) * spec.head_dim * b
        q, r = quantized_lengths(s, n)
        layer_q = 2 * quantized_bytes(per_token * q, c)
        persistent = L * (layer_q + _layer_bytes(spec, w, r, b, tp))
        # prefill: the layer's full-precision keys and values being quantized; decode: one layer
        # dequantized and concatenated with the residual and the new token (two full-precision copies)
        prefill = L * 2 * quantized_bytes(per_token * s, c) + _layer_bytes(spec, w, s, b, tp)
        q_prev, r_prev = quantized_lengths(s, n - 1) if n else (s, 0)
        decode = (persistent + _layer_bytes(spec, w, q_prev, b, tp) + _layer_bytes(spec, w, q_prev + r_prev + 1, b, tp)
                  if n else 0)
        return CacheFigures(prefill, decode, persistent, 0,
                            f"QuantizedCache: {q} tokens x 2 x {L} layers in {QUANT_NBITS} bits + a scale and a shift "
                            f"per {QUANT_GROUP}, {r} residual tokens in full precision ({QUANT_RESIDUAL} at most); an "
                            "update dequantizes one layer")
    kv = kv_cache_bytes(spec, w, total, b, tp=tp)
    formula = f"{L} layers x {heads} x {total} tokens x batch {b}"
    if kv and n and not w.kv_block:
        # DynamicCache appends with torch.cat: one layer's old and new keys are alive at once
        kv += kv_cache_bytes(spec, w, total - 1, b, tp=tp) // max(1, 2 * L)
        formula += " + one layer's keys while torch.cat appends"
    return CacheFigures(kv, kv if n else 0, kv, 0, formula)
