"""--method loha: peft's LoHa (r = lora_rank on lora_targets, fp32 factors). The arithmetic on Llama-3.2-3B at
PEFT's MetaMathQA settings (r=32 on q_proj and v_proj; the trainable count is the one its result file prints); the
tracer runs real peft on shrunk models (tests/trace/test_peft_delta.py, PEFT_DELTA_ROWS)."""

from __future__ import annotations

import pytest

from vramlens.errors import ConfigError
from vramlens.estimator import activations as A
from vramlens.estimator import estimate
from vramlens.models import load_model, peft_delta_numels
from vramlens.workload import Workload

# Llama-3.2-3B: 28 layers, hidden 3,072, 8 kv heads of 128 (v_proj: 1,024 outputs)
L, H, KV = 28, 3_072, 1_024
RUN = dict(mode="train", dtype="bf16", batch=4, seq=768, attention="sdpa", method="loha", lora_rank=32)
T = 4 * 768  # tokens
W_Q, W_V = H * H * 4, KV * H * 4  # fp32 delta weights: 37,748,736 and 12,582,912 B


def test_trainable_count_is_peft_metamathqa_one():
    spec = load_model("llama-3.2-3b")
    # hada_w1_a, hada_w2_a (out, 32) and hada_w1_b, hada_w2_b (32, in) on q_proj (3,072 -> 3,072) and v_proj
    # (3,072 -> 1,024): 28 x (2 x 32 x 6,144 + 2 x 32 x 4,096) = 18,350,080, the result file's num_trainable_params
    numels = peft_delta_numels(spec, "loha", ("q_proj", "v_proj"), 32)
    assert sum(numels) == 18_350_080 == L * (2 * 32 * (H + H) + 2 * 32 * (KV + H))
    assert len(numels) == L * 2 * 4
    assert peft_delta_numels(spec, "lora", ("q_proj", "v_proj"), 32) == ()


def test_factors_gradients_and_adam_states_in_fp32():
    e = estimate("llama-3.2-3b", **RUN)
    assert e.trainable_params == 18_350_080
    # every factor a multiple of 512 B: 18,350,080 x 4 B
    assert e.breakdown["gradients"] == 73_400_320
    assert e.breakdown["optimizer_states"] == 2 * 73_400_320
    frozen = estimate("llama-3.2-3b", **{**RUN, "method": "lora"}).breakdown["weights"]
    lora = L * 4 * 32 * ((H + H) + (H + KV))  # LoRA r=32 A and B on the same two linears, fp32
    assert e.breakdown["weights"] == frozen - lora + 73_400_320


def test_delta_and_input_copy_kept_per_adapted_linear():
    spec = load_model("llama-3.2-3b")
    w = Workload(**RUN)
    # F.linear(x.to(fp32), delta): the fp32 input copy (3,072 tokens x 3,072 x 4 B) and the fp32 delta, q and v
    assert A.delta_saved(spec, w, T) == 2 * T * H * 4 + W_Q + W_V == 125_829_120
    # the first block's q_proj and v_proj read no gradient-needing input: their deltas are not kept there
    norm_own = T * H * 4  # the input norm's fp32 copy, also not kept there (as IA3)
    assert A.untracked_before_first_adapter(spec, w, 4, 768)[0] == norm_own + W_Q + W_V
    # already fp32 (dtype fp32): no copy, q_proj and v_proj keep the input they share once
    assert A.delta_saved(spec, Workload(**{**RUN, "dtype": "fp32"}), T) == T * H * 4 + W_Q + W_V


