"""--quant-impl exllama / cuda-old: AutoGPTQ 0.4.2's QuantLinear kernels for gptq-4bit weights (optimum's
benchmark_gptq.py). exllama keeps an fp16 temp_dq buffer of the largest weight on each GPU; cuda-old dequantizes the
weight in PyTorch ops for inputs of 128 rows or more. The arithmetic on Llama 2 13B's (13,824 x 5,120) MLP linears,
the row threshold, and the refusals."""

import pytest

from vramlens.errors import ConfigError
from vramlens.estimator import estimate
from vramlens.estimator.activations import inference_layer_peak
from vramlens.estimator.weights import (
    dequant_cast_bytes,
    dequant_min_rows,
    gptq_kernel_buffer_bytes,
    gptq_torch_dequant_temporaries,
)
from vramlens.models import load_model
from vramlens.workload import make_workload

GPTQ = dict(mode="inference", dtype="fp16", attention="eager", transformers_version="4.32", quant="gptq-4bit")
KN = 5_120 * 13_824  # Llama 2 13B's gate/up (k 5,120 -> n 13,824) and down projections: 70,778,880 weights


@pytest.fixture(scope="module")
def llama13():
    return load_model("llama-2-13b")


def test_exllama_buffers(llama13):
    w = make_workload(**GPTQ, quant_impl="exllama")
    # temp_dq: fp16 (1, 70,778,880) = 141,557,760 B; temp_state: fp16 (1, 1) without act-order, one 512 B block
    assert gptq_kernel_buffer_bytes(llama13, w) == 2 * KN + 512 == 141_558_272
    assert gptq_kernel_buffer_bytes(llama13, make_workload(**GPTQ)) == 0
    assert gptq_kernel_buffer_bytes(llama13, make_workload(**GPTQ, quant_impl="cuda-old")) == 0
    ex = estimate(llama13, **GPTQ, quant_impl="exllama", batch=1, seq=512, new_tokens=0)
    plain = estimate(llama13, **GPTQ, batch=1, seq=512, new_tokens=0)
    assert ex.breakdown["weights"] - plain.breakdown["weights"] == 141_558_272
    assert ex.breakdown.peak_allocated - plain.breakdown.peak_allocated == 141_558_272


def test_cuda_old_temporaries():
    # at the shift: the int32 (k/8, 8, n) unpacked weight (4 B a weight), its int8 copy (1 B) and the int8 zeros
    # (k/128 x n = 40 x 13,824), less the fp16 weight (2 B) counted as the dequantized weight itself
    # 283,115,520 + 70,778,880 + 552,960 - 141,557,760 = 212,889,600
    assert gptq_torch_dequant_temporaries(13_824, 5_120, 128) == 212_889_600
    w = make_workload(**GPTQ, quant_impl="cuda-old")
    assert dequant_cast_bytes(w, 13_824, 5_120) == 212_889_600
    # with the fp16 weight: 354,447,360 B, what AutoGPTQ v0.4.2's own QuantLinear.forward (qlinear_cuda_old.py, its
    # PyTorch path) held beyond its buffers and input on fake tensors under vramlens.trace.recorder, at (128, 5,120)
    # -> 13,824 and at two smaller shapes (checked once: AutoGPTQ 0.4.2 is not on PyPI)
    assert 2 * KN + dequant_cast_bytes(w, 13_824, 5_120) == 354_447_360


def test_cuda_old_dequantizes_from_128_rows(llama13):
    kernel = make_workload(**GPTQ)
    old = make_workload(**GPTQ, quant_impl="cuda-old")
    assert dequant_min_rows(old) == 128 and dequant_min_rows(kernel) == 2
    assert dequant_min_rows(make_workload(mode="inference", quant="int8", quant_impl="torchao-wo")) == 1
    # 127 rows: the CUDA kernel, nothing dequantized
    assert inference_layer_peak(llama13, old, 1, 127, 127) == inference_layer_peak(llama13, kernel, 1, 127, 127)
    # 128 rows: the MLP holds act(gate) x up (128 x 13,824 fp16 = 3,538,944 B) beside the weight and its temporaries
    # at the shift (354,447,360 B) in place of the kernel's three (128, 13,824) tensors (10,616,832 B)
    assert (inference_layer_peak(llama13, old, 1, 128, 128) - inference_layer_peak(llama13, kernel, 1, 128, 128)
            == 3_538_944 + 354_447_360 - 10_616_832 == 347_369_472)
    # a decode step of 16 rows runs the kernel
    assert inference_layer_peak(llama13, old, 16, 1, 600) == inference_layer_peak(llama13, kernel, 16, 1, 600)


@pytest.mark.parametrize(("kw", "message"), [
    (dict(quant="nf4", quant_impl="exllama"),
     "quant_impl='exllama' is an AutoGPTQ kernel for GPTQ weights; quant='nf4' is not GPTQ: use --quant gptq-4bit, "
     "or drop --quant-impl"),
    (dict(mode="train", quant="gptq-4bit", quant_impl="cuda-old"),
     "quant_impl='cuda-old' is modelled for inference: use --mode inference, or drop --quant-impl"),
])
def test_bad_gptq_kernel_workloads(kw, message):
    with pytest.raises(ConfigError) as e:
        make_workload(**kw)
    assert message in str(e.value).split("\n")
