"""--compile (torch.compile's min-cut partitioner): the compiled block's terms by hand, where the formula
applies and where the estimate keeps eager figures (the tracer checks the figures against the partitioned
graphs in tests/trace/test_crosscheck_compile.py)."""

import pytest

from vramlens.errors import ConfigError
from vramlens.estimator import compiled, estimate
from vramlens.models import load_model as get_model
from vramlens.workload import make_workload

TRAIN = dict(mode="train", method="full", dtype="bf16", batch=1, seq=512, attention="sdpa", compile=True)


def test_llama_block_terms_by_hand():
    # Llama 3 8B: h 4,096, a 32 heads of d 128 (8 KV heads, expanded), f 14,336; t = 1 x 512 tokens, bf16
    spec = get_model("llama-3-8b")
    blk = compiled.block(spec, make_workload(**TRAIN), 1, 512)
    assert blk.residual_in == 2 * 4096 * 512 == 4_194_304
    assert blk.norm_rsqrt == 2 * 4 * 512 == 4_096            # two fp32 (b, s, 1): 2,048 B each, 4 blocks
    assert blk.norm_out == 2 * 2 * 4096 * 512 == 8_388_608
    assert blk.qkv == 3 * 2 * 32 * 128 * 512 == 12_582_912     # q, and k and v expanded to 32 heads
    assert blk.sdpa == 2 * 32 * 128 * 512 + 4 * 32 * 512 + 2 * 512 == 4_260_864  # out, lse, seed + offset
    assert blk.residual_mid == 2 * 4096 * 512 == 4_194_304
    assert blk.mlp == 3 * 2 * 14336 * 512 == 44_040_192        # gate, up, silu(gate) * up
    assert blk.total == 77_665_280


def test_lora_block_terms_by_hand():
    # LoRA r 8 on q_proj and v_proj (peft's fp32 adapters), the same Llama 3 8B block
    spec = get_model("llama-3-8b")
    blk = compiled.block(spec, make_workload(**{**TRAIN, "method": "lora", "lora_targets": ("q_proj", "v_proj")}), 1, 512)
    assert blk.residual_in == 2 * 4096 * 512 == 4_194_304    # the block's output (the next norm's input)
    assert blk.norm_rsqrt == 2 * 4 * 512 == 4_096
    assert blk.norm_out == 4 * 4096 * 512 + 2 * 4 * 8 * 512 == 8_421_376  # fp32 norm output, two lora_A outputs
    assert blk.qkv == 12_582_912 and blk.sdpa == 4_260_864 and blk.residual_mid == 4_194_304
    assert blk.mlp == 2 * 2 * 14336 * 512 == 29_360_128        # gate and up; the frozen down_proj keeps nothing
    assert blk.total == 63_017_984


def test_gpt2_block_terms_by_hand():
    # GPT-2: h 768, 12 heads of 64, f 3,072, dropout 0.1; t = 1 x 512 tokens, bf16
    spec = get_model("gpt2")
    blk = compiled.block(spec, make_workload(**TRAIN), 1, 512)
    assert blk.residual_in == 2 * 768 * 512 == 786_432
    assert blk.norm_rsqrt == 4 * 1024 == 4_096                 # two LayerNorms' bf16 mean and rstd (1,024 B each)
    assert blk.norm_out == 2 * 2 * 768 * 512 == 1_572_864      # their outputs, kept transposed for Conv1D
    assert blk.qkv == 2 * 3 * 768 * 512 == 2_359_296           # c_attn's output
    assert blk.sdpa == 2 * 768 * 512 + 4 * 12 * 512 + 2 * 512 == 812_032
    assert blk.residual_mid == 2 * 768 * 512 + 768 * 512 == 1_179_648       # the residual and its dropout mask
    assert blk.mlp == 2 * 2 * 3072 * 512 + 768 * 512 == 6_684_672          # c_fc's and GELU's outputs, a mask
    assert blk.total == 13_399_040
    # the first block's input: at batch 1 the dropped sum (786,432 B), beyond one the two embeddings' outputs;
    # its mask (393,216 B) and the position ids (4,096 B); ln_f's mean, rstd (1,024 B each) and output
    common = 2 * 4096 + 4608 + 2 * 512 * 512 + 393_216 + 4096 + 2 * 1024 + 786_432
    assert compiled.model_level(spec, make_workload(**TRAIN), 1, 512) == common + 786_432 == 2_509_312
    w2 = make_workload(**{**TRAIN, "batch": 2})
    # batch 2: ids, labels 8,192 B each, padded labels 2 x 513 x 8 = 8,208 -> 8,704, the mask twice as large,
    # the token embeddings' output (1,572,864 B) and the position embeddings' (786,432 B)
    assert compiled.model_level(spec, w2, 2, 512) == (2 * 8192 + 8704 + 2 * 2 * 512 * 512 + 1_572_864 + 786_432
                                                      + 786_432 + 4096 + 2 * 2048 + 1_572_864) == 5_800_448


