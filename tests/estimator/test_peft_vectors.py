"""--method ia3 and ln-tuning: peft's IA3 and LN tuning with the model type's default targets. The arithmetic on
Llama-3.2-3B (PEFT's MetaMathQA model; the trainable counts are the ones its result files print); the tracer runs
real peft on shrunk models (tests/trace/test_techniques.py, PEFT_VECTOR_ROWS)."""

from __future__ import annotations

import pytest

from vramlens.errors import ConfigError
from vramlens.estimator import activations as A
from vramlens.estimator import estimate
from vramlens.models import load_model, peft_vector_numels
from vramlens.workload import Workload

# Llama-3.2-3B: 28 layers, hidden 3,072, 8 kv heads of 128 (k_proj and v_proj: 1,024 outputs), FFN 8,192
L, H, KV, F = 28, 3_072, 1_024, 8_192
RUN = dict(mode="train", dtype="bf16", batch=4, seq=768, attention="sdpa")
T = 4 * 768  # tokens


def test_trainable_counts_are_peft_metamathqa_ones():
    spec = load_model("llama-3.2-3b")
    # ia3_l of k_proj (1,024), v_proj (1,024) and down_proj's input (8,192) per layer: 28 x 10,240
    assert sum(peft_vector_numels(spec, "ia3")) == 286_720 == L * (2 * KV + F)
    # copies of input_layernorm and post_attention_layernorm per layer, and of the final norm: 57 x 3,072
    assert sum(peft_vector_numels(spec, "ln-tuning")) == 175_104 == (2 * L + 1) * H
    assert peft_vector_numels(spec, "lora") == ()


def test_ia3_state_in_fp32_ln_tuning_state_in_the_models_dtype():
    ia3 = estimate("llama-3.2-3b", method="ia3", **RUN).breakdown
    # each vector its own fp32 tensor: k and v 4,096 B, down 32,768 B (multiples of 512)
    assert ia3["gradients"] == L * (2 * 4_096 + 32_768) == 1_146_880
    assert ia3["optimizer_states"] == 2 * 1_146_880  # AdamW's exp_avg and exp_avg_sq
    ln = estimate("llama-3.2-3b", method="ln-tuning", **RUN).breakdown
    assert ln["gradients"] == 57 * 6_144 == 350_208  # bf16 (3,072 x 2 B) per norm copy
    assert ln["optimizer_states"] == 2 * 350_208
    # the copies sit beside the frozen norms: the weights grow by one more of each
    frozen = estimate("llama-3.2-3b", method="lora", **RUN).breakdown["weights"]
    lora = L * (4 * 8 * (H + H) + 4 * 8 * (H + KV))  # lora r=8 on q_proj (3,072 -> 3,072) and v_proj (-> 1,024)
    assert ln["weights"] == frozen - lora + 350_208
    assert ia3["weights"] == frozen - lora + 1_146_880


def test_ia3_saved_per_block():
    spec = load_model("llama-3.2-3b")
    w = Workload(method="ia3", **RUN)
    # k and v: the bf16 linear output (3,072 x 1,024 x 2 B) and the fp32 (1,024,) scaling each;
    # down_proj: the fp32 copy of its input (3,072 x 8,192 x 4 B) and the fp32 (8,192,) scaling
    assert A.ia3_saved(spec, w, T) == 2 * (6_291_456 + 4_096) + 100_663_296 + 32_768
    assert A.ia3_saved(spec, Workload(method="lora", **RUN), T) == 0
    # its multiplication's backward: the fp32 gradient and both full-size input gradients, above the MLP's own
    # two bf16 (t, f) gradients; with the gradient entering the block (t x h x 2 B)
    assert A.mlp_backward_bytes(spec, w, 4, 768) == T * H * 2 + 3 * 100_663_296


def test_ln_tuning_norms_keep_their_normalized_input():
    # a trained RMSNorm keeps its bf16 normalized tensor (weight * x.to(bf16)): 2 per block and the final norm,
    # t x h x 2 B each; the first block's input norm reads the frozen embedding's output and keeps no fp32 copy
    # of it (4 B), as IA3's does not
    ln = estimate("llama-3.2-3b", method="ln-tuning", **RUN).breakdown["activations"]
    ia3 = estimate("llama-3.2-3b", method="ia3", **RUN).breakdown["activations"]
    per_block_ia3 = 2 * (6_291_456 + 4_096) + 100_663_296 + 32_768
    assert ln - ia3 == (2 * L + 1) * T * H * 2 - L * per_block_ia3


@pytest.mark.parametrize("settings, message", [
    ({"method": "ia3", "amp": "bf16", "dtype": "fp32", "checkpointing": "full"},
     "method=ia3 under autocast is modelled without checkpointing: drop --checkpointing or --amp"),
    ({"method": "ln-tuning", "mode": "inference"},
     "method=ln-tuning is modelled for training: estimate inference with --method full (the vectors are merged "
     "or a few KiB)"),
    ({"method": "ia3", "quant": "nf4"}, "method=ia3 over quant=nf4 weights (peft's ia3/bnb.py layers: an fp32 copy of "
     "each adapted linear's input) is not modelled: drop --quant"),
    ({"method": "ia3", "fsdp": True, "gpus": 2}, "method=ia3 is modelled on one GPU or under data parallelism "
     "without fsdp: drop it"),
])
def test_unmodelled_settings_are_refused(settings, message):
    with pytest.raises(ConfigError) as e:
        Workload(**{"mode": "train", **settings}).validated()
    assert message in str(e.value)


