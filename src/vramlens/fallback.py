"""``vramlens.estimate`` and ``vramlens.fit``: analytic, or for a ``model_type`` no family models, traced.

The estimator (:mod:`vramlens.estimator`) models the families in :mod:`vramlens.models.families`.
Any other architecture transformers can build is traced instead: the real model under fake
tensors, its first 2 and 3 blocks at the requested workload, extrapolated to every block
(:mod:`vramlens.trace.fallback`, as ``vramlens trace --layers 3``). The traced figures are cached
on disk (:mod:`vramlens.cache`, kind ``traced``) under a hash of the config, the workload and the
vramlens version, so the next call for the same model and workload reads one small file.

:func:`fit` does not trace its search (it weighs thousands of workloads): the analytic search ranks
them with the generic Llama-style approximation, then every plan it returns is traced as above
(one trace per plan shown, cached) and judged again by its traced figures.

This module sits above both the estimator and the tracer (the tracer imports the estimator), and
imports neither torch nor transformers itself: the trace package does, only when a trace runs.
"""

from __future__ import annotations

from dataclasses import fields, replace
from math import prod
from typing import TYPE_CHECKING, Any, get_args

from vramlens import limits as L
from vramlens.errors import MissingExtraError, TraceError, UnmodelledModelError
from vramlens.estimator import DEFAULT_HEADROOM, Estimate, check_api_types, make_breakdown
from vramlens.estimator import estimate as analytic_estimate
from vramlens.models.spec import ModelSpec, Role, TensorInfo
from vramlens.units import DTYPE_BYTES
from vramlens.workload import Workload

if TYPE_CHECKING:
    from collections.abc import Callable

    from vramlens.advise.plan import FitResult, Plan
    from vramlens.hardware.gpu import GPU

#: The cache's folder for traced profiles (under :func:`vramlens.cache.home`).
CACHE_KIND = "traced"
#: Optimizer steps traced in training (step 1 and the steady state, as `vramlens trace`).
TRACE_STEPS = 2
#: Plans the search ranks beyond those asked for, traced in turn when a traced plan does not fit.
SPARE_PLANS = 3


def estimate(
    model: str | dict | ModelSpec | None = None,
    workload: Workload | None = None,
    *,
    gpu: str | GPU | None = None,
    params: str | int | None = None,
    headroom: float = DEFAULT_HEADROOM,
    trace_fallback: bool = True,
    progress: Callable[[str], None] | None = None,
    **settings: Any,
) -> Estimate:
    """Estimate per-GPU memory of running ``model``: analytically, or traced when no family models it.

    Args:
        model, workload, gpu, params, headroom, settings: as :func:`vramlens.estimator.estimate`.
        trace_fallback: when the config's ``model_type`` is not modelled analytically, trace the real
            transformers model (needs the ``trace`` extra). False keeps the analytic path: a generic
            Llama-style decoder built from the standard fields, or the refusal when they are missing.
        progress: callable taking a one-line message while a trace runs (the first call only).

    Returns:
        An Estimate. A traced one has ``breakdown.source == "trace-extrapolated"`` (or ``"trace"``
        for a model of at most 3 blocks) and a first note "figures traced (model_type X is not
        modelled analytically): ...".

    Raises:
        MissingExtraError: the model needs the tracer and torch or transformers is not installed.
        TraceError: transformers cannot build or run the model under fake tensors.
        InputError: as :func:`vramlens.estimator.estimate`.
    """
    def analytic(m: Any) -> Estimate:
        return analytic_estimate(m, workload, gpu=gpu, params=params, headroom=headroom, **settings)

    from vramlens.hardware.catalog import as_gpu

    check_api_types(workload, headroom)
    as_gpu(gpu)
    L.check_bool("trace_fallback", trace_fallback)

    if not trace_fallback or params is not None or model is None:
        return analytic(model)
    spec, refusal, config, model_type = _load(model)
    if spec is not None and not model_type:
        return analytic(spec)
    w = _workload(workload, settings)
    name = spec.name if spec is not None else str(config.get("_name_or_path") or (model if isinstance(model, str)
                                                                                  else model_type))
    source = spec.source if spec is not None else "config"
    key = cache_key(config, w)
    cached, notes = cached_profile(key, w)  # before torch: a cached answer needs neither torch nor transformers
    if cached is not None:
        return traced_estimate(cached, w, gpu, headroom=headroom, name=name, source=source, notes=notes)
    _require_torch(model_type, "traces the real model", approximable=spec is not None)
    from vramlens.trace.fallback import knows

    if not knows(model_type):  # transformers cannot build it either: the analytic path's answer
        if spec is not None:
            return analytic(spec)
        assert refusal is not None
        raise refusal
    value = traced_profile(config, w, key, progress=progress)
    return traced_estimate(value, w, gpu, headroom=headroom, name=name, source=source,
                           notes=notes + [_stored(key, value)])


