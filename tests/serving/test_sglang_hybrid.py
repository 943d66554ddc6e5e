"""SGLang 0.5.2-0.5.4's pools for hybrid models (issue 15): the Gated DeltaNet branch of model_runner.py
(``is_hybrid_gdn``: max_mamba_cache_size x mamba_cache_per_req out of the pool, a cell over the full-attention
layers only, MambaPool with max_num_reqs + 1 slots), 0.5.4's radix-cache sizing (mamba_full_memory_ratio) and its
Nemotron-H (Mamba2), and the one-line refusals.

Qwen3-Next-80B-A3B's shape (tests/serving/test_hybrid_capacity.py) with --no-trace-fallback: the generic weights,
so the figures below pin SGLang's arithmetic from the weights vramlens gives, not the weights themselves.
"""

import json

import pytest
from test_hybrid_capacity import QWEN3_NEXT_80B

import vramlens
from vramlens.cli.main import main
from vramlens.errors import ConfigError, EngineRefusal

#: Nemotron-H's layout (Mamba2 "M", attention "*", MLP "-"): SGLang serves it from 0.5.4 (models/nemotron_h.py).
NEMOTRON_H = {"architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h", "hidden_size": 4096,
              "num_hidden_layers": 7, "hybrid_override_pattern": "M-M*-M-", "num_attention_heads": 32,
              "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 8192, "vocab_size": 1000,
              "max_position_embeddings": 8192, "mamba_num_heads": 128, "mamba_head_dim": 64, "ssm_state_size": 128,
              "n_groups": 8, "conv_kernel": 4}


def test_qwen3_next_tp2_h200_gdn_pools_worked_case():
    cap = vramlens.capacity(QWEN3_NEXT_80B, "sglang", gpu="H200-141GB", tp=2, trace_fallback=False)
    assert cap.accounting == ("SGLang 0.5.3, hybrid mamba pools (model_runner.py profile_max_num_token, "
                              "mem_cache/memory_pool.py MambaPool and HybridLinearKVPool)")
    # mamba_cache_per_req at tp 2: per linear layer conv (8,192 / 2 = 4,096, K - 1 = 3) x 2 B (bfloat16) = 24,576
    # + temporal (32 / 2 = 16, 128, 128) x 4 B (float32) = 1,048,576: 1,073,152 B; x 36 linear layers = 38,633,472
    per_req = 36 * (3 * 4_096 * 2 + 16 * 128 * 128 * 4)
    assert per_req == 38_633_472
    # cell over the 12 full-attention layers: max(1, 2 // 2) = 1 KV head x 256 x 12 x 2 (K, V) x 2 B = 12,288 B;
    # max_mamba_cache_size 512 (no --max-running-requests): rest = budget - weights - 512 x 38,633,472
    tokens = (cap.budget_bytes - cap.weights_bytes - 512 * per_req) // 12_288
    assert (cap.budget_bytes, cap.weights_bytes) == (135_924_560_166, 3_216_833_016)
    assert tokens == cap.kv_tokens == cap.figure("max_total_num_tokens") == 9_190_054  # 112,927,389,486 // 12,288
    assert cap.kv_bytes_per_token == 12_288
    # MambaPool: max_num_reqs + 1 = min(4,096, 512) + 1 = 513 slots beside the KV pool
    assert cap.kv_cache_bytes == 9_190_054 * 12_288 + 513 * per_req == 132_746_354_688
    assert cap.figure("max_mamba_cache_size") == 512
    # conv: 513 x 36 x 24,576 = 453,869,568 B = 0.4227 GiB; ssm: 513 x 36 x 1,048,576 = 19,365,101,568 B = 18.035 GiB
    assert (cap.figure("mamba_conv_state_size"), cap.figure("mamba_ssm_state_size")) == (0.42, 18.04)
    # K = V = 9,190,054 x 6,144 B = 56,464,691,776 B = 52.586 GiB
    assert (cap.figure("k_size"), cap.figure("v_size")) == (52.59, 52.59)
    # tp_worker: min(max_total_num_tokens // 2, req_to_token_pool.size 512)
    assert cap.figure("max_running_requests") == 512
    # at the 262,144-token context: 9,190,054 / 262,144 = 35.06 requests; 35 run
    assert (cap.max_running, round(cap.concurrency, 2)) == (35, 35.06)