def test_head_and_loss_backward_by_hand():
    spec = get_model("llama-3-8b")  # V = 128,256
    w = make_workload(**TRAIN)
    saved, peak, _ = compiled.head(spec, w, 1, 512)
    # bf16 logits (512 x 128,256 x 2 B) + fp32 row max and log-sum (2,048 B each) + the fp32 divisor (one block)
    assert saved == 2 * 128_256 * 512 + 2 * 2048 + 512 == 131_338_752
    # ... and in forward the fp32 upcast, its shift and exp (3 x 4 B x 512 x 128,256)
    assert peak == saved + 3 * 4 * 128_256 * 512 == 919_343_616
    # the zero gradient of the dropped logits output (bf16) and three fp32 (b*s, V) values at once
    assert compiled.loss_backward(spec, w, 1, 512) == 2 * 128_256 * 512 + 3 * 4 * 128_256 * 512 == 919_339_008


def test_model_level_by_hand():
    spec = get_model("llama-3-8b")
    w = make_workload(**TRAIN)
    # ids and labels (int64, 4,096 B each), padded labels (1 x 513 int64 = 4,104 B -> 4,608), the bf16 causal
    # mask (1 x 1 x 512 x 512 x 2 B), the final norm's input and output (bf16, 4 MiB each) and fp32 rsqrt
    by_hand = 2 * 4096 + 4608 + 2 * 512 * 512 + 2 * 2 * 4096 * 512 + 2048
    assert compiled.model_level(spec, w, 1, 512) == by_hand == 8_927_744


def test_full_checkpointing_model_level_by_hand():
    spec = get_model("llama-3-8b")
    w = make_workload(**{**TRAIN, "checkpointing": "full"})
    # ids, labels, padded labels as without checkpointing; no 4-D mask but the packed-sequence check's three int64
    # (1, 512) values (4,096 B each); the final norm's bf16 output and fp32 rsqrt (its input is recomputed)
    assert compiled.model_level(spec, w, 1, 512) == 2 * 4096 + 4608 + 3 * 4096 + 2 * 4096 * 512 + 2048 == 4_221_440
    eager = estimate("llama-3-8b", **{**TRAIN, "checkpointing": "full", "compile": False})
    comp = estimate("llama-3-8b", **{**TRAIN, "checkpointing": "full"})
    # the blocks keep their inputs either way; the head keeps bf16 logits, not the fp32 log_softmax
    assert comp.layer_activation_bytes == eager.layer_activation_bytes
    assert comp.breakdown["activations"] < eager.breakdown["activations"]


def test_estimate_uses_the_compiled_figures():
    eager = estimate("llama-3-8b", **{**TRAIN, "compile": False})
    comp = estimate("llama-3-8b", **TRAIN)
    assert comp.layer_activation_bytes == 77_665_280 < eager.layer_activation_bytes == 102_827_008
    assert comp.breakdown["activations"] < eager.breakdown["activations"]
    assert comp.breakdown["weights"] == eager.breakdown["weights"]
    assert [n for n in comp.breakdown.notes if n.startswith("compile: ")] == [compiled.note(comp.model, comp.workload)]
    assert "upper bound" in compiled.note(comp.model, comp.workload)


@pytest.mark.parametrize("model, changes, words", [
    ("starcoderbase-1b", {}, "Llama-style blocks"),  # GPT-2's layout with one KV head (gpt_bigcode)
    ("llama-3-8b", {"checkpointing": "selective-op"}, "no checkpointing"),
    ("gpt2", {"checkpointing": "full"}, "full checkpointing: Llama-style blocks"),
    ("llama-3-8b", {"method": "lora", "lora_targets": ("q_proj", "o_proj")}, "LoRA on q/k/v_proj"),
    ("llama-3-8b", {"method": "lora", "lora_dtype": "bf16"}, "fp32 adapters"),
    ("llama-3-8b", {"method": "qlora"}, "full training"),
    ("llama-3-8b", {"dtype": "fp32", "amp": "bf16"}, "without autocast"),
    ("llama-3-8b", {"attention": "eager"}, "SDPA"),
    ("mixtral-8x7b", {}, "dense"),
])
def test_unmodelled_runs_keep_eager_figures_and_say_so(model, changes, words):
    eager = estimate(model, **{**TRAIN, **changes, "compile": False}).breakdown
    comp = estimate(model, **{**TRAIN, **changes}).breakdown
    assert comp["activations"] == eager["activations"] and comp.peak_allocated == eager.peak_allocated
    lines = [n for n in comp.notes if n.startswith("compile: ")]
    assert len(lines) == 1 and words in lines[0] and "eager PyTorch's" in lines[0]


def test_inference_ignores_compile():
    assert make_workload(mode="inference", compile=True).ignored() == [
        "ignored in inference (they apply to training): compile=True"]
    assert compiled.note(get_model("llama-3-8b"), make_workload(mode="inference", compile=True)) == ""


def test_compile_must_be_a_bool():
    with pytest.raises(ConfigError) as e:
        make_workload(mode="train", compile="yes")
    assert e.value.problems == ["compile='yes' must be true or false"]
