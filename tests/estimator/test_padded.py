"""A padded batch (Workload.padded): the mask transformers builds when the attention_mask has zeros, and what SDPA
keeps with it, against the arithmetic (the tracer checks the same deltas per phase in tests/trace/test_padded.py)."""

import pytest

from vramlens.errors import ConfigError
from vramlens.estimator import estimate
from vramlens.estimator.activations import checkpointed_mask, inference_layer_peak
from vramlens.models import load_model
from vramlens.workload import make_workload

# PEFT's MetaMathQA shape: 4 x 768 tokens, bf16
TRAIN = dict(mode="train", dtype="bf16", batch=4, seq=768, method="lora")


def _block_delta(name: str, **kw) -> int:
    return (estimate(name, **{**TRAIN, **kw}, padded=True).layer_activation_bytes
            - estimate(name, **{**TRAIN, **kw}).layer_activation_bytes)


def test_sdpa_keeps_the_additive_mask_and_expanded_keys_and_values():
    # Llama 3.2 3B: 24 query heads, 8 kv heads, head_dim 128; t = 3,072 tokens. repeat_kv's copies replace the kv-head
    # tensors the kernel kept: 2 x 2 B x (24 - 8) x 128 x 3,072 = 25,165,824; the memory-efficient kernel's bf16
    # additive mask: 2 B x 4 x 768 x 768 = 4,718,592
    assert _block_delta("llama-3.2-3b") == 25_165_824 + 4_718_592 == 29_884_416
    # multi-head attention (Llama 2 7B) has nothing to expand: the mask alone
    assert _block_delta("llama-2-7b") == 4_718_592


def test_eager_and_selective_keep_nothing_more():
    # eager attention builds its additive mask unpadded too; selective recomputation's checkpoint keeps k and v as
    # the projections made them and recomputes repeat_kv and the mask's conversion
    assert _block_delta("llama-3.2-3b", attention="eager") == 0
    assert _block_delta("llama-3.2-3b", checkpointing="selective") == 0


def test_head_major_output_needs_no_copy_back():
    # GPT-NeoX hands SDPA contiguous head-major q: flash writes its output so and the transpose back is a copy the
    # dense layer keeps; the memory-efficient kernel writes (b, s, a, d): that copy goes (2 B x 768 x 3,072 tokens)
    # and the mask comes (2 B x 4 x 768 x 768)
    assert _block_delta("pythia-160m", method="full") == 4_718_592 - 2 * 768 * 3_072


def test_checkpointed_blocks_keep_the_bool_mask():
    spec = load_model("llama-3.2-3b")
    w = make_workload(**TRAIN, checkpointing="full", padded=True)
    assert checkpointed_mask(spec, w, 4, 768) == 4 * 768 * 768  # bool (b, 1, s, s), a multiple of 512 B
    assert checkpointed_mask(spec, make_workload(**TRAIN, checkpointing="full"), 4, 768) == 0
    # a model with sliding and global blocks gets one mask of each kind
    gemma = load_model("gemma-3-1b-it")
    assert checkpointed_mask(gemma, w, 4, 768) == 2 * 4 * 768 * 768


def test_prefill_holds_the_mask_and_copies_keys_and_values():
    """A no-cache prefill's block working set: the bool mask alive through the forward; in each SDPA call the additive
    copy and the keys and values at every head."""
    spec = load_model("llama-3.2-3b")  # h = a*d = 3,072, f = 8,192

    def delta(b: int, s: int) -> int:
        plain, padded = (make_workload(mode="inference", dtype="bf16", batch=b, seq=s, new_tokens=0, padded=p)
                         for p in (False, True))
        return inference_layer_peak(spec, padded, b, s, s) - inference_layer_peak(spec, plain, b, s, s)

    # 4 x 768: the MLP's working set stays the block's largest; the bool mask is beside it (4 x 768 x 768)
    assert delta(4, 768) == 2_359_296
    # 1 x 16,384: attention outgrows it. Padded: the stream during attention (3 x 2 B x 3,072 x 16,384 + the bool
    # 16,384^2) + q, k, v, out (4 x 2 B x 3,072 x 16,384) + the fp32 log-sum-exp (4 B x 24 x 16,384) + the additive
    # mask (2 B x 16,384^2) + repeat_kv's keys and values (2 x 2 B x 3,072 x 16,384) = 1,712,848,896; unpadded: the
    # stream (4 x 2 B x 3,072 x 16,384) + the MLP (3 x 2 B x 8,192 x 16,384) = 1,207,959,552
    assert delta(1, 16_384) == 1_712_848_896 - 1_207_959_552


@pytest.mark.parametrize("kw, message", [
    (dict(attention="flash"), "padded with attention=flash: flash-attention-2 unpads q, k and v and pads its output "
                              "back (copies not modelled): use --attention sdpa or eager"),
    (dict(mode="inference", new_tokens=16), "padded with new_tokens=16 cache='dynamic': generation's per-step masks "
                                            "over a padded prompt are not modelled; padded covers a training step or "
                                            "a prefill: drop --padded, or --new-tokens and --cache"),
    (dict(compile=True), "padded with compile: the compiled graphs' masked attention is not modelled: drop --compile"),
    (dict(fused_qkv=True), "padded with fused_qkv: LitGPT's fine-tuning passes its model no attention mask: drop "
                           "--padded"),
    (dict(padded="yes"), "padded='yes' must be true or false"),
])
def test_refusals(kw, message):
    with pytest.raises(ConfigError) as e:
        make_workload(**{**TRAIN, "padded": True, **kw})
    assert str(e.value) == message


def test_encoders_are_refused():
    with pytest.raises(ConfigError) as e:
        estimate("bert-base-uncased", mode="train", padded=True)
    assert str(e.value) == ("padded models a decoder-only text model's padding mask; google-bert/bert-base-uncased is "
                            "not one: drop --padded")
