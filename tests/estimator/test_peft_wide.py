"""peft's LoRA-FA (--lora-fa), VeRA, AdaLoRA and prefix tuning. The arithmetic on Llama-3.2-3B (PEFT's MetaMathQA
model; the trainable counts are the ones its result files print); the tracer runs real peft on shrunk models
(tests/trace/test_peft_wide.py, PEFT_WIDE_ROWS)."""

from __future__ import annotations

import pytest

from vramlens.errors import ConfigError
from vramlens.estimator import activations as A
from vramlens.estimator import estimate
from vramlens.estimator.optimizer import lorafa_step_temporary
from vramlens.models import load_model
from vramlens.workload import Workload

# Llama-3.2-3B: 28 layers, hidden 3,072, 8 kv heads of 128 (k_proj and v_proj: 1,024 outputs)
L, H, KV = 28, 3_072, 1_024
RUN = dict(mode="train", dtype="bf16", batch=4, seq=768, attention="sdpa")
T = 4 * 768  # tokens
QV = dict(method="lora", lora_rank=32, lora_targets=("q_proj", "v_proj"))


def test_lora_fa_trains_b_alone_and_a_keeps_no_input():
    lora = estimate("llama-3.2-3b", **RUN, **QV)
    fa = estimate("llama-3.2-3b", **RUN, **QV, lora_fa=True)
    # B (n, 32) on q_proj (3,072) and v_proj (1,024): PEFT MetaMathQA's lorafa row prints 3,670,016 trainable
    assert fa.trainable_params == 3_670_016 == L * 32 * (H + KV)
    assert lora.trainable_params == L * 32 * (2 * H + H + KV)
    # fp32 B: its gradient and LoraFAOptimizer's exp_avg_B and exp_avg_sq_B
    assert fa.breakdown["gradients"] == 3_670_016 * 4
    assert fa.breakdown["optimizer_states"] == 2 * 3_670_016 * 4
    # A stays in the weights, frozen
    assert fa.breakdown["weights"] == lora.breakdown["weights"]
    # q_proj's and v_proj's lora_A keep no fp32 copy of their (T, 3,072) input: 56 of them
    assert lora.breakdown["activations"] - fa.breakdown["activations"] == 2 * L * T * H * 4 == 2_113_929_216


def test_lora_fa_step_temporary():
    spec = load_model("llama-3.2-3b")
    w = Workload(**RUN, **QV, lora_fa=True)
    tmp, formula = lorafa_step_temporary(spec, w)
    # the widest B is q_proj's (3,072, 32) fp32, 393,216 B; with AA_T and AA_T_inv (32 x 32 fp32, 4,096 B each):
    # at its denom_B its grad_B, its denom_B and the previous pair's denom_B, 1,187,840 B; at the projection
    # B.grad's bf16 cast and the product (196,608 B each), AA_T_inv's bf16 cast (2,048 B) and the previous pair's
    # grad_B and denom_B, 1,189,888 B
    assert tmp == max(3 * 393_216, 2 * 196_608 + 2_048 + 2 * 393_216) + 2 * 4_096 == 1_189_888
    assert "LoraFAOptimizer" in formula


@pytest.mark.parametrize("settings, message", [
    ({"method": "ia3", "lora_fa": True},
     "lora_fa is peft's LoRA-FA optimizer over LoRA adapters; method=ia3 has none: use --method lora or qlora"),
    ({"method": "lora", "lora_fa": True, "optimizer": "sgd"},
     "lora_fa steps with peft's LoraFAOptimizer (an AdamW of its own); optimizer=sgd contradicts it: drop --optimizer"),
    ({"method": "lora", "lora_fa": True, "dora": True, "zero": 2, "gpus": 2},
     "lora_fa is modelled for peft's LoRA on one GPU or under data parallelism without dora, zero=2: drop them"),
    ({"method": "lora", "lora_fa": True, "dtype": "fp32", "amp": "bf16"},
     "lora_fa is modelled for peft's LoRA on one GPU or under data parallelism without amp=bf16: drop it"),
    ({"method": "lora", "lora_fa": "yes"}, "lora_fa='yes' must be true or false"),
])
def test_lora_fa_settings(settings, message):
    with pytest.raises(ConfigError) as e:
        Workload(**{"mode": "train", **settings}).validated()
    assert message in str(e.value)


def test_lora_fa_notes_the_optimizer_impl_it_ignores():
    assert Workload(mode="train", method="lora", lora_fa=True, optimizer_impl="fused").ignored() == [
        "ignored: optimizer_impl='fused' (peft's LoraFAOptimizer steps one parameter at a time in a Python loop)"]


