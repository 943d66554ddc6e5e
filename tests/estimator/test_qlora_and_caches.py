"""QLoRA as each stack runs it and transformers' caches by kind, checked against their arithmetic on
Llama-2-7B's shapes (h 4,096, f 11,008, 32 layers of 32 heads x 128, V 32,000); the tracer checks
them against the real modules in tests/trace/test_techniques.py."""

import pytest

from vramlens.errors import ConfigError
from vramlens.estimator import estimate
from vramlens.estimator.kv_cache import quantized_bytes, quantized_lengths
from vramlens.estimator.weights import dequantized_weight_bytes, quantized_linear_bytes
from vramlens.workload import Workload, make_workload

TRAIN = dict(mode="train", batch=1, seq=512, dtype="bf16")


def test_lora_rank_defaults_to_peft_r():
    assert Workload().lora_rank == 8  # peft LoraConfig(r=8)


@pytest.mark.parametrize("kw, grads", [
    # q_proj and v_proj of 32 layers, A (8, 4,096) and B (4,096, 8): 4 x 32,768 elements per layer
    (dict(), 32 * 4 * 32_768 * 4),                                  # peft's fp32 adapters
    (dict(lora_dtype="bf16"), 32 * 4 * 32_768 * 2),                 # torchtune's: the model's dtype
    (dict(dora=True), 32 * 4 * 32_768 * 4 + 32 * 2 * 4_096 * 4),    # + a (4,096,) magnitude per adapted linear
])
def test_adapters_in_their_dtype_with_dora_magnitudes(llama7b, kw, grads):
    e = estimate(llama7b, **TRAIN, method="lora", **kw)
    assert e.breakdown["gradients"] == grads
    assert e.breakdown["optimizer_states"] == 2 * grads  # AdamW: two states shaped like the adapters
    assert e.trainable_params == grads // (2 if kw.get("lora_dtype") == "bf16" else 4)


def test_quant_targets_adapted_keeps_the_other_linears_in_bf16(llama7b):
    every = estimate(llama7b, **TRAIN, method="qlora").breakdown["weights"]
    adapted = estimate(llama7b, **TRAIN, method="qlora", quant_targets="adapted").breakdown["weights"]
    # per layer k_proj, o_proj (4,096 x 4,096) and gate, up, down (4,096 x 11,008) stay bf16 instead of nf4-dq
    assert quantized_linear_bytes(4_096, 4_096, "nf4-dq") == 8_655_360
    assert quantized_linear_bytes(11_008, 4_096, "nf4-dq") == 23_260_672
    per_layer = 2 * (4_096 * 4_096 * 2 - 8_655_360) + 3 * (4_096 * 11_008 * 2 - 23_260_672)
    assert adapted - every == 32 * per_layer == 8_017_559_552


def test_the_dequantized_weight_exists_while_each_4bit_matmul_runs(llama7b):
    w = make_workload(**{**TRAIN, "seq": 16}, method="qlora")
    # bitsandbytes MatMul4Bit: the largest linear (11,008 x 4,096) dequantized to bf16
    assert dequantized_weight_bytes(llama7b, w) == 11_008 * 4_096 * 2 == 90_177_536
    e = estimate(llama7b, **{**TRAIN, "seq": 16}, method="qlora")
    # at 16 tokens the backward of gate/up_proj is the largest transient: the dequantized weight, the
    # incoming gradient (16 x 11,008) and the input's (16 x 4,096), bf16, each rounded to 512 B
    assert e.breakdown["temporaries"] == 90_177_536 + 352_256 + 131_072
    assert "dequantized" in e.explain["temporaries"]
    lora = estimate(llama7b, **{**TRAIN, "seq": 16}, method="lora").breakdown
    assert lora["temporaries"] == 32 * 4 * 32_768 * 4  # bf16 weights: the largest is foreach Adam's sqrt