def test_delta_transients():
    spec = load_model("llama-3.2-3b")
    block = 100_000_000  # a block's saved bytes (any figure above its input norm's)
    d = A.delta_transients(spec, Workload(**RUN), 4, 768, block)
    # HadaWeight.backward on q_proj: the delta's gradient, grad_out * scale, two products, one rebuilt: 5 x n x k
    assert d.temporary == 5 * W_Q == 188_743_680
    # ... counted above every block's activations less the last block's, of which only its input norm's fp32
    # copy is left when q_proj's backward runs
    assert d.backward == 5 * W_Q - (block - T * H * 4)
    # forward: three n x k (both products and their Hadamard product), the block's later tensors not made yet
    assert d.forward == 3 * W_Q - (block - T * H * 4)
    assert A.delta_transients(spec, Workload(**RUN), 4, 768, 10**9) == A.DeltaTransients(0, 0, 5 * W_Q)


@pytest.mark.parametrize("settings, message", [
    ({"amp": "bf16"}, "method=loha under autocast is modelled over fp32 weights (autocast's master weights); "
     "dtype=bf16: use --dtype fp32 or drop --amp"),
    ({"amp": "bf16", "dtype": "fp32", "checkpointing": "full"}, "method=loha under autocast is modelled without "
     "checkpointing: drop --checkpointing or --amp"),
    ({"amp": "bf16", "dtype": "fp32", "method": "boft"}, "method=boft under autocast (amp=bf16) is not modelled: "
     "drop --amp"),
    ({"mode": "inference"}, "method=loha is modelled for training: estimate inference with --method full (peft "
     "merges the delta into the weight)"),
    ({"lora_dtype": "fp16"}, "method=loha with lora_dtype=fp16 is not modelled: peft makes the factors fp32 "
     "(autocast_adapter_dtype=True) or the weights' dtype (False): use --lora-dtype fp32 or bf16"),
    ({"checkpointing": "selective-op"}, "method=loha under checkpointing=selective-op is not modelled (its delta is "
     "built by mm, which the per-op policy saves every second of): use --checkpointing full or every:N"),
    ({"quant": "nf4"}, "method=loha over quant=nf4 weights is not modelled (peft 0.21's LyCORIS layers have no "
     "quantization support): drop --quant"),
    ({"optimizer": "adamw-8bit"}, "method=loha with optimizer=adamw-8bit is not modelled: use adamw, adam, sgd or "
     "sgd-momentum"),
])
def test_unmodelled_settings_are_refused(settings, message):
    with pytest.raises(ConfigError) as e:
        Workload(**{**RUN, **settings}).validated()
    assert message in str(e.value)


@pytest.mark.parametrize("settings, message", [
    ({"lora_targets": ("down_proj",)}, "method=loha is modelled with lora_targets that include an attention input "
     "projection (q_proj, k_proj, v_proj or all-linear); down_proj has none: add one"),
    ({"lora_targets": ("q_proj", "qproj")}, "lora_targets: qproj matches no nn.Linear of meta-llama/Llama-3.2-3B's "
     "blocks (method=loha): choose from down_proj, gate_proj, k_proj, o_proj, q_proj, up_proj, v_proj or all-linear"),
    ({"lora_rank": 2_000}, "lora_rank=2000 exceeds the smaller side (1024) of an adapted linear of "
     "meta-llama/Llama-3.2-3B: use --lora-rank 1024 or less"),
])
def test_targets_are_checked_against_the_model(settings, message):
    with pytest.raises(ConfigError) as e:
        estimate("llama-3.2-3b", **{**RUN, **settings})
    assert message in str(e.value)


def test_rank_and_targets_apply():
    assert Workload(**{**RUN, "lora_targets": ("q_proj", "k_proj", "v_proj")}).ignored() == []
    assert Workload(**{**RUN, "lora_dropout": 0.1}).ignored() == [
        "ignored with method='loha' (they apply to LoRA and QLoRA): lora_dropout=0.1"]


LOKR = {**RUN, "method": "lokr", "decompose_factor": 4}


