"""The front door: ``vramlens.advise.fit`` takes what ``vramlens.estimator.estimate`` takes."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from vramlens.advise.budget import Budget
from vramlens.advise.cost import Links
from vramlens.advise.plan import FitResult
from vramlens.advise.search import DEFAULT_MAX_PLANS, inverse_answers, search
from vramlens.errors import InputError
from vramlens.hardware.gpu import GPU
from vramlens.limits import (
    MAX_DEVICE_BYTES,
    MAX_GPUS,
    MAX_TOP,
    SEARCH_BUDGET_S,
    check_int,
    show,
)
from vramlens.models.spec import ModelSpec
from vramlens.workload import Workload, make_workload


def fit(
    model: str | dict[str, Any] | ModelSpec | None = None,
    workload: Workload | None = None,
    gpu: str | GPU | None = None,
    *,
    params: str | int | None = None,
    gpus: int | None = None,
    nodes: int = 1,
    host_ram: int | str | None = None,
    headroom: float = 0.10,
    keep: str | Iterable[str] = (),
    forbid: str | Iterable[str] = (),
    effective_batch: int | None = None,
    method_locked: bool | None = None,
    max_plans: int | None = None,
    top: int | None = None,
    links: Links = Links(),
    ask: Iterable[str] = (),
    progress: Callable[[int, int], None] | None = None,
    budget_s: float = SEARCH_BUDGET_S,
    optimize: str | None = None,
    **settings: Any,
) -> FitResult:
    """Plans that make ``model`` fit ``gpu``, fastest first.

    Args:
        model: a catalog name, hub id, config.json path, config dict or ModelSpec (or None with ``params``).
        workload: the starting Workload; or give its fields as keyword ``settings``.
        gpu: a catalog GPU name, a size ("24GB") or a GPU.
        gpus: GPUs per node (default: the workload's ``gpus`` divided by ``nodes``).
        nodes: nodes; tensor parallelism stays inside one.
        host_ram: host RAM per node ("256GB" or bytes) that offloaded state must fit in.
        headroom: fraction of each GPU kept free.
        keep, forbid: remedies plans must use / must not use (see ``vramlens.advise.REMEDIES``).
        effective_batch: sequences per optimizer step over all GPUs, kept by gradient accumulation.
        method_locked: keep the workload's method; by default, when ``method`` is among ``settings``.
        max_plans, top: how many plans to return (``top`` is an alias).
        ask: inverse questions to answer in ``FitResult.inverse`` (max_batch, max_seq,
            max_context, min_gpu, min_gpus).
        progress: ``progress(done, total)`` during the search (see :func:`vramlens.advise.search`).
        budget_s: seconds the search and the inverse questions may run together; past them the
            best found so far is returned with ``partial=True``.
        optimize: None answers "it already fits" when the starting workload fits; "speed",
            "memory" or "cost" search for better plans anyway.

    Raises:
        InputError: an unknown model or GPU, bad settings, or contradictory constraints.
    """
    from vramlens.estimator import check_api_types, check_workload
    from vramlens.hardware.catalog import as_gpu
    from vramlens.units import parse_size

    if gpu is None:
        raise InputError("fit needs a GPU: give gpu='A100-80GB' (a catalog name) or a size such as '24GB'")
    g = as_gpu(gpu)
    assert g is not None
    check_api_types(workload, headroom)
    if isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 1:
        raise InputError(f"nodes={show(nodes)} must be a whole number >= 1")
    if nodes > MAX_GPUS:  # the search's work grows with nodes x GPUs (10**13 ran for minutes)
        raise InputError(f"nodes={show(nodes)} is over the limit of {MAX_GPUS:,}")
    if gpus is not None and (isinstance(gpus, bool) or not isinstance(gpus, int)):  # the Workload bounds its value
        raise InputError(f"gpus={show(gpus)} must be a whole number >= 1")
    if effective_batch is not None and (isinstance(effective_batch, bool) or not isinstance(effective_batch, int)):
        raise InputError(f"effective_batch={show(effective_batch)} must be a whole number >= 1")  # search bounds it
    if isinstance(model, ModelSpec):
        spec = model
    else:
        from vramlens.models import load_model

        spec = load_model(model, params=params)
    if method_locked is None:
        method_locked = "method" in settings or (workload is not None and workload.method != "full")
    if gpus is not None:
        settings["gpus"] = gpus * nodes
    base = workload.validated() if workload is not None else make_workload(**settings)
    if workload is not None and settings:
        base = base.replace(**settings)
    per_node = gpus if gpus is not None else max(1, base.gpus // nodes)
    check_workload(spec, base)
    if base.cp > 1:
        # the search's memoized parts (advise.fastmem) estimate every token of the sequence on each GPU
        raise InputError(f"cp={base.cp}: fit does not search context parallelism yet: estimate the plan with "
                         "`vramlens estimate --cp`, or drop --cp")
    if spec.vision is not None:
        # a vision encoder's sequence is its patches (vramlens.estimator.core.estimate_spec)
        h, w_ = base.image_size or (spec.vision.image_size, spec.vision.image_size)
        base = base.replace(seq=spec.vision.tokens(h, w_))
    if spec.audio is not None:
        # Whisper: each 30-second window is a batch row, seq the transcript (vramlens.estimator.audio); the
        # plans count rows
        from vramlens.estimator.audio import audio_workload

        base = audio_workload(spec, base)[0].replace(audio_seconds=None)
    ram = parse_size(host_ram, what="host RAM") if isinstance(host_ram, str) else host_ram
    if ram is not None:  # as the CLI's --host-ram: bytes, positive (a negative one made every offload plan miss)
        ram = check_int("host_ram", ram, MAX_DEVICE_BYTES, fix="give bytes or a size such as '256GB'")
    # None is "not given": a [] or 0 must not fall back to the default (check_int names it)
    n = max_plans if max_plans is not None else top if top is not None else DEFAULT_MAX_PLANS
    n = check_int("max_plans" if max_plans is not None else "top", n, MAX_TOP)
    budget = Budget.begin(budget_s)
    result = search(spec, base, g, gpus=per_node, nodes=nodes, host_ram=ram, headroom=headroom, keep=keep,
                    forbid=forbid, effective_batch=effective_batch, method_locked=method_locked, max_plans=n,
                    links=links, progress=progress, budget_s=budget.remaining(),
                    optimize=optimize)
    if ask:
        from dataclasses import replace

        inv = inverse_answers(spec, base, g, result, ask, headroom=headroom, host_ram=ram, keep=keep, forbid=forbid,
                              effective_batch=effective_batch, method_locked=method_locked, links=links,
                              budget_s=budget.remaining())
        result = replace(result, inverse=inv)
    return result
