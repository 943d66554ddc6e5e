"""The front door: ``trace(model, workload) -> TraceResult``, with layer extrapolation.

Extrapolation (``layers=k``): transformers repeat one block L times, and every per-layer
tensor (weights, gradients, optimizer state, saved activations, KV cache, the foreach
optimizer's temporaries) repeats with it, so each phase's peak is linear in the number of
blocks. Two truncated models, with k-1 and k blocks, give the slope and the intercept of
every phase peak (per step), of every component's peak and of every tag's peak; the full
model's figures are those lines at L. The peak is the largest extrapolated phase peak (the
phase where the peak falls can change with L, so phases are extrapolated one by one).

A hybrid model (attention and Mamba or linear-attention blocks) repeats a pattern of blocks, not
one block: the truncated models then hold whole periods of it (:mod:`vramlens.trace.pattern`),
the larger the fewest periods (at least 3) with at least k blocks, the smaller one period less,
and the lines run in periods to the full model's count.
"""

from __future__ import annotations

import contextlib
import gc
import time
from collections.abc import Iterator
from typing import Any

from vramlens.errors import InputError, TraceError, VramlensError
from vramlens.trace.common import (
    name_of,
    phase_max,
    quiet_third_party,
    resolve_workload,
    runner_layers,
    simulated_reserved,
)
from vramlens.trace.events import INFERENCE_COMPONENT, TAG_COMPONENT, Summary, summarize
from vramlens.trace.pattern import block_kinds, find_pattern, short_kind
from vramlens.trace.result import TraceResult, components_of, make_trace_breakdown
from vramlens.workload import AO_INFERENCE_QUANTS, FOUR_BIT, Workload


def trace(model: Any, workload: Workload | None = None, *, steps: int = 2, layers: int | None = None,
          backend: str = "fake", input_shape: tuple[int, ...] | None = None, progress=None,
          top: int = 20, alloc_conf: str | None = None, **workload_kwargs: Any) -> TraceResult:
    """Run real training or inference steps of ``model`` and record every allocation.

    Args:
        model: a ModelSpec, a config.json dict, a catalog name or path, or
            ``"package.module:factory"`` (see vramlens.trace.build for the factory contract).
        workload: the run; or give its fields as keyword arguments.
        steps: optimizer steps to run in training (>= 2 shows step 1 and the steady state).
        layers: trace only the first k blocks (two truncated models, k-1 and k blocks) and
            extrapolate linearly to all of them. None traces the whole model.
        backend: "fake" (fake tensors behaving like CUDA, no memory used), "real-cpu" (real CPU
            tensors, raw sizes) or "cuda" (real CUDA tensors; also reads torch.cuda's peaks).
        input_shape: for factories that return a bare module: the shape of its one input.
        progress: callable taking a one-line message, for long traces.
        alloc_conf: a PYTORCH_CUDA_ALLOC_CONF string for the allocator simulator's peak_reserved (the
            Workload's ``alloc_conf``: given here, it is set on the workload; None: the workload's).

    Returns:
        TraceResult, whose ``breakdown`` compares field by field with an estimate's.

    Raises:
        TraceError: the model cannot be built or run under this mode (names module and op).
        MissingExtraError: torch, transformers or peft is missing.
    """
    wl = resolve_workload(workload, workload_kwargs)
    with older_objects_frozen():
        return _trace(model, wl, steps=steps, layers=layers, backend=backend, input_shape=input_shape,
                      progress=progress, top=top, alloc_conf=alloc_conf)


