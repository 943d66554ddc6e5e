"""--nf4-impl torchao: torchtune's QLoRA dequantizes each NF4 weight with torchao's
``NF4Tensor.get_original_weight`` (eager ops: int64 codes and bf16 halves alive together). The
arithmetic on Llama-2-7B's MLP weight (11,008 x 4,096), then the formula against the real torchao
function under fake tensors (the tracer's emulation is checked in QLORA_ROWS, tests/trace)."""

import pytest

from event_peaks import peak_beyond
from vramlens.errors import ConfigError
from vramlens.estimator import estimate
from vramlens.estimator.weights import dequant_cast_bytes, torchao_nf4_dequant_temporaries
from vramlens.units import round_up
from vramlens.workload import make_workload

QLORA = dict(mode="train", method="qlora", dtype="bf16", batch=1, seq=512)
N = 11_008 * 4_096  # 45,088,768 weights; 22,544,384 packed bytes


def test_the_temporaries_of_one_mlp_weight():
    # two int64 code tensors of 22,544,384 elements (180,355,072 B each), four bf16 halves (45,088,768 B
    # each: the two looked-up codes and the two scaled ones), and the bf16 scalers, one per 64 weights
    # (704,512 x 2 = 1,409,024 B)
    assert torchao_nf4_dequant_temporaries(N, 2) == 2 * 180_355_072 + 4 * 45_088_768 + 1_409_024 == 542_474_240
    # beside the 90,177,536 B result: 14 bytes per weight element at the peak
    assert 542_474_240 + 90_177_536 == 632_651_776 == 14 * N + 1_409_024


def test_only_torchao_nf4_adds_them():
    assert dequant_cast_bytes(make_workload(**QLORA, nf4_impl="torchao"), 11_008, 4_096) == 542_474_240
    assert dequant_cast_bytes(make_workload(**QLORA), 11_008, 4_096) == 0
    # fp4 is bitsandbytes' own format: torchao's NF4Tensor never holds it
    assert dequant_cast_bytes(make_workload(**QLORA, quant="fp4", nf4_impl="torchao"), 11_008, 4_096) == 0


def test_the_short_sequence_peak_grows_by_the_mlp_temporaries(llama7b):
    # at 16 tokens the dequantized MLP weight is the block's peak: with torchao an MLP weight's temporaries
    # come on top of it, before the matmul's output exists, so the peak grows by them less at most one
    # (16 x 11,008) bf16 tensor the bitsandbytes peak held (352,256 B)
    w = dict(QLORA, seq=16, quant_targets="adapted", lora_targets="all-linear", lora_dtype="bf16")
    bnb = estimate(llama7b, **w).breakdown.peak_allocated
    tao = estimate(llama7b, **w, nf4_impl="torchao").breakdown.peak_allocated
    assert 542_474_240 - 352_256 <= tao - bnb <= 542_474_240


def test_torchao_with_fp16_dequantization_is_refused():
    with pytest.raises(ConfigError) as e:
        make_workload(**QLORA, nf4_impl="torchao", dequant_dtype="fp16")
    assert str(e.value) == ("nf4_impl='torchao' with dequant_dtype='fp16': torchao's NF4Tensor dequantizes to the "
                            "dtype it was quantized from, the compute dtype in torchtune; use --dequant-dtype compute")


def test_torchao_without_nf4_weights_is_ignored():
    assert make_workload(mode="train", method="lora", nf4_impl="torchao").ignored() == [
        "ignored: nf4_impl='torchao' says whose code dequantizes NF4 weights, and none are in NF4 "
        "(use --method qlora or --quant nf4)"]


def test_the_formula_matches_torchao_get_original_weight():
    """torchao's own NF4Tensor, run on fake tensors under the tracer's recorder: the temporaries' peak
    (its packed data, scalers and table registered beforehand) is the formula plus the result."""
    torch = pytest.importorskip("torch", reason="the tracer check needs torch")
    nf4_tensor = pytest.importorskip("torchao.quantization.quantize_.workflows.nf4.nf4_tensor",
                                     reason="needs torchao's NF4Tensor")
    from torch._subclasses.fake_tensor import FakeTensorMode

    from vramlens.trace.recorder import Recorder

    n, k = 1_024, 768  # 786,432 weights
    with FakeTensorMode():
        q = nf4_tensor.to_nf4(torch.empty(n, k, dtype=torch.bfloat16))
        rec = Recorder()
        with rec:
            rec.mark([q], "weights")
            out = q.get_original_weight()
        assert out.shape == (n, k) and out.dtype == torch.bfloat16
        events = rec.events()
    peak = peak_beyond(events, "weights")
    assert peak == torchao_nf4_dequant_temporaries(n * k, 2) + round_up(2 * n * k, 512)
