"""--quantize-on-device: torchao's gpt-fast flow (load in bf16 onto the GPU, quantize_ there, empty the cache), replayed
through the allocator simulator (vramlens.estimator.ondevice)."""

import pytest

from vramlens.allocator import simulate
from vramlens.errors import ConfigError
from vramlens.estimator import estimate
from vramlens.estimator.ondevice import (
    nf4_dequant_events,
    on_device_events,
    on_device_quant,
    quantize_events,
    to_nf4_events,
    torchtune_nf4_setup_events,
)
from vramlens.estimator.weights import torchao_nf4_dequant_temporaries
from vramlens.units import BLOCK, MiB, round_up
from vramlens.workload import make_workload

GEN = dict(mode="inference", seq=6, new_tokens=200, cache="static", max_cache_len=208, quant_head=True)


def test_one_int8_weight_keeps_a_temporary_segment():
    # a (4,096 x 4,096) bf16 weight, 32 MiB, its own segment S0; int8_weight_only's four bf16 temporaries (32 MiB
    # each, two alive at a time) take new segments S1 and S2 and alternate between them; the int8 weight (16 MiB) is
    # best fit into S1's free 32 MiB (split); the bf16 weight is freed. The scale (8 KiB bf16), the int64 zero point
    # (32 KiB) and 1 / scale share one 2 MiB small-pool segment. empty_cache returns S0 and S2; S1 stays with 16 MiB
    # free, the small segment with 2 MiB - 40 KiB
    ev = [("alloc", "w", 32 * MiB), *quantize_events("w", 4_096, 4_096, "int8", 2, 128), ("free", "w", 0),
          ("empty_cache", None, 0)]
    r = simulate(ev, max_points=2)
    assert r.peak_reserved_bytes == 3 * 32 * MiB + 2 * MiB
    assert r.final_reserved_bytes == 32 * MiB + 2 * MiB
    assert r.final_allocated_bytes == 16 * MiB + 8_192 + 32_768
    assert r.final_reserved_bytes - r.final_allocated_bytes == 18 * MiB - 40_960 == 18_833_408


def test_one_uint4_weight():
    # uintx_weight_only(torch.uint4, group_size=64) on a (4,096 x 4,096) bf16 weight (32 MiB): kept, the bf16 scale
    # (4,096 x 64 x 2 = 524,288 B), the int32 zero point (1,048,576 B) and the one 4-bit shard (4,096 x 2,048 uint8 =
    # 8,388,608 B); at the peak, the weight, the scale and zero point and two of the four bf16 (n, k) temporaries of
    # quantize_affine (1 / scale freed once the first exists): 32 + 0.5 + 1 + 2 x 32 MiB, as torchao's own functions
    # at b4d076813b record on CPU tensors
    ev = [("alloc", "w", 32 * MiB), *quantize_events("w", 4_096, 4_096, "uint4", 2, 64), ("free", "w", 0),
          ("empty_cache", None, 0)]
    r = simulate(ev, max_points=2)
    assert r.final_allocated_bytes == 524_288 + 1_048_576 + 8_388_608 == 9_961_472
    assert r.peak_allocated_bytes == 32 * MiB + 524_288 + 1_048_576 + 64 * MiB == 102_236_160


def test_one_fp6_weight():
    # fpx_weight_only(3, 2) on a (4,096 x 4,096) fp16 weight (32 MiB; n*k = 16 Mi): kept, the fp16 row scale (8,192 B)
    # and the packed (4,096, 3,072) uint8 (12 MiB); the peak is in _f32_to_fpx_unpacked at ``normal_x >> 21``'s cast:
    # the weight 32 MiB, the fp32 copy, the int32 sign and x ^ sign (3 x 64 MiB; the fp32 quotient was freed when
    # x ^ sign rebound x), three bool masks (3 x 16), the uint8 denormals (16), the int32 mant_odd (64), the shifted
    # int32 (64) and its uint8 (16): 432 MiB, as torchao's own functions at b4d076813b record on CPU tensors
    ev = [("alloc", "w", 32 * MiB), *quantize_events("w", 4_096, 4_096, "fp6", 2, 0), ("free", "w", 0),
          ("empty_cache", None, 0)]
    r = simulate(ev, max_points=2)
    assert r.final_allocated_bytes == 8_192 + 12_582_912
    assert r.peak_allocated_bytes == (32 + 3 * 64 + 3 * 16 + 16 + 64 + 64 + 16) * MiB + 8_192 == 452_993_024


