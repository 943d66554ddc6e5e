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
        "allocated+outside" peak allocated + what NVML shows beyond the allocator's reservation
                         (context, lazily loaded kernel images): optimum's benchmark_gptq.py
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
# transformers ~4.16 (Jan 2022): the Trainer's default optimizer was transformers.AdamW ("adamw_hf",
# --optimizer-impl transformers), a per-parameter Python loop (Adafactor's too: --optimizer-impl loop); BERT's
# attention was eager; and model.zero_grad() zeroed the gradients in place (set_to_none=False, PyTorch 1.x's
# default), so they stay allocated
_TRAIN = dict(mode="train", batch=4, seq=512, attention="eager", dtype="fp32", optimizer_impl="transformers",
              keep_grads=True)

# torchao's README (torchao/optim/README.md), Llama2-7B on Alpaca with torchtune 52d1b838: full bf16 on an
# A100, that commit's llama2/7B_full_low_memory settings (batch 2, activation checkpointing, chunked
# cross-entropy in 8 chunks) with the optimizer replaced; optimizer_in_bwd off and seq 512 are
# this file's reading of what the source leaves unstated (the case's other_settings say why)
_TORCHAO_7B = dict(mode="train", dtype="bf16", batch=2, seq=512, checkpointing="full", loss_chunks=8)
_A100 = _Setup(gpu="A100-80GB", cuda="12.1", lazy_loading=True)  # CUDA 12: lazy loading by default

# torchao's ViT-H table (torchao/prototype/low_bit_optim/README.md at 1e7f132e, PR #812): benchmarks/benchmark_low_bit_adam.py
# at that commit fine-tunes timm's vit_huge_patch14_224 (patch 14, embed 1280, depth 32, heads 16, mlp_ratio 4, qkv bias,
# class token, final norm; timm/models/vision_transformer.py) with num_classes=45: the tensors of transformers'
# ViTForImageClassification at these sizes (630,822,445 parameters; timm's one qkv linear equals q, k and v).
# fp32 weights under bf16 autocast, batch 8 of 224x224 crops, model.compile(fullgraph=True) (the estimator
# reports the compiled vision step as eager, and says so), zero_grad(set_to_none) after each step
_TORCHAO_VIT_H = {"hidden_size": 1280, "num_hidden_layers": 32, "num_attention_heads": 16, "intermediate_size": 5120,
                  "patch_size": 14, "image_size": 224, "layer_norm_eps": 1e-6, "num_labels": 45,
                  "id2label": {str(i): str(i) for i in range(45)}, "label2id": {str(i): i for i in range(45)}}
_TORCHAO_VIT = dict(mode="train", dtype="fp32", amp="bf16", batch=8, compile=True)
# the catalog has no RTX 4070 Ti SUPER: the RTX 4090 is the same Ada (sm_89) part for what peak_allocated reads
# (cuBLAS's default workspace), on torch 2.4's default cu121 wheels
_ADA = _Setup(gpu="RTX-4090", cuda="12.1", lazy_loading=True)

# LitGPT's config_hub/finetune/README.md table (commit 5895df10, April 2024): single-GPU runs on an A10G,
# bf16-true, Alpaca2k, max_seq_length 512 (batches padded to their longest sample). LoRA/QLoRA:
# litgpt/finetune/lora.py (lm_head in 128-token chunks: 4 chunks of 512; torch AdamW, or
# bitsandbytes PagedAdamW (32-bit) under bnb quantization; adapters in bf16, dropout 0.05). QLoRA ran the
# pinned bitsandbytes==0.42.0, whose MatMul4Bit.forward keeps its input on the autograd node
# (autograd/_functions.py:522-523 ``ctx.tensors = (A, B)``), and fit() holds the step's output
# (finetune/lora.py:276 ``logits = model(input_ids, lm_head_chunk_size=128)``) until the next forward
# returns: bnb_inputs=True, holds_outputs="next-forward". LitGPT's QLoRA goes through Lightning Fabric's BitsandbytesPrecision,
# whose _convert_layers replaces every nn.Linear (no ignore_modules passed), so lm_head.linear is NF4 too and
# each of its 128-token chunks is a 4-bit matmul: quant_head=True. bitsandbytes 0.42.0 Params4bit.cuda
# (bitsandbytes/nn/modules.py:168) and Lightning's _NF4Linear.quantize_ (lightning/fabric/plugins/precision/
# bitsandbytes.py, 527d071f49) quantize weight.half(), so dequantize_4bit returns fp16 and MatMul4Bit's
# .to(A.dtype) makes the bf16 copy beside it: dequant_dtype="fp16".
# LitGPT's CausalSelfAttention expands GQA keys and values to every head in training (litgpt/model.py:228-235
# at 5895df10, ``k.expand(B, n_query_groups, q_per_kv, T, hs)`` then ``reshape``: a copy) before SDPA: gqa_expand.
# Its q, k and v are views of one fused linear's output (model.py:215-224), and LoRA adapts that linear as one
# LoRAQKVLinear (litgpt/lora.py): fused_qkv (SDPA's value keeps the fused output under multi-head and a single kv
# head, whose reshape is a view; a single kv head's keys are rotated at every head; one shared adapter dropout and
# zero_pad's kept source)
_LITGPT = dict(mode="train", dtype="bf16", seq=512, gqa_expand=True, fused_qkv=True)
# LitGPT's chunked_cross_entropy (litgpt/utils.py at 5895df10 and 00af8b0d, lit_gpt/utils.py at 8641822) runs
# F.cross_entropy on each logits chunk as it is, with no .float(): loss_upcast=False. The chunks it gets are fp32:
# fit() calls the model through Lightning Fabric, whose _FabricModule.forward returns precision.convert_output(output),
# every floating output cast to torch's default dtype, fp32, under bf16-true and BitsandbytesPrecision alike
# (the pins are nightlies 2.3.0.dev20240328 / 2.4.0.dev20240728; the code is the same at 71aed751 and the 2.3.0 and
# 2.4.0 tags: src/lightning/fabric/wrappers.py forward, plugins/precision/half.py and bitsandbytes.py convert_output), and ``logits = model(...)`` holds them until the next forward returns
_LITGPT_LORA = dict(_LITGPT, method="lora", lora_rank=32, lora_dropout=0.05, lora_dtype="bf16", loss_chunks=4,
                    loss_upcast=False, output_upcast=True, holds_outputs="next-forward")
_LITGPT_QLORA = dict(_LITGPT_LORA, method="qlora", quant="nf4", quant_targets="all", optimizer="paged-adamw",
                     bnb_inputs=True, quant_head=True, dequant_dtype="fp16")
_A10G = _Setup(gpu="A10G", cuda="12.1", lazy_loading=True)
# LitGPT's tutorials/resource-tables.md (0cc02afa, October 2023): Lit-GPT 8641822's finetune/lora.py on one
# A100-SXM4-40GB (PyTorch 2.1.0+cu121, bitsandbytes 0.41.1), Alpaca at full length: max_seq_length is the longest
# example and the first iteration's batch is built around it (get_batch(..., longest_seq_ix if iter_num == 0)), so
# the peak is that step: nothing of a previous step is held (holds_outputs="step", bnb_inputs=True, output_upcast: the fp32
# logits of Fabric's convert_output at lightning 71aed751, the commit 8641822 pins, held through that step's
# backward). r=8 on q and v, dropout 0.05, lm_head in 128-token chunks (loss_chunks = ceil(seq / 128)), minibatch 128
# lora_query and lora_value: under --fused-qkv q_proj,v_proj name the q and v parts of the fused linear that LitGPT's
# LoRAQKVLinear adapts, of GPT-NeoX's and Falcon's query_key_value too (inventory.qkv_slices)
_RT_LORA = dict(_LITGPT, method="lora", lora_rank=8, lora_dropout=0.05, lora_dtype="bf16",
                lora_targets=("q_proj", "v_proj"), loss_upcast=False, output_upcast=True, holds_outputs="step")
_RT_QLORA = dict(_RT_LORA, method="qlora", quant_targets="all", optimizer="paged-adamw", bnb_inputs=True,
                 quant_head=True, dequant_dtype="fp16")
_A100_40 = _Setup(gpu="A100-40GB", cuda="12.1", lazy_loading=True)


def _rt(seq: int, batch: int, base: dict[str, Any], quant: str | None = None) -> dict[str, Any]:
    """One resource-table row's settings: the longest example's tokens, 128-token head chunks, minibatch 128."""
    return {**base, "seq": seq, "batch": batch, "grad_accum": 128 // batch, "loss_chunks": -(-seq // 128),
            **({"quant": quant} if quant else {})}


