"""The search: enumerate the remedies, keep the plans that fit, rank them by estimated speed.

Remedies (names usable in ``keep`` / ``forbid``):

=============  ===============================================================================
amp            mixed precision / half-precision weights (--dtype, --amp)
checkpointing  activation checkpointing (every:2 and selective-op as torchtitan, full; selective with eager)
attention      SDPA / FlashAttention instead of the starting kernel
lora, qlora    parameter-efficient fine-tuning (--method)
8bit           8-bit optimizer states (--optimizer adamw-8bit, bitsandbytes)
4bit           4-bit optimizer states (--optimizer adamw-4bit-torchao, torchao's AdamW4bit)
grad-accum     a smaller micro-batch with gradient accumulation (same effective batch)
zero, fsdp     sharding of the training state over the data-parallel GPUs
tp, pp         tensor and pipeline parallelism
offload        CPU offload of optimizer states (and parameters)
quant          quantized weights (inference)
kv-quant       an 8-bit KV cache (inference)
optimizer-in-backward
               torchtune's optimizer_in_bwd: each parameter stepped in backward, one gradient at a
               time (not with grad-accum > 1, ZeRO/FSDP, offload or pp: Workload.problems)
loss-chunks    torchtune's chunked output and CEWithChunkedOutputLoss (8 chunks), causal LMs
activation-offload
               torchtune's OffloadActivations: the blocks' saved activations in pinned host memory
loss-parallel  torchtitan's loss parallelism: logits sharded over the vocabulary (tp > 1 only)
=============  ===============================================================================

The four techniques are tried only for a candidate that does not fit without them (and under
``optimize="memory"`` for every candidate): they cost no step time or add PCIe time
(:mod:`vramlens.advise.cost`), so a candidate that fits without them is at least as fast with
fewer changes. The largest set is tried first (when it misses, fewer are taken to miss too: each
takes memory away, though chunked loss adds the output layer's gradient addends, so this prunes
heuristically; every plan returned is still re-estimated exactly), then fewest first, the free ones before activation offload, until one fits; and
only the largest set when even a free technique could not beat the worst plan kept.

Every candidate is evaluated with the estimator's own component functions, memoized per part
of the workload they read (:mod:`vramlens.advise.fastmem`); the plans returned are re-estimated
with :func:`vramlens.estimator.estimate_spec`, so their figures are exactly what
``vramlens estimate`` prints for their settings.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from vramlens.advise.budget import Budget
from vramlens.advise.cost import Links, StepCost, TrainingCost, inference_request, tradeoffs, training_step
from vramlens.advise.fastmem import STATE_FIELDS, FastMemory
from vramlens.advise.plan import FitResult, Plan, settings_of
from vramlens.errors import ConfigError, InputError
from vramlens.estimator import estimate_spec
from vramlens.estimator import kv_cache as K
from vramlens.estimator.verdict import verdict
from vramlens.hardware.gpu import GPU
from vramlens.limits import MAX_BATCH, MAX_EFFECTIVE_BATCH, MAX_GRAD_ACCUM, SEARCH_BUDGET_S, show
from vramlens.models.spec import ModelSpec
from vramlens.units import ceil_div, human_bytes
from vramlens.workload import (
    Amp,
    Attention,
    DType,
    KVDType,
    Method,
    Offload,
    Optimizer,
    Quant,
    Workload,
    evolve,
)

REMEDIES = ("amp", "checkpointing", "attention", "lora", "qlora", "8bit", "4bit", "grad-accum", "zero", "fsdp",
            "tp", "pp", "offload", "quant", "kv-quant", "optimizer-in-backward", "loss-chunks", "activation-offload",
            "loss-parallel")
#: The training techniques (remedy name, Workload field, the value the remedy sets), free ones first.
TECHNIQUES: tuple[tuple[str, str, Any], ...] = (("optimizer-in-backward", "optimizer_in_backward", True), ("loss-chunks", "loss_chunks", 8),
              ("loss-parallel", "loss_parallel", True), ("activation-offload", "activation_offload", True))
TRAIN_ONLY = ("checkpointing", "lora", "qlora", "8bit", "4bit", "grad-accum", "zero", "fsdp", "offload",
              *(name for name, _, _ in TECHNIQUES))
INFERENCE_ONLY = ("quant", "kv-quant")
DEFAULT_MAX_PLANS = 10
#: What ``optimize`` may ask for beyond "it fits".
OBJECTIVES = ("speed", "memory", "cost")
#: Largest tensor-parallel degree tried: TP stays inside one NVLink domain (8 GPUs per node).
MAX_TP = 8
#: The parameter-efficient methods, each a remedy of its own name.
_PEFT_METHODS: tuple[Method, ...] = ("lora", "qlora")

#: A change that buys less than this fraction of the step time (or of the tokens/s) is not needed: undoing it
#: leaves a simpler plan (e.g. a 4-bit optimizer over VeRA's few thousand trained values saves microseconds).
SPEED_TIE = 1e-3

_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class Constraints:
    keep: frozenset[str]
    forbid: frozenset[str]
    method_locked: bool


def _names(items: str | Iterable[str]) -> frozenset[str]:
    if isinstance(items, str):
        items = items.split(",")
    if not isinstance(items, (list, tuple, set, frozenset)) or not all(isinstance(i, str) for i in items):
        raise InputError(f"keep/forbid={show(items)} is not remedy names: give a comma-separated string or a list of "
                         "names such as ['lora', 'checkpointing']")
    return frozenset(i.strip().lower().replace("_", "-") for i in items if i and i.strip())


def check_constraints(base: Workload, keep: str | Iterable[str], forbid: str | Iterable[str], *, method_locked: bool,
                      total_gpus: int) -> Constraints:
    """Name every contradiction among the constraints before searching.

    Raises:
        InputError: an unknown remedy, or constraints that no plan can satisfy together.
    """
    k, f = _names(keep), _names(forbid)
    problems: list[str] = []
    for flag, names in (("--keep", k), ("--forbid", f)):
        for name in sorted(names - set(REMEDIES)):
            problems.append(f"{flag} {name!r} is not a remedy: choose from {', '.join(REMEDIES)}")
    for name in sorted(k & f):
        problems.append(f"--keep {name} and --forbid {name} contradict each other: drop one")
    for name in _PEFT_METHODS:
        if name in k and method_locked and base.method != name:
            problems.append(f"--keep {name} contradicts --method {base.method}: drop one")
    if {"lora", "qlora"} <= k:
        problems.append("--keep lora and --keep qlora: a plan uses one method; keep one of them")
    if {"8bit", "4bit"} <= k:
        problems.append("--keep 8bit and --keep 4bit: a plan uses one optimizer; keep one of them")
    if {"zero", "fsdp"} <= k:
        problems.append("--keep zero and --keep fsdp: a plan shards with ZeRO or FSDP, not both; keep one")
    if not base.training:
        for name in sorted(k & set(TRAIN_ONLY)):
            problems.append(f"--keep {name} applies to training; the workload is --mode inference")
    else:
        for name in sorted(k & set(INFERENCE_ONLY)):
            problems.append(f"--keep {name} applies to inference; the workload is --mode train")
    for name in sorted(k & {"tp", "pp", "zero", "fsdp"}):
        if total_gpus < 2:
            problems.append(f"--keep {name} needs more than one GPU: give --gpus 2 or more")
    if "offload" in k and "zero" in f and "fsdp" in f:
        problems.append("--keep offload needs ZeRO or FSDP, and both are forbidden")
    if "optimizer-in-backward" in k:
        for name in sorted(k & {"grad-accum", "zero", "fsdp", "offload", "pp"}):
            problems.append(f"--keep optimizer-in-backward and --keep {name}: the optimizer in backward steps each "
                            f"gradient as it arrives, which {name} rules out; keep one of them")
        if base.optimizer == "none":
            problems.append("--keep optimizer-in-backward needs an optimizer, and the workload has --optimizer none")
    if {"loss-chunks", "loss-parallel"} <= k:
        problems.append("--keep loss-chunks and --keep loss-parallel: loss parallelism runs the plain cross-entropy "
                        "on vocabulary shards; keep one of them")
    if "loss-parallel" in k and (total_gpus < 2 or "tp" in f):
        problems.append("--keep loss-parallel shards the logits over tensor-parallel ranks: it needs --gpus 2 or "
                        "more and tp not forbidden")
    if problems:
        raise ConfigError(problems)
    return Constraints(keep=k, forbid=f, method_locked=method_locked)


def divisors(n: int) -> list[int]:
    """The divisors of ``n`` (>= 1) in increasing order, found in O(sqrt n) steps."""
    small, large = [], []
    d = 1
    while d * d <= n:
        if n % d == 0:
            small.append(d)
            if d != n // d:
                large.append(n // d)
        d += 1
    return small + large[::-1]


def _half(gpu: GPU) -> Amp:
    """bf16 where the GPU computes it natively (Ampere and later, CDNA2+, Apple), else fp16."""
    return "fp16" if gpu.arch in ("volta", "turing") or not gpu.bf16_flops else "bf16"


def _uniq(xs: Iterable[_T]) -> list[_T]:
    out: list[_T] = []
    for x in xs:
        if x not in out:
            out.append(x)
    return out


def _precisions(base: Workload, gpu: GPU, c: Constraints) -> list[tuple[DType, Amp | None]]:
    if "amp" in c.forbid:
        return [(base.dtype, base.amp)]
    h = _half(gpu)
    opts: list[tuple[DType, Amp | None]] = [(base.dtype, base.amp), (h, None), (h, h), ("fp32", h)]
    if "amp" in c.keep:
        opts = [o for o in opts if o[0] != "fp32" or o[1] is not None]
    return _uniq(opts)


def _methods(base: Workload, c: Constraints) -> list[Method]:
    if c.method_locked:
        return [base.method]
    ms = _uniq([base.method, "full", *_PEFT_METHODS])
    for name in _PEFT_METHODS:
        if name in c.forbid:
            ms = [m for m in ms if m != name]
        if name in c.keep:
            ms = [name]
    return ms


#: The PEFT methods whose base the search may load in 4-bit (bitsandbytes' NF4 with double quantization, as
#: transformers' BitsAndBytesConfig loads it for QLoRA): peft dispatches OFT's, BOFT's and VeRA's layers over a
#: ``Linear4bit`` (Workload._bnb_config_problems); LoRA gets the same base as --method qlora.
FOUR_BIT_BASE_METHODS: tuple[Method, ...] = ("oft", "boft", "vera")


def _bases(base: Workload, method: Method, c: Constraints) -> list[Quant | None]:
    """The weight formats tried for ``method``: the user's own for their method (and, for a method in
    FOUR_BIT_BASE_METHODS over unquantized weights, a 4-bit NF4 base: the ``qlora`` remedy), none for the others."""
    if method != base.method:
        return [None]
    if method in FOUR_BIT_BASE_METHODS and base.quant is None and "qlora" not in c.forbid:
        return [None, "nf4-dq"]
    return [base.quant]


def _optimizers(base: Workload, c: Constraints) -> list[Optimizer]:
    if base.optimizer == "none":
        return ["none"]
    # bitsandbytes' 8-bit AdamW, and torchao's 4-bit AdamW (half its states); torchao's own 8-bit
    # AdamW takes bitsandbytes' bytes, so it would only repeat the 8-bit plan
    opts: list[Optimizer] = _uniq([base.optimizer, "adamw-8bit", "adamw-4bit-torchao"])
    for name in ("8bit", "4bit"):
        if name in c.forbid:
            opts = [o for o in opts if name not in o] or [base.optimizer]
        if name in c.keep:
            opts = [o for o in opts if name in o]
    return opts


#: torchtitan's default layer-selective option (selective_ac_option="2"): the every:N the search tries.
EVERY_N = "every:2"


def _checkpointing(base: Workload, c: Constraints) -> list[str]:
    """The starting mode, none, torchtitan's every:2 and per-op selective, and full; Megatron's
    selective only with eager attention (over SDPA it has no scores to drop)."""
    if "checkpointing" in c.forbid:
        return [base.checkpointing]
    opts: list[str] = _uniq([base.checkpointing, "none", EVERY_N, "selective-op", "full"]
                            + (["selective"] if base.attention == "eager" else []))
    if "checkpointing" in c.keep:
        opts = [o for o in opts if o != "none"]
    return opts


def _attentions(base: Workload, gpu: GPU, c: Constraints) -> list[Attention]:
    if "attention" in c.forbid:
        return [base.attention]
    opts: list[Attention] = _uniq([base.attention, "sdpa"])
    if gpu.vendor == "nvidia" and gpu.arch not in ("volta", "turing"):
        opts = _uniq(opts + ["flash"])  # FlashAttention-2 needs Ampere or later
    if "attention" in c.keep:
        opts = [o for o in opts if o != "eager"]
    return opts


def _layouts(base: Workload, total: int, per_node: int, c: Constraints) -> list[tuple[int, int]]:
    """(tp, pp) pairs whose product divides the GPUs."""
    out: list[tuple[int, int]] = []
    for tp in divisors(total):
        if tp > min(MAX_TP, per_node) or (tp > 1 and "tp" in c.forbid) or ("tp" in c.keep and tp == 1):
            continue
        for pp in divisors(total // tp):
            if (pp > 1 and "pp" in c.forbid) or ("pp" in c.keep and pp == 1):
                continue
            out.append((tp, pp))
    return out


def _shardings(dp: int, c: Constraints) -> list[tuple[int, bool, Offload]]:
    """(zero, fsdp, offload) for a data-parallel degree."""
    opts: list[tuple[int, bool, Offload]] = []
    if dp > 1:
        opts += [(0, False, "none"), (1, False, "none"), (2, False, "none"), (3, False, "none"), (0, True, "none")]
    else:
        opts += [(0, False, "none")]
    # ZeRO-Offload also serves a single GPU (Ren et al. 2021)
    opts += [(2, False, "optimizer"), (3, False, "optimizer"), (3, False, "all")]
    if dp > 1:
        opts += [(0, True, "optimizer"), (0, True, "all")]
    out: list[tuple[int, bool, Offload]] = []
    for z, fs, off in opts:
        if "zero" in c.forbid and z:
            continue
        if "fsdp" in c.forbid and fs:
            continue
        if "offload" in c.forbid and off != "none":
            continue
        if "zero" in c.keep and not z:
            continue
        if "fsdp" in c.keep and not fs:
            continue
        if "offload" in c.keep and off == "none":
            continue
        out.append((z, fs, off))
    return out


class _Search:
    def __init__(self, spec: ModelSpec, gpu: GPU, headroom: float, host_ram: int | None, nodes: int,
                 links: Links, objective: str = "speed"):
        self.objective = objective
        self.spec = spec
        self.gpu = gpu
        self.limit = gpu.capacity_bytes * (1 - headroom) if headroom else gpu.capacity_bytes
        self.host_ram = host_ram
        self.nodes = nodes
        self.links = links
        self.fm = FastMemory(spec, gpu)

    def host_ok(self, host: int) -> bool:
        return self.host_ram is None or host <= self.host_ram * self.nodes

    def cost(self, w: Workload, trainable: int, offloaded_bytes: int | None = None) -> StepCost:
        if w.training:
            return training_step(self.spec, w, self.gpu, trainable=trainable, nodes=self.nodes, links=self.links,
                                 offloaded_bytes=offloaded_bytes)
        kv_tok = K.kv_bytes_per_token(self.spec, w, tp=w.tp) // max(1, w.pp)
        return inference_request(self.spec, w, self.gpu, weight_bytes=self.fm.weights(w), kv_bytes_per_token=kv_tok,
                                 links=self.links)


def _splittable(effective_batch: int, total: int) -> bool:
    """Whether some data-parallel degree (a divisor of the effective batch, at most ``total``) leaves a
    per-rank batch that splits into micro-batch x grad-accum within their bounds."""
    ds = divisors(effective_batch)  # every grad-accum and every dp is one of these: one O(sqrt n) pass
    for dp in ds:
        if dp > total:
            break
        per_rank = effective_batch // dp
        if per_rank <= MAX_BATCH:
            return True
        low = ceil_div(per_rank, MAX_BATCH)  # the fewest accumulation steps that keep the micro-batch in bounds
        if any(low <= m <= MAX_GRAD_ACCUM and per_rank % m == 0 for m in ds):
            return True
    return False


def _training_candidates(base: Workload, gpu: GPU, total: int, per_node: int, c: Constraints,
                         effective_batch: int) -> Iterator[tuple[Workload, list[tuple[int, int]]]]:
    """Yield structural workloads (batch/grad_accum filled in later) and the micro-batch splits."""
    kept_techniques: dict[str, Any] = {field: value for name, field, value in TECHNIQUES if name in c.keep}
    for tp, pp in _layouts(base, total, per_node, c):
        dp = total // (tp * pp)
        if effective_batch % dp:
            continue
        per_rank = effective_batch // dp
        if "grad-accum" in c.forbid:
            splits = [(base.batch, base.grad_accum)] if base.batch * base.grad_accum == per_rank else []
        else:  # biggest micro-batch first, each factor within its bound
            splits = [(per_rank // m, m) for m in divisors(per_rank)
                      if per_rank // m <= MAX_BATCH and m <= MAX_GRAD_ACCUM]
        if "grad-accum" in c.keep:
            splits = [s for s in splits if s[1] > 1]
        if not splits:
            continue
        for z, fs, off in _shardings(dp, c):
            for method in _methods(base, c):
                for dtype, amp in _precisions(base, gpu, c):
                    for opt in _optimizers(base, c):
                        for quant in _bases(base, method, c):
                            yield evolve(base, gpus=total, tp=tp, pp=pp, zero=z, fsdp=fs, offload=off,
                                          method=method, dtype=dtype, amp=amp, optimizer=opt, quant=quant,
                                          **kept_techniques), splits


def _techniques(struct: Workload, spec: ModelSpec, c: Constraints) -> list[tuple[str, str, Any]]:
    """The techniques ``struct`` may still add: not on already, not forbidden, not refused by its
    structure (the Workload and check_workload refuse the rest, e.g. in-backward with grad-accum)."""
    out: list[tuple[str, str, Any]] = []
    causal = spec.head == "causal-lm"
    for name, field_, value in TECHNIQUES:
        on = struct.loss_chunks > 1 if field_ == "loss_chunks" else getattr(struct, field_)
        if name in c.forbid or on:
            continue
        if name == "optimizer-in-backward" and (struct.shard_stage or struct.offload != "none" or struct.pp > 1
                                                or struct.optimizer == "none" or struct.keep_grads
                                                or (struct.amp is not None and struct.amp == struct.dtype)):
            continue
        if name == "loss-chunks" and (not causal or struct.loss != "cross-entropy" or struct.loss_parallel
                                      or struct.seq < 2):
            continue
        if name == "loss-parallel" and (not causal or struct.tp == 1 or struct.loss_chunks > 1
                                        or struct.loss != "cross-entropy"):
            continue
        out.append((name, field_, min(struct.seq, 8) if name == "loss-chunks" else value))
    return out


@dataclass(frozen=True, slots=True)
class _Variant:
    """A structure with some techniques added, and its key in FastMemory's state memo."""

    struct: Workload
    skey: tuple[object, ...]
    added: int        # techniques added (plan changes)
    offloads: bool    # activation offload among them (it costs PCIe time)


