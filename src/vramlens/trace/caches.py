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
* ``quantized``: ``QuantizedCache`` needs optimum-quanto or hqq, whose kernels are not installed here
  (and have no fake-tensor implementations): the trace refuses it; ``vramlens estimate`` models it.

The masks: transformers' ``_ignore_causal_mask_sdpa`` cannot read a fake tensor (``is_tracing``) and
then always builds the mask. :func:`mask_answers_as_cuda` answers as a CUDA run answers for the
runner's forwards (a prefill on an empty cache, then one token at a time, generate's mask all
ones over the tokens so far): a prefill skips the mask (``q_offset == 0`` with the padding only
past the query), a decode step skips it only when the mask covers every key.
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
    """The cache's GPU storages: keys and values of every layer (and a static layer's position counter)."""
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


def mask_answers_as_cuda() -> contextlib.ExitStack:
    """``masking_utils._ignore_causal_mask_sdpa`` answered for fake tensors as a CUDA run answers it
    for the runner's forwards (see the module docstring)."""
    from torch._subclasses.fake_tensor import FakeTensor

    stack = contextlib.ExitStack()
    try:
        from transformers import masking_utils
    except ImportError:
        return stack
    orig_ignore = getattr(masking_utils, "_ignore_causal_mask_sdpa", None)
    orig_prepare = getattr(masking_utils, "prepare_padding_mask", None)
    if orig_ignore is None or orig_prepare is None:
        return stack
    seen: dict[str, int | None] = {"len": None}

    def prepare_padding_mask(attention_mask, kv_length, kv_offset):
        # the runner's masks are all ones: their length before padding says which keys they cover
        seen["len"] = None if attention_mask is None else int(attention_mask.shape[-1])
        return orig_prepare(attention_mask, kv_length, kv_offset)

    def ignore(padding_mask, q_length, kv_length, q_offset, kv_offset, local_attention_size=None):
        fake = isinstance(padding_mask, FakeTensor) or isinstance(q_offset, FakeTensor)
        if not fake:
            return orig_ignore(padding_mask, q_length, kv_length, q_offset, kv_offset, local_attention_size)
        if local_attention_size is not None and kv_length >= local_attention_size:
            return False
        covered = seen["len"]
        all_ones = padding_mask is None or (covered is not None and covered >= kv_length + kv_offset)
        if (q_length == 1 or kv_length == q_length) and all_ones:
            return True
        # a prefill (q_length > 1) starts on an empty cache: q_offset == 0, and generate's mask covers
        # the query's tokens only, so the padding is past them
        return q_length > 1 and (padding_mask is None or covered == q_length)

    masking_utils.prepare_padding_mask = prepare_padding_mask
    masking_utils._ignore_causal_mask_sdpa = ignore
    stack.callback(setattr, masking_utils, "prepare_padding_mask", orig_prepare)
    stack.callback(setattr, masking_utils, "_ignore_causal_mask_sdpa", orig_ignore)
    return stack
