"""Round trip of every --emit target: config -> the real library -> Workload -> estimate = the plan's.

Each emitted config is loaded by its library where it is installed (TrainingArguments, peft's
LoraConfig, BitsAndBytesConfig, DeepSpeed's DeepSpeedConfig, Accelerate's ClusterConfig,
parse_alloc_conf), its values are read back from the loaded object, mapped to a Workload with
``read_emitted``/``workload_from_emitted``, and estimated: the workload must be the plan's on every
field the config sets, and the estimate's device total the plan's figure. Targets that cannot
express a plan must refuse it naming what they cannot express.
"""

from __future__ import annotations

import dataclasses
from unittest import mock

import pytest
from advise_specs import llama7b, tiny

from vramlens.advise import fit
from vramlens.advise.emit import KINDS, emit, render
from vramlens.advise.readback import alloc_conf_of, read_emitted, workload_from_emitted
from vramlens.errors import InputError
from vramlens.estimator import estimate_spec
from vramlens.hardware.catalog import get_gpu
from vramlens.workload import Workload

#: Fields each target must set (more where the plan uses them: read_emitted says which).
MUST = {
    "trainer": {"batch", "grad_accum", "optimizer", "checkpointing", "amp", "compile"},
    "peft": {"lora_rank", "lora_targets", "lora_dropout", "dora"},
    "bnb": {"quant"},
    "deepspeed": {"batch", "grad_accum", "gpus", "zero", "zero_buckets", "offload", "dtype", "amp"},
    "fsdp": {"fsdp", "fsdp_strategy", "offload", "checkpointing"},
    "accelerate": {"gpus", "amp"},
    "device-map": {"dtype", "quant", "attention", "gpus", "pp"},
    "alloc-conf": set(),
    "vllm": {"batch", "seq", "dtype", "quant", "kv_dtype", "tp", "pp", "gpus"},
    "llama.cpp": {"batch", "seq", "dtype", "quant", "kv_dtype", "tp", "pp", "gpus"},
    "torchtitan": {"batch", "grad_accum", "seq", "dtype", "amp", "fsdp", "fsdp_strategy", "gpus", "tp", "pp",
                   "checkpointing", "optimizer", "optimizer_impl", "optimizer_in_backward", "loss_parallel", "offload",
                   "method", "zero", "quant", "compile", "compile_scope", "fp8", "fp8_recipe"},
    "torchtune": {"batch", "grad_accum", "dtype", "amp", "checkpointing", "activation_offload", "optimizer_in_backward",
                  "optimizer", "seq", "loss_chunks", "gpus", "fsdp", "offload", "method", "compile"},
}
#: A value other than any a plan uses, per field: the base the read-back config must overwrite.
OTHER = {"batch": 999, "grad_accum": 77, "optimizer": "adafactor", "checkpointing": "selective", "amp": "fp16",
         "dtype": "fp16", "lora_rank": 3, "lora_targets": ("o_proj",), "lora_dropout": 0.5, "quant": "gptq-4bit",
         "gpus": 96, "zero": 1, "offload": "none", "fsdp": False, "fsdp_strategy": "hybrid", "attention": "eager",
         "pp": 3, "tp": 1, "mode": "train", "kv_dtype": "int8", "activation_offload": True,
         "optimizer_in_backward": True, "seq": 333, "loss_chunks": 5, "loss": "fused-linear", "loss_parallel": True,
         "method": "qlora", "dora": True, "optimizer_impl": "loop", "compile": True, "compile_scope": "model", "zero_buckets": "auto",
         "fp8": True, "fp8_recipe": "mxfp8_cublas_rceil", "fsdp_units": "blocks"}


def _plan(model, gpu: str, **kw):
    r = fit(model, Workload(**kw).validated(), get_gpu(gpu), max_plans=1)
    assert r.already_fits, r.message  # the workload as given is the plan
    return r.plans[0]


# ---- the libraries' own reading of each config ----------------------------------------------------------

def _via_trainer(cfg: dict, tmp_path, deepspeed_cfg: dict | None = None) -> dict:
    transformers = pytest.importorskip("transformers")
    kw = {k: v for k, v in cfg.items() if k != "deepspeed"}
    if cfg.get("fp16") and not cfg.get("deepspeed"):
        return cfg  # fp16 autocast needs a GPU: TrainingArguments refuses it on this machine
    args = transformers.TrainingArguments(output_dir=str(tmp_path), use_cpu=True, report_to="none", **kw)
    out = {"per_device_train_batch_size": args.per_device_train_batch_size,
           "gradient_accumulation_steps": args.gradient_accumulation_steps, "bf16": args.bf16, "fp16": args.fp16,
           "optim": str(getattr(args.optim, "value", args.optim)), "weight_decay": args.weight_decay,
           "optim_args": args.optim_args, "activation_checkpointing": args.activation_checkpointing,
           "torch_compile": args.torch_compile, "deepspeed": cfg.get("deepspeed")}
    if "fsdp" in cfg:
        out.update(fsdp=cfg["fsdp"], fsdp_config=_fsdp_config_as_read(args, cfg))
    return out


