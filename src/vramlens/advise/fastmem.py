"""Per-GPU totals of many training workloads of one model, fast and exactly as estimate_spec.

``estimate_spec`` builds a full Breakdown with explanations (~0.3 ms); the search needs only
``device_total`` and ``host_bytes`` for tens of thousands of workloads that differ in a few
fields. This module memoizes the estimator's own two parts per the workload fields they read (the
batch-independent :func:`vramlens.estimator.state.train_state`, and the activations) and
combines them with the estimator's own :func:`~vramlens.estimator.state.train_phases` and
:func:`~vramlens.estimator.state.reserved_total`: the same arithmetic by construction. A test
still compares it with ``estimate_spec`` on thousands of random workloads.

Parts and the workload fields they read:

* state (weights, master copy, gradients, optimizer states, buffers, runtime): everything but
  batch, seq, checkpointing, attention, activation_offload and grad_accum (except ``min(pp,
  grad_accum)`` under pipeline parallelism, the micro-batches in flight); the loss fields are in
  its key because the validity it memoizes reads them (check_workload, Workload.problems), and
  so are ``loss_chunks > seq`` and, with the optimizer in backward, ``grad_accum > 1``;
* activations: the split, precision (and whether FSDP2's mixed-precision policy replaces autocast),
  method, the LoRA settings (targets, rank, dropout, dtype, DoRA), 4-bit weights (quant,
  quant_targets), batch, seq, checkpointing, attention and the stack's GQA expansion, tp, the loss (cross-entropy chunks, fused
  linear, loss parallelism), activation offloading and fp8 (torchao's casts inside the blocks).

The phases get everything :func:`~vramlens.estimator.core.activation_totals` gives
``estimate_spec`` (the loss' backward figures, the embedding case's later passes), and
activation offloading's host copies and frozen-cast handling go through the estimator's own
:func:`~vramlens.estimator.core.output_layer_cast` and :func:`~vramlens.estimator.core.offload_frozen_casts`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from vramlens.errors import VramlensError
from vramlens.estimator import check_workload, estimate_spec
from vramlens.estimator.activations import logits_bytes
from vramlens.estimator.core import (
    activation_totals,
    kept_past_backward,
    offload_frozen_casts,
    offloaded_block,
    output_layer_cast,
    vision_figures,
)
from vramlens.estimator.parallel import Split, pipeline_in_flight
from vramlens.estimator.state import (
    TrainState,
    default_stream_state,
    reserved_total,
    tied_last,
    train_phases,
    train_state,
)
from vramlens.hardware.gpu import GPU
from vramlens.models.spec import ModelSpec
from vramlens.workload import Attention, Workload, evolve

#: The fields of a training Workload that the state part reads (grad_accum enters through the split).
STATE_FIELDS = ("mode", "method", "dtype", "amp", "quant", "optimizer", "optimizer_impl", "keep_grads", "lora_rank",
                "lora_targets", "lora_dropout", "lora_dtype", "dora", "fused_qkv", "quant_targets",
                "quant_head", "quant_group_size", "quantize_on_device", "quant_impl", "gpus", "zero", "zero_buckets", "fsdp",
                "fsdp_strategy", "fsdp_version", "fsdp_units", "tp", "pp", "pp_schedule", "offload", "optimizer_in_backward",
                "loss", "loss_chunks", "loss_parallel", "fp8", "fp8_recipe", "images", "transformers_version", "bnb_compute_dtype",
                "padded", "alloc_conf", "lora_fa", "vera_rank", "decompose_factor", "oft_block_size",
                "boft_block_size")

#: The fields train_state reads (STATE_FIELDS less the loss fields, images, bnb_compute_dtype and padded, which only
#: validity reads; fused_qkv shapes LitGPT's q/k/v adapter, inventory.lora_shape; loss_chunks is read: the output
#: layer in an FSDP unit of its own is gathered once per chunk, TrainState.loss_chunks).
TRAIN_STATE_FIELDS = tuple(f for f in STATE_FIELDS
                           if f not in ("loss", "loss_parallel", "fp8", "fp8_recipe", "images", "bnb_compute_dtype",
                                        "padded"))


def state_key_tail(w: Workload, grad_accum: int) -> tuple[object, ...]:
    """What the state's key adds to STATE_FIELDS: the loop values its validity or split reads."""
    return (pipeline_in_flight(w, grad_accum), w.optimizer_in_backward and grad_accum > 1,
            w.loss_chunks > w.seq,
            # FSDP2's reduce-scatter pool: the same from two micro-batches on (parallel.fsdp_stream_pools)
            min(2, max(1, grad_accum)) if w.fsdp else 1)