def fit(
    model: str | dict | ModelSpec | None = None,
    workload: Workload | None = None,
    gpu: str | GPU | None = None,
    *,
    params: str | int | None = None,
    max_plans: int | None = None,
    top: int | None = None,
    headroom: float = 0.10,
    host_ram: int | str | None = None,
    nodes: int = 1,
    optimize: str | None = None,
    trace_fallback: bool = True,
    trace_progress: Callable[[str], None] | None = None,
    **kwargs: Any,
) -> FitResult:
    """:func:`vramlens.advise.fit`, whose plans are traced when no family models the model.

    The search itself stays analytic: for a ``model_type`` outside the families, with the standard
    config fields, it ranks the workloads with a generic Llama-style approximation (as today).
    Then every plan it returns (and ``closest`` when none fits) is estimated again with
    :func:`estimate` (traced, cached on disk): the plan carries the traced Estimate and its ``fits``
    is judged again by the search's rule (device total within the GPU less the headroom, host
    bytes within ``host_ram`` per node). Plans that no longer fit are dropped and the next ones
    the search ranked (it is asked for :data:`SPARE_PLANS` more) are traced in their place. A plan
    the tracer cannot run (more than one GPU, ZeRO, FSDP, TP/PP, offload, quantized weights outside
    QLoRA, KV cache settings, or a trace that fails for its settings, such as a bitsandbytes optimizer
    without CUDA) keeps the approximation's figures, with a first note saying why.
    ``message`` says what was traced; ``fitting`` counts the approximation's fitting candidates
    less those the trace showed do not fit; the inverse answers (``ask``) stay the approximation's.

    Args:
        model, workload, gpu, params, max_plans, top, headroom, host_ram, nodes, optimize, kwargs:
            as :func:`vramlens.advise.fit`.
        trace_fallback: False keeps the analytic path (the approximation's figures).
        trace_progress: callable taking a one-line message while a trace runs.

    Raises:
        MissingExtraError: a plan needs the tracer, it is not cached, and torch or transformers is missing.
        InputError: as :func:`vramlens.advise.fit`.
    """
    from vramlens.advise import fit as analytic_fit
    from vramlens.advise.search import DEFAULT_MAX_PLANS

    common: dict[str, Any] = dict(headroom=headroom, host_ram=host_ram, nodes=nodes, **kwargs)
    L.check_bool("trace_fallback", trace_fallback)
    spec = _unmodelled(model) if trace_fallback and params is None and model is not None else None
    if spec is None:
        return analytic_fit(model, workload, gpu, params=params, max_plans=max_plans, top=top, optimize=optimize,
                            **common)
    from vramlens.hardware.catalog import as_gpu
    from vramlens.units import parse_size

    n = max_plans if max_plans is not None else top if top is not None else DEFAULT_MAX_PLANS
    n = L.check_int("max_plans" if max_plans is not None else "top", n, L.MAX_TOP)
    result = analytic_fit(spec, workload, gpu, max_plans=n + SPARE_PLANS, optimize=optimize, **common)
    g = as_gpu(gpu)
    assert g is not None  # analytic_fit refuses gpu=None
    ram = parse_size(host_ram, what="host RAM") if isinstance(host_ram, str) else host_ram
    names = {f.name for f in fields(Workload)}
    base = _workload(workload, {k: v for k, v in kwargs.items() if k in names})  # what the plans are told apart from
    judge = _Judge(spec, g, headroom, ram, nodes, trace_progress)
    if result.already_fits:
        start = judge.plan(result.plans[0])
        if start is None:  # transformers does not know the model_type: the approximation's answer
            return result
        if start.fits:
            return replace(result, plans=(start,), message=_said(
                _verdict(start.device_total, g, headroom, result.gpus * result.nodes), spec, result, judge.traced, judge.untraced))
        # the approximation fitted it, the trace does not: search for plans, as --optimize speed
        result = analytic_fit(spec, workload, gpu, max_plans=n + SPARE_PLANS, optimize="speed", **common)
    return judge.result(result, n, base) or result


