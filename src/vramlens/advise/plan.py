"""Plan and FitResult: what the search returns, as frozen values with their JSON form."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any

from vramlens.advise.budget import stopped_line
from vramlens.advise.cost import StepCost
from vramlens.estimator.core import Estimate
from vramlens.limits import SEARCH_BUDGET_S
from vramlens.workload import Workload

#: Workload fields that are `vramlens estimate` flags (the others stay at their defaults in plans).
CLI_FIELDS = (
    "mode", "method", "dtype", "amp", "quant", "optimizer", "batch", "seq", "new_tokens", "grad_accum",
    "checkpointing", "attention", "lora_rank", "lora_targets", "gpus", "zero", "fsdp", "tp", "pp", "offload",
    "kv_dtype", "kv_block",
)


def settings_of(w: Workload) -> dict[str, Any]:
    """The `vramlens estimate` settings of ``w``, by flag name (dashes as underscores).

    ``estimate(model, **settings)`` and ``vramlens estimate MODEL --flag value ...`` rebuild ``w``.
    Settings that are None (no --amp, no --quant) are left out; non-flag fields appear only when
    they differ from their defaults.
    """
    out: dict[str, Any] = {}
    defaults = Workload()
    for f in fields(Workload):
        v = getattr(w, f.name)
        if v is None:
            continue
        if f.name not in CLI_FIELDS and v == getattr(defaults, f.name):
            continue
        out[f.name] = ",".join(v) if f.name == "lora_targets" else v
    return out


def settings_argv(settings: dict[str, Any]) -> list[str]:
    """Command-line flags for ``settings`` (``--fsdp`` for True, nothing for False)."""
    argv: list[str] = []
    for k, v in settings.items():
        flag = "--" + k.replace("_", "-")
        if isinstance(v, bool):
            if v:
                argv.append(flag)
            continue
        argv += [flag, str(v)]
    return argv


@dataclass(frozen=True, slots=True)
class Plan:
    """One way of running the workload: its settings, per-GPU memory and estimated speed.

    Attributes:
        workload: the validated Workload of the plan.
        estimate: ``estimate_spec`` of it (the figures `vramlens estimate` prints).
        fits: whether device_total fits the GPU with the headroom (and host RAM, when given).
        host_fits: whether host_bytes per node fits the given host RAM (None when not given).
        cost: the step-time model's figures.
        tradeoffs: what the plan gives up, in short phrases.
    """

    workload: Workload
    estimate: Estimate
    fits: bool
    cost: StepCost
    tradeoffs: tuple[str, ...] = ()
    host_fits: bool | None = None

    @property
    def device_total(self) -> int:
        return self.estimate.breakdown.device_total

    @property
    def settings(self) -> dict[str, Any]:
        return settings_of(self.workload)

    def to_dict(self, configs: Callable[[Plan], dict[str, Any]] | None = None) -> dict[str, Any]:
        """The plan as JSON; with ``configs`` (vramlens.advise.emit.configs, passed in: emit reads
        Plan) also every config that runs it, as ``configs``."""
        b = self.estimate.breakdown
        d: dict[str, Any] = {
            "settings": self.settings,
            "fits": self.fits,
            "device_total_bytes": b.device_total,
            "peak_allocated_bytes": b.peak_allocated,
            "components": b.as_dict(),
            "host_bytes": b.host_bytes,
            "trainable_params": self.estimate.trainable_params,
        }
        if self.workload.training:
            d["step_time_s"] = self.cost.seconds
            d["tokens_per_s"] = self.cost.tokens_per_s
        else:
            d["tokens_per_s"] = self.cost.tokens_per_s
            d["request_time_s"] = self.cost.seconds
        d["tradeoffs"] = list(self.tradeoffs)
        if configs is not None:
            d["configs"] = configs(self)  # `fit --emit KIND` of this plan, for every target that can express it
        return d


@dataclass(frozen=True, slots=True)
class FitResult:
    """The answer of :func:`vramlens.advise.fit`.

    Attributes:
        plans: plans that fit, best first (at most ``max_plans``).
        closest: when none fits, the plan that needs the least memory per GPU.
        message: one line for humans: how many plans fit, or why none does and what would.
        evaluated: candidate plans evaluated (memory) by the search.
        valid: candidates that were valid workloads for the model.
        fitting: candidates that fit.
        inverse: answers to the inverse questions asked (max_batch, max_seq, ...).
        gpu_name, gpus, nodes, headroom: the hardware asked about.
        candidates: candidate plans the search had to examine (``evaluated`` of them were).
        partial: the time budget ran out first: the plans are the best among those examined.
        budget_s: the time budget, seconds.
        already_fits: the starting workload fits as it is (its plan is the only one; ask
            ``optimize`` for more).
    """

    plans: tuple[Plan, ...]
    closest: Plan | None
    message: str
    evaluated: int
    valid: int
    fitting: int
    gpu_name: str
    gpus: int
    nodes: int
    headroom: float
    inverse: dict[str, Any] = field(default_factory=dict)
    candidates: int = 0
    partial: bool = False
    budget_s: float = SEARCH_BUDGET_S
    already_fits: bool = False

    @property
    def stopped(self) -> str:
        """The line a partial answer shows ("" when the search examined every candidate)."""
        return stopped_line(self.budget_s, self.evaluated, self.candidates) if self.partial else ""

    def to_dict(self, configs: Callable[[Plan], dict[str, Any]] | None = None) -> dict[str, Any]:
        """The answer as JSON (``fit --json``); ``configs`` as in :meth:`Plan.to_dict`."""
        d: dict[str, Any] = {
            "gpu": self.gpu_name,
            "gpus_per_node": self.gpus,
            "nodes": self.nodes,
            "headroom": self.headroom,
            "message": self.message,
            "evaluated": self.evaluated,
            "candidates": self.candidates,
            "partial": self.partial,
            "already_fits": self.already_fits,
            "fitting": self.fitting,
            "plans": [p.to_dict(configs) for p in self.plans],
        }
        if self.closest is not None:
            d["closest"] = self.closest.to_dict(configs)
        d.update(self.inverse)
        return d