@contextlib.contextmanager
def older_objects_frozen() -> Iterator[None]:
    """Leave the objects that exist before a trace out of the trace's garbage collections.

    The tracer runs ``gc.collect()`` between steps so that a tensor held only by a reference cycle (autograd
    graphs, modules) is freed, and recorded as freed, where the program would free it. A full collection walks
    every tracked object of the process: with torch and transformers imported that is a quarter of a second
    each, most of a small trace's time. ``gc.freeze()`` moves the objects alive now to the permanent
    generation, which collections do not walk; every object the trace creates is still collected, so the
    recorded events are the same. ``gc.unfreeze()`` returns them afterwards, so the process' collector is as it
    was; a process that froze objects itself is left alone (nothing frozen, nothing unfrozen).
    """
    if gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def _trace(model: Any, wl: Workload, *, steps: int, layers: int | None, backend: str,
           input_shape: tuple[int, ...] | None, progress, top: int, alloc_conf: str | None) -> TraceResult:
    if alloc_conf is not None and alloc_conf != wl.alloc_conf:
        wl = wl.replace(alloc_conf=alloc_conf or None)
    alloc_conf = wl.alloc_conf
    if wl.training and steps < 1:
        raise InputError(f"steps={steps} must be a whole number >= 1")
    if wl.cp > 1:
        # torch's context_parallel needs a device mesh of real collectives (ring attention's all-gathers and
        # all-to-alls inside SDPA's dispatch), which the fake process group does not carry through
        raise TraceError(f"cp={wl.cp}: context parallelism is not traced: trace one rank's share of the sequence "
                         f"(--seq {wl.seq // wl.cp} without --cp) or use `vramlens estimate --cp`")
    if wl.fsdp and wl.compile and wl.training:
        # FSDP2 compiles per block around its hooks (torchtitan's per-block compile), which the single-graph
        # replay of vramlens.trace.compiled does not run
        raise TraceError("compile with fsdp is not traced (FSDP2 compiles each block around its collectives): "
                         "trace without --compile, or use `vramlens estimate`")
    if wl.fsdp:
        from vramlens.trace.fsdp import trace_fsdp

        return trace_fsdp(model, wl, world_size=wl.gpus, steps=steps, backend=backend, layers=layers,
                          progress=progress, top=top, alloc_conf=alloc_conf)
    if wl.tp > 1 and not wl.fsdp and not wl.zero and wl.pp == 1:
        from vramlens.trace.tp import trace_tp

        return trace_tp(model, wl, steps=steps, backend=backend, layers=layers, progress=progress, top=top,
                        alloc_conf=alloc_conf)
    if layers is not None and wl.training and wl.checkpoint_every is not None:
        raise TraceError(f"checkpointing={wl.checkpointing!r} checkpoints every N-th block, which the truncated "
                         "models --layers traces do not repeat block by block: trace the whole model (omit --layers) "
                         "or use `vramlens estimate`")
    if layers is not None:
        return _extrapolated(model, wl, steps=steps, layers=layers, backend=backend, progress=progress, top=top,
                             alloc_conf=alloc_conf)
    return _trace_once(model, wl, steps=steps, backend=backend, input_shape=input_shape, progress=progress, top=top,
                       alloc_conf=alloc_conf)


def untraceable(wl: Workload) -> str:
    """Why ``trace`` cannot run ``wl`` on one process ("" when it can; FSDP and TP are traced by their own paths).

    More than one GPU, ZeRO, FSDP, tensor or pipeline parallelism, quantized weights outside QLoRA, torchao's
    int8 weight-only linear and its other weight-only layouts (fp6, uintx, Sparse-Marlin, QQQ: build.AOWeightOnlyLinear
    stands in for them) (no CPU kernels), offload, and the serving engine's KV cache settings are not traced.
    """
    if wl.gpus > 1 or wl.zero or wl.fsdp or wl.tp > 1 or wl.pp > 1:
        return ("trace runs one GPU, one rank of FSDP (--fsdp --gpus N), of tensor parallelism (--tp N --gpus N) "
                "or of both (--fsdp --tp T --gpus D*T); "
                f"gpus={wl.gpus} zero={wl.zero} fsdp={wl.fsdp} tp={wl.tp} pp={wl.pp}")
    if (wl.quant is not None and wl.method != "qlora" and not (wl.quant == "int8" and wl.quant_impl == "torchao-wo")
            and wl.quant not in AO_INFERENCE_QUANTS
            and not (wl.method in ("oft", "boft", "vera") and wl.quantized in FOUR_BIT)):
        # OFT, BOFT and VeRA over 4-bit linears: peft's layers over the NF4 stand-in (build.quantize_nf4), as QLoRA's
        # torchao's int8 weight-only linear runs plain torch ops (build.quantize_int8_weight_only); torchao 0.18's
        # float8 weight-only dequantizes through fp32, not as the release quant_impl models (weights.wo_dequantizes)
        return f"quant={wl.quant} weights cannot be traced (no CPU kernels)"
    if wl.offload != "none":
        return f"offload={wl.offload} cannot be traced on one process"
    if wl.kv_dtype is not None or wl.kv_block:
        return "--kv-dtype / --kv-block change the serving engine's cache, not transformers'"
    if wl.fused_qkv:
        return "--fused-qkv is LitGPT's attention; trace runs transformers' modules"
    return ""


def _preflight(wl: Workload, backend: str) -> None:
    """Refuse, before any progress line or build, what the tracer cannot run here."""
    why = untraceable(wl)
    if why:
        raise TraceError(f"{why}: use `vramlens estimate`")
    from vramlens.trace.runner import require_backend

    require_backend(backend)