def _variant_levels(struct: Workload, base: Workload, spec: ModelSpec, c: Constraints) -> list[list[_Variant]]:
    """The structures with techniques added, grouped by cost then count: the free ones (one, two,
    ...), then those with activation offload (alone, then with the free ones)."""
    from itertools import combinations

    techs = _techniques(struct, spec, c)
    free = [t for t in techs if t[0] != "activation-offload"]
    offload = [t for t in techs if t[0] == "activation-offload"]
    levels: list[list[_Variant]] = []
    for extra in ([], offload) if offload else ([],):
        for n in range(0 if extra else 1, len(free) + 1):
            level = []
            for combo in combinations(free, n):
                if {"loss-chunks", "loss-parallel"} <= {t[0] for t in combo}:
                    continue  # Workload.problems refuses them together
                chosen = (*combo, *extra)
                on: dict[str, Any] = {f: value for _, f, value in chosen}
                v = evolve(struct, **on)
                level.append(_Variant(v, tuple(getattr(v, f) for f in STATE_FIELDS), len(chosen), bool(extra)))
            if level:
                levels.append(level)
    return levels


def search(
    spec: ModelSpec,
    base: Workload,
    gpu: GPU,
    *,
    gpus: int = 1,
    nodes: int = 1,
    host_ram: int | None = None,
    headroom: float = 0.10,
    keep: str | Iterable[str] = (),
    forbid: str | Iterable[str] = (),
    effective_batch: int | None = None,
    method_locked: bool = False,
    max_plans: int = DEFAULT_MAX_PLANS,
    links: Links = Links(),
    progress: Callable[[int, int], None] | None = None,
    budget_s: float = SEARCH_BUDGET_S,
    optimize: str | None = None,
) -> FitResult:
    """Search the remedies for the fastest plans that fit ``gpus`` x ``nodes`` of ``gpu``.

    Args:
        spec: the model.
        base: the starting workload (its shapes, precision, method and optimizer).
        gpu: the GPU kind.
        gpus: GPUs per node; ``gpus * nodes`` GPUs in total (the plans' ``gpus`` setting).
        nodes: nodes (tensor parallelism stays inside one).
        host_ram: host RAM per node in bytes for offloaded state, or None not to check.
        headroom: fraction of each GPU kept free.
        keep, forbid: remedy names (see REMEDIES) that plans must use / must not use.
        effective_batch: sequences per optimizer step across all GPUs (default: the base's
            batch x grad_accum x data-parallel degree).
        method_locked: the method was given explicitly: plans keep ``base.method``.
        max_plans: plans returned.
        links: interconnect bandwidths for the cost model.
        progress: called as ``progress(done, total)`` while the search runs, ``done`` counting
            parallel layouts and sharding/method/precision/optimizer structures (each covers
            its micro-batch, checkpointing and attention choices); the last call has
            ``done == total`` unless the budget runs out first.
        budget_s: seconds the search may run; when they run out it returns the best plans found
            so far with ``partial=True`` (see :mod:`vramlens.advise.budget`).
        optimize: None: when the starting workload already fits, that is the answer (one plan,
            ``already_fits=True``); "speed", "memory" or "cost" search for plans that are faster,
            smaller or cheaper (GPU-seconds per token: at the fixed GPU count, as speed).

    Returns:
        A FitResult: plans best first, or the closest plan and what hardware would fit.

    Raises:
        InputError: contradictory or unknown constraints, or a bad gpus/nodes/headroom value.
    """
    if gpus < 1 or nodes < 1:
        raise InputError(f"gpus={gpus}, nodes={nodes}: both must be whole numbers >= 1")
    if isinstance(headroom, bool) or not isinstance(headroom, (int, float)) or not 0 <= headroom < 1:
        raise InputError(f"headroom={show(headroom)} must be in [0, 1): e.g. 0.1 keeps 10% free")
    budget = Budget.begin(budget_s)
    total = gpus * nodes
    c = check_constraints(base, keep, forbid, method_locked=method_locked, total_gpus=total)
    if optimize is not None and optimize not in OBJECTIVES:
        raise InputError(f"optimize={show(optimize)} is not one of: {', '.join(OBJECTIVES)} (or None: stop when it fits)")
    s = _Search(spec, gpu, headroom, host_ram, nodes, links, optimize or "speed")
    asked_batch = effective_batch
    if base.training:
        if effective_batch is None:
            effective_batch = base.batch * base.grad_accum * max(1, total // (base.tp * base.pp))
        if effective_batch < 1:
            raise InputError(f"effective_batch={show(effective_batch)} must be a whole number >= 1")
        if effective_batch > MAX_EFFECTIVE_BATCH:
            shown = f"{effective_batch:,}" if effective_batch.bit_length() <= 100 else show(effective_batch)
            raise InputError(f"effective_batch={shown} is over the limit of {MAX_EFFECTIVE_BATCH:,} "
                             "(vramlens.limits.MAX_EFFECTIVE_BATCH): ask for a smaller --effective-batch")
        if not _splittable(effective_batch, total):
            raise InputError(f"effective_batch={effective_batch:,} cannot be split into micro-batch x grad-accum x "
                             f"data-parallel GPUs (at most {total}) with micro-batch <= {MAX_BATCH:,} and grad-accum "
                             f"<= {MAX_GRAD_ACCUM:,}: choose an effective batch with smaller factors "
                             f"(e.g. {1 << (effective_batch.bit_length() - 1):,})")
    elif effective_batch is not None:
        raise InputError(f"effective_batch={effective_batch} applies to training (it fixes batch x grad-accum x "
                         "data-parallel GPUs): drop it or use --mode train")
    start = replace(base, gpus=total)
    if optimize is None and not c.keep and (asked_batch is None or asked_batch == start.effective_batch):
        r = s.fm.totals(start)
        if r is not None and r[0] <= s.limit and s.host_ok(r[1]):
            if progress is not None:
                progress(0, 1)
                progress(1, 1)
            p = _plan(s, start, base)
            return FitResult(plans=(p,), closest=None, message=verdict(p.device_total, gpu, headroom, total),
                             evaluated=1, valid=1, fitting=1, gpu_name=gpu.name, gpus=gpus, nodes=nodes,
                             headroom=headroom, candidates=1, budget_s=budget.seconds, already_fits=True)
    if base.training:
        assert effective_batch is not None  # set above for training
        out = _search_training(s, base, total, gpus, c, effective_batch, max_plans, progress, budget)
    else:
        out = _search_inference(s, base, total, gpus, c, max_plans, progress, budget)
    n_valid, n_fit = out.valid, out.fitting
    plans = tuple(_plan(s, w, base) for w in _minimal(s, out.ranked, base, max_plans, c.keep))
    closest_plan = None if plans or out.closest is None else _plan(s, out.closest, base)
    if plans:
        msg = (f"{n_fit:,} of {n_valid:,} valid plans fit {total} x {gpu.name} with {headroom:.0%} headroom; "
               f"best: {describe(plans[0].workload, base)}; {verdict(plans[0].device_total, gpu, headroom, total)}")
    else:
        msg = _no_fit_message(s, base, closest_plan, total, headroom, n_valid)
    return FitResult(plans=plans, closest=closest_plan, message=msg, evaluated=out.evaluated, valid=n_valid,
                     fitting=n_fit, gpu_name=gpu.name, gpus=gpus, nodes=nodes, headroom=headroom,
                     candidates=out.candidates, partial=out.partial, budget_s=budget.seconds)


def _search_training(s: _Search, base: Workload, total: int, per_node: int, c: Constraints, eb: int,
                     max_plans: int, progress: Callable[[int, int], None] | None = None,
                     budget: Budget | None = None) -> _Outcome:
    """The hot loop: per structure, the state and the cost terms are looked up once; per
    (checkpointing, attention, micro-batch) only the activations (memoized) and the phase sums."""
    fm = s.fm
    limit = s.limit
    ckpts = _checkpointing(base, c)
    attns = _attentions(base, s.gpu, c)
    device_total = fm.device_total
    heap: list[_Ranked] = []  # the best that fit; the heap's first entry is the worst of them
    best_miss: _Miss | None = None  # the least-memory valid candidate that does not fit
    n_eval = n_valid = n_fit = 0
    host_ram = None if s.host_ram is None else s.host_ram * s.nodes
    want = max_plans * 16  # kept before making them minimal (many become the same plan) and dropping repeats
    memory = s.objective == "memory"
    candidates = list(_training_candidates(base, s.gpu, total, per_node, c, eb))
    per_split = len(ckpts) * len(attns)
    # a candidate is a structure with one micro-batch split, checkpointing and attention; the
    # techniques tried on it are its variants, not candidates of their own
    n_total = sum(len(splits) for _, splits in candidates) * per_split
    seq = 0  # the order entries were found in (ties in the heap)
    state_for, activations_for, host_bytes = fm.state_for, fm.activations_for, fm.host_bytes
    partial = False
    if progress is not None:
        progress(0, len(candidates))
    for done, (struct, splits) in enumerate(candidates, 1):
        if done > 1 and budget is not None and budget.spent():
            partial = True
            break
        if progress is not None:
            progress(done, len(candidates))
        skey = tuple(getattr(struct, f) for f in STATE_FIELDS)
        tier = 0 if struct.method == base.method else 1  # a different method trains something else
        changes = _n_changes(struct, base)
        tc = None  # the techniques change no term of TrainingCost but activation offload's bytes, passed per call
        # the structure's variants (the techniques added), built the first time a candidate needs them:
        # [with grad-accum 1, with grad-accum > 1 (the optimizer in backward is refused: its variants are not tried)]
        variants: list[list[list[_Variant]]] = []
        for mb, ga in splits:
            st = state_for(skey, struct, ga)
            if st.problems:
                n_eval += per_split
                continue
            host_ok = host_ram is None or st.host <= host_ram
            sp = st.sp
            for ckpt in ckpts:
                if ckpt == "selective-op" and struct.activation_offload:
                    n_eval += len(attns)  # Workload.problems refuses the pair
                    continue
                for attn in attns:
                    n_eval += 1
                    n_valid += 1
                    a = activations_for(struct, sp, batch=mb, grad_accum=ga, checkpointing=ckpt, attention=attn)
                    total_b = device_total(st, a, ga)
                    fits = total_b <= limit and (host_ok if host_ram is None or not (a.host or a.head_cast is not None)
                                                 else host_bytes(st, a) <= host_ram)
                    tried = [(struct, st, a, total_b, fits, 0)]
                    if fits and not memory:
                        ga_levels = []  # the variants are tried only when the candidate misses (or for memory)
                    else:
                        if not variants:
                            levels = _variant_levels(struct, base, s.spec, c)
                            variants += [levels, [lv for lv in ([v for v in level if not v.struct.optimizer_in_backward]
                                                                for level in levels) if lv]]
                        ga_levels = variants[0] if ga == 1 else variants[1]
                    order = ga_levels
                    if ga_levels and not fits and not memory:
                        order = [ga_levels[-1], *ga_levels[:-1]]
                    if len(order) > 1 and not fits and not memory and len(heap) >= want:
                        # the techniques add no step time but activation offload's, and one change at
                        # least: when that bound does not beat the worst plan kept, none of them can; the
                        # largest set is still tried, so that `fitting` counts what fits however the
                        # heap stands (a bigger GPU never fits fewer)
                        if tc is None:
                            tc = TrainingCost(s.spec, struct, s.gpu, trainable=st.trainable, nodes=s.nodes,
                                              links=s.links)
                        bound = _Rank(tier=tier, speed=round(tc.seconds(mb, ga, ckpt, attn), 9),
                                      changes=changes + 1 + (mb != base.batch) + (ckpt != base.checkpointing)
                                      + (attn != base.attention), device_total=0)
                        if not bound.heap_order(seq + 1, s.objective) > heap[0].order:
                            order = order[:1]
                    if order and (memory or not fits):
                        # the most techniques first: when they miss, fewer are taken to miss too, so the
                        # others are tried (fewest first) only when the largest set fits
                        for i, level in enumerate(order):
                            any_fits = False
                            for v in level:
                                if ckpt == "selective-op" and v.struct.activation_offload:
                                    continue  # Workload.problems refuses the pair
                                vst = state_for(v.skey, v.struct, ga)
                                if vst.problems:
                                    continue
                                va = activations_for(v.struct, vst.sp, batch=mb, grad_accum=ga, checkpointing=ckpt,
                                                     attention=attn)
                                vt = device_total(vst, va, ga)
                                vfits = vt <= limit and (host_ram is None or host_bytes(vst, va) <= host_ram)
                                any_fits = any_fits or vfits
                                tried.append((v.struct, vst, va, vt, vfits, v.added))
                            if not memory and (any_fits if i else not any_fits):
                                break  # found the fewest that fit, or even the most miss
                    n_fit += any(t[4] for t in tried)
                    for w_struct, w_st, w_a, w_total, w_fits, added in tried:
                        if not w_fits:
                            if best_miss is None or w_total < best_miss.device_total:
                                best_miss = _Miss(w_total, _Candidate(w_struct, mb, ga, ckpt, attn))
                            continue
                        seq += 1
                        if tc is None:
                            tc = TrainingCost(s.spec, struct, s.gpu, trainable=st.trainable, nodes=s.nodes,
                                              links=s.links)
                        offloaded = host_bytes(w_st, w_a) - w_st.valid.host if w_struct.activation_offload else 0
                        rank = _Rank(tier=tier, speed=round(tc.seconds(mb, ga, ckpt, attn, offloaded), 9),
                                     changes=changes + added + (mb != base.batch) + (ckpt != base.checkpointing)
                                     + (attn != base.attention),
                                     device_total=w_total)
                        entry = _Ranked(rank.heap_order(seq, s.objective), rank,
                                        _Candidate(w_struct, mb, ga, ckpt, attn))
                        if len(heap) < want:
                            heapq.heappush(heap, entry)
                        elif entry > heap[0]:
                            heapq.heapreplace(heap, entry)
    fm.evaluations += n_eval
    return _Outcome(ranked=_distinct(sorted(heap, reverse=True), want),
                    closest=None if best_miss is None else best_miss.candidate.workload(),
                    evaluated=n_eval, valid=n_valid, fitting=n_fit, candidates=n_total, partial=partial)


@dataclass(frozen=True, slots=True)
class _Candidate:
    """A training structure with the loop's values (the Workload is built only when kept)."""

    struct: Workload
    batch: int
    grad_accum: int
    checkpointing: str
    attention: Attention

    def workload(self) -> Workload:
        return evolve(self.struct, batch=self.batch, grad_accum=self.grad_accum, checkpointing=self.checkpointing,
                       attention=self.attention)


@dataclass(frozen=True, slots=True)
class _Rank:
    """How good a fitting plan is, compared field by field (smaller is better).

    Attributes:
        tier: 0 for the starting method (and weights), 1 for a plan that trains or serves something else.
        speed: step seconds (training) or minus tokens per second (inference), rounded.
        changes: settings that differ from the starting workload (ties go to fewer changes).
        device_total: per-GPU bytes (ties go to less memory).
    """

    tier: int
    speed: float
    changes: int
    device_total: int

    def heap_order(self, seq: int, objective: str = "speed") -> tuple[tuple[float, ...], int]:
        """Larger for better plans: the heap's first entry is the worst kept. ``objective``
        "memory" puts less memory before speed; "speed" and "cost" (GPU-seconds per token at the
        fixed GPU count, which orders as step time) put speed first."""
        if objective == "memory":
            return (-self.tier, -self.device_total, -self.changes, -self.speed), seq
        return (-self.tier, -self.speed, -self.changes, -self.device_total), seq


@dataclass(frozen=True, slots=True, order=True)
class _Ranked:
    """A fitting candidate in the search's heap, ordered by ``order`` (:meth:`_Rank.heap_order`)."""

    order: tuple[tuple[float, ...], int]
    rank: _Rank = field(compare=False)
    candidate: _Candidate = field(compare=False)


@dataclass(frozen=True, slots=True)
class _Miss:
    """The least-memory candidate that does not fit, so far."""

    device_total: int
    candidate: _Candidate


@dataclass(frozen=True, slots=True)
class _Outcome:
    """What one search loop found: the ranked workloads that fit and the closest that does not."""

    ranked: list[Workload]
    closest: Workload | None
    evaluated: int
    valid: int
    fitting: int
    candidates: int
    partial: bool


def _distinct(best_first: list[_Ranked], max_plans: int) -> list[Workload]:
    """The first ``max_plans`` workloads, dropping any equal in time and memory to a better-ranked one."""
    ranked: list[Workload] = []
    seen: set[tuple[float, int]] = set()
    for e in best_first:
        same = (e.rank.speed, e.rank.device_total)
        if same in seen:  # same time and memory as a better-ranked plan with fewer changes
            continue
        seen.add(same)
        ranked.append(e.candidate.workload())
        if len(ranked) == max_plans:
            break
    return ranked


_CHANGE_FIELDS = ("method", "dtype", "amp", "quant", "optimizer", "zero", "fsdp", "tp", "pp", "offload",
                  "optimizer_in_backward", "loss_chunks", "activation_offload", "loss_parallel")


def _n_changes(w: Workload, base: Workload) -> int:
    return sum(getattr(w, f) != getattr(base, f) for f in _CHANGE_FIELDS)


def _search_inference(s: _Search, base: Workload, total: int, per_node: int, c: Constraints, max_plans: int,
                      progress: Callable[[int, int], None] | None = None,
                      budget: Budget | None = None) -> _Outcome:
    h = _half(s.gpu)
    dtypes: list[DType] = [base.dtype] if "amp" in c.forbid else _uniq([base.dtype, h])
    quants: list[Quant | None] = [base.quant] if "quant" in c.forbid else _uniq([base.quant, None, "int8", "nf4", "awq-4bit"]
                                                              + (["fp8"] if s.gpu.arch in ("hopper", "ada", "blackwell") else []))
    if "quant" in c.keep:
        quants = [q for q in quants if q]
    kvs: list[KVDType | None] = [base.kv_dtype] if "kv-quant" in c.forbid else _uniq([base.kv_dtype, "fp8"])
    if "kv-quant" in c.keep:
        kvs = [k for k in kvs if k in ("fp8", "int8")]
    attns = _attentions(base, s.gpu, c)
    found: list[_Ranked] = []
    best_miss: _Miss | None = None
    n_eval = n_valid = 0
    layouts = _layouts(base, total, per_node, c)
    n_total = len(layouts) * len(dtypes) * len(quants) * len(kvs) * len(attns)
    partial = False
    if progress is not None:
        progress(0, len(layouts))
    for done, (tp, pp) in enumerate(layouts, 1):
        if done > 1 and budget is not None and budget.spent():
            partial = True
            break
        if progress is not None:
            progress(done, len(layouts))
        for dtype in dtypes:
            for quant in quants:
                for kv in kvs:
                    for attn in attns:
                        n_eval += 1
                        w = evolve(base, gpus=total, tp=tp, pp=pp, dtype=dtype, quant=quant, kv_dtype=kv,
                                    attention=attn)
                        r = s.fm.totals(w)
                        if r is None:
                            continue
                        n_valid += 1
                        dev, host = r
                        cand = _Candidate(w, w.batch, w.grad_accum, w.checkpointing, w.attention)
                        if dev > s.limit:
                            if best_miss is None or dev < best_miss.device_total:
                                best_miss = _Miss(dev, cand)
                            continue
                        cost = s.cost(w, 0)
                        # quantizing weights changes the model's outputs: a remedy, not a speed-up
                        rank = _Rank(tier=int(quant != base.quant), speed=-round(cost.tokens_per_s, 6),
                                     changes=_n_changes(w, base) + (attn != base.attention) + (kv != base.kv_dtype),
                                     device_total=dev)
                        found.append(_Ranked(rank.heap_order(-len(found), s.objective), rank, cand))
    found.sort(reverse=True)
    return _Outcome(ranked=_distinct(found, max_plans * 16),
                    closest=None if best_miss is None else best_miss.candidate.workload(),
                    evaluated=n_eval, valid=n_valid, fitting=len(found), candidates=n_total, partial=partial)


#: Changes a plan is made of, each undone as one unit when checking that it is needed (pairs that
#: only make sense together are undone together as well).
_UNDO = (("method", "quant"), ("method",), ("dtype", "amp"), ("dtype",), ("amp",), ("quant",), ("optimizer",),
         ("zero", "offload"), ("fsdp", "offload"), ("zero",), ("fsdp",), ("offload",), ("tp", "pp"), ("tp",),
         ("pp",), ("tp", "loss_parallel"), ("tp", "pp", "loss_parallel"), ("batch", "grad_accum"),
         ("batch", "grad_accum", "optimizer_in_backward"), ("checkpointing",), ("attention",), ("kv_dtype",),
         ("optimizer_in_backward",), ("loss_chunks",), ("activation_offload",), ("loss_parallel",))


def _score(s: _Search, w: Workload, base: Workload) -> _Rank | None:
    """The rank of ``w`` when it is valid and fits, else None."""
    r = s.fm.totals(w)
    if r is None or r[0] > s.limit or not s.host_ok(r[1]):
        return None
    if w.training:
        st = s.fm.state(w)
        speed = round(s.cost(w, st.trainable, r[1] - st.host if w.activation_offload else 0).seconds, 9)
        tier = int(w.method != base.method or w.quant != base.quant)  # a 4-bit base changes the model, as qlora
    else:
        speed = -round(s.cost(w, 0).tokens_per_s, 6)
        tier = int(w.quant != base.quant)
    changes = _n_changes(w, base) + sum(getattr(w, f) != getattr(base, f)
                                        for f in ("batch", "checkpointing", "attention", "kv_dtype"))
    return _Rank(tier=tier, speed=speed, changes=changes, device_total=r[0])


#: The Workload fields each remedy sets (a kept remedy's fields are never undone).
_REMEDY_FIELDS = {"amp": ("dtype", "amp"), "checkpointing": ("checkpointing",), "attention": ("attention",),
                  "lora": ("method",), "qlora": ("method",), "8bit": ("optimizer",), "4bit": ("optimizer",), "grad-accum": ("batch", "grad_accum"),
                  "zero": ("zero",), "fsdp": ("fsdp",), "tp": ("tp",), "pp": ("pp",), "offload": ("offload",),
                  "quant": ("quant",), "kv-quant": ("kv_dtype",),
                  **{name: (field_,) for name, field_, _ in TECHNIQUES}}


def _minimize(s: _Search, w: Workload, base: Workload, keep: frozenset[str] = frozenset()
              ) -> tuple[Workload, _Rank | None]:
    """``w`` without the changes it does not need: undoing one that still fits and is no worse by
    the objective (step time, or memory under optimize="memory") is undone, until none is.
    Changes that ``keep`` asks for stay."""
    kept = {f for name in keep for f in _REMEDY_FIELDS.get(name, ())}
    rank = _score(s, w, base)
    if rank is None:
        return w, None
    memory = s.objective == "memory"
    changed = True
    while changed:
        changed = False
        for group in _UNDO:
            if kept.intersection(group) or all(getattr(w, f) == getattr(base, f) for f in group):
                continue
            u = evolve(w, **{f: getattr(base, f) for f in group})
            if u.training and u.effective_batch != w.effective_batch:
                continue
            r = _score(s, u, base)
            if r is None:
                continue
            if (r.device_total <= rank.device_total) if memory else (r.speed <= rank.speed + abs(rank.speed) * SPEED_TIE):
                w, rank, changed = u, r, True
                break
    return w, rank


def _minimal(s: _Search, ranked: list[Workload], base: Workload, max_plans: int,
             keep: frozenset[str] = frozenset()) -> list[Workload]:
    """The best ``max_plans`` of ``ranked`` made minimal (every change needed), re-ranked, without
    repeats (a plan that became another, or equal to a better one in time and memory)."""
    scored: list[_Ranked] = []
    for i, w in enumerate(ranked):
        m, rank = _minimize(s, w, base, keep)
        if rank is not None:
            scored.append(_Ranked(rank.heap_order(-i, s.objective), rank,
                                  _Candidate(m, m.batch, m.grad_accum, m.checkpointing, m.attention)))
    out: list[Workload] = []
    for w in _distinct(sorted(scored, reverse=True), len(scored)):
        if w not in out:
            out.append(w)
    return out[:max_plans]


def _plan(s: _Search, w: Workload, base: Workload) -> Plan:
    w = w.validated()
    e = estimate_spec(s.spec, w, s.gpu)
    fits = e.breakdown.device_total <= s.limit
    host_fits = None if s.host_ram is None else s.host_ok(e.breakdown.host_bytes)
    cost = s.cost(w, e.trainable_params)
    return Plan(workload=w, estimate=e, fits=bool(fits and host_fits is not False), cost=cost,
                tradeoffs=tradeoffs(s.spec, w, base, trainable=e.trainable_params), host_fits=host_fits)


_LABELS = ("method", "dtype", "amp", "quant", "optimizer", "batch", "grad_accum", "checkpointing", "attention",
           "zero", "fsdp", "tp", "pp", "offload", "kv_dtype", "optimizer_in_backward", "loss_chunks",
           "activation_offload", "loss_parallel")


def describe(w: Workload, base: Workload) -> str:
    """The settings of ``w`` that differ from ``base``, as flags."""
    parts: list[str] = []
    for f in _LABELS:
        v, b = getattr(w, f), getattr(base, f)
        if v != b:
            flag = "--" + f.replace("_", "-")
            if isinstance(v, bool):
                parts.append(flag if v else f"no {flag}")
            else:
                parts.append(f"{flag} {v if v is not None else 'none'}")
    return " ".join(parts) or "the starting workload as it is"


def _no_fit_message(s: _Search, base: Workload, closest: Plan | None, total: int, headroom: float, n_valid: int) -> str:
    g = s.gpu
    where = f"{total} x {g.name}" if total > 1 else g.name
    if closest is None:
        return f"no valid plan for {s.spec.name} on {where}: every combination breaks a model or workload rule"
    need = closest.device_total
    usable = int(s.limit)
    text = (f"no plan fits {where} with {headroom:.0%} headroom ({n_valid:,} valid plans tried); "
            f"closest: {describe(closest.workload, base)} needs {human_bytes(need)} per GPU, "
            f"{human_bytes(need - usable)} more than the {human_bytes(usable)} usable")
    if closest.host_fits is False:
        text += f"; its offloaded state needs {human_bytes(closest.estimate.breakdown.host_bytes)} of host RAM"
    hw = hardware_that_fits(s.spec, closest.workload, headroom=headroom, exclude=g.name)
    if hw:
        text += f"; it would fit on {hw}"
    return text


def hardware_that_fits(spec: ModelSpec, w: Workload, *, headroom: float, exclude: str = "") -> str:
    """The smallest catalog GPU on which ``w`` fits (with the same number of GPUs), in words: the
    answer of ``--min-gpu`` (:func:`vramlens.advise.inverse.min_gpu`), so both always agree."""
    from vramlens.advise.inverse import min_gpu

    g = min_gpu(spec, w, headroom=headroom, exclude=exclude)
    if g is None:
        return ""
    return f"{w.gpus} x {g.name}" if w.gpus > 1 else g.name


@dataclass(frozen=True, slots=True)
class FewestGpus:
    """The answer of ``--min-gpus``: the fewest GPUs that fit, and that search's result.

    Attributes:
        gpus: the count, or None when none up to the maximum fits (or the budget ran out first).
        result: the search at that count (None when ``gpus`` is None).
        partial: the time budget ran out before a count was found.
    """

    gpus: int | None
    result: FitResult | None
    partial: bool = False


def min_gpus(spec: ModelSpec, base: Workload, gpu: GPU, *, per_node: int = 8, max_gpus: int = 512,
             budget_s: float = SEARCH_BUDGET_S, **fit_kw: Any) -> FewestGpus:
    """The fewest GPUs of kind ``gpu`` (from GPU_COUNTS, whole nodes of ``per_node`` beyond one
    node) on which the search finds a plan, with that search's result, within ``budget_s`` seconds."""
    from vramlens.advise.inverse import GPU_COUNTS

    budget = Budget.begin(budget_s)
    fit_kw = {k: v for k, v in fit_kw.items() if k not in ("gpus", "nodes")}
    fit_kw.setdefault("max_plans", 1)
    for n in GPU_COUNTS:
        if n > max_gpus:
            break
        if n > per_node and n % per_node:
            continue
        if n > 1 and budget.spent():
            return FewestGpus(None, None, partial=True)
        g, nodes = (n, 1) if n <= per_node else (per_node, n // per_node)
        r = search(spec, base, gpu, gpus=g, nodes=nodes, budget_s=budget.remaining(), **fit_kw)
        if r.plans:
            return FewestGpus(n, r, partial=r.partial)
    return FewestGpus(None, None)


def inverse_answers(spec: ModelSpec, base: Workload, gpu: GPU, result: FitResult, asks: Iterable[str], *,
                    headroom: float = 0.10, host_ram: int | None = None, budget_s: float = SEARCH_BUDGET_S,
                    **fit_kw: Any) -> dict[str, Any]:
    """Answers to the inverse questions named in ``asks`` (max_batch, max_seq, max_context,
    min_gpu, min_gpus), as the JSON values of ``vramlens fit``, all within ``budget_s`` seconds.

    max_batch / max_seq / max_context are asked of the starting workload (on ``result``'s GPU
    count) when it fits at batch 1, else of the best plan; min_gpu of the best (or closest) plan.
    """
    from vramlens.advise import inverse as I

    asks = set(asks)
    out: dict[str, Any] = {}
    start = replace(base, gpus=result.gpus * result.nodes)
    subject = start
    start_fits = not start.problems() and I._fits(FastMemory(spec, gpu), start, gpu.capacity_bytes * (1 - headroom),
                                                  host_ram)[0]
    if not start_fits and result.plans:
        subject = result.plans[0].workload
    budget = Budget.begin(budget_s)
    if "max_batch" in asks:
        out["max_batch"] = I.max_batch(spec, subject, gpu, budget_s=budget.remaining(), headroom=headroom,
                                       host_ram=host_ram).to_dict()
    if "max_seq" in asks:
        out["max_seq"] = I.max_seq(spec, subject, gpu, budget_s=budget.remaining(), headroom=headroom,
                                   host_ram=host_ram).to_dict()
    if "max_context" in asks:
        out["max_context"] = I.max_context(spec, subject, gpu, budget_s=budget.remaining(), headroom=headroom,
                                           host_ram=host_ram).to_dict()
    if "min_gpu" in asks:
        w = result.plans[0].workload if result.plans else (result.closest.workload if result.closest else subject)
        g = I.min_gpu(spec, w, headroom=headroom)
        out["min_gpu"] = {"gpu": None if g is None else g.name, "settings": settings_of(w),
                          "memory_bytes": None if g is None else g.memory_bytes}
    if "min_gpus" in asks:
        r = min_gpus(spec, base, gpu, per_node=max(result.gpus, 8), headroom=headroom, host_ram=host_ram,
                     budget_s=budget.remaining(), **fit_kw)
        out["min_gpus"] = None if r.result is None and not r.partial else {
            "gpus": r.gpus, "gpu": gpu.name, "partial": r.partial,
            "settings": r.result.plans[0].settings if r.result else None}
    return out

