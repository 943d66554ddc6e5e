"""Each engine's start-up arithmetic on worked cases, the integers written out as the engine computes them."""

from __future__ import annotations

import pytest

import vramlens
from vramlens.errors import ConfigError, EngineRefusal, InputError
from vramlens.serving import capacity

GiB = 1024**3
A100 = 85_100_068_864          # A100-80GB: CUDA's total (deviceQuery 81,158 MiB; nvidia-smi 81,920 MiB less 763 reserved)
CONTEXT = 419_430_400          # CUDA 12 lazy-loading context, 400 MiB (hardware/runtime.py)
LLAMA2_7B_FP16 = 13_476_832_256  # 6,738,415,616 params x 2 B, each tensor rounded up to 512 B (+1,024 B)


LLAMA2_7B_ROPE = 4_096 * 128 * 2  # rotary cos/sin cache: max_position x rotary_dim x 2 B = 1,048,576
REQUESTED = 76_590_061_977       # int(0.9 x 85,100,068,864)


def test_vllm_0_6_4_llama2_7b_a100():
    # V0 0.6.4: available = 0.9 x total - weights - activation peak - non-torch (CUDA context counted)
    #   weights 13,476,832,256 + rotary cache 1,048,576 = 13,477,880,832
    #   T = max_num_batched_tokens = max(4096, 2048) = 4096, 256 sequences, b = 2 B:
    #     forward T b (2h + max(3f, (a + 2kv) d)) = 4096 x 2 x (8,192 + 33,024) = 337,641,472
    #     sampler (sort) 256 x 32,000 x (2 + 36) + hidden 4096 x 4096 x 2 = 311,296,000 + 33,554,432 = 344,850,432
    #   available = 76,590,061,977 - 13,477,880,832 - 344,850,432 - 419,430,400 = 62,347,900,313
    # page = 2 x 16 x 32 kv heads x 128 x 2 B = 262,144 per layer; blocks = 62,347,900,313 // 262,144 // 32 = 7,432
    # (7,518 from nvidia-smi's 85,899,345,920 B: the driver's 763 MiB reserve is 86 blocks)
    cap = capacity("llama-2-7b", "vllm", gpu="A100-80GB", context=4096, version="0.6.4")
    assert cap.weights_bytes == LLAMA2_7B_FP16 + LLAMA2_7B_ROPE
    assert round(cap.weights_bytes / GiB, 2) == 12.55
    assert cap.activation_bytes == 344_850_432
    assert cap.non_torch_bytes == CONTEXT
    assert cap.figure("num_gpu_blocks") == 7_432
    assert cap.kv_tokens == cap.figure("gpu_kv_cache_tokens") == 7_432 * 16
    assert cap.kv_cache_bytes == 7_432 * 262_144 * 32
    assert cap.figure("max_concurrency") == round(7_432 / 256, 2)  # 4096 / 16 = 256 blocks per request
    assert cap.max_running == 29
    assert cap.cuda_graph_bytes > 0
    assert cap.accounting.startswith("vLLM 0.6.4 (V0 engine)")


def test_vllm_0_19_llama2_7b_a100():
    # V1 0.19 on a >= 70 GiB GPU: max_num_batched_tokens 8192, max_num_seqs 1024; the context is in the
    # init snapshot, so non-torch is what loads after it: at tp 1 the lazily loaded kernels, 697 - 400 MiB =
    # 311,427,072; the sampler has no sort, and the first GEMM allocates cuBLAS's workspace (A100: 8,519,680):
    #   forward 8192 x 2 x 41,216 = 675,282,944; sampler 1024 x 32,000 x (2 + 12) + 8192 x 4096 x 2 = 525,860,864
    #   activation 675,282,944 + 8,519,680 = 683,802,624
    #   available = 76,590,061,977 - 13,477,880,832 - 683,802,624 - 311,427,072 = 62,116,951,449
    #   -> // 262,144 // 32 = 7,404
    cap = capacity("llama-2-7b", "vllm", gpu="A100-80GB", context=4096)
    assert cap.activation_bytes == 683_802_624
    assert cap.non_torch_bytes == 311_427_072
    assert cap.figure("num_gpu_blocks") == 7_404
    assert cap.accounting.startswith("vLLM 0.19.0 (V1 engine)")


def test_vllm_releases_differ_where_the_code_does():
    from vramlens.hardware.catalog import get_gpu
    from vramlens.serving.vllm import vllm_release

    a100, t4 = get_gpu("A100-80GB"), get_gpu("T4")
    assert vllm_release((0, 6, 4), a100).context_in_budget          # total - free - torch allocated
    assert not vllm_release((0, 6, 5), a100).context_in_budget      # memory_profiling's baseline snapshot
    assert vllm_release((0, 8, 2), a100).v1 and vllm_release((0, 8, 2), a100).context_in_budget
    assert not vllm_release((0, 8, 2), t4).v1                       # "Compute Capability < 8.0 ... Falling back to V0"
    assert not vllm_release((0, 8, 2), t4).context_in_budget
    assert not vllm_release((0, 9, 2), a100).context_in_budget
    assert not vllm_release((0, 8, 2), a100, use_v1=False).v1
    assert vllm_release((0, 11, 0), a100).sampler == "sort"
    assert vllm_release((0, 19, 0), a100).sampler == "triton"


