"""Flags shared by the commands that take a workload (estimate, trace, fit, place)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any

from vramlens import limits as L
from vramlens import workload as W

PRECISION_HELP = (
    "Precision: --dtype is the dtype the weights are stored and computed in; --amp P adds mixed "
    "precision with fp32 master weights. --dtype fp32 --amp bf16 is PyTorch autocast (fp32 weights, "
    "bf16 copies made during forward and cached by autocast); --dtype fp16 --amp fp16 is "
    "DeepSpeed/Megatron-style (fp16 weights and gradients, an fp32 master copy in the optimizer). "
    "--optimizer none means forward and backward only. With --fsdp, --dtype fp32 --amp bf16 is FSDP2's "
    "MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32) over fp32 sharded parameters (torchtitan's "
    "default; no autocast); --dtype bf16 keeps everything in bf16."
)


def _ascii_only(text: str, kind: str) -> None:
    """Python's int() and float() read any Unicode digit ('٤٠٩٦' is 4096): a flag takes the digits 0-9 only,
    so that what the user sees in the command is what vramlens reads."""
    if not text.isascii():
        raise argparse.ArgumentTypeError(f"{_shown(text)} is not {kind}: write it with the ASCII digits 0-9")


def _positive(text: str) -> int:
    """A whole number; its range is the Workload's to check (so that CLI, API and web say the same)."""
    _ascii_only(text, "a whole number")
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{_shown(text)} is not a whole number") from None
    return v


#: A whole number for argparse; its range is checked further in (the Workload, vramlens.serving).
whole_number = _positive


def _fraction(text: str) -> float:
    """A number; its range is the Workload's to check (so that CLI, API and web say the same)."""
    _ascii_only(text, "a number")
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{_shown(text)} is not a number") from None
    return v


def ascii_int(text: str) -> int:
    """``type=int`` as the CLI's parser reads it (registered by vramlens.cli.main.Parser): ASCII digits only,
    otherwise int() itself (argparse's "invalid int value" for anything else it refuses)."""
    _ascii_only(text, "a whole number")
    return int(text)


def ascii_float(text: str) -> float:
    """``type=float`` as the CLI's parser reads it: ASCII only, otherwise float() itself."""
    _ascii_only(text, "a number")
    return float(text)


ascii_int.__name__, ascii_float.__name__ = "int", "float"  # argparse names the type in "invalid int value: 'x'"


def _checkpointing(text: str) -> str:
    """A checkpointing mode: one of the fixed choices or ``every:N``; N's range is the Workload's to check."""
    if text in W.CHECKPOINTING or (text.startswith(W.EVERY_PREFIX) and text[len(W.EVERY_PREFIX):].isdigit()
                                    and text.isascii() and len(text) <= len(W.EVERY_PREFIX) + L.MAX_INT_DIGITS):
        return text
    raise argparse.ArgumentTypeError(f"{_shown(text)} is not one of: {', '.join(W.CHECKPOINTING)}, every:N")


def bounded(limit: int, *, minimum: int = 1) -> Callable[[str], int]:
    """An argparse type: a whole number in [minimum, limit], else argparse's one-line error naming both."""

    def parse(text: str) -> int:
        from vramlens.errors import InputError
        from vramlens.limits import check_int

        _ascii_only(text, "a whole number")
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{_shown(text)} is not a whole number") from None
        try:
            return check_int("value", value, limit, minimum=minimum)
        except InputError as e:
            raise argparse.ArgumentTypeError(f"{_shown(text)} {str(e).split(' ', 1)[1]}") from None

    parse.__name__ = "count"
    return parse


def _shown(text: str) -> str:
    from vramlens.limits import show

    return show(text)


def size_arg(what: str, limit: int) -> Callable[[str], int]:
    """An argparse type: a size (24GB, 80GiB, bytes) up to ``limit`` bytes."""

    def parse(text: str) -> int:
        from vramlens.errors import InputError
        from vramlens.units import parse_size

        try:
            value = parse_size(text, what=what)
        except InputError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
        if value > limit:
            raise argparse.ArgumentTypeError(f"{what}={_shown(text)} is over the limit of {limit:,} bytes")
        return value

    parse.__name__ = "size"
    return parse


