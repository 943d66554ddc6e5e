"""--quantize-on-device: torchao's gpt-fast flow (load in bf16 onto the GPU, quantize_ there, empty the cache), replayed
through the allocator simulator (vramlens.estimator.ondevice)."""

import pytest

from vramlens.allocator import simulate
from vramlens.errors import ConfigError
from vramlens.estimator import estimate
from vramlens.estimator.ondevice import on_device_events, on_device_quant, quantize_events
from vramlens.units import MiB
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
     "quantize_on_device replays torchao's quantize_ for int8, int4, fp8; quant='nf4': use --quant int8, int4 or fp8, "
     "or drop --quantize-on-device"),
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