def _run(model: Any, wl: Workload, *, steps: int, backend: str, input_shape, progress, layers: int | None = None):
    with quiet_third_party():
        return _run_loud(model, wl, steps=steps, backend=backend, input_shape=input_shape, progress=progress,
                         layers=layers)


def _run_loud(model: Any, wl: Workload, *, steps: int, backend: str, input_shape, progress, layers: int | None = None):
    from vramlens.trace.runner import Runner, describe_failure

    _preflight(wl, backend)
    runner = Runner(wl, mode=backend, steps=steps, progress=progress)
    built = runner.build(model, layers=layers, input_shape=input_shape)
    try:
        rec = runner.run(built)
    except VramlensError:
        raise
    except Exception as e:  # noqa: BLE001 - any failure inside torch becomes one clear line
        raise TraceError(describe_failure(runner.rec, e)) from e
    params = sum(p.numel() for p in built.model.parameters())
    trainable = sum(p.numel() for p in built.model.parameters() if p.requires_grad)
    return runner, built, rec, params, trainable


def _trace_once(model, wl, *, steps, backend, input_shape, progress, top, alloc_conf=None) -> TraceResult:
    t0 = time.perf_counter()
    runner, built, rec, params, trainable = _run(model, wl, steps=steps, backend=backend, input_shape=input_shape,
                                                 progress=progress)
    events = rec.events()
    summary = summarize(events, top=top, component_of=TAG_COMPONENT if wl.training else INFERENCE_COMPONENT)
    notes = list(runner.notes)
    reserved = simulated_reserved(events, notes, alloc_conf)
    if runner.cuda_stats:
        notes.append(
            f"torch.cuda: max_memory_allocated={runner.cuda_stats['max_memory_allocated']:,} B, "
            f"max_memory_reserved={runner.cuda_stats['max_memory_reserved']:,} B"
        )
    bd = make_trace_breakdown(summary, training=wl.training, source="trace", notes=notes,
                              phases=phase_max(summary.phase_peaks), peak_reserved=reserved, workload=wl)
    del built, rec
    gc.collect()
    return TraceResult(
        breakdown=bd, summary=summary, events=tuple(events), workload=wl, model_name=name_of(model),
        params=params, trainable_params=trainable, backend=backend, steps=steps if wl.training else 1,
        step_peaks=summary.step_peaks, phase_peaks=summary.phase_peaks, n_layers=runner_layers(runner, model),
        cuda=dict(runner.cuda_stats), seconds=time.perf_counter() - t0,
    )


# ---- extrapolation ----------------------------------------------------------------------------
def _line(y1: int, y2: int, k1: int, k2: int, L: int) -> int:
    return max(0, round(y2 + (y2 - y1) * (L - k2) / (k2 - k1)))


