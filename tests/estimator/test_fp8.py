"""--fp8 (torchao Float8Linear): validation, notes, and the arithmetic of its casts (the tracer checks
the figures against torchao's own module in tests/trace/test_techniques.py)."""

import pytest

from vramlens.errors import ConfigError
from vramlens.estimator import estimate, fp8
from vramlens.models import load_model as get_model
from vramlens.workload import make_workload

TRAIN = dict(mode="train", batch=1, seq=512, dtype="bf16", fp8=True)


@pytest.mark.parametrize("changes, words", [
    (dict(mode="inference"), "--quant fp8"),
    (dict(dtype="fp32"), "compute dtype fp32"),
    (dict(dtype="fp16"), "compute dtype fp16"),
    (dict(dtype="fp32", amp="bf16"), "autocast"),
    (dict(method="lora"), "LoRA/QLoRA"),
    (dict(method="qlora"), "LoRA/QLoRA"),
])
def test_refused_with_one_line(changes, words):
    with pytest.raises(ConfigError) as e:
        make_workload(**{**TRAIN, **changes})
    fp8_lines = [p for p in e.value.problems if "fp8" in p]
    assert len(fp8_lines) == 1 and words in fp8_lines[0]


def test_accepted_for_bf16_and_fsdp2_mixed_precision():
    assert make_workload(**TRAIN).fp8
    assert make_workload(**{**TRAIN, "dtype": "fp32", "amp": "bf16", "fsdp": True, "gpus": 8}).fp8
    # torchtitan's 2-D runs: torchao's float8 tensor-parallel styles
    assert make_workload(**{**TRAIN, "dtype": "fp32", "amp": "bf16", "fsdp": True, "gpus": 16, "tp": 8}).fp8


def test_saved_activations_do_not_change():
    # matmul_with_hp_or_float8_args.forward: ctx.save_for_backward(input_hp, weight_hp_t)
    for ck in ("none", "full"):
        a = estimate("llama-3-8b", **{**TRAIN, "checkpointing": ck, "fp8": False}).breakdown
        b = estimate("llama-3-8b", **{**TRAIN, "checkpointing": ck}).breakdown
        assert b["activations"] == a["activations"] and b["weights"] == a["weights"]
        assert b.peak_allocated >= a.peak_allocated


def test_down_projection_backward_by_hand():
    spec = get_model("llama-3-8b")
    h, f, t = 4096, 14336, 2 * 512
    w = make_workload(**{**TRAIN, "batch": 2})
    # at 1,024 tokens the weight's cast for grad_input is the peak: the incoming gradient (bf16), its float8 cast
    # for grad_input and the weight's cast in progress (fp32 product, fp32 clamp, float8: 9 B per element), two
    # fp32 scales (512 B each)
    assert fp8.down_backward(spec, w, 2, 512) == 2 * t * h + t * h + 9 * h * f + 2 * 512 == 541_066_240
    # at 8,192 tokens the saved input's cast: the gradient, its two casts, the weight's, grad_input (bf16), the
    # saved input's cast, four scales
    t = 8192
    assert fp8.down_backward(spec, make_workload(**{**TRAIN, "seq": 8192}), 1, 8192) == \
        2 * t * h + 2 * t * h + h * f + 2 * t * f + 9 * t * f + 4 * 512 == 1_484_785_664
    assert fp8.down_backward(spec, make_workload(**{**TRAIN, "fp8": False}), 2, 512) == 0


def test_moe_experts_are_not_linears():
    # transformers' grouped experts are parameters, not nn.Linear: torchao does not convert them
    spec = get_model("mixtral-8x7b")
    assert fp8.down_backward(spec, make_workload(**TRAIN), 1, 512) == 0


def test_the_gpu_note():
    old = estimate("llama-3-8b", **TRAIN, gpu="A100-80GB").breakdown.notes
    new = estimate("llama-3-8b", **TRAIN, gpu="H100-80GB").breakdown.notes
    assert any("no float8 tensor cores" in n for n in old)
    assert not any("no float8 tensor cores" in n for n in new)
    assert any("no amax history" in n for n in new)


