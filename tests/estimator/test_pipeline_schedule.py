"""--pp-schedule: how many micro-batches' activations the most-loaded pipeline rank holds
(vramlens.estimator.parallel.stage_micro_batches_in_flight), pinned on worked cases and checked against
torch.distributed.pipelining's own interleaved 1F1B order where torch is installed."""

import pytest

from vramlens.errors import ConfigError
from vramlens.estimator import estimate
from vramlens.estimator.parallel import stage_micro_batches_in_flight
from vramlens.models import load_model
from vramlens.workload import make_workload

# Llama 3.1 8B: 32 blocks, h 4,096; pp 4 puts 8 blocks on each rank
PIPE = dict(mode="train", dtype="bf16", gpus=4, pp=4, batch=1, seq=2048, grad_accum=8, checkpointing="full",
            optimizer="adamw")


@pytest.mark.parametrize(("schedule", "pp", "m", "expected"), [
    ("1f1b", 4, 8, 4),                 # min(pp, m)
    ("1f1b", 4, 2, 2),
    ("gpipe", 4, 8, 8),                # every forward before any backward
    # v = 2: mpr = 8 // max(1, 8 // 4) = 4; warm-up min((2 - 1) * 4 + 2 * (4 - 1), 16) = 10, then one more forward
    ("interleaved-1f1b", 4, 8, 11),
    # mpr = 2 // max(1, 0) = 2; warm-up min(2 + 6, 4) = 4 = m * v: every (stage, micro-batch) pair, nothing more
    ("interleaved-1f1b", 4, 2, 4),
    # torchtitan's Table 5 (pp 8, m = pp = 8): mpr 8, warm-up min(8 + 14, 16) = 16, all of them
    ("interleaved-1f1b", 8, 8, 16),
    ("interleaved-1f1b", 1, 8, 1),     # no pipeline
])
def test_stage_micro_batches_in_flight(schedule, pp, m, expected):
    assert stage_micro_batches_in_flight(schedule, pp, m) == expected


def _torch_interleaved_peak(pp: int, m: int, v: int) -> int:
    """Rank 0's most live (stage, micro-batch) activations in torch's own ScheduleInterleaved1F1B order."""
    sched_mod = pytest.importorskip("torch.distributed.pipelining.schedules", reason="the trace extra (torch)")
    sched = object.__new__(sched_mod.ScheduleInterleaved1F1B)
    sched.pp_group_size, sched.n_local_stages, sched._n_microbatches = pp, v, m
    sched.number_of_rounds = max(1, m // pp)
    sched.microbatches_per_round = m // sched.number_of_rounds
    live = peak = 0
    for action in sched._calculate_single_rank_operations(0):
        if action is None:
            continue
        kind = action.computation_type.value  # "F" forward, "B" full backward
        live += 1 if kind == "F" else -1 if kind == "B" else 0
        peak = max(peak, live)
    return peak


@pytest.mark.parametrize(("pp", "m"), [(4, 8), (4, 4), (4, 2), (8, 8), (8, 16), (2, 6), (4, 12)])
def test_interleaved_matches_torchs_schedule(pp, m):
    assert stage_micro_batches_in_flight("interleaved-1f1b", pp, m) == _torch_interleaved_peak(pp, m, 2)


def test_activations_scale_with_the_schedule():
    spec = load_model("llama-3.1-8b")
    acts = {s: estimate(spec, **PIPE, pp_schedule=s).breakdown["activations"]
            for s in ("1f1b", "interleaved-1f1b", "gpipe")}
    # full checkpointing: each block keeps its bf16 input, 1 x 2,048 x 4,096 x 2 B = 16 MiB, so a micro-batch on the
    # rank's 8 blocks keeps 128 MiB. 1F1B holds 4 micro-batches, GPipe 8, interleaved 1F1B 11 (stage, micro-batch)
    # pairs of 4 blocks each: 5.5 micro-batches
    mib = 2**20
    assert acts["gpipe"] - acts["1f1b"] == 4 * 128 * mib
    assert acts["interleaved-1f1b"] - acts["1f1b"] == 3 * 64 * mib


def test_bad_schedules():
    with pytest.raises(ConfigError) as e:
        make_workload(**{**PIPE, "grad_accum": 9}, pp_schedule="interleaved-1f1b")
    assert str(e.value) == ("pp_schedule='interleaved-1f1b' runs grad_accum=9 micro-batches in 2 rounds of pp=4, "
                            "which must divide them: use --grad-accum 8")
    with pytest.raises(ConfigError) as e:
        make_workload(**PIPE, pp_schedule="zero-bubble")
    assert "pp_schedule='zero-bubble' is not one of: 1f1b, interleaved-1f1b, gpipe" in str(e.value)
    spec = load_model("llama-3.1-8b")
    with pytest.raises(ConfigError) as e:
        estimate(spec, **{**PIPE, "gpus": 32, "pp": 32, "grad_accum": 32}, pp_schedule="interleaved-1f1b")
    assert str(e.value).endswith("pp_schedule='interleaved-1f1b' with pp=32 needs 64 stages of at least one block; "
                                 "meta-llama/Llama-3.1-8B has 32: use --pp-schedule 1f1b")
    assert make_workload(mode="train", pp_schedule="gpipe").ignored() == [
        "ignored: pp_schedule='gpipe' schedules pipeline-parallel training (--pp > 1)"]
