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
    (dict(tp=2, gpus=2), "Float8ColwiseParallel"),
])
def test_refused_with_one_line(changes, words):
    with pytest.raises(ConfigError) as e:
        make_workload(**{**TRAIN, **changes})
    fp8_lines = [p for p in e.value.problems if "fp8" in p]
    assert len(fp8_lines) == 1 and words in fp8_lines[0]


def test_accepted_for_bf16_and_fsdp2_mixed_precision():
    assert make_workload(**TRAIN).fp8
    assert make_workload(**{**TRAIN, "dtype": "fp32", "amp": "bf16", "fsdp": True, "gpus": 8}).fp8


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
    # incoming gradient (bf16) + two float8 casts of it + the weight's float8 cast + grad_input (bf16)
    # + the saved input's cast (fp32 product, fp32 clamp, float8) + four fp32 scales (512 B each)
    by_hand = 2 * t * h + 2 * t * h + h * f + 2 * t * f + 9 * t * f + 4 * 512
    assert fp8.down_backward(spec, w, 2, 512) == by_hand
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