def test_vllm_rotary_cache_is_in_the_weights():
    # Llama 3.1 8B: 131,072 positions x 128 x 2 B = 33,554,432 B on top of 16,060,523,520 B of parameters
    # (8,030,261,248 x 2 B, each tensor rounded up to 512 B): "Model loading took 14.99 GiB" (vLLM 0.19)
    # where the parameters alone are 14.96 GiB
    cap = capacity("llama-3.1-8b", "vllm", gpu="80GiB", max_model_len=8192)
    assert cap.weights_bytes == 16_060_523_520 + 33_554_432
    assert round(cap.weights_bytes / GiB, 2) == 14.99


def test_vllm_fp8_cache_doubles_the_blocks_and_eager_drops_graphs():
    base = capacity("llama-2-7b", "vllm", gpu="A100-80GB")
    fp8 = capacity("llama-2-7b", "vllm", gpu="A100-80GB", kv_cache_dtype="fp8", enforce_eager=True)
    # page 131,072 B: 62,116,951,449 // 131,072 // 32 = 14,809
    assert fp8.figure("num_gpu_blocks") == 14_809
    assert base.figure("num_gpu_blocks") == 7_404
    assert fp8.cuda_graph_bytes == 0


def test_vllm_float32_doubles_weights_and_cache():
    cap = capacity("llama-2-7b", "vllm", gpu="A100-80GB", dtype="float32")
    # twice the fp16 bytes less the 1,024 B that rounding two odd-sized fp16 tensors to 512 B added
    assert cap.weights_bytes == 2 * (LLAMA2_7B_FP16 + LLAMA2_7B_ROPE) - 1_024
    assert cap.kv_bytes_per_token == 2 * 32 * 128 * 4 * 32


def test_vllm_tp2_splits_weights_and_heads():
    # weights / 2 (the rotary cache whole on each rank); the KV page halves (16 kv heads); NCCL buffers count
    cap = capacity("llama-2-7b", "vllm", gpu="A100-80GB", tp=2)
    assert cap.gpus == 2
    assert cap.weights_bytes == LLAMA2_7B_FP16 // 2 + LLAMA2_7B_ROPE
    assert cap.non_torch_bytes > 0
    assert cap.kv_bytes_per_token == 2 * 16 * 128 * 2 * 32


def test_vllm_awq_weights_use_the_estimator_formula():
    awq = capacity("llama-2-7b", "vllm", gpu="A100-80GB", quantization="awq")
    assert awq.weights_bytes < LLAMA2_7B_FP16 * 0.35  # 4-bit blocks, fp16 embedding and lm_head
    assert awq.figure("num_gpu_blocks") > 7_528


def test_vllm_hybrid_sliding_window_groups():
    # Gemma 2 9B: 42 layers, 21 sliding (window 4096), 8 kv heads x 256. 21 full + 21 sliding: group size 21,
    # 2 groups sharing 21 tensors; page = 2 x 16 x 8 x 256 x 2 = 131,072 B.
    # A request of 8192 tokens: full 8192 / 16 = 512 blocks, sliding cdiv(min(4095 + 8192, 8192), 16) + 1 = 513.
    cap = capacity("gemma-2-9b", "vllm", gpu="H100-SXM-80GB", max_model_len=8192)
    blocks = cap.figure("num_gpu_blocks")
    assert cap.kv_tokens == blocks // 2 * 16
    assert cap.figure("max_concurrency") == round(blocks / (512 + 513), 2)
    assert cap.kv_cache_bytes == blocks * 131_072 * 21


def test_mla_engines_cache_the_latent():
    # DeepSeek-V2-Lite: 27 layers of multi-head latent attention, kv_lora_rank 512 + qk_rope_head_dim 64.
    # vLLM AttentionSpec.page_size_bytes with use_mla: 1 x 16 tokens x 1 head x 576 x 2 B = 18,432 B per layer
    # (per-head K and V would be 2 x 16 x 16 heads x 192 x 2 B = 196,608 B); the latent is the same on every rank.
    for tp in (1, 2):
        cap = capacity("deepseek-v2-lite", "vllm", gpu="H100-SXM-80GB", tp=tp, max_model_len=8192)
        assert cap.kv_bytes_per_token == 576 * 2 * 27
        assert cap.kv_cache_bytes == cap.figure("num_gpu_blocks") * 18_432 * 27
    sg = capacity("deepseek-v2-lite", "sglang", gpu="H100-SXM-80GB", context=8192)
    assert sg.kv_bytes_per_token == 576 * 2 * 27  # MLATokenToKVPool: one latent buffer per layer
    assert sg.figure("v_size") == 0 and sg.figure("k_size") == round(sg.kv_cache_bytes / GiB, 2)
    hf = capacity("deepseek-v2-lite", "transformers", gpu="H100-SXM-80GB", context=4096)
    assert hf.kv_bytes_per_token == 576 * 2 * 27  # DynamicCache keeps the latent too (transformers >= 5)


