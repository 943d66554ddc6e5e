"""--transformers-version: generate() of transformers < 4.42 keeps the previous step's KV cache beside the new
one, < 4.45 makes every prompt token's logits in the prefill (the tracer checks both against the real modules in
tests/trace/test_techniques.py::test_older_transformers_generate_matches_trace)."""

import pytest

from vramlens.errors import ConfigError
from vramlens.estimator import estimate
from vramlens.estimator import kv_cache as K
from vramlens.workload import make_workload

GEN = dict(mode="inference", batch=1, seq=512, new_tokens=512, dtype="bf16")
# Llama-2-7B: 32 layers x 2 (K, V) x 32 kv heads x 128 x 2 B = 524,288 B per token
TOKEN = 32 * 2 * 32 * 128 * 2


def _kv(e) -> int:
    return e.breakdown["kv_cache"]


def test_tuple_cache_holds_old_and_new_cache(llama7b):
    new = estimate(llama7b, **GEN)
    old = estimate(llama7b, **GEN, transformers_version="4.35")
    # 4.42 and later: 1,024 tokens + one layer's old keys (1,023 tokens) while torch.cat appends
    assert _kv(new) == 1024 * TOKEN + 1023 * TOKEN // 64 == 545_251_328
    # 4.35: the last step holds the previous cache (1,023 tokens) and the new one (1,024)
    assert _kv(old) == (1023 + 1024) * TOKEN == 1_073_217_536
    # and the previous step's logits (LlamaForCausalLM's fp32 upcast: 32,000 x 4 B), kept until the forward returns,
    # and each block's own rotary caches (inv_freq's 512 B block and bf16 cos/sin of (4,096, 128)): 32 x 2,097,664 B
    assert old.breakdown.peak_allocated - new.breakdown.peak_allocated == (
        1_073_217_536 - 545_251_328 + 32_000 * 4 + 32 * (512 + 2 * 4096 * 128 * 2))
    # 4.36 - 4.41 wrap the same tuple in a DynamicCache for each forward: the same figure; 4.42 fixed it
    assert _kv(estimate(llama7b, **GEN, transformers_version="4.41.2")) == 1_073_217_536
    assert _kv(estimate(llama7b, **GEN, transformers_version="4.42")) == 545_251_328
    assert _kv(estimate(llama7b, **GEN, transformers_version="5.2")) == 545_251_328


def test_legacy_decode_steps(llama7b):
    w = make_workload(**GEN, transformers_version="4.35")
    # first step: the prefill's 512 tokens and the new 513; last: 1,023 and 1,024
    assert K.legacy_decode_steps(llama7b, w, 512, 1024, 1) == (1025 * TOKEN, 2047 * TOKEN) == (537_395_200,
                                                                                              1_073_217_536)
    assert K.legacy_decode_bytes(llama7b, w, 512, 512, 1) == 0  # no decode step


def test_cross_attention_cache_counted_once():
    e = estimate("t5-small", mode="inference", seq=64, new_tokens=8, dtype="bf16", transformers_version="4.35")
    # T5-small: 6 decoder layers x 2 x 8 heads x 64 x 2 B = 2,048 B per token and layer; self-attention 71 old +
    # 72 new tokens, cross-attention 64 encoder tokens once (the same tensors in both tuples)
    assert _kv(e) == 2048 * 6 * (71 + 72 + 64) == 2_543_616


def test_prefill_logits_of_every_prompt_token():
    kw = dict(mode="inference", batch=1, seq=2048, new_tokens=16, dtype="bf16")
    now = estimate("llama-3-8b", **kw).breakdown
    old = estimate("llama-3-8b", **kw, transformers_version="4.44").breakdown
    # 4.45 and later: the last token's logits; 4.44: all 2,048 in bf16 and LlamaForCausalLM's fp32 copy
    # (logits.float(), both alive while it runs), plus the final hidden states (4,096 x 2,048 x 2 B)
    assert old["activations"] == 2048 * 128_256 * (2 + 4) + 4096 * 2048 * 2 == 1_592_786_944
    assert old["activations"] > now["activations"]
    assert old.peak_phase == "prefill"


