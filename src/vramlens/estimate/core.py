"""estimate(): put the components together into a per-GPU Breakdown and a verdict.

Phases (steady state, i.e. step 2 onwards, when the optimizer states exist; step 1 is never
higher because its states are created inside its optimizer step):

* forward / loss: persistent + activations of all local layers + the loss' logits peak
  (+ gradients already accumulated when ``grad_accum > 1``);
* backward: persistent + max(all activations + the head's gradient and loss gradients,
  all gradients + one block being recomputed under checkpointing);
* optimizer: persistent + gradients + the optimizer's temporaries;
* inference: weights + KV cache + the largest block working set during prefill + logits.

persistent = weights + master weights + optimizer states + communication buffers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from math import ceil

from vramlens.estimate import activations as A
from vramlens.estimate import kv_cache as K
from vramlens.estimate import optimizer as O
from vramlens.estimate import weights as Wt
from vramlens.estimate.breakdown import Breakdown, make_breakdown
from vramlens.estimate.inventory import summarize
from vramlens.estimate.loading import host_load
from vramlens.estimate.parallel import Split, comm_buffer_bytes, split
from vramlens.estimate.reserve import reserved_estimate
from vramlens.estimate.runtime import runtime
from vramlens.hardware.gpu import GPU
from vramlens.models.spec import ModelSpec
from vramlens.units import DTYPE_BYTES, human_bytes
from vramlens.workload import Workload

DEFAULT_HEADROOM = 0.10


@dataclass(frozen=True, slots=True)
class Estimate:
    """The answer to "will it fit?" for one model, workload and GPU.

    Attributes:
        model: the ModelSpec estimated.
        workload: the validated Workload.
        gpu: the GPU compared against, or None.
        breakdown: per-GPU bytes by component and the three peaks.
        trainable_params: parameters that receive gradients.
        layer_activation_bytes: saved-for-backward bytes of one block (training), or its working set.
        fits: whether device_total fits the GPU's usable memory (None without a GPU).
        headroom_bytes: GPU capacity minus device_total (negative when it does not fit).
        advice: the component to attack first, in words.
    """

    model: ModelSpec
    workload: Workload
    gpu: GPU | None
    breakdown: Breakdown
    trainable_params: int
    layer_activation_bytes: int
    fits: bool | None
    headroom_bytes: int | None
    advice: str = ""
    explain: dict = field(default_factory=dict)

    @property
    def peak_allocated(self) -> int:
        return self.breakdown.peak_allocated

    @property
    def device_total(self) -> int:
        return self.breakdown.device_total

    def to_dict(self) -> dict:
        """The ``vramlens estimate --json`` object (schema documented in the README)."""
        b = self.breakdown
        m = self.model
        return {
            "model": {
                "name": m.name,
                "model_type": m.model_type,
                "architecture": m.architecture,
                "params": m.params,
                "trainable_params": self.trainable_params,
                "layers": m.n_layers,
                "hidden_size": m.hidden_size,
                "heads": m.n_heads,
                "kv_heads": m.n_kv_heads,
                "vocab_size": m.vocab_size,
                "source": m.source,
                "assumed": list(m.assumed),
            },
            "workload": self.workload.to_dict(),
            "components": b.as_dict(),
            "explanations": {c.name: c.explain for c in b.components},
            "peak_allocated_bytes": b.peak_allocated,
            "peak_reserved_bytes": b.peak_reserved,
            "device_total_bytes": b.device_total,
            "peak_phase": b.peak_phase,
            "phases": dict(b.phases),
            "host_bytes": b.host_bytes,
            "layer_activation_bytes": self.layer_activation_bytes,
            "host_load": host_load(self.model, self.workload.dtype if self.workload.method != "qlora"
                                   else self.workload.compute_dtype).to_dict(),
            "effective_batch": self.workload.effective_batch,
            "gpu": None if self.gpu is None else {
                "name": self.gpu.name,
                "memory_bytes": self.gpu.memory_bytes,
                "usable_bytes": self.gpu.capacity_bytes,
            },
            "fits": self.fits,
            "headroom_bytes": self.headroom_bytes,
            "advice": self.advice,
            "notes": list(b.notes),
        }


def _activation_totals(spec: ModelSpec, w: Workload, sp: Split) -> tuple[int, int, int, int, str]:
    """(all saved activations, one block's, the loss-time transient, backward head extra, formula)."""
    b, s = w.batch, w.seq
    tp = w.tp
    if spec.kind == "encoder-decoder":
        enc = A.layer_activations(spec, w, b, s, tp=tp)
        dec = A.layer_activations(spec, w, b, s, cross_s=s, tp=tp)
        layers = [(enc, spec.n_encoder_layers), (dec, spec.n_decoder_layers)]
    else:
        la = A.layer_activations(spec, w, b, s, tp=tp)
        layers = [(la, spec.n_layers)]
    frac = sp.layers / max(1, spec.n_layers)
    inflight = sp.micro_batches_in_flight
    one = max(la.saved for la, _ in layers)
    if w.checkpointing == "full":
        kept = sum(la.checkpoint_input * n for la, n in layers)
        formula = "full checkpointing: each block keeps its input (b*s*h), one block recomputed in backward"
    else:
        kept = sum(la.saved * n for la, n in layers)
        formula = "saved for backward per block x blocks"
        if w.checkpointing == "selective":
            formula += " (selective: attention scores recomputed)"
    kept = int(kept * frac) * inflight
    model_level = A.model_level_saved(spec, w, b, s)
    head_saved, head_peak, head_formula = A.head_saved(spec, w, b, s)
    if not sp.has_head:
        head_saved = head_peak = 0
    return kept + model_level + head_saved, one, head_peak - head_saved, head_saved, formula + "; " + head_formula


def estimate_spec(spec: ModelSpec, w: Workload, gpu: GPU | None = None, *, headroom: float = DEFAULT_HEADROOM) -> Estimate:
    """Estimate per-GPU memory of workload ``w`` for ``spec`` (both already validated)."""
    sp = split(spec, w)
    explain: dict[str, str] = {}
    notes: list[str] = []

    base_w, base_formula = Wt.base_weight_bytes(spec, w)
    adapters = Wt.adapter_bytes(spec, w)
    weights = int(base_w * sp.weights) + adapters
    explain["weights"] = base_formula + (f" + LoRA adapters fp32 ({adapters:,} B)" if adapters else "")
    if sp.weights != 1:
        explain["weights"] += f", x{sp.weights:.4g} on this GPU"

    trainable = Wt.trainable_params(spec, w)
    grads_full = O.gradient_bytes(spec, w, trainable)
    grads = int(grads_full * sp.gradients)
    master = int(O.master_bytes(spec, w, trainable) * sp.optimizer)
    opt_full, opt_formula = O.optimizer_state_bytes(spec, w, trainable)
    opt = int(opt_full * sp.optimizer)
    opt_tmp_full, opt_tmp_formula = O.optimizer_step_temporary(spec, w, trainable)
    opt_tmp = int(opt_tmp_full * sp.optimizer)
    pbytes = O.param_dtype_bytes(w)
    comm, comm_formula = comm_buffer_bytes(spec, w, grads_full, pbytes, trainable, Wt.weight_dtype_bytes(w))
    host = 0
    if w.training and w.offload in ("optimizer", "all"):
        host += (opt + master + opt_tmp) * w.gpus
        notes.append(f"optimizer states and master weights offloaded to the host ({human_bytes(opt + master)} per GPU)")
        opt = master = opt_tmp = 0
        if w.shard_stage >= 2:
            host += grads * w.gpus
    if w.training and w.offload == "all":
        host += weights * w.gpus
        inside_frac = 1.0 / max(1, spec.n_layers)
        weights = int(weights * 2 * inside_frac)  # only the blocks being computed are on the GPU
        notes.append("parameters offloaded: the GPU holds the gathered blocks only")

    kv = 0
    phases: list[tuple[str, int]] = []
    if w.training:
        acts, one_layer, loss_tmp, head_saved, act_formula = _activation_totals(spec, w, sp)
        explain["activations"] = act_formula
        persistent = weights + master + opt + comm
        grads_in_fwd = grads if w.grad_accum > 1 else 0
        head_grad = 0
        if w.method == "full":
            head_grad = int(spec.vocab_size * spec.hidden_size * pbytes * sp.gradients) if sp.has_head else 0
        recompute = one_layer if w.checkpointing == "full" else 0
        fwd = persistent + grads_in_fwd + acts + loss_tmp
        # backward starts with every activation alive plus the loss' fp32 gradients (two
        # log_softmax-sized tensors) and the output layer's weight gradient; it ends with all
        # gradients and, under checkpointing, the last block recomputed.
        bwd_start = persistent + grads_in_fwd + acts + 2 * head_saved + head_grad
        bwd_end = persistent + grads + recompute
        bwd = max(bwd_start, bwd_end)
        optim = persistent + grads + opt_tmp
        phases = [("forward", fwd), ("backward", bwd), ("optimizer", optim)]
        temporaries = max(loss_tmp, opt_tmp)
        explain["temporaries"] = f"max(loss peak {loss_tmp:,} B, optimizer step {opt_tmp:,} B: {opt_tmp_formula})"
        activation_peak = acts + recompute
        layer_act = one_layer
    else:
        b, s = w.batch, w.seq
        total_tokens = s + w.new_tokens
        kv = K.kv_cache_bytes(spec, w, total_tokens, b, tp=w.tp) if (w.new_tokens or spec.kind != "encoder") else 0
        if sp.layers != spec.n_layers:
            kv = kv * sp.layers // max(1, spec.n_layers)
        explain["kv_cache"] = (
            f"2 x {spec.n_decoder_layers} layers x {max(1, spec.n_kv_heads // w.tp)} kv heads x {spec.head_dim} x "
            f"{K.kv_dtype_bytes(w)} B x {total_tokens} tokens x batch {b}"
        )
        work = A.inference_layer_peak(spec, w, b, s, s, tp=w.tp)
        c = DTYPE_BYTES[w.compute_dtype]
        logits_tokens = b if w.new_tokens else b * s
        logits = A._r(c * spec.vocab_size * logits_tokens) if spec.kind != "encoder" else 0
        if w.new_tokens:
            logits += A._r(4 * spec.vocab_size * b)  # generate() upcasts the last logits to fp32
        prefill = weights + kv + work + logits
        decode = weights + kv + A.inference_layer_peak(spec, w, b, 1, total_tokens, tp=w.tp) + logits
        phases = [("prefill", prefill)] + ([("decode", decode)] if w.new_tokens else [])
        temporaries = logits
        explain["activations"] = "largest working set of one block during prefill (no tensors kept across blocks)"
        explain["temporaries"] = "logits of the prefill (all tokens for a plain forward, the last one in generate())"
        activation_peak = work
        layer_act = work
        if w.method != "full" and w.mode == "inference":
            notes.append("inference with LoRA: adapters counted in weights")

    rt = runtime(gpu, w)
    # cuBLAS/cuBLASLt workspaces come from the caching allocator (hardware/runtime.py): live in every phase
    phases = [(name, v + rt.workspace_bytes) for name, v in phases]
    peak_phase, peak_alloc = max(phases, key=lambda p: p[1])
    persistent = weights + master + opt + comm + (grads if w.training else 0) + kv
    full_params = w.method == "full" and not w.quantized
    wb = Wt.weight_dtype_bytes(w)
    state_b = 4 if master or w.method != "full" else pbytes
    parts = [
        (wb, weights, full_params and sp.weights == 1),
        (pbytes, grads if w.training else 0, full_params and sp.gradients == 1),
        (4, master, full_params and sp.optimizer == 1),
        (state_b, opt, False),
        (1, comm, False),
        (1, kv, False),
    ]
    if full_params and sp.optimizer == 1 and opt:
        n_states = max(1, round(opt / max(1, summarize(spec).param_bytes_at.get(state_b, 1))))
        parts[3] = (state_b, opt, True)
        parts.extend([(state_b, opt, True)] * (n_states - 1))
    reserved, reserve_rule = reserved_estimate(spec, peak_alloc, parts, persistent)
    total = reserved + rt.outside_allocator_bytes
    explain["weights"] = explain.get("weights", "")
    explain["master_weights"] = (
        "fp32 master copy (4 B/param) kept by the mixed-precision optimizer" if master else
        ("autocast: no persistent copy" if w.amp else "no mixed precision")
    )
    explain["gradients"] = f"{trainable:,} trainable params x {pbytes} B" if grads else "no training"
    explain["optimizer_states"] = opt_formula if opt else ("offloaded to CPU" if w.offload != "none" else "no optimizer")
    explain["comm_buffers"] = comm_formula or "single GPU: none"
    explain["runtime"] = rt.explain
    explain.setdefault("kv_cache", "training: no cache")
    comps = {
        "weights": weights,
        "master_weights": master,
        "gradients": grads,
        "optimizer_states": opt,
        "activations": activation_peak,
        "kv_cache": kv,
        "temporaries": temporaries,
        "comm_buffers": comm,
        "runtime": rt.outside_allocator_bytes + rt.workspace_bytes,
    }
    bd = make_breakdown(
        comps, explain,
        peak_allocated=peak_alloc, peak_reserved=reserved, device_total=total, peak_phase=peak_phase,
        host_bytes=host, phases=tuple(phases), source="estimate", notes=tuple(notes),
    )
    fits = headroom_bytes = None
    advice = ""
    if gpu is not None:
        cap = gpu.capacity_bytes
        headroom_bytes = cap - total
        fits = total <= cap * (1 - headroom) if headroom else total <= cap
        advice = _advice(bd, w, fits)
    return Estimate(
        model=spec, workload=w, gpu=gpu, breakdown=bd, trainable_params=trainable,
        layer_activation_bytes=layer_act, fits=fits, headroom_bytes=headroom_bytes, advice=advice, explain=explain,
    )


_REMEDIES = {
    "weights": "quantize the weights (--quant int8/nf4) or split them (--tp, --pp, --zero 3)",
    "optimizer_states": "use an 8-bit optimizer (--optimizer adamw-8bit), LoRA (--method lora) or shard/offload them (--zero 1, --offload optimizer)",
    "master_weights": "shard the master copy (--zero 1) or drop --amp",
    "gradients": "train fewer parameters (--method lora) or shard gradients (--zero 2)",
    "activations": "turn on gradient checkpointing (--checkpointing full), lower --batch with --grad-accum, or use --attention sdpa",
    "kv_cache": "shorten the context, lower --batch, or store the cache in 8 bits (--kv-dtype fp8)",
    "temporaries": "chunk the loss over the vocabulary or lower --batch",
    "comm_buffers": "use ZeRO/FSDP sharding instead of DDP buckets",
}


def _advice(bd: Breakdown, w: Workload, fits: bool) -> str:
    big = bd.largest()
    share = big.bytes / max(1, bd.device_total)
    lead = "fits" if fits else "does not fit"
    return f"{lead}; largest component: {big.name} ({share:.0%}): {_REMEDIES.get(big.name, '')}"


def ceil_div(a: int, b: int) -> int:
    return ceil(a / b)
