"""The work of the estimate and fit endpoints, as plain functions of plain values.

They run in a worker process (see ``budget``), so they take and return only what pickles
simply (strings, dicts, numbers) and import nothing of the web framework.
"""

from __future__ import annotations

from typing import Any


def _model(model: str | dict | None) -> Any:
    if isinstance(model, dict):
        # a pasted config goes straight to the pure builder: no loader, no path, no hub
        from vramlens.models.inventory import spec_from_config

        return spec_from_config(model, source="pasted config.json", where="the pasted config")
    return model


def estimate_job(model: str | dict | None, top: dict[str, Any], work: dict[str, Any]) -> dict:
    """The same call as ``vramlens estimate``: ``Estimate.to_dict()``."""
    from vramlens.estimator import estimate

    est = estimate(_model(model), gpu=top["gpu"], params=top["params"], headroom=top["headroom"], **work)
    return est.to_dict()


def fit_job(model: str | dict | None, top: dict[str, Any], work: dict[str, Any], method_locked: bool,
            n: int) -> dict:
    """The same search as ``vramlens fit``: ``FitResult.to_dict()`` with the top ``n`` plans."""
    from vramlens.advise import fit

    work = dict(work)
    gpus = work.pop("gpus")
    result = fit(_model(model), gpu=top["gpu"], params=top["params"], gpus=gpus, headroom=top["headroom"],
                 method_locked=method_locked, max_plans=n, **work)
    d = result.to_dict()
    d["plans"] = d["plans"][:n]
    return d
