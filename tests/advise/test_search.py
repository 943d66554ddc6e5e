"""The search: plans fit and reproduce, constraints are honoured, no-fit and contradictions are explained."""

from __future__ import annotations

from dataclasses import replace

import pytest
from advise_specs import llama7b, tiny

from vramlens.advise import fit, search
from vramlens.advise.cost import training_step
from vramlens.advise.search import hardware_that_fits
from vramlens.errors import ConfigError, InputError
from vramlens.estimator import estimate, estimate_spec
from vramlens.hardware.catalog import get_gpu
from vramlens.models import load_model
from vramlens.units import human_bytes
from vramlens.workload import Workload

TRAIN = Workload(mode="train", batch=8, seq=2048)


@pytest.mark.parametrize("gpu,gpus", [("RTX-4090", 1), ("A100-80GB", 1), ("A100-40GB", 4), ("T4", 1)])
def test_plans_fit_and_reestimate_to_the_same_figures(gpu, gpus):
    spec, g = llama7b(), get_gpu(gpu)
    r = fit(spec, TRAIN, g, gpus=gpus, max_plans=5)
    assert r.plans, r.message
    for p in r.plans:
        e = estimate(spec, gpu=g, **p.settings)
        assert e.breakdown.device_total == p.device_total
        assert e.breakdown.as_dict() == p.estimate.breakdown.as_dict()
        assert e.breakdown.host_bytes == p.estimate.breakdown.host_bytes
        assert p.fits and e.fits
        assert p.device_total <= g.capacity_bytes * 0.9
        assert p.workload.gpus == gpus
        assert p.workload.effective_batch == 8 * gpus  # the starting effective batch is kept


def test_plans_are_ranked_fastest_first_within_a_tier():
    r = fit(llama7b(), TRAIN, get_gpu("A100-80GB"), max_plans=10)
    full = [p.cost.seconds for p in r.plans if p.workload.method == "full"]
    assert full == sorted(full)
    tiers = [p.workload.method != "full" for p in r.plans]
    assert tiers == sorted(tiers)  # the starting method first, then LoRA/QLoRA


def test_inference_plans_rank_by_tokens_per_second():
    base = Workload(mode="inference", batch=4, seq=4096, new_tokens=512)
    r = fit(llama7b(), base, get_gpu("L4"), max_plans=10)
    assert r.plans
    unquantized = [p.cost.tokens_per_s for p in r.plans if p.workload.quant is None]
    assert unquantized == sorted(unquantized, reverse=True)
    for p in r.plans:
        assert p.to_dict()["tokens_per_s"] > 0
        assert estimate_spec(llama7b(), p.workload, get_gpu("L4")).fits


def test_constraints_are_honoured():
    spec, g = llama7b(), get_gpu("RTX-4090")
    r = fit(spec, Workload(mode="train", batch=8, seq=512), g, keep=["lora"], forbid=["offload", "checkpointing"],
            max_plans=20)
    assert r.plans
    for p in r.plans:
        assert p.workload.method == "lora"
        assert p.workload.offload == "none"
        assert p.workload.checkpointing == "none"
    locked = fit(spec, TRAIN, get_gpu("A100-80GB"), method_locked=True, max_plans=20)
    assert {p.workload.method for p in locked.plans} == {"full"}


def test_effective_batch_is_kept_with_gradient_accumulation():
    r = fit(llama7b(), TRAIN, get_gpu("A100-80GB"), gpus=4, effective_batch=64, max_plans=10)
    assert r.plans
    for p in r.plans:
        assert p.workload.effective_batch == 64


def test_more_gpus_never_lose_feasibility_or_speed():
    spec, g = llama7b(), get_gpu("A100-40GB")
    best = []
    for n in (1, 2, 4, 8):
        r = fit(spec, TRAIN, g, gpus=n, effective_batch=64, method_locked=True, forbid=["offload"], max_plans=1)
        best.append(r.plans[0].cost.seconds if r.plans else None)
    first = next(i for i, b in enumerate(best) if b is not None)
    assert all(b is not None for b in best[first:])
    seconds = best[first:]
    assert seconds == sorted(seconds, reverse=True)


def test_bigger_gpu_and_less_headroom_never_fit_fewer_plans():
    spec = llama7b()
    small = fit(spec, TRAIN, get_gpu("RTX-4090"))
    big = fit(spec, TRAIN, get_gpu("A100-80GB"))
    assert big.fitting >= small.fitting
    tight = fit(spec, TRAIN, get_gpu("RTX-4090"), headroom=0.3)
    assert tight.fitting <= small.fitting