def test_model_types_without_peft_defaults_are_refused():
    with pytest.raises(ConfigError) as e:
        estimate("gpt2", method="ln-tuning", mode="train")
    assert ("method=ln-tuning takes peft's default targets for the model type, modelled for llama, mistral; "
            "openai-community/gpt2 is 'gpt2': use --method lora") in str(e.value)


def test_lora_settings_are_ignored_with_a_note():
    w = Workload(mode="train", method="ln-tuning", lora_rank=16, lora_dtype="bf16")
    assert w.ignored() == ["ignored with method='ln-tuning' (they apply to LoRA and QLoRA): lora_rank=16, "
                           "lora_dtype='bf16'"]
    # IA3's vectors take lora_dtype (peft's autocast_adapter_dtype=False keeps them in the model's dtype)
    assert Workload(mode="train", method="ia3", lora_dtype="bf16").ignored() == []


def test_prompt_tuning_trains_an_fp32_embedding_and_runs_s_plus_n_positions():
    e = estimate("llama-3.2-3b", method="prompt-tuning", num_virtual_tokens=200, **RUN)
    # PromptEmbedding: nn.Embedding(200, 3,072) in fp32, PEFT MetaMathQA's 614,400 trainable parameters
    assert e.trainable_params == 614_400 == 200 * H
    assert e.breakdown["gradients"] == 614_400 * 4 == 2_457_600
    assert e.breakdown["optimizer_states"] == 2 * 2_457_600
    assert e.workload.seq == 768  # reported as given
    # the model runs 768 + 200 positions: the same activations and transients as 868 + 100
    other = estimate("llama-3.2-3b", method="prompt-tuning", num_virtual_tokens=100, **{**RUN, "seq": 868})
    for c in ("activations", "temporaries"):
        assert other.breakdown[c] == e.breakdown[c], c


@pytest.mark.parametrize("settings, message", [
    ({"method": "prompt-tuning"}, "method=prompt-tuning needs --num-virtual-tokens N (PromptTuningConfig has no "
     "default; PEFT's MetaMathQA runs 200)"),
    ({"method": "prompt-tuning", "num_virtual_tokens": 20, "loss_chunks": 8},
     "method=prompt-tuning runs through PeftModelForCausalLM's forward and transformers' own loss, which puts the "
     "prompts before the sequence; drop --loss-chunks and --loss"),
    ({"method": "prompt-tuning", "num_virtual_tokens": -1}, "num_virtual_tokens=-1 must be a whole number >= 0"),
])
def test_prompt_tuning_settings(settings, message):
    with pytest.raises(ConfigError) as e:
        Workload(**{"mode": "train", **settings}).validated()
    assert message in str(e.value)
    assert Workload(mode="train", num_virtual_tokens=20).ignored() == [
        "ignored: num_virtual_tokens=20 applies to --method prompt-tuning or prefix-tuning"]


@pytest.mark.parametrize("settings, message", [
    ({"method": "ia3", "dtype": "fp32", "lora_dtype": "bf16"}, "method=ia3 with lora_dtype=bf16 is not modelled: peft "
     "makes the vectors fp32 (autocast_adapter_dtype=True) or the weights' dtype (False): use --lora-dtype fp32 or fp32"),
    ({"method": "ia3", "dtype": "bf16", "amp": "bf16"}, "method=ia3 under autocast (amp=bf16) is not modelled over "
     "dtype=bf16 weights: use --dtype fp32 (autocast's master weights) or drop --amp"),
    ({"method": "ln-tuning", "dtype": "fp32", "amp": "bf16", "checkpointing": "full"}, "method=ln-tuning under "
     "autocast is modelled without checkpointing: drop --checkpointing or --amp"),
    ({"method": "vera", "dtype": "fp32", "amp": "bf16"}, "method=vera under autocast (amp=bf16) is not modelled: drop "
     "--amp"),
])
def test_autocast_limits(settings, message):
    with pytest.raises(ConfigError) as e:
        Workload(mode="train", **settings).validated()
    assert message in str(e.value)


def test_ia3_under_autocast_keeps_the_first_blocks_qkv_casts_out():
    """--dtype fp32 --amp bf16: IA3 scales k_proj's and v_proj's outputs after their base layers, which in the first
    block read the embedding's (normed) output, which needs no gradient: F.linear keeps none of the three attention
    input projections' bf16 weight casts there, and every other frozen linear's (Llama-3.2-3B: 28 blocks)."""
    from vramlens.estimator.state import autocast_copies

    spec = load_model("llama-3.2-3b")
    w = Workload(mode="train", method="ia3", dtype="fp32", amp="bf16", batch=1, seq=16)
    trainable, frozen = autocast_copies(spec, w)
    # the first block's q_proj (3,072 x 3,072), k_proj and v_proj (1,024 x 3,072 each) in bf16
    first_qkv = (3_072 * 3_072 + 2 * 1_024 * 3_072) * 2
    full = autocast_copies(spec, Workload(mode="train", method="full", dtype="fp32", amp="bf16", batch=1, seq=16))[0]
    assert trainable == 0  # IA3's vectors multiply, they are not cast for a matmul
    assert frozen == full - first_qkv