def test_vera_trains_two_vectors_per_linear_beside_shared_fp32_projections():
    from vramlens.estimator import weights as Wt
    from vramlens.models import load_model

    vera = estimate("llama-3.2-3b", **RUN, method="vera")
    # lambda_b (out,) and lambda_d (256,) on q_proj (3,072) and v_proj (1,024): PEFT MetaMathQA's 129,024
    assert vera.trainable_params == 129_024 == L * (H + 256 + KV + 256)
    vectors = L * (12_288 + 1_024 + 4_096 + 1_024)  # each fp32 vector in its own 512-byte blocks
    assert vera.breakdown["gradients"] == vectors == 516_096
    assert vera.breakdown["optimizer_states"] == 2 * vectors
    # beside the base: the vectors, one vera_A (256, 3,072) and one vera_B (3,072, 256) in fp32: the 6,807,552 B
    # that PEFT MetaMathQA's VeRA adapter file holds (file_size 6,821,968 B with the safetensors header)
    adapters = Wt.adapter_bytes(load_model("llama-3.2-3b"), Workload(**RUN, method="vera"))
    assert adapters == vectors + 2 * 256 * H * 4 == 6_807_552


def test_vera_keeps_both_projections_outputs_and_no_input():
    from vramlens.estimator import activations as A
    from vramlens.models import load_model

    spec = load_model("llama-3.2-3b")
    w = Workload(**RUN, method="vera")
    # per block: A's (t, 256) fp32 output on q and v, B's (t, 3,072) and (t, 1,024) fp32 outputs; the fp32 copy of
    # the input is freed in forward (the projections are buffers)
    assert A.vera_saved(spec, w, T) == 2 * T * 256 * 4 + T * H * 4 + T * KV * 4 == 56_623_104
    assert A.vera_saved(spec, Workload(**RUN, method="vera", vera_rank=16), T) == 2 * T * 16 * 4 + T * (H + KV) * 4


@pytest.mark.parametrize("settings, message", [
    ({"method": "vera", "lora_dtype": "bf16"},
     "method=vera runs its input through the fp32 vera_A and vera_B buffers; lora_dtype=bf16 vectors are not "
     "modelled: drop --lora-dtype"),
    ({"method": "vera", "vera_rank": 0}, "vera_rank=0 must be a whole number >= 1"),
    ({"method": "vera", "quant": "int8"}, "method=vera over quant=int8 weights is not modelled: drop --quant"),
    ({"method": "vera", "quant": "nf4", "quant_targets": "adapted"}, "method=vera over quant=nf4 is modelled as "
     "transformers' BitsAndBytesConfig loads it (every block linear in bitsandbytes 4-bit); quant_targets='adapted' "
     "is another stack's: drop it"),
])
def test_vera_settings(settings, message):
    with pytest.raises(ConfigError) as e:
        Workload(**{"mode": "train", **settings}).validated()
    assert message in str(e.value)
    assert Workload(mode="train", method="lora", vera_rank=16).ignored() == [
        "ignored: vera_rank=16 applies to --method vera"]


def test_vera_refuses_model_types_outside_peft_mapping():
    from vramlens.errors import InputError

    with pytest.raises(InputError, match="method=vera takes peft's default targets for the model type"):
        estimate("gpt2", mode="train", method="vera")


ADA = dict(method="adalora", lora_rank=64, lora_targets=("q_proj", "v_proj"))


def test_adalora_trains_a_e_and_b_and_keeps_the_rank_allocators_three_copies():
    e = estimate("llama-3.2-3b", **RUN, **ADA)
    # A (64, 3,072), E (64, 1), B (out, 64) on q_proj and v_proj: PEFT MetaMathQA's 18,353,664
    assert e.trainable_params == 18_353_664 == L * (64 * H + 64 + H * 64 + 64 * H + 64 + KV * 64)
    tensors = L * (2 * 64 * H * 4 + H * 64 * 4 + KV * 64 * 4 + 2 * 512)  # fp32, E's 256 B in a 512-byte block
    assert e.breakdown["gradients"] == tensors
    # AdamW's two states and RankAllocator.update_ipt's ipt, exp_avg_ipt, exp_avg_unc (zeros_like each A, E, B)
    assert e.breakdown["optimizer_states"] == 2 * tensors + 3 * tensors
    # the weights hold the adapters and one frozen fp32 ranknum per adapted linear
    lora = estimate("llama-3.2-3b", **RUN, method="lora", lora_rank=64, lora_targets=("q_proj", "v_proj"))
    assert e.breakdown["weights"] - lora.breakdown["weights"] == 2 * L * (512 + 512)


