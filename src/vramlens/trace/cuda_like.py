"""Make fake CPU tensors allocate like a CUDA run would.

A fake ``cuda`` device cannot run autograd on a CPU-only build of torch (it aborts the
process), so traces run on the fake CPU device and these differences are closed by hand:

* sizes: every storage is rounded up to 512 bytes (the caching allocator's minimum block);
  done by the Recorder (``round_to=512``).
* optimizers: ``foreach=True`` is passed explicitly (CUDA's default; with CPU tensors torch
  silently picks the per-tensor loop, which has a much smaller transient peak).
* attention: :func:`cuda_sdpa` replaces ``F.scaled_dot_product_attention`` while tracing and
  picks the kernel CUDA would pick (aten/src/ATen/native/transformers/cuda/sdp_utils.cpp on
  sm80+, default priority flash > memory-efficient > math):
  flash for fp16/bf16 without a mask (head_dim <= 256, a multiple of 8; GQA allowed; q, k and v
  equally wide, sdp_utils.cpp ``check_head_dim_size_flash``);
  memory-efficient for fp16/bf16/fp32 with or without an additive mask, dropout allowed, values
  narrower than queries and keys allowed (MLA: ``check_head_dim_size_mem_efficient`` only asks
  q and k to agree) (no GQA: keys/values are expanded first); the math kernel otherwise, and always when the
  mask requires grad (T5's learned position bias in full fine-tuning). The CUDA kernels'
  meta functions give the shapes of what they save (output plus fp32 logsumexp), so the
  saved bytes are CUDA's. On CPU, torch would use its own flash kernel or, with dropout in
  training, the math kernel, which materialises the b x a x s x s scores.
* the causal mask: transformers builds an explicit 4-D mask when it sees fake tensors
  (``masking_utils._ignore_causal_mask_sdpa`` treats them as tracing), where a CUDA run with
  an all-ones attention mask passes ``is_causal=True`` and no mask. The runner therefore
  passes no ``attention_mask`` for unpadded batches: transformers then skips the mask exactly
  as on CUDA. Eager attention builds the b x 1 x s x s mask on CUDA too, and so it does here.
* autocast: CUDA autocast runs ``scaled_dot_product_attention`` in the lower precision;
  CPU autocast does not list it in every release, so :func:`cuda_sdpa` casts q, k, v (and a
  float mask) itself. CPU autocast caches the half copies of fp32 leaf weights as CUDA does
  (aten/src/ATen/autocast_mode.cpp ``cached_cast`` does not depend on the device).
* autocast's op lists: CPU's and CUDA's differ (aten/src/ATen/autocast_mode.cpp: CUDA runs
  ``pow``, ``exp``, ``rsqrt``, ``layer_norm``, ... in fp32 and ``softmax``/``log_softmax``/
  ``sum``/``cumsum`` in fp32 unless given a dtype; CPU keeps them in the lower precision and
  casts ``cross_entropy_loss``, ``cat``, ``stack``, ... which CUDA leaves alone), so the saved
  tensors of, say, GPT-2's Python GELU or BERT's MLM head had CPU's dtypes.
  :func:`vramlens.trace.cuda_autocast.cuda_autocast_policy` registers ``AutocastCPU`` kernels
  (``torch.library``) for the ops whose CUDA policy differs, for as long as a fake trace runs:
  CUDA's cast rule for the ops CUDA lists, a fallthrough for those only CPU lists; the ops
  both list alike keep CPU's C++ kernels (and their weight-cast cache).
"""

from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F

_HALF = (torch.float16, torch.bfloat16)


def _expand_kv(t: torch.Tensor, n_heads: int) -> torch.Tensor:
    if t.shape[-3] == n_heads:
        return t
    return t.repeat_interleave(n_heads // t.shape[-3], dim=-3)


def cuda_sdpa(orig):
    """A drop-in ``scaled_dot_product_attention`` that runs CUDA's kernel choice on fake tensors."""

    def sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        if torch.is_autocast_enabled("cpu"):
            dt = torch.get_autocast_dtype("cpu")
            query, key, value = query.to(dt), key.to(dt), value.to(dt)
            if attn_mask is not None and attn_mask.is_floating_point():
                attn_mask = attn_mask.to(dt)
        with torch.autocast("cpu", enabled=False):
            return _dispatch(orig, query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)

    return sdpa


def _dispatch(orig, q, k, v, mask, dropout_p, is_causal, scale, enable_gqa):
    d = q.shape[-1]
    dtype = q.dtype
    if q.dim() != 4 or k.shape[-1] != d:
        return orig(q, k, v, attn_mask=mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale, enable_gqa=enable_gqa)
    same_v = v.shape[-1] == d
    gqa = k.shape[-3] != q.shape[-3]
    if mask is not None and mask.requires_grad:
        # sdp_utils_cpp.h check_attn_mask_shape: a mask that requires grad (T5's learned relative
        # position bias in full fine-tuning) is refused by the fused kernels: the math kernel runs
        # and keeps the b x a x s x S probabilities (seen on an H200: validation/events/cuda-h200-t5)
        if gqa:
            k, v = _expand_kv(k, q.shape[-3]), _expand_kv(v, q.shape[-3])
        return _math_attention(q, k, v, mask, dropout_p, is_causal, scale)
    if dtype in _HALF and mask is None and d <= 256 and d % 8 == 0 and same_v:
        out = torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, dropout_p, is_causal, False, scale=scale)
        return out[0]
    align = 8 if dtype in _HALF else 4
    if dtype in (*_HALF, torch.float32) and d % align == 0 and v.shape[-1] % align == 0:
        if gqa:
            k, v = _expand_kv(k, q.shape[-3]), _expand_kv(v, q.shape[-3])
        if mask is not None and mask.dtype == torch.bool:
            # sdp::convert_boolean_attn_mask: an additive mask in the query's dtype
            mask = torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(
                mask.logical_not(), float("-inf")
            )
        elif mask is not None and mask.dtype != dtype:
            mask = mask.to(dtype)
        if mask is not None:
            mask = mask.expand(q.shape[0], q.shape[1], q.shape[2], k.shape[2])
        out = torch.ops.aten._scaled_dot_product_efficient_attention(
            q, k, v, mask, q.requires_grad or k.requires_grad or v.requires_grad, dropout_p, is_causal, scale=scale
        )
        return out[0]
    if gqa:
        k, v = _expand_kv(k, q.shape[-3]), _expand_kv(v, q.shape[-3])
    return _math_attention(q, k, v, mask, dropout_p, is_causal, scale)


