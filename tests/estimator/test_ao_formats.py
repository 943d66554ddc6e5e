"""torchao's other weight-only formats (fp6, uint1..uint7, int4-sparse-marlin, w4a8-qqq): the bytes of each layout on a
tiny linear, what a Llama-2-7B (h 4,096, f 11,008, V 32,000) holds, uintx's dequantized weight, and the refusals."""

import pytest
from _specs import llama_config

from vramlens.errors import ConfigError
from vramlens.estimator import estimate
from vramlens.estimator.activations import head_dequant_inference
from vramlens.estimator.weights import (
    dequant_cast_bytes,
    dequant_min_rows,
    dequantized_weight_bytes,
    format_refusal,
    format_takes,
    quantized_linear_bytes,
)
from vramlens.models import load_model
from vramlens.workload import make_workload


def test_fp6_bytes():
    # FpxTensorCoreAQTLayout: packed_fpx_data uint8 (256, 128 / 8 x 6) = 24,576 B; the fp16 per-row scale 2 x 256 = 512
    assert quantized_linear_bytes(256, 128, "fp6") == 24_576 + 512 == 25_088


def test_uint3_bytes():
    # UintxTensor splits 3 bits into a 2-bit and a 1-bit uint8 shard: 256 x 128 x 2 / 8 = 8,192 and 4,096 B; g=64:
    # 2 groups a row, the scale in the weight's dtype 2 x 2 x 256 = 1,024 and the int32 zero point 4 x 2 x 256 = 2,048
    assert quantized_linear_bytes(256, 128, "uint3", 64) == 8_192 + 4_096 + 1_024 + 2_048 == 15_360
    # an fp32 model keeps fp32 scales: 4 x 2 x 256 = 2,048
    assert quantized_linear_bytes(256, 128, "uint3", 64, 4) == 8_192 + 4_096 + 2_048 + 2_048 == 16_384


def test_int4_sparse_marlin_bytes():
    # n*k = 32,768: the 2:4 half packed eight 4-bit values an int32, n*k/4 = 8,192 B; meta n*k/16 int16 = 4,096 B;
    # g=128 (one group a row): the fp16 scale 2 x 256 = 512 and the bf16 zero point 2 x 256 = 512
    assert quantized_linear_bytes(256, 128, "int4-sparse-marlin", 128) == 8_192 + 4_096 + 512 + 512 == 13_312


def test_w4a8_qqq_bytes():
    # per output channel (group 0): the 4-bit weight n*k/2 = 16,384 B, no s_group, s_channel fp32 4 x 256 = 1,024
    assert quantized_linear_bytes(256, 128, "w4a8-qqq", 0) == 16_384 + 1_024 == 17_408
    # g=128 on k=256: 32,768 B packed, s_group fp16 (2, 256) = 1,024, s_channel 1,024
    assert quantized_linear_bytes(256, 256, "w4a8-qqq", 128) == 32_768 + 1_024 + 1_024 == 34_816
    # a group as long as the row is per channel (choose_qparams_and_quantize_affine_qqq: group_size < size_k only)
    assert quantized_linear_bytes(256, 128, "w4a8-qqq", 128) == 17_408


def test_fp6_skips_the_shapes_its_kernel_refuses(llama7b):
    # fpx_weight_only keeps a weight with in_features % 64 or out_features % 256 in high precision
    assert (format_takes("fp6", 4_864, 896, 0) and not format_takes("fp6", 896, 896, 0)
            and not format_takes("fp6", 256, 96, 0))
    fp16 = estimate(llama7b, mode="inference", dtype="fp16").breakdown["weights"]
    fp6 = estimate(llama7b, mode="inference", dtype="fp16", quant="fp6").breakdown["weights"]
    # every block linear of Llama 2 7B is taken: per layer the fp16 weights 4 x 33,554,432 + 3 x 90,177,536 =
    # 404,750,336 B become 4 x (12,582,912 + 8,192) + 2 x (33,816,576 + 22,016) + (33,816,576 + 8,192) = 151,866,368;
    # x 32 layers: 12,952,010,752 - 4,859,723,776
    assert fp16 - fp6 == 12_952_010_752 - 4_859_723_776 == 8_092_286_976