# lora_query/key/value/projection/mlp true: every linear of the blocks (lora_head, the output layer's adapter, is not
# expressible: the cases' notes say so)
_LLAMA_ALL = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
_PHI_ALL = ("q_proj", "k_proj", "v_proj", "dense", "fc1", "fc2")
# LitGPT's GPT has its own lm_head: GPT.__init__ (litgpt/model.py at 5895df10, lines 24-31) makes lm_head and
# transformer.wte separate parameters and never ties them, and convert_hf_checkpoint.py (lines 176-177) copies the
# embedding into lm_head.weight when the Hugging Face checkpoint has none (Gemma): Falcon's and Gemma's tied
# configs are untied in LitGPT
_UNTIED = {"tie_word_embeddings": False}
# LitGPT's phi-2 MLP (GptNeoxMLP, config gelu_approximate="tanh") is one F.gelu(approximate="tanh"), not
# transformers' gelu_new Python ops
_PHI_GELU = {"hidden_act": "gelu_pytorch_tanh"}
# torchtitan's benchmarks/llama3_h100_202412_torchtitan.md (torchtitan 9dec370): Llama 3.1 8B, FSDP2 with
# MixedPrecisionPolicy(bf16 params, fp32 reduce) over fp32 shards, per-op selective AC, foreach AdamW,
# seq_len 8192 from train_configs/llama3_8b.toml; the figure is torchtitan's max_reserved_gib. torchtitan's launch
# script sets PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True" at every commit these cases read (run_llama_train.sh
# line 22 at 9dec370, as the README launches it; run_train.sh line 24 at 0da8901b and e7c0cae, line 19 at 2c8b5947 and
# 6fc499f6), and torchao's float8 benchmark scripts run that run_train.sh (float8_training_benchmark.sh line 42 at
# 8c81863b, llama3.sh line 48 at 853f87d1, line 56 at d8bb51f6)
_TITAN_8B = dict(mode="train", dtype="fp32", amp="bf16", fsdp=True, batch=2, seq=8192, checkpointing="selective-op",
                 optimizer="adamw", optimizer_impl="foreach", alloc_conf="expandable_segments:True")
_H100_96 = _Setup(gpu="H100-NVL-94GB", cuda="12.4", lazy_loading=True)  # the catalog's nearest to H100 96GB HBM2e
# torchtitan's benchmarks/llama3_8b_h200_2025-06_torchtitan.md (torchtitan e7c0cae, June 2025): --training.compile
# compiles each TransformerBlock and the loss (components/loss.py build_cross_entropy_loss at that commit), AdamW's
# implementation defaults to fused there; float8 with FSDP float8 all-gather (not modelled: counted in bf16)
_TITAN_8B_2025 = {**_TITAN_8B, "optimizer_impl": "fused", "compile": True, "compile_scope": "blocks+loss", "fp8": True}
_H200 = _Setup(gpu="H200", cuda="12.9", lazy_loading=True)  # NGC 25.05's CUDA
# torchao's float8 training tables (torchao/float8/README.md at 8c81863b and 853f87d1, mx_formats/README.md at
# d8bb51f6): benchmarks/float8/training's script runs torchtitan's llama3_8b.toml on 8 GPUs with batch 1 and
# --training.compile; fp8 is the tensorwise recipe with float8 all-gather (counted in bf16). torchtitan's own commit:
# H100 not stated (main of 2025-03-11, 0da8901b: blocks compiled, the loss eager), MI300X 2c8b5947, B200 6fc499f6
# (blocks and the loss compiled); AdamW 'fused' at all three. The figure is torchtitan's max_reserved_gib
_AO_F8_H100 = {**_TITAN_8B, "gpus": 8, "batch": 1, "optimizer_impl": "fused", "compile": True, "compile_scope": "blocks"}
_AO_F8_2025 = {**_AO_F8_H100, "compile_scope": "blocks+loss"}
_AO_F8_SETUPS = {"h100": (_AO_F8_H100, _Setup(gpu="H100-SXM-80GB", cuda="12.6", lazy_loading=True)),
                 "mi300x": (_AO_F8_2025, _Setup(gpu="MI300X", cuda="12.8", lazy_loading=True)),
                 "b200": (_AO_F8_2025, _Setup(gpu="B200", cuda="12.8", lazy_loading=True))}
# The B200 rows read +20..+23 % (issue 9): vramlens' peak allocated is near their reserved figure, its reserve adds
# FSDP2's copy-in and reduce-scatter streams' pools (parallel.fsdp_stream_pools). Nothing in the stack that these rows
# state differs from the MI300X rows' (+3.7..+5.5 %) but the platform: torchtitan 2c8b5947..6fc499f6 leaves apply_fsdp,
# run_train.sh and metrics.py as they were, torch is 2.9.0.dev20250815+cu128 vs 2.9.0.dev20250811+rocm6.4, and FSDP2
# allocates both outputs on its side streams through torch 2.13 (_fsdp_collectives.py foreach_all_gather /
# foreach_reduce). Not modelled; the cases' notes in published-cases.json list what was read. Both 2025 commits
# also shard tok_embeddings and [norm, output] as units of their own (the latter reshard_after_forward=False), which
# fsdp_units "blocks" counts in the root; "blocks+embed+output" (torchtune's, output resharded) is not that either
# torchtitan's December 2024 405B rows: as the 70B row (TP 8 with loss parallelism, Float8 under TP, full AC, blocks
# compiled) over pp 8 with pipeline_parallel_microbatches None, so 8 micro-batches
_TITAN_405B = {**_TITAN_8B, "tp": 8, "pp": 8, "grad_accum": 8, "loss_parallel": True, "checkpointing": "full",
               "compile": True, "compile_scope": "blocks", "fp8": True}
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

# torchtune's README "Finetuning resource requirements" tables of 2024, Llama-2-7B (the catalog's llama-2-7b): every
# recipe builds the model in bf16 (dtype: bf16, no autocast, no master copy), torch 2.2's torch.optim default (foreach
# on CUDA), nn.CrossEntropyLoss over ``self.output(h).float()`` (torchtune/modules/transformer.py) shifted by the
# recipe's ``logits[..., :-1, :].contiguous()``. lora_llama2_7b passes lora_dropout=0.05 and builds the adapters in
# bf16 (utils.set_default_dtype); qlora_llama2_7b is quantize_base=True: torchao's to_nf4 (block 64, double-quantized
# scalers, block 256) on the adapted linears (all of the blocks' in 7B_qlora_single_device), dequantized at every matmul
# by linear_nf4's NF4Tensor.get_original_weight (nf4_impl torchao). Distributed recipes: FSDP1
# FULL_SHARD, mixed_precision=None (bf16 flat parameters). Alpaca was padded to each batch's longest sample: before
# torchtune 73647e26 (2024-03-30) without truncation, then cut to max_seq_len 512 (alpaca_dataset's default): seq 512
_TT24 = dict(mode="train", dtype="bf16", batch=2, seq=512, optimizer="adamw", optimizer_impl="foreach",
             attention="sdpa")
_TT24_LORA = dict(_TT24, method="lora", lora_rank=8, lora_dtype="bf16", lora_dropout=0.05,
                  lora_targets=("q_proj", "v_proj"))
# The QLoRA recipe builds the model on the GPU, quantizing, deep-copying and re-quantizing its NF4 weights there,
# and never empties the cache before training (quantize_on_device: vramlens.estimator.ondevice)
_TT24_QLORA = dict(_TT24_LORA, method="qlora", quant="nf4-dq", quant_targets="adapted", checkpointing="full",
                   nf4_impl="torchao", quantize_on_device=True,
                   lora_targets=("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"))
# full_finetune_single_device's low-memory config: bitsandbytes PagedAdamW (32-bit states in CUDA unified memory,
# outside max_memory_reserved) stepped in backward (optimizer_in_bwd: True)
_TT24_LOWMEM = dict(_TT24, optimizer="paged-adamw", optimizer_in_backward=True, checkpointing="full")
_RTX4090 = _Setup(gpu="RTX-4090", cuda="12.1", lazy_loading=True)  # torch 2.2's cu121 wheels

# torchtune's README "Memory and training speed" table (commit 30b8519e, PR #1664, September 2024): Llama 3.1, "batch
# size 2 (without gradient accumulation), a dataset packed to sequence length 2048, and torch compile enabled", each
# row's llama3_1 config at that commit. compile and the 70B row's fused CPU AdamW needed nightlies then (torch
# 2.5.0.dev, which passes torch_version_ge("2.5.0")): training.compile_model compiles each layer and compile_loss the
# chunked loss; bf16 parameters and states; CEWithChunkedOutputLoss (8 chunks); MultiHeadAttention expands GQA keys
# and values (gqa_expand); enable_activation_checkpointing True in every config. The figure kind is not stated (the
# recipes log active, allocated and reserved in GiB): taken as peak active, as the next table (1814feb1) names it
_TT_SEP24 = dict(mode="train", dtype="bf16", batch=2, seq=2048, attention="sdpa", gqa_expand=True, compile=True,
                 compile_scope="blocks", loss_chunks=8, checkpointing="full")
