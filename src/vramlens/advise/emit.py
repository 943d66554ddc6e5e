"""Config writers: a plan as the settings a library reads.

Each writer returns plain data (dicts, strings) in the library's own names; :func:`render` turns
it into the text a user pastes (JSON, YAML, an environment line). Names follow the libraries'
documented parameters: ``transformers.TrainingArguments`` and ``BitsAndBytesConfig``,
``peft.LoraConfig``, the DeepSpeed config JSON (``zero_optimization``), the Accelerate config
file (``accelerate config``), ``from_pretrained(device_map=..., max_memory=...)`` and PyTorch's
``PYTORCH_CUDA_ALLOC_CONF`` (docs/source/notes/cuda.rst, "Optimizing memory usage").
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable
from typing import Any

from vramlens.advise.plan import Plan
from vramlens.errors import InputError
from vramlens.workload import AO_INFERENCE_QUANTS, DELTA_METHODS, FOUR_BIT, VECTOR_METHODS, Workload

KINDS = ("trainer", "peft", "bnb", "deepspeed", "accelerate", "fsdp", "device-map", "alloc-conf", "torchtune", "vllm",
         "llama.cpp", "torchtitan")

#: vramlens optimizer -> TrainingArguments ``optim`` (transformers ``OptimizerNames``).
TRAINER_OPTIM = {
    "adamw": "adamw_torch",
    "adam": "adamw_torch",          # with weight_decay=0 AdamW is Adam
    "sgd": "sgd",
    "sgd-momentum": "sgd",          # momentum through optim_args
    "adafactor": "adafactor",
    "adamw-8bit": "adamw_bnb_8bit",
    "paged-adamw": "paged_adamw_32bit",
    "paged-adamw-8bit": "paged_adamw_8bit",
    "lion": "lion_32bit",
    # transformers' _get_torchao_optimizer (trainer_optimizer.py): torchao.optim.AdamW8bit / AdamW4bit,
    # both built with ``block_size=optim_args.get("block_size", 256)``: for 4-bit that is 256, not
    # AdamW4bit's own 128 that the plan counts, so the Trainer's 4-bit states are a little smaller
    # than planned (one fp32 scale per 256 elements instead of 128); optim_args cannot set it
    # (they reach the optimizer as strings)
    "adamw-8bit-torchao": "adamw_torch_8bit",
    "adamw-4bit-torchao": "adamw_torch_4bit",
}
#: Optimizers TrainingArguments cannot name, and why.
TRAINER_NO_OPTIM = {
    "adamw-fp8-torchao": "torchao's AdamWFp8 has no TrainingArguments optim name (transformers names only "
                         "torchao's AdamW4bit and AdamW8bit: adamw_torch_4bit, adamw_torch_8bit)",
    "adamw-cpu-offload-torchao": "torchao's CPUOffloadOptimizer has no TrainingArguments optim name",
}
TORCH_DTYPE = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}
#: torch.optim.AdamW's default weight decay (the Trainer's own default, 0, would make AdamW Adam).
ADAMW_WEIGHT_DECAY = 0.01
#: vramlens optimizer -> DeepSpeed ``optimizer.type`` for ZeRO-Offload, whose CPU step
#: (DeepSpeedCPUAdam / DeepSpeedCPULion) DeepSpeed insists on (``zero_force_ds_cpu_optimizer``).
DS_OPTIM: dict[str, tuple[str, dict[str, Any]]] = {"adamw": ("AdamW", {"weight_decay": ADAMW_WEIGHT_DECAY}), "adam": ("Adam", {"adam_w_mode": False}),
            "lion": ("Lion", {})}
#: vramlens attention -> ``from_pretrained(attn_implementation=...)``.
ATTN_IMPLEMENTATION = {"eager": "eager", "sdpa": "sdpa", "flash": "flash_attention_2"}
#: DeepSpeed's documented defaults for the bucket sizes (deepspeed/runtime/zero/config.py).
DS_BUCKET = 500_000_000
DS_PREFETCH = 50_000_000
DS_PERSISTENCE_THRESHOLD = 100_000


def _training(plan: Plan, kind: str) -> Workload:
    w = plan.workload
    if not w.training:
        raise InputError(f"--emit {kind}: the plan is for inference; {kind} writes training settings: use --emit device-map or bnb")
    return w


def _data_parallel_only(w: Workload, kind: str) -> None:
    """Training launchers here split the batch over GPUs; none of them has tensor or pipeline parallelism."""
    if w.tp > 1 or w.pp > 1:
        raise InputError(f"--emit {kind}: the plan splits the model with --tp {w.tp} --pp {w.pp}; {kind} settings "
                         "have no tensor or pipeline parallelism (Megatron-LM or torchtitan do): choose a plan "
                         "with --forbid tp,pp")
    if w.fsdp and w.fsdp_units != "blocks":
        # transformers' and accelerate's FSDP wrap transformer blocks (and the root) only
        raise InputError(f"--emit {kind}: the plan makes the embedding and output layer FSDP units of their own "
                         f"(--fsdp-units {w.fsdp_units}, torchtune's custom_sharded_layers), which {kind} settings "
                         "cannot: use --emit torchtune, or plan with --fsdp-units blocks")


def _no_techniques(w: Workload, kind: str) -> None:
    """The training techniques live in the training script, and these targets' scripts (the Trainer,
    Accelerate, DeepSpeed, FSDP) have none of them: torchtune's recipes have the first three
    (``optimizer_in_bwd``, ``enable_activation_offloading``, ``CEWithChunkedOutputLoss``), Liger's
    kernels the fused loss, torchtitan loss parallelism."""
    what = []
    if w.optimizer_in_backward:
        what.append("steps the optimizer in backward (--optimizer-in-backward, torchtune's optimizer_in_bwd)")
    if w.activation_offload:
        what.append("offloads activations to the host (--activation-offload, torchtune's "
                    "enable_activation_offloading)")
    if w.loss_chunks > 1:
        what.append(f"chunks the loss (--loss-chunks {w.loss_chunks}, torchtune's CEWithChunkedOutputLoss)")
    if w.loss == "fused-linear":
        what.append("uses a fused linear cross-entropy (--loss fused-linear, Liger's; the Trainer's "
                    "use_liger_kernel patches other layers too)")
    if w.loss == "logits-sum":
        what.append("sums the logits instead of a loss (--loss logits-sum, the SDPA benchmark loop of transformers' "
                    "model docs)")
    if w.loss_parallel:
        what.append("shards the loss over the vocabulary (--loss-parallel, torchtitan's loss_parallel)")
    if w.fp8:
        what.append("trains in float8 (--fp8, torchao's Float8Linear: torchtitan's float8 converter, torchtune's "
                    "enable_fp8_training)" + (f", recipe {w.fp8_recipe}" if w.fp8_recipe != "tensorwise" else ""))
    if w.compiled_blocks:
        what.append(f"compiles each block alone (--compile-scope {w.compile_scope}, torchtune's compile=True, "
                    "torchtitan's [compile]; the Trainer's torch_compile compiles the whole model with its loss: "
                    "--compile-scope model)")
    if what:
        names = ",".join(n for n, on in (("optimizer-in-backward", w.optimizer_in_backward),
                                         ("activation-offload", w.activation_offload),
                                         ("loss-chunks", w.loss_chunks > 1), ("loss-parallel", w.loss_parallel))
                         if on)
        raise InputError(f"--emit {kind}: the plan " + "; and ".join(what) + f"; {kind} settings have no such option: "
                         "run it with torchtune (or torchtitan) instead, or choose a plan without it"
                         + (f" (--forbid {names})" if names else ""))


def _no_selective(w: Workload, kind: str) -> None:
    if w.checkpointing == "selective":
        raise InputError(f"--emit {kind}: the plan recomputes only the attention scores (--checkpointing "
                         "selective); Hugging Face models checkpoint whole blocks (activation checkpointing): "
                         "choose a plan with --checkpointing full or none")
    if w.checkpointing == "selective-op" or w.checkpoint_every is not None:
        option = "op" if w.checkpointing == "selective-op" else str(w.checkpoint_every)
        raise InputError(f"--emit {kind}: the plan uses torchtitan's selective activation checkpointing "
                         f"(--checkpointing {w.checkpointing}); {kind} settings have no such option: run it with "
                         f"torchtitan (--emit torchtitan: [activation_checkpoint] mode = \"selective\", selective_ac_option = "
                         f"\"{option}\"), or choose a plan with --checkpointing full or none "
                         "(--forbid checkpointing keeps the starting one)")


def _refused_as(kind: str, writer: Callable[..., Any], plan: Plan, **kw: Any) -> Any:
    """``writer(plan)``, its refusal said as ``--emit kind`` (a launcher refuses what its backend does)."""
    try:
        return writer(plan, **kw)
    except InputError as e:
        inner = str(e).split(": ", 1)[1]
        raise InputError(f"--emit {kind}: {_others_than(kind, inner)}") from None


#: "--emit a", "--emit a/b", "--emit a or b": the alternatives a refusal names.
_ALTERNATIVES = re.compile(r"--emit ([\w.-]+(?:/[\w.-]+)*(?: or [\w.-]+)?)")


def _others_than(kind: str, text: str) -> str:
    """``text`` with ``kind`` dropped from the alternatives it names: a refusal said as ``--emit
    trainer`` does not advise ``--emit fsdp/trainer``."""

    def drop(m: re.Match[str]) -> str:
        names = re.split(r"/| or ", m.group(1))
        rest = [n for n in names if n != kind]
        if not rest or len(rest) == len(names):
            return m.group(0)
        return "--emit " + " or ".join(rest)

    return _ALTERNATIVES.sub(drop, text)


def _half_flags(w: Workload) -> dict[str, Any]:
    """TrainingArguments' bf16/fp16 mean autocast over fp32 weights (torch.autocast + GradScaler):
    true only for a plan with --dtype fp32 --amp X. A pure-half plan loads the model in that dtype
    (``from_pretrained(dtype=...)``) and leaves both false. Under DeepSpeed they switch on its
    half mode instead (half weights, fp32 master copy: --dtype X --amp X), so they follow ``amp``."""
    if w.zero:
        return {"bf16": w.amp == "bf16", "fp16": w.amp == "fp16"}
    autocast = w.dtype == "fp32" and w.amp is not None
    return {"bf16": autocast and w.amp == "bf16", "fp16": autocast and w.amp == "fp16"}


@functools.cache
def _transformers_version() -> tuple[int, int] | None:
    """The installed transformers' (major, minor) version (metadata only, nothing imported), or None."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        major, minor = version("transformers").split(".")[:2]
        return int(major), int(minor)
    except (PackageNotFoundError, ValueError):
        return None