def test_lokr_factorization_and_trainable_count_are_peft_metamathqa_ones():
    from vramlens.models import lokr_shapes
    from vramlens.models.peft_targets import lokr_factorization

    # peft's own docstring examples of factorization
    assert [lokr_factorization(256), lokr_factorization(128), lokr_factorization(127), lokr_factorization(128, 4)] == [
        (16, 16), (8, 16), (1, 127), (4, 32)]
    # q_proj 3,072 x 3,072 at factor 4: w1 (4, 4), w2 (768, 768) built from (768, 32) @ (32, 768) as 32 < 768 / 2
    assert lokr_shapes(H, H, 32, 4) == ((4, 4), (768, 768), True)
    assert lokr_shapes(KV, H, 32, 4) == ((4, 4), (256, 768), True)
    # ... and whole from r >= max(b, d) / 2; factor -1 splits near the square root (3,072 = 48 x 64)
    assert lokr_shapes(H, H, 400, 4)[2] is False and lokr_shapes(H, H, 8, -1)[:2] == ((48, 48), (64, 64))
    spec = load_model("llama-3.2-3b")
    # 28 x ((16 + 2 x 768 x 32) + (16 + 256 x 32 + 32 x 768)): the result file's num_trainable_params
    assert sum(peft_delta_numels(spec, "lokr", ("q_proj", "v_proj"), 32, 4)) == 2_294_656
    assert estimate("llama-3.2-3b", **LOKR).trainable_params == 2_294_656


def test_lokr_keeps_its_built_w2_and_the_kron_transients():
    spec = load_model("llama-3.2-3b")
    w = Workload(**LOKR)
    # the input copies and deltas as LoHa's, and the (768, 768) and (256, 768) fp32 w2 torch.kron's mul keeps
    assert A.delta_saved(spec, w, T) == 2 * T * H * 4 + W_Q + W_V + 768 * 768 * 4 + 256 * 768 * 4 == 128_974_848
    # the kron and its scaled copy in forward (one kept), three n x k in backward (the incoming gradient and
    # kron's two full-size input gradients before they are summed)
    block = 100_000_000
    d = A.delta_transients(spec, w, 4, 768, block)
    assert d == A.DeltaTransients(2 * W_Q - (block - T * H * 4), 3 * W_Q - (block - T * H * 4), 3 * W_Q)
    # gradients: each factor its own fp32 tensor, w1's 64 B in one 512-byte block
    e = estimate("llama-3.2-3b", **LOKR)
    assert e.breakdown["gradients"] == L * (512 + 2 * 98_304 + 512 + 32_768 + 98_304) == 9_203_712


def test_decompose_factor_applies_to_lokr():
    with pytest.raises(ConfigError) as e:
        Workload(**{**LOKR, "decompose_factor": 0}).validated()
    assert "decompose_factor=0 must be -1 (peft's default: near the square root) or a whole number >= 1" in str(e.value)
    assert Workload(**{**RUN, "decompose_factor": 4}).ignored() == [
        "ignored: decompose_factor=4 applies to --method lokr"]
    assert Workload(**LOKR).ignored() == []


OFT = {**RUN, "method": "oft", "oft_block_size": 96}  # PEFT's MetaMathQA OFTConfig(r=32): 3,072 / 32 = 96


def test_oft_trainable_count_index_buffers_and_block_adjustment():
    from vramlens.models import oft_block

    spec = load_model("llama-3.2-3b")
    # 32 blocks of 96 x 95 / 2 upper-triangle elements per linear: the result file's num_trainable_params
    assert sum(peft_delta_numels(spec, "oft", ("q_proj", "v_proj"), 8, oft_block_size=96)) == 8_171_520
    # adjust_oft_parameters: a size that does not divide in_features moves to the nearer divisor (the lower on a tie)
    assert (oft_block(3_072, 32), oft_block(100, 32), oft_block(100, 60), oft_block(256, 300)) == (32, 25, 50, 256)
    e = estimate("llama-3.2-3b", **OFT)
    assert e.trainable_params == 8_171_520
    assert e.breakdown["gradients"] == 8_171_520 * 4 == 32_686_080
    # rows and cols of triu_indices(96, 96, 1), int64, one allocation each per adapted linear: 2 x 36,864 B
    frozen = estimate("llama-3.2-3b", **{**RUN, "method": "lora", "lora_rank": 32}).breakdown["weights"]
    lora = L * 4 * 32 * ((H + H) + (H + KV))
    assert e.breakdown["weights"] == frozen - lora + 32_686_080 + L * 2 * 2 * 36_864


