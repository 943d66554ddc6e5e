"""FSDP2 traced per rank under PyTorch's fake process group (vramlens.trace.fsdp).

The per-rank state is checked against figures computed here from the model's shapes alone:
FSDP2 shards every parameter on dim 0 into ``ceil(dim0 / N)`` rows (padding the last ranks;
rank 0 holds full chunks), each sharded parameter and each optimizer state is its own
allocation (rounded to 512 B like CUDA's allocator), and each FSDP group's sharded gradients
are views of one flat reduce-scatter output.
"""

from __future__ import annotations

import json
import math

import pytest
from tests.trace.conftest import tiny_llama

from vramlens.errors import TraceError
from vramlens.trace import trace
from vramlens.trace.fsdp import trace_fsdp
from vramlens.workload import Workload

# odd sizes on purpose: 1001-row embedding and head, 342-row MLP projections pad under N = 4
CFG = tiny_llama(layers=2, intermediate_size=342, vocab_size=1001)
W = dict(mode="train", dtype="fp32", batch=2, seq=32)


def _r(n: int) -> int:
    return -(-n // 512) * 512


def _expected(cfg: dict, n: int) -> dict[str, int]:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    fields = {k: v for k, v in cfg.items() if k not in ("architectures", "model_type")}
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model(cfg["model_type"], **fields))

    def shard(p) -> int:  # rank 0's shard, bytes
        rows = math.ceil(p.shape[0] / n)
        return rows * (p.numel() // p.shape[0]) * p.element_size()

    def padded(p) -> int:  # the unsharded parameter FSDP2 all-gathers: N padded shards
        return shard(p) * n

    blocks = [list(b.parameters()) for b in model.model.layers]
    inside = {id(p) for ps in blocks for p in ps}
    root = [p for p in model.parameters() if id(p) not in inside]
    params = list(model.parameters())
    return {
        "weights": sum(_r(shard(p)) for p in params) + sum(_r(b.nbytes) for b in model.buffers()),
        "gradients": sum(_r(sum(shard(p) for p in ps)) for ps in [*blocks, root]),
        "optimizer_states": 2 * sum(_r(shard(p)) for p in params),  # AdamW: exp_avg, exp_avg_sq
        "block_unsharded": max(sum(_r(padded(p)) for p in ps) for ps in blocks),
        "root_unsharded": sum(_r(padded(p)) for p in root),
        "full_params": sum(p.nbytes for p in params),
    }


@pytest.fixture(scope="module")
def single():
    return trace(CFG, **W)


@pytest.fixture(scope="module", params=[2, 4])
def traced(request):
    n = request.param
    return n, trace_fsdp(CFG, Workload(**W, gpus=n, fsdp=True), world_size=n)


def test_sharded_state_is_exact(traced):
    n, res = traced
    exp = _expected(CFG, n)
    bd = res.breakdown
    for name in ("weights", "gradients", "optimizer_states"):
        assert bd[name] == exp[name], (n, name, bd[name], exp[name])
    # the full model's figures over N, up to padding and 512-byte rounding per tensor
    n_tensors = len(res.summary.live_at_peak) + 40
    assert abs(bd["weights"] * n - exp["full_params"]) <= n * 1024 * n_tensors
    assert res.params == exp["full_params"] // 4  # global counts, not the shard's
    assert res.workload.fsdp and res.workload.gpus == n


def test_all_gather_buffers_are_comm_buffers(traced):
    n, res = traced
    exp = _expected(CFG, n)
    resized = [e for e in res.events if e.op == "resize_"]
    # the unsharded parameters come and go through storage resizes, every one seen and tagged
    assert resized and {e.tag for e in resized} == {"comm_buffer"}
    allocs = sum(e.action == "alloc" for e in resized)
    frees = sum(e.action == "free" for e in resized)
    assert allocs >= 2 * res.steps * 9 and frees >= allocs - 9 * 3  # 9 tensors a block, fwd + bwd
    comm = res.breakdown["comm_buffers"]
    # at least the current and the prefetched block, plus the root's unsharded embedding/head
    # (gathered in forward, kept through backward); at most, in forward, the root's flat
    # all-gather output held until the first block's copy-out (FSDP2's implicit prefetch), or in
    # backward three blocks (current, prefetched, reduce-scatter input) beside the root
    blk, root = exp["block_unsharded"], exp["root_unsharded"]
    assert comm >= 2 * blk + root
    assert comm <= max(2 * (blk + root), 3 * blk + root) + 4096
    assert res.summary.by_tag["comm_buffer"] == comm
    assert "rank 0 of" in " ".join(res.breakdown.notes)


def test_peak_below_unsharded(traced, single):
    n, res = traced
    assert res.breakdown.peak_allocated < single.breakdown.peak_allocated
    assert res.breakdown["activations"] == single.breakdown["activations"]  # same micro-batch per rank
    assert res.summary.step_peaks[1][1] >= res.summary.step_peaks[0][1]  # steady state from step 2


def test_front_door_and_cli_route_to_fsdp(capsys, tmp_path):
    from vramlens.cli.main import main

    res = trace(CFG, **W, fsdp=True, gpus=2, steps=1)
    assert res.workload.fsdp and res.breakdown["comm_buffers"] > 0
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(CFG))
    rc = main(["trace", str(cfg), "--mode", "train", "--seq", "32", "--batch", "2",
               "--dtype", "fp32", "--fsdp", "--gpus", "2", "--steps", "1", "--json", "--quiet"])
    assert rc == 0
    d = json.loads(capsys.readouterr().out)
    assert d["components"]["comm_buffers"] > 0
    assert d["components"]["weights"] == res.breakdown["weights"]


