"""The estimator on the decoder layouts of issue 11: sliding local/global blocks, latent attention, dense and MoE blocks.

Each figure is the arithmetic in its comment; the tracer cross-checks the same terms on shrunk models
(tests/trace/test_crosscheck.py).
"""

from __future__ import annotations

from vramlens.estimator import estimate
from vramlens.estimator.activations import inference_layer_peak, layer_activations, layer_kinds
from vramlens.estimator.kv_cache import decode_bytes, kv_bytes_per_token, kv_cache_bytes
from vramlens.models import load_model
from vramlens.workload import make_workload

BF16 = make_workload(mode="inference", dtype="bf16")


def test_mla_caches_the_latent():
    ds = load_model("deepseek-v3")
    # 61 layers x (kv_lora_rank 512 + qk_rope_head_dim 64) x 2 B, not 61 x 2 x 128 heads x 192 x 2 B
    assert kv_bytes_per_token(ds, BF16) == 61 * 576 * 2 == 70_272
    assert kv_cache_bytes(ds, BF16, tokens=4096, batch=2) == 70_272 * 4096 * 2
    # tensor parallelism does not split the latent (every rank keeps it)
    assert kv_bytes_per_token(ds, BF16, tp=8) == 70_272
    est = estimate(ds, mode="inference", dtype="bf16", seq=1024, new_tokens=16)
    assert "576 latent elements" in est.explain["kv_cache"]


def test_sliding_layers_keep_the_window_once_decoding():
    g = load_model("gemma-3-1b-it")  # 26 blocks, 22 local (window 512), 1 kv head x 256
    per_token_layer = 2 * 1 * 256 * 2  # K and V, bf16
    assert kv_cache_bytes(g, BF16, tokens=4096, batch=1) == per_token_layer * (4 * 4096 + 22 * 512)
    # right after prefill a local layer still holds the prompt (its window is a view of it)
    assert kv_cache_bytes(g, BF16, tokens=4096, batch=1, prefill=True) == per_token_layer * 26 * 4096


def test_decode_peak_holds_a_local_layers_old_prompt_on_the_first_step():
    g = load_model("gemma-3-1b-it")
    per_token_layer = 1024
    # first step after a 4096-token prompt: global blocks at 4097 tokens, local ones at their 512-token window,
    # plus one local block's old keys and values (the 4096-token prompt) while both torch.cat run
    first = per_token_layer * (4 * 4097 + 22 * 512) + per_token_layer * 4096
    last = per_token_layer * (4 * 4160 + 22 * 512) + max(per_token_layer // 2 * 4159, per_token_layer * 512)
    assert decode_bytes(g, BF16, prompt=4096, total=4160, batch=1) == max(first, last)
    # a model without windows: one layer's old keys beside the cache at the last step
    ll = load_model("llama-2-7b")
    pt = 2 * 32 * 128 * 2
    assert decode_bytes(ll, BF16, prompt=100, total=200, batch=1) == pt * 32 * 200 + pt // 2 * 199


def test_blocks_of_each_kind_are_counted_as_they_are():
    assert layer_kinds(load_model("deepseek-v3")) == ((0, 3), (3, 58))  # 3 dense blocks, then 58 MoE
    assert layer_kinds(load_model("gemma-3-1b-it")) == ((0, 22), (5, 4))  # local blocks, every 6th global
    assert layer_kinds(load_model("llama-2-7b")) == ((None, 32),)
    ds = load_model("deepseek-v3")
    w = make_workload(mode="train", dtype="bf16", batch=1, seq=4096)
    dense, moe = (layer_activations(ds, w, 1, 4096, layer=i).saved for i in (0, 3))
    assert dense != moe


def test_a_local_block_keeps_its_mask_when_the_window_is_shorter_than_the_sequence():
    g = load_model("gemma-3-1b-it")
    w = make_workload(mode="train", dtype="bf16", batch=1, seq=4096, attention="sdpa")
    local, glob = (layer_activations(g, w, 1, 4096, layer=i) for i in (0, 5))
    # the additive (1, 1, 4096, 4096) bf16 mask the memory-efficient kernel keeps; one kv head expands as a view
    assert local.saved - glob.saved == 2 * 4096 * 4096
    short = make_workload(mode="train", dtype="bf16", batch=1, seq=512, attention="sdpa")
    assert layer_activations(g, short, 1, 512, layer=0).saved == layer_activations(g, short, 1, 512, layer=5).saved


def test_mla_decode_rebuilds_keys_and_values_from_the_whole_cache():
    ds = load_model("deepseek-v3")
    a, nope, rope, v = 128, 128, 64, 128
    grow = inference_layer_peak(ds, BF16, 1, 1, 8192) - inference_layer_peak(ds, BF16, 1, 1, 4096)
    # kv_b_proj's output (S, a*(nope+v)) and the keys (a, S, nope+rope), 2 B each, for 4096 more keys
    assert grow == 2 * a * (nope + v + nope + rope) * 4096