# torchtitan's Table 4 row: Llama 3.1 70B, TP 8, 16 x 8,192 tokens a rank
TT70 = dict(mode="train", batch=16, seq=8192, dtype="fp32", amp="bf16", fsdp=True, gpus=256, tp=8,
            loss_parallel=True, fp8=True)


def test_tp_saved_tensors_by_hand():
    spec = get_model("llama-3.1-70b")
    w = make_workload(**TT70)
    t, h, f8 = 16 * 8192, 8192, 512  # tokens, hidden, a float8 tensor's fp32 scale (one 512-byte block)
    # the gathered attention and MLP inputs (t, h): float8 instead of bf16, each with its scale;
    # o's local input (t, 64 x 128 / 8): a float8 copy beside the SDPA output; down's (t, 28,672 / 8): float8
    # instead of the bf16 product
    by_hand = 2 * (t * h + f8 - 2 * t * h) + (t * 1024 + f8) + (t * 3584 + f8 - 2 * t * 3584)
    assert by_hand == -2_483_025_920  # 2.31 GiB less per block
    assert fp8.tp_saved_delta(spec, w, 16, 8192, 8) == by_hand
    # the same delta in each block's saved tensors (one block recomputed under full checkpointing)
    from vramlens.estimator.activations import layer_activations

    bf16 = make_workload(**{**TT70, "fp8": False})
    assert (layer_activations(spec, w, 16, 8192, tp=8).saved
            - layer_activations(spec, bf16, 16, 8192, tp=8).saved) == by_hand
    assert fp8.tp_saved_delta(spec, bf16, 16, 8192, 8) == 0
    assert fp8.tp_saved_delta(spec, make_workload(**{**TT70, "tp": 1, "loss_parallel": False}), 16, 8192, 1) == 0


def test_tp_casts_by_hand():
    spec = get_model("llama-3.1-70b")
    w = make_workload(**TT70)
    t, h, f = 16 * 8192, 8192, 28_672 // 8
    # forward: the down projection's input cast, the bf16 product alive: product + fp32 product and clamp + scale
    assert fp8.forward_transient(spec, w, 16, 8192, 8) == 2 * t * f + 8 * t * f + 512
    # backward, down: beside the gradient's sequence shard (bf16), the largest of its float8 cast (9 B per element),
    # the all-gather of the float8 shard (the collective's output and its concatenation, t x h bytes each), and
    # after it the gathered float8 gradient with the weight shard's cast (9 B) or grad_input beside its float8 copy
    after = t * h + 512 + max(9 * h * f + 512, h * f + 512 + 2 * t * f)
    assert fp8.down_backward(spec, w, 16, 8192, 8) == 2 * t * h // 8 + max(9 * t * h // 8 + 512,
                                                                            t * h // 8 + 512 + 2 * t * h, after)
    # backward, gate/up: the residual gradient's shard, the product's two input gradients, the up gradient's cast;
    # by then the down's float8 input and the product's two bf16 inputs are freed
    assert fp8.gate_up_backward(spec, w, 16, 8192, 8) == 2 * t * h // 8 + 2 * 2 * t * f + 9 * t * f + 512
    assert fp8.tp_mlp_freed(spec, w, 16, 8192, 8) == t * f + 512 + 2 * 2 * t * f


def test_tp_case_note():
    notes = estimate("llama-3.1-70b", **TT70).breakdown.notes
    assert any(n.startswith("fp8 with tp=8: torchao's float8 TP styles") for n in notes)


# --fp8-recipe: torchao's other recipes (estimator.fp8 _linear_backward), Llama 3 8B's down projection at 2 x 512 tokens
H, F, T = 4096, 14336, 2 * 512


