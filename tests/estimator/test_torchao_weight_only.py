"""--quant-impl torchao-wo: torchao's int8_weight_only / float8_weight_only linears dequantize the whole weight to
the compute dtype at every eager call (gpt-fast's prefill), the output layer's the largest. The arithmetic on
Llama 3 8B's (128,256 x 4,096) output layer, float8_weight_only's bf16 quantization temporaries, the refusals, and
one linear of torchao's own int8 weight-only code on fake tensors (the whole model: WEIGHT_ONLY_ROWS, tests/trace)."""

import pytest

from event_peaks import peak_beyond
from vramlens.allocator import simulate
from vramlens.errors import ConfigError
from vramlens.estimator import estimate
from vramlens.estimator.activations import head_dequant_inference
from vramlens.estimator.ondevice import quantize_events
from vramlens.estimator.weights import dequant_cast_bytes, head_dequantized_bytes
from vramlens.models import load_model
from vramlens.units import MiB, round_up
from vramlens.workload import make_workload

GEN = dict(mode="inference", seq=6, new_tokens=200, cache="static", max_cache_len=208, quant_head=True)
HEAD = 128_256 * 4_096 * 2  # Llama 3's output layer in bf16: 1,050,673,152 B


@pytest.fixture(scope="module")
def llama3():
    return load_model("llama-3-8b")


def test_the_output_layer_dequantized(llama3):
    int8 = make_workload(**GEN, quant="int8", quant_impl="torchao-wo")
    fp8 = make_workload(**GEN, quant="fp8", quant_impl="torchao-wo")
    # int8: one cast, the bf16 weight; fp8: the cast beside its product with the scale
    assert head_dequantized_bytes(llama3, int8) == (HEAD, 0)
    assert head_dequantized_bytes(llama3, fp8) == (HEAD, HEAD)
    # the formats' own kernels (bitsandbytes' int8, _int_mm, _scaled_mm) dequantize nothing
    assert head_dequantized_bytes(llama3, make_workload(**GEN, quant="int8")) == (0, 0)
    # one token dequantizes too (no matrix-vector kernel): the weight and one row of logits (128,256 x 2 B)
    assert head_dequant_inference(llama3, int8, 1) == HEAD + 256_512 == 1_050_929_664
    assert head_dequant_inference(llama3, fp8, 1) == 2 * HEAD == 2_101_346_304
    # bitsandbytes' 4-bit output layer takes gemv_4bit for one row
    assert head_dequant_inference(llama3, make_workload(**GEN, quant="nf4"), 1) == 0


def test_dequant_cast_bytes_per_format():
    wo = dict(mode="inference", quant_impl="torchao-wo")
    assert dequant_cast_bytes(make_workload(**wo, quant="int8"), 14_336, 4_096) == 0
    assert dequant_cast_bytes(make_workload(**wo, quant="fp8"), 14_336, 4_096) == 14_336 * 4_096 * 2


def test_gpt_fast_peak_grows_by_the_output_layer(llama3):
    for quant, extra in (("int8", 256_512), ("fp8", HEAD)):
        kernel = estimate(llama3, **GEN, quant=quant).breakdown
        wo = estimate(llama3, **GEN, quant=quant, quant_impl="torchao-wo").breakdown
        # the prefill's tail: the output layer's dequantized weight and the cast (fp8) or one row of logits
        # (int8), beside the final norm's output (6 x 4,096 bf16 = 49,152 B)
        assert wo["activations"] == HEAD + extra + 49_152
        assert kernel["activations"] == 818_688
        assert wo.peak_allocated - kernel.peak_allocated == HEAD + extra + 49_152 - 818_688
        assert wo.peak_phase == "prefill"


def test_float8_weight_only_quantizes_with_bf16_temporaries():
    # a (4,096 x 4,096) bf16 weight (32 MiB, segment S0). float8_weight_only's scale is bf16, so
    # input * scale.reciprocal() and its clamp are bf16 (32 MiB each: S1, S2); the fp8 weight (16 MiB) is best fit into
    # S1 once the product is freed; the scale and 1 / scale (8 KiB each) share a 2 MiB small segment. After empty_cache
    # S1 stays (16 MiB free) and the small segment (2 MiB - 8 KiB free)
    def replay(scale_bytes: int):
        ev = [("alloc", "w", 32 * MiB), *quantize_events("w", 4_096, 4_096, "fp8", 2, 128, scale_bytes),
              ("free", "w", 0), ("empty_cache", None, 0)]
        return simulate(ev, max_points=2)

    wo = replay(2)
    assert wo.peak_reserved_bytes == 3 * 32 * MiB + 2 * MiB
    assert wo.final_reserved_bytes - wo.final_allocated_bytes == 18 * MiB - 8_192 == 18_866_176
    # float8 dynamic activation's fp32 scale: 64 MiB temporaries, 48 MiB of slack
    dq = replay(4)
    assert dq.peak_reserved_bytes == 32 * MiB + 2 * 64 * MiB + 2 * MiB
    assert dq.final_reserved_bytes - dq.final_allocated_bytes == 50 * MiB - 16_384


