"""transformers' KV caches by kind (``--cache``), run under fake tensors as a CUDA run runs them.

* ``dynamic``: ``DynamicCache(config=...)`` (the runner's default; ``torch.cat`` per token).
* ``static``: ``StaticCache(config=..., max_cache_len=M)``, as ``generate(cache_implementation="static")``
  builds it (``GenerationMixin._prepare_static_cache``); its layers allocate (b, n_kv, M, d) keys and
  values at their first update (``StaticLayer.lazy_initialization``). The runner passes generate's
  attention mask (ones over the tokens so far), which ``prepare_padding_mask`` pads to M.
* ``offloaded``: ``DynamicCache(config=..., offloading=True)`` (``cache_implementation="offloaded"``):
  ``Cache.update`` prefetches layer i+1 (circling back to the first offloaded layer), updates layer
  i and offloads it (``keys.to("cpu")``). On the fake CPU device ``.to("cpu")`` is a no-op and
  ``torch.cuda.default_stream`` does not exist, so :func:`offloaded_on_fake` keeps transformers'
  update order and replaces the device moves: the host copy is a new storage tagged ``host`` (not
  on the GPU), a prefetch a new storage tagged ``kv_cache``.
* hybrid models (Mamba, Mamba2, gated DeltaNet or short-conv blocks beside attention ones): generate() builds
  ``DynamicCache(config=config.get_text_config(decoder=True))`` for them too (transformers 5.24.0,
  generation/utils.py ``_prepare_cache_for_generation``; only reformer, minimax, xlnet, rwkv and xlstm supply their
  own), which reads the config's ``layer_types`` (cache_utils.py ``get_layer_types_and_kwargs``) and gives each
  recurrent block a ``LinearAttentionLayer``: its ``conv_states`` and ``recurrent_states`` are allocated at the
  prefill (``lazy_initialization``) and then updated in place, a fixed size per sequence, tagged ``kv_cache`` with
  the attention blocks' keys and values.
* ``quantized``: ``QuantizedCache`` needs optimum-quanto or hqq, whose kernels are not installed here
  (and have no fake-tensor implementations): the trace refuses it; ``vramlens estimate`` models it.

The masks these forwards build (or skip) are answered as on CUDA by :mod:`vramlens.trace.masks`.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch

from vramlens.errors import TraceError


def make_cache(kind: str, config: Any, max_cache_len: int, *, seq2seq: bool = False):
    """The cache object ``generate`` would build for ``kind`` (see the module docstring)."""
    from transformers import DynamicCache, EncoderDecoderCache, StaticCache

    if kind == "quantized":
        raise TraceError("cache=quantized needs optimum-quanto or hqq (QuantizedCache), whose kernels cannot run "
                         "under fake tensors here: use `vramlens estimate`")
    if seq2seq and kind != "dynamic":
        raise TraceError(f"cache={kind} with an encoder-decoder model is not traced: use `vramlens estimate`")
    if seq2seq:
        return EncoderDecoderCache(DynamicCache(), DynamicCache())
    if kind == "static":
        return StaticCache(config=config, max_cache_len=max_cache_len)
    if kind == "offloaded":
        cache = DynamicCache(config=config, offloading=True)
        cache.prefetch_stream = _NoStream()  # type: ignore[assignment]  # the fake device has no streams
        return cache
    return DynamicCache(config=config)


def cache_tensors(cache) -> list[torch.Tensor]:
    """The cache's GPU storages: keys and values of every layer (and a static layer's position counter), and a
    recurrent layer's fixed state per sequence (transformers' ``LinearAttentionLayer``: the Mamba or DeltaNet
    mixer's ``conv_states`` and ``recurrent_states``, one of each per state index)."""
    out: list[torch.Tensor] = []
    for sub in (getattr(cache, "self_attention_cache", None), getattr(cache, "cross_attention_cache", None)):
        if sub is not None:
            out.extend(cache_tensors(sub))
    for layer in getattr(cache, "layers", None) or ():
        if getattr(layer, "_vramlens_on_host", False):
            continue  # offloaded: its keys and values are host copies
        for attr in ("keys", "values", "cumulative_length"):
            t = getattr(layer, attr, None)
            if isinstance(t, torch.Tensor):
                out.append(t)
        for attr in ("conv_states", "recurrent_states"):  # cache_utils.LinearAttentionCacheLayerMixin
            states = getattr(layer, attr, None)
            if isinstance(states, dict):
                out.extend(t for t in states.values() if isinstance(t, torch.Tensor))
    return out


class _NoStream:
    """A stream that orders nothing: the fake device runs every op in order anyway."""

    def wait_stream(self, other) -> None:
        return None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


@contextlib.contextmanager
def offloaded_on_fake(rec):
    """Run ``Cache(offloading=True)`` on the fake CPU device: transformers' own update, prefetch and
    offload order, with the device moves made visible to the recorder (see the module docstring)."""
    from transformers import cache_utils

    mixin = cache_utils.CacheLayerMixin
    orig_offload, orig_prefetch = mixin.offload, mixin.prefetch
    orig_default_stream = torch.cuda.default_stream

    def offload(self):  # CacheLayerMixin.offload: keys.to("cpu", non_blocking=True)
        if self.is_initialized and not getattr(self, "_vramlens_on_host", False):
            self.keys, self.values = self.keys.clone(), self.values.clone()
            rec.mark((self.keys, self.values), "host")
            self._vramlens_on_host = True

    def prefetch(self):  # CacheLayerMixin.prefetch: keys.to(self.device, non_blocking=True)
        if self.is_initialized and getattr(self, "_vramlens_on_host", False):
            self.keys, self.values = self.keys.clone(), self.values.clone()
            rec.mark((self.keys, self.values), "kv_cache")
            self._vramlens_on_host = False

    orig_update = cache_utils.Cache.update

    def update(self, key_states, value_states, layer_idx, *args, **kwargs):
        keys, values = orig_update(self, key_states, value_states, layer_idx, *args, **kwargs)
        rec.mark((keys, values), "kv_cache")  # the GPU copy attention reads, after the layer went to the host
        return keys, values

    mixin.offload, mixin.prefetch = offload, prefetch
    cache_utils.Cache.update = update
    torch.cuda.default_stream = lambda device=None: _NoStream()  # type: ignore[assignment,return-value]
    try:
        yield
    finally:
        mixin.offload, mixin.prefetch = orig_offload, orig_prefetch
        cache_utils.Cache.update = orig_update
        torch.cuda.default_stream = orig_default_stream