def test_one_w4a8_qqq_weight():
    # Marlin QQQ per channel on a (4,096 x 4,096) fp16 weight (32 MiB; n*k = 16 Mi): kept, the packed int32
    # (256, 8,192) = 8 MiB and the fp32 s_channel (16,384 B); the peak is the int64 copy of the permuted weight made
    # beside the gather it is cast from: the weight 32, the clamped int32 q_w 64, w_ref (fp16, held by
    # from_hp_to_intx's ``_``) 32, the gathered int32 64 and its int64 128 MiB, with s_channel
    ev = [("alloc", "w", 32 * MiB), *quantize_events("w", 4_096, 4_096, "w4a8-qqq", 2, 0), ("free", "w", 0),
          ("empty_cache", None, 0)]
    r = simulate(ev, max_points=2)
    assert r.final_allocated_bytes == 8 * MiB + 16_384
    assert r.peak_allocated_bytes == (32 + 64 + 32 + 64 + 128) * MiB + 16_384 == 335_560_704


def test_one_sparse_marlin_weight():
    # int4_weight_only(layout_type=MarlinSparseLayoutType()) on a (4,096 x 4,096) fp16 weight (32 MiB; n*k = 16 Mi):
    # kept, the packed (256, 8,192) int32 (4 MiB), the int16 2:4 meta (2 MiB), the fp16 scale and the bf16 zero point
    # (4,096 x 32 x 2 = 262,144 B each). The peak is in _calculate_meta_reordering_scatter_offsets' last sum, with the
    # weight 32 MiB, the pruned weight 32, the int32 data 64, q_24 - zp transposed 64, the != 0 bools 16, five bool
    # expressions (5 x 4), the int64 idxs0 and idxs1 (2 x 32), two gathers (2 x 16) and their stack 32, the int64
    # meta_4 32, the int16 meta_n 8, meta and meta_reordered (2 x 2), seven int64 (n, k/16) offset tensors (7 x 8: the
    # rows, the columns, the columns' quotient and remainder, and the three products and sums alive at the last add)
    # and the two int8 corner masks (2 x 1), with the scale and zero point: 458.5 MiB, as torchao's own functions at 65d86c6c26 record on CPU
    # tensors (scripts/torchao_quantize_trace.py; the host-side int64 packing left out)
    ev = [("alloc", "w", 32 * MiB), *quantize_events("w", 4_096, 4_096, "int4-sparse-marlin", 2, 128), ("free", "w", 0),
          ("empty_cache", None, 0)]
    r = simulate(ev, max_points=2)
    assert r.final_allocated_bytes == 4 * MiB + 2 * MiB + 2 * 262_144 == 6_815_744
    assert r.peak_allocated_bytes == (32 + 32 + 64 + 64 + 16 + 20 + 64 + 32 + 32 + 32 + 8 + 4 + 56 + 2) * MiB \
        + 2 * 262_144 == 480_772_096


def test_gpt_fast_fuses_q_k_v(llama7b):
    w = make_workload(**GEN, quant="int8", quantize_on_device=True)
    loads = [e for e in on_device_events(llama7b, w) if e[0] == "alloc" and isinstance(e[1], str)]
    # the embedding, then layer 0's wqkv (3 x 4,096 x 4,096 bf16 = 96 MiB) where q_proj stood, then o_proj
    assert loads[0] == ("alloc", "model.embed_tokens.weight", 32_000 * 4_096 * 2)
    assert loads[1] == ("alloc", "model.layers.0.self_attn.q_proj.weight", 96 * MiB)
    assert loads[2] == ("alloc", "model.layers.0.self_attn.o_proj.weight", 32 * MiB)
    # the KV cache: 2 x 32 layers of (1, 32, 208, 128) bf16 = 1,703,936 B
    kv = [e for e in on_device_events(llama7b, w) if isinstance(e[1], tuple) and e[1][0] in ("k_cache", "v_cache")]
    assert len(kv) == 64 and {e[2] for e in kv} == {1_703_936}