@pytest.mark.parametrize(("kw", "message"), [
    (dict(quant="nf4", quant_impl="torchao-wo"),
     "quant_impl='torchao-wo' is torchao's int8_weight_only / float8_weight_only linear; quant='nf4' is not one of its "
     "formats: use --quant int8 or fp8, or drop --quant-impl"),
    (dict(mode="train", method="lora", quant="int8", quant_impl="torchao-wo"),
     "quant_impl='torchao-wo' is modelled for inference (in training each matmul would keep its dequantized weight "
     "for backward): use --mode inference, or drop --quant-impl"),
    (dict(quant="int8", quant_impl="eager"), "quant_impl='eager' is not one of: kernel, torchao-wo, exllama, cuda-old"),
])
def test_bad_weight_only_workloads(kw, message):
    with pytest.raises(ConfigError) as e:
        make_workload(**kw)
    assert message in str(e.value).split("\n")


def test_weight_only_is_ignored_without_its_formats():
    assert make_workload(quant_impl="torchao-wo").ignored() == [
        "ignored: quant_impl='torchao-wo' says how a quantized linear reads its weight, and none are quantized "
        "(use --quant int8 or fp8)"]
    assert make_workload(quant="int4", quant_impl="torchao-wo").ignored() == [
        "ignored: quant_impl='torchao-wo' with quant='int4': int4_weight_only's tinygemm kernel "
        "(_weight_int4pack_mm) reads the packed weight, nothing is dequantized"]
    # and int4 weights estimate the same either way
    spec = load_model("llama-3-8b")
    assert (estimate(spec, **GEN, quant="int4", quant_impl="torchao-wo").breakdown.peak_allocated
            == estimate(spec, **GEN, quant="int4").breakdown.peak_allocated)


def test_one_linear_of_torchao_int8_weight_only():
    """torchao's own Int8WeightOnlyConfig on one nn.Linear, called on fake tensors under the tracer's recorder: beyond
    the int8 weight and the input, the call holds the weight cast to bf16 (n x k x 2) and the matmul's output at
    once, the estimator's dequantized weight (dequant_cast_bytes 0: one cast) and output."""
    torch = pytest.importorskip("torch", reason="the tracer check needs torch")
    quantization = pytest.importorskip("torchao.quantization", reason="needs torchao")
    from torch._subclasses.fake_tensor import FakeTensorMode

    from vramlens.trace.recorder import Recorder

    n, k, t = 1_024, 768, 6
    with FakeTensorMode(allow_non_fake_inputs=True):
        lin = torch.nn.Linear(k, n, bias=False, dtype=torch.bfloat16)
        quantization.quantize_(lin, quantization.Int8WeightOnlyConfig(set_inductor_config=False))
        x = torch.empty(1, t, k, dtype=torch.bfloat16)
        rec = Recorder()
        with rec, torch.no_grad():
            rec.mark([lin.weight, x], "weights")
            y = lin(x)
        assert y.shape == (1, t, n) and y.dtype == torch.bfloat16
        events = rec.events()
    peak = peak_beyond(events, "weights")
    w = make_workload(mode="inference", quant="int8", quant_impl="torchao-wo")
    assert peak == round_up(2 * n * k, 512) + dequant_cast_bytes(w, n, k) + round_up(2 * t * n, 512) == 1_585_152


def test_the_prefill_copies_in_the_allocator_replay(llama3):
    """After --quantize-on-device's empty_cache, gpt-fast's eager prefill casts each weight to bf16 in module order
    (wqkv fused) and frees it, then the output layer's: replayed through the allocator simulator, the blocks' copies
    fit in the free remainders of the quantized weights' segments (no new reserve), and the output layer's takes a
    segment of its own, exactly its bytes; the estimate's reserved grows by at least that over the kernel run."""
    from vramlens.estimator.compiled import QKV
    from vramlens.estimator.ondevice import on_device_events

    w = make_workload(**GEN, quant="int8", quant_impl="torchao-wo", quantize_on_device=True)
    setup = on_device_events(llama3, w)
    prefill = []
    for layer in range(llama3.n_decoder_layers):
        mats = [t for t in llama3.tensors if t.layer == layer and len(t.shape) == 2]
        qkv = [t for t in mats if t.module in QKV]
        shapes = [(sum(t.out_features for t in qkv), qkv[0].in_features)]  # gpt-fast's wqkv
        shapes += [(t.out_features, t.in_features) for t in mats if t.module not in QKV]
        for i, (n, k) in enumerate(shapes):
            prefill += [("alloc", (layer, i), 2 * n * k), ("free", (layer, i), 0)]
    base = simulate(setup, max_points=2)
    blocks = simulate(setup + prefill, max_points=2)
    head = simulate(setup + prefill + [("alloc", "head", HEAD)], max_points=2)
    assert blocks.final_reserved_bytes == base.final_reserved_bytes
    assert head.final_reserved_bytes - base.final_reserved_bytes == HEAD == 1_050_673_152  # a multiple of 2 MiB
    kernel = estimate(llama3, **GEN, quant="int8", quantize_on_device=True).breakdown
    wo = estimate(llama3, **GEN, quant="int8", quant_impl="torchao-wo", quantize_on_device=True).breakdown
    assert wo.peak_reserved - kernel.peak_reserved >= HEAD
