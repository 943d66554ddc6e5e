"""Emitted configs load through the libraries' own classes where they import on this machine.

Checked here: transformers.TrainingArguments (use_cpu=True added because this machine has no
GPU: bf16 without a GPU is refused otherwise; fp16 plans cannot be validated on CPU at all),
peft.LoraConfig, transformers.BitsAndBytesConfig (constructed, not quantizing: bitsandbytes
needs CUDA), the Accelerate config file through accelerate's own loader. The DeepSpeed JSON is
checked against its documented keys here and loaded by DeepSpeed itself in test_emit_roundtrip.py.
"""

from __future__ import annotations

import json

import pytest
from advise_specs import llama7b, tiny

from vramlens.advise import fit
from vramlens.advise.emit import KINDS, emit, render
from vramlens.errors import InputError
from vramlens.hardware.catalog import get_gpu
from vramlens.workload import Workload


def _plan(**kw):
    base = Workload(mode="train", batch=8, seq=1024, **kw.pop("base", {}))
    r = fit(llama7b(), base, get_gpu(kw.pop("gpu", "A100-80GB")), max_plans=1, **kw)
    assert r.plans, r.message
    return r.plans[0]


@pytest.fixture(scope="module")
def qlora_plan():
    return _plan(gpu="RTX-4090", keep=["qlora"], forbid=["offload"])


@pytest.fixture(scope="module")
def zero_plan():
    return _plan(gpus=4, keep=["zero", "offload"], forbid=["checkpointing"], method_locked=True,
                 base={"checkpointing": "full"})


@pytest.fixture(scope="module")
def zero_amp_plan():
    """bf16 weights with fp32 master weights: what DeepSpeed's bf16 mode runs."""
    return _plan(gpus=4, keep=["zero", "offload"], forbid=["amp", "checkpointing"], method_locked=True,
                 base={"dtype": "bf16", "amp": "bf16", "checkpointing": "full"})


@pytest.fixture(scope="module")
def fsdp_plan():
    return _plan(gpus=4, keep=["fsdp"], method_locked=True)


def _training_arguments(kw, tmp_path):
    transformers = pytest.importorskip("transformers")
    return transformers.TrainingArguments(output_dir=str(tmp_path), use_cpu=True, report_to="none", **kw)


def test_trainer_kwargs_load(qlora_plan, zero_amp_plan, fsdp_plan, tmp_path):
    for plan in (qlora_plan, zero_amp_plan):
        kw = emit(plan, "trainer")
        if kw.get("fp16"):
            pytest.skip("fp16 TrainingArguments need a GPU")
        if "deepspeed" in kw:  # a path to the JSON; loading it needs deepspeed installed
            kw = {k: v for k, v in kw.items() if k != "deepspeed"}
        args = _training_arguments(kw, tmp_path)
        assert args.per_device_train_batch_size == plan.workload.batch
        assert args.gradient_accumulation_steps == plan.workload.grad_accum
        assert args.activation_checkpointing == (plan.workload.checkpointing != "none")
    kw = emit(fsdp_plan, "trainer")
    args = _training_arguments(kw, tmp_path)
    assert args.fsdp_config["reshard_after_forward"] is True  # FSDP2's full sharding


def _checkpointed():
    """Autocast with full checkpointing (a tiny model: it fits as it is)."""
    r = fit(tiny(), Workload(mode="train", dtype="fp32", amp="bf16", checkpointing="full"), get_gpu("A100-80GB"))
    assert r.already_fits
    return r.plans[0]


def test_trainer_legacy_names():
    kw = emit(_checkpointed(), "trainer", legacy_names=True)
    assert kw["gradient_checkpointing"] is True and "activation_checkpointing" not in kw


def test_peft_and_bnb_load(qlora_plan):
    peft = pytest.importorskip("peft")
    transformers = pytest.importorskip("transformers")
    cfg = peft.LoraConfig(**emit(qlora_plan, "peft"))
    assert cfg.r == qlora_plan.workload.lora_rank
    assert set(cfg.target_modules) == set(qlora_plan.workload.lora_targets)
    bnb = transformers.BitsAndBytesConfig(**emit(qlora_plan, "bnb"))
    assert bnb.load_in_4bit and bnb.bnb_4bit_quant_type == "nf4" and bnb.bnb_4bit_use_double_quant


