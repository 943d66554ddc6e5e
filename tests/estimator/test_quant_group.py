"""--quant-group-size: the weights per scale of the group-wise formats (torchao's int4 tinygemm layout, GPTQ,
AWQ), checked against their arithmetic on Llama-2-7B's shapes (h 4,096, f 11,008, V 32,000, untied)."""

import pytest

from vramlens.errors import ConfigError
from vramlens.estimator import estimate
from vramlens.estimator.weights import quantized_linear_bytes
from vramlens.workload import make_workload


def test_int4_tinygemm_bytes_per_group_size():
    # torchao int4_weight_only: the packed weight n*k/2 = 8,388,608 B and scales_and_zeros (k/g, n, 2) bf16:
    # g=64: 64 x 4,096 x 2 x 2 = 1,048,576 B; g=128 (the default): 524,288 B
    assert quantized_linear_bytes(4_096, 4_096, "int4", 64) == 8_388_608 + 1_048_576 == 9_437_184
    assert quantized_linear_bytes(4_096, 4_096, "int4") == 8_388_608 + 524_288 == 8_912_896
    # GPTQ's qzeros (k/g, n/8) int32 and scales (k/g, n) fp16 follow the group too: g=64 on (11,008, 4,096):
    # qweight 4 x 512 x 11,008 = 22,544,384; qzeros 4 x 64 x 1,376 = 352,256; scales 2 x 64 x 11,008 = 1,409,024;
    # g_idx 4 x 4,096 = 16,384
    assert quantized_linear_bytes(11_008, 4_096, "gptq-4bit", 64) == 22_544_384 + 352_256 + 1_409_024 + 16_384


def test_int4_pads_out_to_8_and_in_to_1024():
    # torchao's TensorCoreTiledLayoutType.pre_process: Llama 2's down_proj (4,096 x 11,008) is quantized as
    # (4,096 x 11,264): packed 4,096 x 11,264 / 2 = 23,068,672 B; scales_and_zeros (176, 4,096, 2) bf16 = 2,883,584 B
    assert quantized_linear_bytes(4_096, 11_008, "int4", 64) == 23_068_672 + 2_883_584
    # a 1,000-row output layer becomes 1,000 (a multiple of 8); 1,001 rows become 1,008
    assert quantized_linear_bytes(1_001, 1_024, "int4", 64) == 1_008 * 1_024 // 2 + 16 * 1_008 * 4 == 580_608


def test_group_64_doubles_the_scales_of_every_quantized_linear(llama7b):
    inf = dict(mode="inference", quant="int4", quant_head=True, seq=6, new_tokens=200, cache="static")
    g128 = estimate(llama7b, **inf).breakdown["weights"]
    g64 = estimate(llama7b, **inf, quant_group_size=64).breakdown["weights"]
    # every linear's scales_and_zeros goes from 4nk/128 to 4nk/64 bytes: nk/32 more (all multiples of 512 B), with
    # down_proj's k = 11,008 padded to 11,264; sum of n*k over the blocks and the output layer:
    # 32 x (4 x 4,096^2 + 2 x 11,008 x 4,096 + 4,096 x 11,264) + 32,000 x 4,096 = 6,640,631,808
    assert g64 - g128 == 6_640_631_808 // 32 == 207_519_744
    assert estimate(llama7b, **inf, quant_group_size=128).breakdown["weights"] == g128


@pytest.mark.parametrize(("kw", "message"), [
    (dict(quant="int8", quant_group_size=64),
     "quant_group_size=64 applies to the group-wise formats (int4, gptq-4bit, awq-4bit, uint1..uint7, "
     "int4-sparse-marlin, w4a8-qqq); quant='int8' has none: "
     "drop --quant-group-size or use --quant int4"),
    (dict(quant_group_size=64),
     "quant_group_size=64 applies to the group-wise formats (int4, gptq-4bit, awq-4bit, uint1..uint7, "
     "int4-sparse-marlin, w4a8-qqq); quant=None has none: "
     "drop --quant-group-size or use --quant int4"),
    (dict(quant="int4", quant_group_size=-1),
     "quant_group_size=-1 must be 0 (the format's default, 128) or a whole number of weights >= 1"),
    (dict(quant="int4", quant_group_size=300_000), "quant_group_size=300000 is over the limit of 262,144 weights"),
])
def test_bad_group_sizes(kw, message):
    with pytest.raises(ConfigError) as e:
        make_workload(**kw)
    assert str(e.value) == message
