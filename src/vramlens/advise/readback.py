"""The inverse of :mod:`vramlens.advise.emit`: an emitted config read back as a Workload.

``workload_from_emitted(kind, emit(plan, kind), base)`` is ``plan.workload`` on every field the
config sets (``read_emitted`` names them); the other fields come from ``base``. The tests estimate
the result and compare it with the plan's figure, so a config that describes another workload
than the plan's fails there.

What each config cannot say (it is the launcher's, the loader's or the model code's setting):
trainer: dtype of pure-half weights (``from_pretrained(dtype=)``), GPUs, ZeRO/offload (in the
DeepSpeed file); peft: the base method (lora or qlora: bnb says so); bnb: everything but the
quantization; deepspeed: checkpointing, the optimizer without offload (the Trainer's ``optim``),
tensor/pipeline layout (GPUs = dp x the base's tp x pp); fsdp: batch and optimizer (trainer);
accelerate: batch, optimizer, checkpointing outside FSDP; device-map: shapes and KV cache;
alloc-conf: no workload field (it sets the allocator: see :func:`alloc_conf_of`); torchtune:
the attention (its own SDPA: the plan's sdpa or flash); vllm: new tokens (``--max-model-len`` is
prompt plus new tokens: the prompt is read as that less the base's new tokens) and the attention;
llama.cpp: new tokens (as vLLM's: ``--ctx-size`` is slots x (prompt + new tokens)) and the attention
(``--flash-attn on`` is the plan's sdpa or flash); torchtitan: the attention (its models' own SDPA),
the model (its ``[model]`` flavor is yours to add).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from vramlens.allocator.config import AllocatorConfig

from vramlens.advise.emit import (
    ATTN_IMPLEMENTATION,
    DS_OPTIM,
    GGUF_TYPE,
    KINDS,
    LLAMACPP_CACHE,
    TORCH_DTYPE,
    TORCHTITAN_IMPL,
    TORCHTITAN_OPTIM,
    TORCHTUNE_ATTN,
    TORCHTUNE_CHUNKED_LOSS,
    TORCHTUNE_MLP,
    TORCHTUNE_OPTIM,
    TRAINER_OPTIM,
    VLLM_QUANT,
)
from vramlens.errors import InputError
from vramlens.workload import Workload

_DTYPE = {v: k for k, v in TORCH_DTYPE.items()}
_ATTN = {v: k for k, v in ATTN_IMPLEMENTATION.items()}
#: TrainingArguments ``optim`` -> vramlens optimizer; adam/adamw and sgd/sgd-momentum are told
#: apart by weight_decay and optim_args below.
_OPTIM = {v: k for k, v in TRAINER_OPTIM.items() if k not in ("adam", "sgd-momentum")}
_FSDP1 = {"full_shard": "full", "shard_grad_op": "shard-grad-op", "hybrid_shard": "hybrid"}


def _trainer(c: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"mode": "train", "batch": c["per_device_train_batch_size"],
                 "grad_accum": c.get("gradient_accumulation_steps", 1)}
    opt = _OPTIM[c["optim"]]
    if opt == "adamw" and c.get("weight_decay", 0.0) == 0.0:
        opt = "adam"  # AdamW without decay
    if opt == "sgd" and "momentum" in str(c.get("optim_args") or ""):
        opt = "sgd-momentum"
    out["optimizer"] = opt
    ckpt = c.get("activation_checkpointing", c.get("gradient_checkpointing", False))
    if "fsdp_config" in c:
        out.update(_fsdp(c))
        ckpt = ckpt or out.pop("checkpointing") == "full"
    out["checkpointing"] = "full" if ckpt else "none"
    out["compile"] = bool(c.get("torch_compile", False))
    half = "bf16" if c.get("bf16") else ("fp16" if c.get("fp16") else None)
    if c.get("deepspeed"):
        # DeepSpeed's half mode: half weights, fp32 master copy; the ZeRO settings are in its own file
        out.update(dtype=half or "fp32", amp=half)
    elif half:
        out.update(dtype="fp32", amp=half)  # autocast over fp32 weights
    else:
        out["amp"] = None  # weights in the dtype the model was loaded in
    return out


def _peft(c: Mapping[str, Any]) -> dict[str, Any]:
    t = c["target_modules"]
    return {"lora_rank": c["r"], "lora_targets": (t,) if isinstance(t, str) else tuple(t),
            "lora_dropout": c.get("lora_dropout", 0.0), "dora": bool(c.get("use_dora", False))}


def _bnb(c: Mapping[str, Any]) -> dict[str, Any]:
    if c.get("load_in_8bit"):
        return {"quant": "int8"}
    if c.get("load_in_4bit"):
        if c.get("bnb_4bit_quant_type", "fp4") == "fp4":
            return {"quant": "fp4"}
        return {"quant": "nf4-dq" if c.get("bnb_4bit_use_double_quant") else "nf4"}
    raise InputError("a BitsAndBytesConfig without load_in_8bit or load_in_4bit quantizes nothing")


def _deepspeed(c: Mapping[str, Any], base: Workload) -> dict[str, Any]:
    z = c.get("zero_optimization", {})
    b, m = c["train_micro_batch_size_per_gpu"], c.get("gradient_accumulation_steps", 1)
    dp, rest = divmod(c["train_batch_size"], b * m)
    if rest:
        raise InputError(f"train_batch_size={c['train_batch_size']} is not micro-batch {b} x accumulation {m} x GPUs")
    half = "bf16" if c.get("bf16", {}).get("enabled") else ("fp16" if c.get("fp16", {}).get("enabled") else None)
    offload = "all" if "offload_param" in z else ("optimizer" if "offload_optimizer" in z else "none")
    out = {"mode": "train", "batch": b, "grad_accum": m, "gpus": dp * base.tp * base.pp, "zero": z.get("stage", 0),
           "fsdp": False, "offload": offload, "dtype": half or "fp32", "amp": half,
           "zero_buckets": "auto" if z.get("reduce_bucket_size") == "auto" else "default"}
    if "optimizer" in c:
        kind, params = c["optimizer"]["type"], c["optimizer"].get("params", {})
        out["optimizer"] = next(k for k, (t, p) in DS_OPTIM.items() if t == kind and all(
            params.get(key) == v for key, v in p.items()))
    return out


def _fsdp(c: Mapping[str, Any]) -> dict[str, Any]:
    f, fc = c["fsdp"], c["fsdp_config"]
    out: dict[str, Any] = {"mode": "train", "fsdp": True, "zero": 0,
                 "checkpointing": "full" if fc.get("activation_checkpointing") else "none"}
    if isinstance(f, str):  # FSDP1's words (transformers 4.x)
        words = f.split()
        out["fsdp_strategy"] = next(_FSDP1[x] for x in words if x in _FSDP1)
        out["offload"] = "all" if "offload" in words else "none"
    else:
        out["fsdp_strategy"] = "full" if fc.get("reshard_after_forward", True) else "shard-grad-op"
        out["offload"] = "all" if fc.get("cpu_offload") else "none"
    return out


def _accelerate(c: Mapping[str, Any]) -> dict[str, Any]:
    dist = c["distributed_type"]
    mp = c.get("mixed_precision", "no")
    amp = None if mp == "no" else mp
    out: dict[str, Any] = {"gpus": c["num_processes"], "tp": 1, "pp": 1, "amp": amp}
    if dist == "DEEPSPEED":
        d = c["deepspeed_config"]
        offload = ("all" if d.get("offload_param_device", "none") != "none"
                   else "optimizer" if d.get("offload_optimizer_device", "none") != "none" else "none")
        out.update(mode="train", dtype=amp or "fp32", zero=d["zero_stage"], fsdp=False, offload=offload,
                   grad_accum=d.get("gradient_accumulation_steps", 1))
        return out
    if amp:
        out["dtype"] = "fp32"  # autocast over fp32 weights
    if dist == "FSDP":
        fc = c["fsdp_config"]
        out.update(mode="train", fsdp=True, zero=0, offload="all" if fc.get("fsdp_offload_params") else "none",
                   fsdp_strategy=_FSDP1[fc["fsdp_sharding_strategy"].lower()],
                   checkpointing="full" if fc.get("fsdp_activation_checkpointing") else "none")
    else:
        out.update(zero=0, fsdp=False)
    return out


def _device_map(c: Mapping[str, Any]) -> dict[str, Any]:
    gpus = sum(1 for k in c["max_memory"] if k != "cpu")
    out: dict[str, Any] = {"mode": "inference", "dtype": _DTYPE[c.get("dtype", c.get("torch_dtype"))], "gpus": gpus, "tp": 1,
                 "pp": gpus, "attention": _ATTN[c.get("attn_implementation", "sdpa")], "kv_dtype": None, "quant": None}
    q = c.get("quantization_config")
    if q:
        (cls, kw), = q.items()
        out["quant"] = "fp8" if cls == "FineGrainedFP8Config" else _bnb(kw)["quant"]
    return out


def _torchtune(c: Mapping[str, Any]) -> dict[str, Any]:
    recipe = c["recipe"]
    distributed = recipe.endswith("_distributed")
    given = {k: v for k, v in c["optimizer"].items() if k not in ("_component_", "fused")}
    opt = next(k for k, (comp, args) in TORCHTUNE_OPTIM.items()
               if comp == c["optimizer"]["_component_"] and {a: v for a, v in args.items() if a != "fused"} == given)
    loss = c["loss"]
    out: dict[str, Any] = {
        "mode": "train", "batch": c["batch_size"], "grad_accum": c["gradient_accumulation_steps"],
        "dtype": c["dtype"], "amp": None,
        "checkpointing": "full" if c["enable_activation_checkpointing"] else "none",
        "activation_offload": bool(c["enable_activation_offloading"]),
        "optimizer_in_backward": bool(c["optimizer_in_bwd"]), "optimizer": opt,
        "seq": c["tokenizer"]["max_seq_len"], "loss": "cross-entropy", "loss_parallel": False,
        "loss_chunks": loss["num_output_chunks"] if loss["_component_"] == TORCHTUNE_CHUNKED_LOSS else 1,
        "zero": 0, "tp": 1, "pp": 1,
        "gpus": c["launch"]["nproc_per_node"] if distributed else 1, "fsdp": distributed,
        "offload": "all" if c.get("fsdp_cpu_offload") else "none",
        "compile": bool(c.get("compile", False)),
    }
    if out["compile"]:
        out["compile_scope"] = "blocks"  # training.compile_model: each layer on its own
    if distributed:
        out["fsdp_strategy"] = "full" if c.get("fsdp_reshard_after_forward", True) else "shard-grad-op"
        if sorted(c.get("custom_sharded_layers") or ()) == ["output", "tok_embeddings"]:
            out["fsdp_units"] = "blocks+embed+output"
    if recipe.startswith("lora_"):
        m = c["model"]
        attn = {v: k for k, v in TORCHTUNE_ATTN.items()}
        targets = [attn[x] for x in m["lora_attn_modules"]]
        if m["apply_lora_to_mlp"]:
            targets += list(TORCHTUNE_MLP)
        if m["apply_lora_to_output"]:
            targets.append("lm_head")
        out.update(method="qlora" if m.get("quantize_base") else "lora", lora_rank=m["lora_rank"],
                   lora_targets=tuple(targets), lora_dropout=m.get("lora_dropout", 0.0))
    else:
        out["method"] = "full"
    return out


def _vllm(c: Mapping[str, Any], base: Workload) -> dict[str, Any]:
    dp = c.get("data-parallel-size", 1)
    quant = {v: k for k, v in VLLM_QUANT.items()}
    kv = c["kv-cache-dtype"]
    return {"mode": "inference", "batch": c["max-num-seqs"], "seq": c["max-model-len"] - base.new_tokens,
            "dtype": _DTYPE[c["dtype"]], "tp": c["tensor-parallel-size"], "pp": c["pipeline-parallel-size"],
            "gpus": c["tensor-parallel-size"] * c["pipeline-parallel-size"] * dp,
            "quant": quant[c["quantization"]] if "quantization" in c else None,
            "kv_dtype": "fp8" if kv == "fp8" else None}


def _llamacpp(c: Mapping[str, Any], base: Workload) -> dict[str, Any]:
    ftype = str(c["model"]).rsplit("-", 1)[-1].removesuffix(".gguf")
    dtype = {v: k for k, v in GGUF_TYPE.items()}[ftype]
    cache = {v: k for k, v in LLAMACPP_CACHE.items()}
    if c["cache-type-k"] != c["cache-type-v"]:
        raise InputError(f"--cache-type-k {c['cache-type-k']} and --cache-type-v {c['cache-type-v']} differ: "
                         "a workload has one KV-cache dtype")
    kv = cache[c["cache-type-k"]]
    slots = int(c["parallel"])
    pp = len(str(c["tensor-split"]).split(",")) if "tensor-split" in c else 1
    out = {"mode": "inference", "batch": slots, "seq": int(c["ctx-size"]) // slots - base.new_tokens,
           "dtype": dtype, "quant": None, "tp": 1, "pp": pp, "gpus": pp}
    out["kv_dtype"] = None if kv == dtype else kv  # inference without autocast computes in the weights' dtype
    if c.get("flash-attn") == "off":
        out["attention"] = "eager"
    return out


def _torchtitan(c: Mapping[str, Any]) -> dict[str, Any]:
    t, p, ac, o = c["training"], c["parallelism"], c["activation_checkpoint"], c["optimizer"]
    shard, rep, tp = p["data_parallel_shard_degree"], p["data_parallel_replicate_degree"], p["tensor_parallel_degree"]
    if shard < 1 or p.get("pipeline_parallel_degree", 1) != 1:
        raise InputError("a torchtitan config with data_parallel_shard_degree -1 (the rest of the GPUs) or pipeline "
                         "stages names no GPU count here: give the degrees")
    fsdp = shard > 1
    strategy = "full"
    if fsdp and p.get("fsdp_reshard_after_forward") == "never":
        strategy = "shard-grad-op"
    elif fsdp and rep > 1:
        strategy = "hybrid"
    mode = ac["mode"]
    option = str(ac.get("selective_ac_option", "2"))
    checkpointing = mode if mode in ("none", "full") else "selective-op" if option == "op" else f"every:{option}"
    dp = shard * rep
    return {"mode": "train", "method": "full", "quant": None, "batch": t["local_batch_size"],
            "grad_accum": t["global_batch_size"] // (t["local_batch_size"] * dp), "seq": t["seq_len"],
            "dtype": "fp32", "amp": "bf16" if t["mixed_precision_param"] == "bfloat16" else None,
            "fsdp": fsdp, "fsdp_strategy": strategy, "zero": 0, "gpus": dp * tp, "tp": tp, "pp": 1,
            "offload": "all" if t.get("enable_cpu_offload") else "none", "checkpointing": checkpointing,
            "optimizer": {v: k for k, v in TORCHTITAN_OPTIM.items()}[o["name"]],
            "optimizer_impl": {v: k for k, v in TORCHTITAN_IMPL.items()}[o["implementation"]],
            "optimizer_in_backward": bool(o.get("early_step_in_backward", False)),
            "loss_parallel": tp > 1 and not p.get("disable_loss_parallel", False),
            **_torchtitan_fp8(c),
            **_torchtitan_compile(c.get("compile", {}))}


def _torchtitan_fp8(c: Mapping[str, Any]) -> dict[str, Any]:
    """torchtitan's float8 and mx converters: --fp8 and its recipe (``[float8] recipe_name``, absent: tensorwise;
    ``[mx] recipe_name``)."""
    converters = c.get("model", {}).get("converters", [])
    if "mx" in converters:
        return {"fp8": True, "fp8_recipe": c.get("mx", {}).get("recipe_name", "mxfp8_cublas")}
    if "float8" in converters:
        return {"fp8": True, "fp8_recipe": c.get("float8", {}).get("recipe_name", "tensorwise")}
    return {"fp8": False, "fp8_recipe": "tensorwise"}


def _torchtitan_compile(comp: Mapping[str, Any]) -> dict[str, Any]:
    """torchtitan's ``[compile]`` (enable; components, default ["model", "loss"]): each TransformerBlock and,
    with "loss", the loss compiled on its own."""
    if not comp.get("enable", False):
        return {"compile": False, "compile_scope": "model"}  # Workload's default: nothing is compiled
    components = comp.get("components", ["model", "loss"])
    if "model" not in components:
        raise InputError("a torchtitan [compile] without \"model\" in components (the loss alone) is not modelled: "
                         "add \"model\"")
    return {"compile": True, "compile_scope": "blocks+loss" if "loss" in components else "blocks"}


def read_emitted(kind: str, config: Any, base: Workload | None = None) -> dict[str, Any]:
    """The Workload fields an emitted ``config`` of ``kind`` sets, by name.

    Args:
        kind: one of :data:`vramlens.advise.emit.KINDS`.
        config: what :func:`vramlens.advise.emit.emit` returned (a dict, or alloc-conf's string).
        base: the workload the config runs in; deepspeed reads its tp and pp to count GPUs.

    Raises:
        InputError: an unknown kind, or a config that names no workload (e.g. a BitsAndBytesConfig
            that quantizes nothing).
    """
    base = base or Workload()
    if kind == "trainer":
        return _trainer(config)
    if kind == "peft":
        return _peft(config)
    if kind == "bnb":
        return _bnb(config)
    if kind == "deepspeed":
        return _deepspeed(config, base)
    if kind == "fsdp":
        return _fsdp(config)
    if kind == "accelerate":
        return _accelerate(config)
    if kind == "device-map":
        return _device_map(config)
    if kind == "alloc-conf":
        alloc_conf_of(config)
        return {}
    if kind == "torchtune":
        return _torchtune(config)
    if kind == "vllm":
        return _vllm(config, base)
    if kind == "llama.cpp":
        return _llamacpp(config, base)
    if kind == "torchtitan":
        return _torchtitan(config)
    raise InputError(f"{kind!r} is not one of: {', '.join(KINDS)}")


def workload_from_emitted(kind: str, config: Any, base: Workload) -> Workload:
    """The workload an emitted config describes: the inverse of :func:`vramlens.advise.emit.emit`.

    Fields the config sets (:func:`read_emitted`) come from it, the rest from ``base``. A QLoRA
    base keeps ``quant=None`` for bitsandbytes' nf4 with double quantization, which QLoRA implies.

    Raises:
        InputError: an unknown kind or an unreadable config; ConfigError when the result is not a
            valid workload.
    """
    from vramlens.errors import VramlensError
    from vramlens.limits import show

    try:
        read = read_emitted(kind, config, base)
    except VramlensError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as e:  # not the shape --emit writes
        raise InputError(f"--emit {kind} config {show(config)} is not what vramlens wrote ({type(e).__name__}: "
                         f"{show(str(e))}): pass the object vramlens.advise.emit.emit returns") from None
    if base.method == "qlora" and read.get("quant") == "nf4-dq":
        read["quant"] = None
    return base.replace(**read)


def alloc_conf_of(line: str) -> AllocatorConfig:
    """The AllocatorConfig an emitted ``PYTORCH_CUDA_ALLOC_CONF=...`` line sets (PyTorch's parsing rules)."""
    from vramlens.allocator.config import parse_alloc_conf

    name, _, value = line.partition("=")
    if name != "PYTORCH_CUDA_ALLOC_CONF":
        raise InputError(f"{line!r} does not set PYTORCH_CUDA_ALLOC_CONF")
    return parse_alloc_conf(value)