def test_deepspeed_json_structure(zero_amp_plan):
    ds = json.loads(render(emit(zero_amp_plan, "deepspeed"), "deepspeed"))
    w = zero_amp_plan.workload
    assert (w.dtype, w.amp) == ("bf16", "bf16") and ds["bf16"] == {"enabled": True}
    assert ds["train_micro_batch_size_per_gpu"] == w.batch
    assert ds["gradient_accumulation_steps"] == w.grad_accum
    assert ds["train_batch_size"] == w.batch * w.grad_accum * w.dp
    z = ds["zero_optimization"]
    assert z["stage"] == w.zero
    assert z["offload_optimizer"] == {"device": "cpu", "pin_memory": True}
    assert ("offload_param" in z) == (w.offload == "all")
    assert ds["bf16"]["enabled"] != ds["fp16"]["enabled"] or not ds["bf16"]["enabled"]
    for key in z:
        assert key in {"stage", "overlap_comm", "contiguous_gradients", "reduce_bucket_size", "allgather_bucket_size",
                       "reduce_scatter", "stage3_prefetch_bucket_size", "stage3_param_persistence_threshold",
                       "offload_optimizer", "offload_param"}


def test_accelerate_config_loads(fsdp_plan, tmp_path):
    pytest.importorskip("accelerate")
    from accelerate.commands.config.config_args import ClusterConfig

    path = tmp_path / "default_config.yaml"
    path.write_text(render(emit(fsdp_plan, "accelerate"), "accelerate"))
    cfg = ClusterConfig.from_yaml_file(str(path))
    assert str(cfg.distributed_type).endswith("FSDP")
    assert cfg.num_processes == 4
    assert cfg.fsdp_config["fsdp_sharding_strategy"] == "FULL_SHARD"


def test_device_map_and_alloc_conf():
    r = fit(llama7b(), Workload(mode="inference", seq=2048, new_tokens=256), get_gpu("RTX-4090"), max_plans=1)
    dm = emit(r.plans[0], "device-map")
    assert dm["device_map"] == "auto" and set(dm["max_memory"]) == {"0"}
    assert emit(r.plans[0], "alloc-conf").startswith("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True")


def test_plans_a_target_cannot_express_are_refused(zero_plan, fsdp_plan):
    """Issue 13: the emitted configs described other workloads than the plans'."""
    w = zero_plan.workload
    assert (w.dtype, w.amp, w.offload) == ("bf16", None, "optimizer")  # pure bf16, optimizer offload
    with pytest.raises(InputError) as e:
        emit(zero_plan, "deepspeed")
    assert str(e.value) == (
        '--emit deepspeed: the plan trains pure bf16 (no fp32 master weights); DeepSpeed\'s "bf16": {"enabled": true} '
        "keeps an fp32 master copy (more memory than the plan shows): choose a plan with --amp bf16, or --emit "
        "fsdp/trainer")
    with pytest.raises(InputError) as e:
        emit(_plan(gpus=4, keep=["fsdp", "offload"], method_locked=True), "fsdp")
    assert str(e.value).startswith("--emit fsdp: the plan offloads only the optimizer states; FSDP's offload "
                                   "(CPUOffload(offload_params=True)) moves the parameters too")
    with pytest.raises(InputError) as e:
        emit(fsdp_plan, "device-map")
    assert str(e.value).startswith("--emit device-map: device_map places weights for inference")
    with pytest.raises(InputError) as e:  # bf16=False would train pure bf16 without ZeRO's master copy
        emit(zero_plan, "trainer")
    assert str(e.value).startswith("--emit trainer: the plan trains pure bf16 (no fp32 master weights)")
    # said as --emit trainer, the refusal names the other target only (it advised --emit fsdp/trainer)
    assert str(e.value).endswith("choose a plan with --amp bf16, or --emit fsdp")
    with pytest.raises(InputError) as e:
        emit(zero_plan, "accelerate")
    assert "--emit accelerate or" not in str(e.value) and "/accelerate" not in str(e.value)


def test_trainer_checkpointing_name_follows_the_installed_transformers():
    from importlib.metadata import PackageNotFoundError, version

    kw = emit(_checkpointed(), "trainer")
    try:
        major = int(version("transformers").split(".")[0])
    except PackageNotFoundError:  # not installed: the names every version accepts (4.x's; 5 keeps them as aliases)
        major = 4
    name = "activation_checkpointing" if major >= 5 else "gradient_checkpointing"
    assert kw[name] is True


def test_kinds_that_do_not_apply_say_why(zero_plan):
    with pytest.raises(InputError, match=r"--emit peft: the plan trains every parameter \(--method full\); no LoRA settings"):
        emit(zero_plan, "peft")
    with pytest.raises(InputError, match="is not one of"):
        emit(zero_plan, "yaml-of-doom")
    assert len(KINDS) == 12