def test_gpt2_keeps_its_logits_in_the_compute_dtype():
    kw = dict(mode="inference", batch=1, seq=1024, new_tokens=4, dtype="bf16")
    e = estimate("gpt2", **kw, transformers_version="4.35").breakdown
    # GPT2LMHeadModel has no logits.float(): 1,024 x 50,257 x 2 B, and the hidden states (768 x 1,024 x 2 B)
    # -> 102,926,336 + 1,572,864; before 4.42 generate() keeps those logits through the first decode step
    assert e["activations"] >= 1024 * 50_257 * 2 + 768 * 1024 * 2 == 104_499_200


def test_leaked_logits_raise_the_first_decode_step(llama7b):
    kw = dict(mode="inference", batch=8, seq=2048, new_tokens=1, dtype="bf16")
    d44 = dict(estimate(llama7b, **kw, transformers_version="4.44").breakdown.phases)["decode"]
    d41 = dict(estimate(llama7b, **kw, transformers_version="4.41").breakdown.phases)["decode"]
    # 4.41 keeps the prefill's fp32 logits (8 x 2,048 x 32,000 x 4 B) and the prefill's cache (2,048 tokens x 8)
    # through the step; 4.44 holds only one layer's old keys (1/64 of it) while torch.cat appends
    assert d41 - d44 == 8 * 2048 * 32_000 * 4 + 8 * 2048 * TOKEN * 63 // 64 == 10_552_868_864


def test_notes_state_the_version():
    plain = estimate("gpt2", mode="inference", seq=128, new_tokens=16).breakdown.notes
    default = ("transformers >= 4.42 DynamicCache assumed (give --transformers-version for older: before 4.42 every "
               "decode step held the previous cache beside the new one)")
    assert default in plain
    assert default in estimate("gpt2", mode="inference", seq=128, new_tokens=16, kv_dtype="fp8").breakdown.notes
    assert default not in estimate("gpt2", mode="inference", seq=128, new_tokens=16, kv_block=16).breakdown.notes
    old = estimate("gpt2", mode="inference", seq=128, new_tokens=16, transformers_version="4.35").breakdown.notes
    assert any(n.startswith("transformers 4.35: generate() keeps the previous step's KV cache") for n in old)
    new = estimate("gpt2", mode="inference", seq=128, new_tokens=16, transformers_version="4.46").breakdown.notes
    assert "transformers 4.46: one dynamic cache from the prefill to the last token (4.42 and later)" in new


@pytest.mark.parametrize(("kw", "message"), [
    (dict(transformers_version="abc"), "transformers_version='abc' must be a version such as 4.35 or 5.2"),
    (dict(transformers_version="4"), "transformers_version='4' must be a version such as 4.35 or 5.2"),
    (dict(transformers_version="4.35.0.dev0"),
     "transformers_version='4.35.0.dev0' must be a version such as 4.35 or 5.2"),
    (dict(transformers_version="4.35", cache="static"),
     "cache=static with transformers_version=4.35 is not modelled: before 4.42 vramlens models generate()'s default "
     "tuple cache only; drop --cache or give --transformers-version 4.42 or later"),
    (dict(transformers_version="4.35", kv_block=16),
     "kv_block=16 is a serving engine's paged cache, transformers_version=4.35 transformers' generate(): drop "
     "--kv-block or --transformers-version"),
])
def test_bad_versions(kw, message):
    with pytest.raises(ConfigError) as err:
        make_workload(mode="inference", new_tokens=8, **kw)
    assert str(err.value) == message


def test_version_read_without_decode_steps():
    # no decode steps and training: the version still sets the model's own older buffers and attention, so it is
    # not reported as ignored
    w = make_workload(mode="inference", transformers_version="4.35")
    assert w.ignored() == []
    assert not w.prefill_all_logits  # (legacy_cache is set, and reads only decode steps: there are none)
    t = make_workload(mode="train", transformers_version="4.35")
    assert t.ignored() == []
    assert make_workload(mode="inference", transformers_version="").transformers_version is None  # the web form