# lora_llama3_1_8b (8B_lora_single_device): q_proj and v_proj, rank 8, dropout 0, bf16 adapters, AdamW(fused=True)
_TT_SEP24_LORA = dict(_TT_SEP24, method="lora", lora_rank=8, lora_dtype="bf16", lora_targets=("q_proj", "v_proj"),
                      optimizer="adamw", optimizer_impl="fused")
# the PR's nightlies: pip's default CUDA 12.1 build taken (not stated)
_RTX4090_SEP24 = _Setup(gpu="RTX-4090", cuda="12.1", lazy_loading=True)

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
# Every row is padded to max_length 64 (padded: BLOOM's eager attention builds its mask unpadded too)
_PEFT_BLOOMZ = dict(mode="train", dtype="fp32", batch=8, seq=64, attention="eager", checkpointing="none", padded=True,
                    optimizer="adamw", optimizer_impl="loop", keep_grads=True, method="lora", lora_rank=8,
                    lora_dropout=0.1, lora_targets=("query_key_value",))
_A100_2022 = _Setup(gpu="A100-80GB", cuda="11.7", lazy_loading=False)  # torch 1.13's cu117 wheels

# torchao's gpt-fast generate.py (torchao/_models/llama at 317392d06b, A100, and 92dd5f557d, H100): batch 1, the
# prompt "Hello, my name is" (6 tokens with BOS), max_new_tokens 200, a KV cache of find_multiple(206, 8) = 208
# tokens preallocated by setup_caches (a static cache); quantize_ takes every nn.Linear, the output layer included
# (quant_head); int4wo-64 is int4_weight_only(group_size=64). The model is loaded in bf16 onto the GPU and quantized
# there, and the compiled decode's first CUDA-graph capture empties the cache before the timed samples
# (quantize_on_device). int8wo and float8wo are torchao's weight-only linears, which the eager prefill (compiled only
# with --compile_prefill) runs on each weight dequantized to bf16 (quant_impl torchao-wo; float8wo also quantizes
# with bf16 temporaries). The figure is max_memory_reserved() / 1e9. --compile (decode under
# torch.compile(mode="reduce-overhead")) is not modelled in inference and left off
_GPTFAST = dict(mode="inference", dtype="bf16", batch=1, seq=6, new_tokens=200, cache="static", max_cache_len=208)
_ON_GPU = {"quant_head": True, "quantize_on_device": True}
_WO = {"quant_impl": "torchao-wo"}  # int8_weight_only / float8_weight_only: eager prefill dequantizes each weight
_GPTFAST_QUANT = {"bf16": {}, "int8dq": {"quant": "int8", **_ON_GPU},
                  "int8wo": {"quant": "int8", **_ON_GPU, **_WO},
                  "int4wo-64": {"quant": "int4", "quant_group_size": 64, **_ON_GPU},
                  "float8wo": {"quant": "fp8", **_ON_GPU, **_WO}, "float8dq-tensor": {"quant": "fp8", **_ON_GPU},
                  "float8dq-row": {"quant": "fp8", **_ON_GPU}}
_H100 = _Setup(gpu="H100-SXM-80GB", cuda="12.1", lazy_loading=True)
_A6000 = _Setup(gpu="RTX-A6000", cuda="12.1", lazy_loading=True)

# optimum's GPTQ benchmark (tests/benchmark/README.md at 3ffebf99, Aug 2023: AutoGPTQ 0.4.2, PyTorch 2.0.1,
# bitsandbytes 0.41.1, transformers 4.32; one A100-SXM4-80GB): Llama-2-13B-chat in fp16 (loaded onto the GPU by
# from_pretrained(torch_dtype=float16) under ``with torch.device("cuda:0")``), TheBloke's GPTQ checkpoint (4-bit,
# group 128, no act-order; exllama or AutoGPTQ's cuda-old kernel) or bitsandbytes 4-bit fp4 with fp16 compute,
# greedy generate() of 512 random prompt tokens with use_cache and min_new_tokens = max_new_tokens. Eager attention
# (transformers 4.32 had no SDPA path for Llama). generate() runs one forward per new token, the prefill making the
# first: 512 new tokens are 511 decode steps after the prefill (vramlens' new_tokens), the "prefill" table's one new
# token no decode step at all. The figure is benchmark_gptq.py's peak_allocated + (nvidia-smi peak - peak reserved),
# in MB of 1e6 bytes
_OPTIMUM_GPTQ = dict(mode="inference", dtype="fp16", seq=512, attention="eager", transformers_version="4.32")
# AutoGPTQ 0.4.2's kernels (quant_impl): exllama keeps an fp16 temp_dq buffer of the largest weight (5,120 x
# 13,824) from load_quantized_model's autogptq_post_init on; cuda-old dequantizes in PyTorch ops for the prefill's
# 512 x batch rows (>= its kernel_switch_threshold of 128) and runs its kernel for the decode's batch rows
_OPTIMUM_QUANT = {"fp16": {}, "gptq-exllama": {"quant": "gptq-4bit", "quant_impl": "exllama"},
                  "gptq-cuda-old": {"quant": "gptq-4bit", "quant_impl": "cuda-old"}, "bnb-fp4": {"quant": "fp4"}}
# torch 2.0.1's PyPI wheels are built with CUDA 11.7; PyTorch sets CUDA_MODULE_LOADING=LAZY by default since 1.13
_A100_2023 = _Setup(gpu="A100-80GB", cuda="11.7", lazy_loading=True)


def _optimum_gptq_cases() -> dict[str, Case]:
    return {f"optimum-gptq-bench-llama2-13b-{q}-{table}-bs{b}": Case(
                "llama-2-13b", {**_OPTIMUM_GPTQ, **_OPTIMUM_QUANT[q], "batch": b, "new_tokens": steps},
                figure="allocated+outside", **_A100_2023)
            for q in _OPTIMUM_QUANT for table, steps in (("generate", 511), ("prefill", 0)) for b in (1, 2, 4, 8, 16)}

# PEFT's MetaMathQA method comparison (huggingface/peft method_comparison/MetaMathQA, results of 51c2ff66, July 2026,
# run by run.py at d787f51b on one L40S with torch 2.13.0+cu130 and transformers 5.13.1): Llama-3.2-3B loaded in bf16
# (default attention: SDPA), batch 4 of MetaMathQA rows tokenized and cut to model_max_length 768, padded to each
# batch's longest (the longest batch of the run is taken to reach the 768 bound: see the cases' other_settings),
# labels on the whole text, no gradient checkpointing, no autocast; torch.optim.AdamW over model.parameters() (foreach
# on CUDA; bf16 states for full fine-tuning); adapters in fp32 (autocast_adapter_dtype=True), lora_dropout 0. The figure
# is max_memory_reserved() over the run less the 2 MiB reserved at its start (accelerator_memory_max). Each batch is
# ``tokenizer.pad(batch, return_tensors="pt")`` (run.py line 255 at d787f51b): rows shorter than the batch's longest
# carry zeros in the attention_mask the model gets (padded)
_PEFT_METAMATH = dict(mode="train", dtype="bf16", batch=4, seq=768, attention="sdpa", optimizer="adamw", holds_outputs="next-forward",
                      optimizer_impl="foreach", padded=True)
_L40S_2026 = _Setup(gpu="L40S", cuda="13.0", lazy_loading=True)

# transformers' "Optimizing LLMs for Speed and Memory" guide (docs/source/en/llm_tutorial_optimization.md, the
# blog post of September 2023: transformers 4.33, bitsandbytes 0.41): bigcode/octocoder (StarCoder's GPTBigCode
# config) on a 40 GB A100, pipeline("text-generation")(prompt, max_new_tokens=60) over a 20-token prompt (the
# guide's own cache loop prints 20 tokens), the prefill and 59 decode steps; max_memory_allocated in GiB. Loaded
# with load_in_8bit / load_in_4bit and no torch_dtype, transformers 4.33 makes the unquantized parts fp16, and
# BitsAndBytesConfig's defaults are fp4 without double quantization, the output layer kept (quant_head False)
_LLMOPT = dict(mode="inference", batch=1, seq=20, new_tokens=59, transformers_version="4.33")
# torch 2.0/2.1 of the time (cu118); the figure is max_memory_allocated, which no CUDA build term enters
_A100_40_2023 = _Setup(gpu="A100-40GB", cuda="11.8", lazy_loading=True)


