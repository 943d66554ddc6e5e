"""Per-GPU totals of many training workloads of one model, fast and exactly as estimate_spec.

``estimate_spec`` builds a full Breakdown with explanations (~0.3 ms); the search needs only
``device_total`` and ``host_bytes`` for tens of thousands of workloads that differ in a few
fields. This module calls the estimator's own component functions, memoized per part of the
workload they read, and combines them with the phase arithmetic of
:func:`vramlens.estimate.core.estimate_spec`. A test compares it with ``estimate_spec`` on
thousands of random workloads, so a change in the estimator that is not mirrored here fails.

Parts and the workload fields they read:

* state (weights, master copy, gradients, optimizer states, buffers, runtime): everything but
  batch, seq, checkpointing, attention and grad_accum (except ``min(pp, grad_accum)`` under
  pipeline parallelism, the micro-batches in flight);
* activations: the split, precision, method, batch, seq, checkpointing, attention, tp.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from vramlens.allocator import analytic as R
from vramlens.allocator.config import AllocatorConfig
from vramlens.errors import VramlensError
from vramlens.estimate import check_workload, estimate_spec
from vramlens.estimate import optimizer as O
from vramlens.estimate import weights as Wt
from vramlens.estimate.core import _activation_totals
from vramlens.estimate.inventory import summarize
from vramlens.estimate.parallel import Split, comm_buffer_bytes, split
from vramlens.estimate.reserve import persistent_sizes
from vramlens.estimate.runtime import runtime
from vramlens.hardware.gpu import GPU
from vramlens.models.spec import ModelSpec
from vramlens.workload import Workload

_TRANSIENT: dict[int, int] = {}

#: The fields of a training Workload that the state part reads (grad_accum enters through the split).
STATE_FIELDS = ("mode", "method", "dtype", "amp", "quant", "optimizer", "optimizer_impl", "lora_rank", "lora_targets",
                "lora_dropout", "gpus", "zero", "fsdp", "tp", "pp", "offload")


@dataclass(frozen=True, slots=True)
class State:
    """What does not depend on the micro-batch: per-GPU persistent bytes and the split."""

    problems: tuple[str, ...]
    sp: Split | None = None
    weights: int = 0
    master: int = 0
    opt: int = 0
    opt_tmp: int = 0
    grads: int = 0
    comm: int = 0
    host: int = 0
    head_grad: int = 0
    trainable: int = 0
    workspace: int = 0
    outside: int = 0
    reserve_persistent: int = 0                    # what the reserve model counts as persistent
    reserve_base: int = 0                          # the allocator's reserve for those tensors
    reserve_floor: int = 0                         # their bytes rounded to allocator blocks


class FastMemory:
    """Memoized ``device_total`` / ``host_bytes`` of training workloads for one spec and GPU."""

    def __init__(self, spec: ModelSpec, gpu: GPU | None):
        self.spec = spec
        self.gpu = gpu
        self._states: dict[tuple, State] = {}
        self._acts: dict[tuple, tuple[int, int, int, int]] = {}
        self._parts: dict[tuple, object] = {}
        self._infer: dict[Workload, tuple[int, int]] = {}
        self.evaluations = 0

    # ---- the parts ------------------------------------------------------------------------
    def state_key(self, w: Workload) -> tuple:
        return (*(getattr(w, f) for f in STATE_FIELDS), min(w.pp, w.grad_accum) if w.pp > 1 else 1)

    def state(self, w: Workload) -> State:
        key = self.state_key(w)
        st = self._states.get(key)
        if st is None:
            st = self._states[key] = self._make_state(w)
        return st

    def _memo(self, key: tuple, make):
        hit = self._parts.get(key)
        if hit is None:
            hit = self._parts[key] = make()
        return hit

    def _make_state(self, w: Workload) -> State:
        spec = self.spec
        probs = list(w.problems())
        if not probs:
            def check() -> tuple[str, ...]:
                try:
                    check_workload(spec, w)
                except VramlensError as e:
                    return tuple(getattr(e, "problems", [str(e)]))
                return ()

            probs.extend(self._memo(("check", w.mode, w.method, w.tp, w.pp, w.lora_targets, w.new_tokens), check))
        if probs:
            return State(problems=tuple(probs))
        # mirrors estimate_spec (vramlens/estimate/core.py), training branch; each part is
        # memoized on the workload fields its estimator function reads
        sp = self._memo(("split", w.mode, w.tp, w.pp, w.gpus, w.zero, w.fsdp, min(w.pp, w.grad_accum) if w.pp > 1 else 1),
                        lambda: split(spec, w))
        base_w, adapters = self._memo(
            ("weights", w.method, w.dtype, w.amp, w.quant, w.lora_targets, w.lora_rank),
            lambda: (Wt.base_weight_bytes(spec, w)[0], Wt.adapter_bytes(spec, w)))
        weights = int(base_w * sp.weights) + adapters

        def train_parts():
            trainable = Wt.trainable_params(spec, w)
            return (trainable, O.gradient_bytes(spec, w, trainable), O.master_bytes(spec, w, trainable),
                    O.optimizer_state_bytes(spec, w, trainable)[0], O.optimizer_step_temporary(spec, w, trainable)[0],
                    O.param_dtype_bytes(w))

        trainable, grads_full, master_full, opt_full, tmp_full, pbytes = self._memo(
            ("train", w.mode, w.method, w.dtype, w.amp, w.optimizer, getattr(w, "optimizer_impl", None), w.lora_targets,
             w.lora_rank), train_parts)
        grads = int(grads_full * sp.gradients)
        master = int(master_full * sp.optimizer)
        opt = int(opt_full * sp.optimizer)
        opt_tmp = int(tmp_full * sp.optimizer)
        comm = self._memo(("comm", w.mode, w.method, w.dtype, w.amp, w.optimizer, w.lora_targets, w.lora_rank,
                           w.gpus, w.tp, w.pp, w.zero, w.fsdp),
                          lambda: comm_buffer_bytes(spec, w, grads_full, pbytes, trainable, Wt.weight_dtype_bytes(w))[0])
        host = 0
        if w.training and w.offload in ("optimizer", "all"):
            host += (opt + master + opt_tmp) * w.gpus
            opt = master = opt_tmp = 0
            if w.shard_stage >= 2:
                host += grads * w.gpus
        if w.training and w.offload == "all":
            host += weights * w.gpus
            weights = int(weights * 2 * (1.0 / max(1, spec.n_layers)))
        head_grad = 0
        if w.method == "full" and sp.has_head:
            head_grad = int(spec.vocab_size * spec.hidden_size * pbytes * sp.gradients)
        rt = self._memo(("runtime", w.mode, w.gpus, w.tp), lambda: runtime(self.gpu, w))
        # the reserve's persistent tensors, as estimate_spec lists them
        full_params = w.method == "full" and not w.quantized
        wb = Wt.weight_dtype_bytes(w)
        state_b = 4 if master or w.method != "full" else pbytes
        parts = [
            (wb, weights, full_params and sp.weights == 1),
            (pbytes, grads, full_params and sp.gradients == 1),
            (4, master, full_params and sp.optimizer == 1),
            (state_b, opt, False),
            (1, comm, False),
            (1, 0, False),
        ]
        if full_params and sp.optimizer == 1 and opt:
            n_states = max(1, round(opt / max(1, summarize(spec).param_bytes_at.get(state_b, 1))))
            parts[3] = (state_b, opt, True)
            parts.extend([(state_b, opt, True)] * (n_states - 1))
        sizes = persistent_sizes(spec, parts)
        conf = AllocatorConfig()
        reserve_base = R.persistent_reserved(sizes, conf)
        reserve_floor = sum(R.round_size(z, conf) * c for z, c in R._items(sizes))
        return State(
            problems=(), sp=sp, weights=weights, master=master, opt=opt, opt_tmp=opt_tmp, grads=grads, comm=comm,
            host=host, head_grad=head_grad, trainable=trainable, workspace=rt.workspace_bytes,
            outside=rt.outside_allocator_bytes, reserve_persistent=weights + master + opt + comm + grads,
            reserve_base=reserve_base, reserve_floor=reserve_floor,
        )

    def state_for(self, skey: tuple, struct: Workload, grad_accum: int) -> State:
        """The State of ``struct`` with ``grad_accum``, given ``skey`` (its STATE_FIELDS values)."""
        key = (*skey, min(struct.pp, grad_accum) if struct.pp > 1 else 1)
        st = self._states.get(key)
        if st is None:
            st = self._states[key] = self._make_state(replace(struct, grad_accum=grad_accum))
        return st

    def activations(self, w: Workload, sp: Split) -> tuple[int, int, int, int]:
        # activations read the method only through the compute dtype (QLoRA without --amp)
        key = (w.compute_dtype, w.dtype, w.amp, w.batch, w.seq, w.checkpointing, w.attention, w.tp,
               sp.layers, sp.micro_batches_in_flight, sp.has_head)
        return self.activations_by_key(key, w, sp)

    def activations_by_key(self, key: tuple, w: Workload, sp: Split) -> tuple[int, int, int, int]:
        a = self._acts.get(key)
        if a is None:
            acts, one, loss_tmp, head_saved, _ = _activation_totals(self.spec, w, sp)
            a = self._acts[key] = (acts, one, loss_tmp, head_saved)
        return a

    # ---- the totals -----------------------------------------------------------------------
    def totals(self, w: Workload) -> tuple[int, int] | None:
        """(device_total, host_bytes) of ``w``, or None when ``w`` is not a valid workload."""
        self.evaluations += 1
        if not w.training:
            return self._inference(w)
        st = self.state(w)
        if st.problems:
            return None
        acts, one, loss_tmp, head_saved = self.activations(w, st.sp)
        return self._combine(st, acts, one, loss_tmp, head_saved, w.grad_accum, w.checkpointing), st.host

    @staticmethod
    def _combine(st: State, acts: int, one: int, loss_tmp: int, head_saved: int, grad_accum: int,
                 checkpointing: str) -> int:
        persistent = st.weights + st.master + st.opt + st.comm
        gfwd = st.grads if grad_accum > 1 else 0
        recompute = one if checkpointing == "full" else 0
        fwd = persistent + gfwd + acts + loss_tmp
        bwd = max(persistent + gfwd + acts + 2 * head_saved + st.head_grad, persistent + st.grads + recompute)
        optim = persistent + st.grads + st.opt_tmp
        peak = max(fwd, bwd, optim) + st.workspace
        # vramlens.allocator.analytic.reserved_breakdown is max(persistent part + transient part,
        # rounded persistent bytes + transient bytes): the persistent parts are computed once per
        # state, the transient part by the allocator's own function, memoized on its argument
        t = max(0, peak - st.reserve_persistent)
        trans = _TRANSIENT.get(t)
        if trans is None:
            trans = _TRANSIENT[t] = R.reserved_breakdown((), t).transient_bytes
            if len(_TRANSIENT) > 1_000_000:
                _TRANSIENT.clear()
        return max(st.reserve_base + trans, st.reserve_floor + t, peak) + st.outside

    def _inference(self, w: Workload) -> tuple[int, int] | None:
        hit = self._infer.get(w)
        if hit is not None:
            return hit
        probs = w.problems()
        if not probs:
            try:
                check_workload(self.spec, w)
            except VramlensError:
                probs = ["invalid"]
        if probs:
            return None
        e = estimate_spec(self.spec, w, self.gpu)
        hit = self._infer[w] = (e.breakdown.device_total, e.breakdown.host_bytes)
        return hit

    def problems(self, w: Workload) -> tuple[str, ...]:
        """Why ``w`` is not a valid workload for this model (empty when it is)."""
        if not w.training:
            p = list(w.problems())
            if not p:
                try:
                    check_workload(self.spec, w)
                except VramlensError as e:
                    p = list(getattr(e, "problems", [str(e)]))
            return tuple(p)
        return self.state(w).problems


def with_(w: Workload, **changes) -> Workload:
    """``dataclasses.replace`` without validation (the search validates per memoized part)."""
    return replace(w, **changes)


__all__ = ["FastMemory", "State", "with_"]