def _unmodelled(model: Any) -> ModelSpec | None:
    """The approximated ModelSpec of a config no family models (None: modelled, or refused by the loader)."""
    from vramlens.models import SUPPORTED_MODEL_TYPES, load_model

    try:
        spec = load_model(model)
    except UnmodelledModelError:
        return None  # without the standard fields there is nothing to search with: the analytic fit refuses it
    return spec if spec.model_type not in SUPPORTED_MODEL_TYPES and spec.config else None


def _verdict(total: int, g: GPU, headroom: float, gpus: int) -> str:
    """The verdict sentence of a plan (as the search's message has it)."""
    from vramlens.estimator.verdict import verdict

    return verdict(total, g, headroom, gpus)


def _said(text: str, spec: ModelSpec, result: FitResult, traced: int, untraced: int) -> str:
    """``text`` and the sentence that says which plans' figures were traced."""
    how = (f"model_type {spec.model_type} is not modelled analytically: the search ranked the plans with a generic "
           "Llama-style approximation")
    if untraced:
        out = (f"{text}; {how}, then traced {traced} of the {traced + untraced} plans judged as `vramlens estimate` "
               f"does ({untraced} the tracer cannot run keep the approximation's figures, each with a note why)")
    else:
        out = f"{text}; figures traced ({how}, then each plan shown was traced as `vramlens estimate` does)"
    if result.inverse:
        out += "; the inverse answers are the approximation's"
    return out


