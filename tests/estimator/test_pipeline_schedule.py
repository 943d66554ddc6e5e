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


# torchtitan's PP x FSDP2: fp32 shards, MixedPrecisionPolicy(bf16, fp32), 8 GPUs as pp 4 x dp 2
TITAN_PP = dict(mode="train", dtype="fp32", amp="bf16", fsdp=True, gpus=8, pp=4, batch=1, seq=2048, grad_accum=4,
                checkpointing="full", optimizer="adamw", optimizer_impl="foreach")
# Llama 3.1 8B: a block holds 2 x 4,096^2 (q, o) + 2 x 4,096 x 1,024 (k, v) + 3 x 4,096 x 14,336 (MLP) + 2 x 4,096
# (norms) = 218,112,000 parameters; the first stage (the most loaded: split) holds 8 blocks and the embedding,
# 128,256 x 4,096 = 525,336,576, with the final norm's 4,096 (vramlens counts it on the embedding's side)
BLOCK, ROOT_PART = 218_112_000, 525_340_672
STAGE = 8 * BLOCK + ROOT_PART  # 2,270,236,672


def test_fsdp_stage_keeps_its_parameters_gathered_and_its_gradients_unsharded():
    est = estimate(load_model("llama-3.1-8b"), **TITAN_PP)
    bd = est.breakdown
    # gradients: accumulated unsharded in reduce_dtype fp32 until the last micro-batch's backward (torch's
    # pipelining stage: set_requires_gradient_sync(False)), the stage's whole 2,270,236,672 x 4 B
    assert bd["gradients"] == STAGE * 4
    # comm buffers: the stage's parameters unsharded in bf16 all step (reshard_after_forward=False, no reshard after
    # backward), R = 2,270,236,672 x 2 B, plus the larger of the embedding group's flat all-gather output
    # (1,050,681,344 B) with a block's bf16 copy-in (436,224,000 / 2 ranks) and a block's fp32 reduce-scatter input
    # (872,448,000 B)
    assert bd["comm_buffers"] == STAGE * 2 + max(ROOT_PART * 2 + BLOCK * 2 // 2, BLOCK * 4)
    # without pipeline parallelism FSDP2 keeps the sharded fp32 gradients: 8,030,261,248 params x 4 B / 8 ranks
    flat = estimate(load_model("llama-3.1-8b"), **{**TITAN_PP, "pp": 1, "grad_accum": 1})
    assert flat.breakdown["gradients"] == 8_030_261_248 * 4 // 8
    assert "unsharded, accumulated over the micro-batches" in est.explain["gradients"]


def test_fsdp_stage_gradients_are_alive_in_forward_after_the_first_backward():
    spec = load_model("llama-3.1-8b")
    phases = {m: dict(estimate(spec, **{**TITAN_PP, "grad_accum": m}).breakdown.phases) for m in (1, 4, 8)}
    # 1F1B, pp 4: with m = 4 rank 0 runs its 4 forwards before its first backward, 3 more micro-batches' block
    # inputs (8 x 2,048 x 4,096 x 2 B = 128 MiB each) in flight and no gradient yet
    assert phases[4]["forward"] - phases[1]["forward"] == 3 * 128 * 2**20
    # with m = 8 its later forwards follow backwards: the stage's unsharded fp32 gradients are there too
    assert phases[8]["forward"] - phases[4]["forward"] == STAGE * 4


def test_fsdp_stage_groups_are_the_stages_own():
    from vramlens.estimator.parallel import stage_group_shard_numels

    spec = load_model("llama-3.1-8b")
    root, blocks = stage_group_shard_numels(spec, make_workload(**TITAN_PP), 2)
    # the first stage's root part over 2 FSDP ranks: the embedding's 128,256 / 2 rows of 4,096 and the final norm's
    # 4,096 / 2 (vramlens counts it on the embedding's side); then its 8 blocks, each 218,112,000 / 2 (all dims even)
    assert root == 64_128 * 4_096 + 2_048
    assert blocks == (109_056_000,) * 8


def test_fsdp_stage_gradients_are_whole_after_the_first_micro_batchs_backward():
    spec = load_model("llama-3.1-8b")
    phases = {m: dict(estimate(spec, **{**TITAN_PP, "grad_accum": m}).breakdown.phases) for m in (1, 4, 8)}
    # rank 0 holds 4 micro-batches' block inputs at its backward's peak either way (min(pp, m) = 4); with m = 4 its
    # gradients are whole only after its first micro-batch's backward has freed that one's inputs of 7 of its 8
    # blocks (block 0's, recomputed last, aside: 7 x 16 MiB), with m = 8 a forward has added a micro-batch back
    assert phases[8]["backward"] - phases[4]["backward"] == 7 * 16 * 2**20
    # and 3 more micro-batches in flight than with m = 1: 3 x 128 MiB
    assert phases[4]["backward"] - phases[1]["backward"] == 3 * 128 * 2**20
