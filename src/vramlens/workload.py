"""Workload: a frozen, validated description of the run whose memory is wanted.

Precision semantics (the same words appear in ``vramlens estimate --help``):

* ``dtype`` is the dtype the weights are stored and computed in.
* ``amp`` adds mixed precision with fp32 master weights. ``dtype="fp32", amp="bf16"`` is
  PyTorch autocast: fp32 weights, bf16 copies made during forward and cached by autocast.
  ``dtype="fp16", amp="fp16"`` is DeepSpeed/Megatron-style mixed precision: fp16 weights and
  gradients, an fp32 master copy held by the optimizer.
* ``optimizer="none"`` means forward and backward only.
* ``dtype="fp32", amp="bf16"`` with ``fsdp`` is what torchtitan deploys: FSDP2's
  ``MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)`` over fp32 sharded parameters (no
  autocast: each block is all-gathered in bf16 and computes in bf16, gradients are reduce-scattered
  in fp32 into fp32 sharded gradients); ``dtype="bf16"`` with ``fsdp`` stores everything in bf16.

Checkpointing (activation checkpointing of the transformer blocks):

* ``full``: every block keeps only its input and is recomputed in backward.
* ``selective``: Megatron's selective recomputation (Korthikanti et al. 2022): the attention
  core (scores, softmax, dropout) is recomputed; with SDPA/flash attention there are no scores
  to drop, so only the kernel's log-sum-exp is (``Workload.ignored`` says so).
* ``selective-op``: torchtitan's per-op selective checkpointing (``selective_ac_option="op"``):
  every block is checkpointed, but the outputs of every other ``mm`` and of the SDPA kernels
  are saved instead of recomputed.
* ``every:N``: torchtitan's ``selective_ac_option="N"``: every N-th block is checkpointed in
  full, the others keep all their activations.
"""

from __future__ import annotations

import math
import operator
import re
from collections import deque
from dataclasses import asdict, dataclass, fields, replace
from itertools import repeat
from typing import Any, Literal, get_args

from vramlens import limits as L
from vramlens.errors import ConfigError

# Each choice is a Literal type (what mypy checks) and a tuple of its values (what the CLI, the web
# page and validation list), the tuple derived from the type so the two cannot drift.
Mode = Literal["inference", "train"]
#: ``ia3`` and ``ln-tuning`` are peft's IA3 and LN tuning with the model type's default targets
#: (vramlens.models.peft_targets), ``prompt-tuning`` peft's prompt tuning (num_virtual_tokens), ``vera`` peft's VeRA
#: (vera_rank, the model type's default targets): the base frozen, no LoRA adapters; ``adalora`` peft's AdaLoRA
#: (lora_A, lora_E, lora_B of init_r = lora_rank per adapted linear, and its RankAllocator); ``prefix-tuning`` peft's
#: prefix tuning (num_virtual_tokens keys and values before every block's own); ``loha`` and ``lokr`` are peft's LoHa
#: and LoKr (lora_rank, lora_targets; LoKr's decompose_factor), which build a full-size weight delta per adapted linear
#: in every forward, ``oft`` peft's OFT (oft_block_size, lora_targets), which rotates each adapted linear's input block
#: by block, and ``boft`` peft's BOFT (boft_block_size, lora_targets), which builds a full (in, in) butterfly rotation
#: in every forward (vramlens.estimator.activations.delta_saved)
Method = Literal["full", "lora", "qlora", "ia3", "ln-tuning", "prompt-tuning", "vera", "adalora", "prefix-tuning",
                 "loha", "lokr", "oft", "boft"]
DType = Literal["fp32", "fp16", "bf16"]
Amp = Literal["fp16", "bf16"]
#: ``fp6``, ``uint1`` .. ``uint7``, ``int4-sparse-marlin`` and ``w4a8-qqq`` are torchao's other weight-only formats
#: for inference (vramlens.estimator.weights names the layout of each): ``fpx_weight_only(3, 2)`` (FP6-LLM, e3m2),
#: ``uintx_weight_only(torch.uintN)`` (bit-packed UintxTensor), ``int4_weight_only(layout=MarlinSparseLayout())``
#: (2:4 sparse) and ``int8_dynamic_activation_int4_weight(layout=MarlinQQQLayout())`` (Marlin QQQ's W4A8)
Quant = Literal["int8", "nf4", "nf4-dq", "fp4", "int4", "gptq-4bit", "awq-4bit", "fp8", "fp6", "uint1", "uint2",
                "uint3", "uint4", "uint5", "uint6", "uint7", "int4-sparse-marlin", "w4a8-qqq"]
#: ``adamw-8bit``, ``paged-adamw*`` and ``lion`` are bitsandbytes'; the ``*-torchao`` ones are
#: torchao.optim's AdamW8bit, AdamW4bit, AdamWFp8 and CPUOffloadOptimizer(torch.optim.AdamW, fused=True).
Optimizer = Literal[
    "adamw", "adam", "sgd", "sgd-momentum", "adafactor", "adamw-8bit",
    "paged-adamw", "paged-adamw-8bit", "lion",
    "adamw-8bit-torchao", "adamw-4bit-torchao", "adamw-fp8-torchao", "adamw-cpu-offload-torchao", "none",
]
Checkpointing = Literal["none", "full", "selective", "selective-op"]
#: How torch.optim runs the step: ``foreach`` (CUDA's default), ``fused`` (one in-place kernel), ``loop`` (the
#: per-tensor path, foreach=False); ``transformers``: transformers' own AdamW (the Trainer's ``adamw_hf``, removed in
#: transformers 5), a per-tensor loop of its own (estimator.optimizer.optimizer_step_temporary).
OptimizerImpl = Literal["foreach", "fused", "loop", "transformers"]
FsdpStrategy = Literal["full", "shard-grad-op", "hybrid"]
#: FSDP2's units besides the root: each transformer block (the root keeps the embedding, final norm and output
#: layer), or also the input embedding and the output layer each a unit of its own (torchtune's
#: ``custom_sharded_layers: ['tok_embeddings', 'output']``)
FsdpUnits = Literal["blocks", "blocks+embed+output"]
#: torch.distributed.pipelining's schedules (torchtitan's pipeline_parallel_schedule names 1F1B, Interleaved1F1B, GPipe)
PPSchedule = Literal["1f1b", "interleaved-1f1b", "gpipe"]
Attention = Literal["eager", "sdpa", "flash"]
Offload = Literal["none", "optimizer", "all"]
#: DeepSpeed's bucket sizes: ``default`` (deepspeed/runtime/zero/config.py: reduce_bucket_size 5e8 elements) or
#: ``auto`` (the values transformers' Trainer fills in for "auto", integrations/deepspeed.py: reduce_bucket_size h*h)
ZeroBuckets = Literal["default", "auto"]
KVDType = Literal["fp32", "fp16", "bf16", "fp8", "int8"]
#: The dtype LoRA's adapter weights are kept in: peft's fp32 (``get_peft_model(autocast_adapter_dtype=True)``,
#: its default, upcasts half adapters) or the model's (torchtune builds them in the model's dtype).
LoraDType = Literal["fp32", "bf16", "fp16"]
#: Which linears quantized weights cover under LoRA/QLoRA: every linear of the blocks (transformers'
#: BitsAndBytesConfig: all nn.Linear but the output layer; torchtune >= 0.3 QLoRA builders too) or
#: only the adapted ones (torchtune 0.1 - 0.2's QLoRA: LoRALinear(quantize_base=True), the rest nn.Linear).
QuantTargets = Literal["all", "adapted"]
#: The dtype a bitsandbytes 4-bit weight is dequantized to (see Workload.dequant_dtype).
DequantDType = Literal["compute", "fp16"]
#: Whose NF4 code dequantizes a 4-bit weight at each matmul (see Workload.nf4_impl).
NF4Impl = Literal["bitsandbytes", "torchao"]
#: How a quantized linear's matmul reads its weight (see Workload.quant_impl).
QuantImpl = Literal["kernel", "torchao-wo", "exllama", "cuda-old"]
#: How long a training loop holds each step's outputs, and so the graph hanging from them (see Workload.holds_outputs).
HeldFor = Literal["none", "step", "next-forward"]
#: transformers' KV cache for inference (cache_utils): DynamicCache grows by torch.cat; StaticCache
#: preallocates max_cache_len tokens per layer; "offloaded" is DynamicCache(offloading=True), generate's
#: cache_implementation="offloaded"; "quantized" is QuantizedCache (quanto/hqq backends, 4-bit default).
CacheKind = Literal["dynamic", "static", "offloaded", "quantized"]
#: The causal-LM loss: transformers' cross-entropy over the full logits (chunked with loss_chunks,
#: as torchtune's CEWithChunkedOutputLoss), or a fused linear + cross-entropy (Liger's) that never
#: materializes the full logits. ``logits-sum``: no labels and no cross-entropy, the benchmark loop
#: of transformers' model docs' SDPA tables and optimum's BetterTransformer training benchmark
#: (``outputs = model(**inputs); loss = outputs.logits.sum(); loss.backward()``): the loop's
#: ``outputs`` keeps the logits alive through backward and until the next forward returns.
Loss = Literal["cross-entropy", "fused-linear", "logits-sum"]
#: What ``torch.compile`` covers (see Workload.compile_scope).
CompileScope = Literal["model", "blocks", "blocks+loss"]
#: torchao's float8 training recipes (Workload.fp8_recipe), spelled as torchao names them: Float8LinearRecipeName
#: (torchao 0.18 float8/config.py: tensorwise, rowwise, rowwise_with_gw_hp) and MXLinearRecipeName's MXFP8 ones
#: (torchao 0.13 prototype/mx_formats/config.py: mxfp8_cublas, mxfp8_cublas_rceil), torchtitan's
#: ``--float8.recipe_name`` and ``--mx.recipe_name``; see vramlens.estimator.fp8
Fp8Recipe = Literal["tensorwise", "rowwise", "rowwise_with_gw_hp", "mxfp8_cublas", "mxfp8_cublas_rceil"]

MODES: tuple[Mode, ...] = get_args(Mode)
METHODS: tuple[Method, ...] = get_args(Method)
#: The methods that add LoRA adapters (lora_rank, lora_targets, lora_dropout, dora apply to them).
LORA_METHODS: tuple[Method, ...] = ("lora", "qlora", "adalora")
#: The methods that train small tensors of their own beside a frozen base and add no linear adapter.
VECTOR_METHODS: tuple[Method, ...] = ("ia3", "ln-tuning", "prompt-tuning", "vera", "prefix-tuning")
#: peft's methods that build a full-size weight delta from small trained factors in every forward (LoHa's Hadamard
#: product, LoKr's Kronecker product) or rotate the adapted linears' inputs (OFT's block-diagonal Cayley rotation): their
#: factors are per-tensor trainables as VECTOR_METHODS' are (lora_rank and lora_targets give the
#: shapes), and each adapted linear keeps its delta for backward (vramlens.estimator.activations.delta_saved).
DELTA_METHODS: tuple[Method, ...] = ("loha", "lokr", "oft", "boft")
#: Every method whose trainables vramlens lists tensor by tensor (models.peft_vector_numels, peft_delta_numels).
OWN_TENSOR_METHODS: tuple[Method, ...] = VECTOR_METHODS + DELTA_METHODS
DTYPES: tuple[DType, ...] = get_args(DType)
AMPS: tuple[Amp, ...] = get_args(Amp)
QUANTS: tuple[Quant, ...] = get_args(Quant)
#: The 4-bit weight formats whose matmuls dequantize the whole weight (bitsandbytes ``MatMul4Bit``).
FOUR_BIT: tuple[Quant, ...] = ("nf4", "nf4-dq", "fp4")
#: torchao's ``uintx_weight_only`` formats, by bit width (torch.uint1 .. torch.uint7: quant_api.py at b4d076813b)
UINTX_QUANTS: tuple[Quant, ...] = ("uint1", "uint2", "uint3", "uint4", "uint5", "uint6", "uint7")
#: The formats whose on-GPU quantization (torchao's quantize_) is replayed (see Workload.quantize_on_device).
ON_DEVICE_QUANTS: tuple[Quant, ...] = ("int8", "int4", "fp8", "fp6", *UINTX_QUANTS, "int4-sparse-marlin", "w4a8-qqq")
#: torchao's weight-only formats without a backward, modelled for inference only: FP6-LLM, uintx, Sparse-Marlin and
#: Marlin QQQ (their tensor subclasses implement no autograd path: quant_api.py at b4d076813b, 65d86c6c26, 06e69f6a93)
AO_INFERENCE_QUANTS: tuple[Quant, ...] = ("fp6", *UINTX_QUANTS, "int4-sparse-marlin", "w4a8-qqq")
#: The formats whose only kernel takes fp16 activations: FP6-LLM's ``_linear_f16_act_fpx_weight_check``
#: (affine_quantized_tensor.py at b4d076813b), Sparse-Marlin's ``_linear_fp_act_int4_weight_sparse_marlin_check``
#: (65d86c6c26) and Marlin QQQ's ``_linear_int8_act_int4_weight_marlin_qqq_check`` (06e69f6a93): another dtype falls
#: back to a dequantized weight (or fails), which is not modelled
FP16_KERNEL_QUANTS: tuple[Quant, ...] = ("fp6", "int4-sparse-marlin", "w4a8-qqq")
#: The formats with one scale (and zero point) per group of ``quant_group_size`` weights along a row.
GROUPED_QUANTS: tuple[Quant, ...] = ("int4", "gptq-4bit", "awq-4bit", *UINTX_QUANTS, "int4-sparse-marlin", "w4a8-qqq")
#: The group sizes a format takes, where it takes only some: Sparse-Marlin's ``Marlin24Constants.SUPPORTED_GROUP_SIZES``
#: (torchao/sparsity/marlin/utils.py at 65d86c6c26: -1, 32, 64, 128; int4_weight_only's group_size is never -1) and
#: Marlin QQQ's ``choose_qparams_and_quantize_affine_qqq`` (quant_primitives.py at 06e69f6a93: -1, i.e. per
#: output channel, which quant_group_size 0 stands for, or 128)
QUANT_GROUP_CHOICES: dict[str, tuple[int, ...]] = {"int4-sparse-marlin": (32, 64, 128), "w4a8-qqq": (128,)}
OPTIMIZERS: tuple[Optimizer, ...] = get_args(Optimizer)
CHECKPOINTING: tuple[Checkpointing, ...] = get_args(Checkpointing)
#: ``checkpointing="every:N"`` (torchtitan ``selective_ac_option="N"``): every N-th block checkpointed.
EVERY_PREFIX = "every:"
#: The choices the CLI help and the web page list: the fixed ones and a few every:N.
CHECKPOINTING_CHOICES: tuple[str, ...] = (*CHECKPOINTING, "every:2", "every:3", "every:4")
OPTIMIZER_IMPLS: tuple[OptimizerImpl, ...] = get_args(OptimizerImpl)
FSDP_STRATEGIES: tuple[FsdpStrategy, ...] = get_args(FsdpStrategy)
FSDP_UNITS: tuple[FsdpUnits, ...] = get_args(FsdpUnits)
PP_SCHEDULES: tuple[PPSchedule, ...] = get_args(PPSchedule)
#: FSDP1 (torch.distributed.fsdp.FullyShardedDataParallel) and FSDP2 (torch.distributed.fsdp.fully_shard)
FSDP_VERSIONS: tuple[int, ...] = (1, 2)
#: GPUs that hybrid sharding shards over (one node); the rest replicate (HSDP).
GPUS_PER_NODE = 8
ATTENTION: tuple[Attention, ...] = get_args(Attention)
OFFLOAD: tuple[Offload, ...] = get_args(Offload)
ZERO_BUCKETS: tuple[ZeroBuckets, ...] = get_args(ZeroBuckets)
KV_DTYPES: tuple[KVDType, ...] = get_args(KVDType)
LORA_DTYPES: tuple[LoraDType, ...] = get_args(LoraDType)
QUANT_TARGETS: tuple[QuantTargets, ...] = get_args(QuantTargets)
HELD_FOR: tuple[HeldFor, ...] = get_args(HeldFor)
DEQUANT_DTYPES: tuple[DequantDType, ...] = get_args(DequantDType)
NF4_IMPLS: tuple[NF4Impl, ...] = get_args(NF4Impl)
QUANT_IMPLS: tuple[QuantImpl, ...] = get_args(QuantImpl)
#: The formats torchao's weight-only linears dequantize at each eager call (quant_impl="torchao-wo").
WO_DEQUANT_QUANTS: tuple[Quant, ...] = ("int8", "fp8")
#: AutoGPTQ 0.4.2's QuantLinear kernels for gptq-4bit weights (quant_impl="exllama" or "cuda-old").
GPTQ_IMPLS: tuple[QuantImpl, ...] = ("exllama", "cuda-old")
CACHES: tuple[CacheKind, ...] = get_args(CacheKind)
LOSSES: tuple[Loss, ...] = get_args(Loss)
COMPILE_SCOPES: tuple[CompileScope, ...] = get_args(CompileScope)
FP8_RECIPES: tuple[Fp8Recipe, ...] = get_args(Fp8Recipe)
#: Most chunks --loss-chunks takes (torchtune uses 8; more only adds Python overhead).
MAX_LOSS_CHUNKS = 4_096
DEFAULT_LORA_TARGETS = ("q_proj", "v_proj")
#: What the model is trained or run for: the head on top of the base model and its loss.
#: ``embedding`` is sentence-transformers' case: the base model, mean pooling, and the in-batch
#: negatives loss over (anchor, positive) pairs (MultipleNegativesRankingLoss).
Task = Literal["causal-lm", "seq2seq-lm", "masked-lm", "sequence-classification", "token-classification",
               "question-answering", "embedding", "image-classification"]