def _peft_metamath_cases() -> dict[str, Case]:
    lora = {**_PEFT_METAMATH, "method": "lora"}
    qv = ("q_proj", "v_proj")
    rows = {"lora-r32-qv": {**lora, "lora_rank": 32, "lora_targets": qv},
            "lora-r64-qv": {**lora, "lora_rank": 64, "lora_targets": qv},
            "lora-r64-qv-rslora": {**lora, "lora_rank": 64, "lora_targets": qv},  # rsLoRA changes the scale only
            "dora-r32-qv": {**lora, "lora_rank": 32, "lora_targets": qv, "dora": True},
            "lora-r10-mlp": {**lora, "lora_rank": 10, "lora_targets": ("gate_proj", "up_proj", "down_proj")},
            # MiCA (init_lora_weights="mica") freezes lora_B and trains lora_A: LoRA's shapes and forward, vramlens'
            # trainable B an upper bound (its gradient, AdamW states and saved input: 63 MiB, the case's notes)
            "lora-r32-qv-mica": {**lora, "lora_rank": 32, "lora_targets": qv},
            # LoRA-FA (optimizer_type "lora-fa": peft's create_lorafa_optimizer): lora_A frozen, B stepped alone
            "lorafa-r32-qv": {**lora, "lora_rank": 32, "lora_targets": qv, "lora_fa": True},
            "full-ft": dict(_PEFT_METAMATH),
            # peft's defaults for Llama (vramlens.models.peft_targets): IA3 on k_proj, v_proj and down_proj's input,
            # fp32 vectors (autocast_adapter_dtype=True); LN tuning's bf16 copies of every norm
            "ia3": {**_PEFT_METAMATH, "method": "ia3"},
            "ln-tuning": {**_PEFT_METAMATH, "method": "ln-tuning"},
            # PromptTuningConfig(num_virtual_tokens=200): the model runs 768 + 200 positions
            "prompt-tuning-200": {**_PEFT_METAMATH, "method": "prompt-tuning", "num_virtual_tokens": 200},
            # VeraConfig() defaults: r=256 on peft's q_proj and v_proj, shared fp32 vera_A and vera_B buffers
            "vera": {**_PEFT_METAMATH, "method": "vera"},
            # AdaLoraConfig(init_r=64, target_r=32): A, E and B at init_r 64 on peft's q_proj and v_proj (--lora-rank
            # is init_r); target_r only masks lora_E entries, the tensors keep init_r
            "adalora-r32": {**_PEFT_METAMATH, "method": "adalora", "lora_rank": 64, "lora_targets": qv},
            # PrefixTuningConfig(num_virtual_tokens=200 or 50): every block's keys and values over n + 768 positions
            "prefix-tuning-200": {**_PEFT_METAMATH, "method": "prefix-tuning", "num_virtual_tokens": 200},
            "prefix-tuning-50": {**_PEFT_METAMATH, "method": "prefix-tuning", "num_virtual_tokens": 50},
            # LoHaConfig(r=32, alpha=64, target_modules=[q_proj, v_proj]): fp32 factors, each adapted linear keeps its
            # fp32 delta weight and input copy (vramlens.estimator.activations.delta_saved)
            "loha-r32-qv": {**_PEFT_METAMATH, "method": "loha", "lora_rank": 32, "lora_targets": qv},
            # LoKrConfig(r=32, alpha=64, decompose_factor=4, target_modules=[q_proj, v_proj]) (results of b8bf4075, run
            # by peft 505e6fd6 with transformers 5.15.0; run.py's training loop as at d787f51b): each adapted linear
            # keeps its fp32 delta, input copy and built w2 (vramlens.estimator.activations.delta_saved)
            "lokr-r32-factor4-qv": {**_PEFT_METAMATH, "method": "lokr", "lora_rank": 32, "decompose_factor": 4,
                                    "lora_targets": qv},
            # OFTConfig(r=32, oft_block_size=0): 32 blocks of 3,072 / 32 = 96 on q_proj and v_proj (both 3,072 inputs),
            # which oft_block_size=96 (r 0) builds alike
            "oft-r32-qv": {**_PEFT_METAMATH, "method": "oft", "oft_block_size": 96, "lora_targets": qv},
            # BOFTConfig() with peft's defaults: block 4, butterfly factor 1, q_proj and v_proj for Llama
            "boft-default": {**_PEFT_METAMATH, "method": "boft", "boft_block_size": 4, "lora_targets": qv}}
    return {f"peft-metamathqa-llama3.2-3b-{name}": Case("llama-3.2-3b", settings, figure="peak_reserved", **_L40S_2026)
            for name, settings in rows.items()}

# optimum-benchmark's running-llamas example (huggingface/optimum-benchmark examples/running-llamas/artifacts at c8bbe4ef,
# Nov 2023: torch 2.1.1+cu118, transformers 4.35.2, optimum 1.14.1, one A100-SXM4-80GB): Llama-2 7B and 13B in fp16
# (random weights, no_weights=True), eager attention ("fp16"), BetterTransformer's SDPA ("fp16+bt") or FlashAttention-2
# ("fp16+fa2"), 256 random prompt tokens; max_memory_allocated of the first forward (use_cache: it returns the cache)
# and of the first generate() of exactly 512 new tokens (the prefill makes the first: 511 decode steps)
_OB_LLAMA = dict(mode="inference", dtype="fp16", seq=256, transformers_version="4.35")
_OB_ATTENTION = {"fp16": "eager", "fp16-bt": "sdpa", "fp16-fa2": "flash"}
_A100_2023_CU118 = _Setup(gpu="A100-80GB", cuda="11.8", lazy_loading=True)  # torch 2.1.1+cu118


def _optimum_benchmark_llama_cases() -> dict[str, Case]:
    rows = [("7b", "llama-2-7b", b) for b in (1, 2, 4, 8, 16, 32, 64)] + [
        ("13b", "llama-2-13b", b) for b in (1, 2, 4, 8, 16, 32)]
    return {f"optimum-benchmark-llama2-{size}-{exp}-{kind}-bs{b}": Case(
                model, {**_OB_LLAMA, "attention": attention, "batch": b, "new_tokens": steps},
                figure="peak_allocated", **_A100_2023_CU118)
            for size, model, b in rows for exp, attention in _OB_ATTENTION.items()
            for kind, steps in (("forward", 0), ("generate", 511))}


def _gptfast_cases() -> dict[str, Case]:
    rows = [("a100", m, q, _A100) for m in ("llama-2-7b", "llama-3-8b") for q in ("bf16", "int8dq", "int8wo", "int4wo-64")]
    rows += [("h100", "llama-3.1-8b", q, _H100) for q in ("bf16", "int8wo", "int4wo-64", "float8wo", "float8dq-tensor",
                                                          "float8dq-row")]
    cases = {f"torchao-gptfast-{gpu}-{m}-{q}-compile": Case(m, {**_GPTFAST, **_GPTFAST_QUANT[q]}, figure="peak_reserved",
                                                            **setup)
             for gpu, m, q, setup in rows}
    # the base rows of later tables of the same benchmark: Marlin QQQ's fp16 baseline (06e69f6a, GPU not stated; the
    # README's other tables ran on an A100-80GB) and the codebook section's bf16 baselines on one RTX A6000 (bc000aaf)
    cases["torchao-gptfast-llama-2-7b-fp16-compile"] = Case("llama-2-7b", {**_GPTFAST, "dtype": "fp16"},
                                                            figure="peak_reserved", **_A100)
    for m in ("llama-3-8b", "llama-3.1-8b"):
        cases[f"torchao-gptfast-a6000-{m}-bf16"] = Case(m, _GPTFAST, figure="peak_reserved", **_A6000)
    # torchao's other weight-only formats (benchmarks.sh and benchmark_results.txt at each table's commit; every row
    # ran generate.py --compile, the output layer quantized with the rest, loaded onto the GPU and quantized there:
    # quantize_on_device replays it)
    for m in ("llama-2-7b", "llama-3-8b"):
        # b4d076813b: "--quantization fp6 --precision float16" (fpx_weight_only(3, 2))
        cases[f"torchao-gptfast-a100-{m}-fp6"] = Case(m, {**_GPTFAST, **_ON_GPU, "dtype": "fp16", "quant": "fp6"},
                                                      figure="peak_reserved", **_A100)
        # b4d076813b: the README calls the rows uintx-4-64-hqq and uintx-2-8-hqq, but benchmark_results.txt records
        # "quant: uintx-4-64" and "uintx-2-8" (use_hqq False: UintxLayoutType, bit-packed), and its model sizes are
        # that layout's (Llama 2 7B uint4 g64: 3.92 GB, n*k/2 + 2 n*k/64 + 4 n*k/64; HQQ would keep a uint8 per weight)
        for q, bits, g in (("4-64", 4, 64), ("2-8", 2, 8)):
            cases[f"torchao-gptfast-a100-{m}-uintx-{q}-hqq"] = Case(
                m, {**_GPTFAST, **_ON_GPU, "quant": f"uint{bits}", "quant_group_size": g}, figure="peak_reserved",
                **_A100)
    # 65d86c6c26: "--quantization sparse-marlin --precision float16": int4_weight_only(layout_type=MarlinSparseLayoutType())
    # at its default group size, 128 (benchmark_results.txt: "quant: marlin")
    cases["torchao-gptfast-a100-llama-3-8b-int4wo-64-sparse-marlin"] = Case(
        "llama-3-8b", {**_GPTFAST, **_ON_GPU, "dtype": "fp16", "quant": "int4-sparse-marlin"}, figure="peak_reserved",
        **_A100)
    # 06e69f6a93: int8_dynamic_activation_int4_weight(layout=MarlinQQQLayout()) in fp16, quantized on the GPU, one scale per output channel
    # (w4a8) or per 128 weights (w4a8-g128); the model sizes, 3.31 and 3.41 GB, are the two layouts'
    for q, g in (("w4a8", 0), ("w4a8-g128", 128)):
        cases[f"torchao-gptfast-llama-2-7b-{q}"] = Case(
            "llama-2-7b", {**_GPTFAST, **_ON_GPU, "dtype": "fp16", "quant": "w4a8-qqq", "quant_group_size": g},
            figure="peak_reserved", **_A100)
    for m in ("llama-2-7b", "llama-3-8b"):
        for dt in ("bf16", "fp32"):
            cases[f"torchao-gptfast-a100-{m}-{dt}-eager"] = Case(m, {**_GPTFAST, "dtype": dt}, figure="peak_reserved",
                                                                 **_A100)
    return cases


