"""Config writers: a plan as the settings a library reads.

Each writer returns plain data (dicts, strings) in the library's own names; :func:`render` turns
it into the text a user pastes (JSON, YAML, an environment line). Names follow the libraries'
documented parameters: ``transformers.TrainingArguments`` and ``BitsAndBytesConfig``,
``peft.LoraConfig``, the DeepSpeed config JSON (``zero_optimization``), the Accelerate config
file (``accelerate config``), ``from_pretrained(device_map=..., max_memory=...)`` and PyTorch's
``PYTORCH_CUDA_ALLOC_CONF`` (docs/source/notes/cuda.rst, "Optimizing memory usage").
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from vramlens.advise.plan import Plan
from vramlens.errors import InputError
from vramlens.workload import Workload

KINDS = ("trainer", "peft", "bnb", "deepspeed", "accelerate", "fsdp", "device-map", "alloc-conf")

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
}
TORCH_DTYPE = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}
#: DeepSpeed's documented defaults for the bucket sizes (deepspeed/runtime/zero/config.py).
DS_BUCKET = 500_000_000
DS_PREFETCH = 50_000_000
DS_PERSISTENCE_THRESHOLD = 100_000


def _training(plan: Plan, kind: str) -> Workload:
    w = plan.workload
    if not w.training:
        raise InputError(f"--emit {kind} writes training settings; the plan is for inference: use --emit device-map or bnb")
    return w


def _half_flags(w: Workload) -> dict[str, Any]:
    """TrainingArguments' bf16/fp16 mean autocast over fp32 weights (torch.autocast + GradScaler):
    true only for a plan with --dtype fp32 --amp X. A pure-half plan loads the model in that dtype
    (``from_pretrained(torch_dtype=...)``) and leaves both false."""
    autocast = w.dtype == "fp32" and w.amp is not None
    return {"bf16": autocast and w.amp == "bf16", "fp16": autocast and w.amp == "fp16"}


def _transformers_major() -> int | None:
    """The installed transformers' major version (metadata only, nothing imported), or None."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return int(version("transformers").split(".")[0])
    except (PackageNotFoundError, ValueError):
        return None


def trainer(plan: Plan, *, legacy_names: bool | None = None) -> dict[str, Any]:
    """``transformers.TrainingArguments`` keyword arguments (without ``output_dir``).

    transformers 5 names checkpointing ``activation_checkpointing`` (``gradient_checkpointing`` is a
    deprecated alias); 4.x accepts only ``gradient_checkpointing``. ``legacy_names=None`` follows
    the installed transformers (the old names when it is 4.x or absent: pyproject allows 4.45).

    Raises:
        InputError: half weights with an fp32 master copy (--dtype bf16 --amp bf16) without ZeRO:
            the Trainer keeps such a copy only through DeepSpeed.
    """
    w = _training(plan, "trainer")
    if w.optimizer == "none":
        raise InputError("--emit trainer: the plan has --optimizer none (forward and backward only); no Trainer settings")
    if w.dtype != "fp32" and w.amp is not None and not w.zero:
        raise InputError(f"--emit trainer: the plan keeps {w.dtype} weights with an fp32 master copy (--amp {w.amp}); "
                         "the Trainer does that only through DeepSpeed: choose a plan with --zero, or --dtype fp32 "
                         f"--amp {w.amp} (autocast, what bf16=True/fp16=True mean)")
    if legacy_names is None:
        major = _transformers_major()
        legacy_names = major is None or major < 5
    kw: dict[str, Any] = {
        "per_device_train_batch_size": w.batch,
        "gradient_accumulation_steps": w.grad_accum,
        **_half_flags(w),
        "optim": TRAINER_OPTIM[w.optimizer],
    }
    ckpt = "gradient_checkpointing" if legacy_names else "activation_checkpointing"
    kw[ckpt] = w.checkpointing != "none"
    if w.optimizer == "adam":
        kw["weight_decay"] = 0.0
    if w.optimizer == "sgd-momentum":
        kw["optim_args"] = "momentum=0.9"
    if w.checkpointing != "none":
        kw[ckpt + "_kwargs"] = {"use_reentrant": False}
    if w.fsdp:
        kw["fsdp"] = fsdp(plan)["fsdp"]
        kw["fsdp_config"] = fsdp(plan)["fsdp_config"]
    elif w.zero:
        kw["deepspeed"] = "ds_config.json"  # write it with: vramlens fit ... --emit deepspeed > ds_config.json
    return kw


def peft(plan: Plan) -> dict[str, Any]:
    """``peft.LoraConfig`` keyword arguments. lora_alpha = 2r, a common choice (peft's default is 8)."""
    w = plan.workload
    if w.method == "full":
        raise InputError("--emit peft: the plan trains every parameter (--method full); no LoRA settings")
    targets = list(w.lora_targets)
    kind = plan.estimate.model.kind
    return {
        "r": w.lora_rank,
        "lora_alpha": 2 * w.lora_rank,
        "target_modules": "all-linear" if targets == ["all-linear"] else targets,
        "lora_dropout": w.lora_dropout,
        "bias": "none",
        "task_type": {"decoder": "CAUSAL_LM", "encoder-decoder": "SEQ_2_SEQ_LM"}.get(kind, "FEATURE_EXTRACTION"),
    }