TASKS: tuple[Task, ...] = get_args(Task)
#: Tasks whose head produces tokens (the ones ``new_tokens`` applies to).
GENERATING_TASKS: tuple[Task, ...] = ("causal-lm", "seq2seq-lm")


def _quantized_base_problem(m: str, method: str, quant: str) -> str:
    """Why one of PEFT's other methods over a quantized base is refused. peft 0.21.2 runs IA3 on bitsandbytes through
    its own layers (tuners/ia3/bnb.py), OFT, BOFT and VeRA through the generic QuantizationBackend
    (utils/quantization_utils.py resolve_quantization_backend, dispatched in tuners/<method>/model.py); LoHa and LoKr
    (tuners/lycoris_utils.py) have no quantization support."""
    if method == "ia3":
        # ia3/bnb.py Linear4bit / Linear8bitLt.forward: x.float() without autocast, the base layer on the fp32 copy,
        # the product cloned and cast back: what it keeps is not traced (the tracer's NF4 linear is no bnb class)
        return (f"{m} over quant={quant} weights (peft's ia3/bnb.py layers: an fp32 copy of each adapted linear's "
                "input) is not modelled: drop --quant")
    if method in ("loha", "lokr"):
        return (f"{m} over quant={quant} weights is not modelled (peft 0.21's LyCORIS layers have no quantization "
                "support): drop --quant")
    return f"{m} over quant={quant} weights is not modelled: drop --quant"