def test_dora_norm_and_dropout_copies(llama7b):
    plain = estimate(llama7b, **TRAIN, method="qlora").breakdown
    dora = estimate(llama7b, **TRAIN, method="qlora", dora=True).breakdown
    # DoRA keeps the base and adapter outputs (512 x 4,096, bf16 and fp32) per adapted linear and
    # layer, and the three (4,096,) fp32 vectors, each a 512-byte multiple
    assert dora["activations"] - plain["activations"] == 32 * 2 * (4_194_304 + 8_388_608 + 3 * 16_384)
    # the weight norm in fp32: the identity (4,096^2), A's output (4,096 x 8), B's, the dequantized
    # weight's fp32 copy, s*B@A and the sum ((4,096^2) each)
    assert dora["temporaries"] >= 67_108_864 * 4 + 131_072
    drop = estimate(llama7b, **TRAIN, method="qlora", dora=True, lora_dropout=0.1).breakdown
    # with dropout F.linear(dropped x, weight) keeps the fp32 dequantized weight, in every layer but
    # the first, whose q and v inputs need no gradient; each adapter keeps its dropped copy's mask, and
    # the base output, recomputed on the fp32 dropped input, is fp32 (not bf16)
    extra = 31 * 2 * 67_108_864 + 32 * 2 * 512 * 4_096 + 32 * 2 * 512 * 4_096 * (4 - 2)
    assert drop["activations"] - dora["activations"] == extra


def test_lora_dtype_must_be_fp32_or_the_compute_dtype():
    with pytest.raises(ConfigError) as e:
        make_workload(mode="train", method="lora", dtype="bf16", lora_dtype="fp16")
    assert e.value.problems == ["lora_dtype=fp16 with compute dtype bf16: adapters are kept in fp32 (peft) or in the "
                                "model's dtype (torchtune): use --lora-dtype fp32 or bf16"]


def test_static_cache_preallocates_max_cache_len(llama7b):
    e = estimate(llama7b, seq=512, cache="static", max_cache_len=4_096)
    # 2 (K, V) x 32 layers x 32 heads x 128 x 2 B x 4,096 tokens, and StaticLayer.cumulative_length per layer
    assert e.breakdown["kv_cache"] == 2 * 32 * 32 * 128 * 2 * 4_096 + 32 * 512 == 2_147_500_032
    dyn = estimate(llama7b, seq=512, new_tokens=100).breakdown["kv_cache"]
    default = estimate(llama7b, seq=512, new_tokens=100, cache="static").breakdown["kv_cache"]
    # generate() sizes it to seq + new_tokens; no torch.cat transient, a counter per layer
    assert default == 2 * 32 * 32 * 128 * 2 * 612 + 32 * 512 and default < dyn


def test_offloaded_cache_keeps_two_layers_on_the_gpu(llama7b):
    e = estimate(llama7b, seq=512, new_tokens=512, cache="offloaded").breakdown
    layer_T = 2 * 32 * 128 * 2 * 1_024        # one layer's keys and values at 1,024 tokens
    prev = 2 * 32 * 128 * 2 * 1_023
    # the next layer prefetched (1,023 tokens), the updated layer's new keys and values, its old values
    assert e["kv_cache"] == layer_T + prev + prev // 2 == 41_918_464
    # every layer but the prefetched one on the host
    assert e.host_bytes == 31 * layer_T == 520_093_696


def test_quantized_cache_four_bits_and_a_residual(llama7b):
    # quanto's defaults: 4 bits, a bf16 scale and shift per 64, a residual of up to 128 tokens
    assert quantized_bytes(32 * 128 * 512, 2) == 1_048_576 + 2 * 65_536
    assert quantized_lengths(512, 127) == (512, 127) and quantized_lengths(512, 128) == (640, 0)
    assert quantized_lengths(512, 200) == (640, 72)
    e = estimate(llama7b, seq=512, cache="quantized").breakdown
    # 32 layers x (K, V) quantized, plus one layer's keys and values in bf16 while they are quantized
    assert e["kv_cache"] == 32 * 2 * 1_179_648 + 2 * 4_194_304