def test_oft_keeps_its_rotated_input_and_rotation_blocks():
    spec = load_model("llama-3.2-3b")
    w = Workload(**OFT)
    blocks = 32 * 96 * 96 * 4  # one (32, 96, 96) fp32 tensor: 1,179,648 B
    # the fp32 input copy the einsum keeps, and Q, Q^2, Q^3 and R per adapted linear
    assert A.delta_saved(spec, w, T) == 2 * (T * H * 4 + 4 * blocks) == 84_934_656
    # the first block: its input norm's fp32 copy, and R, which only the input's gradient needs
    assert A.untracked_before_first_adapter(spec, w, 4, 768)[0] == T * H * 4 + 2 * blocks
    # two fp32 t x k in the rotation's forward and backward (and R's gradient)
    assert A.delta_transients(spec, w, 4, 768, 10**9).temporary == 2 * T * H * 4 + blocks
    assert Workload(**{**OFT, "lora_rank": 16}).ignored() == [
        "ignored with method='oft' (they apply to LoRA and QLoRA): lora_rank=16"]
    assert Workload(**{**RUN, "oft_block_size": 16}).ignored() == ["ignored: oft_block_size=16 applies to --method oft"]


BOFT = {**RUN, "method": "boft"}  # PEFT's MetaMathQA BOFT: peft's defaults (block 4, q_proj and v_proj for Llama)


def test_boft_trainables_host_permutations_and_kept_rotations():
    spec = load_model("llama-3.2-3b")
    # boft_R (1, 768, 4, 4) and boft_s (out, 1) per linear: the result file's num_trainable_params
    assert sum(peft_delta_numels(spec, "boft", ("q_proj", "v_proj"), 8)) == 802_816 == L * (2 * 768 * 16 + H + KV)
    e = estimate("llama-3.2-3b", **BOFT)
    assert e.trainable_params == 802_816
    # boft_P (1, 3,072, 3,072) fp32 per adapted linear stays in host RAM
    assert e.breakdown.host_bytes == L * 2 * 4 * H * H == 2_113_929_216
    w = Workload(**BOFT)
    k2 = H * H * 2  # one (3,072, 3,072) bf16: 18,874,368 B
    cayley = 3 * 4 * H * 4 + 4 * H  # I + S, its LU factors and solution (768 blocks of 4 x 4, fp32), int32 pivots
    q = 3 * k2 + T * H * 2 + 4 * H + 2 * H + cayley  # P's GPU copy, eye, R; the frozen output; scale and ones
    v = 3 * k2 + T * KV * 2 + 4 * KV + 2 * KV + cayley
    # ... and the bf16 input q_proj and v_proj share, kept by x @ R
    assert A.delta_saved(spec, w, T) == T * H * 2 + q + v == 157_630_464
    # the first block keeps no R (its input needs no gradient)
    assert A.untracked_before_first_adapter(spec, w, 4, 768)[0] == T * H * 4 + 2 * k2
    # block_diag's fp32 (k, k) and its bf16 copy in forward; as much and the input's gradient in backward
    assert A.delta_transients(spec, w, 4, 768, 10**10).temporary == 3 * k2 + T * H * 2


def test_boft_block_size_must_divide_the_inputs():
    with pytest.raises(ConfigError) as e:
        estimate("llama-3.2-3b", **{**BOFT, "boft_block_size": 5})
    assert ("boft_block_size=5 does not divide in_features=3072 of an adapted linear of meta-llama/Llama-3.2-3B "
            "(peft raises): use a divisor of it") in str(e.value)
    with pytest.raises(ConfigError) as e:
        Workload(**{**BOFT, "dtype": "fp32"}).validated()
    assert "method=boft is modelled with half weights" in str(e.value)