def _legacy(legacy_names: bool | None) -> bool:
    """Whether to write transformers 4.x names: asked, or when the installed one is 4.x or absent
    (pyproject's floor is 4.45; 5 still reads the old names as deprecated aliases)."""
    if legacy_names is not None:
        return legacy_names
    v = _transformers_version()
    return v is None or v[0] < 5


def trainer(plan: Plan, *, legacy_names: bool | None = None) -> dict[str, Any]:
    """``transformers.TrainingArguments`` keyword arguments (without ``output_dir``).

    transformers 5 names checkpointing ``activation_checkpointing`` (``gradient_checkpointing`` is a
    deprecated alias); 4.x accepts only ``gradient_checkpointing``. ``legacy_names=None`` follows
    the installed transformers (the old names when it is 4.x or absent: pyproject allows 4.45).
    Under FSDP checkpointing goes in ``fsdp_config`` (FSDP's own, as transformers advises).

    Raises:
        InputError: what the Trainer cannot run as planned: half weights with an fp32 master
            copy without ZeRO, tensor/pipeline parallelism, selective checkpointing, no optimizer,
            and what --emit deepspeed or fsdp refuses for a ZeRO or FSDP plan.
    """
    w = _training(plan, "trainer")
    if w.optimizer == "none":
        raise InputError("--emit trainer: the plan has --optimizer none (forward and backward only); no Trainer settings")
    if w.optimizer in TRAINER_NO_OPTIM:
        raise InputError(f"--emit trainer: the plan uses --optimizer {w.optimizer}; {TRAINER_NO_OPTIM[w.optimizer]}: "
                         "pass it to Trainer(optimizers=(optimizer, None)) yourself, or use --emit torchtune")
    if w.lora_fa:
        raise InputError("--emit trainer: the plan steps with peft's LoRA-FA (--lora-fa), which no TrainingArguments "
                         "optim names: pass peft.optimizers.create_lorafa_optimizer(model, r, lora_alpha, lr) to "
                         "Trainer(optimizers=(optimizer, None)) yourself")
    _no_techniques(w, "trainer")
    _data_parallel_only(w, "trainer")
    _no_selective(w, "trainer")
    if w.dtype != "fp32" and w.amp is not None and not w.zero:
        raise InputError(f"--emit trainer: the plan keeps {w.dtype} weights with an fp32 master copy (--amp {w.amp}); "
                         "the Trainer does that only through DeepSpeed: choose a plan with --zero, or --dtype fp32 "
                         f"--amp {w.amp} (autocast, what bf16=True/fp16=True mean)")
    legacy = _legacy(legacy_names)
    kw: dict[str, Any] = {
        "per_device_train_batch_size": w.batch,
        "gradient_accumulation_steps": w.grad_accum,
        **_half_flags(w),
        "optim": TRAINER_OPTIM[w.optimizer],
    }
    ckpt = "gradient_checkpointing" if legacy else "activation_checkpointing"
    kw[ckpt] = w.checkpointing != "none" and not w.fsdp
    if w.optimizer in ("adam", "adamw"):
        # the Trainer's default weight_decay=0 makes AdamW plain Adam: say which one the plan means
        kw["weight_decay"] = ADAMW_WEIGHT_DECAY if w.optimizer == "adamw" else 0.0
    if w.optimizer == "sgd-momentum":
        kw["optim_args"] = "momentum=0.9"
    if kw[ckpt]:
        kw[ckpt + "_kwargs"] = {"use_reentrant": False}
    if w.compile:
        kw["torch_compile"] = True  # the Trainer compiles the model with inductor (TrainingArguments.torch_compile)
    if w.fsdp:
        f = _refused_as("trainer", fsdp, plan, legacy_names=legacy)
        kw["fsdp"] = f["fsdp"]
        kw["fsdp_config"] = f["fsdp_config"]
    elif w.zero:
        _refused_as(kind="trainer", writer=deepspeed, plan=plan)  # the Trainer runs DeepSpeed's precision modes
        kw["deepspeed"] = "ds_config.json"  # write it with: vramlens fit ... --emit deepspeed > ds_config.json
    return kw