@pytest.mark.parametrize("kw, message", [
    (dict(cache="static", kv_block=16), "kv_block=16 is a serving engine's paged cache, cache=static transformers': "
                                        "drop --kv-block or --cache"),
    (dict(cache="quantized", kv_dtype="fp8"), "cache=quantized stores keys and values in 4 bits (QuantizedCache's "
                                              "nbits) and kv_dtype=fp8 in fp8: drop one of --cache quantized and "
                                              "--kv-dtype"),
    (dict(cache="static", seq=512, new_tokens=64, max_cache_len=500),
     "max_cache_len=500 is less than seq + new_tokens = 576: StaticCache holds at most max_cache_len tokens; use "
     "--max-cache-len 576 or more (or 0)"),
    (dict(max_cache_len=-1), "max_cache_len=-1 must be 0 (seq + new_tokens) or a number of tokens"),
])
def test_cache_problems(kw, message):
    with pytest.raises(ConfigError) as e:
        make_workload(**kw)
    assert e.value.problems == [message]


def test_quantized_cache_refused_with_sliding_windows():
    with pytest.raises(ConfigError) as e:
        estimate("mistral-7b", cache="quantized")
    assert "QuantizedCache takes full-attention layers only" in str(e.value)


# bitsandbytes < 0.43.2 MatMul4Bit.forward: ``ctx.tensors = (A, B)`` keeps every 4-bit matmul's input on
# its autograd node (LitGPT pinned 0.42.0); 0.43.2 (#1270) keeps ``(None, B)``
LITGPT_QLORA = dict(mode="train", batch=2, seq=512, dtype="bf16", method="qlora", quant="nf4", lora_rank=32,
                    lora_dropout=0.05, lora_dtype="bf16", optimizer="paged-adamw", loss_chunks=4)


def test_old_bitsandbytes_keeps_the_inputs_of_its_4bit_matmuls(llama7b):
    from vramlens.estimator.activations import bnb_kept_input_bytes, layer_activations

    t = 2 * 512
    new = make_workload(**LITGPT_QLORA)
    old = make_workload(**LITGPT_QLORA, bnb_inputs=True)
    # the adapters keep their dropped copies, so with bitsandbytes >= 0.43.2 nothing keeps the attention
    # norm's output, the MLP norm's or the MLP product; the old one keeps each once (q/k/v and gate/up
    # share their input). o_proj's input is SDPA's output, which the kernel keeps anyway
    extra = layer_activations(llama7b, old, 2, 512).saved - layer_activations(llama7b, new, 2, 512).saved
    assert extra == t * (4_096 + 4_096 + 11_008) * 2 == 39_321_600
    # on the nodes, where backward does not free them: those and the attention output
    assert bnb_kept_input_bytes(llama7b, old, 2, 512) == t * (3 * 4_096 + 11_008) * 2 == 47_710_208
    assert bnb_kept_input_bytes(llama7b, new, 2, 512) == 0
    e_new, e_old = estimate(llama7b, **LITGPT_QLORA), estimate(llama7b, **LITGPT_QLORA, bnb_inputs=True)
    assert e_old.breakdown["activations"] - e_new.breakdown["activations"] == 32 * 39_321_600


def test_a_loop_that_holds_the_output_keeps_the_previous_steps_inputs(llama7b):
    step = estimate(llama7b, **LITGPT_QLORA, bnb_inputs=True).to_dict()["phases"]
    held = estimate(llama7b, **LITGPT_QLORA, bnb_inputs=True, holds_outputs="next-forward").to_dict()["phases"]
    kept = 32 * 47_710_208  # every block's kept inputs (test above)
    # LitGPT's ``logits = model(...)`` holds the step's graph through the optimizer step and the next
    # forward, until that forward returns (its loss runs after the old graph is gone)
    assert held["optimizer"] - step["optimizer"] == kept
    assert step["forward"] < held["forward"] <= step["forward"] + kept
    assert held["backward"] == step["backward"]


def test_bnb_inputs_is_refused_with_checkpointing_and_ignored_without_4bit_weights():
    w = Workload(**{**LITGPT_QLORA, "bnb_inputs": True, "checkpointing": "full"})
    assert any("bnb_inputs" in p for p in w.problems())
    lora = Workload(**{**LITGPT_QLORA, "method": "lora", "quant": None, "bnb_inputs": True})
    assert not lora.problems()
    assert any("bnb_inputs" in n for n in lora.ignored())
    assert Workload(**{**LITGPT_QLORA, "bnb_inputs": "kept"}).problems()