def test_uintx_dequantizes_every_call(llama7b):
    w = make_workload(mode="inference", quant="uint4", quant_head=True, seq=6, new_tokens=200, cache="static")
    assert dequant_min_rows(w) == 1
    # the largest block linear dequantized to bf16: 11,008 x 4,096 x 2
    assert dequantized_weight_bytes(llama7b, w) == 90_177_536
    # dequantize(): the unpacked uint8 and two int32 (n, k) at once, 9 B a weight, less the bf16 weight it returns
    assert dequant_cast_bytes(w, 256, 128) == 32_768 + 2 * 131_072 - 65_536 == 229_376
    # the output layer: 9 x 32,000 x 4,096 = 1,179,648,000 B at the peak of its dequantize (the logits are smaller)
    assert head_dequant_inference(llama7b, w, 6) == 1_179_648_000


@pytest.mark.parametrize(("kw", "message"), [
    (dict(mode="train", method="lora", quant="uint2"),
     "quant='uint2' is an inference format (torchao's tensor subclass has no backward): use --mode inference, or "
     "--method qlora for 4-bit training"),
    (dict(mode="inference", quant="fp6"),
     "quant='fp6' runs a kernel that takes fp16 activations only (torchao falls back to a dequantized weight, not "
     "modelled, with dtype=bf16): use --dtype fp16"),
    (dict(mode="inference", dtype="fp16", quant="int4-sparse-marlin", quant_group_size=256),
     "quant_group_size=256: quant='int4-sparse-marlin' takes a group of 32, 64, 128 weights (or 0, its default, "
     "128): use --quant-group-size 128"),
    (dict(mode="inference", dtype="fp16", quant="w4a8-qqq", quant_group_size=64),
     "quant_group_size=64: quant='w4a8-qqq' takes a group of 128 weights (or 0, per output channel): use "
     "--quant-group-size 128"),
])
def test_refused(kw, message):
    with pytest.raises(ConfigError) as e:
        make_workload(**kw)
    assert str(e.value) == message


def test_weights_match_the_gpt_fast_tables_model_sizes():
    """generate.py's model_size is get_model_size_in_bytes(model, ignore_embeddings=True) / 1e9 (torchao/utils.py):
    every quantized tensor's own bytes, the embedding left out; the tables print it to 2 decimals."""
    from vramlens.models.catalog import catalog_spec

    rows = [("llama-2-7b", dict(dtype="fp16", quant="fp6"), "4.96"), ("llama-3-8b", dict(dtype="fp16", quant="fp6"), "5.63"),
            ("llama-2-7b", dict(quant="uint4", quant_group_size=64), "3.92"),
            ("llama-2-7b", dict(quant="uint2", quant_group_size=8), "6.61"),
            ("llama-3-8b", dict(quant="uint4", quant_group_size=64), "4.46"),
            ("llama-3-8b", dict(quant="uint2", quant_group_size=8), "7.51"),
            ("llama-3-8b", dict(dtype="fp16", quant="int4-sparse-marlin"), "3.05"),
            ("llama-2-7b", dict(dtype="fp16", quant="w4a8-qqq"), "3.31"),
            ("llama-2-7b", dict(dtype="fp16", quant="w4a8-qqq", quant_group_size=128), "3.41")]
    for name, kw, size in rows:
        spec = catalog_spec(name)
        assert spec is not None
        weights = estimate(spec, mode="inference", quant_head=True, **kw).breakdown["weights"]
        embedding = spec.vocab_size * spec.hidden_size * 2  # V x h at 2 B
        assert f"{(weights - embedding) / 1e9:.2f}" == size, (name, kw)