def peft(plan: Plan) -> dict[str, Any]:
    """``peft.LoraConfig`` keyword arguments. lora_alpha = 2r, a common choice (peft's default is 8). IA3, LN
    tuning, prompt and prefix tuning, VeRA, LoHa, LoKr, OFT and BOFT: the dict ``peft.get_peft_config`` takes (its
    ``peft_type`` names the config class). LoRA-FA (--lora-fa) keeps LoRA's config: it is the optimizer,
    ``peft.optimizers.create_lorafa_optimizer(model, r, lora_alpha, lr)`` over the model this config makes."""
    w = plan.workload
    if w.method == "full":
        raise InputError("--emit peft: the plan trains every parameter (--method full); no LoRA settings")
    kind = plan.estimate.model.kind
    if w.method in ("prompt-tuning", "prefix-tuning"):
        return {"peft_type": "PROMPT_TUNING" if w.method == "prompt-tuning" else "PREFIX_TUNING",
                "task_type": "CAUSAL_LM", "num_virtual_tokens": w.num_virtual_tokens}
    if w.method == "adalora":
        raise InputError(f"--emit peft: AdaLoraConfig needs total_step, the run's optimizer steps, which the plan does "
                         f"not know: write AdaLoraConfig(init_r={w.lora_rank}, target_modules={list(w.lora_targets)}, "
                         "total_step=N) and call model.base_model.update_and_allocate(step) after each "
                         "optimizer.step()")
    if w.method == "vera":
        # VeraConfig(r) with target_modules None: peft's default targets for the model type, which the estimate
        # assumed (vramlens.models.peft_targets.VERA_TARGETS); projection_prng_key 0 and save_projection True
        return {"peft_type": "VERA", "task_type": "CAUSAL_LM", "r": w.vera_rank}
    if w.method in ("loha", "lokr"):
        # LoHaConfig / LoKrConfig (src/peft/tuners/loha/config.py, lokr/config.py): r, target_modules and LoKr's
        # decompose_factor set what vramlens estimated; alpha = 2r as for LoRA (it scales the delta and changes no
        # memory); get_peft_model(autocast_adapter_dtype=True), peft's default, keeps the factors in fp32 as assumed
        targets = list(w.lora_targets)
        return {"peft_type": w.method.upper(), "r": w.lora_rank, "alpha": 2 * w.lora_rank,
                "target_modules": "all-linear" if targets == ["all-linear"] else targets,
                **({"decompose_factor": w.decompose_factor} if w.method == "lokr" else {}),
                "task_type": {"decoder": "CAUSAL_LM"}.get(kind, "FEATURE_EXTRACTION")}
    if w.method == "oft":
        # OFTConfig (src/peft/tuners/oft/config.py): r 0 with oft_block_size, the targets, and peft's defaults for the
        # rest (Cayley-Neumann with 5 terms, no COFT, no block sharing), which the estimate assumed
        targets = list(w.lora_targets)
        return {"peft_type": "OFT", "r": 0, "oft_block_size": w.oft_block_size,
                "target_modules": "all-linear" if targets == ["all-linear"] else targets,
                "task_type": {"decoder": "CAUSAL_LM"}.get(kind, "FEATURE_EXTRACTION")}
    if w.method == "boft":
        # BOFTConfig (src/peft/tuners/boft/config.py): boft_block_size with boft_block_num 0 and peft's default
        # boft_n_butterfly_factor 1, which the estimate assumed
        targets = list(w.lora_targets)
        return {"peft_type": "BOFT", "boft_block_size": w.boft_block_size, "boft_block_num": 0,
                "boft_n_butterfly_factor": 1, "target_modules": "all-linear" if targets == ["all-linear"] else targets,
                "task_type": {"decoder": "CAUSAL_LM"}.get(kind, "FEATURE_EXTRACTION")}
    if w.method in VECTOR_METHODS:
        # IA3Config / LNTuningConfig with target_modules None: peft takes the model type's defaults, which
        # vramlens' estimate assumed (vramlens.models.peft_targets); get_peft_model(autocast_adapter_dtype=...)
        # keeps IA3's vectors in fp32 by default
        return {"peft_type": "IA3" if w.method == "ia3" else "LN_TUNING",
                "task_type": {"decoder": "CAUSAL_LM"}.get(kind, "FEATURE_EXTRACTION")}
    targets = list(w.lora_targets)
    return {
        "r": w.lora_rank,
        "lora_alpha": 2 * w.lora_rank,
        "target_modules": "all-linear" if targets == ["all-linear"] else targets,
        "lora_dropout": w.lora_dropout,
        **({"use_dora": True} if w.dora else {}),
        "bias": "none",
        "task_type": {"decoder": "CAUSAL_LM", "encoder-decoder": "SEQ_2_SEQ_LM"}.get(kind, "FEATURE_EXTRACTION"),
    }


def peft_call(plan: Plan) -> str | None:
    """What ``get_peft_model`` must be told beyond :func:`peft`'s config, as a comment line (None when peft's defaults
    reproduce the plan). peft's ``get_peft_model(..., autocast_adapter_dtype=True)``, its default, upcasts fp16 and
    bf16 adapter weights to fp32 (src/peft/tuners/tuners_utils.py ``_cast_adapter_dtype``, peft 0.21); a plan whose
    adapters stay in the compute dtype (``--lora-dtype`` not fp32) needs ``autocast_adapter_dtype=False``."""
    w = plan.workload
    if w.method == "full" or w.lora_dtype == "fp32":
        return None
    return (f"# get_peft_model(model, config, autocast_adapter_dtype=False): keeps the adapters in {w.lora_dtype} as "
            "the plan assumed (peft's default upcasts them to fp32)")


def bnb(plan: Plan) -> dict[str, Any]:
    """``transformers.BitsAndBytesConfig`` keyword arguments for int8 / nf4 / fp4 weights."""
    w = plan.workload
    q = w.quantized
    if q is None:
        raise InputError("--emit bnb: the plan keeps its weights unquantized; no BitsAndBytesConfig needed")
    if q == "int8":
        return {"load_in_8bit": True}
    if q in FOUR_BIT:
        return {
            "load_in_4bit": True,
            "bnb_4bit_quant_type": "fp4" if q == "fp4" else "nf4",
            "bnb_4bit_use_double_quant": q == "nf4-dq",
            "bnb_4bit_compute_dtype": TORCH_DTYPE[w.compute_dtype],
        }
    raise InputError(f"--emit bnb: {q} weights come from a pre-quantized checkpoint (GPTQ/AWQ/torchao), "
                     "not from bitsandbytes: load that checkpoint instead")


def deepspeed(plan: Plan) -> dict[str, Any]:
    """A DeepSpeed config (the JSON ``deepspeed --deepspeed_config`` / ``TrainingArguments(deepspeed=)`` reads).

    It holds what DeepSpeed runs: batch split, ZeRO stage, offload, precision mode and, with
    offload, the optimizer (its CPU step). Activation checkpointing of a Hugging Face model is the
    Trainer's setting (``--emit trainer``), not DeepSpeed's ``activation_checkpointing`` section,
    which only Megatron-style models calling ``deepspeed.checkpointing`` read. A plan with
    ``zero_buckets="auto"`` writes "auto" bucket sizes, which only the Trainer resolves (to h*h);
    ``deepspeed --deepspeed_config`` alone reads them as its defaults (``zero_buckets="default"``).
    """
    w = _training(plan, "deepspeed")
    if w.fsdp:
        raise InputError("--emit deepspeed: the plan shards with FSDP (--fsdp), not ZeRO: use --emit fsdp or accelerate")
    _no_techniques(w, "deepspeed")
    _data_parallel_only(w, "deepspeed")
    if w.dtype == "fp32" and w.amp is not None:
        raise InputError(f"--emit deepspeed: the plan is autocast (fp32 weights, --amp {w.amp}); DeepSpeed's "
                         f"{w.amp} mode keeps {w.amp} weights with an fp32 master copy instead: choose a plan with "
                         f"--dtype {w.amp} --amp {w.amp}, or --emit trainer/fsdp")
    if w.dtype != "fp32" and w.amp is None:
        raise InputError(f"--emit deepspeed: the plan trains pure {w.dtype} (no fp32 master weights); DeepSpeed's "
                         f"\"{w.dtype}\": {{\"enabled\": true}} keeps an fp32 master copy (more memory than the plan "
                         f"shows): choose a plan with --amp {w.dtype}, or --emit fsdp/trainer")
    if w.offload != "none" and w.optimizer not in DS_OPTIM:
        raise InputError(f"--emit deepspeed: the plan offloads the optimizer step to the CPU with --optimizer "
                         f"{w.optimizer}; ZeRO-Offload steps on the CPU only with DeepSpeed's CPU Adam, AdamW or "
                         "Lion: choose a plan with --optimizer adamw")
    stage = w.zero
    zero: dict[str, Any] = {"stage": stage, "overlap_comm": True, "contiguous_gradients": True}
    if stage in (1, 2):
        zero.update(reduce_bucket_size=DS_BUCKET, allgather_bucket_size=DS_BUCKET, reduce_scatter=True)
    if stage == 3:
        zero.update(reduce_bucket_size=DS_BUCKET, stage3_prefetch_bucket_size=DS_PREFETCH,
                    stage3_param_persistence_threshold=DS_PERSISTENCE_THRESHOLD)
    if w.zero_buckets == "auto":
        # transformers' Trainer fills these from the model (integrations/deepspeed.py: h*h, 0.9*h*h, 10*h);
        # DeepSpeed itself, without the Trainer, drops "auto" keys (runtime/config_utils.py) and uses its defaults
        zero.update({k: "auto" for k in zero if k in ("reduce_bucket_size", "stage3_prefetch_bucket_size",
                                                       "stage3_param_persistence_threshold")})
    if w.offload in ("optimizer", "all"):
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
    if w.offload == "all":
        zero["offload_param"] = {"device": "cpu", "pin_memory": True}
    cfg: dict[str, Any] = {
        "train_batch_size": w.effective_batch,
        "train_micro_batch_size_per_gpu": w.batch,
        "gradient_accumulation_steps": w.grad_accum,
        "bf16": {"enabled": w.amp == "bf16"},
        "fp16": {"enabled": w.amp == "fp16"},
        "zero_optimization": zero,
        "gradient_clipping": 1.0,
    }
    if w.offload != "none":
        kind, params = DS_OPTIM[w.optimizer]
        cfg["optimizer"] = {"type": kind, "params": dict(params)}  # a copy: the table stays as it is
    return cfg