def _fsdp_config_as_read(args, cfg: dict) -> dict:
    """The fsdp_config keys the Trainer hands to Accelerate's FSDP plugin, as it parsed them."""
    fc = args.fsdp_config
    for key in cfg["fsdp_config"]:
        assert key in fc, f"TrainingArguments dropped fsdp_config[{key!r}]"
    return {k: fc[k] for k in cfg["fsdp_config"]}


def _via_peft(cfg: dict) -> dict:
    peft = pytest.importorskip("peft")
    c = peft.LoraConfig(**cfg)
    t = c.target_modules
    return {"r": c.r, "target_modules": t if isinstance(t, str) else sorted(t), "lora_dropout": c.lora_dropout,
            "use_dora": c.use_dora}


def _via_bnb(cfg: dict) -> dict:
    transformers = pytest.importorskip("transformers")
    c = transformers.BitsAndBytesConfig(**cfg)  # constructed only: quantizing needs bitsandbytes and CUDA
    if "bnb_4bit_compute_dtype" in cfg:
        assert str(c.bnb_4bit_compute_dtype) == "torch." + cfg["bnb_4bit_compute_dtype"]
    return {"load_in_8bit": c.load_in_8bit, "load_in_4bit": c.load_in_4bit, "bnb_4bit_quant_type": c.bnb_4bit_quant_type,
            "bnb_4bit_use_double_quant": c.bnb_4bit_use_double_quant}


class _DataParallel:
    """The model-parallel unit DeepSpeed asks for its data-parallel world size (no process group here)."""

    def __init__(self, dp: int):
        self.dp = dp

    def get_data_parallel_world_size(self) -> int:
        return self.dp

    def get_model_parallel_world_size(self) -> int:
        return 1

    def get_data_parallel_rank(self) -> int:
        return 0

    def get_model_parallel_rank(self) -> int:
        return 0


def _via_deepspeed(cfg: dict, dp: int) -> dict:
    pytest.importorskip("deepspeed")
    from deepspeed.runtime import config as ds_config
    from deepspeed.runtime.config import DeepSpeedConfig

    # no process group here: the rank comes from the stub, the data-parallel size from the mpu
    with mock.patch.object(ds_config.dist, "get_rank", lambda *a, **k: 0):
        c = DeepSpeedConfig(cfg, mpu=_DataParallel(dp))  # pydantic models: unknown keys and bad batch splits raise
    z = c.zero_config
    out: dict = {"train_batch_size": c.train_batch_size, "train_micro_batch_size_per_gpu": c.train_micro_batch_size_per_gpu,
                 "gradient_accumulation_steps": c.gradient_accumulation_steps, "bf16": {"enabled": c.bfloat16_config.enabled},
                 "fp16": {"enabled": c.float16_config.enabled}, "zero_optimization": {"stage": int(c.zero_optimization_stage)}}
    if z.offload_optimizer is not None and str(getattr(z.offload_optimizer.device, "value", z.offload_optimizer.device)) == "cpu":
        out["zero_optimization"]["offload_optimizer"] = {}
    if z.offload_param is not None and str(getattr(z.offload_param.device, "value", z.offload_param.device)) == "cpu":
        out["zero_optimization"]["offload_param"] = {}
    if c.optimizer_name is not None:
        name = next(t for t in ("AdamW", "Adam", "Lion") if t.lower() == c.optimizer_name)
        out["optimizer"] = {"type": name, "params": c.optimizer_params}
    return out


def _via_accelerate(cfg: dict, tmp_path) -> dict:
    pytest.importorskip("accelerate")
    from accelerate.commands.config.config_args import ClusterConfig

    path = tmp_path / "default_config.yaml"
    path.write_text(render(cfg, "accelerate"))
    c = ClusterConfig.from_yaml_file(str(path))
    out = {"distributed_type": str(getattr(c.distributed_type, "value", c.distributed_type)),
           "mixed_precision": str(getattr(c.mixed_precision, "value", c.mixed_precision)),
           "num_processes": c.num_processes}
    if cfg.get("fsdp_config"):
        out["fsdp_config"] = c.fsdp_config
    if cfg.get("deepspeed_config"):
        out["deepspeed_config"] = c.deepspeed_config
    return out


def _via_device_map(cfg: dict) -> dict:
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    assert isinstance(getattr(torch, cfg.get("dtype", cfg.get("torch_dtype"))), torch.dtype)
    for cls, kw in cfg.get("quantization_config", {}).items():
        getattr(transformers, cls)(**kw)  # the class from_pretrained(quantization_config=) takes
    assert cfg["attn_implementation"] in ("eager", "sdpa", "flash_attention_2")
    return cfg


