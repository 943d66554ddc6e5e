"""The advisor: search the remedies for plans that fit, rank them by a cost model, write configs.

The core stays pure: values in, values out (no printing, no files, no torch).
"""

from __future__ import annotations

from vramlens.advise.api import fit
from vramlens.advise.cost import Links, StepCost, TrainingCost, inference_request, training_step
from vramlens.advise.plan import FitResult, Plan, settings_argv, settings_of
from vramlens.advise.search import REMEDIES, check_constraints, search

__all__ = [
    "FitResult", "Links", "Plan", "REMEDIES", "StepCost", "TrainingCost", "check_constraints", "fit",
    "inference_request", "search", "settings_argv", "settings_of", "training_step",
]