def test_the_slack_is_added_to_reserved_only(llama7b):
    plain = estimate(llama7b, **GEN, quant="int8")
    od = estimate(llama7b, **GEN, quant="int8", quantize_on_device=True)
    slack = on_device_quant(llama7b, make_workload(**GEN, quant="int8", quantize_on_device=True))
    assert slack is not None and slack.slack_bytes > 0
    assert od.breakdown.peak_allocated == plain.breakdown.peak_allocated
    assert od.breakdown.peak_reserved == plain.breakdown.peak_reserved + slack.slack_bytes
    assert od.breakdown.device_total == plain.breakdown.device_total + slack.slack_bytes
    assert any(n.startswith("quantized on the GPU: ") for n in od.breakdown.notes)
    # the load itself peaks above the bf16 weights (12.55 GiB): one linear's temporaries on top
    assert slack.load_peak_bytes > 6_738_415_616 * 2


@pytest.mark.parametrize(("kw", "message"), [
    (dict(GEN, quant="nf4"),
     "quantize_on_device replays torchao's quantize_ for int8, int4, fp8, fp6, uint1..uint7, int4-sparse-marlin, "
     "w4a8-qqq; quant='nf4': use one of them, or drop --quantize-on-device"),
    (dict(GEN, quant="int8", cache="dynamic"),
     "quantize_on_device: gpt-fast preallocates its KV cache (setup_caches) before the cache is emptied; "
     "cache='dynamic': use --cache static"),
    (dict(GEN, quant="int8", gpus=2, tp=2),
     "quantize_on_device with gpus=2 is not modelled (one GPU: generate.py): drop --gpus or --quantize-on-device"),
    (dict(quant="int8", quantize_on_device="yes", cache="static"), "quantize_on_device='yes' must be true or false"),
])
def test_bad_on_device_workloads(kw, message):
    kw = dict(kw)
    on_device = kw.pop("quantize_on_device", True)
    with pytest.raises(ConfigError) as e:
        make_workload(**kw, quantize_on_device=on_device)
    assert message in str(e.value).split("\n")