# The Hugging Face blog (huggingface/blog). hf-bitsandbytes-integration.md's BLOOM-3B demo
# (notebooks/HuggingFace_int8_demo.ipynb at 915a7337, run 2022-08-08 on a Colab T4 with transformers main, 4.22):
# get_memory_footprint() after loading, parameters and buffers (figure "weights"). bigscience/bloom-3b is the
# catalog's bloom-1b7 at hidden 2560, 30 layers, 32 heads (config.json of bigscience/bloom-3b): 3,002,557,440
# parameters. torch_dtype="auto" is the checkpoint's fp16; load_in_8bit keeps the tied lm_head and leaves the rest
# fp16 (the figure's own bytes)
_BLOOM_3B = {"hidden_size": 2560, "n_layer": 30, "n_head": 32}
# personal-copilot.md's QLoRA run, pacman100/DHS-LLM-Workshop personal_copilot/training at 797a0af1 (run_peft.sh,
# train.py): bigcode/starcoder in NF4 with double quantization and bf16 compute, LoRA r=32 on c_attn, c_proj and c_fc
# (q_attn exists only in cross-attention), the script's casts leaving the adapters, wte, wpe and lm_head in bf16;
# packed samples of exactly 2,048 tokens, batch 4, 4 accumulation steps, FlashAttention-2, gradient checkpointing,
# the Trainer's AdamW. transformers main of October 2023 (4.35): reentrant checkpointing, so bitsandbytes 0.41's
# MatMul4Bit inputs live only while a block is recomputed (bnb_inputs none), and torch_dtype float16 under
# bitsandbytes, so the NF4 weights dequantize to fp16 before the cast to bf16 (dequant_dtype fp16)
_COPILOT_QLORA = dict(mode="train", method="qlora", quant="nf4-dq", dtype="bf16", lora_dtype="bf16", lora_rank=32,
                      lora_targets=("c_attn", "c_proj", "c_fc"), batch=4, seq=2048, grad_accum=4, attention="flash",
                      checkpointing="full", optimizer="adamw", optimizer_impl="foreach", dequant_dtype="fp16",
                      transformers_version="4.35")
_A100_40_COLAB = _Setup(gpu="A100-40GB", cuda="11.8", lazy_loading=True)  # Colab's torch 2.1 of October 2023


def _hf_blog_cases() -> dict[str, Case]:
    return {
        "hfblog-int8-demo-bloom-3b-fp16-footprint": Case("bloom-1b7", {"dtype": "fp16"}, _BLOOM_3B, "weights"),
        "hfblog-int8-demo-bloom-3b-int8-footprint": Case("bloom-1b7", {"dtype": "fp16", "quant": "int8"}, _BLOOM_3B,
                                                         "weights"),
        "hfblog-personal-copilot-starcoder-qlora-r32-bs4": Case("starcoder", _COPILOT_QLORA, figure="device_total",
                                                                **_A100_40_COLAB),
    }


_HF_BLOG_SEQCLS = ("a 30-run sweep whose row is not identified, on two GPUs whose roles (torch.nn.DataParallel, or "
                   "accelerate's split of device_map='auto') are not modelled; the figure kind is not stated")