def fsdp(plan: Plan, *, legacy_names: bool | None = None) -> dict[str, Any]:
    """FSDP settings as TrainingArguments takes them (``fsdp`` and ``fsdp_config``).

    transformers 5 runs FSDP2 (``fsdp=True``, ``fsdp_config["version"] = 2``; the strategy is
    ``reshard_after_forward``, offload is ``cpu_offload``); 4.x takes FSDP1's strategy string.
    ``legacy_names=None`` follows the installed transformers, as :func:`trainer` does.

    Raises:
        InputError: a plan without FSDP, or one FSDP cannot run as planned (optimizer-only offload,
            half weights with an fp32 master copy, hybrid sharding under FSDP2, tensor/pipeline
            parallelism, selective checkpointing).
    """
    w = _training(plan, "fsdp")
    if not w.fsdp:
        what = f"ZeRO stage {w.zero} (DeepSpeed): use --emit deepspeed" if w.zero else \
            "no sharding (plain data parallelism): use --emit trainer or accelerate"
        raise InputError(f"--emit fsdp: the plan uses {what}")
    _no_techniques(w, "fsdp")
    _data_parallel_only(w, "fsdp")
    _no_selective(w, "fsdp")
    if w.offload == "optimizer":
        raise InputError("--emit fsdp: the plan offloads only the optimizer states; FSDP's offload "
                         "(CPUOffload(offload_params=True)) moves the parameters too: choose a plan with "
                         "--offload all, or --emit deepspeed (offload_optimizer)")
    if w.dtype != "fp32" and w.amp is not None:
        raise InputError(f"--emit fsdp: the plan keeps {w.dtype} weights with an fp32 master copy (--amp {w.amp}); "
                         f"FSDP keeps one copy: fp32 with {w.amp} compute (--dtype fp32 --amp {w.amp}) or pure "
                         f"{w.dtype} (--dtype {w.dtype}): choose one of those plans")
    ckpt = w.checkpointing == "full"
    if _legacy(legacy_names):
        strategy = {"full": "full_shard", "shard-grad-op": "shard_grad_op", "hybrid": "hybrid_shard"}[w.fsdp_strategy]
        words = [strategy] + (["offload"] if w.offload == "all" else []) + ["auto_wrap"]
        return {
            "fsdp": " ".join(words),
            "fsdp_config": {
                "backward_prefetch": "backward_pre",
                "forward_prefetch": False,
                "use_orig_params": w.method != "full",  # needed when only some parameters train (LoRA)
                "sync_module_states": True,
                "cpu_ram_efficient_loading": True,
                "activation_checkpointing": ckpt,
            },
        }
    if w.fsdp_strategy == "hybrid":
        raise InputError("--emit fsdp: the plan shards within each node and replicates across nodes "
                         "(--fsdp-strategy hybrid); the Trainer's FSDP2 has no hybrid sharding: choose a plan "
                         "with --fsdp-strategy full or shard-grad-op")
    return {
        "fsdp": True,
        "fsdp_config": {
            "version": 2,
            "reshard_after_forward": w.fsdp_strategy == "full",
            "cpu_offload": w.offload == "all",
            "cpu_ram_efficient_loading": True,
            "activation_checkpointing": ckpt,
        },
    }


def accelerate(plan: Plan, *, nodes: int = 1) -> dict[str, Any]:
    """An Accelerate config (what ``accelerate config`` writes to default_config.yaml).

    ``mixed_precision`` is Accelerate's: autocast over the loaded weights (DDP, FSDP) or DeepSpeed's
    half mode; a pure-half plan loads the model in that dtype and says ``no``. For inference it
    describes data-parallel replicas only.
    """
    w = plan.workload
    if w.training:
        _no_techniques(w, "accelerate")
        _data_parallel_only(w, "accelerate")
        _no_selective(w, "accelerate")
    elif w.tp > 1 or w.pp > 1:
        raise InputError(f"--emit accelerate: the plan splits the model with --tp {w.tp} --pp {w.pp}; an Accelerate "
                         "config launches copies of it: use --emit device-map (layers over GPUs)")
    if w.training and w.fsdp:
        dist = "FSDP"
    elif w.training and w.zero:
        dist = "DEEPSPEED"
    elif w.gpus > 1:
        dist = "MULTI_GPU"
    else:
        dist = "NO"
    if dist in ("NO", "MULTI_GPU") and w.dtype != "fp32" and w.amp is not None:
        raise InputError(f"--emit accelerate: the plan keeps {w.dtype} weights with an fp32 master copy "
                         f"(--amp {w.amp}); Accelerate does that only through DeepSpeed: choose a plan with --zero, "
                         f"or --dtype fp32 --amp {w.amp}")
    cfg: dict[str, Any] = {
        "compute_environment": "LOCAL_MACHINE",
        "distributed_type": dist,
        "mixed_precision": w.amp or "no",
        "num_machines": nodes,
        "num_processes": w.gpus,
        "machine_rank": 0,
        "main_training_function": "main",
        "downcast_bf16": "no",
        "rdzv_backend": "static",
        "same_network": True,
        "use_cpu": False,
        "gpu_ids": "all",
    }
    if dist == "DEEPSPEED":
        _refused_as("accelerate", deepspeed, plan)  # Accelerate's DeepSpeed plugin has the same precision modes
        cfg["deepspeed_config"] = {
            "zero_stage": w.zero,
            "gradient_accumulation_steps": w.grad_accum,
            "offload_optimizer_device": "cpu" if w.offload != "none" else "none",
            "offload_param_device": "cpu" if w.offload == "all" else "none",
            "zero3_init_flag": w.zero == 3,
        }
    if dist == "FSDP":
        _refused_as("accelerate", fsdp, plan, legacy_names=True)  # FSDP1's names carry every strategy
        cfg["fsdp_config"] = {
            "fsdp_sharding_strategy": {"full": "FULL_SHARD", "shard-grad-op": "SHARD_GRAD_OP",
                                       "hybrid": "HYBRID_SHARD"}[w.fsdp_strategy],
            "fsdp_offload_params": w.offload == "all",
            "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
            "fsdp_backward_prefetch": "BACKWARD_PRE",
            "fsdp_state_dict_type": "SHARDED_STATE_DICT",
            "fsdp_use_orig_params": w.method != "full",
            "fsdp_sync_module_states": True,
            "fsdp_cpu_ram_efficient_loading": True,
            "fsdp_activation_checkpointing": w.checkpointing == "full",
        }
    return cfg


def device_map(plan: Plan, *, cpu_ram: int | None = None, legacy_names: bool | None = None) -> dict[str, Any]:
    """``from_pretrained`` keyword arguments: device_map, max_memory per GPU, dtype, attention and quantization.

    ``device_map="auto"`` splits the layers over the GPUs in turn (the plan's --pp, one stage at a
    time). max_memory leaves room for the plan's KV cache, activations and runtime on each GPU,
    which Accelerate does not count when it places the weights. The dtype argument is
    ``torch_dtype`` before transformers 4.56 (``legacy_names``), ``dtype`` from then on.

    Raises:
        InputError: a training plan, or one from_pretrained cannot load as planned (tensor
            parallelism, data-parallel replicas, a KV-cache dtype, pre-quantized weights).
    """
    w = plan.workload
    if w.training:
        raise InputError("--emit device-map: device_map places weights for inference (Accelerate's big-model "
                         "hooks); the plan trains: use --emit trainer, deepspeed, fsdp or accelerate")
    if w.tp > 1:
        raise InputError(f"--emit device-map: the plan uses tensor parallelism (--tp {w.tp}); device_map splits "
                         f"whole layers over GPUs: serve it with vLLM --tensor-parallel-size {w.tp}, or choose "
                         "a plan with --forbid tp")
    if w.gpus > w.pp:
        raise InputError(f"--emit device-map: the plan runs {w.gpus // w.pp} copies of the model (--gpus {w.gpus} "
                         f"--pp {w.pp}); device_map describes one: launch one process per copy with --emit "
                         "accelerate, or choose a plan with --gpus equal to --pp")
    if w.kv_dtype is not None:
        raise InputError(f"--emit device-map: the plan stores the KV cache in {w.kv_dtype} (--kv-dtype); "
                         f"from_pretrained has no KV-cache dtype: serve it with vLLM --kv-cache-dtype {w.kv_dtype}, "
                         "or choose a plan with --forbid kv-quant")
    if w.quantized in ("int4", "gptq-4bit", "awq-4bit"):
        raise InputError(f"--emit device-map: {w.quantized} weights come from a pre-quantized checkpoint whose "
                         "config.json carries its quantization_config: load that checkpoint with these settings "
                         "minus quantization, or choose a plan with --quant int8, nf4 or fp8")
    if w.quantized in AO_INFERENCE_QUANTS:
        raise InputError(f"--emit device-map: {w.quantized} weights are torchao's quantize_ applied after loading "
                         "(gpt-fast's generate.py), which from_pretrained's settings do not express: load with these "
                         "settings minus quantization and run quantize_, or choose a plan with --quant int8, nf4 or "
                         "fp8")
    b = plan.estimate.breakdown
    cap = plan.estimate.gpu.capacity_bytes if plan.estimate.gpu else b.device_total
    other = b.device_total - b["weights"]
    per_gpu = max(0, int(cap * 0.9) - other)  # 10% headroom kept, as the plan
    max_memory: dict[str, Any] = {str(i): f"{per_gpu // 2**20}MiB" for i in range(w.pp)}
    if cpu_ram:
        max_memory["cpu"] = f"{cpu_ram // 2**20}MiB"
    v = _transformers_version()
    legacy = legacy_names if legacy_names is not None else (v is None or v < (4, 56))
    out: dict[str, Any] = {"device_map": "auto", "max_memory": max_memory,
                 "torch_dtype" if legacy else "dtype": TORCH_DTYPE[w.dtype],
                 "attn_implementation": ATTN_IMPLEMENTATION[w.attention]}
    if w.quantized == "fp8":
        out["quantization_config"] = {"FineGrainedFP8Config": {}}  # quantizes on load (compute capability 8.9+)
    elif w.quantized is not None:
        out["quantization_config"] = {"BitsAndBytesConfig": bnb(plan)}
    return out


