"""vLLM 0.19 (issue 15): Llama 4 loaded whole with Scout-Instruct's rotary cache, chunked local attention in the
hybrid KV cache manager, MXFP4 experts as the TRITON backend lays them out, the Triton sampler's kept top-k
buffer, and the GPU catalog's SM counts."""

from vramlens.hardware.catalog import get_gpu
from vramlens.serving.api import capacity, resolve_model
from vramlens.serving.vllm import mxfp4_moe_bytes, topk_buffer_bytes, vllm_release


def test_gpu_catalog_sm_counts():
    # datasheet CUDA cores / 128 FP32 lanes per SM (Hopper), / 64 (GA100): 16,896 / 128, 14,592 / 128, 6,912 / 64
    assert get_gpu("H100-SXM-80GB").sms == 132
    assert get_gpu("H100-PCIe-80GB").sms == 114
    assert get_gpu("A100-80GB").sms == 108
    assert get_gpu("MI300X").sms == 304  # compute units
    assert get_gpu("80GiB").sms is None  # a GPU given by size


def test_topk_buffer_is_sm_count_rows_of_fp32_logits():
    # 1,024 rows on 132 SMs: 132 programs, min(next_power_of_2(132) = 256, 132) = 132 rows x 128,256 x 4 B
    assert topk_buffer_bytes(rows=1024, vocab=128_256, sms=132) == 132 * 128_256 * 4 == 67_719_168
    # 100 rows: 100 programs, min(128, 132) = 128 rows
    assert topk_buffer_bytes(rows=100, vocab=128_256, sms=132) == 128 * 128_256 * 4 == 65_667_072
    # under 8 rows vLLM sorts (apply_top_k_top_p_pytorch); no SM count: left out
    assert topk_buffer_bytes(rows=7, vocab=128_256, sms=132) == 0
    assert topk_buffer_bytes(rows=1024, vocab=128_256, sms=None) == 0


def test_topk_buffer_in_the_sampler_phase():
    # Llama 3.1 8B at 8K on an H100 SXM: the sampler phase is the peak; the buffer adds 132 x 128,256 x 4 B
    # = 67,719,168, and Hopper's cuBLAS workspace (:4096:8, 33,554,432) replaces the default 8,519,680
    known = capacity("llama-3.1-8b", "vllm", gpu="H100-SXM-80GB", max_model_len=8192)
    sized = capacity("llama-3.1-8b", "vllm", gpu="80GiB", max_model_len=8192)
    assert known.activation_bytes - sized.activation_bytes == 67_719_168 + 33_554_432 - 8_519_680
    assert any("has no SM count" in n for n in sized.notes)
    # 0.11 sorts: no buffer
    assert "top-k buffer" not in " ".join(capacity("llama-3.1-8b", "vllm", gpu="H100-SXM-80GB", max_model_len=8192,
                                                      version="0.11").notes)


def test_chunked_local_hybrid_by_release():
    h100 = get_gpu("H100-SXM-80GB")
    assert vllm_release((0, 19, 0), h100).chunked_local_hybrid
    assert not vllm_release((0, 11, 0), h100).chunked_local_hybrid


def test_scout_instruct_loads_whole_with_its_10m_position_rotary_cache():
    # vLLM builds Llama4ForConditionalGeneration: the text model (107,769,861,120) plus the vision tower, adapter
    # and projector (871,932,416) = 108,641,793,536 parameters, 217,283,871,232 B in bf16; SGLang's ServedModel
    # stays the text model
    m = resolve_model("llama-4-scout-instruct", engine="vllm")
    assert m.params == 108_641_793_536 and m.weight_bytes == 217_283_871_232
    assert resolve_model("llama-4-scout-instruct", engine="sglang").params == 107_769_861_120
    # rotary cache: 10,485,760 positions x 128 x 2 B (one get_rope instance shared by the 36 rotary layers)
    assert m.rope_cache_bytes == 10_485_760 * 128 * 2 == 2_684_354_560
    cap = capacity("llama-4-scout-instruct", "vllm", gpu="H100-SXM-80GB", tp=4, max_model_len=8192)
    # 217,283,871,232 / 4 = 54,320,967,808 per rank + 2,684,354,560
    assert cap.weights_bytes == 57_005_322_368