def test_fp8_plans():
    """--fp8 is torchao's Float8Linear: torchtitan's float8 converter and torchtune's distributed
    recipe's enable_fp8_training; the Trainer's targets have no such option."""
    from dataclasses import replace

    any_plan = _plan(gpu="H100-80GB")
    titan = Workload(mode="train", batch=8, seq=1024, dtype="fp32", amp="bf16", fsdp=True, gpus=4, fp8=True).validated()
    p = replace(any_plan, workload=titan)
    assert p.workload.fp8
    cfg = emit(p, "torchtitan")
    assert cfg["model"] == {"converters": ["float8"]} and cfg["float8"] == {"filter_fqns": ["output"]}
    with pytest.raises(InputError, match="float8"):
        emit(p, "trainer")
    bf16 = replace(p, workload=replace(p.workload, dtype="bf16", amp=None, fsdp=True))
    assert emit(bf16, "torchtune")["enable_fp8_training"] is True
    one = replace(p, workload=replace(p.workload, dtype="bf16", amp=None, fsdp=False, gpus=1))
    with pytest.raises(InputError, match="float8 on one GPU"):
        emit(one, "torchtune")



def test_fp8_recipe_plans():
    """--fp8-recipe: torchtitan's [float8] recipe_name, or its mx converter; torchtune's enable_fp8_training is
    tensorwise only."""
    from dataclasses import replace

    any_plan = _plan(gpu="H100-80GB")
    base = dict(mode="train", batch=8, seq=1024, dtype="fp32", amp="bf16", fsdp=True, gpus=4, fp8=True)
    rowwise = replace(any_plan, workload=Workload(**base, fp8_recipe="rowwise").validated())
    assert emit(rowwise, "torchtitan")["float8"] == {"filter_fqns": ["output"], "recipe_name": "rowwise"}
    mx = replace(any_plan, workload=Workload(**base, fp8_recipe="mxfp8_cublas").validated())
    cfg = emit(mx, "torchtitan")
    assert cfg["model"] == {"converters": ["mx"]} and cfg["mx"] == {"recipe_name": "mxfp8_cublas"}
    assert "float8" not in cfg
    bf16 = replace(rowwise, workload=replace(rowwise.workload, dtype="bf16", amp=None))
    with pytest.raises(InputError, match="with the rowwise recipe"):
        emit(bf16, "torchtune")


@pytest.mark.parametrize("kind, config", [
    ("torchtitan", "[[[["), ("torchtitan", {}), ("torchtitan", {"training": {"local_batch_size": -5}}),
    ("torchtitan", None), ("llama.cpp", "llama-server --ctx-size " + "9" * 5000), ("llama.cpp", {"x": 1}),
    ("llama.cpp", ["--ctx-size", "abc"]),
])
def test_readback_of_a_config_vramlens_did_not_write_is_an_input_error(kind, config):
    """workload_from_emitted promised InputError for an unreadable config; it raised TypeError/KeyError."""
    from vramlens.advise.readback import workload_from_emitted

    with pytest.raises(InputError, match=rf"--emit {kind} config .* is not what vramlens wrote") as e:
        workload_from_emitted(kind, config, Workload(mode="train"))
    assert "\n" not in str(e.value) and len(str(e.value)) < 400


@pytest.mark.parametrize("kw, message", [
    ({"host_ram": -1}, "host_ram=-1 must be >= 1"), ({"top": -1}, "top=-1 must be >= 1"),
    ({"nodes": True}, "nodes=True must be a whole number >= 1"), ({"max_plans": 10**9}, "max_plans=1000000000 is over"),
])
def test_fit_api_bounds_what_the_cli_bounds(kw, message):
    """vramlens.fit took host_ram=-1 (every offload plan then missed), top=-1 (one plan) and nodes=True."""
    with pytest.raises(InputError, match=message):
        fit(llama7b(), Workload(mode="train"), get_gpu("24GB"), **kw)


@pytest.mark.parametrize("method", ["ia3", "ln-tuning"])
def test_peft_vector_methods_emit_get_peft_config(method):
    """IA3 and LN tuning: a locked method stays in the plans, and peft builds the config from the dict with the
    model type's default targets (target_modules None); torchtune has no recipe for them."""
    plan = _plan(base={"method": method}, method_locked=True)
    assert plan.workload.method == method
    kw = emit(plan, "peft")
    assert kw == {"peft_type": {"ia3": "IA3", "ln-tuning": "LN_TUNING"}[method], "task_type": "CAUSAL_LM"}
    peft = pytest.importorskip("peft")
    cfg = peft.get_peft_config(kw)
    assert type(cfg).__name__ == {"ia3": "IA3Config", "ln-tuning": "LNTuningConfig"}[method]
    assert cfg.target_modules is None
    with pytest.raises(InputError, match=f"trains peft's {method} "):
        emit(plan, "torchtune")


