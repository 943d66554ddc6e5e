"""``vramlens validate capacity``: each published start-up log against what vramlens predicts.

A case (validation/capacity-cases.json) holds the engine's settings as the log states them, a
verbatim quote of the logged lines, and the logged figures by key (``logged``); this module runs
:func:`vramlens.serving.capacity` on the same settings and reports the relative error of each
figure. Nothing here is fitted to a case: a large error is explained in the case's ``note``.
A case may name a catalog GPU with ``gpu_total``, the device total its log prints, where the
engine reads the card's facts (SM count, compute capability). A case whose engine refused to start says so (``"refused": true``, the refusal in the quote); it
checks that vramlens refuses too (an EngineRefusal, or a ConfigError for a setting the engine
rejects).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from vramlens.errors import ConfigError, EngineRefusal, InputError
from vramlens.serving.result import Capacity
from vramlens.units import GiB, MiB

#: logged key -> (what the figure is, how to read it from a Capacity). GiB and MiB as the logs
#: print them (vLLM's "GB" in "Loading model weights took" is GiB: it divides by 2^30).
FIGURES: dict[str, tuple[str, Any]] = {
    "weights_gib": ("weights", lambda c: c.weights_bytes / GiB),
    "non_torch_gib": ("non-torch", lambda c: c.non_torch_bytes / GiB),
    "activation_gib": ("activation peak", lambda c: c.activation_bytes / GiB),
    "kv_cache_gib": ("KV cache", lambda c: c.kv_cache_bytes / GiB),
    "num_gpu_blocks": ("KV blocks", lambda c: c.figure("num_gpu_blocks")),
    "kv_tokens": ("KV tokens", lambda c: c.kv_tokens),
    "model_buffer_mib": ("weights (model buffer)", lambda c: c.weights_bytes / MiB),
    "kv_buffer_mib": ("KV buffer", lambda c: c.kv_cache_bytes / MiB),
    "compute_buffer_mib": ("compute buffer", lambda c: c.activation_bytes / MiB),
    # SGLang's "max_running_requests=N" (tp_worker.py; 48 by default with speculative decoding, server_args.py)
    "max_running_requests": ("max running requests", lambda c: c.figure("max_running_requests")),
}
#: The figures that size the KV cache (the issue's 3% target), counts first: one per case in the summary.
KV_FIGURES = ("kv_tokens", "num_gpu_blocks", "kv_buffer_mib", "kv_cache_gib")
REQUIRED = ("id", "engine", "engine_version", "source", "quote", "model", "gpu", "settings", "logged")


@dataclass(frozen=True, slots=True)
class FigureCheck:
    """One logged figure beside its prediction; ``error`` = predicted / logged - 1."""

    case: str
    figure: str
    key: str
    logged: float
    predicted: float | None
    error: float | None


@dataclass(frozen=True, slots=True)
class CaseResult:
    """A case's checks; ``refusal`` is vramlens' refusal line where it predicts the engine stops."""

    id: str
    engine: str
    engine_version: str
    source: str
    note: str
    checks: tuple[FigureCheck, ...]
    refusal: str | None = None
    engine_refused: bool = False

    @property
    def agrees(self) -> bool:
        """vramlens refuses exactly when the engine did."""
        return (self.refusal is not None) == self.engine_refused


@dataclass(frozen=True, slots=True)
class EngineSummary:
    """One engine's cases: the median and share within 10% of |error| over every compared figure,
    and over the KV-sizing figures alone (one per case: the first of KV_FIGURES it logs)."""

    engine: str
    cases: int
    figures: int
    median_abs_error: float | None
    within_10: float | None
    kv_cases: int
    kv_median_abs_error: float | None
    kv_within_3: float | None
    refusals: int
    refusals_agreed: int


def summarize(results: list[CaseResult]) -> list[EngineSummary]:
    """Per engine, in the order the engines first appear."""
    out = []
    for engine in dict.fromkeys(r.engine for r in results):
        mine = [r for r in results if r.engine == engine]
        errs = [abs(c.error) for r in mine for c in r.checks if c.error is not None]
        kv = []
        for r in mine:
            first = next((c.error for key in KV_FIGURES for c in r.checks if c.key == key and c.error is not None), None)
            if first is not None:
                kv.append(abs(first))
        refused = [r for r in mine if r.engine_refused]
        out.append(EngineSummary(
            engine=engine, cases=len(mine), figures=len(errs),
            median_abs_error=statistics.median(errs) if errs else None,
            within_10=sum(e <= 0.10 for e in errs) / len(errs) if errs else None,
            kv_cases=len(kv), kv_median_abs_error=statistics.median(kv) if kv else None,
            kv_within_3=sum(e <= 0.03 for e in kv) / len(kv) if kv else None,
            refusals=len(refused), refusals_agreed=sum(r.agrees for r in refused)))
    return out


def check_case(case: dict) -> list[str]:
    """Every problem with one case (missing fields, unknown figure keys)."""
    p = [f"case {case.get('id', '?')!r}: missing {k!r}" for k in REQUIRED if k not in case]
    for key in (case.get("logged") or {}):
        if key not in FIGURES:
            p.append(f"case {case.get('id', '?')!r}: logged figure {key!r} is not one of {', '.join(FIGURES)}")
    return p


def run_case(case: dict) -> CaseResult:
    """Predict one case and compare every logged figure."""
    from vramlens.serving.api import capacity

    cap: Capacity | None = None
    refusal = None
    gpu: Any = case["gpu"]
    if case.get("gpu_total"):
        # a catalog card (compute capability, SM count, interconnect) with the device total the engine's log
        # prints (CUDA's cudaMemGetInfo total, under nvidia-smi's)
        from dataclasses import replace

        from vramlens.hardware.catalog import get_gpu
        from vramlens.units import parse_size

        card = get_gpu(gpu)
        total = parse_size(case["gpu_total"], what="gpu_total")
        # the log's figure stands for both totals the engines read (CUDA's and, for SGLang's defaults, nvidia-smi's)
        gpu = replace(card, name=f"{card.name} ({case['gpu_total']} total)", usable_bytes=total,
                      cuda_total_bytes=total, cuda_total_source=f"the case's gpu_total {case['gpu_total']}")
    try:
        cap = capacity(case["model"], case["engine"], gpu=gpu, gpus=case.get("gpus"), tp=case.get("tp", 1),
                       pp=case.get("pp", 1), **case["settings"])
    except EngineRefusal as e:
        refusal = str(e)
    except ConfigError as e:  # a setting the engine rejects; in any other case a broken case file
        if not case.get("refused"):
            raise
        refusal = str(e)
    checks = []
    for key, logged in case["logged"].items():
        label, read = FIGURES[key]
        predicted = None if cap is None else read(cap)
        error = None if predicted is None or not logged else predicted / logged - 1
        checks.append(FigureCheck(case["id"], label, key, float(logged), predicted, error))
    return CaseResult(case["id"], case["engine"], case["engine_version"], case["source"], case.get("note", ""),
                      tuple(checks), refusal, bool(case.get("refused", False)))


def run_cases(cases: list[dict]) -> list[CaseResult]:
    """All cases, after checking every one (InputError lists every problem)."""
    problems = [p for c in cases for p in check_case(c)]
    if problems:
        raise InputError("; ".join(problems))
    return [run_case(c) for c in cases]
