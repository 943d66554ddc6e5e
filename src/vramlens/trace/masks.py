"""transformers' attention-mask decisions, answered under fake tensors as a CUDA run answers them.

transformers decides from tensor values whether to build an attention mask, and a fake tensor has
no values (``is_tracing``), so left alone a fake run always builds one: b x 1 x s x s per forward,
which also sends SDPA to the memory-efficient kernel with expanded GQA keys and values. Two checks
are answered here, for the runner's inputs (never packed, generate's all-ones masks):

* ``masking_utils.find_packed_sequence_indices`` (training and prefill): the position ids are
  ``arange(s)`` per row, so a CUDA run finds no packing and skips the mask (:func:`_unpacked_positions`;
  measured on an H200, torch 2.11, transformers 5.17: validation/stack-gpu.json).
* ``masking_utils._ignore_causal_mask_sdpa`` (generation with a cache): a prefill on an empty
  cache skips the mask (``q_offset == 0`` with the padding only past the query); a decode step
  skips it only when the mask covers every key (:func:`_sdpa_mask_skips`). A padded batch's mask
  (Workload.padded: the runner's mask has zeros) is never skipped: ``fast_all`` answers no.

:func:`masks_as_cuda` patches both for the duration of a trace.
"""

from __future__ import annotations

import contextlib


def masks_as_cuda(padded: bool = False) -> contextlib.ExitStack:
    """Both mask checks answered as on CUDA (see the module docstring) for the runner's masks, which have zeros
    when ``padded``; closing the stack restores them."""
    stack = contextlib.ExitStack()
    stack.enter_context(_unpacked_positions())
    stack.enter_context(_sdpa_mask_skips(padded))
    return stack


def _unpacked_positions() -> contextlib.ExitStack:
    """transformers' packed-sequence check, answered as a real run answers it for our batches.

    masking_utils.find_packed_sequence_indices reads the position ids to find packed
    sequences; with fake tensors it cannot read them (``is_tracing``) and assumes packing, so
    it builds a b x 1 x s x s mask, which sends SDPA to the memory-efficient kernel with
    expanded GQA keys and values and keeps the mask per layer. The runner's batches are never
    packed (transformers makes the position ids ``arange(s)`` per row), so a CUDA run finds no
    packing (one ``eq`` and one ``all``) and skips the mask: measured on an H200, torch 2.11,
    transformers 5.17 (validation/stack-gpu.json).
    """
    stack = contextlib.ExitStack()
    try:
        from transformers import masking_utils
    except ImportError:
        return stack
    orig = getattr(masking_utils, "find_packed_sequence_indices", None)
    if orig is None:
        return stack

    def find_packed_sequence_indices(position_ids):
        from torch._subclasses.fake_tensor import FakeTensor

        if isinstance(position_ids, FakeTensor):
            return None
        return orig(position_ids)

    masking_utils.find_packed_sequence_indices = find_packed_sequence_indices
    stack.callback(setattr, masking_utils, "find_packed_sequence_indices", orig)
    return stack


def _sdpa_mask_skips(padded: bool) -> contextlib.ExitStack:
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
        if padded and padding_mask is not None:
            return False  # the mask has zeros: fast_all(padding_mask) is false on CUDA
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