def test_process_group_is_destroyed():
    import torch.distributed as dist

    trace_fsdp(CFG, Workload(**W, gpus=2, fsdp=True), world_size=2, steps=1)
    assert not dist.is_initialized()
    with pytest.raises(TraceError, match="fake tensors only"):
        trace_fsdp(CFG, Workload(**W, gpus=2, fsdp=True), world_size=2, backend="real-cpu")
    assert not dist.is_initialized()


def test_bad_combinations_are_one_line():
    with pytest.raises(TraceError, match="extrapolation"):
        trace(CFG, **W, fsdp=True, gpus=2, layers=3)
    with pytest.raises(TraceError, match="factory"):
        trace_fsdp("tests.trace.factories:mlp", Workload(**W, gpus=2, fsdp=True), world_size=2)


def test_resizes_seen_after_another_tool_patched_resize():
    """MemTracker leaves torch's resize_ in UntypedStorage's own __dict__ after it exits."""
    import torch

    had = "resize_" in torch.UntypedStorage.__dict__
    torch.UntypedStorage.resize_ = torch._C.StorageBase.resize_
    try:
        res = trace_fsdp(CFG, Workload(**W, gpus=2, fsdp=True), world_size=2, steps=1)
    finally:
        if not had:
            del torch.UntypedStorage.resize_
    assert any(e.op == "resize_" and e.action == "free" for e in res.events)
    assert res.breakdown["weights"] == _expected(CFG, 2)["weights"]


@pytest.mark.slow  # about 15 s on 2 cores
def test_units_gather_the_output_layer_once_per_loss_chunk():
    """fsdp_units="blocks+embed+output" (torchtune's custom_sharded_layers): the output layer is a unit of its own,
    all-gathered at each of its calls (one per loss chunk) in forward and resharded after each, so its unsharded
    weight (ceil(1001 / 2) = 501 rows x 2 ranks x 128 x 4 B = 513,024 B) is allocated 4 times in forward with 4 chunks."""
    n, chunks = 2, 4
    res = trace_fsdp(CFG, Workload(**W, gpus=n, fsdp=True, loss_chunks=chunks, fsdp_units="blocks+embed+output"),
                     world_size=n, steps=1)
    head = [e for e in res.events if e.module == "lm_head" and e.tag == "comm_buffer" and e.op == "resize_"
            and e.action == "alloc" and e.phase == "forward" and e.step == 1]
    assert [e.nbytes for e in head] == [501 * 2 * CFG["hidden_size"] * 4] * chunks == [513_024] * 4
    assert "fully_shard on each of 2 blocks, the output layer, the input embedding and the root" in " ".join(
        res.breakdown.notes)


def test_units_refuse_a_tied_output_layer():
    with pytest.raises(TraceError) as e:
        trace_fsdp(dict(CFG, tie_word_embeddings=True), Workload(**W, gpus=2, fsdp=True,
                                                                 fsdp_units="blocks+embed+output"), world_size=2)
    assert str(e.value) == ("fsdp_units='blocks+embed+output': LlamaForCausalLM ties its output layer to the input "
                            "embedding (one parameter cannot be in two FSDP units): use --fsdp-units blocks")