def test_sglang_llama2_7b_a100():
    # SGLang 0.4: total_gpu_memory = 85,100,068,864 (CUDA's total) - 419,430,400 (context) = 84,680,638,464
    #   load = parameters 13,476,832,256 + fp32 rotary cache 4,096 x 128 x 4 = 2,097,152 + segments 20,439,040
    #   (the cache's 2 MiB request opens a 20 MiB segment, 18 MiB of it never used: 18,874,368; the 65 norms of
    #   8,192 B share one 2 MiB small segment: 2,097,152 - 532,480 = 1,564,672)
    #   rest = int(0.88 x 84,680,638,464) - load = 74,518,961,848 - 13,499,368,448 = 61,019,593,400
    #   cell = 32 kv heads x 128 x 32 layers x 2 x 2 B = 524,288; max_total_num_tokens = 116,385
    #   max_num_reqs = min(max(116,385 / 4096 x 512, 2048), 4096) = 4096; max_running_requests =
    #   min(116,385 // 2, ReqToTokenPool size 4096 + 1) = 4097 (0.4.3.post4 tp_worker.py)
    cap = capacity("llama-2-7b", "sglang", gpu="A100-80GB", version="0.4.3.post4")
    assert cap.weights_bytes == 13_499_368_448
    assert cap.figure("max_total_num_tokens") == 116_385 == cap.kv_tokens
    assert cap.figure("mem_fraction_static") == 0.88
    assert cap.figure("max_running_requests") == 4_097
    # the request-to-token table: 4097 rows x (4096 + 4) int32 = 67,190,800 B = 0.06 GiB, out of the reserve
    assert "the request-to-token table (4,097 x 4,100 int32) takes 0.06 GiB" in " ".join(cap.notes)
    assert cap.kv_bytes_per_token == 524_288


def _qwen32b_two_layers(**kw):
    # Qwen2.5-32B's shapes with 2 layers: h 5,120, 40 heads and 8 kv heads of 128, ffn 27,648, vocab 152,064
    from vramlens.serving.common import ServedModel

    args = dict(name="q", n_layers=2, n_heads=40, n_kv_heads=8, head_dim=128, hidden=5_120, ffn=27_648,
                vocab=152_064, max_position=131_072, rope_scaled=False, n_sliding=0, sliding_window=None,
                params=0, active_params=0, dtype="bf16", layer_bytes=(0, 0), embed_bytes=152_064 * 5_120 * 2,
                head_bytes=152_064 * 5_120 * 2 + 10_240, rotary_dim=128, weights_format="bf16")
    return ServedModel(**{**args, **kw})


def test_sglang_parameter_segments_worked_case():
    # tp 4, bf16, in SGLang's order (MiB): embedding 38,016 x 5,120 x 2 = 371.25 -> segment 372 (0.75 left: not
    # split, <= 1 MiB); layer 0: qkv (10 + 2 x 2) x 128 x 5,120 x 2 = 17.5 -> 18; o_proj 12.5 -> 14 (1.5 split off,
    # too small for what follows); rotary freqs, cos, sin 131,072 x 64 x 4 = 32 each (3 segments), the kept fp32 cache
    # 64 -> 64, the three freed; gate_up 2 x 6,912 x 5,120 x 2 = 135 -> 136 (1 left: not split); down 67.5 -> 68;
    # two norms of 10,240 B -> one 2 MiB small segment; layer 1: qkv 17.5 into a freed 32 (14.5 left), o_proj 12.5
    # into those 14.5, gate_up 136, down 68; final norm (small segment); lm_head 372. empty_cache releases the two
    # other 32s. Reserved 372 + 18 + 14 + 64 + 136 + 68 + 2 + 32 + 136 + 68 + 372 = 1,282 MiB; requested
    # 2 x 371.25 + 17.5 x 2 + 12.5 x 2 + 64 + 135 x 2 + 67.5 x 2 = 1,271.5 MiB + 5 norms x 10,240 B
    from vramlens.serving.sglang import param_segment_bytes

    assert param_segment_bytes(_qwen32b_two_layers(), 4, 1) == 10_485_760 + 524_288 - 51_200 == 10_958_848
    # a tied head: no lm_head, its segment's 0.75 MiB goes too
    assert param_segment_bytes(_qwen32b_two_layers(head_bytes=10_240), 4, 1) == 10_958_848 - 786_432
    # layouts it does not model
    assert param_segment_bytes(_qwen32b_two_layers(n_experts=8), 4, 1) is None
    assert param_segment_bytes(_qwen32b_two_layers(weights_format="awq-4bit"), 4, 1) is None