def test_rowwise_down_projection_backward_by_hand():
    spec = get_model("llama-3-8b")
    w = make_workload(**{**TRAIN, "batch": 2, "fp8_recipe": "rowwise"})
    # as tensorwise (the weight's cast for grad_input is the peak at 1,024 tokens) with vectors of fp32 scales:
    # the gradient's one per token row (4*T), the weight's one per input column (4*F)
    assert fp8.down_backward(spec, w, 2, 512) == 2 * T * H + T * H + 4 * T + 9 * H * F + 4 * F == 541_126_656
    # at 8,192 tokens the saved input's cast, each cast with its vector: 4*t + 4*H + 4*F (weight) + 4*F (input)
    t = 8192
    by_hand = 2 * t * H + (t * H + 4 * t) + (H * F + 4 * F) + 2 * t * F + (t * H + 4 * H) + 9 * t * F + 4 * F
    assert fp8.down_backward(spec, make_workload(**{**TRAIN, "seq": 8192, "fp8_recipe": "rowwise"}), 1, 8192) == \
        by_hand == 1_484_947_456


def test_rowwise_with_gw_hp_down_projection_backward_by_hand():
    spec = get_model("llama-3-8b")
    w = make_workload(**{**TRAIN, "seq": 8192, "fp8_recipe": "rowwise_with_gw_hp"})
    t = 8192
    # the gradient and its rowwise cast (4*t), the weight's tensorwise cast and its scale repeated per column (4*F),
    # then the grad_input GEMM: the row-major copy of the float8 weight, two unit scales, the fp32 output
    # scaling (4*t*F) and grad_input (bf16); no cast of the saved input (grad_weight is a bf16 matmul)
    by_hand = 2 * t * H + (t * H + 4 * t) + (H * F + 512 + 4 * F) + H * F + 2 * 512 + 4 * t * F + 2 * t * F
    assert fp8.down_backward(spec, w, 1, 8192) == by_hand == 922_838_528


def test_mxfp8_down_projection_backward_by_hand():
    spec = get_model("llama-3-8b")
    for recipe in ("mxfp8_cublas", "mxfp8_cublas_rceil"):
        w = make_workload(**{**TRAIN, "batch": 2, "fp8_recipe": recipe})
        # the gradient, its MX cast along dim 0 and along dim 1, the weight's dim-1 cast, grad_input, the saved
        # input's dim-1 cast and grad_weight (bf16): each MX cast 1 B per element and 1 B per 32 (e8m0 scales)
        by_hand = (2 * T * H + 2 * (T * H + T * H // 32) + (H * F + H * F // 32) + 2 * T * F
                   + (T * F + T * F // 32) + 2 * H * F)
        assert fp8.down_backward(spec, w, 2, 512) == by_hand == 239_534_080


def test_mx_filter_takes_multiples_of_32():
    # to_mx asserts the cast dim is a multiple of block_size (32): a 48-wide linear stays bf16 under MX
    assert fp8.converts(48, 64) and not fp8.converts(48, 64, fp8.MX_BLOCK)


def test_recipes_refused_with_one_line():
    with pytest.raises(ConfigError) as e:
        make_workload(**{**TRAIN, "fp8": False, "fp8_recipe": "rowwise"})
    assert e.value.problems == ["fp8_recipe=rowwise needs fp8 training: add --fp8 (or set fp8 true), or drop "
                                "--fp8-recipe"]
    with pytest.raises(ConfigError) as e:
        make_workload(**{**TRAIN, "fp8_recipe": "rowwise", "tp": 2, "gpus": 2})
    assert e.value.problems == ["fp8_recipe=rowwise with tp=2 is not modelled (torchao's float8 tensor-parallel "
                                "styles are tensorwise): use --fp8-recipe tensorwise, or --tp 1"]
    with pytest.raises(ConfigError) as e:
        make_workload(**{**TRAIN, "fp8_recipe": "blockwise"})
    assert e.value.problems == ["fp8_recipe='blockwise' is not one of: tensorwise, rowwise, rowwise_with_gw_hp, "
                                "mxfp8_cublas, mxfp8_cublas_rceil"]


def test_the_mx_gpu_note():
    mx = {**TRAIN, "fp8_recipe": "mxfp8_cublas"}
    hopper = estimate("llama-3-8b", **mx, gpu="H100-80GB").breakdown.notes
    blackwell = estimate("llama-3-8b", **mx, gpu="B200").breakdown.notes
    assert any("no MX (block-scaled) float8 tensor cores" in n for n in hopper)
    assert not any("tensor cores" in n for n in blackwell)
    assert any("torchao MX training (mxfp8_cublas" in n for n in blackwell)