def test_qwen3_next_mamba_slots_follow_max_running_requests_and_cap_concurrency():
    cap = vramlens.capacity(QWEN3_NEXT_80B, "sglang", gpu="H200-141GB", tp=4, context=65_536, trace_fallback=False,
                            max_running_requests=128, mamba_ssm_dtype="bfloat16")
    # max_mamba_cache_size = --max-running-requests 128; per linear layer at tp 4: conv 3 x 2,048 x 2 B = 12,288
    # + temporal (8, 128, 128) x 2 B = 262,144: 274,432 B; x 36 = 9,879,552 B per request
    per_req = 36 * (3 * 2_048 * 2 + 8 * 128 * 128 * 2)
    assert per_req == 9_879_552
    # cell: max(1, 2 // 4) = 1 KV head x 256 x 12 layers x 2 x 2 B = 12,288 B
    assert cap.kv_tokens == (cap.budget_bytes - cap.weights_bytes - 128 * per_req) // 12_288 == 10_666_904
    assert cap.kv_cache_bytes == 10_666_904 * 12_288 + 129 * per_req  # MambaPool: 128 + 1 slots
    assert (cap.figure("max_mamba_cache_size"), cap.figure("max_running_requests")) == (128, 128)
    # 10,666,904 / 65,536 = 162.8 requests' KV, but one mamba slot each: 128
    assert (cap.concurrency, cap.max_running) == (128, 128)
    # --max-mamba-cache-size under --max-running-requests: the request pool and the running cap follow it
    small = vramlens.capacity(QWEN3_NEXT_80B, "sglang", gpu="H200-141GB", tp=4, trace_fallback=False,
                              max_running_requests=128, max_mamba_cache_size=64)
    assert (small.figure("max_mamba_cache_size"), small.figure("max_running_requests")) == (64, 64)


def test_sglang_054_qwen3_next_sizes_the_mamba_pool_by_mamba_full_memory_ratio():
    cap = vramlens.capacity(QWEN3_NEXT_80B, "sglang", gpu="H200-141GB", tp=2, version="0.5.4", trace_fallback=False,
                            max_mamba_cache_size=64)
    per_req = 38_633_472  # as at 0.5.3 (configs/mamba_utils.py Mamba2CacheParams: the same shapes and dtypes)
    # the radix cache stays on: rest = 135,924,560,166 - 3,216,833,016 = 132,707,727,150 B; mamba memory
    # rest x 0.9 / 1.9 = 62,861,028,650 B // 38,633,472 = 1,627 slots (--max-mamba-cache-size 64 is not read)
    rest = cap.budget_bytes - cap.weights_bytes
    assert rest == 132_707_727_150
    assert cap.figure("max_mamba_cache_size") == 1_627
    # (132,707,727,150 - 1,627 x 38,633,472) // 12,288 = 69,851,068,206 // 12,288
    assert cap.kv_tokens == (rest - 1_627 * per_req) // 12_288 == 5_684_494
    # MambaPool: max_mamba_cache_size + 1 = 1,628 slots; max_num_reqs = min(4,096, 1,627 // 3) = 542
    assert cap.kv_cache_bytes == 5_684_494 * 12_288 + 1_628 * per_req
    assert cap.figure("max_running_requests") == 542