#: The Hugging Face blog's measured figures vramlens cannot express.
_HF_BLOG_UNSUPPORTED: dict[str, str] = {
    "hfblog-personal-copilot-starcoder-full-fsdp8-bs1": "a range over 8 GPUs ('between 70 GB to 77.6 GB') of an "
                                                        "unstated kind: no one figure; the case's notes give the "
                                                        "estimate",
    **{f"hfblog-lora-seqcls-{m}-gpu1": _HF_BLOG_SEQCLS for m in ("roberta-large", "mistral-7b", "llama2-7b")},
}


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
    "hf-perf-bert-large-adafactor-bs4": Case("bert-large-uncased", {**_TRAIN, "optimizer": "adafactor", "optimizer_impl": "loop"}, _BERT_CLS, **_HF_V100),
    "hf-perf-bert-large-adafactor-fp16-ga4-gc-bs1": Case(
        "bert-large-uncased", {**_TRAIN, "optimizer": "adafactor", "optimizer_impl": "loop", "amp": "fp16", "batch": 1, "grad_accum": 4,
                               "checkpointing": "full"}, _BERT_CLS, **_HF_V100),
    "hf-perf-bert-large-adam8bit-bs4": Case("bert-large-uncased", {**_TRAIN, "optimizer": "adamw-8bit", "optimizer_impl": "loop"}, _BERT_CLS, **_HF_V100),
    "hf-perf-bert-large-adam8bit-fp16-ga4-gc-bs1": Case(
        "bert-large-uncased", {**_TRAIN, "optimizer": "adamw-8bit", "optimizer_impl": "loop", "amp": "fp16", "batch": 1, "grad_accum": 4,
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
    "hf-llmopt-octocoder-bf16-generate": Case("starcoder", {**_LLMOPT, "dtype": "bf16"}, figure="peak_allocated",
                                              **_A100_40_2023),
    "hf-llmopt-octocoder-int8-generate": Case("starcoder", {**_LLMOPT, "dtype": "fp16", "quant": "int8"},
                                              figure="peak_allocated", **_A100_40_2023),
    # BitsAndBytesConfig's bnb_4bit_compute_dtype=None becomes fp32, which bitsandbytes 0.41's Linear4bit keeps for
    # fp16 inputs: the prefill's matmuls dequantize to fp16 and copy the weight to fp32
    "hf-llmopt-octocoder-fp4-generate": Case("starcoder", {**_LLMOPT, "dtype": "fp16", "quant": "fp4",
                                                           "bnb_compute_dtype": "fp32"},
                                             figure="peak_allocated", **_A100_40_2023),
    "torchao-readme-llama2-7b-torch-fused": Case("llama-2-7b", {**_TORCHAO_7B, "optimizer": "adamw",
                                                                "optimizer_impl": "fused"},
                                                 figure="peak_allocated", **_A100),
    "torchao-readme-llama2-7b-bnb-8bit": Case("llama-2-7b", {**_TORCHAO_7B, "optimizer": "adamw-8bit"},
                                              figure="peak_allocated", **_A100),
    "torchao-readme-llama2-7b-ao-8bit": Case("llama-2-7b", {**_TORCHAO_7B, "optimizer": "adamw-8bit-torchao"},
                                             figure="peak_allocated", **_A100),
    "torchao-readme-llama2-7b-ao-4bit": Case("llama-2-7b", {**_TORCHAO_7B, "optimizer": "adamw-4bit-torchao"},
                                             figure="peak_allocated", **_A100),
    **{f"torchao-readme-vit-h-{row}": Case("google/vit-base-patch16-224", {**_TORCHAO_VIT, **opt}, _TORCHAO_VIT_H,
                                           figure="peak_allocated", **_ADA)
       for row, opt in (("torch-fused", {"optimizer": "adamw", "optimizer_impl": "fused"}),
                        ("bnb-8bit", {"optimizer": "adamw-8bit"}), ("ao-8bit", {"optimizer": "adamw-8bit-torchao"}),
                        ("ao-fp8", {"optimizer": "adamw-fp8-torchao"}), ("ao-4bit", {"optimizer": "adamw-4bit-torchao"}))},
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
    "litgpt-falcon-7b-lora-r32-qv-bs1": Case("falcon-7b", {**_LITGPT_LORA, "lora_targets": ("q_proj", "v_proj"),
                                                           "batch": 1, "grad_accum": 8}, _UNTIED, figure="peak_allocated", **_A10G),
    "litgpt-falcon-7b-qlora-r32-qv-bs1": Case("falcon-7b", {**_LITGPT_QLORA, "lora_targets": ("q_proj", "v_proj"),
                                                            "batch": 1, "grad_accum": 8}, _UNTIED, figure="peak_allocated", **_A10G),
    "litgpt-tinyllama-1.1b-lora-r32-all-bs8": Case("tinyllama-1.1b", {**_LITGPT_LORA, "lora_targets": _LLAMA_ALL,
                                                                  "batch": 8, "grad_accum": 1},
                                                  figure="peak_allocated", **_A10G),
    "litgpt-tinyllama-1.1b-qlora-r32-all-bs8": Case("tinyllama-1.1b", {**_LITGPT_QLORA, "lora_targets": _LLAMA_ALL,
                                                                   "batch": 8, "grad_accum": 1},
                                                   figure="peak_allocated", **_A10G),
    "litgpt-gemma-2b-lora-r8-all-bs2": Case("gemma-2b", {**_LITGPT_LORA, "lora_rank": 8, "lora_dropout": 0.1,
                                                         "lora_targets": _LLAMA_ALL, "batch": 2, "grad_accum": 3},
                                            _UNTIED, figure="peak_allocated", **_A10G),
    "litgpt-gemma-2b-qlora-r16-all-bs2": Case("gemma-2b", {**_LITGPT_QLORA, "lora_rank": 16, "lora_dropout": 0.1,
                                                           "lora_targets": _LLAMA_ALL, "batch": 2, "grad_accum": 3},
                                              _UNTIED, figure="peak_allocated", **_A10G),
    "litgpt-gemma-7b-qlora-r16-all-bs1": Case("gemma-7b", {**_LITGPT_QLORA, "lora_rank": 16, "lora_dropout": 0.1,
                                                           "lora_targets": _LLAMA_ALL, "batch": 1, "grad_accum": 6},
                                              _UNTIED, figure="peak_allocated", **_A10G),
    "litgpt-mistral-7b-v0.2-lora-r32-qv-bs2": Case("mistral-7b-instruct-v0.2", {**_LITGPT_LORA,
                                                                                "lora_targets": ("q_proj", "v_proj"),
                                                                                "batch": 2, "grad_accum": 4},
                                                   figure="peak_allocated", **_A10G),
    "litgpt-mistral-7b-v0.2-qlora-r32-qv-bs2": Case("mistral-7b-instruct-v0.2", {**_LITGPT_QLORA,
                                                                                 "lora_targets": ("q_proj", "v_proj"),
                                                                                 "batch": 2, "grad_accum": 4},
                                                    figure="peak_allocated", **_A10G),
    "litgpt-phi-2-lora-r8-all-bs4": Case("phi-2", {**_LITGPT_LORA, "lora_rank": 8, "lora_targets": _PHI_ALL, "batch": 4,
                                                   "grad_accum": 2}, _PHI_GELU, figure="peak_allocated", **_A10G),
    "litgpt-phi-2-qlora-r8-all-bs4": Case("phi-2", {**_LITGPT_QLORA, "lora_rank": 8, "lora_targets": _PHI_ALL, "batch": 4,
                                                    "grad_accum": 2}, _PHI_GELU, figure="peak_allocated", **_A10G),
    # the table at 00af8b0d (September 2024): Llama 3.1 and 3.2, the same loop and pins (bitsandbytes 0.42.0);
    # Llama 3.2's tied config gets LitGPT's own lm_head
    "litgpt-llama3.1-8b-lora-r32-qv-bs1": Case("llama-3.1-8b", {**_LITGPT_LORA, "lora_targets": ("q_proj", "v_proj"),
                                                              "batch": 1, "grad_accum": 8}, figure="peak_allocated", **_A10G),
    "litgpt-llama3.1-8b-qlora-r32-qv-bs2": Case("llama-3.1-8b", {**_LITGPT_QLORA, "lora_targets": ("q_proj", "v_proj"),
                                                               "batch": 2, "grad_accum": 4}, figure="peak_allocated", **_A10G),
    **{f"litgpt-llama3.2-{size}-{name}": Case(f"llama-3.2-{size}", {**base, "lora_targets": ("q_proj", "v_proj"),
                                                                    "batch": b, "grad_accum": 8 // b},
                                              _UNTIED, figure="peak_allocated", **_A10G)
       for size in ("1b", "3b")
       for name, base, b in (("lora-r32-qv-bs1", _LITGPT_LORA, 1), ("qlora-r32-qv-bs2", _LITGPT_QLORA, 2))},
    "litgpt-stablelm-3b-lora-r32-qv-bs1": Case("stablelm-base-alpha-3b", {**_LITGPT_LORA,
                                                                       "lora_targets": ("q_proj", "v_proj"),
                                                                       "batch": 1, "grad_accum": 8},
                                               figure="peak_allocated", **_A10G),
    "litgpt-stablelm-3b-qlora-r32-qv-bs1": Case("stablelm-base-alpha-3b", {**_LITGPT_QLORA,
                                                                        "lora_targets": ("q_proj", "v_proj"),
                                                                        "batch": 1, "grad_accum": 8},
                                                figure="peak_allocated", **_A10G),
    **{f"litgpt-rt-stablelm-3b-{name}-r8-qv-bs{b}": Case("stablelm-base-alpha-3b", _rt(1034, b, base, quant),
                                                         figure="peak_allocated", **_A100_40)
       for name, b, base, quant in (("lora", 1, _RT_LORA, None), ("qlora-nf4", 1, _RT_QLORA, "nf4"),
                                    ("qlora-nf4dq", 1, _RT_QLORA, "nf4-dq"), ("lora", 2, _RT_LORA, None),
                                    ("lora", 4, _RT_LORA, None))},
    **{f"litgpt-rt-phi-1.5-{name}-r8-qv-bs{b}": Case("phi-1_5", _rt(1044, b, base, quant), _PHI_GELU,
                                                      figure="peak_allocated", **_A100_40)
       for name, b, base, quant in (("lora", 1, _RT_LORA, None), ("qlora-nf4", 1, _RT_QLORA, "nf4"),
                                    ("qlora-nf4dq", 1, _RT_QLORA, "nf4-dq"), ("lora", 2, _RT_LORA, None),
                                    ("lora", 4, _RT_LORA, None))},
    **{f"litgpt-rt-llama2-{size}-{name}-r8-qv-bs{b}": Case(f"llama-2-{size}", _rt(1304, b, base, quant),
                                                         figure="peak_allocated", **_A100_40)
       for size, name, b, base, quant in (("7b", "lora", 1, _RT_LORA, None), ("7b", "qlora-nf4", 1, _RT_QLORA, "nf4"),
                                          ("7b", "qlora-nf4dq", 1, _RT_QLORA, "nf4-dq"), ("7b", "lora", 2, _RT_LORA, None),
                                          ("13b", "lora", 1, _RT_LORA, None), ("13b", "qlora-nf4", 1, _RT_QLORA, "nf4"),
                                          ("13b", "qlora-nf4dq", 1, _RT_QLORA, "nf4-dq"))},
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
    # Table 4's 2-D row without AsyncTP: Llama 3.1 70B, FSDP 32 x TP 8 with sequence and loss parallelism (the
    # default disable_loss_parallel false), Float8 linears under torchao's float8 TP styles, full AC, blocks compiled
    "torchtitan-h100-llama3.1-70b-fsdp32-tp8-fullac-bs16-compile-float8": Case(
        "llama-3.1-70b", {**_TITAN_8B, "gpus": 256, "tp": 8, "loss_parallel": True, "batch": 16, "checkpointing": "full",
                          "compile": True, "compile_scope": "blocks", "fp8": True}, figure="peak_reserved", **_H100_96),
    **{f"torchao-float8-{gpu}-llama3-8b-fsdp8-sac-bs1-{row}": Case(
        "llama-3.1-8b", {**base, "fp8": row == "float8-tensorwise"}, figure="peak_reserved", **setup)
       for gpu, (base, setup) in _AO_F8_SETUPS.items() for row in ("bf16", "float8-tensorwise")},
    # the same tables' other recipes: torchtitan's --float8.recipe_name rowwise / rowwise_with_gw_hp (bf16 all-gather)
    # and --model.converters mx --mx.recipe_name mxfp8_cublas / mxfp8_cublas_rceil (--fp8-recipe, torchao's names)
    **{f"torchao-float8-{gpu}-llama3-8b-fsdp8-sac-bs1-{row}": Case(
        "llama-3.1-8b", {**_AO_F8_SETUPS[gpu][0], "fp8": True, "fp8_recipe": recipe}, figure="peak_reserved",
        **_AO_F8_SETUPS[gpu][1])
       for gpu, row, recipe in (("h100", "float8-rowwise", "rowwise"), ("mi300x", "float8-rowwise", "rowwise"),
                                ("mi300x", "float8-rowwise-gw-hp", "rowwise_with_gw_hp"),
                                ("b200", "float8-rowwise", "rowwise"), ("b200", "mxfp8-cublas", "mxfp8_cublas"),
                                ("b200", "mxfp8-cublas-rceil", "mxfp8_cublas_rceil"))},
    # the same table's AsyncTP row: torchtitan's apply_tp sets torch._inductor.config._micro_pipeline_tp and
    # enable_symm_mem_for_group, so inductor fuses each TP all-gather + matmul and matmul + reduce-scatter into
    # torch.distributed._symmetric_memory's fused ops, which allocate through the caching allocator what the unfused
    # ops did (the gathered input and the matmul outputs; the full-size stacked partials before the reduction) and
    # put only their p2p workspace in symmetric memory, mapped with cuMem outside the allocator (not in
    # max_memory_reserved): the same settings as the row above
    "torchtitan-h100-llama3.1-70b-fsdp32-tp8-fullac-bs16-compile-float8-asynctp": Case(
        "llama-3.1-70b", {**_TITAN_8B, "gpus": 256, "tp": 8, "loss_parallel": True, "batch": 16, "checkpointing": "full",
                          "compile": True, "compile_scope": "blocks", "fp8": True}, figure="peak_reserved", **_H100_96),
    # Tables 5 and 6: Llama 3.1 405B over FSDP 8/cp x TP 8 x PP 8 (x CP): torchtitan's pipeline_llama splits the 126
    # blocks into 8 stages (16 on the most loaded: vramlens counts ceil(126/8) and the embedding) and feeds
    # pipeline_parallel_microbatches (None: pp = 8) micro-batches of the local batch (--batch the micro-batch,
    # --grad-accum their count); FSDP2 on each stage keeps it gathered and its gradients unsharded over the step
    # (vramlens.estimator.parallel.pipelined_fsdp); async TP as the 70B row
    **{f"torchtitan-h100-llama3.1-405b-fsdp8-tp8-pp8-fullac-bs32-compile-float8-asynctp-{sched}": Case(
        "llama-3.1-405b", {**_TITAN_405B, "gpus": 512, "batch": 32 // 8, "pp_schedule": sched},
        figure="peak_reserved", **_H100_96) for sched in ("1f1b", "interleaved-1f1b")},
    **{f"torchtitan-h100-llama3.1-405b-fsdp{8 // cp}-tp8-pp8-cp{cp}-fullac-bs8-s{32 * cp}k-compile-float8-asynctp-1f1b":
       Case("llama-3.1-405b", {**_TITAN_405B, "gpus": 512, "cp": cp, "batch": 8 // 8, "seq": 32_768 * cp},
            figure="peak_reserved", **_H100_96) for cp in (1, 2, 4, 8)},
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
    # FrozenNF4Linear (torchtune/models/llama3/_component_builders.py); the tied embedding stays bf16; each NF4
    # matmul is torchao's linear_nf4 (torchtune/modules/peft/lora.py and low_precision/nf4_linear.py at 1814feb1)
    "torchtune-readme-llama3.2-3b-qlora": Case("llama-3.2-3b", {**_TUNE_LORA, "method": "qlora",
                                                                "quant_targets": "all", "nf4_impl": "torchao"},
                                               figure="peak_allocated", **_A100),
    # torchtune README at 412a4ecd (2024-03-22, "estimated ... on A100 GPUs with GPU memory artificially limited",
    # max_memory_reserved): the linked configs of that commit; full fine-tuning then used torch.optim.SGD (no momentum)
    "torchtune-readme-2024-03-llama2-7b-qlora-1gpu": Case("llama-2-7b", _TT24_QLORA, figure="peak_reserved", **_A100),
    "torchtune-readme-2024-03-llama2-7b-lora-2gpu": Case("llama-2-7b", {**_TT24_LORA, "fsdp": True, "fsdp_version": 1, "gpus": 2},
                                                         figure="peak_reserved", **_A100),
    "torchtune-readme-2024-03-llama2-7b-lora-1gpu": Case("llama-2-7b", {**_TT24_LORA, "checkpointing": "full"},
                                                         figure="peak_reserved", **_A100),
    "torchtune-readme-2024-03-llama2-7b-full-sgd-1gpu": Case("llama-2-7b", {**_TT24, "optimizer": "sgd",
                                                                            "checkpointing": "full"},
                                                             figure="peak_reserved", **_A100),
    "torchtune-readme-2024-03-llama2-7b-full-sgd-4gpu": Case("llama-2-7b", {**_TT24, "optimizer": "sgd",
                                                                            "checkpointing": "full", "fsdp": True,
                                                                            "fsdp_version": 1, "gpus": 4},
                                                             figure="peak_reserved", **_A100),
    "torchtune-readme-2024-03-llama2-7b-full-low-memory-1gpu": Case("llama-2-7b", _TT24_LOWMEM, figure="peak_reserved",
                                                                    **_A100),
    # torchtune README at fef3ed10 (2024-04-16, "Memory update"): the same configs, AdamW everywhere but low memory
    "torchtune-readme-2024-04-llama2-7b-qlora-1gpu": Case("llama-2-7b", _TT24_QLORA, figure="peak_reserved",
                                                          **_RTX4090),
    "torchtune-readme-2024-04-llama2-7b-lora-2gpu": Case("llama-2-7b", {**_TT24_LORA, "fsdp": True, "fsdp_version": 1, "gpus": 2},
                                                         figure="peak_reserved", **_RTX4090),
    "torchtune-readme-2024-04-llama2-7b-lora-1gpu": Case("llama-2-7b", {**_TT24_LORA, "checkpointing": "full"},
                                                         figure="peak_reserved", **_RTX4090),
    "torchtune-readme-2024-04-llama2-7b-full-low-memory-1gpu": Case("llama-2-7b", _TT24_LOWMEM, figure="peak_reserved",
                                                                    **_RTX4090),
    "torchtune-readme-2024-04-llama2-7b-full-4gpu": Case("llama-2-7b", {**_TT24, "checkpointing": "full", "fsdp": True,
                                                                        "fsdp_version": 1, "gpus": 4},
                                                         figure="peak_reserved", **_RTX4090),
    # full_finetune_single_device (8B_full_single_device): bitsandbytes PagedAdamW8bit stepped in backward
    "torchtune-readme-2024-09-llama3.1-8b-full-4090": Case("llama-3.1-8b", {**_TT_SEP24, "optimizer": "paged-adamw-8bit",
                                                                           "optimizer_in_backward": True},
                                                           figure="peak_allocated", **_RTX4090_SEP24),
    "torchtune-readme-2024-09-llama3.1-8b-lora-4090": Case("llama-3.1-8b", _TT_SEP24_LORA, figure="peak_allocated",
                                                           **_RTX4090_SEP24),
    # qlora_llama3_1_8b: every linear of the blocks adapted (q, k, v, output_proj and the MLP) and so NF4 (torchao)
    "torchtune-readme-2024-09-llama3.1-8b-qlora-4090": Case(
        "llama-3.1-8b", {**_TT_SEP24_LORA, "method": "qlora", "quant": "nf4-dq", "quant_targets": "all",
                         "nf4_impl": "torchao",
                         "lora_targets": ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")},
        figure="peak_allocated", **_RTX4090_SEP24),
    # lora_finetune_distributed (70B_lora): FSDP2 fully_shard per layer and the root (embedding, norm, output), no
    # mixed-precision policy; q, k and v_proj at rank 16
    "torchtune-readme-2024-09-llama3.1-70b-lora-8xa100": Case(
        "llama-3.1-70b", {**_TT_SEP24_LORA, "lora_rank": 16, "lora_targets": ("q_proj", "k_proj", "v_proj"),
                          "fsdp": True, "gpus": 8}, figure="peak_allocated", **_A100),
    # full_finetune_distributed, llama3_1/70B_full at 30b8519e: custom_sharded_layers ['tok_embeddings', 'output']
    # (the embedding and the output layer FSDP units of their own), fsdp_cpu_offload (CPUOffloadPolicy), AdamW(fused)
    "torchtune-readme-2024-09-llama3.1-70b-full-8xa100": Case(
        "llama-3.1-70b", {**_TT_SEP24, "optimizer": "adamw", "optimizer_impl": "fused", "fsdp": True, "gpus": 8,
                          "offload": "all", "fsdp_units": "blocks+embed+output"}, figure="peak_allocated", **_A100),
    # the tutorials' "Memory stats after model init" lines: the weights (and adapters) just loaded
    "torchtune-docs-e2e-llama3.2-3b-lora-init": Case(
        "llama-3.2-3b", {**_TUNE_LORA, "batch": 4, "seq": 512, "activation_offload": False, "compile": False,
                         "loss_chunks": 1}, figure="weights"),
    "torchtune-docs-qlora-tutorial-llama2-7b-lora-init": Case("llama-2-7b", {**_TT24_LORA, "checkpointing": "full"},
                                                              figure="weights"),
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
    **_gptfast_cases(),
    **_optimum_gptq_cases(),
    **_peft_metamath_cases(),
    **_optimum_benchmark_llama_cases(),
    **_hf_blog_cases(),
}

# PEFT's seq2seq rows: tokenizer(inputs, truncation=True) padded by collate_fn to each batch's longest tweet, labels
# padded to target_max_length (pet_lora_seq2seq_accelerate_ds_zero3_offload.py at 73d7224b, lines 130, 135-137, 160)
_PEFT_T5 = ("encoder and decoder lengths differ and neither is stated: the encoder sees each batch's longest tweet, "
            "the decoder the labels padded to the longest class label (a few tokens); --seq sets both")
_PEFT_DS = "; and DeepSpeed ZeRO-3 parameter offload (as peft-readme-bloomz-7b1-lora-ds-offload)"

_TT24_MAY = ("the tokens per sample are not stated: 'Seq Length' is a cap (max_seq_len) on Alpaca samples padded to "
             "each batch's longest, which are much shorter; and the figure kind is not stated")

_TT_UNPACKED = ("the tokens per sample are not stated: Alpaca samples, not packed, cut at max_seq_len 512 and padded "
                "to each batch's longest")

#: Cases vramlens cannot express, with the reason (printed instead of a number).
UNSUPPORTED: dict[str, str] = {
    # torchao's low-bit optimizer READMEs (torchao/prototype/low_bit_optim/README.md)
    **{f"torchao-readme-vit-h-{row}": "lpmm's 4-bit AdamW (thu-ml/low-bit-optimizers) is not modelled"
       for row in ("lpmm-4bit", "lpmm-4bit-rank1")},
    **{f"torchao-readme-vit-g-dinov2-offload-{row}": (
        "timm's DINOv2 ViT-g (SwiGLUPacked MLP, LayerScale) is not a vramlens family, and its input size is not "
        "stated (built for 518x518, the loader crops 224x224)" + (
            "; nor DeepSpeed ZeRO-Offload's bf16 optimizer on one GPU" if row == "deepspeed" else ""))
       for row in ("none", "deepspeed", "ao", "ao-offload-grads", "none-compile", "ao-compile", "ao-amp")},
    # torchao/quantization/README.md's gpt-fast rows in formats vramlens does not model
    **{f"torchao-gptfast-a100-{m}-int4wo-64-gptq": (
        "generate.py at 317392d06b has no GPTQ path: the row repeats int4wo-64's tokens/s and memory (a GPTQ checkpoint "
        "keeps the same tinygemm layout), which torchao-gptfast-a100-*-int4wo-64-compile reproduces") for m in ("llama-2-7b", "llama-3-8b")},
    **{f"torchao-gptfast-a100-{m}-autoquant-int4hqq": "autoquant picks each layer's format by timing it at run time"
       for m in ("llama-2-7b", "llama-3-8b")},
    **{f"torchao-gptfast-xpu-llama-2-7b-{q}": "an Intel XPU, not named: not in the GPU catalog, and XPU's allocator is "
                                              "not modelled" for q in ("bf16", "int8dq", "int8wo")},
    # CodebookQuantizedTensor.from_float at bc000aaf keeps uint4 codes (UintxTensor, n*k/2), a (16, 1, 1) codebook and
    # the scales per 64 weights cast to the weight's dtype: Llama 3 8B's block linears (6,979,321,856 weights) with the
    # bf16 output layer (over codebook_weight_only's 2**27 weights: left alone) come to 4.76 GB, the table's model size
    # is 4.98 GB, which fp32 scales would give (4.977 GB): the run's layout is not the commit's
    **{f"torchao-gptfast-a6000-{m}-codebook-4-64": (
        "codebook_weight_only is not modelled: the table's model size, 4.98 GB, is not the layout of "
        "CodebookQuantizedTensor at its commit (bc000aaf: 4.76 GB with its bf16 scales)") for m in ("llama-3-8b", "llama-3.1-8b")},
    # torchao/prototype/quantized_training/README.md (9acc9a4d): benchmarks/quantized_training/pretrain_llama2.py
    **{f"torchao-readme-qt-llama2-1b-{row}": (
        "the figure kind is not stated (the script logs max_memory_allocated and max_memory_reserved), and torchao's "
        "_AdamW (a compiled step per parameter) is not modelled" + (
            "; nor int8 weight-only quantized training (int8 weights trained with stochastic rounding)"
            if row.startswith("int8") else ""))
       for row in ("bf16-eager", "bf16-compile", "int8qt-eager", "int8qt-compile")},
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
    # torchtune README at 0217d44c (2024-05-09): "Seq Length" is the tokenizer's max_seq_len over Alpaca, whose
    # batches are padded to their longest sample, far below it (the 70B LoRA row's checkpointed block inputs alone would
    # be 80 x 4 x 4096 x 8192 x 2 B = 21.5 GB of its 26.4 GB at full length); the figure kind is not stated
    **{f"torchtune-readme-2024-05-{row}": _TT24_MAY for row in (
        "llama2-7b-qlora-compile-1gpu", "llama2-7b-lora-1gpu", "llama2-7b-lora-2gpu", "llama2-7b-full-paged-1gpu",
        "llama2-7b-full-4gpu", "llama2-70b-lora-8gpu", "llama2-70b-full-paged-8gpu")},
    # torchtune's README "Memory and training speed" table (30b8519e) and tutorials: the rows not mapped (each case's
    # notes give the figures)
    **{f"torchtune-readme-2024-09-llama3.1-8b-{m}-a6000": (
        "what raises the 1x 4090 row's peak this far on the A6000 is not stated (the 4090 row's settings read "
        f"{est} GiB; without activation checkpointing {noac} GiB)") for m, est, noac in (("full", "20.0", "37.5"),
                                                                                       ("lora", "17.2", "35.6"))},
    "torchtune-readme-2024-09-llama3.1-405b-qlora-8xa100": (
        "the stated batch (2 x 2048 packed) cannot give the figure: its checkpointed block inputs (15.75 GiB), the "
        "weight shards and the gathered root exceed it; the config's own batch (1, unpacked) is not stated as run"),
    **{f"torchtune-docs-lora-tutorial-llama2-7b-{row}": _TT_UNPACKED for row in ("qv-r8", "all-r8", "qv-r64", "all-r64")},
    "torchtune-docs-qlora-tutorial-llama2-7b-qlora-train-reserved": _TT_UNPACKED,
    "torchtune-docs-llama3-8b-lora-single-device": _TT_UNPACKED + "; and the figure kind is not stated",
    **{f"torchtune-docs-qlora-tutorial-llama2-7b-{row}-init-reserved": (
        "vramlens has no reserved-after-set-up figure (weights are allocated bytes)") for row in ("lora", "qlora")},
    "torchtune-docs-llama3-8b-generate": (
        "torchtune's KVCache at 20747cd8 keeps keys and values after the GQA expansion (32 heads, not 8), allocated at "
        "max_seq_len: not a vramlens cache layout"),
    # transformers' llm_tutorial_optimization.md: the long-prompt rows (ten copies of the system prompt)
    **{f"hf-llmopt-octocoder-bf16-longprompt-{kind}": "the prompt's token count is not stated and needs "
                                                       "bigcode/octocoder's tokenizer"
       for kind in ("eager", "bettertransformer-flash")},
    "peft-readme-bloomz-7b1-lora-ds-offload": "DeepSpeed ZeRO-3 parameter offload's gathered-parameter working set "
                                              "(stage3_max_live_parameters, stage3_max_reuse_distance, the embedding "
                                              "gathered whole) is not modelled: --zero 3 --offload all estimates "
                                              "7.6 GiB (two blocks plus the 1,907 MiB gradient bucket)",
    **_HF_BLOG_UNSUPPORTED,
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
        value = bd.peak_reserved + _outside(est, case)
        first_order = bd.peak_allocated + context
    elif case.figure == "allocated+outside":
        value = bd.peak_allocated + _outside(est, case)
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


def _outside(est: Estimate, case: Case) -> int:
    """What sits outside the caching allocator for this case's CUDA build and module loading: the context
    (with the kernel images lazy loading brings in) and NCCL, as hardware.runtime_overhead counts them."""
    from vramlens.estimator.runtime import REFERENCE_GPU
    from vramlens.hardware.catalog import get_gpu
    from vramlens.hardware.runtime import runtime_overhead

    w = est.workload
    rt: RuntimeOverhead = runtime_overhead(est.gpu or get_gpu(REFERENCE_GPU), training=w.training, n_gpus=w.gpus,
                                           tp=w.tp, cp=w.cp, cuda_version=case.cuda, lazy_loading=case.lazy_loading)
    return rt.outside_allocator_bytes


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
