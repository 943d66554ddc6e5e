"""Reproduce published GPU-memory figures with the estimator, and report the error of each.

The cases (validation/published-cases.json, each with its source and a verbatim quote) are
data; this module says, for each case id, which model, workload and figure it corresponds to,
in the terms of the case's own description. Nothing here is fitted to a case: a case whose
setting vramlens cannot express is listed with the reason instead of a number.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypedDict

from vramlens.units import DTYPE_BYTES, MiB

if TYPE_CHECKING:
    from vramlens.estimator.core import Estimate
    from vramlens.hardware.runtime import RuntimeOverhead
    from vramlens.models.spec import ModelSpec


@dataclass(frozen=True, slots=True)
class Case:
    """How to reproduce one published figure.

    figure: which quantity the source measured:
        "device_total"   NVML "used" (nvidia-smi): reserved + context
        "peak_allocated" torch.cuda.max_memory_allocated()
        "peak_reserved"  torch.cuda.max_memory_reserved() (the caching allocator's peak, no context)
        "weights"        memory_allocated() after loading
        "model_states"   weights + gradients + master weights + optimizer states (per GPU)
        "kv_cache"       KV-cache bytes for (batch, seq)
        "layer_activations" saved-for-backward bytes of one block
        "context"        CUDA context plus one small segment
    """

    model: str | None
    settings: dict[str, Any] = field(default_factory=dict)
    overrides: dict[str, Any] = field(default_factory=dict)
    figure: str = "device_total"
    gpu: str | None = None
    cuda: str | None = None
    lazy_loading: bool = True
    params: str | None = None


# transformers' BertForSequenceClassification with 2 labels, as the Trainer examples load it
_BERT_CLS = {"architectures": ["BertForSequenceClassification"], "num_labels": 2}
class _Setup(TypedDict):
    """Where a case was measured: Case's gpu, cuda and lazy_loading."""

    gpu: str
    cuda: str
    lazy_loading: bool


_HF_V100 = _Setup(gpu="V100-16GB", cuda="11.2", lazy_loading=False)  # driver 460.91.03, CUDA 11.2 (the source)
# transformers ~4.16 (Jan 2022): the Trainer's default optimizer was transformers.AdamW ("adamw_hf"),
# a per-parameter Python loop; BERT's attention was eager; and model.zero_grad() zeroed the
# gradients in place (set_to_none=False, PyTorch 1.x's default), so they stay allocated
_TRAIN = dict(mode="train", batch=4, seq=512, attention="eager", dtype="fp32", optimizer_impl="loop", keep_grads=True)

# torchao's README (torchao/optim/README.md), Llama2-7B on Alpaca with torchtune 52d1b838: full bf16 on an
# A100, that commit's llama2/7B_full_low_memory settings (batch 2, activation checkpointing, chunked
# cross-entropy in 8 chunks) with the optimizer replaced; optimizer_in_bwd off and seq 512 are
# this file's reading of what the source leaves unstated (the case's other_settings say why)
_TORCHAO_7B = dict(mode="train", dtype="bf16", batch=2, seq=512, checkpointing="full", loss_chunks=8)
_A100 = _Setup(gpu="A100-80GB", cuda="12.1", lazy_loading=True)  # CUDA 12: lazy loading by default

# LitGPT's config_hub/finetune/README.md table (commit 5895df10, April 2024): single-GPU runs on an A10G,
# bf16-true, Alpaca2k, max_seq_length 512 (batches padded to their longest sample). LoRA/QLoRA:
# litgpt/finetune/lora.py (lm_head in 128-token chunks: 4 chunks of 512; torch AdamW, or
# bitsandbytes PagedAdamW (32-bit) under bnb quantization; adapters in bf16, dropout 0.05). QLoRA ran the
# pinned bitsandbytes==0.42.0, whose MatMul4Bit.forward keeps its input on the autograd node
# (autograd/_functions.py:522-523 ``ctx.tensors = (A, B)``), and fit() holds the step's output
# (finetune/lora.py:276 ``logits = model(input_ids, lm_head_chunk_size=128)``) until the next forward
# returns: bnb_inputs="next-forward". LitGPT's QLoRA goes through Lightning Fabric's BitsandbytesPrecision,
# whose _convert_layers replaces every nn.Linear (no ignore_modules passed), so lm_head.linear is NF4 too and
# each of its 128-token chunks is a 4-bit matmul: quant_head=True. bitsandbytes 0.42.0 Params4bit.cuda
# (bitsandbytes/nn/modules.py:168) and Lightning's _NF4Linear.quantize_ (lightning/fabric/plugins/precision/
# bitsandbytes.py, 527d071f49) quantize weight.half(), so dequantize_4bit returns fp16 and MatMul4Bit's
# .to(A.dtype) makes the bf16 copy beside it: dequant_dtype="fp16".
# LitGPT's CausalSelfAttention expands GQA keys and values to every head in training (litgpt/model.py:228-235
# at 5895df10, ``k.expand(B, n_query_groups, q_per_kv, T, hs)`` then ``reshape``: a copy) before SDPA: gqa_expand
# (a no-op for Llama 2's multi-head and Falcon's single kv head, whose reshape is a view)
_LITGPT = dict(mode="train", dtype="bf16", seq=512, gqa_expand=True)
_LITGPT_LORA = dict(_LITGPT, method="lora", lora_rank=32, lora_dropout=0.05, lora_dtype="bf16", loss_chunks=4)
_LITGPT_QLORA = dict(_LITGPT_LORA, method="qlora", quant="nf4", quant_targets="all", optimizer="paged-adamw",
                     bnb_inputs="next-forward", quant_head=True, dequant_dtype="fp16")
_A10G = _Setup(gpu="A10G", cuda="12.1", lazy_loading=True)
# torchtitan's benchmarks/llama3_h100_202412_torchtitan.md (torchtitan 9dec370): Llama 3.1 8B, FSDP2 with
# MixedPrecisionPolicy(bf16 params, fp32 reduce) over fp32 shards, per-op selective AC, foreach AdamW,
# seq_len 8192 from train_configs/llama3_8b.toml; the figure is torchtitan's max_reserved_gib
_TITAN_8B = dict(mode="train", dtype="fp32", amp="bf16", fsdp=True, batch=2, seq=8192, checkpointing="selective-op",
                 optimizer="adamw", optimizer_impl="foreach")
_H100_96 = _Setup(gpu="H100-NVL-94GB", cuda="12.4", lazy_loading=True)  # the catalog's nearest to H100 96GB HBM2e
# torchtitan's benchmarks/llama3_8b_h200_2025-06_torchtitan.md (torchtitan e7c0cae, June 2025): --training.compile
# compiles each TransformerBlock and the loss (components/loss.py build_cross_entropy_loss at that commit), AdamW's
# implementation defaults to fused there; float8 with FSDP float8 all-gather (not modelled: counted in bf16)
_TITAN_8B_2025 = {**_TITAN_8B, "optimizer_impl": "fused", "compile": True, "compile_scope": "blocks+loss", "fp8": True}
_H200 = _Setup(gpu="H200", cuda="12.9", lazy_loading=True)  # NGC 25.05's CUDA
# The SDPA training tables of transformers' model docs (bert.md, opt.md, distilbert.md): their benchmark loop
# runs outputs = model(**inputs); outputs.logits.sum().backward() in train mode (dropout on) with no labels, no
# attention_mask and no optimizer, and reads max_memory_allocated after warm-up (--loss logits-sum). BERT ran on an
# A100 (PyTorch 2.2.0), OPT on an L40S (PyTorch 2.4.0), DistilBERT on an RTX 2060 (PyTorch 2.3.1; not in the catalog:
# the RTX 2080 Ti, the same Turing sm_75 and so the same default cuBLAS workspace, the one GPU-dependent term here).
_SDPA_HARNESS = {"mode": "train", "dtype": "fp16", "optimizer": "none", "loss": "logits-sum"}
_L40S = _Setup(gpu="L40S", cuda="12.1", lazy_loading=True)
_RTX2060 = _Setup(gpu="RTX-2080-Ti", cuda="12.1", lazy_loading=True)


def _sdpa_cases(prefix: str, model: str, rows: tuple[tuple[int, int, str], ...], setup: _Setup,
                **settings: Any) -> dict[str, Case]:
    return {f"{prefix}-bs{b}-s{s}-{att}": Case(model, {**_SDPA_HARNESS, **settings, "batch": b, "seq": s,
                                                       "attention": att},
                                               figure="peak_allocated", **setup)
            for b, s, att in rows}


_BERT_ROWS = tuple((b, s, att) for b in (4, 8, 16) for s in (256, 512) for att in ("eager", "sdpa"))
_OPT_ROWS = ((1, 1024, "eager"), (1, 2048, "eager"), (2, 1024, "eager"), (4, 512, "eager"), (8, 256, "eager"),
             (8, 1024, "eager"), (1, 2048, "sdpa"), (8, 1024, "sdpa"))
_DISTIL_ROWS = tuple((b, s, att) for b, s in ((1, 128), (4, 256), (8, 128), (8, 256)) for att in ("eager", "sdpa"))
# gpt2.md and gpt_neox.md (transformers #31172 and #31031, vasqu, May-June 2024: fxmarty's training gist with a
# causal-LM head, on an "rtx3080ti-16GB", the RTX 3080 Ti Laptop GPU; PyTorch 2.2.1). Not in the catalog: the
# RTX 3080, the same Ampere sm_86 and so the same default cuBLAS workspace. Eager rows that ran out of memory are
# left out. transformers main was between 4.41 and 4.42 then
_RTX3080TI = _Setup(gpu="RTX-3080", cuda="12.1", lazy_loading=True)
_GPT2_ROWS = tuple((b, s, att) for b in (1, 2, 4) for s in (128, 256, 512, 1024) for att in ("eager", "sdpa")
                   if not (att == "eager" and b * s >= 2048 and s == 1024))
_NEOX_ROWS = tuple((b, s, att) for b in (1, 2, 4) for s in (128, 256, 512, 1024, 2048) for att in ("eager", "sdpa")
                   if not (att == "eager" and b * s >= 4096 and s >= 1024))
# torchtune's README "Optimization flags" table (commit 1814feb1, November 2024): Llama 3.2 3B on an A100, batch 2
# packed to 4096 tokens, bf16 parameters and states, torch.optim.AdamW; the figure is peak_memory_active. The table
# does not say foreach or fused, its figures do: the Baseline row (25.5 GiB) and the checkpointed rows sit under
# weights + gradients + two bf16 states + foreach's sqrt(exp_avg_sq) copy of every state (29.9 GiB), so the step
# made no such copy: fused. torchtune's MultiHeadAttention copies the 8 kv heads to all 24 before SDPA
# (torchtune/modules/attention.py ``k.unsqueeze(2).expand(...).flatten(1, 2)``): gqa_expand
_TUNE_3B = dict(mode="train", dtype="bf16", batch=2, seq=4096, optimizer="adamw", optimizer_impl="fused",
                attention="sdpa", gqa_expand=True)
# the rows after "+ Compile": every layer compiled and CEWithChunkedOutputLoss (8 chunks, compute_cross_entropy
# compiled); then full activation checkpointing; LoRA and QLoRA: llama3_2/3B_(q)lora_single_device (rank 64 on
# q_proj, v_proj, output_proj and the MLP, bf16 adapters, AdamW fused=True) with checkpointing and offloading
_TUNE_CE = {**_TUNE_3B, "compile": True, "compile_scope": "blocks", "loss_chunks": 8}
_TUNE_AC = {**_TUNE_CE, "checkpointing": "full"}
_TUNE_LORA = {**_TUNE_AC, "activation_offload": True, "method": "lora", "lora_rank": 64, "lora_dtype": "bf16",
              "lora_targets": ("q_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"),
              "optimizer_impl": "fused"}

# PEFT's README table "High performance on consumer hardware" (huggingface/peft, on one A100 80GB), made by
# examples/causal_language_modeling/pet_lora_clm_accelerate_ds_zero3_offload.py at 73d7224b (2022-12-30): bloomz-7b1
# (line 111) loaded by AutoModelForCausalLM.from_pretrained in fp32 (219), LoRAConfig r=8, lora_alpha=32,
# lora_dropout=0.1 (113) on peft's bloom target ["query_key_value"] (src/pet/mapping.py), torch.optim.AdamW (224),
# batch_size 8 (121), every row padded and cut to max_length 64 (123, 151-160). The figure is TorchTracemalloc's
# "Total Peak (max)": torch.cuda.max_memory_allocated() over an epoch (66-67, 99, 259), in MiB (b2mb, 57-58).
# torch 1.13 (setup.py: torch>=1.13.0): AdamW's per-parameter loop and zero_grad(set_to_none=False); transformers
# ~4.25: BLOOM's eager attention. That peft's MergedLinear (enable_lora=[True, False, True]: A 4096 -> 16, B a
# grouped Conv1d 16 -> 8192) trains 131,072 parameters per layer, as today's rank-8 LoRA on the whole output does.
# bloomz-7b1 is bloom-7b1 fine-tuned on xP3: the same config shapes (the catalog's bloom-7b1)
_PEFT_BLOOMZ = dict(mode="train", dtype="fp32", batch=8, seq=64, attention="eager", checkpointing="none",
                    optimizer="adamw", optimizer_impl="loop", keep_grads=True, method="lora", lora_rank=8,
                    lora_dropout=0.1, lora_targets=("query_key_value",))
_A100_2022 = _Setup(gpu="A100-80GB", cuda="11.7", lazy_loading=False)  # torch 1.13's cu117 wheels

CASES: dict[str, Case] = {
    "hf-anatomy-cuda-context": Case(None, figure="context", **_HF_V100),
    "hf-anatomy-bert-large-weights": Case("bert-large-uncased", {"dtype": "fp32"}, _BERT_CLS, "weights+context", **_HF_V100),
    "hf-perf-bert-large-vanilla-bs4": Case("bert-large-uncased", _TRAIN, _BERT_CLS, **_HF_V100),
    "hf-perf-bert-large-ga4-bs1": Case("bert-large-uncased", {**_TRAIN, "batch": 1, "grad_accum": 4}, _BERT_CLS, **_HF_V100),
    "hf-perf-bert-large-ga4-gc-bs1": Case("bert-large-uncased", {**_TRAIN, "batch": 1, "grad_accum": 4,
                                                                  "checkpointing": "full"}, _BERT_CLS, **_HF_V100),
    "hf-perf-bert-large-fp16-bs4": Case("bert-large-uncased", {**_TRAIN, "amp": "fp16"}, _BERT_CLS, **_HF_V100),
    "hf-perf-bert-large-fp16-ga4-gc-bs1": Case("bert-large-uncased", {**_TRAIN, "amp": "fp16", "batch": 1, "grad_accum": 4,
                                                                       "checkpointing": "full"}, _BERT_CLS, **_HF_V100),
    "hf-perf-bert-large-adafactor-bs4": Case("bert-large-uncased", {**_TRAIN, "optimizer": "adafactor"}, _BERT_CLS, **_HF_V100),
    "hf-perf-bert-large-adafactor-fp16-ga4-gc-bs1": Case(
        "bert-large-uncased", {**_TRAIN, "optimizer": "adafactor", "amp": "fp16", "batch": 1, "grad_accum": 4,
                               "checkpointing": "full"}, _BERT_CLS, **_HF_V100),
    "hf-perf-bert-large-adam8bit-bs4": Case("bert-large-uncased", {**_TRAIN, "optimizer": "adamw-8bit"}, _BERT_CLS, **_HF_V100),
    "hf-perf-bert-large-adam8bit-fp16-ga4-gc-bs1": Case(
        "bert-large-uncased", {**_TRAIN, "optimizer": "adamw-8bit", "amp": "fp16", "batch": 1, "grad_accum": 4,
                               "checkpointing": "full"}, _BERT_CLS, **_HF_V100),
    "accelerate-estimator-bert-base-cased-adam-derived": Case(
        "bert-base-uncased", {"mode": "train", "dtype": "fp32", "optimizer": "adam"},
        {"architectures": ["BertModel"], "vocab_size": 28_996}, "model_states"),
    "accelerate-bert-base-cased-load-measured": Case(
        "bert-base-uncased", {"dtype": "fp32"}, {"architectures": ["BertModel"], "vocab_size": 28_996}, "weights"),
    "deepspeed-est-t5-3b-zero2-8gpu": Case("t0-3b", {"mode": "train", "dtype": "fp16", "amp": "fp16", "optimizer": "adam",
                                                     "gpus": 8, "zero": 2}, figure="model_states"),
    "deepspeed-est-t5-3b-zero3-8gpu": Case("t0-3b", {"mode": "train", "dtype": "fp16", "amp": "fp16", "optimizer": "adam",
                                                     "gpus": 8, "zero": 3}, figure="model_states+comm"),
    "deepspeed-est-t0-3b-zero3-1gpu": Case("t0-3b", {"mode": "train", "dtype": "fp16", "amp": "fp16", "optimizer": "adam",
                                                     "gpus": 1, "zero": 3}, figure="model_states"),
    "deepspeed-manual-t5-large-zero3-4gpu": Case("t5-large", {"mode": "train", "dtype": "fp16", "amp": "fp16",
                                                              "optimizer": "adam", "gpus": 4, "zero": 3},
                                                 figure="model_states+comm"),
    "vllm-blog-llama-13b-kv-per-sequence": Case("llama-2-13b", {"dtype": "fp16", "seq": 2048}, figure="kv_cache"),
    "zero-paper-7.5b-baseline-dp": Case(None, {"mode": "train", "dtype": "fp16", "amp": "fp16", "optimizer": "adam",
                                               "gpus": 64}, figure="model_states", params="7.5B"),
    "zero-paper-7.5b-pos": Case(None, {"mode": "train", "dtype": "fp16", "amp": "fp16", "optimizer": "adam", "gpus": 64,
                                       "zero": 1}, figure="model_states", params="7.5B"),
    "zero-paper-7.5b-pos-g": Case(None, {"mode": "train", "dtype": "fp16", "amp": "fp16", "optimizer": "adam", "gpus": 64,
                                         "zero": 2}, figure="model_states", params="7.5B"),
    "zero-paper-7.5b-pos-g-p": Case(None, {"mode": "train", "dtype": "fp16", "amp": "fp16", "optimizer": "adam",
                                           "gpus": 64, "zero": 3}, figure="model_states", params="7.5B"),
    "korthikanti-gpt3-175b-act-per-layer-noparallel": Case(
        "gpt2", {"mode": "train", "dtype": "fp16", "attention": "eager", "seq": 2048},
        {"n_embd": 12_288, "n_head": 96, "n_layer": 96, "n_positions": 2048, "activation_function": "gelu"},
        "layer_activations"),
    "hf-llmopt-octocoder-kvcache-16k-mha-derived": Case("starcoder", {"dtype": "fp16", "seq": 16_000},
                                                        {"multi_query": False}, "kv_cache"),
    "torchao-readme-llama2-7b-torch-fused": Case("llama-2-7b", {**_TORCHAO_7B, "optimizer": "adamw",
                                                                "optimizer_impl": "fused"},
                                                 figure="peak_allocated", **_A100),
    "torchao-readme-llama2-7b-bnb-8bit": Case("llama-2-7b", {**_TORCHAO_7B, "optimizer": "adamw-8bit"},
                                              figure="peak_allocated", **_A100),
    "torchao-readme-llama2-7b-ao-8bit": Case("llama-2-7b", {**_TORCHAO_7B, "optimizer": "adamw-8bit-torchao"},
                                             figure="peak_allocated", **_A100),
    "torchao-readme-llama2-7b-ao-4bit": Case("llama-2-7b", {**_TORCHAO_7B, "optimizer": "adamw-4bit-torchao"},
                                             figure="peak_allocated", **_A100),
    "litgpt-tinyllama-1.1b-full-bs4": Case("tinyllama-1.1b", {**_LITGPT, "batch": 4, "grad_accum": 8},
                                           figure="peak_allocated", **_A10G),
    "litgpt-llama2-7b-lora-r32-qv-bs2": Case("llama-2-7b", {**_LITGPT_LORA, "lora_targets": ("q_proj", "v_proj"),
                                                            "batch": 2, "grad_accum": 4}, figure="peak_allocated", **_A10G),
    "litgpt-llama2-7b-qlora-r32-qv-bs2": Case("llama-2-7b", {**_LITGPT_QLORA, "lora_targets": ("q_proj", "v_proj"),
                                                             "batch": 2, "grad_accum": 4}, figure="peak_allocated", **_A10G),
    "litgpt-llama3-8b-lora-r32-qv-bs1": Case("llama-3-8b", {**_LITGPT_LORA, "lora_targets": ("q_proj", "v_proj"),
                                                            "batch": 1, "grad_accum": 8}, figure="peak_allocated", **_A10G),
    "litgpt-llama3-8b-qlora-r32-qv-bs2": Case("llama-3-8b", {**_LITGPT_QLORA, "lora_targets": ("q_proj", "v_proj"),
                                                             "batch": 2, "grad_accum": 4}, figure="peak_allocated", **_A10G),
    "litgpt-mistral-7b-lora-r32-qv-bs2": Case("mistral-7b-v0.1", {**_LITGPT_LORA, "lora_targets": ("q_proj", "v_proj"),
                                                                  "batch": 2, "grad_accum": 4},
                                              figure="peak_allocated", **_A10G),
    "litgpt-mistral-7b-qlora-r32-qv-bs2": Case("mistral-7b-v0.1", {**_LITGPT_QLORA, "lora_targets": ("q_proj", "v_proj"),
                                                                   "batch": 2, "grad_accum": 4},
                                               figure="peak_allocated", **_A10G),
    "litgpt-falcon-7b-lora-r32-qv-bs1": Case("falcon-7b", {**_LITGPT_LORA, "lora_targets": ("query_key_value",),
                                                           "batch": 1, "grad_accum": 8}, figure="peak_allocated", **_A10G),
    "litgpt-falcon-7b-qlora-r32-qv-bs1": Case("falcon-7b", {**_LITGPT_QLORA, "lora_targets": ("query_key_value",),
                                                            "batch": 1, "grad_accum": 8}, figure="peak_allocated", **_A10G),
    "torchtitan-h100-llama3.1-8b-fsdp8-sac-bs2": Case("llama-3.1-8b", {**_TITAN_8B, "gpus": 8},
                                                      figure="peak_reserved", **_H100_96),
    "torchtitan-h100-llama3.1-8b-fsdp128-sac-bs2": Case("llama-3.1-8b", {**_TITAN_8B, "gpus": 128},
                                                        figure="peak_reserved", **_H100_96),
    # the same tables' torch.compile rows (each TransformerBlock compiled) and torch.compile + Float8 rows
    "torchtitan-h100-llama3.1-8b-fsdp8-sac-bs2-compile": Case("llama-3.1-8b", {**_TITAN_8B, "gpus": 8, "compile": True, "compile_scope": "blocks"},
                                                              figure="peak_reserved", **_H100_96),
    "torchtitan-h100-llama3.1-8b-fsdp8-sac-bs2-compile-float8": Case(
        "llama-3.1-8b", {**_TITAN_8B, "gpus": 8, "compile": True, "compile_scope": "blocks", "fp8": True}, figure="peak_reserved", **_H100_96),
    "torchtitan-h100-llama3.1-8b-fsdp128-sac-bs2-compile": Case(
        "llama-3.1-8b", {**_TITAN_8B, "gpus": 128, "compile": True, "compile_scope": "blocks"}, figure="peak_reserved", **_H100_96),
    "torchtitan-h100-llama3.1-8b-fsdp128-sac-bs2-compile-float8": Case(
        "llama-3.1-8b", {**_TITAN_8B, "gpus": 128, "compile": True, "compile_scope": "blocks", "fp8": True}, figure="peak_reserved", **_H100_96),
    "torchtitan-h200-llama3.1-8b-fsdp32-sac-bs2-compile-float8": Case("llama-3.1-8b", {**_TITAN_8B_2025, "gpus": 32},
                                                                      figure="peak_reserved", **_H200),
    "torchtitan-h200-llama3.1-8b-fsdp64-sac-bs2-compile-float8": Case("llama-3.1-8b", {**_TITAN_8B_2025, "gpus": 64},
                                                                      figure="peak_reserved", **_H200),
    # Table 2's CP 1 row: one sample of 32,768 tokens, full checkpointing, blocks compiled (the loss eager at 9dec370)
    "torchtitan-h100-llama3.1-8b-fsdp8-cp1-fullac-bs1-s32k-compile-float8": Case(
        "llama-3.1-8b", {**_TITAN_8B, "gpus": 8, "batch": 1, "seq": 32_768, "checkpointing": "full", "compile": True,
                         "compile_scope": "blocks", "fp8": True}, figure="peak_reserved", **_H100_96),
    **{f"torchtitan-h100-llama3.1-8b-fsdp{8 // cp}-cp{cp}-fullac-bs1-s{32 * cp}k-compile-float8": Case(
        "llama-3.1-8b", {**_TITAN_8B, "gpus": 8, "cp": cp, "batch": 1, "seq": 32_768 * cp, "checkpointing": "full",
                         "compile": True, "compile_scope": "blocks", "fp8": True}, figure="peak_reserved", **_H100_96)
       for cp in (2, 4, 8)},
    "torchtune-readme-llama3.2-3b-packed": Case("llama-3.2-3b", dict(_TUNE_3B), figure="peak_allocated", **_A100),
    # "+ Compile": training.compile_model compiles each layer; the plain loss' compile_loss result is discarded
    # (the recipe keeps self._loss_fn uncompiled for a non-chunked loss), so the output layer and loss run eagerly
    "torchtune-readme-llama3.2-3b-compile": Case("llama-3.2-3b", {**_TUNE_3B, "compile": True, "compile_scope": "blocks"},
                                                 figure="peak_allocated", **_A100),
    "torchtune-readme-llama3.2-3b-chunked-ce": Case("llama-3.2-3b", _TUNE_CE, figure="peak_allocated", **_A100),
    "torchtune-readme-llama3.2-3b-ac": Case("llama-3.2-3b", _TUNE_AC, figure="peak_allocated", **_A100),
    "torchtune-readme-llama3.2-3b-opt-in-bwd": Case("llama-3.2-3b", {**_TUNE_AC, "optimizer_in_backward": True},
                                                    figure="peak_allocated", **_A100),
    "torchtune-readme-llama3.2-3b-act-offload": Case("llama-3.2-3b", {**_TUNE_AC, "optimizer_in_backward": True,
                                                                      "activation_offload": True},
                                                     figure="peak_allocated", **_A100),
    # "AdamW8bit": torchao's (the linked tutorial offers it and bitsandbytes' paged one, whose states are outside
    # PyTorch's allocator and would leave the active peak near 10 GiB)
    "torchtune-readme-llama3.2-3b-adamw8bit": Case("llama-3.2-3b", {**_TUNE_AC, "optimizer_in_backward": True,
                                                                    "activation_offload": True,
                                                                    "optimizer": "adamw-8bit-torchao"},
                                                   figure="peak_allocated", **_A100),
    "torchtune-readme-llama3.2-3b-lora": Case("llama-3.2-3b", _TUNE_LORA, figure="peak_allocated", **_A100),
    # quantize_base=True makes every linear of the blocks NF4: the adapted ones' base weights, the others (k_proj)
    # FrozenNF4Linear (torchtune/models/llama3/_component_builders.py); the tied embedding stays bf16
    "torchtune-readme-llama3.2-3b-qlora": Case("llama-3.2-3b", {**_TUNE_LORA, "method": "qlora",
                                                                "quant_targets": "all"},
                                               figure="peak_allocated", **_A100),
    "peft-readme-bloomz-7b1-lora-pytorch": Case("bloom-7b1", _PEFT_BLOOMZ, figure="peak_allocated", **_A100_2022),
    **_sdpa_cases("hf-sdpa-bert-base-train", "bert-base-uncased", _BERT_ROWS, _A100),
    # the OPT PR's benchmarks (transformers #33298, 2024-09-25: main between 4.45 and 4.46) ran OPTAttention's
    # score clamp, which 4.49 dropped (Workload.legacy_score_clamp); with GPT-2's and GPT-NeoX's rows below, that
    # release's forward also returns every block's (key, value) tuple (the config's use_cache), which the loop's
    # outputs hold until the next forward returns (ModelSpec.legacy_presents, Workload.holds_presents), and OPT's
    # SDPA gets contiguous head-major q, k and v, whose output is copied back (ModelSpec.legacy_output_copy_before)
    **_sdpa_cases("hf-sdpa-opt350m-train", "opt-350m", _OPT_ROWS, _L40S, transformers_version="4.45"),
    **_sdpa_cases("hf-sdpa-distilbert-train", "distilbert-base-uncased", _DISTIL_ROWS, _RTX2060),
    **_sdpa_cases("hf-sdpa-gpt2-large-train", "gpt2-large", _GPT2_ROWS, _RTX3080TI, transformers_version="4.42"),
    **_sdpa_cases("hf-sdpa-pythia410m-train", "pythia-410m", _NEOX_ROWS, _RTX3080TI, transformers_version="4.42"),
}

# PEFT's seq2seq rows: tokenizer(inputs, truncation=True) padded by collate_fn to each batch's longest tweet, labels
# padded to target_max_length (pet_lora_seq2seq_accelerate_ds_zero3_offload.py at 73d7224b, lines 130, 135-137, 160)
_PEFT_T5 = ("encoder and decoder lengths differ and neither is stated: the encoder sees each batch's longest tweet, "
            "the decoder the labels padded to the longest class label (a few tokens); --seq sets both")
_PEFT_DS = "; and DeepSpeed ZeRO-3 parameter offload (as peft-readme-bloomz-7b1-lora-ds-offload)"

#: Cases vramlens cannot express, with the reason (printed instead of a number).
UNSUPPORTED: dict[str, str] = {
    "torchtune-loralinear-512-r8-fp32": "a bare LoRALinear module, not a model: checked exactly in tests/estimate",
    "torchtune-qloralinear-512-r8-nf4": "a bare torchao NF4 LoRALinear: see tests/estimate",
    "vllm-paper-opt-13b-kv-per-token": "OPT-13B is not in the catalog; LLaMA-13B's identical 800 KiB/token is checked",
    # PEFT's README table: the seq2seq rows (pet_lora_seq2seq_accelerate_ds_zero3_offload.py at 73d7224b)
    "peft-readme-t0-3b-full": _PEFT_T5,
    "peft-readme-t0-3b-lora-pytorch": _PEFT_T5,
    "peft-readme-mt0-xxl-lora-pytorch": _PEFT_T5,
    "peft-readme-t0-3b-lora-ds-offload": _PEFT_T5 + _PEFT_DS,
    "peft-readme-mt0-xxl-lora-ds-offload": _PEFT_T5 + _PEFT_DS,
    # The scripts' settings are known (the README's accelerate config: zero_stage 3, offload_param and offload_optimizer
    # cpu, fp32, DeepSpeed's default buckets) and --zero 3 --offload all now counts DeepSpeed's contiguous-gradients
    # bucket, torch.empty(reduce_bucket_size=5e8) in fp32 (1,907 MiB: the log's 1,916 MiB before training); expressed
    # as {**_PEFT_BLOOMZ, "zero": 3, "offload": "all"} it estimates 7,775 MiB, -58.1%. The rest is the parameters
    # DeepSpeed's coordinator keeps gathered (up to stage3_max_live_parameters 1e9 elements with prefetching,
    # stage3_max_reuse_distance 1e9 keeping parameters reused soon, the 1.03B-element embedding whole): not modelled
    "peft-readme-bloomz-7b1-lora-ds-offload": "DeepSpeed ZeRO-3 parameter offload's gathered-parameter working set "
                                              "(stage3_max_live_parameters, stage3_max_reuse_distance, the embedding "
                                              "gathered whole) is not modelled: --zero 3 --offload all estimates "
                                              "7.6 GiB (two blocks plus the 1,907 MiB gradient bucket)",
}


@dataclass(frozen=True, slots=True)
class Row:
    id: str
    figure: str
    published_bytes: int
    estimated_bytes: int | None
    first_order_bytes: int | None
    reason: str = ""

    @property
    def error(self) -> float | None:
        if self.estimated_bytes is None:
            return None
        return (self.estimated_bytes - self.published_bytes) / self.published_bytes

    @property
    def first_order_error(self) -> float | None:
        if self.first_order_bytes is None:
            return None
        return (self.first_order_bytes - self.published_bytes) / self.published_bytes


def _spec(case: Case, load_model: Callable[..., ModelSpec]) -> ModelSpec | None:
    if case.model is None:
        return load_model(None, params=case.params) if case.params else None
    base = load_model(case.model)
    if not case.overrides:
        return base
    cfg = {**base.config, **case.overrides}
    return load_model(cfg)


def published_bytes(entry: dict[str, Any]) -> int | None:
    """The case's figure in bytes: ``value_bytes``, or the exact value its ``kind`` states ("exact = N B")."""
    import re

    fig = entry["figure"]
    if fig.get("value_bytes") is not None:
        return int(fig["value_bytes"])
    m = re.search(r"exact = ([0-9][0-9,_]*) B", str(fig.get("kind", "")))
    return int(m.group(1).replace(",", "").replace("_", "")) if m else None


def run_case(case_id: str, published: dict[str, Any], case: Case) -> Row:
    """Estimate one case; ``published`` is its entry of published-cases.json."""
    from vramlens.estimator import estimate
    from vramlens.hardware.catalog import get_gpu
    from vramlens.hardware.runtime import context_bytes_for
    from vramlens.models import load_model

    target = published_bytes(published)
    if target is None:
        return Row(case_id, case.figure, 0, None, None, "no value_bytes in the case")
    context, _ = context_bytes_for(case.cuda, lazy_loading=case.lazy_loading)
    if case.figure == "context":
        small_segment = 2 * MiB  # torch.ones((1, 1)).to("cuda"): one 2 MiB small-pool segment
        return Row(case_id, case.figure, target, context + small_segment, None)
    spec = _spec(case, load_model)
    gpu = get_gpu(case.gpu) if case.gpu else None
    est = estimate(spec, gpu=gpu, **case.settings)
    bd = est.breakdown
    c = bd.as_dict()
    first_order = None
    if case.figure == "device_total":
        value = bd.peak_reserved + _outside(est, context)
        first_order = bd.peak_allocated + context
    elif case.figure == "weights+context":
        value = c["weights"] + context
    elif case.figure == "weights":
        value = c["weights"]
    elif case.figure == "peak_allocated":
        value = bd.peak_allocated
    elif case.figure == "peak_reserved":
        value = bd.peak_reserved
    elif case.figure == "model_states":
        value = c["weights"] + c["gradients"] + c["master_weights"] + c["optimizer_states"]
    elif case.figure == "model_states+comm":
        # DeepSpeed's estimator (memory.rst): model states + the largest layer gathered; its figure leaves out
        # the contiguous-gradients bucket that comm_buffers also holds under ZeRO-3
        from vramlens.estimator.parallel import deepspeed_ipg_bucket, ds_reduce_bucket_size

        ds_bucket = 0
        if est.workload.zero == 3 and spec is not None:
            ds_bucket = deepspeed_ipg_bucket(DTYPE_BYTES[est.workload.dtype], ds_reduce_bucket_size(spec, est.workload))
        value = (c["weights"] + c["gradients"] + c["master_weights"] + c["optimizer_states"] + c["comm_buffers"]
                 - ds_bucket)
    elif case.figure == "kv_cache":
        from vramlens.estimator.kv_cache import kv_cache_bytes

        assert spec is not None  # a kv_cache case names its model
        value = kv_cache_bytes(spec, est.workload, est.workload.seq, est.workload.batch)
    elif case.figure == "layer_activations":
        value = est.layer_activation_bytes
    else:
        raise ValueError(case.figure)
    return Row(case_id, case.figure, target, int(value), first_order)


def _outside(est: Estimate, context: int) -> int:
    """The context this case's CUDA version implies, instead of the default one in the estimate."""
    from vramlens.estimator.runtime import runtime

    rt: RuntimeOverhead = runtime(est.gpu, est.workload)
    return context + (rt.outside_allocator_bytes - rt.context_bytes)


def run_all(cases: list[dict[str, Any]]) -> list[Row]:
    rows = []
    for entry in cases:
        cid = entry["id"]
        if cid in CASES:
            rows.append(run_case(cid, entry, CASES[cid]))
        else:
            target = published_bytes(entry) or 0
            rows.append(Row(cid, "-", target, None, None, UNSUPPORTED.get(cid, "no mapping yet")))
    return rows
