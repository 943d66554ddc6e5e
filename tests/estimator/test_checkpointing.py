"""Activation checkpointing as torchtitan configures it (selective-op, every:N), Megatron's selective
over SDPA, and FSDP2's mixed-precision policy: the estimator's arithmetic (the tracer runs the same
policies on the real modules: tests/trace/test_checkpointing.py and the cross-check rows)."""

import pytest
from _specs import llama_config

from vramlens.errors import ConfigError
from vramlens.estimator import activations as A
from vramlens.estimator import checkpointing as C
from vramlens.estimator import estimate_spec
from vramlens.estimator.core import activation_totals, recompute_mlp_gradients
from vramlens.estimator.parallel import fsdp_buffers
from vramlens.estimator.state import train_state
from vramlens.models import load_model
from vramlens.workload import make_workload

# h = 256, 4 heads of 64 (MHA), f = 688, 4 blocks, bf16: sizes far above the 512-byte rounding
TINY = load_model(llama_config(hidden_size=256, intermediate_size=688, num_hidden_layers=4,
                               num_attention_heads=4, num_key_value_heads=4, vocab_size=1000))
TRAIN = dict(mode="train", dtype="bf16", batch=2, seq=128)  # t = 256 tokens


def _totals(**kw):
    w = make_workload(**{**TRAIN, **kw})
    return activation_totals(TINY, w, train_state(TINY, w, None).sp)


# ---- the workload ----------------------------------------------------------------------------
@pytest.mark.parametrize("value, message", [
    ("every:1", "checkpointing='every:1' checkpoints every block: use --checkpointing full"),
    ("every:x", "checkpointing='every:x' is not one of: none, full, selective, selective-op, every:N "
                "(N a whole number >= 2)"),
    ("every:5000", "checkpointing='every:5000': N is over the limit of 4,096 blocks"),
    ("sac", "checkpointing='sac' is not one of: none, full, selective, selective-op, every:N "
            "(N a whole number >= 2)"),
])
def test_bad_checkpointing_is_named_with_the_fix(value, message):
    with pytest.raises(ConfigError) as e:
        make_workload(**TRAIN, checkpointing=value)
    assert str(e.value) == message


def test_every_n_parses():
    assert make_workload(**TRAIN, checkpointing="every:2").checkpoint_every == 2
    assert make_workload(**TRAIN, checkpointing="selective-op").checkpoint_every is None


def test_selective_over_sdpa_says_what_it_does():
    note = make_workload(**TRAIN, checkpointing="selective").ignored()
    assert note == ["checkpointing='selective' recomputes the attention core (scores, softmax, dropout); "
                    "attention='sdpa' keeps no scores, so it drops only the kernel's fp32 log-sum-exp (b x heads x "
                    "s per block): use selective-op, every:N or full to save memory"]
    assert make_workload(**TRAIN, checkpointing="selective", attention="eager").ignored() == []


def test_selective_op_with_activation_offload_is_refused():
    with pytest.raises(ConfigError) as e:
        make_workload(**TRAIN, checkpointing="selective-op", activation_offload=True)
    assert "the per-op policy's saved outputs stay on the GPU" in str(e.value)


# ---- which blocks, which matmuls -------------------------------------------------------------
def test_every_n_counts_blocks_as_torchtitan():
    # torchtitan _apply_layer_sac: block i (1-based) checkpointed when i % N == 0
    assert C.checkpointed(TINY, make_workload(**TRAIN, checkpointing="every:2")) == (2,)
    assert C.checkpointed(TINY, make_workload(**TRAIN, checkpointing="every:3")) == (1,)
    assert C.trailing_uncheckpointed(TINY, make_workload(**TRAIN, checkpointing="every:3")) == (1,)
    assert C.checkpointed(TINY, make_workload(**TRAIN, checkpointing="every:5")) == (0,)
    # one counter over both stacks of t5-small (6 + 6 blocks): encoder block 4; decoder blocks 8 and 12
    t5 = load_model("t5-small")
    assert C.checkpointed(t5, make_workload(**TRAIN, checkpointing="every:4")) == (1, 2)


def test_matmuls_are_mm_only_without_a_bias():
    w = make_workload(**TRAIN, checkpointing="selective-op")
    # Llama: q, k, v, o, gate, up, down are all aten.mm
    assert [m.out_features for m in C.block_mms(TINY, w, None)] == [256, 256, 256, 256, 688, 688, 256]
    # Qwen2's biased q/k/v run addmm; GPT-2's Conv1D always does
    assert len(C.block_mms(load_model("qwen2.5-0.5b"), w, None)) == 4
    assert C.block_mms(load_model("gpt2"), w, None) == ()
    # LoRA on q_proj: base, lora_A (rank 8), lora_B
    lora = make_workload(**TRAIN, checkpointing="selective-op", method="lora", lora_targets="q_proj", lora_rank=8)
    assert [m.out_features for m in C.block_mms(TINY, lora, None)][:3] == [256, 8, 256]


