"""The OOM post-mortem's advice: the analytic estimate for the same workload and the advisor's
cheapest plans that fit, as `vramlens estimate` flags (no torch)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from vramlens.monitor.records import Fix

#: PyTorch's CUDA OOM message: "Tried to allocate 20.00 MiB (GPU 0; ...)".
_TRIED = re.compile(r"Tried to allocate ([0-9.]+) (B|KiB|MiB|GiB|TiB)")
_UNIT = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}


def requested_from_message(message: str) -> int | None:
    """The failing allocation's size from a CUDA OOM message (rounded as PyTorch printed it)."""
    m = _TRIED.search(message)
    return int(float(m.group(1)) * _UNIT[m.group(2)]) if m else None


@dataclass(frozen=True, slots=True)
class Advice:
    estimate_bytes: int | None
    fixes: tuple[Fix, ...]
    notes: tuple[str, ...]


def advise(model: Any, workload: Any, gpu: Any, *, top: int = 3) -> Advice:
    """The estimate of ``model`` under ``workload`` on ``gpu`` and the ``top`` fastest plans that fit.

    Args:
        model: what `vramlens.estimate` takes (a catalog name, config dict or ModelSpec), or None.
        workload: a Workload or a dict of its settings.
        gpu: a GPU name or a size such as "24GB" or "1048576B".

    Returns:
        The figures, or notes saying why they are missing (never raises for the caller's data).
    """
    if model is None:
        return Advice(None, (), ("pass model_name= and workload= to watch() to get the estimate and the "
                                 "advisor's fixes beside the measurement",))
    from vramlens.advise import fit, settings_argv, settings_of
    from vramlens.errors import VramlensError
    from vramlens.estimator import estimate
    from vramlens.workload import Workload, make_workload

    try:
        w = workload if isinstance(workload, Workload) else make_workload(**dict(workload or {}))
        est = estimate(model, w, gpu=gpu)
        result = fit(model, w, gpu, max_plans=top)
    except (VramlensError, ValueError) as e:
        return Advice(None, (), (f"the estimate and fixes could not be made: {e}",))
    base = settings_of(w)
    fixes = []
    for plan in result.plans[:top]:
        changed = {k: v for k, v in plan.settings.items() if base.get(k) != v}
        fixes.append(Fix(tuple(settings_argv(changed)), plan.device_total, plan.fits, tuple(plan.tradeoffs)))
    return Advice(est.breakdown.device_total, tuple(fixes), ())