def _as_loaded(kind: str, cfg, plan, tmp_path):
    """``cfg`` as its library read it (the same values, or the test fails there)."""
    if kind == "trainer":
        return _via_trainer(cfg, tmp_path)
    if kind == "fsdp":
        return {k: v for k, v in _via_trainer({"per_device_train_batch_size": 1, "optim": "adamw_torch", **cfg},
                                             tmp_path).items() if k in cfg}
    if kind == "peft":
        return _via_peft(cfg)
    if kind == "bnb":
        return _via_bnb(cfg)
    if kind == "deepspeed":
        return _via_deepspeed(cfg, plan.workload.dp)
    if kind == "accelerate":
        return _via_accelerate(cfg, tmp_path)
    if kind == "device-map":
        return _via_device_map(cfg)
    if kind == "torchtune":
        return _via_torchtune_overrides(cfg)
    if kind == "vllm":
        return _via_vllm_command(cfg)
    if kind == "llama.cpp":
        return _via_llamacpp_command(cfg)
    if kind == "torchtitan":
        return _via_torchtitan_toml(cfg)
    c = alloc_conf_of(cfg)
    assert c.expandable_segments and c.garbage_collection_threshold == 0.0
    return cfg


#: The keys torchtune's recipes read (recipes/full_finetune_*.py, lora_finetune_*.py) and its LoRA
#: builders' arguments (torchtune/models/*/_component_builders.py lora_*): torchtune is not installed here.
TORCHTUNE_KEYS = {"recipe", "launch", "batch_size", "gradient_accumulation_steps", "dtype",
                  "enable_activation_checkpointing", "enable_activation_offloading", "optimizer_in_bwd", "compile",
                  "tokenizer", "optimizer", "loss", "fsdp_cpu_offload", "fsdp_reshard_after_forward", "model",
                  "custom_sharded_layers"}
TORCHTUNE_LORA = {"lora_rank", "lora_alpha", "lora_attn_modules", "apply_lora_to_mlp", "apply_lora_to_output",
                  "lora_dropout", "quantize_base"}


#: ``vllm serve`` flags (vllm/engine/arg_utils.py EngineArgs.add_cli_args): vLLM is not installed here.
VLLM_FLAGS = {"dtype", "max-model-len", "max-num-seqs", "tensor-parallel-size", "pipeline-parallel-size",
              "data-parallel-size", "gpu-memory-utilization", "kv-cache-dtype", "quantization"}


def _via_vllm_command(cfg: dict) -> dict:
    """The command line split back into flags, each one vLLM's, values typed as its parser types them."""
    from vramlens.advise.emit import vllm_command

    words = vllm_command(cfg).split()
    assert words[:3] == ["vllm", "serve", cfg["model"]]
    out: dict = {"model": words[2]}
    for flag, value in zip(words[3::2], words[4::2], strict=True):
        assert flag.startswith("--") and flag[2:] in VLLM_FLAGS, flag
        key = flag[2:]
        out[key] = float(value) if key == "gpu-memory-utilization" else (int(value) if value.isdigit() else value)
    assert 0.5 <= out["gpu-memory-utilization"] <= 0.99
    return out


#: ``llama-server`` flags (llama.cpp common/arg.cpp, the long names): llama.cpp is not installed here.
LLAMACPP_FLAGS = {"ctx-size", "parallel", "n-gpu-layers", "cache-type-k", "cache-type-v", "flash-attn", "split-mode",
                  "tensor-split"}


def _via_llamacpp_command(cfg: dict) -> dict:
    """The command line split back into flags, each one llama-server's, with its documented values."""
    from vramlens.advise.emit import llamacpp_command

    words = llamacpp_command(cfg).split()
    assert words[:3] == ["llama-server", "-m", cfg["model"]] and words[2].endswith(".gguf")
    out: dict = {"model": words[2]}
    for flag, value in zip(words[3::2], words[4::2], strict=True):
        assert flag.startswith("--") and flag[2:] in LLAMACPP_FLAGS, flag
        out[flag[2:]] = int(value) if value.isdigit() else value
    assert out["flash-attn"] in ("on", "off", "auto")
    assert {out["cache-type-k"], out["cache-type-v"]} <= {"f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl",
                                                          "q5_0", "q5_1"}
    assert out.get("split-mode", "layer") in ("none", "layer", "row")
    return out