class _Judge:
    """Traces plans and judges them again with the search's rule."""

    def __init__(self, spec: ModelSpec, g: GPU, headroom: float, host_ram: int | None, nodes: int,
                 progress: Callable[[str], None] | None):
        self.spec, self.gpu, self.headroom, self.host_ram, self.nodes = spec, g, headroom, host_ram, nodes
        self.progress = progress
        self.limit = g.capacity_bytes * (1 - headroom) if headroom else g.capacity_bytes  # as the search's
        self.traced = self.untraced = 0

    def plan(self, p: Plan) -> Plan | None:
        """``p`` with traced figures and fits judged again (None: the tracer does not know the model)."""
        from vramlens.trace.api import untraceable

        why = untraceable(p.workload)
        if not why:
            try:
                e = estimate(self.spec, p.workload, gpu=self.gpu, headroom=self.headroom, progress=self.progress)
            except TraceError as err:  # this plan's settings (a bitsandbytes optimizer without CUDA, ...)
                why = str(err).removeprefix(f"model_type {self.spec.model_type!r} is not modelled analytically and tracing it failed: ")
        if why:
            self.untraced += 1
            b = p.estimate.breakdown
            note = (f"figures approximated (model_type {self.spec.model_type} is not modelled analytically; a "
                    f"generic Llama-style decoder) because the tracer cannot run this plan: {why}")
            return replace(p, estimate=replace(p.estimate, breakdown=replace(b, notes=(note, *b.notes))))
        if not e.breakdown.source.startswith("trace"):
            return None
        self.traced += 1
        host_fits = None if self.host_ram is None else e.breakdown.host_bytes <= self.host_ram * self.nodes
        fits = e.breakdown.device_total <= self.limit and host_fits is not False
        return replace(p, estimate=e, fits=fits, host_fits=host_fits)

    def result(self, result: FitResult, n: int, base: Workload) -> FitResult | None:
        """``result`` with its plans traced, at most ``n`` (None: the tracer does not know the model)."""
        from vramlens.advise.search import describe
        from vramlens.units import human_bytes

        shown: list[Plan] = []
        dropped: list[Plan] = []
        for p in result.plans:
            if len(shown) == n:
                break
            t = self.plan(p)
            if t is None:
                return None
            (shown if t.fits else dropped).append(t)
        closest: Plan | None = None
        if not shown:
            pool = list(dropped)
            if result.closest is not None:
                t = self.plan(result.closest)
                if t is None:
                    return None
                pool.append(t)
            fit_now = [p for p in pool if p.fits]
            if fit_now:
                shown = fit_now[:1]
            elif pool:
                closest = min(pool, key=lambda p: p.device_total)
        total = result.gpus * result.nodes
        where = f"{total} x {self.gpu.name}" if total > 1 else self.gpu.name
        fitting = max(len(shown), result.fitting - len(dropped))
        if shown:
            text = (f"{fitting:,} of {result.valid:,} valid plans fit {total} x {self.gpu.name} with "
                    f"{self.headroom:.0%} headroom"
                    + (f" ({len(dropped)} the approximation fitted do not when traced)" if dropped else "")
                    + f"; best: {describe(shown[0].workload, base)}; "
                    + _verdict(shown[0].device_total, self.gpu, self.headroom, total))
        elif closest is not None:
            need, usable = closest.device_total, int(self.limit)
            text = (f"no plan fits {where} with {self.headroom:.0%} headroom ({result.valid:,} valid plans tried"
                    + (f"; the {len(dropped)} best the approximation fitted do not when traced" if dropped else "")
                    + f"); closest: {describe(closest.workload, base)} needs {human_bytes(need)} per GPU, "
                    f"{human_bytes(max(0, need - usable))} more than the {human_bytes(usable)} usable")
            if closest.host_fits is False:
                text += f"; its offloaded state needs {human_bytes(closest.estimate.breakdown.host_bytes)} of host RAM"
        else:
            return result  # no valid plan: nothing to trace
        return replace(result, plans=tuple(shown), closest=closest, fitting=fitting,
                       message=_said(text, self.spec, result, self.traced, self.untraced))


def _workload(workload: Workload | None, settings: dict[str, Any]) -> Workload:
    from vramlens.workload import make_workload

    w = workload.validated() if workload is not None else make_workload(**settings)
    return w.replace(**settings) if workload is not None and settings else w


def cache_key(config: dict[str, Any], w: Workload) -> str:
    """The cache key of a traced profile: a hash of the config dict, the workload, the traced
    shapes and steps, the profile's format and the vramlens version."""
    from vramlens import __version__
    from vramlens.cache import key_of
    from vramlens.trace.fallback import FALLBACK_LAYERS, PROFILE_FORMAT

    return key_of({"config": config, "workload": w.to_dict(), "vramlens": __version__, "layers": FALLBACK_LAYERS,
                   "steps": TRACE_STEPS, "format": PROFILE_FORMAT})


def cached_profile(key: str, w: Workload) -> tuple[dict[str, Any] | None, list[str]]:
    """The cached traced profile under ``key``, if there is a usable one, and what to tell the user.

    Returns:
        (profile or None, notes): "answered from the cache ..." on a hit; on a miss, why a file that
        was there could not be used (damaged, another format, incomplete), if one was.
    """
    from vramlens import cache
    from vramlens.trace.fallback import PROFILE_FORMAT

    found = cache.read(CACHE_KIND, key)
    if found.value is not None and found.value.get("format") == PROFILE_FORMAT and _usable(found.value, w):
        return found.value, [f"answered from the cache {cache.shown(CACHE_KIND, key)}"]
    if found.value is not None:
        return None, [f"cache file {cache.shown(CACHE_KIND, key)} ignored (not a complete traced profile)"]
    return None, [found.note] if found.note else []