def bnb(plan: Plan) -> dict[str, Any]:
    """``transformers.BitsAndBytesConfig`` keyword arguments for int8 / nf4 / fp4 weights."""
    w = plan.workload
    q = w.quantized
    if q is None:
        raise InputError("--emit bnb: the plan keeps its weights unquantized; no BitsAndBytesConfig needed")
    if q == "int8":
        return {"load_in_8bit": True}
    if q in ("nf4", "nf4-dq", "fp4"):
        return {
            "load_in_4bit": True,
            "bnb_4bit_quant_type": "fp4" if q == "fp4" else "nf4",
            "bnb_4bit_use_double_quant": q == "nf4-dq",
            "bnb_4bit_compute_dtype": TORCH_DTYPE[w.compute_dtype],
        }
    raise InputError(f"--emit bnb: {q} weights come from a pre-quantized checkpoint (GPTQ/AWQ/torchao), "
                     "not from bitsandbytes: load that checkpoint instead")


def deepspeed(plan: Plan) -> dict[str, Any]:
    """A DeepSpeed config (the JSON ``deepspeed --deepspeed_config`` / ``TrainingArguments(deepspeed=)`` reads)."""
    w = _training(plan, "deepspeed")
    if w.dtype == "fp32" and w.amp is not None:
        raise InputError(f"--emit deepspeed: the plan is autocast (fp32 weights, --amp {w.amp}); DeepSpeed's "
                         f"{w.amp} mode keeps {w.amp} weights with an fp32 master copy instead: choose a plan with "
                         f"--dtype {w.amp} --amp {w.amp}, or --emit trainer/fsdp")
    if w.dtype != "fp32" and w.amp is None:
        raise InputError(f"--emit deepspeed: the plan trains pure {w.dtype} (no fp32 master weights); DeepSpeed's "
                         f"\"{w.dtype}\": {{\"enabled\": true}} keeps an fp32 master copy (more memory than the plan "
                         f"shows): choose a plan with --amp {w.dtype}, or --emit fsdp/trainer")
    stage = w.shard_stage
    zero: dict[str, Any] = {"stage": stage, "overlap_comm": True, "contiguous_gradients": True}
    if stage in (1, 2):
        zero.update(reduce_bucket_size=DS_BUCKET, allgather_bucket_size=DS_BUCKET, reduce_scatter=True)
    if stage == 3:
        zero.update(reduce_bucket_size=DS_BUCKET, stage3_prefetch_bucket_size=DS_PREFETCH,
                    stage3_param_persistence_threshold=DS_PERSISTENCE_THRESHOLD)
    if w.offload in ("optimizer", "all"):
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
    if w.offload == "all":
        zero["offload_param"] = {"device": "cpu", "pin_memory": True}
    c = w.compute_dtype
    return {
        "train_batch_size": w.effective_batch,
        "train_micro_batch_size_per_gpu": w.batch,
        "gradient_accumulation_steps": w.grad_accum,
        "bf16": {"enabled": c == "bf16"},
        "fp16": {"enabled": c == "fp16"},
        "zero_optimization": zero,
        "gradient_clipping": 1.0,
        "activation_checkpointing": {"partition_activations": False, "contiguous_memory_optimization": False}
        if w.checkpointing != "none" else {},
    }


def fsdp(plan: Plan) -> dict[str, Any]:
    """FSDP settings as TrainingArguments takes them (``fsdp`` string and ``fsdp_config``)."""
    w = _training(plan, "fsdp")
    if w.offload == "optimizer":
        raise InputError("--emit fsdp: the plan offloads only the optimizer states; FSDP's offload "
                         "(CPUOffload(offload_params=True)) moves the parameters too: choose a plan with "
                         "--offload all, or --emit deepspeed (offload_optimizer)")
    if w.fsdp:
        strategy = {"full": "full_shard", "shard-grad-op": "shard_grad_op", "hybrid": "hybrid_shard"}[w.fsdp_strategy]
    else:
        strategy = "full_shard" if w.shard_stage == 3 else ("shard_grad_op" if w.shard_stage == 2 else "no_shard")
    words = [strategy] + (["offload"] if w.offload == "all" else []) + ["auto_wrap"]
    return {
        "fsdp": " ".join(words),
        "fsdp_config": {
            "backward_prefetch": "backward_pre",
            "forward_prefetch": False,
            "use_orig_params": w.method != "full",  # needed when only some parameters train (LoRA)
            "sync_module_states": True,
            "cpu_ram_efficient_loading": True,
            "activation_checkpointing": w.checkpointing == "full",
        },
    }