def test_selective_op_keeps_input_and_every_other_mm():
    sac, shared = C.sac_saved(TINY, make_workload(**TRAIN, checkpointing="selective-op"), 2, 128)
    q = v = down = 2 * 256 * 256   # the 1st, 3rd and 7th mm: (t, 256) bf16
    gate = 2 * 688 * 256           # the 5th: (t, 688) bf16
    kernel = 2 * 256 * 256 + 4 * 2 * 4 * 128  # SDPA output (b, a, s, d) and fp32 log-sum-exp (b, a, s)
    assert sac == q + v + gate + down + kernel == 1_011_712 - 131_072
    # v, gate and the kernel's outputs are saved by attention, the product and o_proj anyway;
    # the rotated q replaces q's output and down's is added to the residual
    assert shared == v + gate + kernel
    sel, full = _totals(checkpointing="selective-op"), _totals(checkpointing="full")
    assert sel.saved - full.saved == 4 * sac  # both keep each block's input (b*s*h bf16)


def test_every_n_keeps_the_others_whole():
    la = A.layer_activations(TINY, make_workload(**TRAIN), 2, 128)
    e2, full = _totals(checkpointing="every:2"), _totals(checkpointing="full")
    assert e2.saved - full.saved == 2 * (la.saved - la.checkpoint_input)
    assert e2.uncheckpointed == (2, 4) and e2.recompute == full.recompute
    # every:3 checkpoints block 3: block 4's activations and the final norm's are gone before its recomputation
    e3 = _totals(checkpointing="every:3")
    assert e3.recompute_after == la.saved + A.final_norm_saved(TINY, make_workload(**TRAIN), 2, 128)
    none = _totals(checkpointing="every:5")
    assert none.saved == _totals().saved and none.recompute == 0


def test_recomputed_block_holds_its_mlp_gradients():
    f = 2 * 688 * 256
    assert recompute_mlp_gradients(TINY, make_workload(**TRAIN)) == 2 * f  # gated, down_proj keeps its input
    # LoRA on q/v: down_proj keeps nothing, so the product's input gradients come on top of all it saved
    assert recompute_mlp_gradients(TINY, make_workload(**TRAIN, method="lora")) == 3 * f
    gpt2 = load_model("gpt2")
    assert recompute_mlp_gradients(gpt2, make_workload(**TRAIN)) == 2 * 3072 * 256  # plain MLP: one


def test_every_n_over_the_depth_is_noted():
    e = estimate_spec(TINY, make_workload(**TRAIN, checkpointing="every:8"))
    assert ("checkpointing='every:8' checkpoints no block: the model has 4 blocks (torchtitan checkpoints block i "
            "when i % 8 == 0): use a smaller N") in e.breakdown.notes


def test_torchtitan_modes_sit_between_none_and_full():
    peak = {m: estimate_spec(TINY, make_workload(**{**TRAIN, "batch": 8, "seq": 1024, "checkpointing": m})).peak_allocated
            for m in ("none", "every:2", "selective-op", "full")}
    assert peak["full"] < peak["selective-op"] < peak["none"]
    assert peak["full"] < peak["every:2"] < peak["none"]


# ---- FSDP2 mixed precision ---------------------------------------------------------------------
FSDP = dict(mode="train", batch=2, seq=128, gpus=4, fsdp=True)


def test_fsdp_mixed_precision_is_torchtitans_policy():
    mp = make_workload(**FSDP, dtype="fp32", amp="bf16")
    assert mp.fsdp_mixed_precision and not mp.autocast and mp.run_dtype == "bf16"
    assert not make_workload(mode="train", dtype="fp32", amp="bf16").fsdp_mixed_precision  # autocast without fsdp
    e = estimate_spec(TINY, mp).breakdown
    fp32 = estimate_spec(TINY, make_workload(**FSDP, dtype="fp32")).breakdown
    bf16 = estimate_spec(TINY, make_workload(**FSDP, dtype="bf16")).breakdown
    # fp32 shards, fp32 sharded gradients and states; no autocast copies, no separate master copy
    assert (e["weights"], e["gradients"], e["optimizer_states"]) == (
        fp32["weights"], fp32["gradients"], fp32["optimizer_states"])
    assert e["master_weights"] == 0
    # compute in bf16: the activations of a pure bf16 run
    assert e["activations"] == bf16["activations"]
    B, R, Br = fsdp_buffers(TINY, mp, 4)
    B16, R16, _ = fsdp_buffers(TINY, make_workload(**FSDP, dtype="bf16"), 2)
    assert (B, R, Br) == (B16, R16, 2 * B16)  # bf16 all-gathers, an fp32 reduce-scatter input
    # ... and, beside the reduce-scatter input, the prefetch all-gather's bf16 copy of the shard (4 ranks)
    assert e["comm_buffers"] == max(2 * (B + R), 2 * B + Br + R + B // 4)
    assert any(n.startswith("FSDP2 MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)") for n in e.notes)