def test_sglang_parameter_segments_agree_with_the_analytic_packing():
    # without the rotary cache's freed temporaries the replay is a sequence of kept allocations, which
    # vramlens.allocator.persistent_reserved packs by the same rules without a simulator
    from vramlens.allocator import persistent_reserved
    from vramlens.serving.sglang import param_segment_bytes

    m = _qwen32b_two_layers(rotary_dim=0)
    layer = [1_792 * 5_120 * 2, 5_120 * 1_280 * 2, 2 * 6_912 * 5_120 * 2, 5_120 * 6_912 * 2, 10_240, 10_240]
    sizes = [38_016 * 5_120 * 2, *layer, *layer, 10_240, 38_016 * 5_120 * 2]
    assert param_segment_bytes(m, 4, 1) == persistent_reserved(sizes) - sum(sizes) > 0


def test_sglang_load_keeps_the_rotary_cache_in_fp32_on_cuda():
    # layers/rotary_embedding.py (0.4.2.post1 to 0.4.9.post2): cast to the model dtype only without torch.version.cuda
    from vramlens.hardware.catalog import get_gpu
    from vramlens.serving.sglang import load_bytes

    m = _qwen32b_two_layers()
    assert load_bytes(m, get_gpu("L4"), 4, 1).rope_cache == 131_072 * 128 * 4
    assert load_bytes(m, get_gpu("24GB"), 4, 1).rope_cache == 131_072 * 128 * 4  # a GPU by size: taken as CUDA
    assert load_bytes(m, get_gpu("MI300X"), 4, 1).rope_cache == 131_072 * 128 * 2
    assert load_bytes(m, get_gpu("L4"), 4, 1).segments == 10_958_848


def test_sglang_tp_picks_its_default_fraction():
    assert capacity("llama-2-7b", "sglang", gpu="A100-80GB", tp=4,
                    version="0.4.5").figure("mem_fraction_static") == 0.85
    # 0.5.2 on nvidia-smi's 81,920 MiB: round((81,920 - (9.5 + 4 / 2) x 1,024) / 81,920, 3) = 0.856; 0.5.3:
    # reserved 512 + 1.5 x 8,192 + 2 x 512 (cuda_graph_max_bs at tp 4) + 4 / 8 x 1,024 = 14,336 MiB -> 0.825
    assert capacity("llama-2-7b", "sglang", gpu="A100-80GB", tp=4,
                    version="0.5.2").figure("mem_fraction_static") == 0.856
    assert capacity("llama-2-7b", "sglang", gpu="A100-80GB", tp=4).figure("mem_fraction_static") == 0.825


def test_sglang_small_gpu_chunked_prefill_reads_nvidia_smi_mib():
    # server_args.py (0.4.2.post1-0.4.7): chunked_prefill_size 2048 when nvidia-smi's memory.total < 25,000 MiB:
    # the RTX 3090 and 4090 (24,576 and 24,564 MiB, 25.8e9 B) are under it, as the RTX 3090 log's
    # chunked_prefill_size=2048 shows
    for gpu in ("RTX-3090", "RTX-4090", "L4"):
        assert capacity("qwen2.5-1.5b", "sglang", gpu=gpu, version="0.4.2.post1").figure("chunked_prefill_size") == 2048
    assert capacity("qwen2.5-1.5b", "sglang", gpu="A100-40GB", version="0.4.5").figure("chunked_prefill_size") == 8192
    # a size: 25,000 MiB is the first that takes 8192
    assert capacity("qwen2.5-1.5b", "sglang", gpu="24999MiB", version="0.4.5").figure("chunked_prefill_size") == 2048
    assert capacity("qwen2.5-1.5b", "sglang", gpu="25000MiB", version="0.4.5").figure("chunked_prefill_size") == 8192
    # from 0.4.8 the line is 35 GiB: 25,000 MiB takes 2048 there; 0.5.3 takes 4096 from 35 to 60 GiB
    assert capacity("qwen2.5-1.5b", "sglang", gpu="25000MiB").figure("chunked_prefill_size") == 2048
    assert capacity("qwen2.5-1.5b", "sglang", gpu="A100-40GB").figure("chunked_prefill_size") == 4096


def test_llamacpp_kv_buffers():
    # n_ctx 4096 (a multiple of 32): 32 layers x 4096 cells x 4096 (32 x 128) x 2 (K, V) x 2 B = 2,048 MiB
    cap = capacity("llama-2-7b", "llama.cpp", gpu="RTX-4090")
    assert cap.figure("kv_self_size_mib") == 2048.0
    assert cap.figure("offloaded_layers") == 33
    # q8_0: 34 B per 32 values -> 32 x 2 x 4096 x 4096 / 32 x 34 = 1,140,850,688 B = 1,088 MiB
    q8 = capacity("llama-2-7b", "llama.cpp", gpu="RTX-4090", cache_type_k="q8_0", cache_type_v="q8_0", flash_attn=True)
    assert q8.figure("kv_self_size_mib") == 1088.0
    # q4_0: 18 B per 32 -> 576 MiB
    q4 = capacity("llama-2-7b", "llama.cpp", gpu="RTX-4090", cache_type_k="q4_0", cache_type_v="q4_0", flash_attn=True)
    assert q4.figure("kv_self_size_mib") == 576.0


