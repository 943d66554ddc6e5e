"""--bnb-compute-dtype: BitsAndBytesConfig's bnb_4bit_compute_dtype over fp16 weights (transformers makes it fp32 when
load_in_4bit=True is given alone), checked on StarCoder's MLP (h 6,144, f 24,576) against the arithmetic of
bitsandbytes' Linear4bit and MatMul4Bit; the tracer checks it against NF4 modules in tests/trace/test_techniques.py
(QLORA_ROWS)."""

import pytest

from vramlens.errors import ConfigError
from vramlens.estimator import estimate
from vramlens.estimator.weights import dequant_cast_bytes
from vramlens.workload import make_workload

# transformers' llm_tutorial_optimization.md: load_in_4bit=True (fp4), fp16 elsewhere, a 20-token prompt
FP4 = dict(mode="inference", dtype="fp16", quant="fp4", batch=1, seq=20, new_tokens=59, transformers_version="4.33")


def test_an_fp16_models_fp32_matmuls_hold_the_fp16_weight_and_its_fp32_copy():
    plain = estimate("starcoder", **FP4).breakdown.peak_allocated
    fp32 = estimate("starcoder", **FP4, bnb_compute_dtype="fp32").breakdown.peak_allocated
    # the prefill's MLP, c_fc (6,144 -> 24,576) and c_proj (24,576 -> 6,144), t = 20 tokens:
    # before: c_fc's output and c_proj's (983,040 + 245,760 B, fp16) beside the weight dequantized to fp16
    #   (6,144 x 24,576 x 2 = 301,989,888 B): 303,218,688 B
    # after, at the cast of the dequantized weight (dequantize_4bit(B).to(A.dtype)): c_proj's output 245,760 B, the
    #   fp32 weight 603,979,776 B, the fp16 one 301,989,888 B and the largest fp32 input copy (24,576 x 20 x 4 =
    #   1,966,080 B): 908,181,504 B
    assert fp32 - plain == 908_181_504 - 303_218_688 == 604_962_816


def test_the_cast_is_the_model_dtypes_weight():
    w = make_workload(**FP4, bnb_compute_dtype="fp32")
    assert w.quant_matmul_dtype == "fp32"
    assert dequant_cast_bytes(w, 24_576, 6_144) == 24_576 * 6_144 * 2 == 301_989_888
    # bitsandbytes' set_compute_type runs fp32 and bf16 inputs in their own dtype
    assert make_workload(**{**FP4, "dtype": "bf16"}, bnb_compute_dtype="fp32").quant_matmul_dtype == "bf16"
    assert make_workload(**FP4).quant_matmul_dtype == "fp16"


def test_ignored_without_4bit_weights_or_fp16_activations():
    assert make_workload(mode="inference", dtype="fp16", quant="int8", bnb_compute_dtype="fp32").ignored() == [
        "ignored: bnb_compute_dtype='fp32' is the dtype bitsandbytes' 4-bit matmuls run in, and no weights are in "
        "4 bits (nf4, nf4-dq, fp4)"]
    assert make_workload(mode="inference", dtype="bf16", quant="nf4", bnb_compute_dtype="fp32").ignored() == [
        "ignored: bnb_compute_dtype='fp32' with compute dtype bf16: bitsandbytes' Linear4bit runs an fp32 or bf16 "
        "input in its own dtype (set_compute_type)"]


@pytest.mark.parametrize("kw, message", [
    (dict(mode="train", method="qlora", dtype="fp16", bnb_compute_dtype="fp32"),
     "bnb_compute_dtype='fp32' is modelled in inference only (in training the cast inputs bitsandbytes keeps and the "
     "fp32 gradients are not): drop --bnb-compute-dtype"),
    (dict(mode="inference", quant="nf4", bnb_compute_dtype="fp64"),
     "bnb_compute_dtype='fp64' is not one of: fp32, fp16, bf16"),
])
def test_refusals(kw, message):
    with pytest.raises(ConfigError) as e:
        make_workload(**kw)
    assert str(e.value) == message