@dataclass(frozen=True, slots=True)
class Activations:
    """The activation figures a training step's phases read, in bytes (vramlens.estimator.core.activation_totals)."""

    saved: int
    one_layer: int
    loss_transient: int
    head_saved: int
    logits: int
    later_pass: int = 0
    loss_backward: int | None = None
    loss_backward_over: int | None = None
    head_backward: int | None = None
    head_grads: int = 1
    head_backward_later: int = 0
    head_grad_in_forward: bool = False
    final_norm_backward: int = 0
    logits_held: int = 0  # of head_saved, what the loop holds past the loss' backward (Fabric's fp32 logits)
    loss_tensor: int = 0  # the loss' largest tensor: the reserve's allowance (core.ActivationTotals)
    host: int = 0  # activation offloading: the saved activations' host copies
    kept_inputs: int = 0  # not freed by backward: old bitsandbytes' kept inputs, logits-sum's outputs (core.kept_past_backward)
    kept_next: bool = False  # ... and held into the next forward
    held_at_loss: bool = False  # ... through its loss (--holds-outputs)
    recompute: int = 0  # a checkpointed block's recomputation (core.ActivationTotals)
    recompute_after: int = 0
    uncheckpointed: tuple[int, int] = (1, 1)
    block_kept: int = 0
    loss_outside_model: bool = False
    offloaded_block: tuple[int, int, int, int] = (0, 0, 1, 0)
    block_backward: int = 0
    head_cast: int | None = None  # activation offloading: the output layer's cast that stays (None: no offload)
    dequant_forward: int = 0  # a transient inside a block's forward (4-bit dequantization, DoRA's weight norm)
    dequant_backward: int = 0  # ... inside a block's backward
    dequant_temporary: int = 0  # ... of those, the temporary a recomputed block adds
    head_dequant_forward: int = 0  # a 4-bit output layer's forward matmul (quant_head)
    head_dequant_backward: int = 0  # ... its backward matmul
    mlp_backward: int = 0  # the last block's MLP backward transient
    tied_last: int | None = None  # a tied output layer: held beside the two weight-gradient addends (state.tied_last)


@dataclass(frozen=True, slots=True)
class State:
    """What does not depend on the micro-batch: the estimator's TrainState, or why it is invalid."""

    problems: tuple[str, ...]
    ts: TrainState | None = None

    @property
    def valid(self) -> TrainState:
        """The TrainState of a valid workload (callers check ``problems`` first)."""
        if self.ts is None:
            raise ValueError(f"the workload is not valid: {'; '.join(self.problems)}")
        return self.ts

    @property
    def sp(self) -> Split:
        return self.valid.sp

    @property
    def host(self) -> int:
        return self.ts.host if self.ts else 0

    @property
    def trainable(self) -> int:
        return self.ts.trainable if self.ts else 0