def _math_attention(q, k, v, mask, dropout_p, is_causal, scale):
    """aten/src/ATen/native/transformers/attention.cpp ``_scaled_dot_product_attention_math``, as
    it runs on CUDA: q and k each scaled by sqrt(scale), the scores, the mask added, ``_safe_softmax``,
    then dropout through CUDA's ``native_dropout`` (a bool mask; the CPU build's own dropout
    would keep a noise tensor in the scores' dtype instead)."""
    import math

    factor = math.sqrt(scale if scale is not None else 1.0 / math.sqrt(q.shape[-1]))
    q = q * factor
    scores = torch.matmul(q, (k * factor).transpose(-2, -1))
    if is_causal:
        L, S = q.shape[-2], k.shape[-2]
        causal = torch.ones(L, S, dtype=torch.bool, device=q.device).tril()
        scores = scores.masked_fill(causal.logical_not(), float("-inf"))
    if mask is not None:
        if mask.dtype == torch.bool:
            scores = scores.masked_fill(mask.logical_not(), float("-inf"))
        else:
            scores = scores + mask
    probs = torch.ops.aten._safe_softmax(scores, -1)
    if dropout_p > 0.0:
        probs = torch.native_dropout(probs, dropout_p, True)[0]
    return torch.matmul(probs, v)


def cuda_dropout(orig):
    """``F.dropout`` as CUDA runs it in training: the fused ``native_dropout`` with a bool mask.

    aten/src/ATen/native/Dropout.cpp: on CUDA ``dropout`` takes ``native_dropout`` (a 1-byte
    mask kept for backward); on CPU it takes ``_dropout_impl``, which keeps a noise tensor in
    the input's dtype (4 bytes per element in fp32): without this, traces overstate every
    dropout mask by 2-4x.
    """

    def dropout(input, p=0.5, training=True, inplace=False):
        if training and 0.0 < p < 1.0 and not inplace and input.numel() > 0:
            return torch.native_dropout(input, p, True)[0]
        return orig(input, p, training, inplace)

    return dropout


@contextlib.contextmanager
def cuda_like_attention():
    """Route ``F.scaled_dot_product_attention`` to CUDA's kernel choice and ``F.dropout`` to CUDA's kernel."""
    orig = F.scaled_dot_product_attention
    orig_dropout = F.dropout
    # transformers calls torch.nn.functional.scaled_dot_product_attention by attribute
    # (integrations/sdpa_attention.py), and nn.Dropout calls F.dropout by attribute; code that
    # imported the functions by name keeps the originals and gets CPU behaviour.
    F.scaled_dot_product_attention = cuda_sdpa(orig)
    F.dropout = cuda_dropout(orig_dropout)
    try:
        yield
    finally:
        F.scaled_dot_product_attention = orig
        F.dropout = orig_dropout


@contextlib.contextmanager
def expanded_gqa():
    """transformers' SDPA path made to copy GQA keys and values to every head (``repeat_kv``), as a stack
    that expands them itself does (torchtune's MultiHeadAttention; Workload.gqa_expand): ``use_gqa_in_sdpa``
    answers no, and a one-token query takes ``repeat_kv`` too rather than ``pack_gqa`` (its branch is
    skipped when ``is_torchdynamo_compiling()``; integrations/sdpa_attention.py reads both by module global)."""
    try:
        from transformers.integrations import sdpa_attention as sa
    except ImportError:
        yield
        return
    saved = {n: getattr(sa, n) for n in ("use_gqa_in_sdpa", "is_torchdynamo_compiling") if hasattr(sa, n)}
    sa.use_gqa_in_sdpa = lambda *a, **k: False
    sa.is_torchdynamo_compiling = lambda: True
    try:
        yield
    finally:
        for n, f in saved.items():
            setattr(sa, n, f)