def traced_profile(config: dict[str, Any], w: Workload, key: str, *, progress=None) -> dict[str, Any]:
    """Trace ``config`` under ``w`` now (:func:`vramlens.trace.fallback.profile`).

    Raises:
        TraceError: transformers cannot build or run it; the message says this was the fallback.
    """
    from vramlens.trace.fallback import profile

    if progress:
        progress(f"model_type {config.get('model_type')!r} is not modelled analytically: tracing it "
                 "(the first call only; the figures are cached)")
    try:
        return profile(config, w, steps=TRACE_STEPS, progress=progress)
    except TraceError as e:
        raise TraceError(f"model_type {config.get('model_type')!r} is not modelled analytically and tracing it "
                         f"failed: {e}") from None


def _stored(key: str, value: dict[str, Any]) -> str:
    """Cache ``value`` under ``key``; the note that says where (or why not)."""
    from vramlens import cache

    return cache.write(CACHE_KIND, key, value) or f"cached in {cache.shown(CACHE_KIND, key)}"


def _usable(value: dict[str, Any], w: Workload) -> bool:
    """Whether a cached profile has every field, of the right type, that an Estimate is made of."""
    try:
        traced_estimate(value, w, None, name="", source="", notes=[])
    except (KeyError, TypeError, ValueError, AttributeError):
        return False
    return True


def traced_estimate(value: dict[str, Any], w: Workload, gpu: str | GPU | None, *, headroom: float = DEFAULT_HEADROOM,
                    name: str, source: str, notes: list[str]) -> Estimate:
    """An Estimate whose figures are a traced profile's, with the runtime and the verdict added.

    peak_allocated and peak_reserved are the trace's, to the byte; the runtime component (CUDA
    context and library workspaces, which no trace sees) comes from :mod:`vramlens.hardware.runtime`
    as in the analytic estimate, and device_total = peak_reserved + runtime.
    """
    from vramlens.estimator.runtime import runtime
    from vramlens.estimator.verdict import usable_bytes, verdict
    from vramlens.hardware.catalog import as_gpu
    from vramlens.trace.fallback import FALLBACK_LAYERS

    g = as_gpu(gpu)
    spec = traced_spec(value, name=name, source=source)
    bd = value["breakdown"]
    rt = runtime(g, w)
    comps = dict(bd["components"])
    comps["runtime"] = rt.outside_allocator_bytes + rt.workspace_bytes
    explain = {**bd["explanations"], "runtime": rt.explain}
    traced = value.get("layers_traced")
    how = (f"{spec.architecture} built by transformers under fake tensors, its first {traced[0]} and {traced[1]} of "
           f"{value['n_layers']} blocks traced at this workload and extrapolated linearly"
           + (" (whole periods of its layer pattern)" if traced[1] - traced[0] > 1 else "")
           + f", as `vramlens trace --layers {FALLBACK_LAYERS}`" if traced else
           f"{spec.architecture} built by transformers under fake tensors and traced whole at this workload, as "
           "`vramlens trace`")
    total = int(bd["peak_reserved_bytes"]) + comps["runtime"]
    breakdown = make_breakdown(
        comps, explain, peak_allocated=int(bd["peak_allocated_bytes"]), peak_reserved=int(bd["peak_reserved_bytes"]),
        device_total=total, peak_phase=bd["peak_phase"], host_bytes=int(bd["host_bytes"]),
        phases=tuple((p, int(b)) for p, b in bd["phases"].items()), source=bd["source"],
        notes=(f"figures traced (model_type {spec.model_type} is not modelled analytically): {how}; the runtime "
               "(CUDA context, workspaces) is added from the GPU catalog",
               *bd["notes"], *notes, *w.ignored()),
    )
    fits = headroom_bytes = None
    advice = said = ""
    if g is not None:
        headroom_bytes = usable_bytes(g, headroom) - total
        fits = headroom_bytes >= 0
        big = breakdown.largest()
        advice = f"largest component: {big.name} ({big.bytes / max(1, total):.0%})"
        said = verdict(total, g, headroom)
    return Estimate(
        model=spec, workload=w, gpu=g, breakdown=breakdown, trainable_params=int(value["trainable_params"]),
        layer_activation_bytes=int(value.get("per_layer", {}).get("activations", 0)), fits=fits,
        headroom_bytes=headroom_bytes, advice=advice, verdict=said, explain=explain,
    )