def test_sglang_054_nemotron_h_mamba2_worked_case():
    cap = vramlens.capacity(NEMOTRON_H, "sglang", gpu="H100-SXM-80GB", version="0.5.4", trace_fallback=False)
    # mamba2_cache_params at tp 1: conv dim = 128 x 64 + 2 x 8 groups x 128 = 10,240, conv (10,240, 3) x 2 B =
    # 61,440; temporal (128, 64, 128) x 4 B (float32) = 4,194,304; 3 Mamba2 layers: 3 x 4,255,744 = 12,767,232 B
    per_req = 3 * (10_240 * 3 * 2 + 128 * 64 * 128 * 4)
    assert per_req == 12_767_232
    # radix cache disabled (mamba2_config): max_mamba_cache_size 512; cell over the 1 attention layer:
    # 8 KV heads x 128 x 1 x 2 x 2 B = 4,096 B; budget int(0.835 x (CUDA's 85,045,477,376 - the 419,430,400 B context))
    assert (cap.budget_bytes, cap.weights_bytes) == (70_662_749_224, 2_040_136_702)
    # (70,662,749,224 - 2,040,136,702 - 512 x 12,767,232) // 4,096 = 62,085,789,738 // 4,096
    assert cap.kv_tokens == (cap.budget_bytes - cap.weights_bytes - 512 * per_req) // 4_096 == 15_157_663
    # MambaPool: max_mamba_cache_size + 1 = 513 slots: ssm 513 x 3 x 4,194,304 = 6,455,033,856 B = 6.01 GiB,
    # conv 513 x 3 x 61,440 = 94,556,160 B = 0.09 GiB
    assert cap.kv_cache_bytes == 15_157_663 * 4_096 + 513 * per_req == 68_635_377_664
    assert (cap.figure("mamba_ssm_state_size"), cap.figure("mamba_conv_state_size")) == (6.01, 0.09)
    assert (cap.figure("max_mamba_cache_size"), cap.figure("max_running_requests")) == (512, 512)


def test_sglang_053_falcon_h1_takes_the_gdn_pools_with_attention_and_mamba2_in_every_block():
    from test_hybrid_capacity import FALCON_H1

    cap = vramlens.capacity(FALCON_H1, "sglang", gpu="H100-SXM-80GB", trace_fallback=False)
    # 0.5.3 is_hybrid_gdn lists FalconH1ForCausalLM; configs/falcon_h1.py hybrid_gdn_params at tp 1: conv dim =
    # mamba_d_ssm 3,072 + 2 x 1 group x 256 = 3,584, conv (3,584, 3) x 2 B = 21,504; temporal (256, 128, 24) x 4 B =
    # 3,145,728; mamba in all 4 layers: 4 x 3,167,232 = 12,668,928 B per slot
    per_req = 4 * (3_584 * 3 * 2 + 256 * 128 * 24 * 4)
    assert per_req == 12_668_928
    # attention in all 4 layers too: cell 2 KV heads x 128 x 4 x 2 x 2 B = 4,096 B; radix cache off, 512 slots:
    # (70,662,749,224 - 534,774,784 - 512 x 12,668,928) // 4,096 = 63,641,483,304 // 4,096 (budget: CUDA's total)
    assert (cap.budget_bytes, cap.weights_bytes, cap.kv_bytes_per_token) == (70_662_749_224, 534_774_784, 4_096)
    assert cap.kv_tokens == 15_537_471
    assert cap.kv_cache_bytes == 15_537_471 * 4_096 + 513 * per_req == 70_140_641_280
    assert (cap.figure("max_mamba_cache_size"), cap.figure("max_running_requests")) == (512, 512)
    # 0.5.4's mamba2_config (FalconH1Config) keeps the radix cache off: the same pools
    again = vramlens.capacity(FALCON_H1, "sglang", gpu="H100-SXM-80GB", trace_fallback=False, version="0.5.4")
    assert (again.kv_tokens, again.kv_cache_bytes) == (cap.kv_tokens, cap.kv_cache_bytes)
    with pytest.raises(ConfigError) as e:
        vramlens.capacity(FALCON_H1, "sglang", gpu="H100-SXM-80GB", trace_fallback=False, version="0.5.2")
    assert str(e.value) == ("falcon_h1 is a hybrid model (4 attention and 4 mamba2 blocks): SGLang serves Falcon-H1 "
                            "from 0.5.3 (models/falcon_h1.py); pass --sglang-version 0.5.3 or later")