def accelerate(plan: Plan, *, nodes: int = 1) -> dict[str, Any]:
    """An Accelerate config (what ``accelerate config`` writes to default_config.yaml)."""
    w = plan.workload
    c = w.compute_dtype
    mp = "bf16" if c == "bf16" else ("fp16" if c == "fp16" else "no")
    if w.training and w.fsdp:
        dist = "FSDP"
    elif w.training and w.zero:
        dist = "DEEPSPEED"
    elif w.gpus > 1:
        dist = "MULTI_GPU"
    else:
        dist = "NO"
    cfg: dict[str, Any] = {
        "compute_environment": "LOCAL_MACHINE",
        "distributed_type": dist,
        "mixed_precision": mp,
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
        deepspeed(plan)  # the same refusals: Accelerate's DeepSpeed plugin has the same precision modes
    if dist == "FSDP":
        f = fsdp(plan)
        strategy = f["fsdp"].split()[0].upper()
        cfg["fsdp_config"] = {
            "fsdp_sharding_strategy": strategy,
            "fsdp_offload_params": w.offload == "all",
            "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
            "fsdp_backward_prefetch": "BACKWARD_PRE",
            "fsdp_state_dict_type": "SHARDED_STATE_DICT",
            "fsdp_use_orig_params": f["fsdp_config"]["use_orig_params"],
            "fsdp_sync_module_states": True,
            "fsdp_cpu_ram_efficient_loading": True,
            "fsdp_activation_checkpointing": w.checkpointing == "full",
        }
    if dist == "DEEPSPEED":
        cfg["deepspeed_config"] = {
            "zero_stage": w.zero,
            "gradient_accumulation_steps": w.grad_accum,
            "offload_optimizer_device": "cpu" if w.offload != "none" else "none",
            "offload_param_device": "cpu" if w.offload == "all" else "none",
            "zero3_init_flag": w.zero == 3,
        }
    return cfg


def device_map(plan: Plan, *, cpu_ram: int | None = None) -> dict[str, Any]:
    """``from_pretrained`` keyword arguments: device_map, max_memory per GPU and torch_dtype.

    max_memory leaves room for the plan's KV cache, activations and runtime on each GPU, which
    Accelerate does not count when it places the weights.
    """
    w = plan.workload
    if w.training:
        raise InputError("--emit device-map: device_map places weights for inference (Accelerate's big-model "
                         "hooks); the plan trains: use --emit trainer, deepspeed, fsdp or accelerate")
    b = plan.estimate.breakdown
    cap = plan.estimate.gpu.capacity_bytes if plan.estimate.gpu else b.device_total
    other = b.device_total - b["weights"]
    per_gpu = max(0, int(cap * 0.9) - other)  # 10% headroom kept, as the plan
    max_memory: dict[str, Any] = {str(i): f"{per_gpu // 2**20}MiB" for i in range(max(1, w.gpus // max(1, w.tp)))}
    if cpu_ram:
        max_memory["cpu"] = f"{cpu_ram // 2**20}MiB"
    out: dict[str, Any] = {"device_map": "auto", "max_memory": max_memory, "torch_dtype": TORCH_DTYPE[w.dtype]}
    if w.quantized in ("int8", "nf4", "nf4-dq", "fp4"):
        out["quantization_config"] = {"BitsAndBytesConfig": bnb(plan)}
    return out


def alloc_conf(plan: Plan) -> str:
    """``PYTORCH_CUDA_ALLOC_CONF``: expandable segments let the allocator grow segments in place
    instead of caching differently sized blocks (PyTorch docs, "Optimizing memory usage with
    PYTORCH_CUDA_ALLOC_CONF"), which removes most fragmentation in training loops whose
    activation sizes vary; the reserve the estimate counts above live tensors is that waste."""
    b = plan.estimate.breakdown
    opts = ["expandable_segments:True"]
    gap = b.peak_reserved - b.peak_allocated
    if plan.estimate.gpu is not None and b.device_total > 0.85 * plan.estimate.gpu.capacity_bytes and gap:
        # little room left: release cached blocks before asking the driver again
        opts.append("garbage_collection_threshold:0.8")
    return "PYTORCH_CUDA_ALLOC_CONF=" + ",".join(opts)


def emit(plan: Plan, kind: str, **kw: Any) -> dict[str, Any] | str:
    """The config of ``plan`` for ``kind`` (one of KINDS), as data.

    Raises:
        InputError: an unknown kind, or a kind that does not apply to the plan (e.g. peft for full fine-tuning).
    """
    writers: dict[str, Callable[..., dict[str, Any] | str]] = {
        "trainer": trainer, "peft": peft, "bnb": bnb, "deepspeed": deepspeed, "accelerate": accelerate,
        "fsdp": fsdp, "device-map": device_map, "alloc-conf": alloc_conf}
    if kind not in writers:
        raise InputError(f"--emit {kind!r} is not one of: {', '.join(KINDS)}")
    return writers[kind](plan, **kw)


def render(cfg: dict[str, Any] | str, kind: str) -> str:
    """Text to paste: YAML for accelerate, an environment line for alloc-conf, JSON otherwise."""
    if isinstance(cfg, str):
        return cfg
    if kind == "accelerate":
        return _yaml(cfg)
    return json.dumps(cfg, indent=2)


def _yaml(d: dict[str, Any], indent: int = 0) -> str:
    """Minimal YAML for a flat-or-nested dict of scalars (no dependency)."""
    lines: list[str] = []
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