#: The cache's folder for meta-device inventories (``vramlens capacity`` of an unmodelled model_type).
INVENTORY_KIND = "inventory"
#: Version of the cached inventory; another version is built again.
INVENTORY_FORMAT = 1
#: config.json keys of the routed experts' count and of the experts each token runs through
#: (Qwen3-Next, Qwen MoE ``num_experts``; Mixtral, Jamba, Granite ``num_local_experts``; Nemotron-H
#: ``n_routed_experts``; ``num_experts_per_tok`` in all of them).
_EXPERT_KEYS = ("num_experts", "num_local_experts", "n_routed_experts")


def serving_spec(model: str | dict | ModelSpec, *, trace_fallback: bool = True) -> tuple[ModelSpec, tuple[str, ...]]:
    """The ModelSpec ``vramlens capacity`` serves, and what to say about where it came from.

    A modelled ``model_type`` (or a spec with no config) is the analytic spec. Any other is the exact
    inventory of the transformers model built on the meta device (:func:`vramlens.trace.fallback.inventory`,
    the one ``vramlens estimate`` keeps with a traced profile), cached on disk (kind ``inventory``) under a
    hash of the config and the vramlens version. ``trace_fallback=False`` keeps the generic Llama-style
    approximation of the standard fields, and says so.

    Raises:
        MissingExtraError: the inventory is not cached and torch or transformers is not installed.
        UnmodelledModelError: neither transformers nor the standard fields describe the model.
        TraceError: transformers cannot build the model on the meta device.
    """
    L.check_bool("trace_fallback", trace_fallback)
    spec, refusal, config, model_type = _load(model)
    if spec is not None and not model_type:
        return spec, ()
    if not trace_fallback:
        if spec is None:
            assert refusal is not None
            raise refusal
        return spec, (f"weights approximated (model_type {model_type} is not modelled analytically; a generic "
                      "Llama-style decoder from the standard fields, --no-trace-fallback)",)
    name = spec.name if spec is not None else str(config.get("_name_or_path") or (model if isinstance(model, str)
                                                                                  else model_type))
    source = spec.source if spec is not None else "config"
    from vramlens import __version__, cache

    key = cache.key_of({"config": config, "vramlens": __version__, "format": INVENTORY_FORMAT})
    found = cache.read(INVENTORY_KIND, key)
    value = found.value if found.value is not None and found.value.get("format") == INVENTORY_FORMAT else None
    notes = [found.note] if found.note else []
    if value is not None and (why := inventory_problem(value)):  # a damaged or hand-edited file: built again
        notes.append(f"cache file {cache.shown(INVENTORY_KIND, key)} ignored ({why})")
        value = None
    if value is not None:
        notes.append(f"inventory answered from the cache {cache.shown(INVENTORY_KIND, key)}")
    else:
        _require_torch(model_type, "builds the real model on the meta device for its weights",
                       approximable=spec is not None)
        from vramlens.trace.fallback import complete, inventory, knows

        if not knows(model_type):  # transformers cannot build it either: the analytic path's answer
            if spec is not None:
                return spec, (f"weights approximated (model_type {model_type} is not modelled analytically and the "
                              "installed transformers does not know it: a generic Llama-style decoder)",)
            assert refusal is not None
            raise refusal
        from vramlens.workload import make_workload

        try:
            facts, rows = inventory(complete(config), make_workload(mode="inference"))
        except TraceError as e:
            raise TraceError(f"model_type {model_type!r} is not modelled analytically and building it on the meta "
                             f"device failed: {e}") from None
        value = {"format": INVENTORY_FORMAT, "model": facts, "tensors": rows}
        stored = cache.write(INVENTORY_KIND, key, value)
        notes.append(stored or f"inventory cached in {cache.shown(INVENTORY_KIND, key)}")
    out = _meta_spec(value, config, name=name, source=source)
    return out, (f"weights from the inventory of {out.architecture} built by transformers on the meta device "
                 f"(model_type {model_type} is not modelled analytically): {out.params:,} parameters", *notes)