def add_model_arg(p: argparse.ArgumentParser, *, required: bool = False) -> None:
    p.add_argument(
        "model", nargs=None if required else "?", default=None,
        help="catalog name or hub id (llama-2-7b, meta-llama/Llama-2-7b-hf), a config.json, or a model folder",
    )
    p.add_argument("--params", default=None, help="model size (7B, 350M): a generic decoder when MODEL is omitted")


def add_workload_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("workload", PRECISION_HELP)
    g.add_argument("--mode", choices=W.MODES, default="inference", help="inference or train (default inference)")
    g.add_argument("--method", choices=W.METHODS, default="full", help="full fine-tuning, LoRA, QLoRA, peft's IA3, LN tuning or VeRA "
                   "with the model type's default targets, peft's prompt or prefix tuning, peft's AdaLoRA (--lora-rank is "
                   "its init_r), or peft's LoHa, LoKr (--lora-rank, --lora-targets), OFT or BOFT (--oft-block-size / "
                   "--boft-block-size, --lora-targets) (default full)")
    g.add_argument("--dtype", choices=W.DTYPES, default="bf16", help="weight storage/compute dtype (default bf16)")
    g.add_argument("--amp", choices=W.AMPS, default=None, help="mixed precision with fp32 master weights")
    g.add_argument("--quant", choices=W.QUANTS, default=None,
                   help="weight quantization; fp6, uint1..uint7, int4-sparse-marlin and w4a8-qqq are torchao's "
                        "fpx_weight_only(3, 2), uintx_weight_only(torch.uintN), int4_weight_only with the 2:4 "
                        "MarlinSparseLayout and Marlin QQQ's W4A8 (inference; fp6 and the Marlin kernels in fp16)")
    g.add_argument("--optimizer", choices=W.OPTIMIZERS, default="adamw", help="optimizer (default adamw)")
    g.add_argument("--optimizer-impl", choices=W.OPTIMIZER_IMPLS, default="foreach",
                   help="torch.optim implementation: foreach (CUDA default), fused, or a per-tensor loop "
                        "(foreach=False); transformers: transformers' own AdamW (the Trainer's adamw_hf, "
                        "removed in transformers 5)")
    g.add_argument("--batch", type=_positive, default=1, help="micro-batch size per GPU (default 1)")
    g.add_argument("--seq", type=_positive, default=512, help="sequence length / prompt tokens (default 512)")
    g.add_argument("--new-tokens", type=_positive, default=0, help="tokens to generate (inference)")
    g.add_argument("--grad-accum", type=_positive, default=1, help="gradient accumulation steps")
    g.add_argument("--keep-grads", action="store_true",
                   help="gradients stay allocated between steps (zero_grad(set_to_none=False), the default "
                        "before PyTorch 2.0); by default they are freed (set_to_none=True)")
    g.add_argument("--optimizer-in-backward", action="store_true",
                   help="step each parameter's optimizer as its gradient is accumulated and free the gradient "
                        "(torchtune optimizer_in_bwd): gradients never coexist; not with --grad-accum > 1")
    g.add_argument("--checkpointing", type=_checkpointing, default="none",
                   metavar="{" + ",".join(W.CHECKPOINTING) + ",every:N}",
                   help="activation checkpointing of the blocks: full; selective (Megatron: the attention core "
                        "only, next to nothing with SDPA); selective-op (torchtitan per-op SAC: saves every other "
                        "matmul and the attention kernel's output, recomputes the rest); every:N (torchtitan: "
                        "every N-th block in full)")
    g.add_argument("--activation-offload", action="store_true",
                   help="copy saved activations to pinned host memory as they are saved and bring them back in "
                        "backward (torchtune OffloadActivations); the host RAM shows in host_bytes")
    g.add_argument("--fp8", action="store_true",
                   help="FP8 training with torchao's Float8Linear (torchtitan [float8], tensorwise scaling; other "
                        "recipes: --fp8-recipe): "
                        "bf16 full training; the casts add transients, the saved activations stay bf16")
    g.add_argument("--fp8-recipe", choices=W.FP8_RECIPES, default=None,
                   help="the float8 recipe (implies --fp8), as torchtitan's --float8.recipe_name / --mx.recipe_name "
                        "spell it: tensorwise (default), rowwise, rowwise_with_gw_hp (rowwise scales, one fp32 per "
                        "row), mxfp8_cublas, mxfp8_cublas_rceil (MX training: an e8m0 scale per 32 elements)")
    g.add_argument("--compile", action="store_true",
                   help="torch.compile the model (inductor's min-cut partitioner): backward recomputes the cheap "
                        "pointwise tensors (activations, norms' outputs) instead of saving them")
    g.add_argument("--compile-scope", choices=W.COMPILE_SCOPES, default="model",
                   help="what --compile covers: model (torch.compile(model): one graph with the loss, the Trainer's "
                        "torch_compile), blocks (each decoder block alone, the embedding, head and loss eager: "
                        "torchtune's compile=True, torchtitan before March 2025) or blocks+loss (each block and "
                        "the loss compiled: torchtitan's training.compile since March 2025, [compile] components "
                        "[\"model\", \"loss\"])")
    g.add_argument("--loss-chunks", type=_positive, default=1,
                   help="chunked cross-entropy (torchtune CEWithChunkedOutputLoss; 8 there): the output layer and "
                        "the loss run on N chunks of the sequence, the fp32 upcast one chunk at a time (default 1)")
    g.add_argument("--loss-upcast", action=argparse.BooleanOptionalAction, default=True,
                   help="with --loss-chunks: each chunk's logits upcast to fp32 before the cross-entropy (torchtune's "
                        "CEWithChunkedOutputLoss, the default); --no-loss-upcast: in the logits' dtype (LitGPT's "
                        "chunked_cross_entropy)")
    g.add_argument("--holds-outputs", nargs="?", choices=W.HELD_FOR, const="next-forward", default="none",
                   metavar="none|step|next-forward",
                   help="how long the training loop holds each step's outputs, and so their graph: none (the HF "
                        "Trainer drops them before backward, the default), step (through its backward), next-forward "
                        "(bare --holds-outputs: `outputs = model(**batch)` rebound only when the next forward "
                        "returns, as the HF course's, accelerate's, PEFT's and LitGPT's loops do): transformers' "
                        "logits and KV cache, Lightning Fabric's fp32 logits (--output-upcast) and an old "
                        "bitsandbytes' kept inputs (--bnb-inputs)")
    g.add_argument("--output-upcast", action="store_true",
                   help="with --loss-chunks and --no-loss-upcast: Lightning Fabric's bf16-true / 16-true / bitsandbytes "
                        "precision casts the model's chunked logits to fp32 at once, and LitGPT's loop holds them "
                        "(through backward, or as --holds-outputs says)")
    g.add_argument("--loss", choices=W.LOSSES, default="cross-entropy",
                   help="the causal-LM loss: cross-entropy over the logits, fused-linear (Liger's fused linear "
                        "cross-entropy: the full logits never exist), or logits-sum (the SDPA benchmark loop of "
                        "transformers' model docs: outputs.logits.sum() with no labels, the outputs held into the "
                        "next forward; masked or causal LMs)")
    g.add_argument("--loss-parallel", action="store_true",
                   help="with --tp: the logits and the loss stay sharded over the vocabulary (torchtitan "
                        "loss_parallel); without it every rank gathers the whole logits")
    g.add_argument("--attention", choices=W.ATTENTION, default="sdpa", help="attention kernel (default sdpa)")
    g.add_argument("--gqa-expand", action="store_true",
                   help="GQA keys and values copied to every query head before the attention kernel, which keeps "
                        "the copies for backward (torchtune's MultiHeadAttention; transformers' repeat_kv when "
                        "SDPA gets no enable_gqa)")
    g.add_argument("--padded", action="store_true",
                   help="the batch is padded to its longest sample (a padding collator, tokenizer.pad): an "
                        "attention_mask with zeros reaches the model, so transformers builds a (b, 1, s, s) mask and "
                        "SDPA runs the memory-efficient kernel, keeping the mask and GQA keys/values expanded per block")
    g.add_argument("--fused-qkv", action="store_true",
                   help="LitGPT's attention: one fused q/k/v linear split by views (SDPA's value keeps the fused "
                        "output under multi-head or one kv head; keys rotated after the GQA expand), and under LoRA "
                        "one adapter over the adapted q, k and v (LoRAQKVLinear: one dropout, zero_pad's source); "
                        "--lora-targets q_proj,k_proj,v_proj then name the parts of a fused query_key_value too")
    g.add_argument("--lora-rank", type=_positive, default=8, help="LoRA rank r (default 8, peft's LoraConfig); AdaLoRA's "
                   "init_r under --method adalora (AdaLoraConfig's default 12: give it)")
    g.add_argument("--decompose-factor", type=_positive, default=-1,
                   help="LoKr's decompose_factor: each side of an adapted linear split as factor x rest (default -1, "
                        "peft's LoKrConfig: near the square root)")
    g.add_argument("--oft-block-size", type=_positive, default=32,
                   help="OFT's block size: each adapted input rotated in blocks of this size (default 32, peft's "
                        "OFTConfig; r blocks is in_features // r)")
    g.add_argument("--boft-block-size", type=_positive, default=4,
                   help="BOFT's block size (default 4, peft's BOFTConfig; boft_n_butterfly_factor 1)")
    g.add_argument("--num-virtual-tokens", type=_positive, default=0,
                   help="prompt tuning's virtual tokens, put before every sequence (peft's PromptTuningConfig), or "
                        "prefix tuning's, keys and values before every block's (PrefixTuningConfig)")
    g.add_argument("--vera-rank", type=_positive, default=256,
                   help="VeRA's rank r (default 256, peft's VeraConfig): the shared frozen vera_A (r, in) and "
                        "vera_B (out, r), and each adapted linear's trained lambda_d")
    g.add_argument("--lora-targets", default="q_proj,v_proj", help="modules LoRA adapts, comma-separated, or all-linear")
    g.add_argument("--lora-dropout", type=_fraction, default=0.0,
                   help="LoRA dropout on the adapters' input (peft lora_dropout): each adapter keeps a dropped copy "
                        "and a 1-byte mask for backward (default 0)")
    g.add_argument("--lora-dtype", choices=W.LORA_DTYPES, default="fp32",
                   help="the adapters' dtype: fp32 (peft's default, autocast_adapter_dtype=True) or the compute "
                        "dtype (torchtune builds them in the model's)")
    g.add_argument("--dora", action="store_true",
                   help="DoRA (peft use_dora=True): a magnitude vector per adapted linear, and the norm of "
                        "W + s*B@A per output row at every forward (full-size temporaries)")
    g.add_argument("--lora-fa", action="store_true",
                   help="LoRA-FA (peft's create_lorafa_optimizer, with --method lora or qlora): every lora_A frozen, "
                        "LoraFAOptimizer's AdamW moments for lora_B only; A keeps no input for backward")
    g.add_argument("--quant-targets", choices=W.QUANT_TARGETS, default="all",
                   help="with quantized weights under LoRA/QLoRA: all linears of the blocks (transformers' "
                        "BitsAndBytesConfig, torchtune >= 0.3) or only the adapted ones (torchtune 0.1-0.2)")
    g.add_argument("--quant-head", action="store_true",
                   help="the output layer (lm_head) in the quantized format too, as LitGPT's QLoRA (Lightning's "
                        "BitsandbytesPrecision), torchao's quantize_ and gpt-fast quantize every nn.Linear; "
                        "transformers' BitsAndBytesConfig keeps it in the compute dtype (the default); a tied "
                        "output layer becomes a quantized copy of its own")
    g.add_argument("--dequant-dtype", choices=W.DEQUANT_DTYPES, default="compute",
                   help="the dtype 4-bit weights dequantize to: compute (bitsandbytes >= 0.43), or fp16 "
                        "(bitsandbytes 0.42 and Lightning's NF4 quantize weight.half(): each matmul holds the "
                        "fp16 weight beside its compute-dtype copy)")
    g.add_argument("--bnb-compute-dtype", choices=W.DTYPES, default=None,
                   help="BitsAndBytesConfig's bnb_4bit_compute_dtype (default: the compute dtype); transformers "
                        "makes it fp32 when load_in_4bit=True is given alone, and bitsandbytes runs fp16 "
                        "activations' 4-bit matmuls in it (the input cast, the fp16-dequantized weight and its "
                        "copy); inference only")
    g.add_argument("--nf4-impl", choices=W.NF4_IMPLS, default="bitsandbytes",
                   help="whose NF4 dequantizes a 4-bit weight at each matmul: bitsandbytes (one kernel), or torchao "
                        "(torchtune's QLoRA: NF4Tensor.get_original_weight in eager ops, 14 B per weight element "
                        "alive at its peak: int64 code indices and bf16 halves)")
    g.add_argument("--quant-impl", choices=W.QUANT_IMPLS, default="kernel",
                   help="how a quantized linear reads its weight: kernel (bitsandbytes' int8, torchao's dynamic-"
                        "activation int8 and float8 kernels), torchao-wo (torchao's int8_weight_only / "
                        "float8_weight_only in eager mode: each call dequantizes the whole weight to the compute "
                        "dtype; inference), or for gptq-4bit AutoGPTQ 0.4.2's exllama (an fp16 buffer the size of "
                        "the largest weight) or cuda-old (dequantizes in PyTorch ops from 128 input rows; inference)")
    g.add_argument("--quant-group-size", type=_positive, default=0, metavar="G",
                   help="weights per scale of the group-wise formats (int4, gptq-4bit, awq-4bit, uint1..uint7, "
                        "int4-sparse-marlin: 32, 64 or 128, w4a8-qqq: 128): 0 for their default, 128 (uint1..uint7: "
                        "64; w4a8-qqq: one scale per output channel); torchao's gpt-fast benchmarks use 64 (int4wo-64)")
    g.add_argument("--quantize-on-device", action="store_true",
                   help="the model is loaded in --dtype onto the GPU and quantized there, then the cache emptied "
                        "(torchao's gpt-fast generate.py: model.to('cuda'), quantize_, the CUDA-graph capture's "
                        "empty_cache): the segments holding quantized weights keep their free remainder "
                        "(int8, int4, fp8, fp6, uint1..uint7, int4-sparse-marlin, w4a8-qqq; inference with --cache "
                        "static); with --method qlora "
                        "--nf4-impl torchao, "
                        "torchtune's 2024 set-up (built on the GPU, NF4 weights deep-copied per block and "
                        "re-quantized from the checkpoint, no empty_cache): its reserve lasts the run")
    g.add_argument("--bnb-inputs", action="store_true",
                   help="bitsandbytes < 0.43.2: each 4-bit matmul keeps its input in training until the step's graph "
                        "is freed (into the next forward with --holds-outputs next-forward); 0.43.2 and later keep "
                        "nothing (the default)")
    g.add_argument("--gpus", type=_positive, default=1, help="GPUs in total (default 1)")
    g.add_argument("--zero", type=_positive, choices=(0, 1, 2, 3), default=0, help="DeepSpeed ZeRO stage")
    g.add_argument("--zero-buckets", choices=W.ZERO_BUCKETS, default="default",
                   help="DeepSpeed's bucket sizes: default (reduce_bucket_size 5e8 elements) or auto (what "
                        "transformers' Trainer fills in for \"auto\": hidden_size^2)")
    g.add_argument("--fsdp", action="store_true", help="FSDP sharding (full shard is like ZeRO-3)")
    g.add_argument("--fsdp-strategy", choices=W.FSDP_STRATEGIES, default="full",
                   help="with --fsdp: full (ZeRO-3), shard-grad-op (ZeRO-2), or hybrid (full shard within "
                        "a node of 8 GPUs, replicated across nodes)")
    g.add_argument("--fsdp-version", type=int, choices=W.FSDP_VERSIONS, default=2,
                   help="with --fsdp: 2 (fully_shard, per-parameter shards; default) or 1 (FullyShardedDataParallel: "
                        "one flat parameter per transformer block and the root, as accelerate's fsdp_version 1 and "
                        "torchtune before 0.2)")
    g.add_argument("--fsdp-units", choices=W.FSDP_UNITS, default="blocks",
                   help="with --fsdp (FSDP2): the units besides the root: blocks (each transformer block; the root "
                        "keeps the embedding and output layer gathered from forward to the end of backward; default) "
                        "or blocks+embed+output (the embedding and the output layer units of their own, resharded "
                        "after each forward and gathered again in backward: torchtune's custom_sharded_layers "
                        "['tok_embeddings', 'output'])")
    g.add_argument("--tp", type=_positive, default=1, help="tensor-parallel degree")
    g.add_argument("--pp", type=_positive, default=1, help="pipeline-parallel degree")
    g.add_argument("--pp-schedule", choices=W.PP_SCHEDULES, default="1f1b",
                   help="with --pp: torch.distributed.pipelining's schedule, 1f1b (min(pp, m) micro-batches in "
                        "flight), interleaved-1f1b (2 stages per rank, torchtitan's Interleaved1F1B) or gpipe "
                        "(all m); --grad-accum is the micro-batch count m")
    g.add_argument("--cp", type=_positive, default=1,
                   help="context-parallel degree (torchtitan's context_parallel_degree): seq/cp tokens per rank, ring "
                        "attention over all-gathered keys and values; FSDP shards over dp x cp")
    g.add_argument("--offload", choices=W.OFFLOAD, default="none", help="CPU offload of optimizer states / everything")
    g.add_argument("--kv-dtype", choices=W.KV_DTYPES, default=None, help="KV-cache dtype (default: compute dtype)")
    g.add_argument("--task", choices=W.TASKS, default=None,
                   help="the head and loss: causal-lm, seq2seq-lm, masked-lm, sequence-classification, "
                        "token-classification, question-answering, or embedding (sentence-transformers: base "
                        "model, mean pooling, in-batch negatives over --batch (anchor, positive) pairs); "
                        "default: the config's architectures; image-classification for ViT")
    g.add_argument("--image-size", type=_image_size, default=None, metavar="H[xW]",
                   help="vision encoders (ViT, CLIP/SigLIP vision towers): the image size in pixels, 224 or "
                        "224x224; tokens are (H/patch)*(W/patch) (+1 class token) and --seq is ignored "
                        "(default: the config's image_size)")
    g.add_argument("--images", type=_positive, default=0, metavar="N",
                   help="vision-language models (LLaVA, Gemma 3): images per sample; each adds the model's "
                        "image tokens (576 for LLaVA-1.5, 256 for Gemma 3) to --seq (default 0)")
    g.add_argument("--kv-block", type=_positive, default=0, help="paged KV-cache block size in tokens (0: no paging)")
    g.add_argument("--cache", choices=W.CACHES, default="dynamic",
                   help="transformers' KV cache (inference): dynamic (DynamicCache), static (StaticCache: "
                        "max_cache_len tokens per layer from the first forward), offloaded (layers kept on the "
                        "host but the current ones), quantized (QuantizedCache, 4-bit with a 128-token residual)")
    g.add_argument("--max-cache-len", type=_positive, default=0,
                   help="with --cache static: the tokens StaticCache preallocates (default 0: seq + new-tokens)")
    g.add_argument("--transformers-version", type=_transformers_version, default=None, metavar="X.Y[.Z]",
                   help="the transformers release that runs the model (default: transformers 5). Inference: "
                        "before 4.42 every decode step of generate() keeps the previous cache beside the new one; "
                        "training: before 4.49 OPT's eager attention keeps its clamped scores; older GPT-2 and "
                        "GPT-NeoX blocks hold causal-mask buffers; under --loss logits-sum older GPT-2, GPT-NeoX "
                        "and OPT forwards return each block's (key, value) tuple, held with the logits")
    g.add_argument("--alloc-conf", type=_alloc_conf, default=None, metavar="CONF",
                   help="the run's PYTORCH_CUDA_ALLOC_CONF (e.g. expandable_segments:True, torchtitan's launch "
                        "scripts' setting), parsed by PyTorch's rules: the reserve (peak reserved, nvidia-smi) is "
                        "estimated, and traces replayed, under it (default: PyTorch's defaults)")
    g.add_argument("--audio-seconds", type=_audio_seconds, default=None, metavar="S",
                   help="speech encoder-decoders (Whisper): seconds of audio per sample; padded to 30-second "
                        "windows of 1,500 encoder positions, ceil(S/30) windows per sample; --seq is the "
                        "transcript's tokens (default: one 30-second window)")