def test_prompt_tuning_emits_its_virtual_tokens():
    plan = _plan(base={"method": "prompt-tuning", "num_virtual_tokens": 20}, method_locked=True)
    kw = emit(plan, "peft")
    assert kw == {"peft_type": "PROMPT_TUNING", "task_type": "CAUSAL_LM", "num_virtual_tokens": 20}
    peft = pytest.importorskip("peft")
    assert peft.get_peft_config(kw).num_virtual_tokens == 20


def test_loha_emits_get_peft_config_with_rank_and_targets():
    """LoHa: the dict builds peft's LoHaConfig with the rank and targets vramlens estimated; torchtune has no recipe."""
    plan = _plan(base={"method": "loha", "lora_rank": 16, "lora_targets": ("q_proj", "k_proj", "v_proj")},
                 method_locked=True)
    assert plan.workload.method == "loha"
    kw = emit(plan, "peft")
    assert kw == {"peft_type": "LOHA", "r": 16, "alpha": 32, "target_modules": ["q_proj", "k_proj", "v_proj"],
                  "task_type": "CAUSAL_LM"}
    peft = pytest.importorskip("peft")
    cfg = peft.get_peft_config(kw)
    assert type(cfg).__name__ == "LoHaConfig"
    assert (cfg.r, cfg.alpha, set(cfg.target_modules)) == (16, 32, {"q_proj", "k_proj", "v_proj"})
    with pytest.raises(InputError, match="trains peft's loha "):
        emit(plan, "torchtune")


def test_lokr_emits_its_decompose_factor():
    plan = _plan(base={"method": "lokr", "lora_rank": 32, "decompose_factor": 4}, method_locked=True)
    kw = emit(plan, "peft")
    assert kw == {"peft_type": "LOKR", "r": 32, "alpha": 64, "target_modules": ["q_proj", "v_proj"],
                  "decompose_factor": 4, "task_type": "CAUSAL_LM"}
    peft = pytest.importorskip("peft")
    cfg = peft.get_peft_config(kw)
    assert type(cfg).__name__ == "LoKrConfig" and cfg.decompose_factor == 4


def test_oft_emits_its_block_size():
    plan = _plan(base={"method": "oft", "oft_block_size": 64}, method_locked=True)
    kw = emit(plan, "peft")
    assert kw == {"peft_type": "OFT", "r": 0, "oft_block_size": 64, "target_modules": ["q_proj", "v_proj"],
                  "task_type": "CAUSAL_LM"}
    peft = pytest.importorskip("peft")
    cfg = peft.get_peft_config(kw)
    assert type(cfg).__name__ == "OFTConfig" and (cfg.r, cfg.oft_block_size) == (0, 64)


def test_boft_emits_its_block_size():
    plan = _plan(base={"method": "boft", "boft_block_size": 8}, method_locked=True)
    kw = emit(plan, "peft")
    assert kw == {"peft_type": "BOFT", "boft_block_size": 8, "boft_block_num": 0, "boft_n_butterfly_factor": 1,
                  "target_modules": ["q_proj", "v_proj"], "task_type": "CAUSAL_LM"}
    peft = pytest.importorskip("peft")
    cfg = peft.get_peft_config(kw)
    assert type(cfg).__name__ == "BOFTConfig" and (cfg.boft_block_size, cfg.boft_block_num) == (8, 0)


def test_torchao_weight_only_formats_are_not_a_device_map():
    """fp6, uintx, Sparse-Marlin and QQQ weights come from torchao's quantize_ after loading (gpt-fast)."""
    base = Workload(mode="inference", batch=1, seq=512, quant="uint4")
    r = fit(llama7b(), base, get_gpu("A100-80GB"), max_plans=1, keep=["quant"])
    assert r.plans, r.message
    plan = r.plans[0]
    assert plan.workload.quant == "uint4"
    with pytest.raises(InputError) as e:
        emit(plan, "device-map")
    assert str(e.value) == (
        "--emit device-map: uint4 weights are torchao's quantize_ applied after loading (gpt-fast's generate.py), "
        "which from_pretrained's settings do not express: load with these settings minus quantization and run "
        "quantize_, or choose a plan with --quant int8, nf4 or fp8")