def test_sparse_marlin_and_qqq_skip_what_their_group_does_not_divide():
    # int4_weight_only and int8_dynamic_activation_int4_weight return a weight with in_features % group_size unchanged
    assert not format_takes("int4-sparse-marlin", 4_160, 4_160, 128) and format_takes("int4-sparse-marlin", 4_160, 4_096, 128)
    assert not format_takes("w4a8-qqq", 4_096, 4_160, 128) and format_takes("w4a8-qqq", 4_096, 4_160, 0)
    spec = load_model(llama_config(hidden_size=4_160))
    fp16 = estimate(spec, mode="inference", dtype="fp16").breakdown["weights"]
    marlin = estimate(spec, mode="inference", dtype="fp16", quant="int4-sparse-marlin").breakdown["weights"]
    # h = 4,160 = 32.5 x 128: only down_proj (4,160 out, 11,008 in) is taken, the rest stays fp16. Its fp16
    # 4,160 x 11,008 x 2 = 91,586,560 B become n*k/4 = 11,448,320 + meta n*k/16 x 2 = 5,724,160 + the scale and the
    # zero point, 86 groups x 4,160 x 2 = 715,520 each, rounded to 715,776: 18,604,032; x 32 layers
    assert fp16 - marlin == 32 * (91_586_560 - 18_604_032) == 2_335_440_896


def test_format_refusal_conditions():
    assert format_refusal("uint2", 256, 100, 4) == "in_features % 8 == 0 (bitpacking.pack asserts it)"
    # a weight every format takes
    assert [format_refusal(q, 4_096, 4_096, g) for q, g in (("uint3", 64), ("int4-sparse-marlin", 128),
                                                            ("w4a8-qqq", 0))] == [None, None, None]
    # Sparse-Marlin's scale: 128 / 128 x 96 rows of 64 do not fit, 256 / 128 x 96 do
    assert format_refusal("int4-sparse-marlin", 96, 128, 128) == (
        "in_features / 128 x out_features % 64 == 0 (_to_marlin_scales' reshape of the scale raises RuntimeError)")
    assert format_refusal("int4-sparse-marlin", 96, 256, 128) is None
    # Marlin QQQ: (64, 128) divides (192, 128) though (128, 64) does not
    assert format_refusal("w4a8-qqq", 128, 192, 0) is None


OTHER = "use another --quant, such as int4 (its tinygemm layout pads in_features to a multiple of 1,024)"


@pytest.mark.parametrize(("over", "kw", "message"), [
    (dict(intermediate_size=11_000), dict(quant="uint4"),
     "quant='uint4': down_proj of llama is 4,096 out x 11,000 in, and torchao needs in_features % 64 == 0 (the group "
     "size; choose_qparams_affine asserts it): use --quant-group-size 8"),
    (dict(intermediate_size=11_004), dict(quant="uint4", quant_group_size=4),
     "quant='uint4': down_proj of llama is 4,096 out x 11,004 in, and torchao needs in_features % 8 == 0 "
     f"(bitpacking.pack asserts it): {OTHER}"),
    (dict(hidden_size=4_160), dict(dtype="fp16", quant="int4-sparse-marlin", quant_group_size=64),
     "quant='int4-sparse-marlin': q_proj of llama is 4,160 out x 4,160 in, and torchao needs in_features % 128 == 0 "
     "(MarlinSparseAQTLayout.from_plain raises ValueError): use --quant-group-size 128 (int4_weight_only then leaves "
     "such a layer in high precision)"),
    (dict(intermediate_size=11_024), dict(dtype="fp16", quant="int4-sparse-marlin"),
     "quant='int4-sparse-marlin': gate_proj of llama is 11,024 out x 4,096 in, and torchao needs out_features % 32 == "
     f"0 (sparse_semi_structured_from_dense_cutlass raises RuntimeError): {OTHER}"),
    (dict(intermediate_size=11_040), dict(dtype="fp16", quant="w4a8-qqq"),
     "quant='w4a8-qqq': gate_proj of llama is 11,040 out x 4,096 in, and torchao needs in_features % 64 == 0 and "
     "out_features % 128 == 0, or in_features % 128 == 0 and out_features % 64 == 0 (MarlinQQQAQTTensorImpl.from_plain's "
     f"thread_config raises ValueError): {OTHER}"),
])
def test_shapes_torchao_raises_on_are_refused(over, kw, message):
    with pytest.raises(ConfigError) as e:
        estimate(load_model(llama_config(**over)), mode="inference", **kw)
    assert str(e.value) == message