#: torchtitan's JobConfig sections and the keys the emitted file may set (torchtitan/config/job_config.py:
#: Training, Parallelism, ActivationCheckpoint, Optimizer): torchtitan is not installed here.
TORCHTITAN_KEYS = {
    "training": {"local_batch_size", "global_batch_size", "seq_len", "mixed_precision_param", "mixed_precision_reduce",
                 "enable_cpu_offload", "compile", "steps", "max_norm"},
    "parallelism": {"data_parallel_replicate_degree", "data_parallel_shard_degree", "fsdp_reshard_after_forward",
                    "tensor_parallel_degree", "disable_loss_parallel", "pipeline_parallel_degree",
                    "context_parallel_degree", "expert_parallel_degree"},
    "activation_checkpoint": {"mode", "selective_ac_option"},
    "optimizer": {"name", "lr", "beta1", "beta2", "eps", "weight_decay", "implementation", "early_step_in_backward"},
    "compile": {"enable", "components", "backend"},  # torchtitan/config/job_config.py Compile (#1608, August 2025)
    "model": {"name", "flavor", "converters"},
    "float8": {"enable_fsdp_float8_all_gather", "precompute_float8_dynamic_scale_for_fsdp", "filter_fqns",
               "recipe_name"},
    "mx": {"recipe_name"},  # --mx.recipe_name, as torchao's B200 table ran it (torchtitan 6fc499f6)
}