def test_no_plan_fits_says_so_with_the_closest_plan_and_hardware():
    spec, g = llama7b(), get_gpu("RTX-3060")
    r = fit(spec, Workload(mode="train"), g, method_locked=True, forbid=["offload"])
    assert r.plans == ()
    c = r.closest
    assert c is not None and not c.fits
    need = estimate_spec(spec, c.workload, g).breakdown.device_total
    assert need == c.device_total
    usable = int(g.capacity_bytes * 0.9)
    hw = hardware_that_fits(spec, c.workload, headroom=0.1, exclude="RTX-3060")
    assert hw  # some catalog GPU holds it
    assert r.message == (
        f"no plan fits RTX-3060 with 10% headroom ({r.valid:,} valid plans tried); "
        f"closest: --optimizer adamw-4bit-torchao --optimizer-in-backward --loss-chunks 8 --activation-offload "
        f"needs {human_bytes(need)} per GPU, "
        f"{human_bytes(need - usable)} more than the {human_bytes(usable)} usable; it would fit on {hw}"
    )
    # the closest plan is the least memory of the valid candidates: no plan needs less (torchao's 4-bit
    # states are half of bitsandbytes' 8-bit ones; stepped in backward, one gradient is alive and reserved)
    assert c.workload.optimizer == "adamw-4bit-torchao"


def test_contradictory_constraints_are_named():
    spec, g = tiny(), get_gpu("RTX-4090")
    with pytest.raises(ConfigError) as e:
        fit(spec, Workload(mode="train", method="full"), g, keep=["lora", "checkpointing"],
            forbid=["checkpointing"], method_locked=True)
    assert str(e.value) == (
        "--keep checkpointing and --forbid checkpointing contradict each other: drop one; "
        "--keep lora contradicts --method full: drop one"
    )
    with pytest.raises(ConfigError) as e:
        fit(spec, Workload(mode="train"), g, keep=["tp", "qlora", "lora", "warp-drive"])
    assert str(e.value) == (
        "--keep 'warp-drive' is not a remedy: choose from amp, checkpointing, attention, lora, qlora, 8bit, 4bit, grad-accum, "
        "zero, fsdp, tp, pp, offload, quant, kv-quant, optimizer-in-backward, loss-chunks, activation-offload, "
        "loss-parallel; "
        "--keep lora and --keep qlora: a plan uses one method; keep one of them; "
        "--keep tp needs more than one GPU: give --gpus 2 or more"
    )
    with pytest.raises(ConfigError) as e:
        fit(spec, Workload(mode="train"), g, keep=["optimizer-in-backward", "grad-accum", "loss-chunks",
                                                  "loss-parallel"])
    assert str(e.value) == (
        "--keep optimizer-in-backward and --keep grad-accum: the optimizer in backward steps each gradient as it "
        "arrives, which grad-accum rules out; keep one of them; "
        "--keep loss-chunks and --keep loss-parallel: loss parallelism runs the plain cross-entropy on vocabulary "
        "shards; keep one of them; "
        "--keep loss-parallel shards the logits over tensor-parallel ranks: it needs --gpus 2 or more and tp not "
        "forbidden"
    )
    with pytest.raises(ConfigError) as e:
        fit(spec, Workload(mode="inference"), g, keep=["offload"])
    assert str(e.value) == "--keep offload applies to training; the workload is --mode inference"


def test_bad_hardware_values():
    with pytest.raises(InputError, match="gpus=0, nodes=1: both must be whole numbers >= 1"):
        search(tiny(), Workload(mode="train"), get_gpu("T4"), gpus=0)
    with pytest.raises(InputError, match=r"headroom=1.5 must be in \[0, 1\)"):
        search(tiny(), Workload(mode="train"), get_gpu("T4"), headroom=1.5)


def test_tensor_parallel_degrees_divide_the_heads():
    spec = tiny()  # 8 heads, 4 key-value heads
    r = fit(spec, Workload(mode="train", batch=4, seq=256), get_gpu("T4"), gpus=8, keep=["tp"], max_plans=50)
    assert r.plans
    assert {p.workload.tp for p in r.plans} <= {2, 4, 8}
    for p in r.plans:
        assert spec.n_heads % p.workload.tp == 0


