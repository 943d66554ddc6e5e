"""FSDP2 over tensor parallelism (torchtitan's 2-D runs): what a rank's gradients hold.

Under TP alone DTensor keeps the RowwiseParallel input embedding's gradient whole (V x h) on every
rank; under FSDP2 over the TP ranks FSDP2 redistributes each gradient to its parameter's TP placement
before the reduce-scatter (torch/distributed/fsdp/_fully_shard/_fsdp_param.py
``FSDPParam._get_grad_inner_tensor``), so no whole copy is kept, and the root's unsharded output-layer
gradient is the rank's TP shard, ceil(V / tp) rows. Both measured by vramlens.trace.fsdp on a 2-D mesh
(tests/trace/test_fsdp_tp.py).
"""

import pytest

from vramlens.estimator.parallel import tp_embedding_gradient_extra
from vramlens.estimator.state import train_state
from vramlens.workload import Workload

TRAIN = dict(mode="train", method="full", batch=1, seq=1024)



def test_the_embedding_gradient_is_whole_under_tp_alone_only(llama8b):
    # TP alone: V x h - V x h // tp = 128,256 x 4,096 - 128,256 x 4,096 // 2 = 262,668,288 elements beyond the shard
    assert tp_embedding_gradient_extra(llama8b, Workload(**TRAIN, dtype="bf16", tp=2, gpus=2)) == 262_668_288
    assert tp_embedding_gradient_extra(llama8b, Workload(**TRAIN, dtype="bf16", tp=2, gpus=8, fsdp=True)) == 0


def test_the_root_gradient_is_the_tp_shard_under_fsdp(llama8b):
    mp = dict(TRAIN, dtype="fp32", amp="bf16", fsdp=True)
    # FSDP alone over 8 ranks: the unsharded bf16 output layer, 128,256 x 4,096 x 2 = 1,050,673,152 B
    assert train_state(llama8b, Workload(**mp, gpus=8), None).head_grad == 1_050_673_152
    # dp 4 x tp 2: its TP shard, ceil(128,256 / 2) x 4,096 x 2 = 64,128 x 8,192 = 525,336,576 B
    assert train_state(llama8b, Workload(**mp, gpus=8, tp=2), None).head_grad == 525_336_576
    # dp 2 x tp 8: 16,032 x 4,096 x 2 = 131,334,144 B
    assert train_state(llama8b, Workload(**mp, gpus=16, tp=8), None).head_grad == 131_334_144


def test_fsdp_over_tp_gradients_are_the_shards(llama8b):
    from vramlens.estimator import estimate_spec

    w = dict(TRAIN, dtype="bf16", fsdp=True, gpus=8, tp=2)
    bd = estimate_spec(llama8b, Workload(**w)).breakdown
    tp_alone = estimate_spec(llama8b, Workload(**dict(w, fsdp=False, gpus=2))).breakdown
    # FSDP over dp 4 divides TP alone's sharded gradients by 4; TP alone adds the embedding's whole gradient,
    # 262,668,288 extra bf16 elements (test above), which FSDP2 does not keep
    assert tp_alone["gradients"] - 2 * 262_668_288 == pytest.approx(4 * bd["gradients"], abs=4 * 512)