# torchtune's 2024 QLoRA set-up (lora_finetune_single_device at 412a4ecd / fef3ed10, torchao's NF4 at 185236c82 / v0.1)
TT24_QLORA = dict(mode="train", method="qlora", nf4_impl="torchao", batch=2, seq=512, checkpointing="full",
                  lora_rank=8, lora_dtype="bf16", lora_targets=("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                             "down_proj"), quant_targets="adapted", attention="sdpa")


def test_to_nf4_of_one_weight():
    # a (4,096 x 4,096) bf16 weight, N = 16,777,216 (32 MiB). quantize_tensor_nearest's (N, 16) bf16 ``value - nf4``
    # and its abs (512 MiB each: the trace's sub.Tensor and abs.default of 536,870,912 B) are alive with the input,
    # ``blocks / scales`` (32 MiB), the block absmax (N / 64 bf16: 512 KiB), the kept quantization_factor (512 KiB),
    # quantized_scalers (256 KiB), scaler_mean and the nf4 table (512 B blocks each):
    # 32 + 32 + 512 + 512 MiB + 1,280 KiB + 1 KiB
    N = 4_096 * 4_096
    r = simulate([("alloc", "w", 2 * N), *to_nf4_events("w", N), ("free", "w", 0)], max_points=2)
    assert r.peak_allocated_bytes == 1_088 * MiB + 1_280 * 1_024 + 1_024 == 1_142_162_432
    # kept: quantized_data (N / 2 = 8 MiB), quantized_scalers (256 KiB), quantization_factor (512 KiB), two blocks
    assert r.final_allocated_bytes == 8 * MiB + 768 * 1_024 + 1_024 == 9_176_064


def test_nf4_dequantization_is_the_step_estimates():
    # get_original_weight's events peak at the stack: the step's dequantization temporaries plus the bf16 result
    N = 11_008 * 4_096
    r = simulate(nf4_dequant_events("out", N), max_points=2)
    assert r.peak_requested_bytes == torchao_nf4_dequant_temporaries(N, 2) + 2 * N == 632_651_776


def _live_bytes(ev):
    live = {}
    for action, key, size in ev:
        if action == "alloc":
            live[key] = round_up(size, BLOCK)
        else:
            live.pop(key, None)
    return sum(live.values())


def test_torchtune_2024_qlora_set_up(llama7b):
    w = make_workload(**TT24_QLORA, quantize_on_device=True)
    ev = torchtune_nf4_setup_events(llama7b, w)
    # the template block's 7 NF4 linears, 32 deep copies of each, 32 x 7 re-quantized from the checkpoint
    nf4 = [e for e in ev if e[0] == "alloc" and isinstance(e[1], tuple) and e[1][-1] == "quantized_data"]
    assert len(nf4) == 7 + 32 * 7 + 32 * 7
    r = simulate(ev, max_points=2)
    # the replayed reserve: 8,712 MiB. scripts/torchtune2024_qlora_trace.py, which runs torchtune's own code of
    # 412a4ecd (with torchao 185236c82) and fef3ed10 (torchao v0.1) under fake tensors and replays its events, reserves
    # 8,646 MiB after the build and 8,718 MiB after the load (8,860 MiB after two steps)
    assert r.peak_reserved_bytes == 8_712 * MiB
    # what stays allocated, per block: 4 attention NF4 weights of 9,176,064 B (quantized_data 8 MiB, quantized_scalers
    # 256 KiB, quantization_factor 512 KiB, scaler_mean and the table 512 B each) and 3 MLP ones of 24,658,944 B
    # (22,544,384 + 704,512 + 1,409,024 + 1,024); rank-8 bf16 adapters (4 x 131,072 + 3 x 241,664 = 1,249,280 B);
    # the fp32 rope cache (4,096 x 64 x 2 x 4 = 2 MiB); two norms (8 KiB each). Then the bf16 embedding and output
    # layer (2 x 262,144,000 B) and the final norm
    nf4_block = 4 * 9_176_064 + 3 * 24_658_944
    assert _live_bytes(ev) == 32 * (nf4_block + 1_249_280 + 2 * MiB + 2 * 8_192) + 2 * 262_144_000 + 8_192 \
        == 4_173_701_120
    plain = estimate(llama7b, **TT24_QLORA)
    od = estimate(llama7b, **TT24_QLORA, quantize_on_device=True)
    assert od.breakdown.peak_allocated == plain.breakdown.peak_allocated
    assert plain.breakdown.peak_reserved < r.peak_reserved_bytes == od.breakdown.peak_reserved
    assert od.breakdown.device_total == plain.breakdown.device_total + r.peak_reserved_bytes - \
        plain.breakdown.peak_reserved
    assert "quantized on the GPU (torchtune's 2024 QLoRA set-up): building, deep-copying and loading the NF4 weights " \
        "reserve 8.51 GiB, kept through training (no empty_cache): the peak reserved is at least that" \
        in od.breakdown.notes


@pytest.mark.parametrize(("kw", "message"), [
    (dict(TT24_QLORA, method="lora"),
     "quantize_on_device in training models torchtune's 2024 QLoRA set-up (torchao's NF4): use --method qlora "
     "--nf4-impl torchao, or drop --quantize-on-device"),
    (dict(TT24_QLORA, nf4_impl="bitsandbytes"),
     "quantize_on_device in training models torchtune's 2024 QLoRA set-up (torchao's NF4): use --method qlora "
     "--nf4-impl torchao, or drop --quantize-on-device"),
    (dict(TT24_QLORA, gpus=2, fsdp=True),
     "quantize_on_device in training with gpus=2 is not modelled (torchtune's single-device recipe): drop --gpus "
     "and --fsdp, or --quantize-on-device"),
])
def test_bad_training_on_device_workloads(kw, message):
    with pytest.raises(ConfigError) as e:
        make_workload(**kw, quantize_on_device=True)
    assert message in str(e.value).split("\n")
