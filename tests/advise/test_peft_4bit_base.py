"""fit proposes a 4-bit NF4 base for OFT, BOFT and VeRA (the ``qlora`` remedy), and --emit peft says what
get_peft_model must be told when the adapters stay in the compute dtype."""

from __future__ import annotations

import json

from cli_run import run_cli
from vramlens.advise import fit
from vramlens.advise.emit import peft_call
from vramlens.hardware.catalog import get_gpu
from vramlens.models import load_model
from vramlens.workload import Workload

VERA = Workload(mode="train", method="vera", seq=1024)


def test_vera_too_big_for_its_gpu_gets_a_4bit_base_and_keeps_its_optimizer():
    # Llama-2-13B in bf16 is 24.26 GiB of weights: over a 4090's 21.59 GiB usable whatever else changes; under NF4
    # with double quantization it fits. The 4-bit optimizers over VeRA's ~0.003% trained values buy microseconds
    # (less than SPEED_TIE of the step), so the plan does not change the optimizer.
    r = fit(load_model("Llama-2-13B"), VERA, get_gpu("RTX-4090"), method_locked=True)
    best = r.plans[0].workload
    assert (best.method, best.quant, best.optimizer) == ("vera", "nf4-dq", "adamw")
    assert any(t.startswith("4-bit NF4 base weights (bitsandbytes, as QLoRA)") for t in r.plans[0].tradeoffs)
    assert all(p.workload.optimizer == "adamw" for p in r.plans)


def test_forbidding_qlora_forbids_the_4bit_base():
    r = fit(load_model("Llama-2-13B"), VERA, get_gpu("RTX-4090"), method_locked=True, forbid=["qlora"])
    # nothing else brings 24.26 GiB of bf16 weights under 21.59 GiB: the closest plan keeps the weights as they are
    assert r.plans == ()
    assert r.message.startswith("no plan fits RTX-4090 with 10% headroom") and "--quant" not in r.message


def test_an_oft_base_that_fits_stays_unquantized():
    r = fit(load_model("Llama-2-7B"), Workload(mode="train", method="oft", seq=512), get_gpu("RTX-4090"),
            method_locked=True)
    assert r.plans[0].workload.quant is None


def test_peft_call_asks_for_autocast_adapter_dtype_false_only_for_half_adapters():
    gpu = get_gpu("A100-80GB")
    spec = load_model("Llama-2-7B")
    fp32 = fit(spec, Workload(mode="train", method="lora", dtype="bf16"), gpu, method_locked=True).plans[0]
    half = fit(spec, Workload(mode="train", method="lora", dtype="bf16", lora_dtype="bf16"), gpu,
               method_locked=True).plans[0]
    assert peft_call(fp32) is None
    assert peft_call(half) == ("# get_peft_model(model, config, autocast_adapter_dtype=False): keeps the adapters in "
                               "bf16 as the plan assumed (peft's default upcasts them to fp32)")


def test_emit_peft_prints_the_call_on_stderr_and_the_config_alone_on_stdout(capsys):
    code, out, err = run_cli(capsys, ["fit", "Llama-2-7B", "--gpu", "A100-80GB", "--mode", "train", "--method", "lora",
                                      "--dtype", "bf16", "--lora-dtype", "bf16", "--emit", "peft"])
    assert code == 0
    assert json.loads(out)["r"] == 8
    assert err.strip() == ("# get_peft_model(model, config, autocast_adapter_dtype=False): keeps the adapters in bf16 "
                           "as the plan assumed (peft's default upcasts them to fp32)")