# OPT-350m, the SDPA benchmark loop of opt.md: 24 blocks, 16 heads, fp16, one 2,048-token sequence
OPT_EAGER = dict(mode="train", dtype="fp16", optimizer="none", loss="logits-sum", batch=1, seq=2048, attention="eager")


def test_opt_eager_score_clamp_before_4_49():
    from vramlens.models import load_model

    opt = load_model("opt-350m")
    today = estimate(opt, **OPT_EAGER).breakdown
    old = estimate(opt, **OPT_EAGER, transformers_version="4.45").breakdown
    # transformers <= 4.48: torch.max(scores + mask, finfo.min) keeps its fp16 input, one (b, a, s, s) tensor
    # per block, and its 0-dim floor (one 512 B block): 24 x (2 B x 1 x 16 x 2,048 x 2,048 + 512) = 3,221,237,760 B
    # more activations (and peak)
    assert old["activations"] - today["activations"] == 24 * (2 * 16 * 2048 * 2048 + 512) == 3_221_237_760
    # the forward's peak also holds the previous step's (key, value) tuples (test_logits_sum_holds_older_presents),
    # 24 x 2 x 2 B x 1,024 x 2,048 = 201,326,592 B, as today's holds its DynamicCache's copies of them
    # (tests/estimator/test_holds_outputs.py): the same bytes
    assert dict(old.phases)["forward"] - dict(today.phases)["forward"] == 3_221_237_760
    # 4.49 dropped the clamp; SDPA never had it; a model without the clamp (GPT-2) is unchanged
    assert estimate(opt, **OPT_EAGER, transformers_version="4.49").breakdown.as_dict() == today.as_dict()
    sdpa = {**OPT_EAGER, "attention": "sdpa"}
    # (4.45's SDPA differs by the kernel output's copy: q, k and v were contiguous head-major, ``_shape``; the trained
    # out_proj keeps the (b, s, h) copy, 24 x 2 B x 1,024 x 2,048 = 100,663,296 B)
    assert (estimate(opt, **sdpa, transformers_version="4.45").breakdown["activations"]
            - estimate(opt, **sdpa).breakdown["activations"] == 24 * 2 * 1024 * 2048 == 100_663_296)
    gpt2 = {**OPT_EAGER, "seq": 1024, "loss": "cross-entropy"}  # (logits-sum would hold 4.45's (key, value) tuples)
    assert (estimate("gpt2", **gpt2, transformers_version="4.45").breakdown["activations"]
            == estimate("gpt2", **gpt2).breakdown["activations"])


def test_score_clamp_reads_eager_training_only():
    assert make_workload(mode="train", attention="eager", transformers_version="4.45").legacy_score_clamp
    assert not make_workload(mode="train", attention="sdpa", transformers_version="4.45").legacy_score_clamp
    assert not make_workload(mode="train", attention="eager", transformers_version="4.49").legacy_score_clamp
    assert not make_workload(mode="inference", attention="eager", transformers_version="4.45").legacy_score_clamp


def test_older_gpt2_and_gpt_neox_hold_per_block_mask_buffers():
    sdpa = dict(mode="train", dtype="fp16", optimizer="none", loss="logits-sum", batch=1, seq=128)
    for name, version, block in (
        # GPT2Attention through 4.57: bias (1, 1, 1,024, 1,024) bool + masked_bias (one 512 B block); 36 blocks
        ("gpt2-large", "4.57", 1_048_576 + 512),
        # GPTNeoXAttention before 4.49: bias (1, 1, 2,048, 2,048) bool + masked_bias, and its own rotary: inv_freq
        # (8 fp32, one block) and fp32 cos/sin caches of (2,048, 16 = 64 x rotary_pct 0.25): 2 x 131,072 B (4.48:
        # after 4.45, whose forward stopped returning the (key, value) tuples test_logits_sum_holds_older_presents
        # counts)
        ("pythia-410m", "4.48", 4_194_304 + 512 + 512 + 2 * 131_072),
    ):
        today = estimate(name, **sdpa).breakdown
        old = estimate(name, **sdpa, transformers_version=version).breakdown
        layers = 36 if name == "gpt2-large" else 24
        assert old["weights"] - today["weights"] == layers * block
        assert old.peak_allocated - today.peak_allocated == layers * block
    # the releases that dropped them, and a model that never had them per block (OPT)
    assert (estimate("gpt2-large", **sdpa, transformers_version="5.0").breakdown["weights"]
            == estimate("gpt2-large", **sdpa).breakdown["weights"])
    assert (estimate("pythia-410m", **sdpa, transformers_version="4.49").breakdown["weights"]
            == estimate("pythia-410m", **sdpa).breakdown["weights"])
    assert (estimate("opt-350m", **sdpa, transformers_version="4.42").breakdown["weights"]
            == estimate("opt-350m", **sdpa).breakdown["weights"])
    # 36 x 1,049,088 = 37,767,168 B and 24 x 4,457,472 = 106,979,328 B
    assert 36 * (1_048_576 + 512) == 37_767_168 and 24 * (4_194_304 + 1024 + 262_144) == 106_979_328