def _via_torchtitan_toml(cfg: dict) -> dict:
    """The rendered file parsed as TOML (tomllib), its tables and keys checked against torchtitan's
    JobConfig and their values against its Literal choices."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    from vramlens.advise.emit import render

    read = tomllib.loads(render(cfg, "torchtitan"))
    assert set(read) <= set(TORCHTITAN_KEYS)
    for table, keys in read.items():
        assert set(keys) <= TORCHTITAN_KEYS[table], set(keys) - TORCHTITAN_KEYS[table]
    assert read["training"]["mixed_precision_param"] in ("bfloat16", "float32")
    assert read["parallelism"]["fsdp_reshard_after_forward"] in ("default", "always", "never")
    assert read["activation_checkpoint"]["mode"] in ("selective", "full", "none")
    assert read["optimizer"]["implementation"] in ("for-loop", "foreach", "fused")
    assert set(read.get("compile", {}).get("components", [])) <= {"model", "loss"}
    return read


def _via_torchtune_overrides(cfg: dict) -> dict:
    """The command line's dot-list overrides parsed back (OmegaConf's syntax, by hand), keys checked."""
    import ast

    from vramlens.advise.emit import torchtune_command

    words = torchtune_command(cfg).split()
    assert words[:2] == ["tune", "run"]
    out: dict = {"recipe": cfg["recipe"]}
    if words[2] == "--nproc_per_node":
        out["launch"] = {"nproc_per_node": int(words[3])}
    for word in words:
        if "=" not in word:
            continue
        key, value = word.split("=", 1)
        if value.startswith("["):
            v: object = [x for x in value[1:-1].split(",") if x]
        elif value in ("True", "False"):
            v = value == "True"
        else:
            try:
                v = ast.literal_eval(value)
            except (ValueError, SyntaxError):
                v = value
        node = out
        *parents, leaf = key.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = v
    assert set(out) <= TORCHTUNE_KEYS, set(out) - TORCHTUNE_KEYS
    assert set(out.get("model", {})) <= TORCHTUNE_LORA
    return out


# ---- the round trip ------------------------------------------------------------------------------------

def _expected(w: Workload, name: str):
    return w.quantized if name == "quant" else getattr(w, name)


def _unordered(read: dict) -> dict:
    """peft keeps target_modules as a set: compare module names without their order."""
    return {k: tuple(sorted(v)) if k == "lora_targets" else v for k, v in read.items()}


def check_round_trip(plan, kind: str, tmp_path) -> None:
    w = plan.workload
    cfg = emit(plan, kind)
    read = _unordered(read_emitted(kind, _as_loaded(kind, cfg, plan, tmp_path), w))
    assert read == _unordered(read_emitted(kind, cfg, w)), f"{kind}: the library reads the config otherwise"
    assert MUST[kind] <= set(read), f"{kind} leaves out {MUST[kind] - set(read)}"
    for name, v in read.items():
        got = tuple(sorted(v)) if name == "lora_targets" else v
        want = tuple(sorted(w.lora_targets)) if name == "lora_targets" else _expected(w, name)
        assert got == want, f"--emit {kind}: {name}={v!r}, the plan has {want!r}"
    base = dataclasses.replace(w, **{f: OTHER[f] for f in read if OTHER[f] != getattr(w, f)})
    back = workload_from_emitted(kind, cfg, base)
    assert dataclasses.replace(back, lora_targets=tuple(sorted(back.lora_targets))) == \
        dataclasses.replace(w, lora_targets=tuple(sorted(w.lora_targets)))
    e = estimate_spec(plan.estimate.model, back, plan.estimate.gpu)
    assert e.breakdown.device_total == plan.device_total


def check_refusal(plan, kind: str) -> None:
    with pytest.raises(InputError) as e:
        emit(plan, kind)
    msg = str(e.value)
    assert msg.startswith(f"--emit {kind}: ") and ("the plan" in msg or "weights" in msg), msg


TRAIN = dict(mode="train", batch=2, seq=256)


@pytest.mark.parametrize("kind,w", [
    ("trainer", dict(TRAIN, dtype="fp32", amp="bf16", optimizer="adamw", checkpointing="full", grad_accum=4)),
    ("trainer", dict(TRAIN, dtype="bf16", optimizer="adam")),
    ("trainer", dict(TRAIN, dtype="bf16", compile=True)),  # TrainingArguments(torch_compile=True)
    ("trainer", dict(TRAIN, dtype="fp32", amp="fp16", optimizer="sgd-momentum")),
    ("trainer", dict(TRAIN, dtype="bf16", amp="bf16", gpus=2, zero=2, optimizer="adamw")),
    ("trainer", dict(TRAIN, dtype="fp32", amp="bf16", gpus=2, fsdp=True, checkpointing="full")),
    ("trainer", dict(TRAIN, dtype="bf16", optimizer="adamw-8bit-torchao")),
    ("trainer", dict(TRAIN, dtype="fp32", amp="bf16", optimizer="adamw-4bit-torchao")),
    ("peft", dict(TRAIN, method="lora", lora_rank=8, lora_targets=("q_proj", "k_proj", "v_proj"), lora_dropout=0.05)),
    ("peft", dict(TRAIN, method="qlora", lora_targets=("all-linear",))),
    ("peft", dict(TRAIN, method="lora", lora_targets=("q_proj", "v_proj"), lora_dropout=0.1, dora=True)),
    ("bnb", dict(TRAIN, method="qlora")),
    ("bnb", dict(TRAIN, method="lora", quant="int8")),
    ("bnb", dict(mode="inference", quant="fp4")),
    ("bnb", dict(mode="inference", quant="nf4")),
    ("deepspeed", dict(TRAIN, dtype="bf16", amp="bf16", gpus=4, zero=3, offload="all", grad_accum=2)),
    ("deepspeed", dict(TRAIN, dtype="fp16", amp="fp16", gpus=2, zero=2, offload="optimizer", optimizer="adam")),
    ("deepspeed", dict(TRAIN, dtype="fp32", gpus=2, zero=1)),
    ("fsdp", dict(TRAIN, dtype="fp32", amp="bf16", gpus=4, fsdp=True, offload="all", checkpointing="full")),
    ("fsdp", dict(TRAIN, dtype="bf16", gpus=2, fsdp=True, fsdp_strategy="shard-grad-op")),
    ("accelerate", dict(TRAIN, dtype="fp32", amp="bf16", gpus=4, fsdp=True, fsdp_strategy="hybrid")),
    ("accelerate", dict(TRAIN, dtype="bf16", amp="bf16", gpus=2, zero=3, offload="optimizer")),
    ("accelerate", dict(TRAIN, dtype="bf16", gpus=2)),
    ("accelerate", dict(mode="inference", gpus=2)),
    ("device-map", dict(mode="inference", gpus=2, pp=2, attention="eager")),
    ("device-map", dict(mode="inference", quant="nf4-dq", dtype="fp16")),
    ("device-map", dict(mode="inference", quant="fp8")),
    ("alloc-conf", dict(TRAIN)),
    ("vllm", dict(mode="inference", batch=8, seq=512, new_tokens=64)),
    ("vllm", dict(mode="inference", gpus=4, tp=2, pp=2, quant="awq-4bit", kv_dtype="fp8", dtype="fp16")),
    ("vllm", dict(mode="inference", gpus=2, quant="fp8")),
    ("llama.cpp", dict(mode="inference", batch=4, seq=1000, new_tokens=24, dtype="fp16")),
    ("llama.cpp", dict(mode="inference", dtype="bf16", kv_dtype="fp16", attention="eager")),
    ("llama.cpp", dict(mode="inference", dtype="fp32", gpus=2, pp=2)),
    ("torchtune", dict(TRAIN, dtype="bf16", checkpointing="full", activation_offload=True, loss_chunks=8)),
    ("torchtune", dict(TRAIN, dtype="bf16", optimizer_in_backward=True, optimizer="adamw")),
    ("torchtune", dict(TRAIN, dtype="bf16", method="lora", lora_rank=8,
                       lora_targets=("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"))),
    ("torchtune", dict(TRAIN, dtype="bf16", method="qlora", optimizer="paged-adamw-8bit")),
    ("torchtune", dict(TRAIN, dtype="bf16", gpus=4, fsdp=True, offload="all", grad_accum=2)),
    ("torchtune", dict(TRAIN, dtype="fp32", gpus=2, fsdp=True, fsdp_strategy="shard-grad-op", optimizer="sgd-momentum")),
    ("torchtune", dict(TRAIN, dtype="bf16", optimizer="adamw-8bit-torchao", optimizer_in_backward=True)),
    ("torchtune", dict(TRAIN, dtype="bf16", method="lora", optimizer="adamw-4bit-torchao")),
    ("torchtune", dict(TRAIN, dtype="bf16", gpus=2, fsdp=True, optimizer="adamw-fp8-torchao")),
    ("torchtune", dict(TRAIN, dtype="bf16", compile=True, compile_scope="blocks", loss_chunks=8)),
    ("torchtitan", dict(TRAIN, dtype="fp32", amp="bf16", gpus=4, fsdp=True, checkpointing="selective-op")),
    ("torchtitan", dict(TRAIN, dtype="fp32", amp="bf16", gpus=2, checkpointing="every:2", grad_accum=4)),
    ("torchtitan", dict(TRAIN, dtype="fp32", amp="bf16", gpus=4, tp=2, fsdp=True, loss_parallel=True,
                        checkpointing="full")),
    ("torchtitan", dict(TRAIN, dtype="fp32", optimizer="adam", optimizer_impl="loop", optimizer_in_backward=True)),
    ("torchtitan", dict(TRAIN, dtype="fp32", amp="bf16", gpus=2, fsdp=True, offload="all")),
    ("torchtitan", dict(TRAIN, dtype="fp32", amp="bf16", gpus=2, fsdp=True, fsdp_strategy="shard-grad-op",
                        optimizer_impl="fused")),
    ("torchtitan", dict(TRAIN, dtype="fp32", amp="bf16", gpus=16, fsdp=True, fsdp_strategy="hybrid")),
    ("torchtitan", dict(TRAIN, dtype="fp32", amp="bf16", gpus=4, fsdp=True, compile=True, compile_scope="blocks+loss",
                        checkpointing="selective-op")),
    ("torchtitan", dict(TRAIN, dtype="fp32", amp="bf16", gpus=4, fsdp=True, compile=True, compile_scope="blocks")),
    ("torchtitan", dict(TRAIN, dtype="fp32", amp="bf16", gpus=4, fsdp=True, fp8=True)),
    ("torchtitan", dict(TRAIN, dtype="fp32", amp="bf16", gpus=4, fsdp=True, fp8=True, fp8_recipe="rowwise")),
    ("torchtitan", dict(TRAIN, dtype="fp32", amp="bf16", gpus=4, fsdp=True, fp8=True, fp8_recipe="mxfp8_cublas")),
    ("torchtune", dict(TRAIN, dtype="bf16", checkpointing="full", optimizer="adamw-cpu-offload-torchao")),
])
def test_each_target_reproduces_its_plan(kind, w, tmp_path):
    check_round_trip(_plan(tiny(), "H100-SXM-80GB", **w), kind, tmp_path)


def test_torchtune_custom_sharded_layers_round_trip(tmp_path):
    # the embedding and output layer units of their own need an untied output layer (tiny() ties it)
    from vramlens.models.catalog import catalog_spec

    w = dict(TRAIN, dtype="bf16", gpus=8, fsdp=True, offload="all", fsdp_units="blocks+embed+output")
    check_round_trip(_plan(catalog_spec("llama-2-7b"), "A100-80GB", **w), "torchtune", tmp_path)
    plan = _plan(catalog_spec("llama-2-7b"), "A100-80GB", **{**w, "offload": "none"})
    for kind in ("fsdp", "accelerate", "trainer"):
        with pytest.raises(InputError) as e:
            emit(plan, kind)
        assert str(e.value) == (f"--emit {kind}: the plan makes the embedding and output layer FSDP units of their "
                                "own (--fsdp-units blocks+embed+output, torchtune's custom_sharded_layers), which "
                                f"{kind} settings cannot: use --emit torchtune, or plan with --fsdp-units blocks")


@pytest.mark.parametrize("kind,w,names", [
    ("trainer", dict(TRAIN, dtype="bf16", amp="bf16"), "fp32 master copy"),
    ("trainer", dict(TRAIN, gpus=2, tp=2), "--tp 2 --pp 1"),
    ("trainer", dict(TRAIN, checkpointing="selective"), "--checkpointing selective"),
    ("trainer", dict(TRAIN, checkpointing="selective-op"), 'selective_ac_option = "op"'),
    ("fsdp", dict(TRAIN, gpus=2, fsdp=True, checkpointing="every:2"), 'selective_ac_option = "2"'),
    ("trainer", dict(TRAIN, optimizer="none"), "--optimizer none"),
    ("trainer", dict(TRAIN, dtype="bf16", gpus=2, zero=2), "pure bf16"),
    ("deepspeed", dict(TRAIN, dtype="bf16", gpus=2, zero=2), "pure bf16"),
    ("deepspeed", dict(TRAIN, dtype="fp32", amp="bf16", gpus=2, zero=2), "autocast"),
    ("deepspeed", dict(TRAIN, dtype="bf16", amp="bf16", gpus=2, zero=2, offload="optimizer", optimizer="adamw-8bit"),
     "--optimizer adamw-8bit"),
    ("deepspeed", dict(TRAIN, gpus=2, fsdp=True), "FSDP"),
    ("fsdp", dict(TRAIN, gpus=2, zero=3, dtype="bf16", amp="bf16"), "ZeRO stage 3"),
    ("fsdp", dict(TRAIN, gpus=2, fsdp=True, offload="optimizer"), "only the optimizer states"),
    ("fsdp", dict(TRAIN, gpus=2, fsdp=True, dtype="bf16", amp="bf16"), "fp32 master copy"),
    ("fsdp", dict(TRAIN, gpus=2, fsdp=True, fsdp_strategy="hybrid"), "--fsdp-strategy hybrid"),
    ("accelerate", dict(mode="inference", gpus=2, tp=2), "--tp 2"),
    ("device-map", dict(TRAIN), "the plan trains"),
    ("device-map", dict(mode="inference", gpus=2, tp=2), "--tp 2"),
    ("device-map", dict(mode="inference", gpus=2), "2 copies"),
    ("device-map", dict(mode="inference", kv_dtype="fp8"), "--kv-dtype"),
    ("device-map", dict(mode="inference", quant="awq-4bit"), "pre-quantized"),
    ("peft", dict(TRAIN), "--method full"),
    ("bnb", dict(TRAIN), "unquantized"),
    ("trainer", dict(TRAIN, optimizer_in_backward=True), "--optimizer-in-backward"),
    ("trainer", dict(TRAIN, activation_offload=True), "--activation-offload"),
    ("trainer", dict(TRAIN, loss_chunks=8), "--loss-chunks 8"),
    ("trainer", dict(TRAIN, loss="fused-linear"), "--loss fused-linear"),
    ("trainer", dict(TRAIN, gpus=2, tp=2, loss_parallel=True), "--loss-parallel"),
    ("deepspeed", dict(TRAIN, dtype="bf16", amp="bf16", gpus=2, zero=2, activation_offload=True),
     "--activation-offload"),
    ("fsdp", dict(TRAIN, gpus=2, fsdp=True, loss_chunks=8), "--loss-chunks 8"),
    ("accelerate", dict(TRAIN, gpus=2, optimizer_in_backward=True), "--optimizer-in-backward"),
    ("torchtune", dict(TRAIN, dtype="fp32", amp="bf16"), "no autocast"),
    ("torchtune", dict(TRAIN, dtype="bf16", attention="eager"), "eager attention"),
    ("torchtune", dict(TRAIN, dtype="bf16", gpus=2), "without sharding"),
    ("torchtune", dict(TRAIN, dtype="bf16", gpus=2, zero=2), "ZeRO stage 2"),
    ("torchtune", dict(TRAIN, dtype="bf16", method="lora", lora_targets=("q_proj", "up_proj")), "apply_lora_to_mlp"),
    ("torchtune", dict(TRAIN, dtype="bf16", loss="fused-linear"), "fused linear"),
    ("torchtune", dict(mode="inference"), "inference"),
    ("torchtune", dict(TRAIN, dtype="bf16", compile=True), "--compile-scope blocks"),
    ("trainer", dict(TRAIN, dtype="bf16", compile=True, compile_scope="blocks"), "--compile-scope blocks"),
    ("vllm", dict(TRAIN), "the plan trains"),
    ("vllm", dict(mode="inference", quant="int8"), "int8 weights"),
    ("vllm", dict(mode="inference", kv_dtype="int8"), "KV cache in int8"),
    ("torchtitan", dict(mode="inference"), "inference"),
    ("torchtitan", dict(TRAIN, method="lora"), "lora adapters"),
    ("torchtitan", dict(TRAIN, dtype="bf16"), "stores the weights in bf16"),
    ("torchtitan", dict(TRAIN, dtype="fp32", attention="eager"), "eager attention"),
    ("torchtitan", dict(TRAIN, dtype="fp32", optimizer="sgd"), "--optimizer sgd"),
    ("torchtitan", dict(TRAIN, dtype="fp32", amp="bf16", gpus=2, zero=2), "ZeRO stage 2"),
    ("torchtitan", dict(TRAIN, dtype="fp32", gpus=2, pp=2), "--pp 2"),
    ("torchtitan", dict(TRAIN, dtype="fp32", checkpointing="selective", attention="eager"), "attention core"),
    ("torchtitan", dict(TRAIN, dtype="fp32", activation_offload=True), "offloads activations"),
    ("torchtitan", dict(TRAIN, dtype="fp32", amp="bf16", gpus=2, tp=2), "without FSDP"),
    ("torchtitan", dict(TRAIN, dtype="fp32", amp="bf16", gpus=4, fsdp=True, fsdp_strategy="hybrid"), "full sharding"),
    ("trainer", dict(TRAIN, dtype="fp32", checkpointing="every:2"), "--emit torchtitan"),
    ("llama.cpp", dict(TRAIN), "the plan trains"),
    ("llama.cpp", dict(mode="inference", quant="int8"), "int8 weights"),
    ("llama.cpp", dict(mode="inference", quant="awq-4bit"), "awq-4bit weights"),
    ("llama.cpp", dict(mode="inference", kv_dtype="fp8"), "KV cache in fp8"),
    ("llama.cpp", dict(mode="inference", dtype="fp32", amp="bf16"), "autocast"),
    ("llama.cpp", dict(mode="inference", gpus=2, tp=2), "--tp 2"),
    ("llama.cpp", dict(mode="inference", gpus=2), "2 copies"),
    ("trainer", dict(TRAIN, dtype="bf16", optimizer="adamw-fp8-torchao"), "AdamWFp8 has no TrainingArguments optim"),
    ("trainer", dict(TRAIN, dtype="bf16", optimizer="adamw-cpu-offload-torchao"), "CPUOffloadOptimizer has no"),
    ("torchtune", dict(TRAIN, dtype="bf16", gpus=2, optimizer="adamw-cpu-offload-torchao"), "without sharding"),
])
def test_targets_refuse_what_they_cannot_express(kind, w, names):
    plan = _plan(tiny(), "H100-SXM-80GB", **w)
    check_refusal(plan, kind)
    with pytest.raises(InputError, match=names.replace("-", r"\-")):
        emit(plan, kind)


def test_trainer_fsdp_checkpointing_goes_in_fsdp_config():
    """transformers 5 advises FSDP's own checkpointing over the Trainer's with FSDP: one of them, not both."""
    cfg = emit(_plan(tiny(), "H100-SXM-80GB", **dict(TRAIN, dtype="fp32", amp="bf16", gpus=2, fsdp=True,
                                                      checkpointing="full")), "trainer", legacy_names=False)
    assert cfg["activation_checkpointing"] is False and cfg["fsdp_config"]["activation_checkpointing"] is True
    assert cfg["fsdp"] is True and cfg["fsdp_config"]["version"] == 2


def test_legacy_fsdp_names_read_back():
    plan = _plan(tiny(), "H100-SXM-80GB", **dict(TRAIN, dtype="fp32", amp="bf16", gpus=4, fsdp=True,
                                                  fsdp_strategy="hybrid", offload="all"))
    cfg = emit(plan, "fsdp", legacy_names=True)
    assert cfg["fsdp"] == "hybrid_shard offload auto_wrap"
    assert workload_from_emitted("fsdp", cfg, plan.workload.replace(fsdp_strategy="full", offload="none")) \
        == plan.workload


hypothesis = pytest.importorskip("hypothesis")
st = hypothesis.strategies


@st.composite
def fit_questions(draw):
    """Small fit questions whose plans use remedies: a 7B model on smaller GPUs, a tiny one anywhere."""
    model = draw(st.sampled_from(["llama-2-7b", "tiny"]))
    gpu = draw(st.sampled_from(["RTX-4090", "A100-40GB", "A100-80GB", "H100-SXM-80GB"]))
    mode = draw(st.sampled_from(["train", "inference"]))
    w: dict = {"mode": mode, "batch": draw(st.sampled_from([1, 4, 8])), "seq": draw(st.sampled_from([512, 2048]))}
    if mode == "train":
        w["method"] = draw(st.sampled_from(["full", "lora", "qlora"]))
    else:
        w["new_tokens"] = 128
    gpus = draw(st.sampled_from([1, 2, 4]))
    return model, Workload(**w).validated(), gpu, gpus, draw(st.sampled_from([None, "memory"]))


@pytest.mark.slow
@hypothesis.settings(max_examples=12, deadline=None, derandomize=True,
                     suppress_health_check=[hypothesis.HealthCheck.function_scoped_fixture])
@hypothesis.given(fit_questions())
def test_every_plan_round_trips_or_is_refused(tmp_path, question):
    model, w, gpu, gpus, optimize = question
    r = fit(llama7b() if model == "llama-2-7b" else tiny(), w, get_gpu(gpu), gpus=gpus, max_plans=3, optimize=optimize, method_locked=True)
    for plan in r.plans:
        for kind in KINDS:
            try:
                emit(plan, kind)
            except InputError:
                check_refusal(plan, kind)
                continue
            check_round_trip(plan, kind, tmp_path)


def test_torchao_optimizers_by_their_names():
    def plan(opt, **kw):
        return _plan(tiny(), "H100-SXM-80GB", **dict(TRAIN, dtype="bf16", optimizer=opt, **kw))

    # transformers' TrainingArguments(optim=...) builds torchao.optim.AdamW8bit / AdamW4bit
    assert emit(plan("adamw-8bit-torchao"), "trainer")["optim"] == "adamw_torch_8bit"
    assert emit(plan("adamw-4bit-torchao"), "trainer")["optim"] == "adamw_torch_4bit"
    # torchtune instantiates the component with the recipe's parameters
    assert emit(plan("adamw-fp8-torchao"), "torchtune")["optimizer"] == {"_component_": "torchao.optim.AdamWFp8"}
    cfg = emit(plan("adamw-cpu-offload-torchao"), "torchtune")
    assert cfg["recipe"] == "full_finetune_single_device"
    assert cfg["optimizer"] == {"_component_": "torchao.optim.CPUOffloadOptimizer", "fused": True}