def test_multi_node_plans_keep_tensor_parallel_inside_a_node():
    r = fit(llama7b(), TRAIN, get_gpu("A100-80GB"), gpus=4, nodes=2, max_plans=30)
    assert r.plans
    for p in r.plans:
        assert p.workload.gpus == 8
        assert p.workload.tp <= 4


def test_host_ram_limits_offload():
    spec, g = llama7b(), get_gpu("RTX-4090")
    r = fit(spec, TRAIN, g, method_locked=True, host_ram=8 * 2**30)
    for p in r.plans:
        assert p.estimate.breakdown.host_bytes <= 8 * 2**30
    roomy = fit(spec, TRAIN, g, method_locked=True, host_ram=512 * 2**30)
    assert roomy.fitting >= r.fitting


def test_front_door_takes_names_and_keywords():
    r = fit(tiny(), gpu="T4", mode="train", batch=2, seq=128, top=3, ask=["max_batch"])
    assert 1 <= len(r.plans) <= 3
    assert r.inverse["max_batch"]["value"] >= 1
    d = r.to_dict()
    assert set(d["plans"][0]) >= {"settings", "fits", "device_total_bytes", "components", "host_bytes",
                                  "step_time_s", "tradeoffs"}


def test_divisors_in_order():
    from vramlens.advise.search import divisors

    assert divisors(1) == [1]
    assert divisors(12) == [1, 2, 3, 4, 6, 12]
    assert divisors(49) == [1, 7, 49]
    assert divisors(1_000_000_007) == [1, 1_000_000_007]  # a prime: O(sqrt n) steps, not a billion


def test_effective_batch_over_the_limit_is_refused():
    from vramlens.advise import fit
    from vramlens.errors import InputError
    from vramlens.limits import MAX_EFFECTIVE_BATCH

    with pytest.raises(InputError) as e:
        fit("llama-2-7b", gpu="24GB", mode="train", effective_batch=MAX_EFFECTIVE_BATCH + 1)
    assert str(e.value) == (f"effective_batch={MAX_EFFECTIVE_BATCH + 1:,} is over the limit of {MAX_EFFECTIVE_BATCH:,} "
                            "(vramlens.limits.MAX_EFFECTIVE_BATCH): ask for a smaller --effective-batch")


def test_an_effective_batch_that_cannot_be_split_within_the_bounds_says_so():
    """A prime above the micro-batch bound has no split (1 x p exceeds grad-accum's bound, p x 1 the batch's)."""
    from vramlens.errors import InputError
    from vramlens.hardware.catalog import get_gpu
    from vramlens.models import load_model

    with pytest.raises(InputError) as e:
        fit(load_model("gpt2"), Workload(mode="train"), get_gpu("24GB"), effective_batch=1_000_000_007)
    assert str(e.value) == (
        "effective_batch=1,000,000,007 cannot be split into micro-batch x grad-accum x data-parallel GPUs (at most 1) "
        "with micro-batch <= 1,048,576 and grad-accum <= 1,048,576: choose an effective batch with smaller factors "
        "(e.g. 536,870,912)")


#: Every remedy but the four training techniques, so that the plans show which of them is needed.
CLASSIC = "amp,checkpointing,attention,lora,qlora,8bit,4bit,grad-accum,zero,fsdp,tp,pp,offload"


def _techniques(p):
    w = p.workload
    return (w.optimizer_in_backward, w.loss_chunks, w.activation_offload, w.loss_parallel)


def test_activation_offload_is_proposed_when_nothing_else_may_change():
    """Issue 9. Llama-2-7B bf16, batch 4 x 2,048 on one 80 GB GPU: the full step misses; moving the
    saved activations to the host is what makes it fit, and its PCIe time is charged."""
    spec, g = llama7b(), get_gpu("A100-80GB")
    base = Workload(mode="train", dtype="bf16", batch=4, seq=2048)
    assert not estimate_spec(spec, base, g).fits
    r = fit(spec, base, g, forbid=CLASSIC, max_plans=3)
    assert [_techniques(p) for p in r.plans] == [(False, 1, True, False)]
    p = r.plans[0]
    assert estimate(spec, gpu=g, **p.settings).breakdown.device_total == p.device_total
    moved = p.estimate.breakdown.host_bytes  # nothing else is offloaded: all of it crosses PCIe
    assert moved > 0 and p.cost.offload_s == pytest.approx(2 * moved / (g.pcie_bytes_s * 0.8))
    assert any(t.startswith("activation offload (torchtune)") for t in p.tradeoffs)
    # --forbid leaves nothing that fits; --host-ram below the copies refuses it too
    assert not fit(spec, base, g, forbid=CLASSIC + ",activation-offload").plans
    assert not fit(spec, base, g, forbid=CLASSIC, host_ram=moved - 1).plans