def test_sglang_refuses_hybrids_it_does_not_serve_in_one_line():
    with pytest.raises(ConfigError) as e:
        vramlens.capacity(NEMOTRON_H, "sglang", gpu="H100-80GB", trace_fallback=False)
    assert str(e.value) == ("nemotron_h is a hybrid model (1 attention and 3 mamba2 blocks): SGLang serves Nemotron-H "
                            "from 0.5.4 (models/nemotron_h.py); pass --sglang-version 0.5.4 or later")
    what = "qwen3_next is a hybrid model (12 attention and 36 gated_deltanet blocks): "
    with pytest.raises(ConfigError) as e:
        vramlens.capacity(QWEN3_NEXT_80B, "sglang", gpu="H200-141GB", tp=2, version="0.5.1", trace_fallback=False)
    assert str(e.value) == what + ("SGLang 0.5.1 has no hybrid Gated DeltaNet model (models/qwen3_next.py and the "
                                   "mamba pool arrive in 0.5.2): pass --sglang-version 0.5.2 or later")
    with pytest.raises(ConfigError) as e:
        vramlens.capacity(QWEN3_NEXT_80B, "sglang", gpu="H200-141GB", tp=2, version="0.5.5", trace_fallback=False)
    assert str(e.value) == what + ("vramlens follows SGLang's hybrid pools as 0.5.2 to 0.5.4 size them; 0.5.5 is not "
                                   "read for hybrids: pass --sglang-version 0.5.4")


def test_sglang_hybrid_settings_it_does_not_follow_are_refused_together():
    with pytest.raises(ConfigError) as e:
        vramlens.capacity(QWEN3_NEXT_80B, "sglang", gpu="H200-141GB", tp=3, pp=2, trace_fallback=False,
                          mamba_ssm_dtype="float16")
    assert str(e.value) == (
        "pp=2: pipeline parallelism of a hybrid model is not modelled for SGLang (HybridLinearKVPool takes every "
        "full-attention layer): use --tp; "
        "linear_num_value_heads 32, conv dim 8192 not divisible by tensor parallel size 3 (SGLang's "
        "hybrid_gdn_params, Mamba2StateShape.create from 0.5.4, divides them over the ranks): choose another --tp; "
        "mamba_ssm_dtype='float16' is not one of float32, bfloat16 (SGLang --mamba-ssm-dtype)")


def test_the_cli_prints_the_mamba_pool_and_refuses_with_exit_2(tmp_path, capsys):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(QWEN3_NEXT_80B))
    assert main(["capacity", str(cfg), "--engine", "sglang", "--gpu", "H200-141GB", "--tp", "2",
                 "--max-mamba-cache-size", "64", "--no-trace-fallback"]) == 0
    out = capsys.readouterr().out
    assert "  max_mamba_cache_size: 64\n" in out
    # 65 slots x 36 x 1,048,576 B = 2,453,667,840 B = 2.285 GiB
    assert "  ssm_state size (GB = GiB): 2.29\n" in out
    assert main(["capacity", str(cfg), "--engine", "sglang", "--gpu", "H200-141GB", "--tp", "2",
                 "--sglang-version", "0.5.1", "--no-trace-fallback"]) == 2
    assert capsys.readouterr().err == (
        f"error: {tmp_path.name} is a hybrid model (12 attention and 36 gated_deltanet blocks): SGLang 0.5.1 has no "
        "hybrid Gated DeltaNet model (models/qwen3_next.py and the mamba pool arrive in 0.5.2): pass "
        "--sglang-version 0.5.2 or later\n")


NEXTN = dict(speculative_algorithm="NEXTN", speculative_num_steps=3, speculative_eagle_topk=1,
             speculative_num_draft_tokens=4)  # the Qwen3-Next model card's SGLang flags