def _load(model: Any) -> tuple[ModelSpec | None, UnmodelledModelError | None, dict[str, Any], str]:
    """``model`` loaded for the fallback: (spec, refusal, config, model_type), where model_type is "" when a family
    models it (or it has no config to build), so the analytic spec answers; else the unmodelled model_type with its
    config, from the generic approximation's spec or, when even that is refused, the refusal."""
    from vramlens.models import SUPPORTED_MODEL_TYPES, load_model

    try:
        spec = load_model(model)
    except UnmodelledModelError as e:
        return None, e, e.config, e.model_type
    if spec.model_type in SUPPORTED_MODEL_TYPES or not spec.config:
        return spec, None, spec.config or {}, ""
    return spec, None, spec.config, spec.model_type


def _require_torch(model_type: str, does: str, *, approximable: bool) -> None:
    """MissingExtraError in one line when torch is missing: what vramlens ``does`` for an unmodelled
    ``model_type`` instead, and the --no-trace-fallback way out where the config has the standard fields."""
    import vramlens.trace as T

    try:
        T.require_torch()
    except MissingExtraError as e:
        instead = " (or --no-trace-fallback for a generic Llama-style approximation)" if approximable else ""
        raise MissingExtraError(
            e.package, "trace",
            why=f"model_type {model_type!r} is not modelled analytically and vramlens {does} instead{instead}, but ",
        ) from None


def _meta_spec(value: dict[str, Any], config: dict[str, Any], *, name: str, source: str) -> ModelSpec:
    """A ModelSpec of a meta-device inventory, with the serving facts its config gives: routed experts
    (tensors under an ``experts`` module, their width ``moe_intermediate_size``), rotary positions (an
    ``inv_freq`` buffer), the checkpoint dtype."""
    from vramlens.units import DTYPE_ALIASES

    spec = traced_spec(value, name=name, source=source)
    cfg = dict(config.get("text_config") or config) if isinstance(config.get("text_config"), dict) else config
    n_experts = next((v for k in _EXPERT_KEYS if isinstance(v := cfg.get(k), int) and not isinstance(v, bool)), 0)
    per_token = cfg.get("num_experts_per_tok") if n_experts else 0
    tensors = spec.tensors
    if n_experts:
        tensors = tuple(replace(t, role="expert") if ".experts." in f".{t.name}" and t.role != "buffer" else t
                        for t in tensors)
    moe_ffn = cfg.get("moe_intermediate_size")
    rotary = any(t.role == "buffer" and t.name.endswith("inv_freq") for t in tensors)
    dtype = config.get("torch_dtype") or config.get("dtype")
    return replace(
        spec, tensors=tensors, n_experts=n_experts,
        experts_per_token=per_token if isinstance(per_token, int) and not isinstance(per_token, bool) else 0,
        ffn_size=moe_ffn if n_experts and isinstance(moe_ffn, int) and moe_ffn > 0 else spec.ffn_size,
        position="rotary" if rotary else spec.position,
        torch_dtype=DTYPE_ALIASES.get(str(dtype)) if dtype else None, config=dict(config),
        assumed=(f"model_type {spec.model_type!r} is not modelled analytically: the inventory of the transformers "
                 "model built on the meta device",))