@dataclass(frozen=True, slots=True)
class Workload:
    """What is run: mode, precision, optimizer, shapes, and how it is spread over GPUs.

    Every field has the name of its CLI flag (dashes as underscores).
    """

    mode: Mode = "inference"
    method: Method = "full"
    dtype: DType = "bf16"
    amp: Amp | None = None
    quant: Quant | None = None
    optimizer: Optimizer = "adamw"
    optimizer_impl: OptimizerImpl = "foreach"
    batch: int = 1
    seq: int = 512
    new_tokens: int = 0
    grad_accum: int = 1
    keep_grads: bool = False
    #: torchtune's ``optimizer_in_bwd``: each parameter is stepped (and its gradient freed) by a
    #: post-accumulate-grad hook during backward, so the gradients never coexist
    optimizer_in_backward: bool = False
    #: none, full, selective, selective-op, or every:N (see the module docstring)
    checkpointing: Checkpointing | str = "none"
    #: torchtune's OffloadActivations: saved activations copied to pinned host memory as they are saved
    activation_offload: bool = False
    #: torchtune's chunked output + CEWithChunkedOutputLoss (8 chunks there); 1: no chunking
    loss_chunks: int = 1
    #: the chunked cross-entropy upcasts each chunk's logits to fp32 first (torchtune's CEWithChunkedOutputLoss:
    #: ``F.cross_entropy(logits.float(), ...)``); False: LitGPT's ``chunked_cross_entropy`` (litgpt/utils.py)
    #: runs ``F.cross_entropy`` on the chunk in the logits' dtype, so its log_softmax is kept in that dtype
    loss_upcast: bool = True
    #: How long the training loop holds each step's outputs, and with them the graph hanging from them: ``none``
    #: (the HF Trainer drops them before backward; only the loss survives the forward), ``step`` (through its own
    #: backward, nothing of an earlier step alive: ``del outputs`` at the step's end, or a run whose peak is its
    #: first step), ``next-forward`` (``outputs = model(**batch)`` rebound only when the next forward returns: the
    #: loops of the HF course, accelerate's examples, PEFT's method comparison, LitGPT's ``logits = model(...)``).
    #: What they hold depends on the stack: transformers' outputs keep the logits and, with the config's
    #: ``use_cache``, the KV cache (:attr:`outputs_held`); Lightning Fabric's cast keeps fp32 logits
    #: (:attr:`output_upcast`); an old bitsandbytes' nodes keep their inputs (:attr:`bnb_inputs`)
    holds_outputs: HeldFor = "none"
    #: Lightning Fabric's half-precision plugins (``bf16-true``, ``16-true``, ``BitsandbytesPrecision``) cast the
    #: model's floating outputs to torch's default dtype, fp32 (``_FabricModule.forward`` calls
    #: ``precision.convert_output``: lightning 71aed751 src/lightning/fabric/wrappers.py lines 116-124,
    #: plugins/precision/half.py lines 51-52, bitsandbytes.py lines 142-143): LitGPT's chunked logits are all
    #: copied to fp32 at once, the half chunks freed once every copy exists, and the chunked loss (--no-loss-upcast)
    #: runs on the fp32 copies, which LitGPT's loop (``logits = model(...)``) holds for :attr:`holds_outputs`
    #: (through backward at least: ``step`` when it says ``none``)
    output_upcast: bool = False
    loss: Loss = "cross-entropy"
    #: torchtitan's loss parallelism under --tp: logits and loss sharded over the vocabulary
    loss_parallel: bool = False
    #: torchtitan's ``[float8]`` converter: torchao's ``convert_to_float8_training`` swaps every
    #: nn.Linear whose dims are multiples of 16, but the output layer (``filter_fqns = ["output"]``, as
    #: torchtitan's configs set it), for Float8Linear (tensorwise dynamic scaling, torchao's default
    #: recipe); see vramlens.estimator.fp8
    fp8: bool = False
    #: The float8 recipe of --fp8 (torchtitan's ``--float8.recipe_name`` / ``--mx.recipe_name``): tensorwise (torchao's
    #: default Float8LinearConfig), rowwise, rowwise_with_gw_hp (Float8LinearConfig.from_recipe_name), or MX training
    #: with mxfp8 (torchao's MXLinear: mxfp8_cublas, mxfp8_cublas_rceil); see vramlens.estimator.fp8
    fp8_recipe: Fp8Recipe = "tensorwise"
    #: ``torch.compile`` of the model (inductor's default: AOT autograd with the min-cut
    #: rematerialization partitioner), which saves fewer tensors for backward than eager; see
    #: vramlens.estimator.compiled
    compile: bool = False
    #: What --compile covers: the whole model with its loss in one graph (``torch.compile(model)``, the
    #: Trainer's ``torch_compile``), or each decoder block on its own, with the embedding, final norm,
    #: output layer and loss eager: torchtune's ``training.compile_model`` (``layer.compile()`` per
    #: block; a plain loss stays eager, a chunked one is compiled by ``compile_loss``) and torchtitan's
    #: ``apply_compile`` (per TransformerBlock); or blocks+loss: each block and the loss function compiled,
    #: the embedding, final norm and output layer eager: torchtitan from March 2025 (``training.compile``
    #: also runs ``torch.compile(cross_entropy_loss)``, torchtitan/components/loss.py
    #: ``build_cross_entropy_loss``; ``compile.components = ["model", "loss"]`` since August 2025)
    compile_scope: CompileScope = "model"
    attention: Attention = "sdpa"
    #: GQA keys and values copied to every query head before the attention kernel, which keeps the
    #: copies for backward: torchtune's MultiHeadAttention (``k.unsqueeze(2).expand(...).flatten(1, 2)``,
    #: torchtune/modules/attention.py, every release), and transformers' ``repeat_kv`` when SDPA is not
    #: given ``enable_gqa``. Eager attention in transformers always expands; this makes any kernel do so
    gqa_expand: bool = False
    #: The batch is padded to its longest sample, so an attention_mask with zeros reaches the model
    #: (DataCollatorWithPadding, ``tokenizer.pad``; labels -100 on the padding change no tensor's size).
    #: transformers then builds a (b, 1, s, S) mask once per forward (masking_utils.sdpa_mask: bool; eager_mask:
    #: the compute dtype, as unpadded) for every block, where an unpadded batch's SDPA gets none (``is_causal``):
    #: CUDA's SDPA runs the memory-efficient kernel on a mask converted to the query's dtype in each call and kept for
    #: backward, and GQA keys and values are expanded first (integrations/sdpa_attention.py ``use_gqa_in_sdpa``
    #: needs ``attention_mask is None`` on CUDA; ``repeat_kv``). Training and a no-cache prefill; a decoder's self-attention
    padded: bool = False
    #: LitGPT's attention (litgpt/model.py ``CausalSelfAttention.forward``, 5895df10 lines 215-240): one fused
    #: q/k/v linear whose output is split by views and ``reshape``d per head. Keys are rotated after the GQA
    #: ``expand``, so a single kv head's keys become a copy at every head too; values are a copy at every head
    #: under GQA, and a view of the fused output under multi-head or a single kv head, which SDPA's saved
    #: value keeps alive whole. Under LoRA the adapted q, k and v share one adapter (litgpt/lora.py
    #: ``LoRAQKVLinear.forward``): one dropout of the input, ``lora_A`` of r rows per adapted projection, and,
    #: unless all three are adapted, ``zero_pad``'s ``index_copy`` keeps its source (the adapted outputs)
    fused_qkv: bool = False
    lora_rank: int = 8  # peft LoraConfig's r default
    #: peft's PromptTuningConfig ``num_virtual_tokens`` (no default there: required under --method prompt-tuning):
    #: a trained (n, hidden) fp32 embedding whose rows are put before every sequence
    num_virtual_tokens: int = 0
    #: peft's VeraConfig ``r`` (default 256): the rank of the shared frozen projections vera_A (r, in) and vera_B
    #: (out, r), and the length of each adapted linear's trained lambda_d
    vera_rank: int = 256
    #: peft's LoKrConfig ``decompose_factor`` (default -1: each side split near its square root): LoKr splits an
    #: (out, in) linear's sides into factorization(out, f) and factorization(in, f) (src/peft/tuners/lokr/layer.py)
    decompose_factor: int = -1
    #: peft's OFTConfig ``oft_block_size`` (default 32, with r 0): each adapted linear's input is rotated in blocks of
    #: this size (in_features // size blocks; a size that does not divide in_features is moved to the nearest divisor,
    #: peft's adjust_oft_parameters). A config giving r blocks instead is the same as in_features // r here
    oft_block_size: int = 32
    #: peft's BOFTConfig ``boft_block_size`` (default 4, with boft_block_num 0 and boft_n_butterfly_factor 1, the
    #: factor vramlens models): in_features // size blocks of size x size per adapted linear
    boft_block_size: int = 4
    lora_targets: tuple[str, ...] = DEFAULT_LORA_TARGETS
    lora_dropout: float = 0.0
    lora_dtype: LoraDType = "fp32"
    #: peft's DoRA (``LoraConfig(use_dora=True)``): a magnitude vector per adapted linear, and the
    #: norm of the combined weight ||W + s*B@A|| per output row computed at every forward
    dora: bool = False
    #: peft's LoRA-FA (``peft.optimizers.create_lorafa_optimizer``): every ``lora_A`` frozen, the adapters'
    #: ``lora_B`` stepped by ``LoraFAOptimizer`` (AdamW moments for B only, B's gradient projected through
    #: (A A^T)^-1); only with method lora or qlora
    lora_fa: bool = False
    quant_targets: QuantTargets = "all"
    #: The output layer stored in the quantized format too (``quant``, nf4 under QLoRA): LitGPT's QLoRA
    #: (Lightning Fabric's ``BitsandbytesPrecision._convert_layers`` replaces every ``nn.Linear``),
    #: torchao's ``quantize_(model, int8_weight_only())`` / ``int4_weight_only()`` and gpt-fast's
    #: quantize.py (every ``nn.Linear``); transformers' BitsAndBytesConfig and TorchAoConfig keep it in
    #: high precision (the default, False). A tied output layer becomes a quantized copy of its own
    #: (replacing the module's weight unties it); the input embedding stays in the compute dtype.
    quant_head: bool = False
    #: The dtype a 4-bit weight is dequantized to before its cast to the compute dtype: ``compute``
    #: (bitsandbytes >= 0.43 quantizes from the weight's own dtype, so ``dequantize_4bit`` returns
    #: it), or ``fp16``: bitsandbytes 0.42.0 ``Params4bit.cuda`` and Lightning's ``_NF4Linear.quantize_``
    #: quantize ``weight.half()``, so every matmul dequantizes to fp16 and then casts (two (n, k)
    #: tensors alive at the cast when the compute dtype is not fp16)
    dequant_dtype: DequantDType = "compute"
    #: Whose NF4 dequantizes the weight at every 4-bit matmul: ``bitsandbytes`` (``dequantize_4bit``, one
    #: CUDA kernel writing the (n, k) weight) or ``torchao`` (torchtune's QLoRA: ``linear_nf4`` calls
    #: ``NF4Tensor.get_original_weight``, eager PyTorch ops whose int64 code indices and bf16 halves are
    #: alive together, 14 bytes per weight element at its ``torch.stack``)
    nf4_impl: NF4Impl = "bitsandbytes"
    #: How a quantized linear's matmul reads an int8 or fp8 weight: ``kernel``, a kernel that reads the stored
    #: weight (bitsandbytes' LLM.int8; torchao's dynamic-activation int8 ``torch._int_mm`` and float8
    #: ``torch._scaled_mm``), or ``torchao-wo``: torchao's ``int8_weight_only()`` / ``float8_weight_only()``,
    #: whose linear runs eagerly in the compute dtype on the whole weight dequantized at each call (int8: the
    #: weight cast to the compute dtype; fp8: the cast, then its product with the per-row scale, both alive).
    #: int4_weight_only's tinygemm kernel reads the packed weight: nothing dequantized (see
    #: vramlens.estimator.weights.wo_dequantizes). For gptq-4bit weights, AutoGPTQ 0.4.2's QuantLinear kernels
    #: (no act-order): ``exllama``, whose per-device fp16 ``temp_dq`` buffer holds the largest weight for the
    #: matmuls it reconstructs (weights.gptq_kernel_buffer_bytes), or ``cuda-old``, which dequantizes the weight in
    #: PyTorch ops for an input of 128 rows or more (weights.dequant_min_rows)
    quant_impl: QuantImpl = "kernel"
    #: Weights per scale of the group-wise formats (GROUPED_QUANTS); 0: their default, 128 (AutoGPTQ's
    #: and AutoAWQ's, torchao's ``int4_weight_only``, Sparse-Marlin's), 64 for uint1..uint7
    #: (``uintx_weight_only(group_size=64)``), one scale per output channel for w4a8-qqq (``group_size=-1``;
    #: QUANT_GROUP_CHOICES lists the sizes a format takes). torchao's gpt-fast benchmarks run ``int4wo-64``
    #: (``int4_weight_only(group_size=64)``)
    quant_group_size: int = 0
    #: The model is loaded in ``dtype`` onto the GPU and its linears quantized there. Inference: torchao's gpt-fast
    #: generate.py (``model.to("cuda")``, ``quantize_``, and the first CUDA-graph capture's
    #: ``torch.cuda.empty_cache()``); the segments that hold a quantized weight keep their free remainder. QLoRA
    #: training with ``nf4_impl="torchao"``: torchtune's set-up of 2024 (the model built on the GPU, each NF4 weight
    #: quantized, deep-copied per block and re-quantized from the checkpoint, no empty_cache before training), whose
    #: reserve lasts the run (see vramlens.estimator.ondevice)
    quantize_on_device: bool = False
    gpus: int = 1
    zero: int = 0
    #: DeepSpeed's bucket sizes (see ZeroBuckets): its defaults, or the Trainer's "auto" (h*h elements)
    zero_buckets: ZeroBuckets = "default"
    fsdp: bool = False
    fsdp_strategy: FsdpStrategy = "full"
    #: 2: FSDP2 (``fully_shard``: per-parameter DTensor shards); 1: FSDP1 (``FullyShardedDataParallel``: one padded
    #: FlatParameter per wrapped unit, one unit per transformer block plus the root, as accelerate's
    #: TRANSFORMER_BASED_WRAP and torchtune's recipes before 0.2 wrap, with ``use_orig_params=False``, FSDP1's default
    #: and torchtune's; ``limit_all_gathers`` and BACKWARD_PRE, the defaults; see vramlens.estimator.parallel
    #: ``fsdp1_stream_pools``)
    fsdp_version: int = 2
    #: FSDP2's units (see FsdpUnits): "blocks+embed+output" is torchtune's training.shard_model with
    #: ``custom_sharded_layers=['tok_embeddings', 'output']`` (torchtune/training/_distributed.py at 30b8519e):
    #: ``fully_shard(m, reshard_after_forward=True)`` on each block and on the two modules, then on the root, so the
    #: embedding and the output layer are gathered for their own forward (the output layer once per call: per loss
    #: chunk) and again in backward, not held from forward to the end of backward in the root
    #: (vramlens.estimator.parallel.fsdp_units_sizes)
    fsdp_units: FsdpUnits = "blocks"
    tp: int = 1
    pp: int = 1
    #: with ``pp`` > 1, the schedule, which sets how many micro-batches' activations a rank holds
    #: (vramlens.estimator.parallel.stage_micro_batches_in_flight); ``grad_accum`` is the micro-batch count
    pp_schedule: PPSchedule = "1f1b"
    #: context parallelism (torchtitan's ``context_parallel_degree``: torch.distributed.tensor.experimental's
    #: ``context_parallel``): each of ``cp`` ranks holds ``seq / cp`` tokens of every sample and ring attention
    #: all-gathers the keys and values; FSDP shards over the data-parallel and context-parallel ranks together
    #: (torchtitan's ``dp_shard_cp`` mesh), so ``dp`` counts both
    cp: int = 1
    offload: Offload = "none"
    kv_dtype: KVDType | None = None
    kv_block: int = 0
    cache: CacheKind = "dynamic"
    #: StaticCache's max_cache_len; 0: seq + new_tokens (what generate() sizes it to)
    max_cache_len: int = 0
    #: the transformers release that runs the model ("4.35", "4.41.2"); None: the release vramlens models
    #: (5.x: one DynamicCache from the prefill to the last token). Before 4.42 generate() passed the cache
    #: as a tuple of per-layer tuples and every decode step kept the old one alive beside the new one (see
    #: :attr:`legacy_cache`, vramlens.estimator.kv_cache.legacy_decode_bytes); in training, before 4.49 OPT's
    #: eager attention kept its clamped scores (:attr:`legacy_score_clamp`); older GPT-2 and GPT-NeoX blocks
    #: hold causal-mask buffers (ModelSpec.legacy_buffers_before)
    transformers_version: str | None = None
    task: Task | None = None  # None: the head named by the config's architectures
    #: bitsandbytes < 0.43.2's 4-bit matmuls keep their input in training: ``MatMul4Bit.forward`` puts it on the
    #: autograd node (``ctx.tensors = (A, B)``, not ``save_for_backward``) although its backward never reads it
    #: (fixed by bitsandbytes #1270; 0.43.2 and later keep nothing, ``ctx.tensors = (None, B)``, False). Kept
    #: until the graph is freed: with the step (transformers' Trainer drops the outputs then), or into the next
    #: forward when the loop holds the step's outputs that long (:attr:`holds_outputs` ``next-forward``)
    bnb_inputs: bool = False
    #: (height, width) of the images a vision encoder sees (ViT, CLIP/SigLIP vision towers); None: the
    #: config's image_size. The tokens are (H // patch) * (W // patch) (+1 for a class token), not seq.
    image_size: tuple[int, int] | None = None
    #: seconds of audio per sample a speech encoder-decoder (Whisper) hears; None: one 30-second window.
    #: The feature extractor pads or cuts to 30 s and the encoder always sees 1,500 positions per window;
    #: longer clips are cut into ceil(S / 30) windows (the ASR pipeline's chunking), each a batch row.
    audio_seconds: float | None = None
    #: images per sample fed to a vision-language model (LLaVA, Gemma 3): each becomes the model's image
    #: tokens in the text sequence (576 for LLaVA-1.5, 256 for Gemma 3), added to seq
    images: int = 0
    #: BitsAndBytesConfig's ``bnb_4bit_compute_dtype`` (None: the model's compute dtype). transformers'
    #: BitsAndBytesConfig turns None into torch.float32 (``load_in_4bit=True`` alone), but bitsandbytes'
    #: ``Linear4bit.set_compute_type`` (0.41.0 - 0.49.2, bitsandbytes/nn/modules.py) switches to the input's
    #: dtype when it is fp32 or bf16: only an fp16 model's 4-bit matmuls run in it (quant_matmul_dtype).
    #: Modelled in inference only
    bnb_compute_dtype: DType | None = None
    #: PYTORCH_CUDA_ALLOC_CONF of the run ("expandable_segments:True"), parsed by PyTorch's rules
    #: (vramlens.allocator.config.parse_alloc_conf); None or "": PyTorch's defaults. The estimator's reserve
    #: (max_memory_reserved, nvidia-smi) reads it; the allocated peak does not change
    alloc_conf: str | None = None

    # ---- derived ------------------------------------------------------------------------
    @property
    def lora_adapted(self) -> tuple[str, ...]:
        """The module names LoRA adapts: ``lora_targets`` under lora and qlora, none under the other methods."""
        return self.lora_targets if self.method in LORA_METHODS else ()

    @property
    def vector_size(self) -> int:
        """The size a vector method's tensors take from the workload: prompt tuning's virtual tokens, VeRA's rank
        (models.peft_vector_numels); 0 for the others."""
        return {"prompt-tuning": self.num_virtual_tokens, "prefix-tuning": self.num_virtual_tokens,
                "vera": self.vera_rank}.get(self.method, 0)

    @property
    def norms_train(self) -> bool:
        """The norms' weights train (full fine-tuning; LN tuning's trainable copies), so each norm keeps its
        normalized input for the weight's gradient."""
        return self.method in ("full", "ln-tuning")

    @property
    def training(self) -> bool:
        return self.mode == "train"

    @property
    def compute_dtype(self) -> DType:
        """dtype of activations: the autocast dtype under AMP, else the weights' dtype."""
        if self.method == "qlora" and self.amp is None:
            return "bf16" if self.dtype == "fp32" else self.dtype
        return self.amp or self.dtype

    @property
    def quant_matmul_dtype(self) -> DType:
        """dtype bitsandbytes' 4-bit matmuls run in: ``Linear4bit.forward`` casts its input to the layer's
        compute dtype and its output back (``x = x.to(self.compute_dtype)`` ... ``out.to(inp_dtype)``), and
        ``set_compute_type`` (bitsandbytes 0.41.0 - 0.49.2, nn/modules.py) replaces a configured compute dtype
        with an fp32 or bf16 input's own: bnb_compute_dtype counts for fp16 activations only."""
        if self.bnb_compute_dtype is None or self.compute_dtype != "fp16" or self.quantized not in FOUR_BIT:
            return self.compute_dtype
        return self.bnb_compute_dtype

    @property
    def checkpoint_every(self) -> int | None:
        """N of ``checkpointing="every:N"`` (None for the other modes or a malformed value)."""
        c = self.checkpointing
        if isinstance(c, str) and c.startswith(EVERY_PREFIX):
            n = c[len(EVERY_PREFIX):]
            if n.isascii() and n.isdigit() and len(n) <= L.MAX_INT_DIGITS:  # bounded: int() of it is cheap
                return int(n)
        return None

    @property
    def fsdp_mixed_precision(self) -> bool:
        """FSDP2 with ``MixedPrecisionPolicy(param_dtype=amp, reduce_dtype=fp32)`` over fp32 sharded
        parameters (torchtitan's default), rather than autocast: ``fsdp`` with ``dtype="fp32"`` and an ``amp``."""
        return self.fsdp and self.training and self.dtype == "fp32" and self.amp is not None

    @property
    def compiled_blocks(self) -> bool:
        """Each decoder block compiled on its own (--compile-scope blocks or blocks+loss)."""
        return self.compile and self.compile_scope in ("blocks", "blocks+loss")

    @property
    def compiled_loss(self) -> bool:
        """The plain cross-entropy compiled on its own, outside the model (--compile-scope blocks+loss)."""
        return self.compile and self.training and self.compile_scope == "blocks+loss"

    @property
    def autocast(self) -> bool:
        """Whether the forward runs under ``torch.autocast`` (fp32 weights, ``amp`` casts), which FSDP2's
        mixed-precision policy replaces (its parameters are already in ``amp``)."""
        return self.amp is not None and self.dtype == "fp32" and not self.fsdp_mixed_precision

    @property
    def run_dtype(self) -> DType:
        """dtype the parameters have while forward and backward run: FSDP2's ``param_dtype`` (the
        all-gathered copies) under its mixed-precision policy, else the stored dtype."""
        if self.fsdp_mixed_precision and self.amp is not None:
            return self.amp
        return self.dtype

    @property
    def dp(self) -> int:
        """Data-parallel degree: the GPUs left after tensor and pipeline parallelism (with context parallelism,
        the ranks FSDP shards over: data-parallel x context-parallel, torchtitan's ``dp_shard_cp``)."""
        return max(1, self.gpus // (self.tp * self.pp))

    @property
    def replicas(self) -> int:
        """Model replicas that each see their own samples: the data-parallel ranks over context parallelism."""
        return max(1, self.dp // self.cp)

    def _cp_problems(self) -> list[str]:
        """What context parallelism (torch's ``context_parallel``, torchtitan's CP) cannot run."""
        if self.cp <= 1:
            return []
        p = []
        if self.mode != "train":
            p.append(f"cp={self.cp}: context parallelism is modelled for training (torchtitan's context_parallel); "
                     "for inference use --tp or --pp")
        if self.seq % (2 * self.cp):
            # _HeadTailLoadBalancer (torch/distributed/tensor/experimental/_context_parallel/_load_balancer.py)
            # cuts each sequence into 2 x cp chunks, rank i taking chunks i and 2cp-1-i
            m = 2 * self.cp
            p.append(f"seq={self.seq:,} is not a multiple of 2*cp={m}: context parallelism's load balancer cuts "
                     f"the sequence into {m} equal chunks: use --seq {max(m, self.seq // m * m)}")
        if self.attention == "eager":
            p.append("cp with attention=eager: context parallelism replaces SDPA's flash, memory-efficient or cuDNN "
                     "kernel with ring attention: use --attention sdpa")
        if self.zero:
            p.append(f"cp with zero={self.zero}: DeepSpeed's sequence parallelism (Ulysses) is not modelled: use "
                     "--fsdp (torchtitan shards over the data- and context-parallel ranks)")
        return p

    @property
    def shard_stage(self) -> int:
        """ZeRO stage in effect: FSDP2 keeps parameters, gradients and optimizer states sharded at rest
        under every strategy (stage 3); shard-grad-op differs in what it keeps gathered (see
        estimate.parallel.gathered_sizes)."""
        if self.fsdp:
            return 3
        return self.zero

    @property
    def shard_degree(self) -> int:
        """Ranks the sharded state is split over: the data-parallel ranks, or one node's under hybrid sharding."""
        if self.fsdp and self.fsdp_strategy == "hybrid":
            return max(1, min(self.dp, GPUS_PER_NODE))
        return self.dp

    @property
    def transformers_release(self) -> tuple[int, int, int] | None:
        """``transformers_version`` as (major, minor, patch); None when not given or malformed."""
        return parse_release(self.transformers_version)

    @property
    def legacy_cache(self) -> bool:
        """Whether generate()'s decode steps keep the previous cache alive beside the new one: a
        transformers release before 4.42 (LEGACY_CACHE_BEFORE) running its default cache in inference.

        Up to 4.35 the cache is a tuple of (keys, values) per layer: the attention builds each layer's
        new tensors with ``torch.cat([past_key_value[0], key_states], dim=2)`` and the model returns a new
        tuple, while ``generate()`` (greedy_search/sample) still holds the previous one in
        ``model_kwargs["past_key_values"]`` until the forward returns. 4.36 - 4.41 wrap that tuple in a
        DynamicCache for the forward (``DynamicCache.from_legacy_cache``) and convert it back
        (``to_legacy_cache``), and generate() still holds the tuple: the same lifetime. transformers
        #30536 (in 4.42) keeps one DynamicCache through generate().
        """
        r = self.transformers_release
        return (r is not None and r[:2] < LEGACY_CACHE_BEFORE and self.mode == "inference"
                and self.cache == "dynamic" and not self.kv_block)

    @property
    def prefill_all_logits(self) -> bool:
        """Whether generate()'s prefill computes the logits of every prompt token: a transformers release
        before 4.45 (PREFILL_LAST_LOGITS_FROM; transformers #31292 added ``num_logits_to_keep``), inference
        with new tokens. Before 4.42 (``legacy_cache``) generate() also kept each forward's output
        (``outputs``, its logits) until the next forward returned (fixed by transformers #30536)."""
        r = self.transformers_release
        return r is not None and r[:2] < PREFILL_LAST_LOGITS_FROM and self.mode == "inference" and self.new_tokens > 0

    @property
    def legacy_logits_upcast(self) -> bool:
        """Whether a plain forward (no new tokens) of a causal LM whose spec has ``legacy_logits_fp32`` upcasts all
        its logits to fp32: a transformers release before 4.45 (PREFILL_LAST_LOGITS_FROM; LlamaForCausalLM ran
        ``logits = logits.float()`` after the lm_head, 4.32.0 - 4.44 wheels; #31292 upcasts only with labels),
        inference without new tokens (with them, ``prefill_all_logits`` covers the prefill's)."""
        r = self.transformers_release
        return r is not None and r[:2] < PREFILL_LAST_LOGITS_FROM and self.mode == "inference" and not self.new_tokens

    @property
    def legacy_score_clamp(self) -> bool:
        """Whether eager attention clamps its masked scores from below (a transformers release before 4.49,
        SCORE_CLAMP_BEFORE, in training): ``torch.max(scores + mask, finfo.min)``, whose backward keeps its
        input, one more (b, a, s, S) tensor per block in models whose spec has ``score_clamp`` (OPT)."""
        r = self.transformers_release
        return r is not None and r[:2] < SCORE_CLAMP_BEFORE and self.training and self.attention == "eager"

    def runs_before(self, before: tuple[int, int] | None) -> bool:
        """Whether ``transformers_version`` is given and earlier than the release ``before`` (X, Y); False for None
        (a family without the older behaviour)."""
        r = self.transformers_release
        return before is not None and r is not None and r[:2] < before

    @property
    def outputs_held(self) -> bool:
        """Whether the training loop holds transformers' ``outputs`` past the loss, for :attr:`holds_outputs`
        (over transformers' own loss; not chunked, fused, offloaded or compiled: ignored there), and the SDPA
        benchmarks' ``--loss logits-sum`` loop (``outputs = model(**inputs)``, until the next forward)."""
        return self.training and (self.loss == "logits-sum" or (
            self.holds_outputs != "none" and self.loss == "cross-entropy" and self.loss_chunks <= 1
            and not self.activation_offload and not self.compile))

    @property
    def holds_next(self) -> bool:
        """Whether what the loop holds of a step (its outputs, and the graph with an old bitsandbytes' kept inputs)
        is still alive when the next forward runs: ``holds_outputs="next-forward"`` and ``--loss logits-sum``."""
        return self.training and (self.loss == "logits-sum" or self.holds_outputs == "next-forward")

    def holds_presents(self, before: tuple[int, int] | None) -> bool:
        """Whether the loop holds the per-layer (key, value) tuples an older release returns from a training forward
        (ModelSpec.legacy_presents; ``before``: its first release that returns a Cache object instead): ``--loss
        logits-sum`` with a ``transformers_version`` before it. The SDPA benchmark loop calls ``model(**inputs)``
        without ``use_cache=False``, so the config's ``use_cache`` (True) returns them in ``outputs``, which holds
        them, as it holds the logits, until the next forward returns (vramlens.estimator.losses.presents_held).
        Gradient checkpointing turns ``use_cache`` off (GPT2Model.forward of the v4.42.4 wheel, lines 1196-1201)."""
        return self.runs_before(before) and self.outputs_held and self.checkpointing == "none"

    @property
    def effective_batch(self) -> int:
        return self.batch * self.grad_accum * self.replicas

    @property
    def quantized(self) -> Quant | None:
        """Weight quantization in effect (QLoRA implies nf4 with double quantization)."""
        if self.quant:
            return self.quant
        return "nf4-dq" if self.method == "qlora" else None

    def replace(self, **changes: Any) -> Workload:
        return replace(self, **changes).validated()

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["lora_targets"] = list(self.lora_targets)
        d["image_size"] = list(self.image_size) if self.image_size is not None else None
        return d

    # ---- validation ---------------------------------------------------------------------
    def problems(self) -> list[str]:
        """Every problem with this workload, each naming the value and the fix."""
        p: list[str] = []

        def choice(name: str, value: Any, allowed: tuple[str, ...], optional: bool = False) -> None:
            if optional and value is None:
                return
            if value not in allowed:
                p.append(f"{name}={L.show(value)} is not one of: {', '.join(allowed)}")

        choice("mode", self.mode, MODES)
        choice("method", self.method, METHODS)
        choice("dtype", self.dtype, DTYPES)
        choice("amp", self.amp, AMPS, optional=True)
        choice("quant", self.quant, QUANTS, optional=True)
        choice("optimizer", self.optimizer, OPTIMIZERS)
        if self.checkpointing not in CHECKPOINTING:
            n = self.checkpoint_every
            if n is None:
                p.append(f"checkpointing={L.show(self.checkpointing)} is not one of: {', '.join(CHECKPOINTING)}, "
                         "every:N (N a whole number >= 2)")
            elif n < 2:
                p.append(f"checkpointing={self.checkpointing!r} checkpoints every block: use --checkpointing full")
            elif n > L.MAX_LAYERS:
                p.append(f"checkpointing={self.checkpointing!r}: N is over the limit of {L.MAX_LAYERS:,} blocks")
        choice("optimizer_impl", self.optimizer_impl, OPTIMIZER_IMPLS)
        if self.optimizer_impl == "transformers" and self.optimizer != "adamw":
            p.append(f"optimizer_impl='transformers' is transformers' own AdamW; optimizer={self.optimizer!r} is not "
                     "AdamW: use --optimizer adamw, or --optimizer-impl foreach|fused|loop")
        choice("fsdp_strategy", self.fsdp_strategy, FSDP_STRATEGIES)
        choice("pp_schedule", self.pp_schedule, PP_SCHEDULES)
        if self.fsdp_version not in FSDP_VERSIONS or isinstance(self.fsdp_version, bool):
            p.append(f"fsdp_version={self.fsdp_version!r} must be 1 (FullyShardedDataParallel) or 2 (fully_shard)")
        choice("fsdp_units", self.fsdp_units, FSDP_UNITS)
        if self.fsdp and self.training and self.fsdp_units != "blocks":
            clash = next((f"{k}={v!r}" for k, v, bad in (
                ("fsdp_version", self.fsdp_version, self.fsdp_version != 2),
                ("fsdp_strategy", self.fsdp_strategy, self.fsdp_strategy == "shard-grad-op"),
                ("tp", self.tp, self.tp > 1), ("pp", self.pp, self.pp > 1), ("cp", self.cp, self.cp > 1)) if bad),
                None)
            if clash:
                p.append(f"fsdp_units={self.fsdp_units!r} with {clash}: separate embedding and output units are "
                         "modelled for FSDP2 full sharding without tensor, pipeline or context parallelism: use "
                         "--fsdp-units blocks")
        choice("attention", self.attention, ATTENTION)
        choice("offload", self.offload, OFFLOAD)
        choice("zero_buckets", self.zero_buckets, ZERO_BUCKETS)
        choice("kv_dtype", self.kv_dtype, KV_DTYPES, optional=True)
        choice("lora_dtype", self.lora_dtype, LORA_DTYPES)
        choice("quant_targets", self.quant_targets, QUANT_TARGETS)
        choice("holds_outputs", self.holds_outputs, HELD_FOR)
        choice("dequant_dtype", self.dequant_dtype, DEQUANT_DTYPES)
        choice("bnb_compute_dtype", self.bnb_compute_dtype, DTYPES, optional=True)
        choice("nf4_impl", self.nf4_impl, NF4_IMPLS)
        choice("quant_impl", self.quant_impl, QUANT_IMPLS)
        choice("cache", self.cache, CACHES)
        choice("loss", self.loss, LOSSES)
        choice("compile_scope", self.compile_scope, COMPILE_SCOPES)
        choice("fp8_recipe", self.fp8_recipe, FP8_RECIPES)
        choice("task", self.task, TASKS, optional=True)
        if self.image_size is not None:
            sides = self.image_size
            if (not isinstance(sides, tuple) or len(sides) != 2
                    or any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in sides)):
                shown = (f"{sides[0]}x{sides[1]}" if isinstance(sides, tuple) and len(sides) == 2
                         and all(isinstance(v, int) and abs(v) < 10**9 for v in sides) else L.show(sides))
                p.append(f"image_size={shown} must be two whole numbers of pixels >= 1 (height, width)")
            elif max(sides) > L.MAX_IMAGE_SIDE:
                p.append(f"image_size={L.show(sides[0])}x{L.show(sides[1])} is over the limit of {L.MAX_IMAGE_SIDE:,} pixels a side")
        if self.audio_seconds is not None:
            a = self.audio_seconds
            if (isinstance(a, bool) or not isinstance(a, int | float)
                    or (isinstance(a, float) and not math.isfinite(a)) or a <= 0):
                p.append(f"audio_seconds={L.show(a)} must be a number of seconds > 0, such as 30 or 12.5")
            elif a > L.MAX_AUDIO_SECONDS:
                p.append(f"audio_seconds={L.show(a)} is over the limit of {L.MAX_AUDIO_SECONDS:,} seconds: "
                         "give one sample's audio, and the samples as --batch")
        for name, limit in _COUNT_LIMITS:
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                p.append(f"{name}={L.show(v)} must be a whole number >= 1")
            elif v > limit:
                p.append(f"{name}={L.show(v)} is over the limit of {limit:,}")
        if isinstance(self.new_tokens, bool) or not isinstance(self.new_tokens, int) or self.new_tokens < 0:
            p.append(f"new_tokens={L.show(self.new_tokens)} must be a whole number >= 0")
        elif self.new_tokens > L.MAX_SEQ:
            p.append(f"new_tokens={L.show(self.new_tokens)} is over the limit of {L.MAX_SEQ:,}")
        n = self.num_virtual_tokens
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            p.append(f"num_virtual_tokens={L.show(n)} must be a whole number >= 0")
        elif n > L.MAX_SEQ:
            p.append(f"num_virtual_tokens={L.show(n)} is over the limit of {L.MAX_SEQ:,}")
        elif self.method in ("prompt-tuning", "prefix-tuning") and n == 0:
            cls = "PromptTuningConfig" if self.method == "prompt-tuning" else "PrefixTuningConfig"
            p.append(f"method={self.method} needs --num-virtual-tokens N ({cls} has no default; PEFT's "
                     "MetaMathQA runs 200)")
        f = self.decompose_factor
        if isinstance(f, bool) or not isinstance(f, int) or (f < 1 and f != -1):
            p.append(f"decompose_factor={L.show(f)} must be -1 (peft's default: near the square root) or a whole "
                     "number >= 1")
        elif f > L.MAX_LORA_RANK:
            p.append(f"decompose_factor={L.show(f)} is over the limit of {L.MAX_LORA_RANK:,}")
        if isinstance(self.oft_block_size, bool) or not isinstance(self.oft_block_size, int) or self.oft_block_size < 1:
            p.append(f"oft_block_size={L.show(self.oft_block_size)} must be a whole number >= 1")
        elif self.oft_block_size > L.MAX_LORA_RANK:
            p.append(f"oft_block_size={L.show(self.oft_block_size)} is over the limit of {L.MAX_LORA_RANK:,}")
        if isinstance(self.boft_block_size, bool) or not isinstance(self.boft_block_size, int) or self.boft_block_size < 1:
            p.append(f"boft_block_size={L.show(self.boft_block_size)} must be a whole number >= 1")
        elif self.boft_block_size > L.MAX_LORA_RANK:
            p.append(f"boft_block_size={L.show(self.boft_block_size)} is over the limit of {L.MAX_LORA_RANK:,}")
        if isinstance(self.kv_block, bool) or not isinstance(self.kv_block, int) or self.kv_block < 0:
            p.append(f"kv_block={L.show(self.kv_block)} must be 0 (no paging) or a block size in tokens")
        elif self.kv_block > L.MAX_KV_BLOCK:
            p.append(f"kv_block={L.show(self.kv_block)} is over the limit of {L.MAX_KV_BLOCK:,} tokens "
                     "(vLLM uses 16)")
        if isinstance(self.max_cache_len, bool) or not isinstance(self.max_cache_len, int) or self.max_cache_len < 0:
            p.append(f"max_cache_len={L.show(self.max_cache_len)} must be 0 (seq + new_tokens) or a number of tokens")
        elif self.max_cache_len > L.MAX_SEQ:
            p.append(f"max_cache_len={L.show(self.max_cache_len)} is over the limit of {L.MAX_SEQ:,} tokens")
        g = self.quant_group_size
        if isinstance(g, bool) or not isinstance(g, int) or g < 0:
            p.append(f"quant_group_size={L.show(g)} must be 0 (the format's default, 128) or a whole number of "
                     "weights >= 1")
        elif g > L.MAX_QUANT_GROUP:
            p.append(f"quant_group_size={L.show(g)} is over the limit of {L.MAX_QUANT_GROUP:,} weights")
        elif g and self.quantized not in GROUPED_QUANTS:
            listed = ", ".join(q for q in GROUPED_QUANTS if q not in UINTX_QUANTS[1:]).replace("uint1", "uint1..uint7")
            p.append(f"quant_group_size={g} applies to the group-wise formats ({listed}); "
                     f"quant={self.quantized!r} has none: drop --quant-group-size or use --quant int4")
        elif g and self.quantized in QUANT_GROUP_CHOICES and g not in QUANT_GROUP_CHOICES[self.quantized]:
            takes = ", ".join(map(str, QUANT_GROUP_CHOICES[self.quantized]))
            p.append(f"quant_group_size={g}: quant={self.quantized!r} takes a group of {takes} weights (or 0, "
                     f"{'per output channel' if self.quantized == 'w4a8-qqq' else 'its default, 128'}): use "
                     f"--quant-group-size {takes.split(', ')[-1]}")
        if self.quantize_on_device is True:
            p.extend(self._on_device_problems())
        if self.quant_impl == "torchao-wo" and self.quantized is not None:
            p.extend(self._weight_only_problems())
        if self.quant_impl in GPTQ_IMPLS and self.quantized is not None:
            p.extend(self._gptq_impl_problems())
        if self.transformers_version is not None and self.transformers_release is None:
            p.append(f"transformers_version={L.show(self.transformers_version)} must be a version such as 4.35 or 5.2")
        if self.alloc_conf is not None:
            p.extend(alloc_conf_problems(self.alloc_conf))
        for name in ("keep_grads", "fsdp", "optimizer_in_backward", "activation_offload", "loss_parallel", "dora",
                     "fp8", "compile", "gqa_expand", "padded", "fused_qkv", "quant_head", "quantize_on_device",
                     "loss_upcast", "output_upcast", "bnb_inputs", "lora_fa"):
            if not isinstance(getattr(self, name), bool):
                p.append(f"{name}={L.show(getattr(self, name))} must be true or false")
        if not isinstance(self.lora_targets, tuple) or not all(isinstance(t, str) for t in self.lora_targets):
            p.append(f"lora_targets={L.show(self.lora_targets)} must be module names such as q_proj,v_proj")
        elif len(self.lora_targets) > 256 or any(len(t) > 256 for t in self.lora_targets):
            p.append("lora_targets: at most 256 names of at most 256 characters each")
        if self.zero not in (0, 1, 2, 3):
            p.append(f"zero={L.show(self.zero)} must be 0, 1, 2 or 3")
        if self.fsdp and self.zero:
            p.append(f"fsdp and zero={self.zero} both given: choose FSDP or one ZeRO stage")
        if self.fused_qkv is True and self.dora is True:
            p.append("fused_qkv is LitGPT's attention, whose LoRAQKVLinear has no DoRA: drop --dora or --fused-qkv")
        if (isinstance(self.lora_dropout, bool) or not isinstance(self.lora_dropout, (int, float))
                or not (0.0 <= self.lora_dropout < 1.0)):
            p.append(f"lora_dropout={L.show(self.lora_dropout)} must be in [0, 1)")
        if self.lora_targets == ():
            p.append("lora_targets is empty: name modules such as q_proj,v_proj or 'all-linear'")
        if p:
            return p  # the rest compares values that are known to be valid
        if isinstance(self.images, bool) or not isinstance(self.images, int) or self.images < 0:
            p.append(f"images={L.show(self.images)} must be a whole number >= 0 (images per sample)")
        elif self.images > L.MAX_IMAGES:
            p.append(f"images={self.images:,} is over the limit of {L.MAX_IMAGES:,} images per sample")
        if self.method in ("prompt-tuning", "prefix-tuning") and self.seq + self.num_virtual_tokens > L.MAX_SEQ:
            p.append(f"seq + num_virtual_tokens = {self.seq + self.num_virtual_tokens:,} is over the limit of "
                     f"{L.MAX_SEQ:,} tokens")
        if self.seq + self.new_tokens > L.MAX_SEQ:
            p.append(f"seq + new_tokens = {self.seq + self.new_tokens:,} is over the limit of {L.MAX_SEQ:,} tokens")
        if self.gpus % (self.tp * self.pp * self.cp):
            n = self.tp * self.pp * self.cp
            p.append(
                f"gpus={self.gpus} is not a multiple of tp*pp{'*cp' if self.cp > 1 else ''}={n}: "
                f"use --gpus {n * max(1, self.gpus // n)}"
            )
        p += self._cp_problems()
        if self.training and self.pp > 1 and self.pp_schedule == "interleaved-1f1b":
            # torch.distributed.pipelining ScheduleInterleaved1F1B.__init__ (schedules.py, torch 2.13): the
            # micro-batches run in max(1, m // pp) rounds of equal size
            rounds = max(1, self.grad_accum // self.pp)
            if self.grad_accum % rounds:
                p.append(f"pp_schedule='interleaved-1f1b' runs grad_accum={self.grad_accum} micro-batches in "
                         f"{rounds} rounds of pp={self.pp}, which must divide them: use --grad-accum "
                         f"{rounds * self.pp}")
        if self.fsdp and self.fsdp_version == 1 and (self.tp > 1 or self.cp > 1 or self.pp > 1):
            # FSDP1 over a 2-D mesh (FullyShardedDataParallel(device_mesh=...) with DTensor TP) or on pipeline stages
            # is not modelled
            name, n = next((k, v) for k, v in (("tp", self.tp), ("cp", self.cp), ("pp", self.pp)) if v > 1)
            p.append(f"fsdp_version=1 with {name}={n}: FSDP1 over tensor, context or pipeline parallelism is not "
                     "modelled: use --fsdp-version 2 (torchtitan's FSDP2)")
        if self.method == "qlora" and self.quant not in (None, "nf4", "nf4-dq", "fp4"):
            p.append(f"method=qlora quantizes to 4-bit NF4; quant={self.quant!r} contradicts it: drop --quant")
        if self.mode == "train" and self.quant in AO_INFERENCE_QUANTS:
            p.append(f"quant={self.quant!r} is an inference format (torchao's tensor subclass has no backward): use "
                     "--mode inference, or --method qlora for 4-bit training")
        elif self.quant in FP16_KERNEL_QUANTS and self.dtype != "fp16":
            p.append(f"quant={self.quant!r} runs a kernel that takes fp16 activations only (torchao falls back to a "
                     f"dequantized weight, not modelled, with dtype={self.dtype}): use --dtype fp16")
        if (self.mode == "train" and self.method == "full" and self.quant in QUANTS and self.quant != "fp8"
                and self.quant not in AO_INFERENCE_QUANTS):
            p.append(
                f"quant={self.quant!r} weights cannot be trained in full: use --method lora (or qlora)"
            )
        if self.mode == "inference" and self.offload != "none":
            p.append(f"offload={self.offload} applies to training (ZeRO-Offload); for inference across GPU, "
                     "CPU and disk use `vramlens place`")
        if self.mode == "inference" and (self.zero or self.fsdp):
            p.append("zero/fsdp shard training state; for inference use --tp or --pp to split the model")
        if self.mode == "train" and self.new_tokens:
            p.append(f"new_tokens={self.new_tokens} applies to inference only: drop it or use --mode inference")
        if self.new_tokens and self.task is not None and self.task not in GENERATING_TASKS:
            p.append(f"new_tokens={self.new_tokens} needs a generating task (causal-lm or seq2seq-lm); "
                     f"task={self.task} does not generate: drop --new-tokens")
        p += self._vector_method_problems()
        p += self._lora_fa_problems()
        p += self._adalora_problems()
        p += self._delta_method_problems()
        if self.method != "full" and self.lora_dtype not in ("fp32", self.compute_dtype):
            p.append(f"lora_dtype={self.lora_dtype} with compute dtype {self.compute_dtype}: adapters are kept in fp32 "
                     f"(peft) or in the model's dtype (torchtune): use --lora-dtype fp32 or {self.compute_dtype}")
        if self.mode == "inference":
            p.extend(self._cache_problems())
        if self.amp == "fp16" and self.dtype == "bf16":
            p.append("dtype=bf16 with amp=fp16 mixes two half formats: use --dtype fp32 --amp fp16")
        if self.amp == "bf16" and self.dtype == "fp16":
            p.append("dtype=fp16 with amp=bf16 mixes two half formats: use --dtype fp32 --amp bf16")
        if self.offload != "none" and self.mode == "train" and self.shard_stage == 0 and not self.fsdp:
            # ZeRO-Offload needs ZeRO >= 1 (DeepSpeed) or FSDP; say so rather than guess
            p.append(f"offload={self.offload} needs --zero 1..3 or --fsdp (ZeRO-Offload / FSDP CPU offload)")
        if self.loss == "fused-linear" and self.loss_chunks > 1:
            p.append(f"loss=fused-linear chunks the tokens itself (Liger's chunk size); loss_chunks={self.loss_chunks} "
                     "applies to the cross-entropy loss: drop --loss-chunks")
        if self.loss == "logits-sum" and self.loss_chunks > 1:
            p.append(f"loss=logits-sum sums the whole logits (no cross-entropy to chunk); loss_chunks="
                     f"{self.loss_chunks} applies to the cross-entropy loss: drop --loss-chunks")
        if self.loss_parallel and self.mode == "train" and self.tp == 1:
            p.append("loss_parallel shards the logits over the tensor-parallel ranks, and tp=1 has none: "
                     "set --tp (e.g. --tp 8) or drop --loss-parallel")
        if self.loss_parallel and (self.loss_chunks > 1 or self.loss != "cross-entropy"):
            p.append("loss_parallel (torchtitan) runs the plain cross-entropy on vocabulary shards: drop "
                     "--loss-chunks / --loss fused-linear or --loss-parallel")
        if self.compile and self.compile_scope == "blocks+loss" and self.mode == "train" and (
                self.loss != "cross-entropy" or self.loss_parallel):
            p.append(f"compile_scope=blocks+loss compiles torchtitan's plain cross-entropy; with "
                     f"{'loss_parallel' if self.loss_parallel else f'loss={self.loss!r}'} the compiled loss is not "
                     "modelled: use --compile-scope blocks")
        if not self.loss_upcast and self.mode == "train" and (self.loss_chunks <= 1 or self.loss != "cross-entropy"):
            p.append("loss_upcast=false describes a chunked cross-entropy in the logits' dtype (LitGPT's "
                     "chunked_cross_entropy); transformers' own loss and the other losses upcast or fuse: add "
                     "--loss-chunks N or drop --no-loss-upcast")
        if self.output_upcast is True and self.mode == "train" and (
                self.loss_chunks <= 1 or self.loss != "cross-entropy" or self.loss_upcast):
            p.append("output_upcast=true describes LitGPT's chunked logits cast to fp32 by Lightning "
                     "Fabric before its chunked_cross_entropy, which adds no upcast of its own: use it with "
                     "--loss-chunks N and --no-loss-upcast, or drop --output-upcast")
        if self.loss_chunks > self.seq:
            p.append(f"loss_chunks={self.loss_chunks} is more than the seq={self.seq} tokens it splits: "
                     f"use --loss-chunks {min(8, self.seq)}")
        if (self.bnb_inputs is True and self.checkpointing != "none" and self.mode == "train"
                and self.quantized in FOUR_BIT):
            p.append(f"bnb_inputs=true with checkpointing={self.checkpointing!r} is not modelled: "
                     "the inputs an old bitsandbytes keeps on its autograd nodes bypass the checkpoint's hooks, "
                     "so they are kept in checkpointed blocks too; use --checkpointing none or drop --bnb-inputs")
        if self.quant_head and self.quantized is not None:
            p.extend(self._quant_head_problems())
        if self.bnb_compute_dtype is not None and self.training and self.quantized in FOUR_BIT:
            p.append(f"bnb_compute_dtype={L.show(self.bnb_compute_dtype)} is modelled in inference only (in training "
                     "the cast inputs bitsandbytes keeps and the fp32 gradients are not): drop --bnb-compute-dtype")
        if self.nf4_impl == "torchao" and self.dequant_dtype == "fp16" and self.quantized in FOUR_BIT:
            p.append("nf4_impl='torchao' with dequant_dtype='fp16': torchao's NF4Tensor dequantizes to the dtype "
                     "it was quantized from, the compute dtype in torchtune; use --dequant-dtype compute")
        if self.activation_offload and self.checkpointing == "selective-op" and self.mode == "train":
            # the per-op policy keeps its saved outputs in its own cache, not through the saved-tensor
            # hooks an offloader uses (torch/utils/checkpoint.py _CachingTorchDispatchMode)
            p.append("activation_offload with checkpointing='selective-op' is not modelled: the per-op policy's saved "
                     "outputs stay on the GPU, out of the offloader's reach; drop one, or use --checkpointing every:N")
        if self.optimizer_in_backward and self.mode == "train":
            p.extend(self._in_backward_problems())
        if self.offload == "all" and self.mode == "train" and self.shard_stage != 3:
            p.append("offload=all (parameters too) needs --zero 3 or --fsdp")
        if self.optimizer == "adamw-cpu-offload-torchao" and self.mode == "train":
            p.extend(self._cpu_offload_problems())
        if self.fp8:
            p.extend(self._fp8_problems())
        elif self.fp8_recipe != "tensorwise" and self.fp8_recipe in FP8_RECIPES:
            p.append(f"fp8_recipe={self.fp8_recipe} needs fp8 training: add --fp8 (or set fp8 true), or drop "
                     "--fp8-recipe")
        if self.padded is True:
            p.extend(self._padded_problems())
        return p

    def _padded_problems(self) -> list[str]:
        """What a padded batch (``padded``) is modelled with: transformers' own attention in eager PyTorch, in a
        training step or a prefill that starts no cache."""
        p: list[str] = []
        if not self.training and (self.new_tokens or self.cache != "dynamic"):
            p.append(f"padded with new_tokens={self.new_tokens} cache={self.cache!r}: generation's per-step masks "
                     "over a padded prompt are not modelled; padded covers a training step or a prefill: drop "
                     "--padded, or --new-tokens and --cache")
        if self.attention == "flash":
            # modeling_flash_attention_utils.py _upad_input: index_first_axis copies of q, k and v, and pad_input
            # scatters the output back into a (b*s, heads, d) tensor
            p.append("padded with attention=flash: flash-attention-2 unpads q, k and v and pads its output back "
                     "(copies not modelled): use --attention sdpa or eager")
        if self.compile:
            p.append("padded with compile: the compiled graphs' masked attention is not modelled: drop --compile")
        if self.cp > 1:
            p.append(f"padded with cp={self.cp}: context parallelism's ring attention takes no padding mask: "
                     "drop --padded or --cp")
        if self.fused_qkv is True:
            p.append("padded with fused_qkv: LitGPT's fine-tuning passes its model no attention mask: drop --padded")
        return p

    def _fp8_problems(self) -> list[str]:
        """What torchao's float8 training (Float8Linear, torchao 0.18) is modelled with: training in bf16
        compute without autocast (torchtitan: bf16 parameters, or FSDP2's bf16 param_dtype), plain nn.Linear
        weights (float8_linear_utils.py ``swap_linear_layers`` swaps ``torch.nn.Linear``; torchtitan's
        ``[float8]`` and torchtune's ``enable_fp8_training`` are full-training recipes). Under --tp, torchao's
        float8 tensor-parallel styles (vramlens.estimator.fp8 ``tp_saved_delta``)."""
        p: list[str] = []
        if self.mode != "train":
            p.append("fp8 is torchao's float8 training (Float8Linear); for FP8 inference weights use --quant fp8")
            return p
        if self.compute_dtype != "bf16":
            p.append(f"fp8 training casts bf16 matmul inputs to float8; compute dtype {self.compute_dtype} is not "
                     "bf16: use --dtype bf16 (or --fsdp --dtype fp32 --amp bf16, FSDP2's bf16 param_dtype)")
        elif self.autocast:
            # Float8Linear bypasses F.linear's autocast: it casts the fp32 weight to float8 itself
            # (torchao/float8/float8_linear.py Float8Linear.forward), which vramlens does not model
            p.append("fp8 under torch.autocast (fp32 weights) is not modelled: use --dtype bf16, or --fsdp "
                     "--dtype fp32 --amp bf16 (FSDP2's bf16 param_dtype, as torchtitan runs float8)")
        if self.method != "full" or self.quant is not None:
            p.append("fp8 (torchao Float8Linear, torchtitan's [float8], torchtune's enable_fp8_training) is modelled "
                     "for full training of plain linears; LoRA/QLoRA and quantized weights are not: use --method "
                     "full without --quant, or drop --fp8")
        if self.fp8_recipe != "tensorwise" and self.tp > 1:
            # torchtitan applies torchao's float8 TP styles for the tensorwise recipe only (models/llama3 parallelize.py:
            # enable_float8_tensorwise_tp is off when float8_is_rowwise; plain bf16 TP then), which vramlens does not model
            p.append(f"fp8_recipe={self.fp8_recipe} with tp={self.tp} is not modelled (torchao's float8 "
                     "tensor-parallel styles are tensorwise): use --fp8-recipe tensorwise, or --tp 1")
        return p

    def _on_device_problems(self) -> list[str]:
        """What quantize_on_device (torchao's gpt-fast flow, torchtune's 2024 QLoRA set-up: vramlens.estimator.ondevice)
        is modelled for."""
        p = []
        if self.mode == "train":
            if self.method != "qlora" or self.quantized not in ("nf4", "nf4-dq") or self.nf4_impl != "torchao":
                p.append("quantize_on_device in training models torchtune's 2024 QLoRA set-up (torchao's NF4): use "
                         "--method qlora --nf4-impl torchao, or drop --quantize-on-device")
            if self.gpus != 1 or self.fsdp:
                p.append(f"quantize_on_device in training with gpus={self.gpus} is not modelled (torchtune's "
                         "single-device recipe): drop --gpus and --fsdp, or --quantize-on-device")
            return p
        if self.quantized not in ON_DEVICE_QUANTS:
            p.append("quantize_on_device replays torchao's quantize_ for int8, int4, fp8, fp6, uint1..uint7, "
                     "int4-sparse-marlin, w4a8-qqq; "
                     f"quant={self.quantized!r}: use one of them, or drop --quantize-on-device")
        if self.mode != "inference" or self.method != "full":
            p.append("quantize_on_device models torchao's gpt-fast inference (generate.py): use --mode inference "
                     "--method full, or drop --quantize-on-device")
        if self.gpus != 1:
            p.append(f"quantize_on_device with gpus={self.gpus} is not modelled (one GPU: generate.py): drop "
                     "--gpus or --quantize-on-device")
        if self.cache != "static":
            p.append(f"quantize_on_device: gpt-fast preallocates its KV cache (setup_caches) before the cache is "
                     f"emptied; cache={self.cache!r}: use --cache static")
        return p

    def _weight_only_problems(self) -> list[str]:
        """What quant_impl="torchao-wo" (torchao's weight-only linears in eager mode) is modelled for."""
        p = []
        if self.quantized not in (*WO_DEQUANT_QUANTS, "int4"):
            p.append(f"quant_impl='torchao-wo' is torchao's int8_weight_only / float8_weight_only linear; "
                     f"quant={self.quantized!r} is not one of its formats: use --quant int8 or fp8, or drop "
                     "--quant-impl")
        if self.training:
            # autograd would keep each dequantized weight for the input's gradient (torch.mm saves it)
            p.append("quant_impl='torchao-wo' is modelled for inference (in training each matmul would keep its "
                     "dequantized weight for backward): use --mode inference, or drop --quant-impl")
        return p

    def _gptq_impl_problems(self) -> list[str]:
        """What quant_impl="exllama" / "cuda-old" (AutoGPTQ 0.4.2's QuantLinear kernels) is modelled for."""
        p = []
        if self.quantized != "gptq-4bit":
            p.append(f"quant_impl={self.quant_impl!r} is an AutoGPTQ kernel for GPTQ weights; quant={self.quantized!r} "
                     "is not GPTQ: use --quant gptq-4bit, or drop --quant-impl")
        if self.training:
            # AutoGPTQ 0.4.2's exllama QuantLinear raises NotImplementedError for trainable=True; cuda-old's
            # trainable path (no CUDA kernel, autograd keeping the dequantized weight) is not modelled
            p.append(f"quant_impl={self.quant_impl!r} is modelled for inference: use --mode inference, or drop "
                     "--quant-impl")
        return p

    def _quant_head_problems(self) -> list[str]:
        """What a quantized output layer is not modelled with (the stacks that quantize it, LitGPT, torchao
        and gpt-fast, run it on one GPU, under no autocast, through its own forward)."""
        p: list[str] = []
        if self.tp > 1 or self.pp > 1:
            p.append(f"quant_head with tp={self.tp} pp={self.pp} (a quantized output layer split over GPUs) is not "
                     "modelled: drop --quant-head, or --tp/--pp")
        if self.mode == "train" and self.loss == "fused-linear":
            p.append("quant_head with loss=fused-linear: Liger's fused loss reads the output layer's weight as a "
                     "plain tensor, which a quantized layer does not have: drop one of them")
        if self.autocast:
            p.append(f"quant_head under torch.autocast (dtype={self.dtype} amp={self.amp}) is not modelled: use "
                     f"--dtype {self.amp} without --amp")
        return p

    def _cpu_offload_problems(self) -> list[str]:
        """torchao's CPUOffloadOptimizer is "for single GPU training" (torchao/optim/cpu_offload.py):
        it keeps whole parameters' host copies, so it has no ZeRO/FSDP sharding, and it registers its own
        post-accumulate-grad hooks, which optimizer_in_backward would replace."""
        p: list[str] = []
        if self.zero or self.fsdp or self.offload != "none":
            p.append("optimizer=adamw-cpu-offload-torchao offloads one GPU's whole optimizer (torchao's "
                     "CPUOffloadOptimizer, single-GPU); with zero, fsdp or offload use their own CPU offload: "
                     "--optimizer adamw --offload optimizer")
        if self.optimizer_in_backward:
            p.append("optimizer=adamw-cpu-offload-torchao already steps each parameter from its own gradient hook; "
                     "drop --optimizer-in-backward")
        return p

    def _cache_problems(self) -> list[str]:
        """What the transformers cache kinds cannot be combined with (inference only)."""
        p: list[str] = []
        if self.cache != "dynamic" and self.kv_block:
            p.append(f"kv_block={self.kv_block} is a serving engine's paged cache, cache={self.cache} transformers': "
                     "drop --kv-block or --cache")
        if self.cache == "quantized" and self.kv_dtype is not None:
            p.append(f"cache=quantized stores keys and values in 4 bits (QuantizedCache's nbits) and kv_dtype="
                     f"{self.kv_dtype} in {self.kv_dtype}: drop one of --cache quantized and --kv-dtype")
        if self.cache == "static" and self.max_cache_len and self.max_cache_len < self.seq + self.new_tokens:
            p.append(f"max_cache_len={self.max_cache_len} is less than seq + new_tokens = {self.seq + self.new_tokens}: "
                     f"StaticCache holds at most max_cache_len tokens; use --max-cache-len {self.seq + self.new_tokens} "
                     "or more (or 0)")
        r = self.transformers_release
        if r is not None and self.kv_block:
            p.append(f"kv_block={self.kv_block} is a serving engine's paged cache, transformers_version="
                     f"{self.transformers_version} transformers' generate(): drop --kv-block or --transformers-version")
        elif r is not None and r[:2] < LEGACY_CACHE_BEFORE and self.cache != "dynamic":
            p.append(f"cache={self.cache} with transformers_version={self.transformers_version} is not modelled: before "
                     "4.42 vramlens models generate()'s default tuple cache only; drop --cache or give "
                     "--transformers-version 4.42 or later")
        return p

    def _in_backward_problems(self) -> list[str]:
        """What --optimizer-in-backward cannot be combined with (torchtune's recipes refuse the first
        two; the others are not modelled by vramlens)."""
        p: list[str] = []
        if self.grad_accum > 1:
            p.append(f"optimizer_in_backward steps each parameter as its gradient arrives, so gradients cannot "
                     f"accumulate over grad_accum={self.grad_accum} micro-batches (torchtune refuses it too): "
                     "drop --grad-accum or --optimizer-in-backward")
        if self.optimizer == "none":
            p.append("optimizer_in_backward needs an optimizer to step, and optimizer='none' runs none: "
                     "choose an --optimizer or drop --optimizer-in-backward")
        if self.keep_grads:
            p.append("optimizer_in_backward frees each gradient right after its step, which keep_grads contradicts: "
                     "drop one of them")
        if self.amp is not None and self.amp == self.dtype:
            p.append(f"optimizer_in_backward with an fp32 master copy (dtype={self.dtype} amp={self.amp}) is not "
                     "modelled: use --dtype fp32 --amp bf16 or pure --dtype bf16")
        if self.zero or self.fsdp or self.offload != "none" or self.pp > 1:
            p.append("optimizer_in_backward with zero, fsdp, offload or pp is not modelled: drop "
                     "--optimizer-in-backward, or estimate one GPU (data or tensor parallel)")
        return p

    def _adalora_problems(self) -> list[str]:
        """AdaLoRA is modelled as peft's MetaMathQA runs it: fp32 adapters over a half model on one GPU (or under data
        parallelism), torch's optimizers; the rest is refused rather than guessed."""
        if self.method != "adalora":
            return []
        m = "method=adalora"
        p = []
        if self.mode != "train":
            p.append(f"{m} is modelled for training: estimate inference with --method full (the adapters are merged)")
        if self.quant is not None:
            p.append(f"{m} over quant={self.quant} weights is not modelled: drop --quant")
        if self.optimizer not in ("adamw", "adam", "sgd", "sgd-momentum", "none"):
            p.append(f"{m} with optimizer={self.optimizer} is not modelled (the adapters' lora_E is not among its "
                     "per-tensor layouts): use --optimizer adamw, adam, sgd or sgd-momentum")
        if self.lora_dtype != "fp32":
            p.append(f"{m} keeps its adapters in fp32 (peft's autocast_adapter_dtype); lora_dtype={self.lora_dtype} "
                     "is not modelled: drop --lora-dtype")
        off = self._beyond_one_lora_gpu()
        if off:
            p.append(f"{m} is modelled on one GPU or under data parallelism without {', '.join(off)}: drop "
                     + ("it" if len(off) == 1 else "them"))
        return p

    def _beyond_one_lora_gpu(self) -> list[str]:
        """The settings peft's MetaMathQA-style LoRA runs (one GPU or data parallel, no autocast) do not have, as
        AdaLoRA and LoRA-FA name them when they refuse them."""
        off = [n for n in ("dora", "fused_qkv", "optimizer_in_backward", "compile", "activation_offload")
               if getattr(self, n)]
        off += [f"amp={self.amp}"] * (self.amp is not None)
        off += [f"{n}={getattr(self, n)}" for n in ("tp", "pp", "cp") if getattr(self, n) > 1]
        return off + [f"zero={self.zero}"] * bool(self.zero) + ["fsdp"] * bool(self.fsdp)

    def _lora_fa_problems(self) -> list[str]:
        """LoRA-FA is modelled as peft's MetaMathQA runs it: create_lorafa_optimizer over peft's LoRA (or QLoRA) on one
        GPU (or under data parallelism), without autocast; the rest is refused rather than guessed."""
        if not self.lora_fa:
            return []
        if self.method not in ("lora", "qlora"):
            return [f"lora_fa is peft's LoRA-FA optimizer over LoRA adapters; method={self.method} has none: use "
                    "--method lora or qlora"]
        if self.mode != "train":
            return ["lora_fa is an optimizer (peft's create_lorafa_optimizer): it applies to --mode train"]
        p = []
        if self.optimizer != "adamw":
            p.append(f"lora_fa steps with peft's LoraFAOptimizer (an AdamW of its own); optimizer={self.optimizer} "
                     "contradicts it: drop --optimizer")
        off = self._beyond_one_lora_gpu()
        if off:
            p.append(f"lora_fa is modelled for peft's LoRA on one GPU or under data parallelism without "
                     f"{', '.join(off)}: drop " + ("it" if len(off) == 1 else "them"))
        return p

    def _vector_method_problems(self) -> list[str]:
        """IA3, LN tuning and prompt tuning are modelled for single-GPU (or data-parallel) training in the model's dtype, as
        peft's method comparison runs them; the rest is refused rather than guessed."""
        if self.method not in VECTOR_METHODS:
            return []
        m = f"method={self.method}"
        p = []
        if self.mode != "train":
            p.append(f"{m} is modelled for training: estimate inference with --method full ("
                     + ("and --seq lengthened by the virtual tokens)" if self.method == "prompt-tuning"
                        else "the prefix is a KV cache of the virtual tokens)" if self.method == "prefix-tuning"
                        else "the vectors are merged or a few KiB)"))
        if self.quant is not None and not (self.method == "vera" and self.quant in FOUR_BIT):
            p.append(_quantized_base_problem(m, self.method, self.quant))
        elif self.quant is not None:
            p += self._bnb_config_problems(m)
        if self.amp is not None and (self.method not in ("ia3", "ln-tuning", "prompt-tuning") or self.dtype != "fp32"):
            # VeRA's frozen fp32 vera_A / vera_B buffers are cast at every call (not leaves that require grad), and
            # prefix tuning's cache is not traced under autocast
            p.append(f"{m} under autocast (amp={self.amp}) is not modelled"
                     + (": drop --amp" if self.method not in ("ia3", "ln-tuning", "prompt-tuning") else
                        f" over dtype={self.dtype} weights: use --dtype fp32 (autocast's master weights) or drop --amp"))
        elif self.amp is not None and self.training and self.checkpointing != "none":
            # traced 5% over the estimate and more, as plain LoRA under autocast and checkpointing is
            p.append(f"{m} under autocast is modelled without checkpointing: drop --checkpointing or --amp")
        if self.fused_qkv:
            p.append(f"{m} adapts transformers' separate projections; fused_qkv is LitGPT's: drop --fused-qkv")
        off = [f"{n}={getattr(self, n)}" for n in ("tp", "pp", "cp") if getattr(self, n) > 1]
        off += [f"zero={self.zero}"] * bool(self.zero) + ["fsdp"] * bool(self.fsdp)
        off += ["compile"] * bool(self.compile) + ["activation_offload"] * bool(self.activation_offload)
        if self.method == "ia3" and self.lora_dtype not in ("fp32", self.dtype):
            # get_peft_model(autocast_adapter_dtype=True) upcasts the vectors to fp32; False leaves them in the
            # weights' dtype (peft 0.21.2 tuners_utils.cast_adapter_dtype)
            p.append(f"{m} with lora_dtype={self.lora_dtype} is not modelled: peft makes the vectors fp32 "
                     f"(autocast_adapter_dtype=True) or the weights' dtype (False): use --lora-dtype fp32 or {self.dtype}")
        if self.method == "vera" and self.lora_dtype != "fp32":
            # VeraLayer.forward casts x to the vectors' dtype and runs F.linear against the fp32 vera_A buffer
            p.append(f"{m} runs its input through the fp32 vera_A and vera_B buffers; lora_dtype={self.lora_dtype} "
                     "vectors are not modelled: drop --lora-dtype")
        if self.method == "prefix-tuning" and self.checkpointing != "none":
            # peft 0.21.2 peft_model.py PeftModel._setup_prompt_encoder raises "PREFIX_TUNING does not work with
            # gradient checkpointing." when a module of the base model has gradient_checkpointing set, and
            # transformers 5.24's GradientCheckpointingLayer (modeling_layers.py) passes cache=None to a checkpointed
            # layer (_can_checkpoint_with_cache is False but for a reader of the cache), which drops the prefix
            p.append(f"{m} does not run under gradient checkpointing (peft's PeftModel refuses it: the prefix is a "
                     "cache, and transformers drops the cache of a checkpointed layer): drop --checkpointing")
        if self.method == "prefix-tuning" and self.attention == "flash":
            # flash-attn takes no explicit mask over the prefix
            p.append(f"{m} is modelled under SDPA or eager attention: drop --attention flash")
        if self.method in ("prompt-tuning", "prefix-tuning") and (self.loss_chunks > 1 or self.loss != "cross-entropy"):
            p.append(f"{m} runs through PeftModelForCausalLM's forward and transformers' own loss, which puts the "
                     "prompts before the sequence; drop --loss-chunks and --loss")
        if off:
            p.append(f"{m} is modelled on one GPU or under data parallelism without {', '.join(off)}: drop "
                     + ("it" if len(off) == 1 else "them"))
        return p

    def _bnb_config_problems(self, m: str) -> list[str]:
        """PEFT's OFT, BOFT and VeRA over a 4-bit base are modelled as transformers' BitsAndBytesConfig loads it:
        every block linear in bitsandbytes 4-bit; the other stacks' settings are refused."""
        theirs = [f"{n}={getattr(self, n)!r}" for n, v in (("quant_targets", "all"), ("nf4_impl", "bitsandbytes"),
                                                           ("quant_head", False)) if getattr(self, n) != v]
        if not theirs:
            return []
        return [f"{m} over quant={self.quant} is modelled as transformers' BitsAndBytesConfig loads it (every block "
                f"linear in bitsandbytes 4-bit); {', '.join(theirs)} is another stack's: drop "
                + ("it" if len(theirs) == 1 else "them")]

    def _delta_method_problems(self) -> list[str]:
        """LoHa, LoKr, OFT and BOFT are modelled as PEFT's method comparison runs them: one GPU (or data parallel), the model's dtype, fp32
        factors (autocast_adapter_dtype) or the weights' dtype, AdamW or SGD, with or without transformers' gradient
        checkpointing (full, every:N, selective; per-op selective for OFT alone), LoHa, LoKr and OFT also under
        autocast over fp32 weights without checkpointing, OFT and BOFT over a bitsandbytes 4-bit base; what else would
        change what is kept is refused."""
        if self.method not in DELTA_METHODS:
            return []
        m = f"method={self.method}"
        p = []
        if self.mode != "train":
            p.append(f"{m} is modelled for training: estimate inference with --method full (peft merges the delta "
                     "into the weight)")
        if self.quant is not None and not (self.method in ("oft", "boft") and self.quant in FOUR_BIT):
            p.append(_quantized_base_problem(m, self.method, self.quant))
        elif self.quant is not None:
            # peft 0.21.2 dispatches OFT's and BOFT's Linear over a bitsandbytes Linear4bit (an nn.Linear; the
            # QuantizationBackend serves merging only)
            p += self._bnb_config_problems(m)
        if self.amp is not None and self.method not in ("loha", "oft", "lokr"):
            p.append(f"{m} under autocast (amp={self.amp}) is not modelled: drop --amp")
        elif self.amp is not None and self.dtype != "fp32":
            # LoHa's delta is built under autocast (activations.delta_dtype), traced over fp32 weights
            p.append(f"{m} under autocast is modelled over fp32 weights (autocast's master weights); "
                     f"dtype={self.dtype}: use --dtype fp32 or drop --amp")
        elif self.amp is not None and self.quant is not None:
            p.append(f"{m} under autocast over quant={self.quant} weights is not modelled: drop --amp")
        elif self.amp is not None and self.training and self.checkpointing != "none":
            # traced 11% over the estimate at 16 tokens, as plain LoRA under autocast and full checkpointing is
            p.append(f"{m} under autocast is modelled without checkpointing: drop --checkpointing or --amp")

        if self.lora_dtype not in ("fp32", self.dtype):
            # get_peft_model(autocast_adapter_dtype=False) leaves the factors in the base layer's dtype (peft 0.21.2
            # tuners_utils.BaseTunerLayer._move_adapter_to_device_of_base_layer); True upcasts half ones to fp32
            p.append(f"{m} with lora_dtype={self.lora_dtype} is not modelled: peft makes the factors fp32 "
                     f"(autocast_adapter_dtype=True) or the weights' dtype (False): use --lora-dtype fp32 or "
                     f"{self.dtype}")
        if self.fused_qkv:
            p.append(f"{m} adapts transformers' separate projections; fused_qkv is LitGPT's: drop --fused-qkv")
        if self.method == "boft" and self.dtype == "fp32":
            # boft_P.to(x) copies the host matrix to the GPU in the input's dtype; the tracer's fake device cannot
            # copy an fp32 buffer to fp32, so that case is left unchecked
            p.append(f"{m} is modelled with half weights (its host permutation matrix copied to the GPU in their "
                     "dtype each forward): use --dtype bf16 or fp16")
        if self.optimizer not in ("adamw", "adam", "sgd", "sgd-momentum", "none"):
            p.append(f"{m} with optimizer={self.optimizer} is not modelled: use adamw, adam, sgd or sgd-momentum")
        if self.optimizer_in_backward:
            p.append(f"{m} with optimizer_in_backward is not modelled: drop --optimizer-in-backward")
        off = [f"{n}={getattr(self, n)}" for n in ("tp", "pp", "cp") if getattr(self, n) > 1]
        off += [f"zero={self.zero}"] * bool(self.zero) + ["fsdp"] * bool(self.fsdp)
        off += ["compile"] * bool(self.compile) + ["activation_offload"] * bool(self.activation_offload)
        if self.checkpointing == "selective-op" and self.method != "oft":
            # torchtitan's policy saves every second aten.mm of a block: LoHa's and LoKr's delta products and BOFT's
            # x @ R are mms of their own (OFT rotates with bmm, which the policy does not count)
            p.append(f"{m} under checkpointing=selective-op is not modelled (its delta is built by mm, which the "
                     "per-op policy saves every second of): use --checkpointing full or every:N")
        if off:
            p.append(f"{m} is modelled on one GPU or under data parallelism without {', '.join(off)}: drop "
                     + ("it" if len(off) == 1 else "them"))
        return p

    def ignored(self) -> list[str]:
        """Settings that were given but do not apply to this run, one sentence each (they change nothing,
        or next to nothing, as selective checkpointing over SDPA).

        Only values that differ from the defaults are named: a default says nothing. The CLI, the
        API and the web page report these in the estimate's notes, so every entry point says the same.
        """
        d = _DEFAULTS
        out: list[str] = []

        def given(name: str) -> bool:
            return bool(getattr(self, name) != d[name])

        if not self.training:
            names = [n for n in ("optimizer", "optimizer_impl", "grad_accum", "keep_grads", "optimizer_in_backward",
                                 "checkpointing", "activation_offload", "loss_chunks", "loss", "loss_parallel",
                                 "compile", "compile_scope", "fused_qkv")
                     if given(n)]
            if names:
                out.append("ignored in inference (they apply to training): "
                           + ", ".join(f"{n}={getattr(self, n)!r}" for n in names))
        else:
            # transformers_version is read in training too (eager attention's score clamp, older per-block buffers)
            names = [n for n in ("kv_dtype", "kv_block", "cache", "max_cache_len") if given(n)]
            if names:
                out.append("ignored in training (they apply to the inference KV cache): "
                           + ", ".join(f"{n}={getattr(self, n)!r}" for n in names))
            if self.fused_qkv and (self.compile or self.attention == "eager"):
                out.append("ignored: fused_qkv=True (LitGPT's attention runs SDPA, eager; under compile or eager "
                           "attention transformers' attention is estimated)")
            if self.optimizer == "none" and given("optimizer_impl"):
                out.append(f"ignored: optimizer_impl={self.optimizer_impl!r} (optimizer='none' runs no step)")
            elif self.optimizer.endswith("-torchao") and given("optimizer_impl"):
                out.append(f"ignored: optimizer_impl={self.optimizer_impl!r} (torchao's optimizers step one "
                           "parameter at a time with their own kernels)")
            elif self.lora_fa and given("optimizer_impl"):
                out.append(f"ignored: optimizer_impl={self.optimizer_impl!r} (peft's LoraFAOptimizer steps one "
                           "parameter at a time in a Python loop)")
            if self.optimizer.startswith("paged-") and self.offload != "none":
                # ZeRO-Offload / FSDP's CPU offload keep the states in host RAM and step them there:
                # nothing is left in unified memory for the paged allocator to page
                out.append(f"optimizer={self.optimizer!r} pages its states through CUDA unified memory, and "
                           f"offload={self.offload!r} keeps them in host RAM and steps them on the CPU instead: "
                           "the paging does not apply (counted as offloaded)")
            if self.checkpointing == "selective" and self.attention != "eager":
                # transformers' sdpa_attention_forward returns the kernel's output itself (o_proj keeps
                # it), so recomputing the kernel drops only its log-sum-exp
                out.append(f"checkpointing='selective' recomputes the attention core (scores, softmax, dropout); "
                           f"attention={self.attention!r} keeps no scores, so it drops only the kernel's fp32 "
                           "log-sum-exp (b x heads x s per block): use selective-op, every:N or full to save memory")
        if self.method not in LORA_METHODS:
            # IA3 keeps its vectors in lora_dtype (peft's autocast_adapter_dtype); LN tuning's norms stay in the
            # model's dtype
            # LoHa and LoKr take their rank and targets from lora_rank and lora_targets, OFT its targets
            names = [n for n in ("lora_rank", "lora_targets", "lora_dropout", "lora_dtype", "dora", "quant_targets")
                     if given(n) and not (n == "lora_dtype" and self.method in ("ia3", "vera"))
                     and not (n in ("lora_rank", "lora_targets", "lora_dtype") and self.method in DELTA_METHODS
                              and (n != "lora_rank" or self.method in ("loha", "lokr")))]
            if names:
                out.append(f"ignored with method={self.method!r} (they apply to LoRA and QLoRA): "
                           + ", ".join(f"{n}={getattr(self, n)!r}" for n in names))
        if given("vera_rank") and self.method != "vera":
            out.append(f"ignored: vera_rank={self.vera_rank!r} applies to --method vera")
        if given("boft_block_size") and self.method != "boft":
            out.append(f"ignored: boft_block_size={self.boft_block_size!r} applies to --method boft")
        if given("oft_block_size") and self.method != "oft":
            out.append(f"ignored: oft_block_size={self.oft_block_size!r} applies to --method oft")
        if given("decompose_factor") and self.method != "lokr":
            out.append(f"ignored: decompose_factor={self.decompose_factor!r} applies to --method lokr")
        if given("num_virtual_tokens") and self.method not in ("prompt-tuning", "prefix-tuning"):
            out.append(f"ignored: num_virtual_tokens={self.num_virtual_tokens!r} applies to --method prompt-tuning "
                       "or prefix-tuning")
        elif given("quant_targets") and self.quantized is None:
            out.append(f"ignored: quant_targets={self.quant_targets!r} says which linears quantized weights cover, "
                       "and none are quantized (use --method qlora or --quant)")
        if self.quant_head and self.quantized is None:
            out.append("ignored: quant_head=True stores the output layer in the quantized format, and no weights "
                       "are quantized (use --method qlora or --quant)")
        if given("dequant_dtype") and self.quantized not in FOUR_BIT:
            out.append(f"ignored: dequant_dtype={self.dequant_dtype!r} is the dtype bitsandbytes dequantizes a "
                       "4-bit weight to, and no weights are in 4 bits (nf4, nf4-dq, fp4)")
        if given("bnb_compute_dtype") and self.quantized not in FOUR_BIT:
            out.append(f"ignored: bnb_compute_dtype={self.bnb_compute_dtype!r} is the dtype bitsandbytes' 4-bit "
                       "matmuls run in, and no weights are in 4 bits (nf4, nf4-dq, fp4)")
        elif given("bnb_compute_dtype") and self.compute_dtype != "fp16":
            out.append(f"ignored: bnb_compute_dtype={self.bnb_compute_dtype!r} with compute dtype "
                       f"{self.compute_dtype}: bitsandbytes' Linear4bit runs an fp32 or bf16 input in its own dtype "
                       "(set_compute_type)")
        if given("nf4_impl") and self.quantized not in ("nf4", "nf4-dq"):
            out.append(f"ignored: nf4_impl={self.nf4_impl!r} says whose code dequantizes NF4 weights, and none are "
                       "in NF4 (use --method qlora or --quant nf4)")
        if given("quant_impl") and self.quantized is None:
            out.append(f"ignored: quant_impl={self.quant_impl!r} says how a quantized linear reads its weight, and "
                       "none are quantized (use --quant int8 or fp8)")
        elif given("quant_impl") and self.quantized == "int4":
            out.append(f"ignored: quant_impl={self.quant_impl!r} with quant='int4': int4_weight_only's tinygemm "
                       "kernel (_weight_int4pack_mm) reads the packed weight, nothing is dequantized")
        if self.bnb_inputs and (not self.training or self.quantized not in FOUR_BIT):
            out.append("ignored: bnb_inputs=True is what bitsandbytes' 4-bit matmuls keep for "
                       "backward, and " + ("nothing is trained" if not self.training else
                                           "no weights are in 4 bits (nf4, nf4-dq, fp4)"))
        if self.holds_outputs != "none" and not self.training:
            out.append(f"ignored in inference: holds_outputs={self.holds_outputs!r} is what a training loop keeps "
                       "between steps")
        elif self.holds_outputs != "none" and not self.outputs_held and not self.output_upcast and not (
                self.bnb_inputs and self.quantized in FOUR_BIT):
            out.append(f"ignored: holds_outputs={self.holds_outputs!r} is modelled for a loop over transformers' own "
                       "loss (outputs = model(**batch)), Lightning Fabric's fp32 logits (--output-upcast) and an old "
                       "bitsandbytes' kept inputs (--bnb-inputs); with " + ("--loss-chunks" if self.loss_chunks > 1 else "--loss fused-linear"
                       if self.loss == "fused-linear" else "--activation-offload" if self.activation_offload
                       else "--compile") + " the loss or the logits are outside the outputs it holds")
        if self.output_upcast and not self.training:
            out.append("ignored in inference: output_upcast=True (the logits a training loop holds "
                       "in fp32)")
        if given("lora_dropout") and not self.training and self.method != "full":
            out.append(f"ignored in inference: lora_dropout={self.lora_dropout!r} (dropout is off in eval mode)")
        if not self.training and given("max_cache_len") and self.cache != "static":
            out.append(f"ignored: max_cache_len={self.max_cache_len!r} sizes a static cache, and cache={self.cache!r}")
        if self.image_size is not None and given("seq") and not self.images:  # a VLM reads both
            out.append(f"ignored: seq={self.seq!r} when image_size is given: a vision encoder's tokens are its "
                       "image patches")
        if given("compile_scope") and self.training and not self.compile:
            out.append(f"ignored: compile_scope={self.compile_scope!r} says what --compile covers, and nothing is "
                       "compiled")
        if given("zero_buckets") and self.zero_buckets != "default" and not (self.training and self.zero):
            out.append(f"ignored: zero_buckets={self.zero_buckets!r} sizes DeepSpeed's buckets, and the plan trains "
                       "without ZeRO (use --zero 1, 2 or 3)")
        if not self.fsdp and given("fsdp_strategy"):
            out.append(f"ignored: fsdp_strategy={self.fsdp_strategy!r} applies only with fsdp")
        if given("pp_schedule") and (self.pp == 1 or not self.training):
            out.append(f"ignored: pp_schedule={self.pp_schedule!r} schedules pipeline-parallel training (--pp > 1)")
        if not self.fsdp and given("fsdp_version"):
            out.append(f"ignored: fsdp_version={self.fsdp_version!r} applies only with fsdp")
        if not self.fsdp and given("fsdp_units"):
            out.append(f"ignored: fsdp_units={self.fsdp_units!r} applies only with fsdp")
        return out

    def validated(self) -> Workload:
        """Return self, or raise ConfigError listing every problem."""
        p = self.problems()
        if p:
            raise ConfigError(p)
        return self


#: The count fields and their upper bounds (vramlens.limits says why each is far above real runs).
_COUNT_LIMITS = (
    ("batch", L.MAX_BATCH), ("seq", L.MAX_SEQ), ("grad_accum", L.MAX_GRAD_ACCUM), ("gpus", L.MAX_GPUS),
    ("tp", L.MAX_PARALLEL), ("pp", L.MAX_PARALLEL), ("cp", L.MAX_PARALLEL), ("lora_rank", L.MAX_LORA_RANK),
    ("loss_chunks", MAX_LOSS_CHUNKS), ("vera_rank", L.MAX_LORA_RANK),
)

_DEFAULTS: dict[str, Any] = {f.name: f.default for f in fields(Workload)}

#: ``transformers_version``: X.Y or X.Y.Z
_VERSION = re.compile(r"[0-9]{1,4}\.[0-9]{1,4}(\.[0-9]{1,4})?")
#: The first transformers release whose generate() keeps one DynamicCache from start to end
#: (transformers #30536, "Reduce by 2 the memory requirement in generate()"): before it, every
#: decode step held the previous cache beside the new one (Workload.legacy_cache)
LEGACY_CACHE_BEFORE = (4, 42)
#: The first transformers release whose generate() computes only the last position's logits in the
#: prefill (transformers #31292, ``num_logits_to_keep``): before it the prefill's forward made the
#: logits of every prompt token (Workload.prefill_all_logits)
PREFILL_LAST_LOGITS_FROM = (4, 45)
#: The first transformers release whose OPT eager attention no longer clamps its masked scores: up to
#: 4.48 ``OPTAttention.forward`` ran ``attn_weights = torch.max(attn_weights, torch.tensor(torch.finfo(
#: attn_weights.dtype).min))`` after adding the mask (modeling_opt.py lines 200-203 of the v4.48.0 wheel);
#: v4.49.0's OPTAttention adds the mask and goes straight to the softmax (Workload.legacy_score_clamp)
SCORE_CLAMP_BEFORE = (4, 49)


def workload_fields() -> tuple[str, ...]:
    return tuple(f.name for f in fields(Workload))


def parse_image_size(value: Any) -> tuple[int, int] | None:
    """``224``, ``"224"``, ``"224x336"`` (height x width) or a pair -> (height, width); "" or None -> None.

    Raises:
        ConfigError: not one or two whole numbers.
    """
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        raise ConfigError([f"image_size={value!r} must be 224 or HxW such as 224x224"])
    if isinstance(value, int):
        return (value, value)
    if isinstance(value, list | tuple) and len(value) == 2:
        return (value[0], value[1])
    if isinstance(value, str):
        parts = value.lower().replace(" ", "").split("x")
        if 1 <= len(parts) <= 2 and all(x.isascii() and x.isdigit() and len(x) <= 9 for x in parts):
            nums = [int(x) for x in parts]
            return (nums[0], nums[-1])
    raise ConfigError([f"image_size={L.show(value)} must be 224 or HxW such as 224x224"])


def parse_release(value: Any) -> tuple[int, int, int] | None:
    """A transformers version, ``X.Y`` or ``X.Y.Z``, as (major, minor, patch); None for anything else."""
    if not isinstance(value, str) or not _VERSION.fullmatch(value):
        return None
    parts = [int(x) for x in value.split(".")]
    return (parts[0], parts[1], parts[2] if len(parts) > 2 else 0)


#: Longest PYTORCH_CUDA_ALLOC_CONF accepted (every key PyTorch knows, spelled out, is under 400 characters)
MAX_ALLOC_CONF_CHARS = 1_000


def alloc_conf_problems(value: Any) -> list[str]:
    """What is wrong with an ``alloc_conf`` value (PyTorch's own rule, one line), or nothing."""
    from vramlens.allocator.config import parse_alloc_conf
    from vramlens.errors import InputError

    if not isinstance(value, str) or len(value) > MAX_ALLOC_CONF_CHARS:
        return [f"alloc_conf={L.show(value)} must be a PYTORCH_CUDA_ALLOC_CONF string of at most "
                f"{MAX_ALLOC_CONF_CHARS:,} characters, such as expandable_segments:True"]
    try:
        conf = parse_alloc_conf(value)
    except InputError as e:
        return [f"alloc_conf={L.show(value)}: {e}"]
    if conf.backend != "native":  # the allocator port (vramlens.allocator.simulator) is the native one
        return [f"alloc_conf={L.show(value)}: backend:{conf.backend} is CUDA's own pool allocator, which vramlens does "
                "not model: drop backend (the native caching allocator)"]
    return []


def parse_audio_seconds(text: str) -> float:
    """``--audio-seconds``: a positive number of seconds ("30", "12.5"); Workload checks the bounds.

    Raises:
        ConfigError: not a number.
    """
    try:
        value = float(text.strip()) if len(text) <= 32 else math.nan
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise ConfigError([f"audio_seconds={L.show(text)} must be a number of seconds > 0, such as 30 or 12.5"])
    return value


def _held_for_spellings(clean: dict[str, Any]) -> None:
    """Read the earlier spellings of the loop's lifetime (API keywords, saved JSON, old URLs), from before it had
    one home in ``holds_outputs``: ``holds_outputs`` true/false, and ``output_upcast`` and ``bnb_inputs`` carrying
    it as "none"/"step"/"next-forward". A lifetime given there becomes ``holds_outputs`` unless that is given."""
    bools = {True: True, False: False, "true": True, "false": False}
    held = clean.get("holds_outputs")
    if isinstance(held, (bool, str)) and held in bools:
        clean["holds_outputs"] = "next-forward" if bools[held] else "none"
    for name in ("output_upcast", "bnb_inputs"):
        v = clean.get(name)
        if isinstance(v, str) and v in HELD_FOR:
            clean[name] = v != "none"
            if v != "none" and clean.get("holds_outputs", "none") == "none":
                clean["holds_outputs"] = v
        elif isinstance(v, str) and v in bools:
            clean[name] = bools[v]


def make_workload(**kwargs: Any) -> Workload:
    """Build and validate a Workload from keyword arguments named like the CLI flags.

    Accepts ``lora_targets`` as a comma-separated string and flag spellings with dashes.
    """
    known = set(workload_fields())
    clean: dict[str, Any] = {}
    unknown = []
    for k, v in kwargs.items():
        key = k.replace("-", "_")
        if key not in known:
            unknown.append(k)
            continue
        if v is None and key not in ("amp", "quant", "kv_dtype", "task", "image_size", "audio_seconds",
                                     "transformers_version", "alloc_conf"):
            continue
        clean[key] = v
    if unknown:
        raise ConfigError([f"unknown workload setting {u!r}: known are {', '.join(sorted(known))}" for u in unknown])
    _held_for_spellings(clean)
    if isinstance(clean.get("lora_targets"), str):
        clean["lora_targets"] = tuple(t.strip() for t in clean["lora_targets"].split(",") if t.strip())
    elif isinstance(clean.get("lora_targets"), (list, tuple)):  # anything else: problems() names it
        clean["lora_targets"] = tuple(clean["lora_targets"])
    if clean.get("amp") in ("none", "no", ""):
        clean["amp"] = None
    if clean.get("quant") in ("none", "no", ""):
        clean["quant"] = None
    if clean.get("task") == "":
        clean["task"] = None  # the web form's "(from the config)"
    if clean.get("transformers_version") == "":
        clean["transformers_version"] = None  # the web form's empty field
    if clean.get("alloc_conf") == "":
        clean["alloc_conf"] = None  # the web form's empty field: PyTorch's defaults
    if "image_size" in clean:
        clean["image_size"] = parse_image_size(clean["image_size"])
    if clean.get("audio_seconds") == "":
        clean["audio_seconds"] = None  # the web form's empty field
    elif isinstance(clean.get("audio_seconds"), str):
        clean["audio_seconds"] = parse_audio_seconds(clean["audio_seconds"])
    return Workload(**clean).validated()


_FIELD_NAMES = tuple(f.name for f in fields(Workload))
_FIELD_INDEX = {name: i for i, name in enumerate(_FIELD_NAMES)}
_ALL_FIELDS = operator.attrgetter(*_FIELD_NAMES)


def evolve(w: Workload, **changes: Any) -> Workload:
    """``dataclasses.replace(w, **changes)``, several times faster (the advisor makes tens of thousands).

    A Workload has no ``__post_init__`` and no ``init=False`` field, so the object ``replace`` builds through
    ``__init__`` is a copy of ``w`` with the changed fields set, which is what this builds directly.
    """
    values = list(_ALL_FIELDS(w))
    for name, value in changes.items():
        i = _FIELD_INDEX.get(name)
        if i is None:
            raise TypeError(f"Workload has no field {name!r}")
        values[i] = value
    new = object.__new__(Workload)
    deque(map(object.__setattr__, repeat(new), _FIELD_NAMES, values), maxlen=0)
    return new
