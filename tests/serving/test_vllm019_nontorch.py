"""vLLM 0.19's non-torch increase after the init snapshot and the cuBLAS workspace in its torch peak (issue 15):
FlashInfer's all-reduce fusion workspace, the TP group's torch NCCL communicator, NCCL 2.27.5's NVLS buffers and
the lazily loaded kernels (vramlens.serving.vllm_nontorch)."""

from vramlens.hardware.catalog import get_gpu
from vramlens.serving.api import capacity
from vramlens.serving.vllm_nontorch import (
    FI_MC_GRANULARITY,
    flashinfer_ar_workspace_bytes,
    fusion_tokens,
    nccl_nvls_bytes,
    vllm019_non_torch,
)

H100 = get_gpu("H100-SXM-80GB")
MODULES = 697 * 2**20 - 400 * 2**20  # hardware.runtime.LAZY_MODULES_INFERENCE_BYTES = 311,427,072
TORCH_NCCL = 16 * 2 * (4_194_304 + 524_288 + 4_915_200)  # 16 channels x 2 connections x (Simple + LL + LL128)


def test_fusion_tokens_are_the_logged_max_token_num():
    # "Maximal number of tokens used by Flashinfer Allreduce Fusion" in the 0.19 logs, H100 (9.0):
    # tp 2: 64 MiB // (hidden x 2 B), at most max_num_batched_tokens 8192; tp 4: 2 MiB // (hidden x 2 B)
    assert fusion_tokens(cc=(9, 0), tp=2, hidden=4096, b=2, max_num_batched_tokens=8192) == 8192  # Llama 3.1 8B
    assert fusion_tokens(cc=(9, 0), tp=2, hidden=8192, b=2, max_num_batched_tokens=8192) == 4096  # Llama 3.3 70B
    assert fusion_tokens(cc=(9, 0), tp=2, hidden=5120, b=2, max_num_batched_tokens=8192) == 6553  # Mistral Small
    assert fusion_tokens(cc=(9, 0), tp=4, hidden=4096, b=2, max_num_batched_tokens=8192) == 256
    assert fusion_tokens(cc=(9, 0), tp=4, hidden=3584, b=2, max_num_batched_tokens=8192) == 292  # 2,097,152 // 7,168
    assert fusion_tokens(cc=(9, 0), tp=4, hidden=5120, b=2, max_num_batched_tokens=8192) == 204  # Llama 4 Scout
    # no FlashInfer size for Ampere, nor for tp 3
    assert fusion_tokens(cc=(8, 0), tp=2, hidden=4096, b=2, max_num_batched_tokens=8192) == 0
    assert fusion_tokens(cc=(9, 0), tp=3, hidden=4096, b=2, max_num_batched_tokens=8192) == 0


def test_flashinfer_workspace_is_three_padded_symmetric_buffers():
    # tp 2, 8192 tokens, hidden 4096: 2 x 8192 x 4096 x 2 = 134,217,728 -> + 2,048 pad -> 136,314,880;
    # flags 2 x 256 x 4 = 2,048 -> 2 MiB -> 4,194,304; Lamport 3 x 134,217,728 = 402,653,184 -> 404,750,336
    assert flashinfer_ar_workspace_bytes(tp=2, tokens=8192, hidden=4096) == 136_314_880 + 4_194_304 + 404_750_336
    # tp 4, 256 tokens: 8,388,608 -> 10,485,760; 4,096 -> 4,194,304; 25,165,824 -> 27,262,976
    assert flashinfer_ar_workspace_bytes(tp=4, tokens=256, hidden=4096) == 41_943_040
    # fp32 activations: Lamport elements of 4 B, the first buffer stays at 2 B (4096 tokens = 64 MiB // 16,384):
    # 67,108,864 -> 69,206,016; 4,194,304; 3 x 134,217,728 -> 404,750,336
    assert flashinfer_ar_workspace_bytes(tp=2, tokens=4096, hidden=4096, fp32=True) == 478_150_656
    assert flashinfer_ar_workspace_bytes(tp=1, tokens=8192, hidden=4096) == 0


def test_flashinfer_buffers_round_to_the_multicast_granularity():
    # SymmDeviceMemory._get_allocation_prop: each of the three buffers up to 512 MiB on Hopper, so the workspace
    # is 3 x 536,870,912 B whatever the model as long as no buffer outgrows 512 MiB
    hopper = FI_MC_GRANULARITY[9]
    assert hopper == 536_870_912
    assert flashinfer_ar_workspace_bytes(tp=2, tokens=8192, hidden=4096, mc_granularity=hopper) == 1_610_612_736
    assert flashinfer_ar_workspace_bytes(tp=2, tokens=4096, hidden=8192, mc_granularity=hopper) == 1_610_612_736
    assert flashinfer_ar_workspace_bytes(tp=4, tokens=256, hidden=4096, mc_granularity=hopper) == 1_610_612_736
    # a Lamport region over 512 MiB takes two granules: fp32, tp 2, 8192 tokens, hidden 8192:
    # 3 x min(2 x 8192 x 8192 x 4, MAX_COMM_SIZE) = 1,610,612,736 -> + pad -> 1,612,709,888 -> 2,147,483,648;
    # the first buffer 2 x 8192 x 8192 x 2 = 268,435,456 -> 536,870,912; the flags -> 536,870,912
    assert flashinfer_ar_workspace_bytes(tp=2, tokens=8192, hidden=8192, fp32=True,
                                         mc_granularity=hopper) == 2_147_483_648 + 2 * 536_870_912


