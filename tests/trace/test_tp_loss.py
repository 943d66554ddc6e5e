"""Loss parallelism (torchtitan): the output layer and the loss on one tensor-parallel rank, traced
on the fake process group, against the estimator's head terms."""

import pytest

from vramlens.estimator import activations as A
from vramlens.estimator.core import activation_totals
from vramlens.estimator.parallel import split
from vramlens.models.inventory import spec_from_config
from vramlens.trace.crosscheck import tiny_config
from vramlens.trace.tp_loss import trace_tp_loss
from vramlens.workload import make_workload

pytestmark = pytest.mark.slow  # DTensor dispatch under fake tensors: seconds


@pytest.mark.parametrize("loss_parallel", [True, False])
def test_head_and_loss_on_one_rank_match_the_estimate(loss_parallel):
    spec = spec_from_config(tiny_config("llama-2-7b"), name="llama-tiny")  # V = 4,096, h = 256
    w = make_workload(mode="train", dtype="bf16", batch=1, seq=256, gpus=4, tp=4, loss_parallel=loss_parallel)
    saved, peak, _ = A.head_saved(spec, w, 1, 256)
    at = activation_totals(spec, w, split(spec, w))
    traced = trace_tp_loss(vocab=spec.vocab_size, hidden=spec.hidden_size, batch=1, seq=256, tp=4,
                           loss_parallel=loss_parallel)
    v = 4096 // 4 if loss_parallel else 4096
    assert saved == 4 * v * 256  # fp32 log_softmax of the local vocabulary
    # the trace also keeps the int64 nll bookkeeping (two 512-byte blocks)
    assert abs(traced.saved - saved) <= 1024
    assert abs(traced.forward_peak - peak) <= 0.05 * peak  # logits, their fp32 upcast and log_softmax
    assert abs(traced.backward_peak - (saved + at.loss_backward if at.loss_backward is not None else 3 * saved)) \
        <= 0.05 * traced.backward_peak
