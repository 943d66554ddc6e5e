"""One rank of a parallel run on PyTorch's fake process group: the process group and its device mesh, the
parallel plan applied on the meta-built model, the warm-up step, the recording and its result. Shared by FSDP2
(vramlens.trace.fsdp), tensor parallelism (vramlens.trace.tp) and both at once."""

from __future__ import annotations

import contextlib
import gc
import time
from collections.abc import Callable
from typing import Any, TypeVar

from vramlens.errors import TraceError, VramlensError
from vramlens.trace.common import name_of, phase_max, runner_layers, simulated_reserved
from vramlens.trace.result import TraceResult, make_trace_breakdown
from vramlens.workload import Workload

T = TypeVar("T")


@contextlib.contextmanager
def fake_process_group(world_size: int, rank: int = 0, tp: int = 1):
    """A fake process group of ``world_size`` ranks playing ``rank``, and a CPU device mesh; destroyed on exit.

    With ``tp`` > 1 the mesh is 2-D, ``(world_size // tp, tp)`` named ``("dp", "tp")``, the tensor-parallel
    ranks innermost as torchtitan lays them out (torchtitan/distributed/parallel_dims.py ``build_mesh``: the
    dims in the order pp, dp_replicate, dp_shard, cp, tp)."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if not dist.is_available():
        raise TraceError("this build of torch has no torch.distributed: FSDP cannot be traced")
    if dist.is_initialized():
        raise TraceError("a torch.distributed process group is already initialised in this process: "
                         "trace FSDP in a fresh process")
    dist.init_process_group("fake", rank=rank, world_size=world_size, store=FakeStore())
    try:
        if tp > 1:
            yield init_device_mesh("cpu", (world_size // tp, tp), mesh_dim_names=("dp", "tp"))
        else:
            yield init_device_mesh("cpu", (world_size,))
    finally:
        dist.destroy_process_group()


def materialize(runner, built, apply: Callable[[Any], T], plan: str, *, tie: Callable[[], None] | None = None) -> T:
    """``apply(built)`` (a parallel plan on the meta-built model), then fake storages for its tensors (``to_empty``
    inside the runner's fake mode) and its tied weights tied again (``tie``, or build.retie); what the plan
    returns. A plan refusing the model is one line naming ``plan``."""
    from vramlens.trace.build import retie

    try:
        out = apply(built)
        assert runner.fake_mode is not None  # Runner(mode="fake")
        with runner.fake_mode:
            built.model.to_empty(device="cpu")
            if tie is not None:
                tie()
            else:
                retie(built.model)
        return out
    except VramlensError:
        raise
    except Exception as e:  # noqa: BLE001 - a plan refusing the model: one clear line
        raise TraceError(f"{plan} failed on {type(built.model).__name__}: {type(e).__name__}: {e}") from e


def warm_up_step(runner, built, opt) -> None:
    """One unrecorded training step on a sharded or parallelized rank (the Runner's ``before_record``):
    DTensor's first call of each op makes temporaries the steady state does not; the optimizer's state is
    cleared after it, so the recorded step 1 creates it as a real first step does."""
    from vramlens.trace.recorder import Recorder
    from vramlens.trace.runner import InBackwardOptimizer

    in_backward = isinstance(opt, InBackwardOptimizer)
    if in_backward:  # its hooks step during backward: their marks go to a recorder that is thrown away
        opt.rec, kept = Recorder(), opt.rec
    inputs = runner._inputs(built, runner.wl.seq)
    with runner._autocast():
        if runner.wl.activation_offload:
            out, loss = runner._offloaded_forward(built, inputs)
        else:
            out = runner._forward(built, inputs)
            loss = runner._loss(out)
    del out
    loss.backward()
    if runner.wl.activation_offload:
        runner.offloader.end_backward()
    del loss, inputs
    if in_backward:
        opt.rec = kept
        for one in opt.per_param.values():
            one.state.clear()
    elif opt is not None:
        opt.step()
        opt.zero_grad(set_to_none=True)
        opt.state.clear()
    for p in built.model.parameters():
        p.grad = None
    gc.collect()


def record_rank(runner, built, around) -> tuple[Any, int, int]:
    """Record ``built`` inside the context ``around``: (recorder, parameters, trainable parameters), any
    failure inside torch as one TraceError line. DTensor.numel() is the global (unsharded) count."""
    from vramlens.trace.runner import describe_failure

    runner.rec.inside_dtensor = True  # the local ops of DTensor's own dispatch (Recorder.inside_dtensor)
    try:
        with around:
            rec = runner.run(built)
    except VramlensError:
        raise
    except Exception as e:  # noqa: BLE001 - any failure inside torch becomes one clear line
        raise TraceError(describe_failure(runner.rec, e)) from e
    ps = list(built.model.parameters())
    return rec, sum(p.numel() for p in ps), sum(p.numel() for p in ps if p.requires_grad)


def rank_result(runner, model, wl: Workload, events, summary, notes: list[str], *, alloc_conf, steps: int,
                params: int, trainable: int, t0: float) -> TraceResult:
    """The TraceResult of one traced rank (FSDP2, or tensor parallelism in training or inference)."""
    reserved = simulated_reserved(events, notes, alloc_conf)
    bd = make_trace_breakdown(summary, training=wl.training, source="trace", notes=notes,
                              phases=phase_max(summary.phase_peaks), peak_reserved=reserved, workload=wl)
    return TraceResult(
        breakdown=bd, summary=summary, events=tuple(events), workload=wl, model_name=name_of(model),
        params=params, trainable_params=trainable, backend="fake", steps=steps,
        step_peaks=summary.step_peaks, phase_peaks=summary.phase_peaks, n_layers=runner_layers(runner, model),
        seconds=time.perf_counter() - t0,
    )