def test_adalora_keeps_the_product_but_in_the_first_block():
    from vramlens.estimator import activations as A
    from vramlens.models import load_model

    spec = load_model("llama-3.2-3b")
    w = Workload(**RUN, **ADA)
    lora = Workload(**RUN, method="lora", lora_rank=64, lora_targets=("q_proj", "v_proj"))
    one = A.layer_activations(spec, w, 4, 768).saved - A.layer_activations(spec, lora, 4, 768).saved
    assert one == 2 * 64 * H * 4  # (lora_A * lora_E), (64, 3,072) fp32, on q_proj and v_proj
    first = A.untracked_before_first_adapter(spec, w, 4, 768)[0] - A.untracked_before_first_adapter(spec, lora, 4, 768)[0]
    assert first == one  # the first block's adapters read an input that needs no gradient


@pytest.mark.parametrize("settings, message", [
    ({"method": "adalora", "optimizer": "adamw-8bit"}, "method=adalora with optimizer=adamw-8bit is not modelled"),
    ({"method": "adalora", "lora_fa": True}, "lora_fa is peft's LoRA-FA optimizer over LoRA adapters; "
     "method=adalora has none"),
    ({"method": "adalora", "dora": True}, "method=adalora is modelled on one GPU or under data parallelism without "
     "dora: drop it"),
])
def test_adalora_settings(settings, message):
    with pytest.raises(ConfigError) as e:
        Workload(**{"mode": "train", **settings}).validated()
    assert message in str(e.value)


def test_prefix_tuning_trains_an_fp32_kv_prefix_and_attends_over_n_plus_s_keys():
    from vramlens.estimator import activations as A
    from vramlens.models import load_model

    e = estimate("llama-3.2-3b", **RUN, method="prefix-tuning", num_virtual_tokens=200)
    # PrefixEncoder's nn.Embedding(200, 28 x 2 x 1,024): PEFT MetaMathQA's 11,468,800 (and 2,867,200 at 50)
    assert e.trainable_params == 11_468_800 == 200 * L * 2 * KV
    assert estimate("llama-3.2-3b", **RUN, method="prefix-tuning", num_virtual_tokens=50).trainable_params == 2_867_200
    assert e.breakdown["gradients"] == 11_468_800 * 4
    assert e.workload.seq == 768  # the logits and the loss stay at s positions
    spec = load_model("llama-3.2-3b")
    w = Workload(**RUN, method="prefix-tuning", num_virtual_tokens=200)
    one = A.layer_activations(spec, w, 4, 768).saved - A.layer_activations(spec, Workload(**RUN, method="ln-tuning"),
                                                                           4, 768).saved
    # keys and values over 968 positions expanded to the 24 heads (the explicit mask makes SDPA repeat them) and
    # the kernel's additive (4, 1, 768, 968) mask, against an unmasked block's (4, 768) kv-head keys and values;
    # LN tuning's trained norms keep their normalized inputs (2 x 4 x 768 x 3,072 bf16)
    expanded = 2 * 4 * 24 * 968 * 128 * 2 + 4 * 768 * 968 * 2
    assert one == expanded - 2 * T * KV * 2 - 2 * T * H * 2


@pytest.mark.parametrize("settings, message", [
    ({"method": "prefix-tuning"}, "method=prefix-tuning needs --num-virtual-tokens N (PrefixTuningConfig has no "
     "default; PEFT's MetaMathQA runs 200)"),
    ({"method": "prefix-tuning", "num_virtual_tokens": 20, "checkpointing": "full"},
     "method=prefix-tuning does not run under gradient checkpointing (peft's PeftModel refuses it: the prefix is a "
     "cache, and transformers drops the cache of a checkpointed layer): drop --checkpointing"),
])
def test_prefix_tuning_settings(settings, message):
    with pytest.raises(ConfigError) as e:
        Workload(**{"mode": "train", **settings}).validated()
    assert message in str(e.value)


def test_vera_over_nf4_clones_the_base_output():
    """peft 0.21.2's Bnb4bitBackend.maybe_clone_base_result: the 4-bit base layer's output and its clone at once
    (Llama-3.2-3B, q_proj's 3,072 outputs in bf16: 2 x t x 3,072 x 2 B), beside the dequantized weight transient of
    the largest 4-bit matmul (gate_proj's 8,192 x 3,072 bf16 and its t x 8,192 output), which stays the larger at any
    t: an MLP wider than twice the adapted outputs hides the clone."""
    spec = load_model("llama-3.2-3b")
    w = Workload(mode="train", method="vera", dtype="bf16", quant="nf4-dq", batch=4, seq=768)
    for t in (T, 16_384):
        fwd, _ = A.dequant_transients(spec, w, t)
        assert fwd == 8_192 * 3_072 * 2 + t * 8_192 * 2 > 2 * t * 3_072 * 2
    assert A.dequant_transients(spec, w, T)[0] == 100_663_296