#: The facts of a cached inventory or traced profile (:func:`vramlens.trace.fallback.inventory`) that are counts.
_FACT_INTS = ("hidden_size", "n_heads", "n_kv_heads", "head_dim", "ffn_size", "vocab_size", "n_layers", "max_position")
_FACT_STRS = ("model_type", "architecture", "kind", "head")
#: Facts the inventory always writes as at least 1 (trace.fallback.inventory: heads max(1, ...), kv heads or heads)
_FACT_POSITIVE = ("hidden_size", "n_heads", "n_kv_heads", "n_layers")


def inventory_problem(value: dict[str, Any]) -> str:
    """Why a cached inventory (or a traced profile's ``model`` and ``tensors``) is not one
    :func:`vramlens.trace.fallback.inventory` could have written, or "" when it is.

    The cache is a file on disk: a truncated, hand-edited or hostile one must be built again, never
    answer with a negative width or a tensor of -256 rows (each count is held to vramlens.limits).
    """
    m, rows = value.get("model"), value.get("tensors")
    if not isinstance(m, dict) or not isinstance(rows, list):
        return "no model facts or tensor list"
    for k in _FACT_INTS:
        v = m.get(k)
        least = 1 if k in _FACT_POSITIVE else 0
        if isinstance(v, bool) or not isinstance(v, int) or not least <= v <= L.MAX_POSITIONS:
            return f"model {k}={L.show(v)} is not a count"
    if m["n_layers"] > L.MAX_LAYERS or not all(isinstance(m.get(k), str) for k in _FACT_STRS) or not isinstance(
            m.get("tied_embeddings"), bool) or m["kind"] not in ("decoder", "encoder", "encoder-decoder"):
        return "model facts of the wrong type"
    if not 0 < len(rows) <= L.MAX_TENSORS:
        return f"{len(rows):,} tensors"
    roles, numel = set(get_args(Role)), 0
    for row in rows:
        if not (isinstance(row, list) and len(row) == 6):
            return f"tensor entry {L.show(row)} is not [name, shape, role, module, layer, dtype]"
        name, shape, role, module, layer, dtype = row
        if not (isinstance(name, str) and isinstance(module, str) and role in roles and isinstance(shape, list)
                and len(shape) <= 8 and all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape)
                and (layer is None or isinstance(layer, int) and not isinstance(layer, bool) and 0 <= layer < L.MAX_LAYERS)
                and (dtype is None or dtype in DTYPE_BYTES)):
            return f"tensor entry {L.show(row)} is not [name, shape, role, module, layer, dtype]"
        numel += prod(shape)
        if numel > L.MAX_PARAMS:
            return f"over {L.MAX_PARAMS:,} parameters"
    return ""


def traced_spec(value: dict[str, Any], *, name: str, source: str) -> ModelSpec:
    """The ModelSpec of a traced profile: its facts and the full model's inventory (built on meta).

    Raises:
        ValueError: ``value`` is not one vramlens wrote (:func:`inventory_problem` says why).
    """
    if why := inventory_problem(value):
        raise ValueError(why)
    m = value["model"]
    tensors = tuple(TensorInfo(name=n, shape=tuple(shape), role=role, module=module, layer=layer, dtype=dtype)
                    for n, shape, role, module, layer, dtype in value["tensors"])
    return ModelSpec(
        name=name, model_type=m["model_type"], architecture=m["architecture"], kind=m["kind"],
        hidden_size=m["hidden_size"], n_heads=m["n_heads"], n_kv_heads=m["n_kv_heads"], head_dim=m["head_dim"],
        ffn_size=m["ffn_size"], vocab_size=m["vocab_size"],
        n_decoder_layers=m["n_layers"], max_position=m["max_position"], tied_embeddings=m["tied_embeddings"],
        tensors=tensors, source=f"{source}+trace", head=m["head"],
        assumed=(f"model_type {m['model_type']!r} is not modelled analytically: figures traced with transformers",),
    )


__all__ = [
    "CACHE_KIND", "INVENTORY_FORMAT", "INVENTORY_KIND", "SPARE_PLANS", "TRACE_STEPS", "cache_key", "cached_profile",
    "estimate", "fit", "inventory_problem", "serving_spec", "traced_estimate", "traced_profile", "traced_spec",
]