def test_sglang_054_nextn_on_qwen3_next_counts_the_intermediate_caches():
    """0.5.4 handle_max_mamba_cache divides the mamba share by (1 + num_draft_tokens); MambaPool keeps 4 intermediate
    ssm states and conv windows per slot; the draft worker's HybridLinearKVPool holds one attention layer."""
    cap = vramlens.capacity(QWEN3_NEXT_80B, "sglang", gpu="H200-141GB", tp=2, version="0.5.4", trace_fallback=False,
                            mem_fraction_static=0.8, **NEXTN)
    assert cap.figure("max_mamba_cache_size") == 286  # int(rest x 0.9 / 1.9 // 38,633,472 // (1 + 4))
    assert cap.figure("max_running_requests") == 48  # server_args: 48 with speculative decoding; 286 // 3 = 95
    # per slot: 36 layers x (conv 3 x 4,096 x 2 B + ssm 16 x 128 x 128 x 4 B) = 36 x 1,073,152 = 38,633,472 B;
    # 287 slots x 4 draft tokens x 36 x 1,048,576 B = 43,336,400,896 B = 40.36 GiB
    assert cap.figure("mamba_intermediate_ssm_size") == 40.36
    # 287 x 4 x 36 x 24,576 B = 1,015,676,928 B = 0.95 GiB
    assert cap.figure("mamba_intermediate_conv_size") == 0.95
    tokens = cap.figure("max_total_num_tokens")
    assert cap.draft_kv_cache_bytes == tokens * 1_024  # one layer: 2 x 1 kv head x 256 x 2 B
    # target pool (12 layers x 1,024 B) + draft pool + 287 slots x 38,633,472 B x (1 + 4)
    assert cap.kv_cache_bytes == tokens * 12_288 + tokens * 1_024 + 287 * 38_633_472 * 5
    # the MTP layer: its full-attention block / 2 + fc 2 x 2,048 x 2,048 x 2 B on every rank (nn.Linear) + 3 norms
    # 2,048 x 2 B: 50,335,755 + 16,777,216 + 12,288 (the block, 100,671,509 B, is --no-trace-fallback's generic one)
    assert cap.draft_weights_bytes == 67_125_259
    # a draft path of the model itself is its MTP layer too (configs/model_config.py: Qwen3NextForCausalLMMTP)
    same = vramlens.capacity(QWEN3_NEXT_80B, "sglang", gpu="H200-141GB", tp=2, version="0.5.4", trace_fallback=False,
                             mem_fraction_static=0.8, speculative_draft_model_path=QWEN3_NEXT_80B, **NEXTN)
    assert same.draft_weights_bytes == 67_125_259


def test_sglang_053_intermediate_caches_come_out_of_the_reserve():
    """0.5.3 profiles the mamba pool without them (48 slots x 38,633,472 B), then allocates 49 slots x 4 of them:
    with the default mem_fraction_static the draft worker's pool and those caches overflow the reserve."""
    with pytest.raises(EngineRefusal) as e:
        vramlens.capacity(QWEN3_NEXT_80B, "sglang", gpu="H200-141GB", tp=2, version="0.5.3", trace_fallback=False,
                          **NEXTN)
    # 49 x 4 x 38,633,472 B = 7,572,160,512 B = 7.05 GiB
    assert str(e.value) == (
        "CUDA out of memory: the draft worker does not fit (SGLang 0.5.3, NEXTN: draft weights 0.06 GiB + its KV pool "
        "9.98 GiB + the target pool's speculative headroom 0.00 GiB + the mamba pool's intermediate caches 7.05 GiB > "
        "the 15.23 GiB left by mem_fraction_static=0.891): lower --mem-fraction-static")
    cap = vramlens.capacity(QWEN3_NEXT_80B, "sglang", gpu="H200-141GB", tp=2, version="0.5.3", trace_fallback=False,
                            mem_fraction_static=0.8, **NEXTN)
    assert cap.figure("max_mamba_cache_size") == 48  # max_running_requests, 48 with speculative decoding
    assert cap.figure("mamba_intermediate_ssm_size") == 6.89  # 49 x 4 x 36 x 1,048,576 B = 7,398,752,256 B


def test_sglang_speculative_on_a_hybrid_refusals():
    with pytest.raises(ConfigError) as e:
        vramlens.capacity(QWEN3_NEXT_80B, "sglang", gpu="H200-141GB", tp=2, version="0.5.4", trace_fallback=False,
                          speculative_algorithm="NGRAM")
    assert str(e.value) == (
        "speculative decoding on a hybrid model is modelled for SGLang's NEXTN / EAGLE with the model's own MTP "
        "layers (Qwen3NextForCausalLMMTP) only: NGRAM is not read: use --speculative-algorithm NEXTN")
    with pytest.raises(ConfigError) as e:
        vramlens.capacity(NEMOTRON_H, "sglang", gpu="H200-141GB", version="0.5.4", trace_fallback=False,
                          speculative_algorithm="NEXTN")
    assert str(e.value) == (
        "speculative decoding on a mamba2 hybrid is not modelled for SGLang (read for Qwen3-Next's Gated DeltaNet "
        "with its MTP layers only): drop --speculative-algorithm")
