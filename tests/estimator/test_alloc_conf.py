"""The run's PYTORCH_CUDA_ALLOC_CONF (Workload.alloc_conf) in the estimator's reserve.

The allocated peak does not depend on the allocator's settings; the reserve does: with
expandable_segments:True each pool is one segment grown page by page (2 MiB small, 20 MiB large)
and the short-lived tensors' allowance is EXPANDABLE_LOSS_TENSOR_ALLOWANCE instead of LOSS_TENSOR_ALLOWANCE
in training, EXPANDABLE_FRAGMENTATION instead of TRANSIENT_FRAGMENTATION otherwise
(vramlens.allocator.analytic). tests/trace/test_alloc_conf_reserve.py checks the figures against traced
steps replayed through the simulator.
"""

import pytest

from vramlens.allocator.simulator import round_size
from vramlens.errors import ConfigError
from vramlens.estimator import estimate_spec
from vramlens.estimator.parallel import fsdp_stream_pools
from vramlens.estimator.reserve import transient_reserve
from vramlens.units import round_up
from vramlens.workload import Workload, make_workload

MIB = 1 << 20
EXPANDABLE = "expandable_segments:True"
TITAN = dict(mode="train", dtype="fp32", amp="bf16", fsdp=True, batch=2, seq=8192, checkpointing="selective-op")



def test_bad_alloc_conf_is_one_line_with_pytorchs_rule():
    with pytest.raises(ConfigError) as e:
        make_workload(alloc_conf="expandable_segments:Maybe")
    assert str(e.value) == ("alloc_conf='expandable_segments:Maybe': PYTORCH_CUDA_ALLOC_CONF expandable_segments=Maybe: "
                            "Expected a single True/False argument for expandable_segments")
    with pytest.raises(ConfigError) as e:
        make_workload(alloc_conf=5)
    assert str(e.value) == ("alloc_conf=5 must be a PYTORCH_CUDA_ALLOC_CONF string of at most 1,000 characters, "
                            "such as expandable_segments:True")
    assert make_workload(alloc_conf="").alloc_conf is None  # the web form's empty field: PyTorch's defaults


def test_transient_allowance_follows_the_setting():
    # default: 1000 MiB x 1.09 + (20 + 2) MiB partly used segments = 1112 MiB
    assert transient_reserve(1000 * MIB) == transient_reserve(1000 * MIB, None) == 1112 * MIB
    # expandable: 1000 MiB x 1.05 + one 20 MiB page = 1070 MiB
    assert transient_reserve(1000 * MIB, EXPANDABLE) == 1070 * MIB
    # a setting that leaves the segments as they are gives the default's figure
    assert transient_reserve(1000 * MIB, "expandable_segments:False") == 1112 * MIB


def test_training_allowance_is_a_share_of_the_loss_tensor():
    # default: 1000 MiB + 0.69 x 500 MiB (the loss' largest tensor) + (20 + 2) MiB = 1367 MiB, rounded up to 2 MiB
    assert transient_reserve(1000 * MIB, None, 500 * MIB) == 1368 * MIB
    # expandable: 1000 MiB + 0.51 x 500 MiB + one 20 MiB page = 1275 MiB, rounded up to 2 MiB
    assert transient_reserve(1000 * MIB, EXPANDABLE, 500 * MIB) == 1276 * MIB
    # the allowance does not grow with the short-lived bytes: 4000 + 345 + 22 MiB, rounded up
    assert transient_reserve(4000 * MIB, None, 500 * MIB) == 4368 * MIB
    # no loss on this GPU (a pipeline stage without the head): the partly used segments only
    assert transient_reserve(1000 * MIB, None, 0) == 1022 * MIB


def test_training_reserve_reads_the_loss_tensor(llama8b):
    # Llama 3 8B, bf16, batch 2 x 2048: the loss' largest tensor is the fp32 upcast of the logits,
    # 4 B x 128,256 x 4,096 tokens = 2,101,346,304 B (2,004 MiB); the reserve is the persistent tensors' segments
    # plus the short-lived bytes at the peak, 0.69 of it and the partly used segments
    from vramlens.estimator.state import train_state

    w = make_workload(mode="train", dtype="bf16", batch=2, seq=2048)
    bd = estimate_spec(llama8b, w).breakdown
    st = train_state(llama8b, w, None)
    t = bd.peak_allocated - st.reserve_persistent
    assert bd.peak_reserved == st.reserve_base + round_up(t + int(0.69 * 2_101_346_304) + 22 * MIB, 2 * MIB)


def test_reduce_scatter_pool_is_one_expandable_segment(llama8b):
    # FSDP2's sharded fp32 gradients, one flat tensor per group, all kept until zero_grad: with expandable segments
    # the reduce-scatter stream's pool is one segment grown by 20 MiB pages to hold them all
    n = 8
    groups = {}
    for t in llama8b.tensors:
        if t.role != "buffer":
            groups[t.layer] = groups.get(t.layer, 0) + -(-t.shape[0] // n) * (t.numel // t.shape[0])
    kept = sum(round_size(g * 4) for g in groups.values())
    _, rs = fsdp_stream_pools(llama8b, Workload(gpus=n, alloc_conf=EXPANDABLE, **TITAN), 4)
    assert rs == round_up(kept, 20 * MIB)
    _, rs_default = fsdp_stream_pools(llama8b, Workload(gpus=n, **TITAN), 4)
    assert rs_default == sum(round_up(round_size(g * 4), 2 * MIB) for g in groups.values())  # one segment each


@pytest.mark.parametrize("w", [
    dict(mode="train", dtype="bf16", batch=2, seq=2048),
    dict(TITAN, gpus=8),
    dict(mode="inference", dtype="bf16", batch=4, seq=1024, new_tokens=128),
])
def test_only_the_reserve_changes(llama8b, w):
    default = estimate_spec(llama8b, make_workload(**w)).breakdown
    expandable = estimate_spec(llama8b, make_workload(alloc_conf=EXPANDABLE, **w)).breakdown
    assert expandable.peak_allocated == default.peak_allocated
    assert expandable.peak_allocated <= expandable.peak_reserved < default.peak_reserved
    # memory outside the allocator is the same: nvidia-smi's total moves with the reserve
    assert expandable.device_total - expandable.peak_reserved == default.device_total - default.peak_reserved


def test_cuda_malloc_async_is_refused():
    with pytest.raises(ConfigError) as e:
        make_workload(mode="train", alloc_conf="backend:cudaMallocAsync")
    assert str(e.value) == ("alloc_conf='backend:cudaMallocAsync': backend:cudaMallocAsync is CUDA's own pool "
                            "allocator, which vramlens does not model: drop backend (the native caching allocator)")