def _extrapolated(model, wl: Workload, *, steps, layers, backend, progress, top, alloc_conf=None) -> TraceResult:
    from vramlens.trace.build import config_layers, is_factory
    from vramlens.trace.runner import config_of

    if is_factory(model):
        raise InputError("layers=k (extrapolation) needs a transformer config; a factory module is traced whole")
    cfg = config_of(model)
    L = config_layers(cfg)
    if L <= 0:
        raise InputError("layers=k: the config names no number of layers (num_hidden_layers / n_layer / num_layers)")
    if isinstance(layers, bool) or not isinstance(layers, int) or layers < 3:
        # a one-block model is not yet on the line (its first block is also its last), so the
        # line comes from k-1 >= 2 and k blocks
        raise InputError(f"layers={layers!r} must be >= 3: the line comes from truncated models of k-1 and k blocks")
    if layers >= L:
        return _trace_once(model, wl, steps=steps, backend=backend, input_shape=None, progress=progress, top=top,
                           alloc_conf=alloc_conf)
    _preflight(wl, backend)  # before the first progress line: a refusal is the only line on stderr
    t0 = time.perf_counter()
    params, trainable, kinds = _full_model(cfg, wl, L)
    pat = find_pattern(kinds)
    if pat is None:
        shown = ", ".join(short_kind(k) for k in kinds)
        raise TraceError(f"layers={layers}: the {L} blocks repeat no pattern ({shown}), so the traced blocks cannot "
                         "be extrapolated to the rest: trace the full model (omit --layers)")
    k1, k2 = pat.truncations(layers)  # whole periods of the layer pattern (blocks, for a uniform model)
    m1, m2 = pat.blocks(k1), pat.blocks(k2)
    if m2 >= L:
        return _trace_once(model, wl, steps=steps, backend=backend, input_shape=None, progress=progress, top=top,
                           alloc_conf=alloc_conf)
    n = pat.periods
    results = []
    for m in (m1, m2):
        if progress:
            progress(f"tracing the first {m} of {L} layers")
        runner, built, rec, _p, _t = _run(cfg, wl, steps=steps, backend=backend, input_shape=None, progress=progress,
                                          layers=m)
        if not pat.uniform and block_kinds(built.model, m) != kinds[:m]:
            raise TraceError(f"the config cut to its first {m} blocks builds other blocks than the full model's first "
                             f"{m} (a per-block field vramlens does not cut): trace the full model (omit --layers)")
        events = rec.events()
        summary = summarize(events, top=top, component_of=TAG_COMPONENT if wl.training else INFERENCE_COMPONENT)
        results.append((summary, events, runner))
        del built, rec
        gc.collect()
    (s1, _e1, _r1), (s2, e2, r2) = results
    phases = _extrapolate_phases(s1, s2, k1, k2, n, m2)
    comps1, comps2 = components_of(s1, wl.training), components_of(s2, wl.training)
    comps = {c: _line(comps1.get(c, 0), comps2.get(c, 0), k1, k2, n) for c in comps2}
    peak_step, peak_phase, peak = max(phases, key=lambda x: x[2])
    steps_peaks: dict[int, int] = {}
    for st, p, b in phases:
        if p != "setup":
            steps_peaks[st] = max(steps_peaks.get(st, 0), b)
    how = (f"extrapolated linearly from traces of the first {m1} and {m2} of {L} layers" if pat.uniform else
           f"extrapolated linearly per period of the layer pattern {pat.shown()}: traces of the first {m1} and {m2} "
           f"of {L} layers ({k1} and {k2} periods of {pat.period})")
    notes = list(r2.notes) + [
        f"{how} (events, live set and modules are those of the {m2}-layer trace)",
        "peak_reserved = peak_allocated for extrapolated traces (the allocator is not linear in layers)",
    ]
    bd = make_trace_breakdown(s2, training=wl.training, source="trace-extrapolated", notes=notes,
                              phases=phase_max(phases), components=comps, peak_allocated=peak,
                              peak_phase=peak_phase, host_bytes=_line(s1.host_peak, s2.host_peak, k1, k2, n), workload=wl)
    summary = Summary(
        peak_allocated=peak, peak_seq=s2.peak_seq, peak_phase=peak_phase, peak_step=peak_step,
        by_tag={t: _line(s1.by_tag.get(t, 0), b, k1, k2, n) for t, b in s2.by_tag.items()},
        by_component=comps, by_module=s2.by_module, phase_peaks=tuple(phases),
        step_peaks=tuple(sorted(steps_peaks.items())), live_at_peak=s2.live_at_peak, top_tensors=s2.top_tensors,
        final_live=_line(s1.final_live, s2.final_live, k1, k2, n),
    )
    # a period's slope spread over its blocks (exact for a uniform model)
    per_layer = {c: (comps2.get(c, 0) - comps1.get(c, 0)) // pat.period for c in comps2}
    return TraceResult(
        breakdown=bd, summary=summary, events=tuple(e2), workload=wl, model_name=name_of(model), params=params,
        trainable_params=trainable, backend=backend, steps=steps if wl.training else 1,
        step_peaks=summary.step_peaks, phase_peaks=summary.phase_peaks, layers=layers, n_layers=L,
        seconds=time.perf_counter() - t0, per_layer=per_layer, truncated=(m1, m2),
    )


def _extrapolate_phases(s1: Summary, s2: Summary, k1: int, k2: int, n: int, m2: int) -> list[tuple[int, str, int]]:
    p1 = {(st, p): b for st, p, b in s1.phase_peaks}
    out = []
    for st, p, b in s2.phase_peaks:
        if (st, p) not in p1:
            raise TraceError(f"phase {p} of step {st} appears only in the {m2}-layer trace: cannot extrapolate; "
                             "trace the full model (omit --layers)")
        out.append((st, p, _line(p1[(st, p)], b, k1, k2, n)))
    return out


def _full_model(cfg: dict, wl: Workload, L: int) -> tuple[int, int, list[tuple[Any, ...]]]:
    """Parameter counts and block kinds (:func:`vramlens.trace.pattern.block_kinds`) of the full model,
    built on meta (no memory)."""
    from vramlens.trace.build import build_hf

    with quiet_third_party():
        built = build_hf(cfg, wl.replace(checkpointing="none"), meta_only=True)
    ps = list(built.model.parameters())
    return sum(p.numel() for p in ps), sum(p.numel() for p in ps if p.requires_grad), block_kinds(built.model, L)
