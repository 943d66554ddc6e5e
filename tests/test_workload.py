import pytest

from vramlens.errors import ConfigError
from vramlens.workload import Workload, make_workload


def test_defaults_are_valid():
    assert Workload().validated() == Workload()


def test_every_problem_is_collected_in_one_message():
    with pytest.raises(ConfigError) as e:
        make_workload(batch=0, dtype="fp12", lora_rank=0)
    assert str(e.value) == (
        "dtype='fp12' is not one of: fp32, fp16, bf16; batch=0 must be a whole number >= 1; "
        "lora_rank=0 must be a whole number >= 1"
    )


@pytest.mark.parametrize("kw, message", [
    (dict(gpus=6, tp=4), "gpus=6 is not a multiple of tp*pp=4: use --gpus 4"),
    (dict(mode="train", quant="nf4"), "quant='nf4' weights cannot be trained in full: use --method lora (or qlora)"),
    (dict(zero=2, fsdp=True, mode="train"), "fsdp and zero=2 both given: choose FSDP or one ZeRO stage"),
    (dict(mode="train", new_tokens=5), "new_tokens=5 applies to inference only: drop it or use --mode inference"),
    (dict(dtype="bf16", amp="fp16"), "dtype=bf16 with amp=fp16 mixes two half formats: use --dtype fp32 --amp fp16"),
    (dict(mode="train", offload="optimizer"), "offload=optimizer needs --zero 1..3 or --fsdp (ZeRO-Offload / FSDP CPU offload)"),
    (dict(batch=-3), "batch=-3 must be a whole number >= 1"),
    (dict(offload="all"), "offload=all applies to training (ZeRO-Offload); for inference across GPU, CPU and "
                          "disk use `vramlens place`"),
])
def test_contradictions_name_the_value_and_fix(kw, message):
    with pytest.raises(ConfigError) as e:
        make_workload(**kw)
    assert str(e.value) == message


def test_unknown_setting():
    with pytest.raises(ConfigError) as e:
        make_workload(bach=3)
    assert str(e.value).startswith("unknown workload setting 'bach': known are ")


def test_lora_targets_string_and_derived_values():
    w = make_workload(mode="train", method="qlora", lora_targets="q_proj, k_proj", gpus=8, tp=2, grad_accum=4, batch=2)
    assert w.lora_targets == ("q_proj", "k_proj")
    assert w.quantized == "nf4-dq"
    assert w.dp == 4 and w.effective_batch == 2 * 4 * 4


def test_paged_optimizer_under_offload_is_said_to_be_ignored():
    """--optimizer paged-adamw --offload optimizer --zero 2 ran silently as plain ZeRO-Offload."""
    from vramlens.workload import Workload

    w = Workload(mode="train", optimizer="paged-adamw", offload="optimizer", zero=2, gpus=2).validated()
    assert any("the paging does not apply" in n for n in w.ignored())
    assert not any("paging" in n for n in Workload(mode="train", optimizer="paged-adamw").ignored())