def _image_size(text: str) -> tuple[int, int]:
    """``--image-size``: 224 or HxW (Workload checks the bounds)."""
    from vramlens.errors import ConfigError

    try:
        size = W.parse_image_size(text)
    except ConfigError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    if size is None:
        raise argparse.ArgumentTypeError("image_size='' must be 224 or HxW such as 224x224")
    return size


def _transformers_version(text: str) -> str:
    """``--transformers-version``: X.Y or X.Y.Z (the Workload's rule; the CLI takes no empty value)."""
    if W.parse_release(text) is None:
        raise argparse.ArgumentTypeError(f"transformers_version={L.show(text)} must be a version such as 4.35 or 5.2")
    return text


def _alloc_conf(text: str) -> str:
    """``--alloc-conf``: a PYTORCH_CUDA_ALLOC_CONF string (the Workload's rule, PyTorch's message)."""
    problems = W.alloc_conf_problems(text)
    if problems:
        raise argparse.ArgumentTypeError(problems[0])
    return text


def _audio_seconds(text: str) -> float:
    """``--audio-seconds``: a number of seconds (Workload checks the bounds)."""
    from vramlens.errors import ConfigError

    try:
        return W.parse_audio_seconds(text)
    except ConfigError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def workload_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """The workload settings given on the command line, by Workload field name."""
    out = {f: getattr(args, f) for f in W.workload_fields() if hasattr(args, f)}
    if "fp8_recipe" in out:
        if out["fp8_recipe"] is None:
            del out["fp8_recipe"]  # not given: the Workload's default (tensorwise)
        else:
            out["fp8"] = True  # --fp8-recipe implies --fp8
    return out


def add_output_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the table")


def print_json(obj: Any) -> None:
    json.dump(obj, sys.stdout, indent=2)
    sys.stdout.write("\n")


def require_model_and_headroom(args: argparse.Namespace) -> None:
    """The checks every command that takes MODEL/--params and --headroom makes first."""
    from vramlens.errors import InputError

    if args.model is None and getattr(args, "params", None) is None:
        raise InputError("give a MODEL (a catalog name, hub id or config.json) or --params SIZE (e.g. --params 7B)")
    headroom = getattr(args, "headroom", None)
    if headroom is not None and not 0 <= headroom < 1:
        raise InputError(f"headroom={headroom} must be in [0, 1): e.g. --headroom 0.1 keeps 10% free")