def test_older_llama_holds_per_block_rotary_caches():
    inf = dict(mode="inference", dtype="fp16", batch=1, seq=512)
    today = estimate("llama-2-13b", **inf).breakdown
    old = estimate("llama-2-13b", **inf, transformers_version="4.32").breakdown
    # LlamaAttention before 4.41: its own inv_freq (64 fp32, one 512 B block) and cos/sin caches of (4,096, 128) in
    # the load dtype (fp16: 2 x 1,048,576 B); 40 blocks x 2,097,664 B = 83,906,560 B
    assert old["weights"] - today["weights"] == 40 * (512 + 2 * 4096 * 128 * 2) == 83_906_560
    # 4.40 against 4.41: the caches alone (both upcast the logits and hold the tuple cache)
    assert (estimate("llama-2-13b", **inf, transformers_version="4.40").breakdown.peak_allocated
            - estimate("llama-2-13b", **inf, transformers_version="4.41").breakdown.peak_allocated) == 83_906_560
    # fp32 weights (the default dtype fp32): the caches in fp32, 40 x (512 + 2 x 2,097,152) = 167,792,640 B
    fp32 = {**inf, "dtype": "fp32"}
    assert (estimate("llama-2-13b", **fp32, transformers_version="4.40").breakdown["weights"]
            - estimate("llama-2-13b", **fp32).breakdown["weights"]) == 167_792_640
    # 4.41 keeps only inv_freq (not counted, as today's single rotary embedding); Mistral's copies are not read
    assert (estimate("llama-2-13b", **inf, transformers_version="4.41").breakdown["weights"] == today["weights"])
    assert (estimate("mistral-7b-v0.1", **inf, transformers_version="4.40").breakdown["weights"]
            == estimate("mistral-7b-v0.1", **inf).breakdown["weights"])


def test_plain_forward_upcasts_all_logits_before_4_45():
    fwd = dict(mode="inference", dtype="fp16", batch=1, seq=256, attention="sdpa")
    old = estimate("llama-3-8b", **fwd, transformers_version="4.44").breakdown
    new = estimate("llama-3-8b", **fwd, transformers_version="4.45").breakdown
    # LlamaForCausalLM before 4.45: logits.float() beside the fp16 logits at the head (the peak: 128,256 logits
    # per token outweigh a block's working set), 4 B x 128,256 x 256
    assert old.peak_allocated - new.peak_allocated == 4 * 128_256 * 256 == 131_334_144
    assert make_workload(mode="inference", transformers_version="4.44").legacy_logits_upcast
    assert not make_workload(mode="inference", new_tokens=8, transformers_version="4.44").legacy_logits_upcast
    assert not make_workload(mode="train", transformers_version="4.44").legacy_logits_upcast
    # GPT-2 never upcast its logits
    gpt2 = {**fwd, "seq": 128}
    assert (estimate("gpt2", **gpt2, transformers_version="4.44").breakdown.peak_allocated
            == estimate("gpt2", **gpt2, transformers_version="4.45").breakdown.peak_allocated)