def alloc_conf(plan: Plan) -> str:
    """``PYTORCH_CUDA_ALLOC_CONF``: expandable segments let the allocator grow segments in place
    instead of caching differently sized blocks (PyTorch docs, "Optimizing memory usage with
    PYTORCH_CUDA_ALLOC_CONF"), which removes most fragmentation in training loops whose
    activation sizes vary. The plan's figure counts the default allocator's reserve, so it stays
    an upper bound under this setting. No ``garbage_collection_threshold``: it acts only under a
    memory fraction (``torch.cuda.set_per_process_memory_fraction``), which no plan sets."""
    return "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"


#: vramlens optimizer -> torchtune's ``optimizer._component_`` and its arguments (the recipes'
#: configs use torch.optim.AdamW with fused=True; bitsandbytes' optimizers for the 8-bit/paged ones).
TORCHTUNE_OPTIM: dict[str, tuple[str, dict[str, Any]]] = {
    "adamw": ("torch.optim.AdamW", {"fused": True, "weight_decay": ADAMW_WEIGHT_DECAY}),
    "adam": ("torch.optim.Adam", {"fused": True}),
    "sgd": ("torch.optim.SGD", {}),
    "sgd-momentum": ("torch.optim.SGD", {"momentum": 0.9}),
    "adamw-8bit": ("bitsandbytes.optim.AdamW8bit", {}),
    "paged-adamw": ("bitsandbytes.optim.PagedAdamW", {}),
    "paged-adamw-8bit": ("bitsandbytes.optim.PagedAdamW8bit", {}),
    # torchtune's memory_optimizations.rst: torchao's low-bit optimizers in every recipe, its
    # CPUOffloadOptimizer (base torch.optim.AdamW with fused=True) in single-device recipes
    "adamw-8bit-torchao": ("torchao.optim.AdamW8bit", {}),
    "adamw-4bit-torchao": ("torchao.optim.AdamW4bit", {}),
    "adamw-fp8-torchao": ("torchao.optim.AdamWFp8", {}),
    "adamw-cpu-offload-torchao": ("torchao.optim.CPUOffloadOptimizer", {"fused": True}),
}
#: Hugging Face attention projections -> torchtune's ``lora_attn_modules`` names.
TORCHTUNE_ATTN = {"q_proj": "q_proj", "k_proj": "k_proj", "v_proj": "v_proj", "o_proj": "output_proj"}
TORCHTUNE_MLP = ("gate_proj", "up_proj", "down_proj")
TORCHTUNE_CHUNKED_LOSS = "torchtune.modules.loss.CEWithChunkedOutputLoss"


def torchtune(plan: Plan) -> dict[str, Any]:
    """torchtune recipe config overrides: ``tune run RECIPE --config CONFIG key=value ...`` (or a YAML).

    The keys are the recipes' own (recipes/full_finetune_*.py, lora_finetune_*.py): batch_size,
    gradient_accumulation_steps, dtype, enable_activation_checkpointing,
    enable_activation_offloading, optimizer_in_bwd, the loss and optimizer components,
    ``tokenizer.max_seq_len``, and for LoRA ``model.lora_rank``/``lora_alpha``/``lora_attn_modules``/
    ``apply_lora_to_mlp``/``apply_lora_to_output`` (``model.quantize_base`` for QLoRA: torchao NF4).
    More than one GPU runs the distributed recipe (FSDP2, ``fsdp_cpu_offload`` for full offload);
    ``launch.nproc_per_node`` is torchrun's. CONFIG is the recipe config of your model.

    Raises:
        InputError: what torchtune's recipes do not run: autocast (they train in one dtype, bf16 or
            fp32), fp16, eager attention (they use SDPA), selective checkpointing, ZeRO, tensor or
            pipeline parallelism, optimizer-only offload, a fused linear loss, loss parallelism,
            LoRA on part of the MLP, an optimizer they do not ship.
    """
    w = _training(plan, "torchtune")
    refuse = []
    if w.amp is not None:
        refuse.append(f"trains with --amp {w.amp} (torchtune's recipes train in one dtype, no autocast or master "
                      "copy: --dtype bf16 or fp32)")
    if w.dtype == "fp16":
        refuse.append("keeps fp16 weights (torchtune supports bf16 and fp32)")
    if w.attention == "eager":
        refuse.append("uses eager attention (torchtune's attention is SDPA)")
    if w.checkpointing not in ("none", "full"):
        refuse.append(f"uses --checkpointing {w.checkpointing} (the recipes checkpoint whole layers)")
    if w.zero:
        refuse.append(f"uses ZeRO stage {w.zero} (torchtune shards with FSDP2: --fsdp)")
    if w.tp > 1 or w.pp > 1:
        refuse.append(f"splits the model with --tp {w.tp} --pp {w.pp}")
    if w.gpus > 1 and not w.fsdp:
        refuse.append(f"replicates the model on {w.gpus} GPUs without sharding (the distributed recipes use FSDP2)")
    if w.fsdp and w.fsdp_strategy == "hybrid":
        refuse.append("uses --fsdp-strategy hybrid")
    if w.offload == "optimizer":
        refuse.append("offloads only the optimizer states (fsdp_cpu_offload moves parameters and gradients too)")
    if w.offload == "all" and not w.fsdp:
        refuse.append("offloads without FSDP")
    if w.loss == "fused-linear":
        refuse.append("uses a fused linear cross-entropy (--loss fused-linear)")
    if not w.loss_upcast:
        refuse.append("computes the chunked loss in the logits' dtype (--no-loss-upcast, LitGPT's; torchtune's "
                      "CEWithChunkedOutputLoss upcasts each chunk)")
    if w.loss == "logits-sum":
        refuse.append("sums the logits instead of a loss (--loss logits-sum)")
    if w.loss_parallel:
        refuse.append("shards the loss (--loss-parallel, torchtitan's)")
    if w.compile and w.compile_scope == "model":
        refuse.append("compiles the whole model with its loss in one graph (torchtune's compile=True compiles each "
                      "layer: --compile-scope blocks)")
    if w.compiled_loss and w.loss_chunks == 1:
        refuse.append("compiles the plain loss on its own (--compile-scope blocks+loss, torchtitan's; torchtune "
                      "compiles only its chunked loss: --compile-scope blocks, or add --loss-chunks 8)")
    if w.optimizer not in TORCHTUNE_OPTIM:
        refuse.append(f"uses --optimizer {w.optimizer}")
    if w.fp8 and w.fp8_recipe != "tensorwise":
        # recipes/full_finetune_distributed.py calls convert_to_float8_training with its default config
        refuse.append(f"trains in float8 with the {w.fp8_recipe} recipe (torchtune's enable_fp8_training is tensorwise)")
    if w.fp8 and w.gpus == 1:
        # enable_fp8_training is read by recipes/full_finetune_distributed.py (torchao's convert_to_float8_training)
        refuse.append("trains in float8 on one GPU (torchtune's enable_fp8_training is in full_finetune_distributed)")
    targets = set(w.lora_targets)
    if w.method in VECTOR_METHODS or w.method in DELTA_METHODS:
        refuse.append(f"trains peft's {w.method} (torchtune's recipes train full weights, LoRA, QLoRA or DoRA)")
    if w.lora_fa:
        refuse.append("steps with peft's LoRA-FA optimizer (--lora-fa; torchtune's recipes have none)")
    if w.method == "adalora":
        refuse.append("trains peft's AdaLoRA (torchtune's recipes train full weights, LoRA, QLoRA or DoRA)")
    elif w.method != "full":
        if "all-linear" in targets:
            targets = set(TORCHTUNE_ATTN) | set(TORCHTUNE_MLP)
        mlp = targets & set(TORCHTUNE_MLP)
        if mlp and mlp != set(TORCHTUNE_MLP):
            refuse.append(f"adapts only {', '.join(sorted(mlp))} of the MLP (apply_lora_to_mlp adapts all three)")
        other = targets - set(TORCHTUNE_ATTN) - set(TORCHTUNE_MLP) - {"lm_head"}
        if other:
            refuse.append(f"adapts {', '.join(sorted(other))}, which torchtune's LoRA builders do not name")
    if refuse:
        raise InputError("--emit torchtune: the plan " + "; and ".join(refuse))
    distributed = w.gpus > 1
    recipe = ("full_finetune" if w.method == "full" else "lora_finetune") + ("_distributed" if distributed else "_single_device")
    component, args = TORCHTUNE_OPTIM[w.optimizer]
    out: dict[str, Any] = {
        "recipe": recipe,
        "batch_size": w.batch,
        "gradient_accumulation_steps": w.grad_accum,
        "dtype": w.dtype,
        "enable_activation_checkpointing": w.checkpointing == "full",
        "enable_activation_offloading": w.activation_offload,
        "optimizer_in_bwd": w.optimizer_in_backward,
        **({"enable_fp8_training": True} if w.fp8 else {}),
        # compile=True: training.compile_model compiles each layer (and a chunked loss): --compile-scope blocks
        "compile": w.compile,
        "tokenizer": {"max_seq_len": w.seq},
        "optimizer": {"_component_": component, **args},
        "loss": ({"_component_": TORCHTUNE_CHUNKED_LOSS, "num_output_chunks": w.loss_chunks} if w.loss_chunks > 1
                 else {"_component_": "torch.nn.CrossEntropyLoss"}),
    }
    if distributed:
        out["launch"] = {"nproc_per_node": w.gpus}
        out["fsdp_cpu_offload"] = w.offload == "all"
        out["fsdp_reshard_after_forward"] = w.fsdp_strategy == "full"
        if w.fsdp_units == "blocks+embed+output":
            # recipes/full_finetune_distributed.py (30b8519e) and lora_finetune_distributed.py (bd2a0fc7) pass it to
            # training.shard_model: the embedding and the output layer FSDP units of their own
            out["custom_sharded_layers"] = ["tok_embeddings", "output"]
    if w.method != "full":
        out["model"] = {
            "lora_rank": w.lora_rank, "lora_alpha": 2 * w.lora_rank,
            "lora_attn_modules": [TORCHTUNE_ATTN[t] for t in TORCHTUNE_ATTN if t in targets],
            "apply_lora_to_mlp": bool(targets & set(TORCHTUNE_MLP)),
            "apply_lora_to_output": "lm_head" in targets,
            "lora_dropout": w.lora_dropout,
            "quantize_base": w.method == "qlora",
        }
    return out


