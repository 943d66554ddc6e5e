"""Watch the real run: per-step memory by category, leaks, an OOM post-mortem, a runs database.

Runs inside the user's torch process, so it imports torch, but only when ``watch()`` is called:
``import vramlens.monitor`` alone (the runs database, the records) stays light.

Public API::

    with vramlens.watch(model, optimizer) as w:      # or @vramlens.watch(...) on a function
        ...train...
    w.report                                         # WatchReport: steps, leak, oom, to_dict(), to_html()

The function is ``vramlens.watch`` (also ``vramlens.monitor.watch``); the package is
``vramlens.monitor``, so that each name means one thing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from vramlens.monitor.calibration import Calibration
from vramlens.monitor.records import (
    CATEGORIES,
    Fix,
    Leak,
    LeakSite,
    OomReport,
    StepRecord,
    WatchReport,
    report_from_dict,
)

if TYPE_CHECKING:  # pragma: no cover
    from vramlens.monitor.session import Watch

__all__ = ["CATEGORIES", "Calibration", "Fix", "Leak", "LeakSite", "OomReport", "StepRecord", "Watch", "WatchReport",
           "calibrate", "report_from_dict", "watch"]


def watch(model: Any = None, optimizer: Any = None, every: int = 1, **options: Any) -> Watch:
    """Watch a loop's memory; use as ``with watch(...) as w:`` or as a decorator.

    Args:
        model: the ``nn.Module`` being run: its parameters and buffers are the ``parameters``
            category, its module names attribute allocations (CPU) and gradients are filed as
            they are accumulated.
        optimizer: only this optimizer's steps count (default: any torch.optim optimizer's).
        every: keep a StepRecord every ``every`` optimizer steps (its peak covers them all).
        **options: ``backend`` ("auto", "cpu", "cuda"); ``cpu_limit_bytes`` (a cap that makes the
            CPU backend raise an OutOfMemoryError); ``model_name`` and ``workload`` (what
            `vramlens.estimate` takes: the OOM post-mortem puts the estimate and the advisor's
            fixes beside the measurement); ``gpu`` (the GPU the fixes must fit); ``store``
            (keep the run in the runs database, default True); ``label``; ``html`` and
            ``json_path`` (write the report there at the end); ``oom_history`` (CUDA: record
            allocation history for the snapshot written at an OOM, default True).

    Returns:
        A Watch: a context manager and decorator; ``w.report`` is the WatchReport once it ends.

    Raises:
        MissingExtraError: torch is not installed.
        ValueError: a bad ``every``, ``backend`` or ``cpu_limit_bytes``.
    """
    try:
        import torch  # noqa: F401
    except ImportError:
        from vramlens.errors import MissingExtraError

        raise MissingExtraError("torch", "trace") from None
    from vramlens.monitor.session import Watch

    return Watch(model, optimizer, every, **options)


def calibrate(step_fn: Any, batch_sizes: tuple[int, int] = (1, 2), seq_lens: tuple[int, int] | None = None,
              **options: Any) -> Calibration:
    """Measure ``step_fn`` at two batch sizes (and sequence lengths) and answer the largest that fit.

    See :func:`vramlens.monitor.measure.calibrate` for the options (model, optimizer, gpu,
    capacity_bytes, margin, backend, model_name, workload, store).

    Raises:
        MissingExtraError: torch is not installed.
        ValueError: bad sizes or margin.
    """
    try:
        import torch  # noqa: F401
    except ImportError:
        from vramlens.errors import MissingExtraError

        raise MissingExtraError("torch", "trace") from None
    from vramlens.monitor.measure import calibrate as run

    return run(step_fn, batch_sizes, seq_lens, **options)


def __getattr__(name: str) -> Any:
    if name == "Watch":
        from vramlens.monitor.session import Watch

        return Watch
    raise AttributeError(f"module 'vramlens.monitor' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))

