"""What a mask does to transformers' attention: whether keys and values are expanded to every head before the
kernel, and whether a padded batch's mask reaches the blocks. Read by the activations, the checkpointing policy and
the held outputs alike (one home for the condition; no estimator imports, so none of them import each other)."""

from __future__ import annotations

from vramlens.models.spec import ModelSpec
from vramlens.workload import Workload


def repeats_kv(spec: ModelSpec, attention: str, masked: bool, c: int) -> bool:
    """Whether transformers' attention expands keys and values to every head (repeat_kv) before its kernel:
    eager always; SDPA outside a maskless decoder in half precision (layer_activations' attention block)."""
    return attention == "eager" or (attention == "sdpa" and (spec.kind != "decoder" or masked or c == 4))


def kv_prefix(w: Workload) -> int:
    """Keys and values before each block's own: prefix tuning's virtual tokens (0 otherwise).

    peft's PeftModelForCausalLM.forward (src/peft/peft_model.py, peft 0.21.2 and d787f51b) puts ones before the
    attention mask and passes ``get_prompt``'s DynamicCache as past_key_values: the prefix encoder's output cast to
    the model's dtype, viewed as each layer's (b, kv heads, n, d) keys and values. Each block's attention then runs
    its s queries over n + s keys (``DynamicLayer.update``'s ``torch.cat``), and with a past transformers cannot
    skip the mask (``_ignore_causal_mask_sdpa``: kv length differs from the query length), so SDPA gets an explicit
    (b, 1, s, n + s) mask, as a padded batch's."""
    return w.num_virtual_tokens if w.method == "prefix-tuning" else 0


def sdpa_masked(spec: ModelSpec, w: Workload) -> bool:
    """Whether every block's SDPA gets an explicit mask: a padded batch's (:func:`padded_mask`) or a KV prefix's
    (:func:`kv_prefix`)."""
    return padded_mask(spec, w) or (kv_prefix(w) > 0 and spec.kind == "decoder")


def padded_mask(spec: ModelSpec, w: Workload) -> bool:
    """Whether a padded batch's mask reaches every block (Workload.padded; decoder-only models).

    What a padded batch changes, read in transformers 5.24 and torch 2.13:

    * the mask: an attention_mask with zeros makes ``masking_utils._ignore_causal_mask_sdpa`` answer no, so
      ``create_causal_mask`` builds the (b, 1, s, S) mask once per forward (``sdpa_mask``: bool, the causal
      pattern and'ed with ``padding_mask_function``, materialised at the batch size; ``eager_mask``: 0 or the
      dtype's minimum in the compute dtype, built for unpadded batches too), one per kind of block (sliding
      ones get their own); every block receives it, and a checkpointed block keeps it as an input;
    * SDPA: with a mask ``use_gqa_in_sdpa`` answers no on CUDA, so ``repeat_kv`` copies GQA keys and values to
      every head (a view for one kv head), and ``is_causal`` is off: sdp_utils.cpp rules flash out (no
      attn_mask), the memory-efficient kernel converts the bool mask to an additive one in the query's dtype in
      every call (sdp::convert_boolean_attn_mask) and keeps it for backward with its output and fp32
      log-sum-exp (b, a, ceil(s/32)*32): all as a sliding block over a sequence longer than its window;
    * eager attention: the same additive mask as an unpadded batch's; nothing changes;
    * flash-attention-2: ``_upad_input`` gathers q, k and v to the real tokens (``index_first_axis``) and
      ``pad_input`` scatters the output back (refused: Workload._padded_problems);
    * the loss: labels of -100 on the padding are skipped by cross_entropy's ignore_index, no tensor changes size.
    """
    return w.padded and spec.kind == "decoder"