def test_checkpointed_block_rebuilds_the_delta_in_its_backward():
    """transformers' gradient checkpointing (non-reentrant): each block keeps its input; the recomputed block builds
    LoHa's delta again, and HadaWeight's backward (5 x n x k fp32) runs once the block's tensors after q_proj and its
    MLP's gradients are freed."""
    from vramlens.estimator.core import activation_totals, recompute_mlp_gradients
    from vramlens.estimator.state import train_state

    spec = load_model("llama-3.2-3b")
    w = Workload(**RUN, checkpointing="full")
    at = activation_totals(spec, w, train_state(spec, w, None).sp)
    plain = Workload(**RUN)
    block = A.layer_activations(spec, plain, 4, 768).saved
    assert block == A.layer_activations(spec, w, 4, 768).saved
    # the recomputation's own figure: the block's saved tensors, its MLP's gradients and its output's gradient
    # (4 x 768 x 3,072 bf16); with the delta: what q_proj's backward sees, the input norm's fp32 copy (T x H x 4),
    # the output's gradient and the five n x k
    grads = recompute_mlp_gradients(spec, w) + T * H * 2
    assert at.recompute == max(block + grads, T * H * 4 + T * H * 2 + 5 * W_Q) == block + grads
    # ... and the delta's temporary is not added on top of it (as a 4-bit matmul's is)
    assert at.dequant_temporary == 0
    assert activation_totals(spec, plain, train_state(spec, plain, None).sp).dequant_temporary == 5 * W_Q
    # 16 tokens: the delta's backward is the higher figure (16 x 3,072 x 4 B norm copy + 16 x 3,072 x 2 B gradient +
    # 5 x 37,748,736 B = 196,608 + 98,304 + 188,743,680)
    short = Workload(**{**RUN, "batch": 1, "seq": 16, "checkpointing": "full"})
    at = activation_totals(spec, short, train_state(spec, short, None).sp)
    assert at.recompute == 16 * H * 4 + 16 * H * 2 + 5 * W_Q == 189_038_592


def test_factors_in_the_weights_dtype_keep_no_input_copy():
    """get_peft_model(autocast_adapter_dtype=False): bf16 factors; F.linear(x, delta) keeps the bf16 delta and the
    input itself, which q_proj and v_proj share (no fp32 copy each)."""
    spec = load_model("llama-3.2-3b")
    fp32 = A.delta_saved(spec, Workload(**RUN), T)
    bf16 = A.delta_saved(spec, Workload(**RUN, lora_dtype="bf16"), T)
    # fp32: two input copies (T x H x 4 each) and the two deltas; bf16: one shared input (T x H x 2), the deltas in 2 B
    assert fp32 == 2 * T * H * 4 + W_Q + W_V
    assert bf16 == T * H * 2 + (W_Q + W_V) // 2