def test_llamacpp_pads_n_ctx_and_splits_layers():
    assert capacity("llama-2-7b", "llama.cpp", gpu="RTX-4090", ctx_size=5000).figure("n_ctx") == 5024  # pad 32
    assert capacity("llama-2-7b", "llama.cpp", gpu="RTX-4090", ctx_size=5000, flash_attn=True).figure("n_ctx") == 5120
    part = capacity("llama-2-7b", "llama.cpp", gpu="RTX-4090", n_gpu_layers=20)
    assert part.figure("offloaded_layers") == 20
    (dev,) = part.devices
    assert dev.n_layers == 20
    assert dev.kv_bytes == 20 * 4096 * 4096 * 2 * 2
    two = capacity("llama-2-7b", "llama.cpp", gpu="RTX-4090", gpus=2, ctx_size=512)
    assert [d.n_layers for d in two.devices] == [16, 16]
    # n_ctx 512, n_ubatch 512: attention 512 x 512 x 33 x 4 + 4 x 512 x 4096 x 4 = 68,157,440 on both;
    # the output layer's device also holds the logits: 512 x 4 x (32,000 + 4,096) = 73,924,608
    assert two.devices[0].compute_bytes == 68_157_440
    assert two.devices[1].compute_bytes == 73_924_608


def test_llamacpp_compute_buffer_is_its_largest_phase():
    from vramlens.models import load_model
    from vramlens.serving.common import served_from_spec
    from vramlens.serving.llamacpp import compute_buffer_bytes

    m = served_from_spec(load_model("llama-3-8b"))  # h 4096, 32 heads, f 14,336, V 128,256
    # n_ctx 8192 without flash attention: KQ and mask 8192 x 512 x 33 x 4 + 4 x 512 x 4096 x 4 = 587,202,560
    # = 560.00 MiB, what Ollama's llama.cpp logs for Llama 3.1 8B at 8K ("CUDA0 compute buffer size = 560.00 MiB")
    assert compute_buffer_bytes(m, n_ctx=8192, ubatch=512, flash_attn=False, output=True) == 560 * 2**20
    # n_ctx 512: the logits win, 512 x 4 x (128,256 + 4,096) = 271,056,896 = 258.50 MiB (logged 258.50 MiB)
    assert compute_buffer_bytes(m, n_ctx=512, ubatch=512, flash_attn=False, output=True) == 271_056_896
    # with flash attention at 8192: the f16 mask 8192 x 512 x 2 + 32 MiB is under the logits
    assert compute_buffer_bytes(m, n_ctx=8192, ubatch=512, flash_attn=True, output=True) == 271_056_896
    # a device without the output layer: the FFN phase 512 x 4 x (8192 + 28,672) = 75,497,472 beats attention
    assert compute_buffer_bytes(m, n_ctx=512, ubatch=512, flash_attn=True, output=False) == 75_497_472


def test_llamacpp_q8_0_weights_from_the_catalog():
    # Qwen3-30B-A3B as a Q8_0 file: 34 B per 32 weights; the token embedding 151,936 x 2048 stays in host memory:
    # 311,164,928 x 34 / 32 B = 315.30 MiB ("CPU_Mapped model buffer size = 315.30 MiB", llama.cpp b7342)
    cap = capacity("qwen3-30b-a3b", "llama.cpp", gpu="A100-40GB", ctx_size=65536, parallel=4, flash_attn=True,
                   weights_type="q8_0")
    assert cap.figure("cpu_model_buffer_mib") == 315.3
    assert cap.figure("kv_self_size_mib") == 6144.0  # 48 layers x 65,536 cells x 512 x 2 x 2 B
    assert cap.figure("cuda0_compute_buffer_mib") == 300.75  # 512 x 4 x (151,936 + 2048)
    with pytest.raises(ConfigError, match="weights_type='q4_k_m' is not one of f32, f16, bf16, q8_0"):
        capacity("qwen3-30b-a3b", "llama.cpp", gpu="A100-40GB", weights_type="q4_k_m")


def test_transformers_batch_is_what_fits():
    cap = capacity("llama-2-7b", "transformers", gpu="A100-80GB", context=4096)
    per_request = 2 * 32 * 32 * 128 * 2 * 4096 + cap.activation_bytes // cap.max_running
    assert cap.kv_cache_bytes == cap.max_running * 2 * 32 * 32 * 128 * 2 * 4096
    assert cap.figure("max_batch") == cap.max_running
    free = cap.gpu_bytes - cap.non_torch_bytes - cap.weights_bytes - (8_519_680 + 1_048_576)
    assert cap.max_running == free // per_request


@pytest.mark.parametrize("engine", ["vllm", "sglang", "llama.cpp", "transformers"])
def test_every_engine_gives_speeds_and_a_dict(engine):
    cap = capacity("qwen2.5-0.5b", engine, gpu="L4", context=2048)
    d = cap.to_dict()
    assert d["engine"] == engine and d["context"] == 2048
    assert cap.decode_tokens_s_total >= cap.decode_tokens_s > 0
    assert cap.ttft_s > 0
    assert d["total_bytes"] == cap.total_bytes


