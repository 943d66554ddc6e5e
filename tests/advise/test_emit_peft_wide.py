"""--emit for peft's LoRA-FA, VeRA, AdaLoRA and prefix tuning plans."""

from __future__ import annotations

import pytest
from advise_specs import llama7b

from vramlens.advise import fit
from vramlens.advise.emit import emit
from vramlens.errors import InputError
from vramlens.hardware.catalog import get_gpu
from vramlens.workload import Workload


def _plan(base: dict):
    r = fit(llama7b(), Workload(mode="train", batch=8, seq=1024, **base), get_gpu("A100-80GB"), max_plans=1,
            method_locked=True)
    assert r.plans, r.message
    return r.plans[0]


def test_lora_fa_keeps_loras_config_and_refuses_trainer_and_torchtune():
    plan = _plan({"method": "lora", "lora_rank": 16, "lora_fa": True})
    assert plan.workload.lora_fa
    kw = emit(plan, "peft")
    assert kw["r"] == 16 and kw["lora_alpha"] == 32  # LoRA-FA is the optimizer over this config's adapters
    with pytest.raises(InputError, match="create_lorafa_optimizer"):
        emit(plan, "trainer")
    with pytest.raises(InputError, match="LoRA-FA optimizer"):
        emit(plan, "torchtune")
    peft = pytest.importorskip("peft")
    assert peft.LoraConfig(**kw).r == 16


def test_adalora_emit_names_what_the_plan_cannot_know():
    plan = _plan({"method": "adalora", "lora_rank": 12})
    with pytest.raises(InputError, match=r"AdaLoraConfig needs total_step.*AdaLoraConfig\(init_r=12, target_modules="
                                         r"\['q_proj', 'v_proj'\], total_step=N\)"):
        emit(plan, "peft")
    with pytest.raises(InputError, match="trains peft's AdaLoRA"):
        emit(plan, "torchtune")


def test_vera_emits_get_peft_config_with_its_rank():
    plan = _plan({"method": "vera", "vera_rank": 64})
    kw = emit(plan, "peft")
    assert kw == {"peft_type": "VERA", "task_type": "CAUSAL_LM", "r": 64}
    with pytest.raises(InputError, match="trains peft's vera "):
        emit(plan, "torchtune")
    peft = pytest.importorskip("peft")
    cfg = peft.get_peft_config(kw)
    assert type(cfg).__name__ == "VeraConfig" and cfg.r == 64 and cfg.target_modules is None


def test_prefix_tuning_emits_its_virtual_tokens():
    plan = _plan({"method": "prefix-tuning", "num_virtual_tokens": 20})
    kw = emit(plan, "peft")
    assert kw == {"peft_type": "PREFIX_TUNING", "task_type": "CAUSAL_LM", "num_virtual_tokens": 20}
    peft = pytest.importorskip("peft")
    assert peft.get_peft_config(kw).num_virtual_tokens == 20
