"""FSDP2's side-stream pools in the reserve (estimator.parallel.fsdp_stream_pools).

FSDP2 allocates each group's flat all-gather output (and, under a mixed-precision policy, its
``param_dtype`` copy of the shard) on the all-gather copy-in stream, and each group's
reduce-scatter output, which becomes the sharded ``.grad``, on the reduce-scatter stream
(torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py ``foreach_all_gather`` and
``foreach_reduce``). The caching allocator reuses a freed block only on its own stream, so those
pools stay reserved beside the default stream's: after ``zero_grad`` the gradients' blocks are
free but still reserved while the next step's activations peak on the default stream.
"""

from dataclasses import replace

import pytest

from vramlens.allocator.simulator import round_size
from vramlens.estimator import estimate_spec
from vramlens.estimator.parallel import fsdp_stream_pools
from vramlens.estimator.state import reserved_total, train_state
from vramlens.models.catalog import catalog_spec
from vramlens.units import round_up
from vramlens.workload import Workload

MIB = 1 << 20
TITAN = dict(mode="train", dtype="fp32", amp="bf16", fsdp=True, batch=2, seq=8192, checkpointing="selective-op")



def _groups(spec, n):
    """(root, blocks) padded shard numel: ceil(dim0 / n) rows of each parameter."""
    root, blocks = 0, {}
    for t in spec.tensors:
        if t.role == "buffer":
            continue
        shard = -(-t.shape[0] // n) * (t.numel // t.shape[0])
        if t.layer is None:
            root += shard
        else:
            blocks[t.layer] = blocks.get(t.layer, 0) + shard
    return root, list(blocks.values())


def test_reduce_scatter_pool_holds_every_sharded_gradient(llama8b):
    # one flat fp32 reduce-scatter output per FSDP group (32 blocks and the root), all alive until
    # zero_grad: over 8 ranks each is over 10 MiB, so its own segment rounded to 2 MiB
    root, blocks = _groups(llama8b, 8)
    _, rs = fsdp_stream_pools(llama8b, Workload(gpus=8, **TITAN), 4)
    assert rs == sum(round_up(g * 4, 2 * MIB) for g in [root, *blocks])
    # over 128 ranks a block's is 6.5 MiB: the allocator packs those into 20 MiB segments
    root, blocks = _groups(llama8b, 128)
    _, rs = fsdp_stream_pools(llama8b, Workload(gpus=128, **TITAN), 4)
    sizes = [round_size(g * 4) for g in [root, *blocks]]
    assert sum(sizes) <= rs < sum(sizes) + 20 * MIB


def test_all_gather_pool_holds_the_root_and_a_block(llama8b):
    # forward: the root's bf16 output (and its bf16 shard copy) first, then each block's output while
    # the previous one is held until the copy-out (FSDPCommContext.all_gather_state)
    n = 8
    root, blocks = _groups(llama8b, n)
    ag, _ = fsdp_stream_pools(llama8b, Workload(gpus=n, **TITAN), 4)
    at_least = round_size(root * n * 2) + round_size(blocks[0] * n * 2)
    assert at_least <= ag <= at_least + round_size(root * 2) + 2 * round_size(blocks[0] * n * 2)


def test_stream_pools_add_to_the_default_streams_reserve(llama8b):
    w = Workload(gpus=8, **TITAN)
    st = train_state(llama8b, w, None)
    assert st.stream_pools == sum(fsdp_stream_pools(llama8b, w, 4))
    peak = 60 * 2**30
    alone = reserved_total(replace(st, stream_pools=0), peak)[0]
    assert reserved_total(st, peak, default_peak=peak)[0] == alone + st.stream_pools
    # the gradients are the reduce-scatter stream's, not the default stream's persistent tensors
    assert st.reserve_persistent == st.weights + st.master + st.opt + st.comm


def test_no_stream_pools_without_fsdp2(llama8b):
    for kw in (dict(gpus=8, zero=3), dict(gpus=1), dict(gpus=8)):
        st = train_state(llama8b, Workload(mode="train", dtype="bf16", **kw), None)
        assert st.stream_pools == 0


def test_reserve_falls_by_at_least_the_sharded_state(llama8b):
    # 8 -> 128 ranks: the fp32 weights, AdamW states and (now in the reduce-scatter pool) gradients
    # all shrink 16x; the allocated peak misses the gradients, the reserve does not
    e8, e128 = (estimate_spec(llama8b, Workload(gpus=n, **TITAN)).breakdown for n in (8, 128))
    state = llama8b.params * 16 * (1 / 8 - 1 / 128)
    assert e8.peak_allocated - e128.peak_allocated < state
    assert e8.peak_reserved - e128.peak_reserved >= state
    assert e8.peak_reserved - e128.peak_reserved - state < 2**30  # the other pools do not scale with N


def test_lora_reduce_scatters_only_the_adapters():
    """Under LoRA the frozen base weights get no gradient, so no reduce-scatter: the pool holds the
    adapters' sharded gradients alone (it held every parameter's before, 6.8 GB for Llama 2 7B on 2 GPUs)."""
    spec = catalog_spec("llama-2-7b")
    lora = Workload(mode="train", method="lora", lora_targets=("q_proj", "v_proj"), lora_dtype="bf16", fsdp=True,
                    gpus=2)
    # per block: q_proj's and v_proj's A (8 x 4,096) and B (4,096 x 8), dim 0 padded and split over 2 ranks:
    # 2 x (4 x 4,096 + 2,048 x 8) = 65,536 elements, 131,072 B in bf16; the 32 blocks' pack 16 to a 2 MiB
    # small-pool segment
    assert fsdp_stream_pools(spec, lora, 2)[1] == 2 * 2 * MIB
    full = Workload(mode="train", fsdp=True, gpus=2)
    assert fsdp_stream_pools(spec, full, 2)[1] > 6_000 * MIB


@pytest.mark.parametrize("one_at_a_time", [False, True])
@pytest.mark.parametrize("model,n,lora", [("llama-3.1-8b", 8, False), ("qwen2.5-0.5b", 4, False),
                                          ("qwen2.5-0.5b", 2, True)])
def test_reduce_scatter_pool_stops_growing_after_two_micro_batches(model, n, lora, one_at_a_time):
    """fsdp_stream_pools replays two micro-batches at most: the pattern itself, replayed with up to 16, says the
    reserve is the same (each later micro-batch's alloc/free pairs reuse what the one before cached)."""
    from vramlens.estimator.parallel import _group_adapter_shard_numels, _reduce_scatter_pool

    spec = catalog_spec(model)
    assert spec is not None
    adapters = None
    if lora:
        w = Workload(mode="train", method="lora", fsdp=True, gpus=n, dtype="bf16")
        adapters = _group_adapter_shard_numels(spec, w, n)
    replay = _reduce_scatter_pool.__wrapped__  # type: ignore[attr-defined]
    two = replay(spec, n, 1, 4, one_at_a_time, 2, adapters)
    assert two > 0
    for ga in (3, 5, 16):
        assert replay(spec, n, 1, 4, one_at_a_time, ga, adapters) == two