class FastMemory:
    """Memoized ``device_total`` / ``host_bytes`` of training workloads for one spec and GPU."""

    def __init__(self, spec: ModelSpec, gpu: GPU | None):
        self.spec = spec
        self.gpu = gpu
        self._states: dict[tuple[object, ...], State] = {}
        self._acts: dict[tuple[object, ...], Activations] = {}
        self._parts: dict[tuple[object, ...], tuple[str, ...]] = {}
        self._infer: dict[Workload, tuple[int, int]] = {}
        #: the weights of each workload _exact estimated (the advisor's inference cost reads them)
        self._infer_weights: dict[Workload, int] = {}
        self._train_states: dict[tuple[object, ...], TrainState] = {}
        self._phase_kw: dict[int, tuple[dict[str, Any], Activations]] = {}
        self._views: dict[tuple[int, int | None], tuple[TrainState, TrainState | None, TrainState]] = {}
        self.evaluations = 0

    # ---- the parts ------------------------------------------------------------------------
    def state_key(self, w: Workload) -> tuple[object, ...]:
        return (*(getattr(w, f) for f in STATE_FIELDS), *state_key_tail(w, w.grad_accum))

    def state(self, w: Workload) -> State:
        key = self.state_key(w)
        st = self._states.get(key)
        if st is None:
            st = self._states[key] = self._make_state(w)
        return st

    def _memo(self, key: tuple[object, ...], make: Callable[[], tuple[str, ...]]) -> tuple[str, ...]:
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

            # every field check_workload reads (vramlens.estimator.check_workload; the group size and quant_targets for
            # weights.shape_refusal, which refuses only inference formats today: inference takes _exact)
            probs.extend(self._memo(("check", w.mode, w.method, w.tp, w.pp, w.pp_schedule, w.cp, w.fsdp,
                                     w.fsdp_units, w.lora_targets, w.fused_qkv, w.padded, w.lora_rank,
                                     w.decompose_factor, w.oft_block_size, w.boft_block_size, w.autocast,
                                     w.new_tokens, w.loss_parallel, w.loss_chunks > 1, w.loss, w.images > 0,
                                     w.quant_head, w.quantized, w.quant_group_size, w.quant_targets, w.image_size,
                                     w.cache), check))
        if probs:
            return State(problems=tuple(probs))
        # train_state does not read the loss fields (they are in the key for the validity above):
        # the loss techniques' variants of one structure share it
        tkey = (*(getattr(w, f) for f in TRAIN_STATE_FIELDS),
                pipeline_in_flight(w, w.grad_accum),
                min(2, max(1, w.grad_accum)) if w.fsdp else 1)  # FSDP2's reduce-scatter pool (parallel.fsdp_stream_pools)
        ts = self._train_states.get(tkey)
        if ts is None:
            ts = self._train_states[tkey] = train_state(spec, w, self.gpu)
        return State(problems=(), ts=ts)

    def state_for(self, skey: tuple[object, ...], struct: Workload, grad_accum: int) -> State:
        """The State of ``struct`` with ``grad_accum``, given ``skey`` (its STATE_FIELDS values)."""
        key = (*skey, *state_key_tail(struct, grad_accum))
        st = self._states.get(key)
        if st is None:
            st = self._states[key] = self._make_state(evolve(struct, grad_accum=grad_accum))
        return st

    @staticmethod
    def activation_key(w: Workload, sp: Split, *, batch: int | None = None, checkpointing: str | None = None,
                       attention: Attention | None = None) -> tuple[object, ...]:
        """The workload fields the activations read (the search passes its loop's batch, checkpointing, attention)."""
        # activations read the method through the compute dtype and, under LoRA, which linears
        # keep their inputs (the targets), the adapters' rank, dropout, dtype and DoRA; 4-bit weights
        # (quant, quant_targets) are dequantized inside the blocks
        return (w.compute_dtype, w.dtype, w.amp, w.fsdp_mixed_precision, w.batch if batch is None else batch, w.seq,
                w.checkpointing if checkpointing is None else checkpointing,
                w.attention if attention is None else attention, w.gqa_expand, w.padded, w.fused_qkv, w.tp,
                sp.layers, sp.micro_batches_in_flight, sp.stages_per_rank, sp.has_head, w.method, w.lora_targets, w.lora_rank,
                w.lora_dropout, w.lora_dtype, w.dora, w.quant, w.quant_targets, w.quant_head, w.dequant_dtype,
                w.bnb_compute_dtype, w.nf4_impl, w.quant_impl,
                w.loss, w.loss_chunks, w.loss_upcast, w.holds_outputs, w.output_upcast,
                w.loss_parallel, w.activation_offload, w.fp8, w.fp8_recipe, w.bnb_inputs, w.image_size,
                w.audio_seconds, w.compile, w.compile_scope,
                # a compiled step is modelled on one GPU only (estimator.compiled: eager figures beside it)
                w.compile and (w.gpus > 1 or w.fsdp), w.images, w.transformers_version, w.lora_fa, w.vera_rank,
                w.decompose_factor, w.oft_block_size, w.boft_block_size)

    def activations(self, w: Workload, sp: Split) -> Activations:
        """The activations of ``w`` on the split ``sp``, memoized on :meth:`activation_key`."""
        return self.activations_for(w, sp, batch=w.batch, grad_accum=w.grad_accum, checkpointing=w.checkpointing,
                                    attention=w.attention)

    def activations_for(self, struct: Workload, sp: Split, *, batch: int, grad_accum: int,
                        checkpointing: str, attention: Attention) -> Activations:
        """The activations of ``struct`` with these loop values; the workload is built only on a cache miss."""
        key = self.activation_key(struct, sp, batch=batch, checkpointing=checkpointing, attention=attention)
        a = self._acts.get(key)
        if a is None:
            w = evolve(struct, batch=batch, grad_accum=grad_accum, checkpointing=checkpointing, attention=attention)
            vis_saved = 0
            if self.spec.vlm is not None:  # as estimate_spec: the tower and projector, the decoder at seq + images
                vis = vision_figures(self.spec, w)
                vis_saved, w = vis.saved, evolve(w, seq=w.seq + vis.tokens)
            t = activation_totals(self.spec, w, sp)
            logits = logits_bytes(self.spec, w, w.batch * w.seq) if sp.has_head else 0
            kept = kept_past_backward(self.spec, w, sp, logits)
            a = self._acts[key] = Activations(
                saved=t.saved + vis_saved, one_layer=t.one_layer, loss_transient=t.loss_transient, head_saved=t.head_saved,
                logits=logits, later_pass=t.later_pass, loss_backward=t.loss_backward,
                loss_backward_over=t.loss_backward_over, head_backward=t.head_backward,
                head_grads=t.head_grads, head_backward_later=t.head_backward_later,
                head_grad_in_forward=t.head_grad_in_forward, final_norm_backward=t.final_norm_backward,
                logits_held=t.logits_held, loss_tensor=t.loss_tensor, host=t.host,
                recompute=t.recompute, recompute_after=t.recompute_after, uncheckpointed=t.uncheckpointed,
                block_kept=t.block_kept, block_backward=t.block_backward, loss_outside_model=t.loss_outside_model,
                offloaded_block=t.offloaded_block,
                dequant_forward=t.dequant_forward, dequant_backward=t.dequant_backward,
                dequant_temporary=t.dequant_temporary, mlp_backward=t.mlp_backward,
                head_dequant_forward=t.head_dequant_forward, head_dequant_backward=t.head_dequant_backward,
                kept_inputs=kept[0], kept_next=kept[1], held_at_loss=kept[2], tied_last=tied_last(self.spec, sp.has_head),
                head_cast=output_layer_cast(self.spec, w, sp.has_head) if w.activation_offload else None)
        return a

    # ---- the totals -----------------------------------------------------------------------
    def totals(self, w: Workload) -> tuple[int, int] | None:
        """(device_total, host_bytes) of ``w``, or None when ``w`` is not a valid workload."""
        self.evaluations += 1
        if not self.spec.sdpa and w.attention == "sdpa":
            # as estimate_spec: transformers runs eager where it refuses SDPA (gpt-oss)
            w = evolve(w, attention="eager")
        if not w.training or w.cp > 1 or w.method in ("prompt-tuning", "prefix-tuning"):
            # inference, context parallelism (the step at seq/cp per rank, estimator.context) and prompt tuning (the
            # step at seq + num_virtual_tokens, estimator.core.estimate_spec): the estimator itself
            return self._exact(w)
        if w.problems():  # the state is memoized per STATE_FIELDS: the other fields are checked here
            return None
        st = self.state(w)
        if st.problems:
            return None
        a = self.activations(w, st.sp)
        return self.device_total(st, a, w.grad_accum), self.host_bytes(st, a)

    def _derived(self, ts: TrainState, head_cast: int | None) -> tuple[TrainState, TrainState | None]:
        """(the state the phases read, its default stream's view or None), memoized: the state less the
        frozen casts activation offloading moves (``head_cast``), and :func:`default_stream_state` under FSDP2."""
        key = (id(ts), head_cast)
        hit = self._views.get(key)
        if hit is None:
            s = offload_frozen_casts(ts, head_cast)[0] if head_cast is not None and ts.frozen_casts else ts
            # ts is kept in the value so that its id is not reused while the memo lives
            hit = self._views[key] = (s, default_stream_state(s) if s.stream_pools else None, ts)
        return hit[0], hit[1]

    def device_total(self, st: State, a: Activations, grad_accum: int) -> int:
        """device_total from the estimator's own phase and reserve arithmetic (vramlens.estimator.state);
        the checkpointing mode reaches it through the activations (``recompute``, ``uncheckpointed``)."""
        ts, default_ts = self._derived(st.valid, a.head_cast)
        hit = self._phase_kw.get(id(a))
        if hit is not None:
            kw = hit[0]
        else:
            # the activations' keywords of train_phases, once per Activations (kept in the memo with a, so the id
            # is not reused)
            kw = dict(later_pass=a.later_pass, recompute=a.recompute, recompute_after=a.recompute_after,
                      uncheckpointed=a.uncheckpointed, block_kept=a.block_kept, block_backward=a.block_backward,
                      loss_outside_model=a.loss_outside_model, loss_backward=a.loss_backward,
                      loss_backward_over=a.loss_backward_over, head_backward=a.head_backward,
                      head_grads=a.head_grads, head_backward_later=a.head_backward_later,
                      head_grad_in_forward=a.head_grad_in_forward, final_norm_backward=a.final_norm_backward,
                      dequant_forward=a.dequant_forward, dequant_backward=a.dequant_backward,
                      dequant_temporary=a.dequant_temporary, mlp_backward=a.mlp_backward,
                      kept_inputs=a.kept_inputs, kept_next=a.kept_next, held_at_loss=a.held_at_loss,
                      tied_last=a.tied_last, head_dequant_forward=a.head_dequant_forward,
                      head_dequant_backward=a.head_dequant_backward, logits_held=a.logits_held)
            self._phase_kw[id(a)] = (kw, a)
        saved, loss_transient, head_saved, logits = a.saved, a.loss_transient, a.head_saved, a.logits
        peak = max(v for _, v in train_phases(ts, saved, loss_transient, head_saved, grad_accum, logits,
                                              offloaded_block=offloaded_block(ts, a.offloaded_block), **kw))
        default_peak = None
        if default_ts is not None:
            default_peak = max(v for _, v in train_phases(
                default_ts, saved, loss_transient, head_saved, grad_accum, logits,
                offloaded_block=offloaded_block(default_ts, a.offloaded_block), **kw))
        return reserved_total(ts, peak, default_peak=default_peak, loss_tensor=a.loss_tensor)[1]

    @staticmethod
    def host_bytes(st: State, a: Activations) -> int:
        """host_bytes: the offloaded state's and, under activation offloading, the activations' and frozen casts'."""
        ts = st.valid
        moved = offload_frozen_casts(ts, a.head_cast)[1] if a.head_cast is not None and ts.frozen_casts else 0
        return ts.host + a.host + moved

    def _exact(self, w: Workload) -> tuple[int, int] | None:
        """(device_total, host_bytes) from estimate_spec itself, memoized per workload."""
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
        self._infer_weights[w] = e.breakdown["weights"]
        return hit

    def weights(self, w: Workload) -> int:
        """The weights on the busiest GPU of a workload :meth:`totals` estimated through the estimator itself
        (inference), memoized with it."""
        hit = self._infer_weights.get(w)
        if hit is None:
            e = estimate_spec(self.spec, w, self.gpu)
            hit = self._infer_weights[w] = e.breakdown["weights"]
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
        return tuple(w.problems()) or self.state(w).problems


__all__ = ["Activations", "FastMemory", "State"]