def test_chunked_loss_is_proposed_for_a_large_vocabulary():
    """Gemma-2B (256,000-entry vocabulary), bf16 batch 4 x 2,048 on 2 x 80 GB with DDP: the logits
    and their fp32 copies miss by little; 8 loss chunks fit at no step time."""
    spec, g = load_model("gemma-2b"), get_gpu("80GB")
    base = Workload(mode="train", dtype="bf16", batch=4, seq=2048)
    r = fit(spec, base, g, gpus=2, forbid=CLASSIC, max_plans=3)
    assert r.plans and _techniques(r.plans[0]) == (False, 8, False, False)
    p = r.plans[0]
    assert p.cost.seconds == training_step(spec, replace(p.workload, loss_chunks=1), g,
                                           trainable=p.estimate.trainable_params).seconds
    assert estimate(spec, gpu=g, **p.settings).breakdown.device_total == p.device_total


def test_kept_optimizer_in_backward_respects_its_refusals():
    spec, g = llama7b(), get_gpu("A100-80GB")
    r = fit(spec, Workload(mode="train", dtype="bf16", batch=8, seq=1024), g, gpus=2,
            keep=["optimizer-in-backward"], max_plans=10)
    assert r.plans
    for p in r.plans:
        w = p.workload
        assert w.optimizer_in_backward and w.grad_accum == 1 and w.shard_stage == 0 and w.offload == "none"
        assert w.pp == 1 and not w.problems()


def test_torchao_4bit_is_a_remedy_of_its_own():
    spec, g = llama7b(), get_gpu("A100-80GB")
    base = Workload(mode="train", dtype="bf16", batch=1, seq=512, checkpointing="full")
    r = fit(spec, base, g, keep=["4bit"], max_plans=3)
    assert r.plans and all(p.workload.optimizer == "adamw-4bit-torchao" for p in r.plans)
    assert all(estimate(spec, gpu=g, **p.settings).breakdown.device_total == p.device_total for p in r.plans)
    assert not any(p.workload.optimizer == "adamw-4bit-torchao" for p in fit(spec, base, g, forbid=["4bit"],
                                                                               max_plans=5).plans)
    with pytest.raises(ConfigError, match="--keep 8bit and --keep 4bit: a plan uses one optimizer; keep one of them"):
        fit(spec, base, g, keep=["8bit", "4bit"])


def test_torchtitans_checkpointing_is_proposed_where_it_is_enough():
    """A micro-batch too big without checkpointing: torchtitan's per-op selective and every:2 fit
    and recompute less than full checkpointing, so they rank first; full stays a (slower) plan."""
    spec, g = llama7b(), get_gpu("A100-80GB")
    base = Workload(mode="train", method="lora", batch=4, seq=4096)
    r = fit(spec, base, g, keep=["lora"], max_plans=10,
            forbid=["grad-accum", "offload", "activation-offload", "loss-chunks", "8bit", "amp"])
    modes = [p.workload.checkpointing for p in r.plans]
    assert "none" not in modes and {"selective-op", "every:2", "full"} <= set(modes), modes
    assert modes.index("selective-op") < modes.index("full") and modes.index("every:2") < modes.index("full")
    none = estimate(spec, gpu=g, **{**base.to_dict(), "checkpointing": "none"})
    assert not none.fits
    seconds = {p.workload.checkpointing: p.cost.seconds for p in r.plans}
    assert seconds["selective-op"] < seconds["every:2"] < seconds["full"]


def test_megatron_selective_is_tried_with_eager_attention_only():
    from vramlens.advise.search import Constraints, _checkpointing

    c = Constraints(frozenset(), frozenset(), False)
    assert "selective" not in _checkpointing(Workload(mode="train"), c)
    assert "selective" in _checkpointing(Workload(mode="train", attention="eager"), c)
    assert _checkpointing(Workload(mode="train", checkpointing="every:4"), Constraints(
        frozenset(), frozenset({"checkpointing"}), False)) == ["every:4"]
