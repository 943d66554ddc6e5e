"""``calibrate()``: run the user's step at two batch sizes (and two sequence lengths) under the watch's
backend and fit the measured peaks (:mod:`vramlens.monitor.calibration`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from vramlens.monitor.calibration import Calibration, Point, check_sizes, fit
from vramlens.monitor.session import Watch


def calibrate(step_fn: Callable[..., Any], batch_sizes: tuple[int, int] = (1, 2),
              seq_lens: tuple[int, int] | None = None, *, model: Any = None, optimizer: Any = None,
              gpu: Any = None, capacity_bytes: int | None = None, margin: float = 0.1, backend: str = "auto",
              model_name: Any = None, workload: Any = None, store: bool = False) -> Calibration:
    """Measure a step's peak at two batch sizes (times two sequence lengths) and answer the largest that fit.

    One warm-up step (the smallest size: the optimizer's state is made then), then one step per
    size, each measured from its start to its end (optimizer steps inside do not cut it).

    A step's peak is the largest of its phases' peaks (forward, backward, the optimizer's update),
    each linear in the batch; the fit extrapolates the phase that made the peak at the sizes
    measured. Measure where activations make the peak (sizes near the answer, not 1 and 2 when
    the optimizer's temporaries outweigh a few samples): a peak that does not grow between the
    two sizes is reported in the notes.

    Args:
        step_fn: ``step_fn(batch)`` or, with ``seq_lens``, ``step_fn(batch, seq)``: one full step.
        batch_sizes: two batch sizes, smallest first.
        seq_lens: two sequence lengths, smallest first, to fit the quadratic term (eager attention).
        model, optimizer: as for ``watch()``; on the CPU backend the model's parameters are only
            counted when it is given (tensors made before the watch are otherwise unseen).
        gpu: a GPU name or size ("A100-80GB", "24GB") whose capacity the answers are for.
        capacity_bytes: the capacity in bytes instead (the CPU cap in tests); default: the
            CUDA device's total memory on the CUDA backend.
        margin: fraction of the capacity kept free.
        backend: "auto", "cpu" or "cuda", as for ``watch()``.
        model_name, workload: what ``vramlens.estimate`` takes: each point gets the analytic peak
            allocated for the same batch and sequence beside the measured one.
        store: keep the calibration run in the runs database.

    Returns:
        The Calibration: the points, the fit, max_batch and max_seq.

    Raises:
        ValueError: bad sizes or margin (every problem in one message).
    """
    problems = check_sizes("batch_sizes", batch_sizes, required=True) + check_sizes("seq_lens", seq_lens, required=False)
    if not 0 <= margin < 1:
        problems.append(f"margin={margin} must be in [0, 1): e.g. 0.1 keeps 10% of the capacity free")
    if problems:
        raise ValueError("; ".join(problems))
    if capacity_bytes is None and gpu is not None:
        from vramlens.hardware import get_gpu

        capacity_bytes = get_gpu(str(gpu)).capacity_bytes
    configs = [(b, s) for s in (seq_lens or (None,)) for b in batch_sizes]
    points: list[Point] = []
    with Watch(model, optimizer, backend=backend, store=store, label="calibrate") as w:
        if capacity_bytes is None and w.backend_name == "cuda":
            capacity_bytes = int(torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory)
        _call(step_fn, *configs[0])  # warm-up
        for b, s in configs:
            w.mark()
            _call(step_fn, b, s)
            points.append(Point(b, s, w.peak_since_mark(), _estimate(model_name, workload, b, s)))
    result = fit(points, capacity_bytes=capacity_bytes, margin=margin)
    if model is None and optimizer is None and w.backend_name == "cpu":
        from dataclasses import replace

        result = replace(result, notes=result.notes + (
            "no model given on the CPU backend: its parameters are not in the fixed part",))
    return result


def _call(step_fn: Callable[..., Any], b: int, s: int | None) -> None:
    if s is None:
        step_fn(b)
    else:
        step_fn(b, s)


def _estimate(model_name: Any, workload: Any, b: int, s: int | None) -> int | None:
    """vramlens' analytic peak allocated for the same step (None when no model is named or it fails)."""
    if model_name is None:
        return None
    from vramlens.errors import VramlensError
    from vramlens.estimator import estimate
    from vramlens.workload import Workload, make_workload, workload_fields

    try:
        base = ({f: getattr(workload, f) for f in workload_fields()} if isinstance(workload, Workload)
                else dict(workload or {}))
        base["batch"] = b
        if s is not None:
            base["seq"] = s
        return int(estimate(model_name, make_workload(**base)).breakdown.peak_allocated)
    except (VramlensError, ValueError):
        return None