def test_decode_speed_is_the_bandwidth_roofline():
    # one request, context 1: (weights + 1 token of cache) / (2,039e9 B/s x 0.70)
    cap = capacity("llama-2-7b", "vllm", gpu="A100-80GB", context=1, max_num_seqs=1, max_num_batched_tokens=4096)
    step = (LLAMA2_7B_FP16 + LLAMA2_7B_ROPE + 2 * 32 * 32 * 128 * 2) / (2_039e9 * 0.70)
    assert cap.decode_tokens_s == pytest.approx(1 / step)


def test_the_package_is_the_function():
    assert vramlens.capacity("llama-2-7b", gpu="A100-80GB").figure("num_gpu_blocks") == 7_404


# ---- what the engines refuse, in their words ------------------------------------------------

def test_vllm_refusals_collected():
    with pytest.raises(ConfigError) as e:
        capacity("llama-2-7b", "vllm", gpu="A100-80GB", tp=3, max_model_len=8192, gpu_memory_utilization=1.5)
    assert e.value.problems == [
        "GPU memory utilization must be within (0, 1]. Got 1.5. (vLLM CacheConfig; pass --gpu-memory-utilization 0.9)",
        "User-specified max_model_len (8192) is greater than the derived max_model_len (max_position_embeddings=4096 "
        "in model's config.json). This may lead to incorrect model outputs or CUDA errors (vLLM refuses it unless "
        "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1)",
        "Total number of attention heads (32) must be divisible by tensor parallel size (3).",
    ]


def test_vllm_no_memory_for_the_cache():
    with pytest.raises(EngineRefusal, match=r"^No available memory for the cache blocks\. Try increasing "):
        capacity("llama-2-13b", "vllm", gpu="T4")


def test_vllm_max_model_len_over_the_cache():
    with pytest.raises(EngineRefusal) as e:
        capacity("llama-2-7b", "vllm", gpu="T4")
    assert str(e.value).startswith(
        "The model's max seq len (4096) is larger than the maximum number of tokens that can be stored in KV cache (")


def test_sglang_not_enough_memory():
    with pytest.raises(EngineRefusal, match=r"^Not enough memory\. Please try to increase --mem-fraction-static\."):
        capacity("llama-2-7b", "sglang", gpu="T4", mem_fraction_static=0.5)


def test_llamacpp_quantized_v_needs_flash_attention():
    with pytest.raises(ConfigError) as e:
        capacity("llama-2-7b", "llama.cpp", gpu="RTX-4090", cache_type_v="q4_0")
    assert e.value.problems == ["V cache quantization requires flash_attn (llama.cpp llama_init_from_model): "
                                "add --flash-attn"]


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"engine": "tgi"}, "engine='tgi' is not one of vllm, sglang, llama.cpp, transformers"),
    ({"context": 2**31}, "context=2147483648 is over the limit of 1,073,741,824"),
    ({"tp": 0}, "tp=0 must be >= 1"),
    ({"max_num_seqs": 0}, "max_num_seqs=0 must be >= 1"),
    ({"block_size": 10**6}, "block_size=1000000 is over the limit of 65,536"),
    ({"mem_fraction_static": 0.8}, "mem_fraction_static is not a vllm setting: use gpu_memory_utilization, "
     "max_model_len, max_num_seqs, max_num_batched_tokens, kv_cache_dtype, block_size, enforce_eager, quantization, "
     "dtype, version, use_v1, speculative_config, enable_prefix_caching, mamba_cache_mode"),
    ({"version": "0.3.3"}, "version='0.3.3' is not a vLLM release vramlens follows: give 0.4 or later, e.g. version='0.19' (--vllm-version 0.19)"),
    ({"dtype": "int4"}, "dtype='int4' is not one of auto, half, float16, bfloat16, float, float32 (vLLM --dtype)"),
    ({"gpu_memory_utilization": float("nan")}, "gpu_memory_utilization=nan is not a number between 0 and 1"),
    ({"quantization": "int3"}, "quantization='int3' is not one of awq, gptq, fp8, bitsandbytes"),
    ({"gpus": 1, "tp": 2}, "gpus=1 is fewer than tp x pp = 2: pass --gpus 2"),
])
def test_bad_values_are_named(kwargs, message):
    args = {"engine": "vllm", **kwargs}
    with pytest.raises(InputError) as e:
        capacity("llama-2-7b", gpu="A100-80GB", **args)
    assert str(e.value) == message


