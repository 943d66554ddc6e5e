"""vLLM 0.19's fused-MoE workspace in the profile run's activation peak, the integers written out as vLLM
0.19.0 sizes them (fused_moe.py TritonExperts.workspace_shapes, modular_kernel.py _allocate_buffers,
v1/worker/workspace.py WorkspaceManager.get_simultaneous)."""

from __future__ import annotations

from vramlens.serving import capacity
from vramlens.serving.api import resolve_model
from vramlens.serving.vllm import moe_workspace_bytes

H100 = "79.19GiB"  # what CUDA reports for an H100 80GB (the llm-d-planner logs)


def test_mixtral_workspace_is_two_aligned_regions():
    # Mixtral 8x7B at tp 2, M = 8192 tokens, k = 2, f = 14,336, K = h = 4096, bf16:
    #   N = 2 x 14,336 / 2 = 14,336 rows of w13 per rank
    #   workspace13 and the output: max(8192 x 2 x max(7168, 4096), 8192 x 4096) = 117,440,512 values = 234,881,024 B
    #   workspace2: 8192 x 2 x max(14,336, 4096) = 234,881,024 values = 469,762,048 B
    #   both already multiples of 256: 234,881,024 + 469,762,048 = 704,643,072
    m = resolve_model("mixtral-8x7b-v0.1")
    assert moe_workspace_bytes(m, tokens=8192, tp=2, b=2) == 704_643_072


def test_alignment_rounds_each_region_up_to_256_bytes():
    # Mixtral (k = 2, f = 14,336, h = 4096) over 1 token at tp 3, bf16: N = 28,672 // 3 = 9,557
    #   region13: max(1 x 2 x max(9,557 // 2 = 4,778, 4096), 4096) = 9,556 values = 19,112 B -> 19,200
    #   region2: 1 x 2 x max(9,557, 4096) = 19,114 values = 38,228 B -> 38,400
    m = resolve_model("mixtral-8x7b-v0.1")
    assert moe_workspace_bytes(m, tokens=1, tp=3, b=2) == 19_200 + 38_400
    # Qwen3-30B-A3B (k = 8, f = 768, h = 2048), 3 tokens, fp32: the hidden size wins both regions
    #   region13 = region2 = 3 x 8 x 2048 = 49,152 values = 196,608 B (already aligned)
    assert moe_workspace_bytes(resolve_model("qwen3-30b-a3b"), tokens=3, tp=1, b=4) == 2 * 196_608


def test_dense_and_mxfp4_experts_have_no_workspace():
    assert moe_workspace_bytes(resolve_model("llama-3.1-8b"), tokens=8192, tp=1, b=2) == 0
    # gpt-oss's MXFP4 experts go through vLLM's monolithic kernel (oracle/mxfp4.py), not the workspace manager
    gpt_oss = resolve_model("gpt-oss-20b", engine="vllm")
    assert gpt_oss.mxfp4_experts and moe_workspace_bytes(gpt_oss, tokens=8192, tp=2, b=2) == 0


def test_vllm_0_19_mixtral_peak_holds_the_workspace_through_the_sampler():
    # vllm019-mixtral-8x7b-tp2's settings: 8192 batched tokens, 1024 dummy requests (H100 defaults), bf16
    #   sampler (triton) 1024 x 32,000 x (2 + 12) = 458,752,000 + hidden 8192 x 4096 x 2 = 67,108,864
    #     + workspace 704,643,072 = 1,230,503,936
    #   forward: per token 2 x 4096 x 2 = 16,384 + max(MoE layer: router 8 x 2 + top-k 2 x 12 + output 4096 x 2
    #     = 8,232, attention (32 + 2 x 8) x 128 / 2 x 2 = 6,144) = 24,616; 8192 x 24,616 = 201,654,272
    #     + workspace 704,643,072 = 906,297,344
    #   peak = the sampler's 1,230,503,936 + the cuBLAS workspace (a GPU given by size: the default 8,519,680)
    #   = 1,239,023,616 (1.154 GiB; the log: "torch peak memory increase: 1.21GiB")
    cap = capacity("mixtral-8x7b-v0.1", "vllm", gpu=H100, gpus=2, tp=2, version="0.19.0",
                   gpu_memory_utilization=0.95, max_model_len=8192)
    assert cap.activation_bytes == 1_239_023_616
    assert "MoE workspace 704,643,072) = sampler (triton)" in " ".join(cap.notes)


def test_vllm_0_19_forward_phase_with_one_dummy_request():
    # Qwen3-30B-A3B, max_num_seqs 1: workspace 268,435,456 + 268,435,456 = 536,870,912 (8192 x 8 x 2048 x 2 each)
    #   forward: per token 2 x 2048 x 2 = 8,192 + max(MoE layer 128 x 2 + 8 x 12 + 2048 x 2 = 4,448,
    #     attention (32 + 2 x 4) x 128 x 2 = 10,240) = 18,432; 8192 x 18,432 = 150,994,944 + 536,870,912 = 687,865,856
    #   sampler: 1 x 151,936 x 14 = 2,127,104 + 8192 x 2048 x 2 = 33,554,432 + 536,870,912 = 572,552,448
    #   peak: the forward + the cuBLAS workspace 8,519,680 = 696,385,536
    cap = capacity("qwen3-30b-a3b", "vllm", gpu=H100, version="0.19.0", max_num_seqs=1, max_model_len=8192)
    assert cap.activation_bytes == 696_385_536


def test_releases_before_0_19_keep_the_per_call_caches():
    # 0.11 (sort sampler): forward 8192 x 2 x (8192 + 3 x 28,672 / 2) = 838,860,800; sampler 1024 x 32,000 x (2 + 36)
    # + 67,108,864 = 1,312,292,864, no workspace kept
    cap = capacity("mixtral-8x7b-v0.1", "vllm", gpu=H100, gpus=2, tp=2, version="0.11.0",
                   gpu_memory_utilization=0.95, max_model_len=8192)
    assert cap.activation_bytes == 1_312_292_864
