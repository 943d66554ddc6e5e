"""The output layer and loss of a tensor-parallel rank, on the fake process group.

torchtitan (torchtitan/models/llama3/infra/parallelize.py) makes the output layer
``ColwiseParallel`` over the vocabulary; with loss parallelism its output stays a DTensor
sharded on the last dimension (``output_layouts=Shard(-1), use_local_output=False``) and the loss
runs under ``torch.distributed.tensor.parallel.loss_parallel()``; without it the output is
gathered (``Replicate()``) and every rank computes the whole loss. This runs exactly that on
rank 0 of ``tp`` fake ranks under fake tensors and measures what the head and the loss hold:
what the estimator's head terms (vramlens.estimator.activations.head_saved) predict.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from vramlens.trace.build import TORCH_DTYPES


@dataclass(frozen=True, slots=True)
class HeadTrace:
    """Bytes on one rank (the weight shard and the hidden states excluded)."""

    saved: int            # alive from the loss' forward into its backward
    forward_peak: int     # the head and loss' forward peak
    backward_peak: int    # the loss' backward peak (saved tensors included)


def trace_tp_loss(*, vocab: int, hidden: int, batch: int, seq: int, tp: int, dtype: str = "bf16",
                  loss_parallel: bool = True) -> HeadTrace:
    """Trace ``cross_entropy(output_layer(h).float(), labels)`` on rank 0 of ``tp`` (after one warm-up
    step: DTensor's first call of each op makes temporaries the steady state does not)."""
    import torch
    import torch.nn.functional as F
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed.tensor import DTensor, Replicate, Shard
    from torch.distributed.tensor.parallel import ColwiseParallel, parallelize_module
    from torch.distributed.tensor.parallel import loss_parallel as lp_ctx

    from vramlens.trace.events import summarize
    from vramlens.trace.ranks import fake_process_group
    from vramlens.trace.recorder import Recorder

    with fake_process_group(tp) as mesh, FakeTensorMode(allow_non_fake_inputs=True):
        head = torch.nn.Linear(hidden, vocab, bias=False, dtype=TORCH_DTYPES[dtype])
        parallelize_module(head, mesh, ColwiseParallel(output_layouts=Shard(-1) if loss_parallel else Replicate(),
                                                       use_local_output=not loss_parallel))
        x = torch.randn(batch, seq, hidden, dtype=TORCH_DTYPES[dtype], requires_grad=True)
        labels = torch.randint(0, vocab, (batch, seq))
        for _ in range(2):  # the first run warms up, the second is kept
            rec = Recorder()
            rec.inside_dtensor = True
            with rec:
                weight = head.weight
                assert isinstance(weight, DTensor)  # parallelize_module made it one
                rec.mark((weight.to_local(), x, labels), "parameter")
                rec.set_phase("forward", 1)
                with lp_ctx() if loss_parallel else contextlib.nullcontext():
                    logits = head(x)
                    loss = F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(0, 1))
                    del logits
                    rec.end_forward()
                    rec.set_phase("backward", 1)
                    loss.backward()
                del loss
                rec.close()
            x.grad = None
            head.weight.grad = None
        events = [e for e in rec.events() if e.tag != "parameter"]
        s = summarize(events)
    peaks = {p: b for _st, p, b in s.phase_peaks}
    return HeadTrace(saved=s.by_tag.get("activation", 0), forward_peak=peaks.get("forward", 0),
                     backward_peak=peaks.get("backward", 0))