# --- gpt-oss (issue 15): MXFP4 experts, SGLang's hybrid sliding-window pool ------------------------------
def _gpt_oss_120b_mxfp4_weights() -> int:
    """The weights vLLM and SGLang load: experts in MXFP4 (n / 2 packed values + n / 32 scale bytes), every
    other tensor in bf16 rounded to the allocator's 512 B, plus the rotary cos/sin cache."""
    from vramlens.models import load_model
    from vramlens.units import round_up

    spec = load_model("gpt-oss-120b")
    # experts per block: gate_up 128 x 2880 x 5760 and down 128 x 2880 x 2880
    gate_up, down = 128 * 2880 * 5760, 128 * 2880 * 2880
    experts = 36 * (gate_up // 2 + gate_up // 32 + down // 2 + down // 32)
    assert experts == 36 * (1_128_038_400 + 564_019_200)
    rest = sum(round_up(t.numel * (4 if t.dtype == "fp32" else 2), 512) for t in spec.tensors if t.role != "expert")
    # the rotary cache: max_position 131,072 x rotary_dim 64 (2 x 32 inv_freq entries) x 2 B
    return experts + rest + 131_072 * 64 * 2


def test_gpt_oss_engines_keep_mxfp4_experts_transformers_dequantizes():
    from vramlens.serving.api import resolve_model

    want = _gpt_oss_120b_mxfp4_weights()
    for engine in ("vllm", "sglang"):
        # vLLM 0.19 lays the experts out for its MXFP4 backend (test_vllm019_mxfp4_triton_layout); 0.11 is not read
        cap = capacity("gpt-oss-120b", engine, gpu="H100-SXM-80GB", **({"version": "0.11", "max_model_len": 32_768} if engine == "vllm" else {}))
        # ServedModel shares the blocks' bytes evenly over the 36 blocks (a floor division): < 36 B lost; SGLang
        # keeps the rotary cache in fp32 on CUDA (131,072 x 64 x 2 B more) and leaves MoE segments unmodelled
        fp32_rope = 131_072 * 64 * 2 if engine == "sglang" else 0
        assert 0 <= want + fp32_rope - cap.weights_bytes < 36, engine
    # 116,829,156,672 parameters in bf16 are 233.7 GB: transformers (dequantized at load) needs more GPUs
    hf = capacity("gpt-oss-120b", "transformers", gpu="H200-141GB", gpus=2)
    assert hf.model == "openai/gpt-oss-120b"
    assert "mxfp4" not in resolve_model("gpt-oss-120b", engine="transformers").weights_format
    assert resolve_model("gpt-oss-120b", engine="vllm").weights_format == "mxfp4 experts, bf16 rest"


def test_sglang_hybrid_swa_split_worked_case():
    # gpt-oss-20b: 24 layers, 12 sliding; F = S = 8 kv heads x (64 + 64) x 2 B = 2,048 B per layer and token.
    # max_total_num_tokens 100,000: total_memory = 100,000 x 2,048 x 24 = 4,915,200,000;
    # denominator = 2,048 x 12 + 0.8 x 2,048 x 12 = 44,236.8; full = int(111,111.1) = 111,111,
    # swa = int(0.8 x 111,111) = 88,888; page 64: 111,104 and 88,832
    from vramlens.serving.api import resolve_model
    from vramlens.serving.sglang import hybrid_swa_tokens

    m = resolve_model("gpt-oss-20b", engine="sglang")
    assert m.hybrid_swa and m.n_sliding == 12 and m.n_layers == 24
    assert hybrid_swa_tokens(m, 100_000, 2_048) == (111_111, 88_888)
    assert hybrid_swa_tokens(m, 100_000, 2_048, page_size=64) == (111_104, 88_832)
    assert hybrid_swa_tokens(resolve_model("llama-3-8b", engine="sglang"), 100_000, 4_096) is None


def test_sglang_gpt_oss_120b_h100_pool():
    # total_gpu_memory = 85,045,477,376 (CUDA's total) - 419,430,400 (CUDA context) = 84,626,046,976; rest =
    # int(0.874 x that) - weights (0.4.10's default on nvidia-smi's 81,559 MiB: reserved (9.5 + 1 / 2) GiB = 10,240
    # MiB, round((81,559 - 10,240) / 81,559, 3)); cell over all 36 layers = 8 x 64 x 36 x 2 x 2 B = 73,728;
    # full = int(tokens x 36 / (18 + 0.8 x 18)), swa = int(0.8 x full). 0.5.0-0.5.3 keep one pool (server_args.py
    # disable_hybrid_swa_memory for GptOssForCausalLM): max_total_num_tokens = the tokens profiled over every layer.
    one = capacity("gpt-oss-120b", "sglang", gpu="H100-SXM-80GB")
    assert one.figure("mem_fraction_static") == 0.835 and one.figure("swa_layer_tokens") is None
    assert one.kv_tokens == (int(0.835 * 84_626_046_976) - one.weights_bytes) // 73_728
    cap = capacity("gpt-oss-120b", "sglang", gpu="H100-SXM-80GB", version="0.4.10.post2")
    assert cap.kv_bytes_per_token == 73_728
    assert cap.figure("mem_fraction_static") == 0.874
    tokens = (int(0.874 * 84_626_046_976) - cap.weights_bytes) // 73_728
    full = int(tokens * 73_728 / (18 * 2_048 + 0.8 * 18 * 2_048))
    assert cap.figure("full_layer_tokens") == full == cap.kv_tokens == cap.figure("max_total_num_tokens")
    assert cap.figure("swa_layer_tokens") == int(full * 0.8)
    assert cap.kv_cache_bytes == full * 2_048 * 18 + int(full * 0.8) * 2_048 * 18
    assert "hybrid SWA" in cap.accounting


def test_vllm_gpt_oss_alternating_layers_make_two_groups():
    # 18 full + 18 sliding (window 128): group size 18, one full and one sliding group; page 2 x 16 x 8 x 64 x 2 B
    cap = capacity("gpt-oss-120b", "vllm", gpu="H100-SXM-80GB", max_model_len=8192)
    blocks = cap.figure("num_gpu_blocks")
    assert cap.kv_tokens == blocks // 2 * 16
    assert cap.kv_cache_bytes == blocks * 32_768 * 18
    # a request of 8192 tokens: full 512 blocks, sliding cdiv(min(127 + 8192, 8192), 16) + 1 = 513
    assert cap.figure("max_concurrency") == round(blocks / (512 + 513), 2)


# --- Llama 4 (issue 11): chunked local layers, full-length in vLLM, SWA in SGLang's hybrid pool ----------------------
def test_vllm_llama4_chunked_layers_are_cached_at_full_length():
    # before 0.19 vramlens takes the hybrid KV cache manager off for chunked local attention (pull 21761's default):
    # one group of all 48 layers, each as long as a full layer; page at tp 8 = 2 x 16 tokens x 1 kv head x 128 x 2 B
    # = 8,192 B (0.19: tests/serving/test_vllm019_round2.py)
    from vramlens.serving.api import resolve_model

    m = resolve_model("llama-4-scout", engine="vllm")
    assert m.chunked_local and m.n_sliding == 36 and m.sliding_window == 8192
    cap = capacity("llama-4-scout", "vllm", gpu="H100-SXM-80GB", tp=8, max_model_len=8192, version="0.11")
    blocks = cap.figure("num_gpu_blocks")
    assert cap.kv_tokens == blocks * 16
    assert cap.kv_cache_bytes == blocks * 8_192 * 48
    assert cap.figure("max_concurrency") == round(blocks / 512, 2)  # 8192 tokens: 512 blocks, no sliding group


def test_sglang_llama4_hybrid_swa_pool():
    # SGLang after 0.5.3 (0.5.23's is_hybrid_swa_model) lists Llama4ForConditionalGeneration, its SWA layers
    # (i + 1) % 4 != 0: 36 of 48; tp 8: F = S = 1 kv head x 128 x 2 (K, V) x 2 B = 512 B per layer and token;
    # full = int(tokens x 48 / (12 + 0.8 x 36)), swa = int(0.8 x full). 0.4.10-0.5.3 keep Llama 4 in one pool
    # (tests/serving/test_sglang_versions.py).
    from vramlens.serving.api import resolve_model

    m = resolve_model("llama-4-scout", engine="sglang")
    assert m.hybrid_swa and m.n_sliding == 36 and m.n_layers == 48
    cap = capacity("llama-4-scout", "sglang", gpu="H100-SXM-80GB", tp=8, version="0.5.23")
    assert cap.kv_bytes_per_token == 512 * 48
    tokens = cap.figure("max_total_num_tokens")
    assert cap.figure("swa_layer_tokens") == int(tokens * 0.8)
    assert cap.kv_cache_bytes == tokens * 512 * 12 + int(tokens * 0.8) * 512 * 36


def test_cuda_total_sizes_the_pools_and_nvidia_smi_keys_the_defaults():
    # L4: CUDA's total 23,570,219,008 B (nvidia-smi's 23,034 MiB = 24,153,751,552 B less the driver's 556 MiB):
    # vLLM's requested memory = int(0.9 x 23,570,219,008) = 21,213,197,107
    vl = capacity("qwen2.5-0.5b", "vllm", gpu="L4")
    assert (vl.gpu_bytes, vl.budget_bytes) == (23_570_219_008, 21_213_197_107)
    assert not any("not in the catalog" in n for n in vl.notes)
    # SGLang 0.5.3 on an RTX 4090: the default fraction from nvidia-smi's 24,564 MiB (get_device_memory_capacity):
    # reserve 512 + 1.5 x 2,048 + 2 x 16 + 1 x 1,024 / 8 = 3,744 MiB, round((24,564 - 3,744) / 24,564, 3) = 0.848
    # (CUDA's 24,210 MiB would give 0.845); the pool from CUDA's total: int(0.848 x (25,386,352,640 - 419,430,400))
    # = 21,171,950,059
    sg = capacity("qwen2.5-0.5b", "sglang", gpu="RTX-4090")
    assert sg.figure("mem_fraction_static") == 0.848
    assert (sg.gpu_bytes, sg.budget_bytes) == (25_386_352_640, 21_171_950_059)
    # H200: no CUDA total in the catalog, nvidia-smi's 143,771 MiB = 150,754,820,096 B, and a note says so
    h200 = capacity("qwen2.5-0.5b", "vllm", gpu="H200-141GB")
    assert h200.gpu_bytes == 150_754_820_096
    assert h200.notes[-1] == (
        "H200-141GB: CUDA's device total (cudaMemGetInfo) is not in the catalog; nvidia-smi's total "
        "150,754,820,096 B is used, which the driver's reserve (a few hundred MiB on recent NVIDIA drivers) makes "
        "too high: an engine or run may get a little less")