def test_scout_chunked_layers_get_groups_of_their_own_in_019():
    # 12 full and 36 chunked layers: group size 12 (36 >= 1.5 x 12), 1 full + 3 chunked groups; page at tp 4 =
    # 2 x 16 tokens x 2 kv heads x 128 x 2 B = 16,384 B
    cap = capacity("llama-4-scout-instruct", "vllm", gpu="H100-SXM-80GB", tp=4, max_model_len=8192)
    blocks = cap.figure("num_gpu_blocks")
    # (80,765 before FlashInfer's workspace was rounded to the 512 MiB multicast granularity: 1,568,669,696 B
    # more non-torch memory = 7,979 blocks of 196,608 B; 72,786 from nvidia-smi's 85,520,809,984 B, where CUDA's
    # total is 475,332,608 B less: 0.9 x that = 427,799,347 B = 2,176 blocks)
    assert blocks == 70_610
    assert cap.kv_cache_bytes == blocks * 16_384 * 12
    assert cap.kv_tokens == blocks // 4 * 16 == 282_432
    # 8,192 tokens: 512 blocks in each of the 4 groups (a chunk of 8,192 + 8,192 batched tokens caps at 8,192)
    assert cap.figure("max_concurrency") == round(blocks / 2048, 2) == 34.48
    # 32,768 tokens: full 2,048 + 3 x cdiv(min(8,192 + 8,192, 32,768), 16) = 3 x 1,024: 5,120 blocks per request
    long = capacity("llama-4-scout-instruct", "vllm", gpu="H100-SXM-80GB", tp=4, max_model_len=32768)
    assert long.figure("max_concurrency") == round(long.figure("num_gpu_blocks") / 5120, 2)
    assert "1 full, 3 chunked of 12 layers" in " ".join(cap.notes)


def test_mxfp4_triton_layout_gpt_oss_20b_tp2():
    # E 32, f 2,880 -> f' = round_up(1,440, 64) = 1,472, h 2,880, 24 MoE layers; per layer and rank:
    # values 32 x (2,944 x round_up(1,440, 64) = 1,472 + 2,880 x round_up(736, 64) = 768) = 138,674,176 + 70,778,880
    # scales 32 x (2,944 x 90 + 2,880 x 46) = 12,718,080, kept beside the swizzled
    # 32 x (round_up(2,944, 256) = 3,072 x 90 + round_up(2,880, 256) = 3,072 x 46) = 13,369,344
    # fp32 biases 32 x (2,944 + 2,880) x 4 = 745,472: 236,285,952 per layer, x 24 = 5,670,862,848
    # the ServedModel: mxfp4_bytes(530,841,600) 282,009,600 + mxfp4_bytes(265,420,800) 141,004,800
    # + 276,480 bf16 biases x 2 = 552,960: 423,567,360 x 24 / 2 = 5,082,808,320
    m = resolve_model("gpt-oss-20b", engine="vllm")
    assert (m.expert_layers, m.expert_bias_numel) == (24, 276_480)
    assert mxfp4_moe_bytes(m, tp=2, b=2) == (5_670_862_848, 5_082_808_320)
    h100 = capacity("gpt-oss-20b", "vllm", gpu="H100-SXM-80GB", tp=2, max_model_len=8192)
    old = capacity("gpt-oss-20b", "vllm", gpu="H100-SXM-80GB", tp=2, max_model_len=8192, version="0.11")
    assert h100.weights_bytes - old.weights_bytes == 5_670_862_848 - 5_082_808_320 == 588_054_528
    # an A100 (compute capability 8.0) picks another backend, not modelled: the checkpoint's bytes, with a note
    a100 = capacity("gpt-oss-20b", "vllm", gpu="A100-80GB", tp=2, max_model_len=8192)
    assert a100.weights_bytes == old.weights_bytes
    assert any("modelled for compute capability 9.x" in n for n in a100.notes)


def test_a_case_names_a_catalog_gpu_with_the_logged_total():
    # gpu_total: the catalog H100 SXM (132 SMs, NVLink) with the log's CUDA total, 79.19 GiB, in place of the
    # catalog's (85,045,477,376 B = 79.205 GiB, another driver) and nvidia-smi's 81,559 MiB
    from vramlens.serving.validation import run_case

    case = {"id": "t", "engine": "vllm", "engine_version": "x", "source": "https://x", "quote": "q",
            "model": "llama-3.1-8b", "gpu": "H100-SXM-80GB", "gpu_total": "79.19GiB",
            "settings": {"version": "0.19.0", "max_model_len": 8192}, "logged": {"kv_cache_gib": 1.0}}
    (check,) = run_case(case).checks
    from dataclasses import replace

    from vramlens.units import GiB, parse_size

    total = parse_size("79.19GiB")
    gpu = replace(get_gpu("H100-SXM-80GB"), usable_bytes=total, cuda_total_bytes=total)
    assert check.predicted == capacity("llama-3.1-8b", "vllm", gpu=gpu, max_model_len=8192).kv_cache_bytes / GiB
    assert check.predicted != capacity("llama-3.1-8b", "vllm", gpu="H100-SXM-80GB", max_model_len=8192).kv_cache_bytes / GiB