def test_loha_under_autocast_builds_a_half_delta():
    """--dtype fp32 --amp bf16: HadaWeight.forward's products run under autocast, so the delta F.linear keeps is bf16
    and the fp32 activations are cast to it once per adapted linear; HadaWeight.backward (outside autocast) holds the
    bf16 gradient and its scaled copy beside three fp32 n x k (the products with the fp32 factors promote)."""
    spec = load_model("llama-3.2-3b")
    w = Workload(**{**RUN, "dtype": "fp32", "amp": "bf16"})
    assert A.delta_dtype(w) == "bf16"
    # two bf16 input copies (q_proj's and v_proj's casts, T x H x 2 each) and the two bf16 deltas
    assert A.delta_saved(spec, w, T) == 2 * T * H * 2 + (W_Q + W_V) // 2
    d = A.delta_transients(spec, w, 4, 768, 10**9)
    # q_proj: 2 x 3,072 x 3,072 x 2 B + 3 x 37,748,736 B = 37,748,736 + 113,246,208
    assert d.temporary == 2 * (W_Q // 2) + 3 * W_Q == 150_994_944


def test_autocast_with_an_adapted_mlp_input_projection_is_refused():
    with pytest.raises(ConfigError) as e:
        estimate("llama-3.2-3b", **{**RUN, "dtype": "fp32", "amp": "bf16", "lora_targets": ("q_proj", "up_proj")})
    assert ("method=loha under autocast is modelled with the MLP's input projections frozen (an adapted one returns "
            "its fp32 input's dtype): adapt the attention's and the MLP's output projections, or drop --amp") in str(e.value)


def test_oft_under_autocast_keeps_half_casts_of_its_rotation():
    """--dtype fp32 --amp bf16: per adapted linear the einsum's bf16 cast of the (fp32) input, and seven (in / b, b, b)
    bf16 tensors: four casts of the skew-symmetric Q (bmm(Q, Q) casts it twice), Q^2, Q^3 and the einsum's cast of R."""
    spec = load_model("llama-3.2-3b")
    w = Workload(**{**RUN, "method": "oft", "oft_block_size": 96, "dtype": "fp32", "amp": "bf16"})
    blocks = 32 * 96 * 96 * 2  # 3,072 / 96 blocks of 96 x 96 in bf16: 589,824 B
    assert A.delta_saved(spec, w, T) == 2 * T * H * 2 + 2 * 7 * blocks


def test_lokr_under_autocast_keeps_half_casts_of_an_fp32_kron():
    """--dtype fp32 --amp bf16, LoKr with F = 4 (q_proj: w1 (4, 4), w2 (768, 768) built from r = 32 factors):
    torch.kron is not autocast, so the delta is fp32; F.linear keeps its bf16 cast and the input's, and the built w2
    (an autocast mm) in bf16; the backward holds three fp32 n x k as without autocast."""
    spec = load_model("llama-3.2-3b")
    w = Workload(**{**LOKR, "dtype": "fp32", "amp": "bf16"})
    assert A.delta_dtype(w) == "bf16"
    w2 = 768 * 768 * 2 + 256 * 768 * 2  # q_proj's and v_proj's (768, 768) and (256, 768) w2 in bf16
    assert A.delta_saved(spec, w, T) == 2 * T * H * 2 + (W_Q + W_V) // 2 + w2
    d = A.delta_transients(spec, w, 4, 768, 10**9)
    assert d.temporary == 3 * W_Q  # kron's backward: three fp32 3,072 x 3,072


@pytest.mark.parametrize("settings, message", [
    ({"quant": "int8"}, "method=oft over quant=int8 weights is not modelled: drop --quant"),
    ({"quant": "nf4", "nf4_impl": "torchao"}, "method=oft over quant=nf4 is modelled as transformers' "
     "BitsAndBytesConfig loads it (every block linear in bitsandbytes 4-bit); nf4_impl='torchao' is another stack's: "
     "drop it"),
    ({"quant": "nf4", "dtype": "fp32", "amp": "bf16"}, "method=oft under autocast over quant=nf4 weights is not "
     "modelled: drop --amp"),
])
def test_oft_over_a_quantized_base_limits(settings, message):
    with pytest.raises(ConfigError) as e:
        Workload(**{**RUN, "method": "oft", **settings}).validated()
    assert message in str(e.value)


def test_oft_over_nf4_dequantizes_each_block_linear():
    """peft's OFT Linear over bitsandbytes' Linear4bit: the rotation as over bf16 weights, and bitsandbytes' dequantized
    weight at each matmul (the largest, gate_proj's or up_proj's 8,192 x 3,072 bf16 with its t x n output)."""
    spec = load_model("llama-3.2-3b")
    w = Workload(**{**RUN, "method": "oft", "oft_block_size": 96, "quant": "nf4-dq"})
    plain = Workload(**{**RUN, "method": "oft", "oft_block_size": 96})
    assert A.delta_saved(spec, w, T) == A.delta_saved(spec, plain, T)
    fwd, _ = A.dequant_transients(spec, w, T)
    assert fwd == 8_192 * 3_072 * 2 + T * 8_192 * 2