def test_nvls_buffers_of_nccl_2_27_5():
    # 16 channels x 2 x (128 KiB x 8 steps) x 4 heads
    assert nccl_nvls_bytes(4) == 16 * 2 * 131_072 * 8 * 4 == 134_217_728


def test_parts_by_setting():
    tp2 = vllm019_non_torch(H100, tp=2, pp=1, hidden=4096, b=2, max_num_batched_tokens=8192, enforce_eager=False)
    # fused up to 8192 tokens: the all-reduces never reach NCCL, and 2 GPUs have no NVLS
    # the FlashInfer workspace: three buffers of 512 MiB on Hopper
    assert (tp2.modules, tp2.flashinfer, tp2.torch_nccl, tp2.nvls) == (MODULES, 1_610_612_736, TORCH_NCCL, 0)
    assert tp2.total == 311_427_072 + 1_610_612_736 + 308_281_344 == 2_230_321_152  # 2.08 GiB; logged 2.06-2.10
    tp4 = vllm019_non_torch(H100, tp=4, pp=1, hidden=4096, b=2, max_num_batched_tokens=8192, enforce_eager=False)
    # 8192 x 4096 x 2 = 67,108,864 B all-reduce: over the 256 fused tokens, the 8 MiB custom all-reduce and the
    # 32 MiB symmetric-memory limit, so NCCL runs it with NVLS
    assert tp4.total == 311_427_072 + 1_610_612_736 + 308_281_344 + 134_217_728 == 2_364_538_880  # logged 2.13-2.21 GiB
    # eager: no compile pass, no FlashInfer workspace; the torch communicator still comes with the logits all-gather
    eager = vllm019_non_torch(H100, tp=2, pp=1, hidden=4096, b=2, max_num_batched_tokens=8192, enforce_eager=True)
    assert (eager.flashinfer, eager.total) == (0, MODULES + TORCH_NCCL)
    # tp with pp: enable_allreduce_rms_fusion is off ("tp-pp combination broken")
    assert vllm019_non_torch(H100, tp=2, pp=2, hidden=4096, b=2, max_num_batched_tokens=8192,
                             enforce_eager=False).flashinfer == 0
    # A100 (8.0, 600 GB/s NVLink): no fusion, no NVLS
    a100 = vllm019_non_torch(get_gpu("A100-80GB"), tp=4, pp=1, hidden=4096, b=2, max_num_batched_tokens=8192,
                             enforce_eager=False)
    assert a100.total == MODULES + TORCH_NCCL
    # tp 1: the kernels only
    assert vllm019_non_torch(H100, tp=1, pp=2, hidden=4096, b=2, max_num_batched_tokens=8192,
                             enforce_eager=False).total == MODULES
    # Blackwell: no multicast granularity read, the buffers at the 2 MiB allocation granularity (a lower bound)
    b200 = vllm019_non_torch(get_gpu("B200"), tp=2, pp=1, hidden=4096, b=2, max_num_batched_tokens=8192,
                             enforce_eager=False)
    assert b200.flashinfer == 545_259_520 and any("a lower bound" in n for n in b200.notes)
    assert "not modelled" in " ".join(tp2.notes) and "not modelled" not in " ".join(
        vllm019_non_torch(H100, tp=1, pp=1, hidden=4096, b=2, max_num_batched_tokens=8192, enforce_eager=False).notes)


def test_capacity_uses_them_in_0_19_only():
    cap = capacity("llama-3.1-8b", "vllm", gpu="H100-SXM-80GB", tp=4, max_model_len=8192)
    assert cap.non_torch_bytes == 2_364_538_880
    # the sampler phase (logits x (2 + 12) B, the hidden states, the top-k buffer) + Hopper's cuBLAS workspace
    # (:4096:8 = 33,554,432)
    assert cap.activation_bytes == 1024 * 128_256 * 14 + 67_108_864 + 67_719_168 + 33_554_432 == 2_007_060_480
    assert any("NVLS buffers 134,217,728 B" in n for n in cap.notes)
    # 0.11 keeps vramlens' NCCL model (16 channels x 2 x 9,633,792 + NVLS 301,989,888 x 4) and no workspace
    old = capacity("llama-3.1-8b", "vllm", gpu="H100-SXM-80GB", tp=4, max_model_len=8192, version="0.11")
    assert old.non_torch_bytes == 308_281_344 + 4 * 301_989_888