#: vramlens weight quantization -> vLLM's ``--quantization`` (vllm/model_executor/layers/quantization:
#: AWQ and GPTQ read pre-quantized checkpoints, fp8 quantizes on load, bitsandbytes quantizes to NF4 on load).
VLLM_QUANT = {"awq-4bit": "awq", "gptq-4bit": "gptq", "fp8": "fp8", "nf4": "bitsandbytes"}


def vllm(plan: Plan) -> dict[str, Any]:
    """``vllm serve`` flags for an inference plan: the batch as ``--max-num-seqs``, prompt plus new
    tokens as ``--max-model-len``, the dtype, weight and KV-cache quantization and the parallel layout.

    vLLM sizes its KV cache to fill ``--gpu-memory-utilization`` of each GPU: the value written is
    the plan's device total over the GPU's capacity, rounded up to a hundredth (at least 0.5), so
    vLLM keeps to the plan's footprint and turns what the plan leaves for transformers' cache and
    activations into its paged cache; ``vramlens capacity --engine vllm`` says how many tokens that
    holds.

    Raises:
        InputError: a training plan, or what vLLM cannot load as planned (int8/int4/fp4/nf4 with
            double quantization weights, an int8 or fp32 KV cache).
    """
    w = plan.workload
    if w.training:
        raise InputError("--emit vllm: the plan trains; vLLM serves models: use --emit trainer, torchtune, deepspeed or fsdp")
    refuse = []
    if w.quantized is not None and w.quantized not in VLLM_QUANT:
        refuse.append(f"keeps {w.quantized} weights (vLLM loads awq, gptq, fp8 and bitsandbytes NF4)")
    if w.kv_dtype not in (None, "fp8"):
        refuse.append(f"stores the KV cache in {w.kv_dtype} (vLLM's --kv-cache-dtype is auto, the model's "
                      "dtype, or fp8)")
    if refuse:
        raise InputError("--emit vllm: the plan " + "; and ".join(refuse))
    cap = plan.estimate.gpu.capacity_bytes if plan.estimate.gpu else plan.device_total
    util = max(0.5, min(0.99, -(-plan.device_total * 100 // cap) / 100))
    out: dict[str, Any] = {
        "model": plan.estimate.model.name,
        "dtype": TORCH_DTYPE[w.dtype],
        "max-model-len": w.seq + w.new_tokens,
        "max-num-seqs": w.batch,
        "tensor-parallel-size": w.tp,
        "pipeline-parallel-size": w.pp,
        "gpu-memory-utilization": util,
        "kv-cache-dtype": "fp8" if w.kv_dtype == "fp8" else "auto",
    }
    if w.gpus > w.tp * w.pp:
        out["data-parallel-size"] = w.gpus // (w.tp * w.pp)
    if w.quantized is not None:
        out["quantization"] = VLLM_QUANT[w.quantized]
    return out


#: vramlens optimizer -> torchtitan ``[optimizer] name`` (torchtitan/components/optimizer.py builds
#: ``torch.optim.<name>``; its ``implementation`` picks fused, foreach or the for-loop).
TORCHTITAN_OPTIM = {"adamw": "AdamW", "adam": "Adam"}
TORCHTITAN_IMPL = {"fused": "fused", "foreach": "foreach", "loop": "for-loop"}


def torchtitan(plan: Plan) -> dict[str, Any]:
    """A torchtitan job config (``torchtitan/config/job_config.py`` JobConfig sections and keys) for a
    full-parameter training plan, as TOML tables: ``train.py --job.config_file FILE``.

    torchtitan builds the model in fp32 and trains it as the plan says: ``mixed_precision_param``
    bfloat16 with FSDP is FSDP2's MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)
    (vramlens: --dtype fp32 --amp bf16 --fsdp), without sharding it is ``torch.autocast``
    (--dtype fp32 --amp bf16); float32 trains in fp32. ``local_batch_size`` is the per-GPU batch and
    ``global_batch_size`` = local x data-parallel degree x the plan's accumulation steps (torchtitan
    accumulates to reach it). Sharding: ``data_parallel_shard_degree`` (FSDP over the data-parallel
    GPUs; one node's under hybrid sharding, the rest in ``data_parallel_replicate_degree``),
    ``fsdp_reshard_after_forward = "never"`` for shard-grad-op; without FSDP the data-parallel GPUs
    replicate (DDP). ``[activation_checkpoint]``: none, full, or selective with ``selective_ac_option``
    "op" (--checkpointing selective-op) or N (--checkpointing every:N). ``disable_loss_parallel`` is
    the opposite of --loss-parallel under tensor parallelism; ``early_step_in_backward`` is
    --optimizer-in-backward; ``enable_cpu_offload`` is FSDP's parameter, gradient and optimizer offload;
    ``[model] converters = ["float8"]`` with ``[float8] filter_fqns = ["output"]`` is --fp8 (``recipe_name`` its
    --fp8-recipe rowwise or rowwise_with_gw_hp); ``converters = ["mx"]`` with ``[mx] recipe_name`` is
    --fp8-recipe mxfp8_cublas or mxfp8_cublas_rceil.

    Raises:
        InputError: what torchtitan's trainer cannot run as planned: inference, LoRA/QLoRA or
            quantized weights, half-precision storage, fp16, eager attention, optimizers other than
            AdamW/Adam, ZeRO, optimizer-only offload, pipeline parallelism (its schedules and
            microbatches are not mapped here), Megatron's selective recomputation, activation
            offloading, chunked or fused losses.
    """
    w = plan.workload
    if not w.training:
        raise InputError("--emit torchtitan: the plan is for inference; torchtitan trains models: use --emit vllm, "
                         "llama.cpp or device-map")
    refuse = []
    if w.method != "full" or w.quantized is not None:
        refuse.append(f"trains {w.method} adapters" + (f" over {w.quantized} weights" if w.quantized else "")
                      + " (torchtitan trains every parameter: use --emit torchtune or peft)")
    if w.dtype != "fp32":
        refuse.append(f"stores the weights in {w.dtype} (torchtitan keeps fp32 parameters and computes in "
                      "mixed_precision_param: plan with --dtype fp32 --amp bf16)")
    if w.amp not in (None, "bf16"):
        refuse.append(f"computes in {w.amp} (torchtitan's mixed_precision_param is bfloat16 or float32)")
    if w.attention == "eager":
        refuse.append("uses eager attention (torchtitan's models call SDPA or flex attention)")
    if w.optimizer not in TORCHTITAN_OPTIM:
        refuse.append(f"uses --optimizer {w.optimizer} (torchtitan builds torch.optim's AdamW or Adam)")
    if w.optimizer_impl not in TORCHTITAN_IMPL:
        refuse.append(f"uses --optimizer-impl {w.optimizer_impl} (torchtitan builds torch.optim's foreach, fused "
                      "or for-loop implementation)")
    if w.zero:
        refuse.append(f"uses ZeRO stage {w.zero} (torchtitan shards with FSDP2: plan with --fsdp)")
    if w.offload != "none" and not (w.fsdp and w.offload == "all"):
        refuse.append(f"offloads {w.offload} (torchtitan's enable_cpu_offload moves parameters, gradients and "
                      "optimizer states with FSDP2)")
    if w.tp > 1 and not w.fsdp and w.amp is not None:
        refuse.append("computes in bf16 under tensor parallelism without FSDP (torchtitan applies "
                      "mixed_precision_param through FSDP2, or autocast under DDP or one GPU only)")
    if w.fsdp and w.fsdp_strategy == "hybrid" and w.dp <= w.shard_degree:
        refuse.append(f"hybrid-shards {w.dp} GPUs of one node, which is full sharding (plan with --fsdp-strategy full)")
    if w.fsdp and w.shard_degree == 1:
        refuse.append("shards over one GPU (torchtitan turns FSDP off at data_parallel_shard_degree 1)")
    if w.fsdp and w.fsdp_units != "blocks":
        refuse.append(f"makes the embedding and output layer FSDP units of their own (--fsdp-units {w.fsdp_units}, "
                      "torchtune's custom_sharded_layers; torchtitan keeps [norm, output] gathered until its backward)")
    if w.pp > 1:
        refuse.append(f"pipelines over --pp {w.pp} stages (torchtitan's schedules and microbatches are not "
                      "mapped: choose a plan with --forbid pp)")
    if w.checkpointing == "selective":
        refuse.append("recomputes the attention core (--checkpointing selective, Megatron's); torchtitan's "
                      "selective modes are per-op (selective-op) and every N-th block (every:N)")
    if w.activation_offload or w.loss_chunks > 1 or w.loss == "fused-linear":
        refuse.append("offloads activations or chunks or fuses the loss (torchtune's and Liger's techniques)")
    if w.loss == "logits-sum":
        refuse.append("sums the logits instead of a loss (--loss logits-sum)")
    if w.compile and w.compile_scope == "model":
        refuse.append("compiles the whole model in one graph (torchtitan compiles each TransformerBlock and the "
                      "loss: --compile-scope blocks+loss, or blocks for the model alone)")
    if refuse:
        raise InputError("--emit torchtitan: the plan " + "; and ".join(refuse))
    if w.fsdp:
        shard = w.shard_degree
        replicate = w.dp // shard
    else:
        shard, replicate = 1, w.dp
    every = w.checkpoint_every
    ac: dict[str, Any] = {"mode": "none" if w.checkpointing == "none" else "full" if w.checkpointing == "full"
                          else "selective"}
    if ac["mode"] == "selective":
        ac["selective_ac_option"] = "op" if w.checkpointing == "selective-op" else str(every)
    out: dict[str, Any] = {
        "training": {"local_batch_size": w.batch, "global_batch_size": w.batch * w.dp * w.grad_accum,
                     "seq_len": w.seq, "mixed_precision_param": "bfloat16" if w.amp == "bf16" else "float32",
                     "mixed_precision_reduce": "float32", "enable_cpu_offload": w.offload == "all"},
        "parallelism": {"data_parallel_replicate_degree": replicate, "data_parallel_shard_degree": shard,
                        "fsdp_reshard_after_forward": "never" if w.fsdp and w.fsdp_strategy == "shard-grad-op"
                        else "default",
                        "tensor_parallel_degree": w.tp, "disable_loss_parallel": not w.loss_parallel,
                        "pipeline_parallel_degree": 1},
        "activation_checkpoint": ac,
        "optimizer": {"name": TORCHTITAN_OPTIM[w.optimizer], "implementation": TORCHTITAN_IMPL[w.optimizer_impl],
                      "early_step_in_backward": w.optimizer_in_backward},
    }
    if w.compiled_blocks:
        # torchtitan/config/job_config.py ``Compile`` (since #1608, August 2025): enable, components
        out["compile"] = {"enable": True, "components": ["model", "loss"] if w.compiled_loss else ["model"]}
    if w.fp8 and w.fp8_recipe.startswith("mxfp8"):
        # torchao's MX training through torchtitan's mx converter (--model.converters=mx --mx.recipe_name=..., as the
        # torchao B200 table ran it)
        out["model"] = {"converters": ["mx"]}
        out["mx"] = {"recipe_name": w.fp8_recipe}
    elif w.fp8:
        # torchtitan docs/float8.md: --model.converters="float8" swaps nn.Linear for torchao's Float8Linear;
        # filter_fqns keeps the output layer in bf16, as vramlens models it (the field's default is empty);
        # recipe_name (--float8.recipe_name) is written for the rowwise recipes only (absent: tensorwise)
        out["model"] = {"converters": ["float8"]}
        out["float8"] = {"filter_fqns": ["output"],
                         **({"recipe_name": w.fp8_recipe} if w.fp8_recipe != "tensorwise" else {})}
    return out


def _toml(d: dict[str, Any]) -> str:
    """TOML for tables of scalars and lists of strings (no dependency): strings quoted, booleans lower-case."""

    def value(v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, (int, float)):
            return str(v)
        if isinstance(v, (list, tuple)):
            return "[" + ", ".join(value(x) for x in v) + "]"
        return json.dumps(str(v))

    lines = ["# torchtitan job config: train.py --job.config_file THIS_FILE (add your [model] name and flavor)"]
    for table, values in d.items():
        lines.append(f"\n[{table}]")
        lines.extend(f"{k} = {value(v)}" for k, v in values.items())
    return "\n".join(lines)


#: vramlens dtype -> the GGUF file type that stores every tensor in it (llama.cpp ``llama_ftype``:
#: ALL_F32, MOSTLY_F16, MOSTLY_BF16) and the ``--cache-type-k/-v`` name of the same element type
#: (ggml ``type_traits``). The quantized GGUF types (Q8_0: 34 B per 32 values, the K-quant mixes)
#: are not any weights or cache the plan counts.
GGUF_TYPE = {"fp32": "F32", "fp16": "F16", "bf16": "BF16"}
LLAMACPP_CACHE = {"fp32": "f32", "fp16": "f16", "bf16": "bf16"}


def llamacpp(plan: Plan) -> dict[str, Any]:
    """``llama-server`` flags for an inference plan (llama.cpp's tools/server, common/arg.cpp names).

    The batch is ``--parallel`` (server slots, each decoding one sequence) and ``--ctx-size`` is
    batch x (prompt + new tokens): llama-server splits n_ctx evenly among its slots. The weights
    are a GGUF of the plan's dtype (F16, BF16 or F32) and the KV cache is stored in the plan's
    cache dtype (llama.cpp defaults to f16 whatever the weights, so it is always written). The
    plan's attention kernel becomes ``--flash-attn on|off``. Pipeline stages are llama.cpp's layer
    split over the GPUs (``--split-mode layer --tensor-split 1,1,...``), every layer on a GPU
    (``--n-gpu-layers 999``).

    llama.cpp's own buffers differ from transformers' (its compute buffer, its n_ctx padding):
    ``vramlens capacity --engine llama.cpp`` with these flags says what it will log.

    Raises:
        InputError: a training plan, or what llama.cpp cannot run as planned: quantized weights
            of another format than GGUF's (bitsandbytes, AWQ, GPTQ, fp8), an fp8 or int8 KV cache
            (its q8_0 cells are 8.5 bits), autocast, tensor parallelism, data-parallel copies.
    """
    w = plan.workload
    if w.training:
        raise InputError("--emit llama.cpp: the plan trains; llama.cpp serves models: use --emit trainer, torchtune, "
                         "deepspeed or fsdp")
    refuse = []
    if w.quantized is not None:
        refuse.append(f"keeps {w.quantized} weights (GGUF stores its own types: Q8_0 is 8.5 bits per weight, the "
                      "K-quants mix types per tensor; plan the GGUF with `vramlens capacity FILE.gguf --engine "
                      "llama.cpp`, or --weights-type q8_0 for a catalog model)")
    if w.amp is not None:
        refuse.append(f"computes under {w.amp} autocast over {w.dtype} weights (llama.cpp computes in the GGUF's "
                      "types: plan with --dtype and no --amp)")
    if w.kv_dtype is not None and w.kv_dtype not in LLAMACPP_CACHE:
        refuse.append(f"stores the KV cache in {w.kv_dtype} (llama.cpp's --cache-type-k/-v are f32, f16, bf16 and "
                      "the block types q8_0 at 8.5 bits and q4_0 at 4.5 bits)")
    if w.tp > 1:
        refuse.append(f"splits each layer over --tp {w.tp} GPUs (llama.cpp splits whole layers: --split-mode layer; "
                      "choose a plan with --forbid tp)")
    if w.gpus > w.tp * w.pp:
        refuse.append(f"runs {w.gpus // (w.tp * w.pp)} copies of the model (one llama-server runs one: start one "
                      "per GPU group)")
    if refuse:
        raise InputError("--emit llama.cpp: the plan " + "; and ".join(refuse))
    cache = LLAMACPP_CACHE[w.kv_dtype or w.compute_dtype]
    out: dict[str, Any] = {
        "model": f"{plan.estimate.model.name.rsplit('/', 1)[-1]}-{GGUF_TYPE[w.dtype]}.gguf",
        "ctx-size": w.batch * (w.seq + w.new_tokens),
        "parallel": w.batch,
        "n-gpu-layers": 999,
        "cache-type-k": cache,
        "cache-type-v": cache,
        "flash-attn": "off" if w.attention == "eager" else "on",
    }
    if w.pp > 1:
        out["split-mode"] = "layer"
        out["tensor-split"] = ",".join(["1"] * w.pp)
    return out


def llamacpp_settings(cfg: dict[str, Any]) -> dict[str, Any]:
    """The emitted flags as ``vramlens.capacity(engine="llama.cpp", **settings)`` takes them, to say
    what this llama-server will log (its model, KV and compute buffers)."""
    return {"gpus": len(str(cfg.get("tensor-split", "1")).split(",")), "ctx_size": cfg["ctx-size"],
            "parallel": cfg["parallel"], "n_gpu_layers": cfg["n-gpu-layers"], "cache_type_k": cfg["cache-type-k"],
            "cache_type_v": cfg["cache-type-v"], "flash_attn": cfg["flash-attn"] == "on",
            "weights_type": str(cfg["model"]).rsplit("-", 1)[-1].removesuffix(".gguf").lower()}


def llamacpp_command(cfg: dict[str, Any]) -> str:
    """The ``llama-server -m FILE --flag value ...`` line."""
    return " ".join(["llama-server", "-m", str(cfg["model"])] + [f"--{k} {v}" for k, v in cfg.items() if k != "model"])


def vllm_command(cfg: dict[str, Any]) -> str:
    """The ``vllm serve MODEL --flag value ...`` line."""
    return " ".join(["vllm", "serve", str(cfg["model"])] + [f"--{k} {v}" for k, v in cfg.items() if k != "model"])


def torchtune_command(cfg: dict[str, Any]) -> str:
    """The ``tune run`` line with the config as OmegaConf dot-list overrides (torchtune's CLI syntax)."""
    n = cfg.get("launch", {}).get("nproc_per_node")
    parts = ["tune", "run"] + (["--nproc_per_node", str(n)] if n else []) + [cfg["recipe"], "--config", "CONFIG"]

    def flat(prefix: str, v: Any) -> None:
        if isinstance(v, dict):
            for k, x in v.items():
                flat(f"{prefix}.{k}" if prefix else k, x)
        elif isinstance(v, bool):
            parts.append(f"{prefix}={v}")
        elif isinstance(v, list):
            parts.append(f"{prefix}=[{','.join(map(str, v))}]")
        else:
            parts.append(f"{prefix}={v}")

    flat("", {k: v for k, v in cfg.items() if k not in ("recipe", "launch")})
    return " ".join(parts)


def emit(plan: Plan, kind: str, **kw: Any) -> Any:
    """The config of ``plan`` for ``kind`` (one of KINDS), as data.

    Raises:
        InputError: an unknown kind, or a kind that does not apply to the plan (e.g. peft for full fine-tuning).
    """
    writers = {"trainer": trainer, "peft": peft, "bnb": bnb, "deepspeed": deepspeed, "accelerate": accelerate,
               "fsdp": fsdp, "device-map": device_map, "alloc-conf": alloc_conf, "torchtune": torchtune,
               "vllm": vllm, "llama.cpp": llamacpp, "torchtitan": torchtitan}
    if kind not in writers:
        raise InputError(f"--emit {kind!r} is not one of: {', '.join(KINDS)}")
    return writers[kind](plan, **kw)


#: The file a rendered config is saved as, by kind (the page's downloads).
FILE_NAMES = {"trainer": "training_args.json", "peft": "lora_config.json", "bnb": "bnb_config.json",
              "deepspeed": "ds_config.json", "accelerate": "accelerate_config.yaml", "fsdp": "fsdp_args.json",
              "device-map": "from_pretrained.json", "alloc-conf": "alloc_conf.env", "torchtune": "tune_run.sh",
              "vllm": "vllm_serve.sh", "llama.cpp": "llama_server.sh",
              "torchtitan": "torchtitan_job.toml"}


def configs(plan: Plan) -> dict[str, dict[str, str]]:
    """Every target that can express ``plan``: {kind: {"file": a file name, "text": what
    :func:`render` prints}}; the targets that refuse it are left out."""
    out = {}
    for kind in KINDS:
        try:
            out[kind] = {"file": FILE_NAMES[kind], "text": render(emit(plan, kind), kind)}
        except InputError:
            continue
    return out


def render(cfg: Any, kind: str) -> str:
    """Text to paste: YAML for accelerate, an environment line for alloc-conf, JSON otherwise."""
    if isinstance(cfg, str):
        return cfg
    if kind == "accelerate":
        return _yaml(cfg)
    if kind == "torchtune":
        return torchtune_command(cfg)
    if kind == "vllm":
        return vllm_command(cfg)
    if kind == "llama.cpp":
        return llamacpp_command(cfg)
    if kind == "torchtitan":
        return _toml(cfg)
    return json.dumps(cfg, indent=2)


def _yaml(d: dict[str, Any], indent: int = 0) -> str:
    """Minimal YAML for a flat-or-nested dict of scalars (no dependency)."""
    lines = []
    pad = "  " * indent
    for k, v in d.items():
        if isinstance(v, dict):
            lines.append(f"{pad}{k}:")
            lines.append(_yaml(v, indent + 1))
        elif isinstance(v, bool):
            lines.append(f"{pad}{k}: {'true' if v else 'false'}")
        elif isinstance(v, (int, float)):
            lines.append(f"{pad}{k}: {v}")
        else:
            lines.append(f"{pad}{k}: {json.dumps(str(v))}")
    return "\n".join(lines)
