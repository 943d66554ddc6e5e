"""Activations: the tensors a training step saves for backward, and the inference working set.

Follows what PyTorch autograd actually keeps for the Hugging Face implementations, op by op,
in the terms of Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large
Transformer Models", §4): per layer and per token (t = b*s), with h hidden size, a heads,
d head size, n_kv key/value heads, f FFN size, S key length, and
r = bytes of the residual stream (fp32 under autocast), c = bytes of matmul outputs.

Each saved tensor is one term (its bytes for the whole micro-batch, rounded up to the CUDA
caching allocator's 512-byte block) so that the estimate and the tracer compare term by term.
GPT-3-style layers (LayerNorm, GeLU, dropout, eager attention) reduce to the paper's
``sbh(34 + 5as/h)`` bytes: see :func:`korthikanti_layer_bytes`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from vramlens.estimator import fp8 as F8
from vramlens.estimator import heads as H
from vramlens.estimator import weights as Wt
from vramlens.estimator.audio import encoder_tokens, front_end_saved
from vramlens.estimator.checkpointing import (
    checkpointed,
    first_block_checkpointed,
    last_block_checkpointed,
    whole_blocks,
)
from vramlens.estimator.inventory import (
    Linear,
    is_fused_qkv,
    qkv_slice_widths,
    qkv_slices,
    summarize,
    vector_dtype,
)
from vramlens.estimator.linears import GROUPS, linear_group
from vramlens.estimator.masks import kv_prefix, padded_mask, repeats_kv, sdpa_masked
from vramlens.estimator.memo import identity_cache
from vramlens.models.peft_targets import IA3_TARGETS, VERA_TARGETS, lokr_shapes, oft_block
from vramlens.models.spec import ModelSpec
from vramlens.units import BLOCK, DTYPE_BYTES
from vramlens.units import block_bytes as _r  # one allocation's bytes, in 512-byte blocks
from vramlens.workload import DELTA_METHODS, FOUR_BIT, LORA_METHODS, VECTOR_METHODS, Workload

#: The philox seed and offset (an int64 each) that CUDA's flash, memory-efficient and cuDNN SDPA
#: kernels return and keep for backward, with or without dropout (one 512-byte block each in the
#: H200's events, validation/events/cuda-h200-*.json.gz).
SDPA_RNG = 2 * BLOCK


def korthikanti_layer_bytes(s: int, b: int, h: int, a: int, t: int = 1, sequence_parallel: bool = False,
                            selective: bool = False) -> int:
    """Activation bytes per transformer layer, Korthikanti et al. 2022, Eq. (1)-(4).

    16-bit activations, 1-byte dropout masks, eager attention. ``t`` is the tensor-parallel size.
    """
    if sequence_parallel:
        core = 34 * s * b * h // t
    else:
        core = s * b * h * 10 + 24 * s * b * h // t
    quadratic = 0 if selective else 5 * a * s * s * b // t
    return core + quadratic


@dataclass(frozen=True, slots=True)
class Dims:
    h: int
    a: int
    kv: int
    d: int
    f: int
    V: int
    tp: int = 1


def rank_dims(spec: ModelSpec, tp: int) -> Dims:
    # Megatron tensor parallelism splits heads and the FFN across tp ranks; with sequence
    # parallelism (assumed whenever tp > 1) the remaining per-token tensors are split too.
    return Dims(
        h=spec.hidden_size,
        a=max(1, spec.n_heads // tp),
        kv=max(1, spec.n_kv_heads // tp),
        d=spec.head_dim,
        f=max(1, spec.ffn_size // tp),
        V=spec.vocab_size,
        tp=tp,
    )


def _cfg(spec: ModelSpec, *keys: str, default: Any = None) -> Any:
    for k in keys:
        v = spec.config.get(k) if spec.config else None
        if v is not None:
            return v
    return default


def dropout_probs(spec: ModelSpec) -> tuple[float, float]:
    """(attention-probability dropout, hidden/residual dropout) from the config."""
    attn = _cfg(spec, "attention_dropout", "attn_pdrop", "attention_probs_dropout_prob", "attention_dropout_prob",
                "dropout_rate", default=0.0)
    hid = _cfg(spec, "resid_pdrop", "hidden_dropout_prob", "hidden_dropout", "dropout", "dropout_rate", default=0.0)
    return float(attn or 0.0), float(hid or 0.0)


@dataclass(frozen=True, slots=True)
class LayerActivations:
    """Bytes one block saves for backward (training) and its transient peak."""

    saved: int          # kept until this layer's backward
    quadratic: int      # of `saved`, the part that grows with S^2 (eager attention)
    checkpoint_input: int  # what full checkpointing keeps instead (the block's input)


def norm_kind(spec: ModelSpec) -> str:
    """The norm as its saved tensors go: "layernorm", "rmsnorm" (Llama-style), "rmsnorm_fp32w"
    (the weight multiplied in fp32: Gemma, OLMo 2) or "t5norm"."""
    if spec.model_type in ("t5", "mt5", "umt5"):
        return "t5norm"
    return "rmsnorm_fp32w" if spec.norm == "rmsnorm" and spec.norm_weight_fp32 else spec.norm


def _norm_saved(kind: str, h: int, t: int, r: int, c: int, consumers: int, casts: bool,
                weight_trained: bool = True) -> int:
    """What a norm and the linears reading its output keep.

    RMSNorm (HF LlamaRMSNorm): ``x.to(float32)`` (kept by ``pow``), the normalized tensor cast
    back to the input dtype (kept by ``weight * x`` for the weight's gradient, so only when the
    norm is trained), and the output (kept by the linears that train their weights).
    ``rmsnorm_fp32w`` (Gemma2RMSNorm, Gemma3RMSNorm, Olmo2RMSNorm) multiplies by the weight
    before casting back, so the weight's gradient keeps the fp32 normalized tensor instead.
    T5LayerNorm (``t5norm``) also keeps its half-precision input, which it scales by the fp32
    rsqrt. LayerNorm (``native_layer_norm``): its input and fp32 mean/rstd (b*s each).
    Under autocast each consuming linear that trains keeps its own cast of the output.

    Args:
        consumers: linears reading the output that keep their input (their weight is trained:
            all of them in full fine-tuning, the LoRA-adapted ones under LoRA).
    """
    if kind in ("rmsnorm", "t5norm", "rmsnorm_fp32w"):
        own = _r(4 * h * t)  # the fp32 input (the input itself when it is fp32)
        if kind == "t5norm" and r != 4:
            # T5LayerNorm multiplies the input as it came (not its fp32 copy) by rsqrt(variance)
            own += _r(r * h * t)
        if weight_trained:
            own += _r(r * h * t) if (r != 4 and kind != "rmsnorm_fp32w") else _r(4 * h * t)
    else:
        own = _r(r * h * t) + 2 * _r(4 * t)
    if casts:
        out = consumers * _r(c * h * t)
    else:
        out = _r(r * h * t) if consumers else 0
    return own + out


def _sp_norm_saved(kind: str, h: int, t: int, r: int, c: int, consumers: int, casts: bool, weight_trained: bool,
                   sp: int) -> int:
    """:func:`_norm_saved` of a pre-norm under sequence parallelism over ``sp`` ranks.

    The norm runs on s/sp tokens (torchtitan's ``SequenceParallel`` norms), so what it keeps itself
    is split; its output is all-gathered to the whole sequence before the column-parallel linears
    (``PrepareModuleInput``: ``Shard(1)`` -> ``Replicate()``, torchtitan/models/llama3/infra/parallelize.py
    ``apply_tp``), and those linears keep the gathered (b, s, h) tensor for their weights' gradients,
    whole on every rank. (Megatron-LM instead keeps the shard and gathers it again in backward,
    Korthikanti et al. 2022 section 4.2.2; DTensor's autograd keeps what the matmul was given.)
    """
    own = _norm_saved(kind, h, t, r, c, 0, casts, weight_trained)
    return own // max(1, sp) + _norm_saved(kind, h, t, r, c, consumers, casts, weight_trained) - own


@identity_cache
def linear_groups(spec: ModelSpec) -> dict[str, tuple[tuple[str, str], ...]]:
    """The first block's linears by place: "qkv", "attn_out", "mlp_in", "mlp_out"; each (path, leaf name)."""
    layers = [t.layer for t in spec.tensors if t.layer is not None and t.role in ("linear", "conv1d")]
    if not layers:
        return {}
    first = min(layers)
    groups: dict[str, list[tuple[str, str]]] = {"qkv": [], "attn_out": [], "mlp_in": [], "mlp_out": []}
    for t in spec.tensors:
        if t.layer != first or t.role not in ("linear", "conv1d") or not t.name.endswith("weight"):
            continue
        if t.stack == "decoder" and spec.kind == "encoder-decoder":
            continue  # the encoder's first block stands for both stacks
        path = t.name.removesuffix(".weight")
        groups[linear_group(path, t.module)].append((path, t.module))
    return {k: tuple(v) for k, v in groups.items()}


def trained_linears(spec: ModelSpec, w: Workload, group: str) -> int:
    """How many linears of ``group`` keep their input for a weight gradient (all in full fine-tuning)."""
    members = linear_groups(spec).get(group, ())
    if w.method == "full":
        return len(members)
    targets = tuple(w.lora_adapted)
    if "all-linear" in targets:
        return len(members)
    return sum(1 for path, leaf in members if _lora_on(spec, w, path, leaf))


def _lora_on(spec: ModelSpec, w: Workload, path: str, leaf: str) -> bool:
    """Whether the linear at ``path`` carries an adapter: its name among the targets, or under ``fused_qkv``
    a fused q/k/v linear with a part the targets name (inventory.qkv_slices)."""
    targets = tuple(w.lora_adapted)
    if "all-linear" in targets or leaf in targets or any(path.endswith("." + x) for x in targets):
        return True
    lin = _fused_qkv_linears(spec).get(path) if w.fused_qkv else None
    return lin is not None and any(qkv_slices(spec, lin, targets))


@identity_cache
def _fused_qkv_linears(spec: ModelSpec) -> dict[str, Linear]:
    """The fused q/k/v linears of the blocks (inventory.is_fused_qkv) by path."""
    return {lin.name.removesuffix(".weight"): lin for lin in summarize(spec).linears if is_fused_qkv(spec, lin)}


GROUP_ORDER = GROUPS


def trains(w: Workload, leaf: str) -> bool:
    """Whether the linear named ``leaf`` (``"q_b_proj"``) keeps its input for a weight gradient."""
    if w.method == "full":
        return True
    targets = tuple(w.lora_adapted)
    return "all-linear" in targets or leaf in targets


def layer_kinds(spec: ModelSpec) -> tuple[tuple[int | None, int], ...]:
    """The kinds of block of a decoder-only or encoder-only model as (a block of the kind, how many there are).

    Blocks differ by their attention (a sliding window, ModelSpec.sliding_layer_ids; no rotary,
    ModelSpec.nope_layer_ids) and, in an MoE model, their MLP (dense blocks, ModelSpec.dense_layer_ids);
    ``((None, L),)`` when all blocks are alike.
    """
    sliding = set(spec.sliding_layer_ids) if spec.sliding_window else set()
    dense = set(spec.dense_layer_ids) if spec.is_moe else set()
    nope = set(spec.nope_layer_ids)
    if not sliding and not dense and not nope:
        return ((None, spec.n_layers),)
    kinds: dict[tuple[bool, bool, bool], list[int]] = {}
    for i in range(spec.n_layers):
        kinds.setdefault((i in sliding, i in dense, i in nope), []).append(i)
    return tuple((ids[0], len(ids)) for ids in kinds.values())


def untracked_before_first_adapter(spec: ModelSpec, w: Workload, b: int, s: int) -> tuple[int, tuple[str, ...]]:
    """Under LoRA the embeddings are frozen, so autograd tracks nothing until the first adapter:
    the first block's norm before it keeps nothing, and the frozen linears of the groups up to
    it keep no weight cast (their inputs need no gradient).

    Returns:
        (bytes the first block's attention-input norm would otherwise keep, the linear groups
        of the first block whose frozen weight casts are not kept).
    """
    if w.method == "full":
        return 0, ()
    if w.method == "prompt-tuning":
        return 0, ()  # the prompts need a gradient: every block's input does, from the first on
    if w.method in DELTA_METHODS:
        # as IA3: the first block's input norm keeps nothing, and the adapted q/k/v projections there read a tensor
        # that needs no gradient, so F.linear keeps only the input copy for the delta's gradient, not the delta
        c = DTYPE_BYTES[w.compute_dtype]
        a = DTYPE_BYTES[delta_dtype(w)]
        # (OFT and BOFT: their R, which only the input's gradient needs)
        first = sum(_oft_blocks(w, k, delta_dtype(w)) if w.method == "oft" else _r(c * k * k) if w.method == "boft" else _r(a * n * k)
                    for g, n, k in delta_dims(spec, w) if g == "qkv")
        # under autocast the first block's frozen q/k/v keep no cast weight either (state.autocast_copies)
        return (_norm_saved(norm_kind(spec), spec.hidden_size, b * s, 4 if w.run_dtype == "fp32" else c, c, 0,
                            False, False) + first, ("qkv",))
    if w.method in VECTOR_METHODS:
        # the first block's input norm reads the frozen embedding's output, so it keeps no fp32 copy of it: IA3
        # tracks nothing before its first vector, LN tuning's trained copy keeps only the normalized tensor
        # for its weight's gradient (the rest of what a trained norm keeps, in layer_activations)
        c = DTYPE_BYTES[w.compute_dtype]
        own = _norm_saved(norm_kind(spec), spec.hidden_size, b * s, 4 if w.run_dtype == "fp32" else c, c, 0,
                          False, False)
        if kv_prefix(w) and w.attention == "eager":
            # prefix tuning under eager attention: the first block's queries need no gradient, so
            # ``matmul(query, key_states.transpose(2, 3))`` keeps the query (for the prefix keys' gradient) and not
            # the (expanded) keys over the S = n + s positions
            D = rank_dims(spec, 1)
            own += _r(c * (D.a if D.kv != D.a else D.kv) * D.d * b * (s + kv_prefix(w)))
        # IA3 scales the attention projections' outputs (the base layer runs first on an input that needs no
        # gradient): under autocast the first block's q/k/v keep no cast weight (state.autocast_copies)
        return own, ("qkv",) if w.method == "ia3" else ()
    groups = []
    for g in GROUP_ORDER:
        groups.append(g)
        if trained_linears(spec, w, g):
            break
    else:
        return 0, ()
    if spec.kind == "encoder-decoder":
        # two first blocks fed by frozen inputs: the encoder's (Whisper: over its 1,500 positions) and the
        # decoder's (its own embeddings)
        enc, _ = _untracked_first_block(spec, w, b * encoder_tokens(spec, w), groups)
        dec, _ = _untracked_first_block(spec, w, b * s, groups)
        return enc + dec, tuple(groups) * 2
    return _untracked_first_block(spec, w, b * s, groups)


def _untracked_first_block(spec: ModelSpec, w: Workload, t: int, groups: list[str]) -> tuple[int, tuple[str, ...]]:
    """untracked_before_first_adapter for one stack of t tokens."""
    c = DTYPE_BYTES[w.compute_dtype]
    r = 4 if w.run_dtype == "fp32" else c
    own = _norm_saved(norm_kind(spec), spec.hidden_size, t, r, c, 0, False, False)
    if spec.parallel_norms_share_input and not trained_linears(spec, w, "mlp_in"):
        # GPT-NeoX's parallel block: the MLP reads the block's input through its own norm, so in the first
        # block nothing on that branch needs a gradient unless its linears are adapted: the norm's mean and
        # rstd and the MLP's saved tensors (the activation's input) are not kept either
        own += _norm_saved(norm_kind(spec), spec.hidden_size, t, r, c, 0, False, False) - _r(r * spec.hidden_size * t)
        own += _mlp_saved(spec, rank_dims(spec, 1), t, c, bool(trained_linears(spec, w, "mlp_out")), _autocast(w))
    if w.dora and w.lora_dropout > 0:
        # DoRA's F.linear(dropped x, weight) on an input that needs no gradient keeps no weight
        own += sum(dora_weight_copy(w, k, n, c) for k, n in adapted_dims(spec, w, groups[-1]))
    # AdaLoRA's product (lora_A * lora_E) is kept only for its input's gradient, which the first adapters' need none
    own += sum(adalora_product(w, k) for k, _ in adapted_dims(spec, w, groups[-1]))
    m = spec.mla
    if m is not None:
        # MLA's inner norms read the frozen down-projections' outputs: nothing requires grad there either
        if m.q_lora_rank is not None and not trains(w, "q_a_proj"):
            own += _norm_saved(norm_kind(spec), m.q_lora_rank, t, c, c, 0, False, False)
        if not trains(w, "kv_a_proj_with_mqa"):
            own += _norm_saved(norm_kind(spec), m.kv_lora_rank, t, c, c, 0, False, False)
    return own, tuple(groups)


def _autocast(w: Workload) -> bool:
    """PyTorch autocast: fp32 weights computed in the --amp dtype (not FSDP2's MixedPrecisionPolicy)."""
    return w.autocast


def lora_casts_input(w: Workload) -> bool:
    """Whether each LoRA adapter keeps a private copy of its input rather than the input itself.

    peft's ``lora.Linear.forward`` casts the input to the adapters' dtype
    (``LoraLayer._cast_input_dtype``) and runs ``lora_B(lora_A(dropout(x)))``: without autocast,
    lora_A keeps the cast copy when the adapters' dtype differs from the compute dtype (peft's fp32
    adapters on half weights), or the dropped copy with ``lora_dropout``; the input itself is then
    kept by no one. Under autocast each adapter keeps autocast's half copy either way (counted
    with the norm's consumers, see _norm_saved).
    """
    if w.method not in LORA_METHODS or _autocast(w):
        return False
    return DTYPE_BYTES[w.lora_dtype] != DTYPE_BYTES[w.compute_dtype] or w.lora_dropout > 0


def lora_a_saves_input(w: Workload) -> bool:
    """Whether each adapter's ``lora_A`` keeps its input (or its private copy, lora_casts_input) for backward.

    Not under LoRA-FA (Workload.lora_fa: peft's create_lorafa_optimizer freezes every lora_A): ``mm``'s backward
    reads ``self`` only for ``mat2``'s gradient (tools/autograd/derivatives.yaml: ``self: mm_mat1_backward(grad,
    mat2, ...)``, ``mat2: mm_mat2_backward(grad, self, ...)``) and the generated autograd code saves a variable
    only when an output whose formula reads it needs a gradient, so a frozen A over an input that needs one keeps
    its weight, not its input."""
    return not w.lora_fa


@identity_cache
def _dims_by_path(spec: ModelSpec) -> dict[str, tuple[int, int]]:
    return {lin.name.removesuffix(".weight"): (lin.in_features, lin.out_features) for lin in summarize(spec).linears}


def adapted_dims(spec: ModelSpec, w: Workload, group: str, tp: int = 1) -> tuple[tuple[int, int], ...]:
    """(k in, n out) of each adapted linear of ``group`` in the first block, split like Megatron TP
    (the column-parallel groups' outputs, the row-parallel groups' inputs)."""
    if w.method == "full":
        return ()
    dims = _dims_by_path(spec)
    out = []
    for path, leaf in linear_groups(spec).get(group, ()):
        if _lora_on(spec, w, path, leaf):
            k, n = dims.get(path, (0, 0))
            if group in ("qkv", "mlp_in"):
                n = max(1, n // tp)
            else:
                k = max(1, k // tp)
            out.append((k, n))
    return tuple(out)


def _dora_saved(w: Workload, k: int, n: int, t: int, c: int, a_out: int) -> int:
    """What peft's DoRA (tuners/lora/dora.py ``DoraLinearLayer.forward``) keeps for one adapted linear
    beyond LoRA's own: ``(mag_norm_scale - 1) * base_result`` keeps the base output and
    ``mag_norm_scale * lora_result`` the adapter output (t x n each, the magnitude needs their
    gradient), ``magnitude / weight_norm`` the norm, and the two scales ((n,) each). With
    dropout the base output is recomputed on the dropped input, ``F.linear(x, weight)``, which
    keeps the weight it was given: a copy when the weight had to be dequantized or cast
    (:func:`dora_weight_copy`)."""
    lb = DTYPE_BYTES[w.lora_dtype]
    base_b = c if (w.lora_dropout == 0 or _autocast(w)) else lb
    total = _r(base_b * n * t) + _r(a_out * n * t) + 3 * _r(lb * n)
    if w.lora_dropout > 0:
        total += dora_weight_copy(w, k, n, c)
    return total


def dora_weight_copy(w: Workload, k: int, n: int, c: int) -> int:
    """The (n, k) base weight DoRA's forward holds in the input's dtype (``weight.to(x.dtype)``, x
    in the adapters' dtype): a new tensor when the weight is quantized (dequantized first) or in
    another dtype; under autocast ``F.linear`` casts it once more to the half dtype."""
    if _autocast(w):
        return _r(c * n * k)
    lb = DTYPE_BYTES[w.lora_dtype]
    if w.quantized in FOUR_BIT or DTYPE_BYTES[w.dtype] != lb:
        return _r(lb * n * k)
    return 0


def dora_forward_transient(spec: ModelSpec, w: Workload, *, training: bool, tp: int = 1) -> int:
    """The largest temporary of DoRA's weight norm, over the adapted linears (0 without DoRA).

    peft ``DoraLinearLayer``: ``get_lora_weight`` runs ``lora_B(lora_A(eye(k)))`` (an identity
    (k, k) in the adapters' dtype, A's (k, r) and B's (k, n) outputs; in training autograd keeps
    the identity, its autocast copy and A's output until the forward returns); ``lora_weight.to(x.dtype)``
    and ``weight.to(x.dtype)`` copy when the dtypes differ (a quantized weight is dequantized first);
    ``get_weight_norm`` adds ``weight + scaling * lora_weight`` (two (n, k) tensors) before the row norms.
    """
    if w.method == "full" or not w.dora:
        return 0
    c = DTYPE_BYTES[w.compute_dtype]
    lb = DTYPE_BYTES[w.lora_dtype]
    ac = _autocast(w) and training
    a_out = c if _autocast(w) else lb
    r = w.lora_rank
    best = 0
    for g in GROUP_ORDER:
        for k, n in adapted_dims(spec, w, g, tp):
            eye = _r(lb * k * k) + (_r(c * k * k) if ac else 0)
            lw = _r(a_out * k * n)
            lw_copy = _r(lb * k * n) if a_out != lb else 0
            quantized = w.quantized in FOUR_BIT
            weight_b = DTYPE_BYTES[w.dtype] if not quantized else c
            wcopy = _r(lb * n * k) if (quantized or weight_b != lb) else 0
            norm = lw + lw_copy + wcopy + 2 * _r(lb * n * k)
            if training:
                peak = eye + _r(a_out * k * r) + norm
            else:  # no graph: the identity and A's output go when get_lora_weight returns
                peak = max(_r(lb * k * k) + _r(a_out * k * r) + lw, norm)
            best = max(best, peak)
    return best


def dequantized_by_group(spec: ModelSpec, w: Workload, tp: int = 1) -> dict[str, tuple[tuple[int, int, int], ...]]:
    """The first block's 4-bit linears by group: (k in, n out, bytes of the weight dequantized to the
    compute dtype) each (vramlens.estimator.weights.dequantized_weight_bytes says when it exists)."""
    if not Wt.dequantizes_weights(w):
        return {}
    c = DTYPE_BYTES[w.quant_matmul_dtype]
    adapted_only = w.method != "full" and w.quant_targets == "adapted"
    dims = _dims_by_path(spec)
    out: dict[str, tuple[tuple[int, int, int], ...]] = {}
    for g in GROUP_ORDER:
        chosen = adapted_dims(spec, w, g, tp) if adapted_only else tuple(
            _split(g, *dims.get(path, (0, 0)), tp) for path, _ in linear_groups(spec).get(g, ()))
        out[g] = tuple((k, n, _r(c * k * n)) for k, n in chosen if k and n)
    return out


def bnb_kept_inputs(spec: ModelSpec, w: Workload, group: str, tp: int = 1) -> int:
    """How many 4-bit linears of ``group`` keep their input for backward although nothing reads it.

    bitsandbytes < 0.43.2 ``MatMul4Bit.forward`` (autograd/_functions.py, 0.42.0 lines 522-523):
    ``if any(ctx.needs_input_grad[:2]): ctx.tensors = (A, B)``: the input A of every 4-bit matmul
    whose input needs a gradient (every one after the first adapter), while its backward only
    dequantizes B (``grad_A = grad_output @ dequantize_4bit(B).t()``). 0.43.2 keeps ``(None, B)``
    (bitsandbytes #1270). ``Linear4bit.forward`` hands it ``x.to(compute_dtype)``: the input itself
    when it is in the compute dtype, else a cast of its own (Workload.bnb_inputs).
    """
    if not w.bnb_inputs or not w.training:
        return 0
    return len(dequantized_by_group(spec, w, tp).get(group, ()))


def bnb_kept_input_bytes(spec: ModelSpec, w: Workload, b: int, s: int, tp: int = 1) -> int:
    """What one block's 4-bit matmuls keep of their inputs on their autograd nodes (bnb_kept_inputs):
    the linears of a group read one tensor (q/k/v the attention norm's output, gate/up the MLP
    norm's), kept once, or under autocast once per linear (each casts it to the compute dtype).
    Autograd's backward frees saved tensors, not these: they live as long as the graph."""
    t = b * s
    c = DTYPE_BYTES[w.compute_dtype]
    total = 0
    for g, lins in dequantized_by_group(spec, w, tp).items():
        n = bnb_kept_inputs(spec, w, g, tp)
        if n and lins:
            total += (n if w.autocast else 1) * _r(c * max(k for k, _, _ in lins) * t)
    return total


def bnb_kept_head_input(spec: ModelSpec, w: Workload, b: int, s: int) -> int:
    """What a 4-bit output layer's matmuls keep on their autograd nodes under bitsandbytes < 0.43.2
    (bnb_kept_inputs): the final norm's output, b*s*h in the compute dtype, once (the chunks LitGPT's
    ``x.split(lm_head_chunk_size, dim=1)`` hands the output layer are views of it)."""
    if not w.bnb_inputs or not w.training or not Wt.head_dequantized_bytes(spec, w)[0]:
        return 0
    return _r(DTYPE_BYTES[w.compute_dtype] * spec.hidden_size * b * s)


def _split(group: str, k: int, n: int, tp: int) -> tuple[int, int]:
    return (k, max(1, n // tp)) if group in ("qkv", "mlp_in") else (max(1, k // tp), n)


def dequant_transients(spec: ModelSpec, w: Workload, t: int, tp: int = 1) -> tuple[int, int]:
    """(forward, backward) transient of the largest 4-bit matmul: the dequantized weight and the
    matmul's output (t x n), and in backward the incoming gradient (t x n) and the input's (t x k).
    Dequantized to fp16 first (``dequant_dtype="fp16"``), the fp16 weight is alive at the cast, before
    the output (or the input's gradient) is made (weights.dequant_cast_bytes)."""
    c = DTYPE_BYTES[w.compute_dtype]
    fwd = bwd = 0
    for lins in dequantized_by_group(spec, w, tp).values():
        for k, n, wb in lins:
            extra = Wt.dequant_cast_bytes(w, n, k)
            fwd = max(fwd, wb + max(_r(c * n * t), extra))
            bwd = max(bwd, wb + _r(c * n * t) + max(_r(c * k * t), extra))
    if w.method == "vera" and (names := VERA_TARGETS.get(spec.model_type)) is not None and fwd:
        # VeRA over bitsandbytes 4-bit: peft 0.21.2's Bnb4bitBackend.maybe_clone_base_result clones the base layer's
        # output (utils/quantization_utils.py) before VeRA's terms are added: the output and its clone at once
        dims = _dims_by_path(spec)
        for path, leaf in (x for g in GROUP_ORDER for x in linear_groups(spec).get(g, ())):
            if leaf in names:
                fwd = max(fwd, 2 * _r(c * dims.get(path, (0, 0))[1] * t))
    return fwd, bwd


def head_dequant_transients(spec: ModelSpec, w: Workload, b: int, s: int) -> tuple[int, int]:
    """(forward, backward) transient of a 4-bit output layer's matmuls in training, beyond the blocks'
    saved activations (the loss' saved tensors not yet made in forward, freed by the head's backward).

    bitsandbytes ``MatMul4Bit`` dequantizes the whole (V, h) weight at every call, forward and backward
    (weights.dequantized_weight_bytes). Forward, the last chunk's call (``--loss-chunks``: torchtune's
    and LitGPT's ``lm_head_chunk_size`` chunks, one call each): the earlier chunks' logits, the weight
    and the chunk's logits (or, dequantized to fp16 first, the fp16 weight at the cast). Backward, the
    first chunk's call (the losses' backwards all run before the output layer's, their nodes being
    later): every chunk's logits' gradient, the weight and the chunk's input gradient (or the fp16 weight).
    """
    wd, extra = Wt.head_dequantized_bytes(spec, w)
    if not wd:
        return 0, 0
    from vramlens.estimator.losses import seq_chunks

    c = DTYPE_BYTES[w.compute_dtype]
    size, n = seq_chunks(s, w.loss_chunks)
    lc = _r(c * spec.vocab_size * b * size)  # one chunk's logits (or their gradient)
    gi = _r(c * spec.hidden_size * b * size)  # one chunk's input gradient
    return (n - 1) * lc + wd + max(lc, extra), n * lc + wd + max(gi, extra)


def head_dequant_inference(spec: ModelSpec, w: Workload, tokens: int) -> int:
    """A quantized output layer's matmul over ``tokens`` rows without grad: the weight dequantized and the
    logits (or the intermediate at the cast: the fp16 weight, torchao float8's cast before its scale); 0 for one
    row of a 4-bit layer (bitsandbytes' ``gemv_4bit``, no dequantized weight: NF4Linear.forward in
    vramlens.trace.build; torchao's weight-only linears dequantize for one row too, weights.dequant_min_rows) or
    when the output layer's matmul does not dequantize."""
    wd, extra = Wt.head_dequantized_bytes(spec, w)
    if not wd or tokens < Wt.dequant_min_rows(w):
        return 0
    return wd + max(_r(DTYPE_BYTES[w.compute_dtype] * spec.vocab_size * tokens), extra)


def dora_identity_bytes(spec: ModelSpec, w: Workload, tp: int = 1) -> int:
    """The (k, k) identity of DoRA's largest weight-norm transient (autograd keeps it, and its autocast copy,
    for A's gradient until the forward returns: a trace tags it an activation)."""
    if w.method == "full" or not w.dora:
        return 0
    c = DTYPE_BYTES[w.compute_dtype]
    k = max((k for g in GROUP_ORDER for k, _ in adapted_dims(spec, w, g, tp)), default=0)
    return _r(DTYPE_BYTES[w.lora_dtype] * k * k) + (_r(c * k * k) if _autocast(w) else 0)


def litgpt_kv_saved(D: Dims, t: int, c: int) -> tuple[int, int]:
    """The keys and values SDPA keeps in LitGPT's attention (``Workload.fused_qkv``), in bytes.

    litgpt/model.py ``CausalSelfAttention.forward`` (5895df10, lines 215-240): ``qkv = self.attn(x)`` is
    viewed as (B, T, groups, q_per_kv + 2, hs), permuted and split; with fewer kv heads than heads, k and v
    are ``expand``ed to every head, then all three ``reshape``d to (B, heads, T, hs). Keys: a copy at every
    head under GQA, and ``apply_rope`` plus ``torch.cat`` make new keys at every head from one kv head's
    expanded view too (multi-head: new keys at the kv heads). Values: a copy at every head under GQA; under
    multi-head or one kv head the reshape is a view, and the value SDPA keeps holds the fused output
    (t x (heads + 2 kv heads) x hs) alive.
    """
    k = _r(c * (D.a if D.kv != D.a else D.kv) * D.d * t)
    if D.kv not in (1, D.a):
        return k, _r(c * D.a * D.d * t)
    return k, _r(c * (D.a + 2 * D.kv) * D.d * t)


def delta_dtype(w: Workload) -> str:
    """dtype of the delta weight (LoHa, LoKr) or rotation (OFT) the adapted linear's matmul keeps, and of the input
    copy it keeps: under autocast (``--amp`` over fp32 weights) the autocast dtype, else the factors' (``lora_dtype``).
    LoHa: ``HadaWeight.forward`` (an autograd.Function without ``custom_fwd``, src/peft/tuners/loha/layer.py in peft
    0.21.2) runs its factor products under the caller's autocast, and ``_cast_input_dtype`` casts the input to the
    product's dtype. LoKr: ``F.linear`` (autocast) casts the fp32 ``torch.kron`` delta and the fp32 input, and
    ``lokr_w2_a @ lokr_w2_b`` is autocast too. OFT: the einsum (autocast) casts the input and R."""
    if w.method in ("loha", "oft", "lokr") and w.amp is not None and w.autocast:
        return w.amp
    return w.lora_dtype


def delta_saved(spec: ModelSpec, w: Workload, t: int) -> int:
    """What LoHa or LoKr keeps for backward in one block of t tokens, per adapted (n out, k in) linear
    (src/peft/tuners/loha/layer.py and lokr/layer.py, the same at huggingface/peft d787f51b and 505e6fd6 and in peft
    0.21.2).

    ``Linear._get_delta_activations`` builds the delta weight (delta_transients) and runs
    ``F.linear(x.to(fp32), delta_weight)`` (``_cast_input_dtype`` to the fp32 factors' dtype): the matmul keeps the
    fp32 copy of the input (t x k) for the delta's gradient and the fp32 delta itself (n x k) for the input's
    gradient, until the block's backward. ``result + delta_out`` and ``.to(previous_dtype)`` keep nothing. When the
    activations are already fp32 there is no copy: the linears of one group keep the input they share, once. In the
    first block the attention's input projections read a tensor that needs no gradient, so they keep no delta
    (untracked_before_first_adapter). LoHa's ``HadaWeight`` (an autograd.Function) saves only its factors; LoKr's
    ``torch.kron(w1, w2)`` is a broadcast ``mul`` of views that keeps both, so a w2 built as ``w2_a @ w2_b`` (b x d)
    is kept too, in every block.
    """
    a = DTYPE_BYTES[delta_dtype(w)]
    dims = delta_dims(spec, w)
    # the activations' dtype (fp32 under autocast over fp32 weights): an input already in the delta's dtype is kept
    # once per group, a cast one per linear
    if a == (4 if w.run_dtype == "fp32" else DTYPE_BYTES[w.compute_dtype]):
        inputs = sum(_r(a * k * t) for g, k in {(g, k) for g, _, k in dims})
    else:
        inputs = sum(_r(a * k * t) for _, _, k in dims)
    if w.method == "oft":
        return inputs + sum(_oft_kept(w, k) for _, _, k in dims)
    if w.method == "boft":
        c = DTYPE_BYTES[w.compute_dtype]
        shared = sum(_r(c * k * t) for g, k in {(g, k) for g, _, k in dims})
        return shared + sum(_boft_kept(w, n, k, t) for _, n, k in dims)
    return inputs + sum(_r(a * n * k) + _lokr_w2_built(w, n, k) for _, n, k in dims)


#: What OFT keeps of its rotation per adapted linear, in (in // b, b, b) fp32 tensors (src/peft/tuners/oft/layer.py
#: ``OFTRotationModule._cayley_batch`` at d787f51b, the same in peft 0.21.2, with peft's default
#: use_cayley_neumann=True, num_cayley_neumann_terms=5): the skew-symmetric Q and Q^2 and Q^3, which the three
#: ``bmm``s of the Neumann series keep (Q^4 is added into R and freed), and R itself, which the einsum's ``bmm`` keeps
#: for the input's gradient (not in the first block, whose input needs none). The einsum keeps the input, the
#: ``x.to(fp32)`` copy (delta_saved); the frozen linear keeps nothing of its rotated bf16 input.
OFT_SAVED_BLOCKS = 4

#: The backward of that Neumann series (autograd runs it before ``x.to(fp32)``'s backward, made earlier, so the
#: input's fp32 gradient waits beside it): R's gradient scaled by the ``alpha=2.0`` of the in-place adds (``mul``),
#: the ``bmm``s' input gradients (three alive at once) and their sum into Q_skew's gradient (``add``): five
#: (in // b, b, b) tensors in R's dtype at its peak; traced (peft 0.21.2, ``_cayley_batch``).
OFT_CAYLEY_BACKWARD_BLOCKS = 5


def _boft_kept(w: Workload, n: int, k: int, t: int) -> int:
    """What BOFT keeps per adapted (n out, k in) linear besides the input (src/peft/tuners/boft/layer.py
    ``Linear.forward`` at d787f51b, the same in peft 0.21.2; boft_n_butterfly_factor 1, no CUDA extension:
    ``torch.block_diag``). Three (k, k) matrices in the compute dtype: ``self.boft_P.to(x)``, the host permutation
    matrix copied to the GPU, kept by both ``bmm``s; ``torch.eye`` (the initial ``boft_rotation``), kept by
    ``butterfly_oft_mat @ boft_rotation``; and that product, the rotation R, kept by ``x @ R`` for the input's gradient
    (not in the first block). The frozen linear's output (t x n), kept by ``result * boft_scale`` for the scale's
    gradient; the fp32 (n, 1) scale and the (n, 1) ones it multiplies. ``cayley_batch``'s ``linalg.solve`` keeps
    I + S, its LU factors and solution (k / b blocks of b x b, fp32) and the int32 pivots. ``x @ R`` keeps x (the
    input, shared by the group's linears: delta_saved)."""
    c = DTYPE_BYTES[w.compute_dtype]
    bs = w.boft_block_size
    return (3 * _r(c * k * k) + _r(c * n * t) + _r(4 * n) + _r(c * n)
            + 3 * _r(4 * k * bs) + _r(4 * k))


def _oft_blocks(w: Workload, k: int, dtype: str | None = None) -> int:
    """Bytes of one (in // b, b, b) OFT tensor of a linear with k inputs (models.oft_block), in the factors' dtype or
    ``dtype``."""
    return _r(DTYPE_BYTES[dtype or w.lora_dtype] * k * oft_block(k, w.oft_block_size))


#: Under autocast over fp32 weights, what OFT keeps of its rotation in the half dtype: each of the Neumann series'
#: three ``bmm``s casts the fp32 skew-symmetric Q again (a non-leaf: autocast caches no cast of it), the first one
#: twice (``bmm(Q_skew, Q_skew)``), and keeps its casts with the half Q^2 and Q^3 it multiplies: six; and the einsum's
#: half cast of the fp32 R (not in the first block). R itself stays fp32 (built by in-place adds onto an fp32 eye).
OFT_AMP_SAVED_BLOCKS = 7


def _oft_kept(w: Workload, k: int) -> int:
    """What OFT keeps of its rotation per adapted linear with k inputs (OFT_SAVED_BLOCKS, OFT_AMP_SAVED_BLOCKS)."""
    if delta_dtype(w) != w.lora_dtype:
        return OFT_AMP_SAVED_BLOCKS * _oft_blocks(w, k, delta_dtype(w))
    return OFT_SAVED_BLOCKS * _oft_blocks(w, k)


def _lokr_w2_built(w: Workload, n: int, k: int) -> int:
    """Bytes of the (b, d) w2 LoKr builds as ``lokr_w2_a @ lokr_w2_b`` and torch.kron keeps (0 when w2 is trained
    whole, or for LoHa)."""
    if w.method != "lokr":
        return 0
    _, (b, d), low_rank = lokr_shapes(n, k, w.lora_rank, w.decompose_factor)
    # ``lokr_w2_a @ lokr_w2_b`` runs under autocast too (delta_dtype)
    return _r(DTYPE_BYTES[delta_dtype(w)] * b * d) if low_rank else 0


def delta_dims(spec: ModelSpec, w: Workload) -> tuple[tuple[str, int, int], ...]:
    """(group, n out, k in) of the first block's linears LoHa adapts (lora_targets); empty for other methods."""
    if w.method not in DELTA_METHODS:
        return ()
    targets = tuple(w.lora_targets)
    dims = _dims_by_path(spec)
    out = []
    for g in GROUP_ORDER:
        for path, leaf in linear_groups(spec).get(g, ()):
            if "all-linear" in targets or leaf in targets:
                k, n = dims.get(path, (0, 0))
                out.append((g, n, k))
    return tuple(out)


#: n x k fp32 tensors alive while the delta is built in forward, and in its backward (delta_transients).
#: LoHa (loha/layer.py ``HadaWeight``): ``((w1a @ w1b) * (w2a @ w2b)) * scale`` holds both products and their
#: Hadamard product before the scaled one (the kept delta) replaces them: 3, none of them kept; its backward holds the
#: delta's gradient (held by autograd while the function runs), ``grad_out * scale``, ``w2a @ w2b`` with its product
#: ``temp``, then ``w1a @ w1b`` and the second product while the first ``temp`` is still bound: 5.
#: LoKr (lokr/layer.py ``make_kron``): ``torch.kron(w1, w2)`` (one n x k) then ``rebuild * scale``, the kept delta:
#: 2, one of them kept; in backward the scalar multiplication's gradient (the delta's gradient freed once it
#: returns), then kron's ``mul`` backward computes both full-size input gradients before autograd sums each to its
#: input's shape: 3 (the incoming one and two products).
DELTA_BUILD = {"loha": (3, 0), "lokr": (2, 1)}  # (alive at the forward's peak, of which the kept delta)
DELTA_BACKWARD = {"loha": 5, "lokr": 3}


@dataclass(frozen=True, slots=True)
class DeltaTransients:
    """LoHa's delta weight built inside a block (see delta_transients).

    forward, backward: what the largest adapted linear adds above the activations counted whole (all blocks
        saved), the last block's own saved tensors freed or not yet made at that point taken off.
    temporary: the transient itself, the larger of the forward's and the backward's.
    """

    forward: int
    backward: int
    temporary: int


def delta_transients(spec: ModelSpec, w: Workload, b: int, s: int, block: int) -> DeltaTransients:
    """LoHa's or LoKr's transients in the last block, ``block`` its saved bytes (DELTA_BUILD, DELTA_BACKWARD: n x k
    fp32 tensors of the largest adapted linear, after ``F.linear``'s backward freed its saved input copy and delta).

    An attention input projection runs when only the block's input norm has saved anything (forward) or is left
    (backward); for a later linear the rest of the block is counted alive.
    """
    dims = delta_dims(spec, w)
    if not dims:
        return DeltaTransients(0, 0, 0)
    if w.method == "oft":
        return _oft_transients(spec, w, b * s, block, dims)
    if w.method == "boft":
        return _boft_transients(spec, w, b * s, block, dims)
    built, kept = DELTA_BUILD[w.method]
    a = DTYPE_BYTES[delta_dtype(w)]
    f = DTYPE_BYTES[w.lora_dtype]
    c = DTYPE_BYTES[w.compute_dtype]
    t = b * s
    norm = _norm_saved(norm_kind(spec), spec.hidden_size, t, 4 if w.run_dtype == "fp32" else c, c, 0, False, False)
    fwd = bwd = tmp = 0
    for g, n, k in dims:
        wd = _r(a * n * k)  # the delta F.linear keeps
        wf = _r(f * n * k)  # one n x k in the factors' dtype
        if w.method == "loha":
            # under autocast: HadaWeight builds the delta in the autocast dtype; its backward (outside autocast) holds
            # the delta's gradient and its scaled copy in that dtype, the products and temps in the factors' (fp32:
            # the type promotion)
            build, kept_b, back = built * wd, kept * wd, 2 * wd + 3 * wf
        else:
            # LoKr: torch.kron (not an autocast op) of the fp32 w1 and w2 and its scaled copy in fp32 (the factors'
            # dtype); under autocast F.linear keeps its half cast of the scaled delta, made after (counted in the
            # block's figure, so taken off as the kept scaled delta is without autocast), and its backward casts the
            # delta's gradient back to fp32 before kron's: three fp32 as without
            build, kept_b, back = built * wf, kept * wd, DELTA_BACKWARD[w.method] * wf
        fwd = max(fwd, build - (block - norm if g == "qkv" else kept_b))
        gone = block - norm if g == "qkv" else _r(a * k * t) + wd  # the block's tensors not alive then
        bwd = max(bwd, back - gone)
        tmp = max(tmp, build - kept_b, back)
    return DeltaTransients(max(0, fwd), max(0, bwd), tmp)


def _oft_transients(spec: ModelSpec, w: Workload, t: int, block: int,
                    dims: tuple[tuple[str, int, int], ...]) -> DeltaTransients:
    """OFT's transients around the rotation of the largest adapted input (src/peft/tuners/oft/layer.py
    ``OFTRotationModule.forward`` at d787f51b). Forward: the einsum's ``bmm`` output in its (blocks, t, b) layout and
    the contiguous copy einsum returns (two fp32 t x k), then ``.to(bf16)`` of the copy once the first is freed.
    Backward: two fp32 t x k (the rotated input's gradient in the einsum's layout and the input's gradient) and R's
    gradient (blocks, b, b); traced. The block's tensors saved after the rotation are freed by then (an attention input
    projection) or all counted alive (a later linear)."""
    a = DTYPE_BYTES[delta_dtype(w)]
    c = DTYPE_BYTES[w.compute_dtype]
    norm = _norm_saved(norm_kind(spec), spec.hidden_size, t, 4 if w.run_dtype == "fp32" else c, c, 0, False, False)
    fwd = bwd = tmp = 0
    for g, _, k in dims:
        # under autocast the half einsum output is copied back to the fp32 input's dtype (``.to(required_dtype)``);
        # the attention's and the MLP's output projections read a half input, which ``_cast_input_dtype`` first
        # copies to the fp32 factors' dtype (kept by nothing: the einsum keeps its own half cast)
        f = _r(a * k * t) + _r((4 if w.autocast else a) * k * t)
        if w.autocast and g in ("attn_out", "mlp_out"):
            f += _r(4 * k * t)
        back = 2 * _r(a * k * t) + _oft_blocks(w, k)
        # then the Cayley series' backward beside the input's gradient: a temporary of its own, the larger one only at
        # a few tokens (4 R > t x k + R, R = (in // b, b, b)); counted in the temporaries, while the backward's
        # figure (bwd) keeps the einsum's, which is the larger at any real token count (the einsum's saved input
        # copy and R are freed by the time the series' backward runs)
        cayley = _r(a * k * t) + OFT_CAYLEY_BACKWARD_BLOCKS * _oft_blocks(w, k)
        here = _r(a * k * t) + _oft_kept(w, k)  # what the rotation keeps
        fwd = max(fwd, f - (block - norm - here) if g == "qkv" else f)
        bwd = max(bwd, back - (block - norm) if g == "qkv" else back)
        tmp = max(tmp, f, back, cayley)
    return DeltaTransients(max(0, fwd), max(0, bwd), tmp)


def _boft_transients(spec: ModelSpec, w: Workload, t: int, block: int,
                     dims: tuple[tuple[str, int, int], ...]) -> DeltaTransients:
    """BOFT's transients building the (k, k) rotation of the largest adapted linear (src/peft/tuners/boft/layer.py
    ``Linear.forward`` at d787f51b; traced). Forward: ``torch.block_diag``'s fp32 (k, k) and its ``.to(x)`` copy, then
    that copy with the two ``bmm`` outputs (the locals hold them until forward returns): three (k, k) in the compute
    dtype at most, beside the kept P and eye, before R (_boft_kept). Backward: the rotation's gradient through ``select``'s backward
    and the two ``bmm``s, and its fp32 cast for ``block_diag``'s backward: as much again, with the input's gradient
    (t x k)."""
    c = DTYPE_BYTES[w.compute_dtype]
    norm = _norm_saved(norm_kind(spec), spec.hidden_size, t, 4 if w.run_dtype == "fp32" else c, c, 0, False, False)
    fwd = bwd = tmp = 0
    for g, _, k in dims:
        f = max(_r(4 * k * k) + _r(c * k * k), 3 * _r(c * k * k))
        back = f + _r(c * t * k)
        # P and eye exist by then, R (counted in the block's figure) is made after: two of the three kept (k, k)
        fwd = max(fwd, f + 2 * _r(c * k * k) - (block - norm) if g == "qkv" else f - _r(c * k * k))
        # x @ R's and R @ eye's backward have freed R and eye when the bmm's backward peaks
        bwd = max(bwd, back - (block - norm) if g == "qkv" else back - 2 * _r(c * k * k))
        tmp = max(tmp, f, back)
    return DeltaTransients(max(0, fwd), max(0, bwd), tmp)


def ia3_saved(spec: ModelSpec, w: Workload, t: int) -> int:
    """IA3's own activations in one block of t tokens (src/peft/tuners/ia3/layer.py ``Linear.forward``, the
    same at huggingface/peft d787f51b and in peft 0.21.2).

    An output-scaled linear (Llama's k_proj and v_proj) returns ``(result * ia3_scaling).to(result.dtype)``:
    the multiplication keeps the frozen linear's output (compute dtype, t x n) for the vector's gradient and
    ``ia3_scaling`` (``1 * ia3_l.flatten()``: a new (n,) tensor in the vectors' dtype) for the output's. An
    input-scaled one (the feedforward down_proj) runs the frozen linear on ``(x.to(dtype) * ia3_scaling)
    .to(x.dtype)``: the multiplication keeps its input in the vectors' dtype (fp32 under peft's
    autocast_adapter_dtype: a copy; the input itself when the dtypes agree) and the (k,) scaling. The frozen
    linears keep nothing of their inputs.
    """
    if w.method != "ia3" or (targets := IA3_TARGETS.get(spec.model_type)) is None:
        return 0
    c = DTYPE_BYTES[w.compute_dtype]
    vb = DTYPE_BYTES[vector_dtype(w)]
    dims = _dims_by_path(spec)
    total = 0
    for g in GROUP_ORDER:
        for path, leaf in linear_groups(spec).get(g, ()):
            k, n = dims.get(path, (0, 0))
            if leaf in targets.scales_output:
                total += _r(c * n * t) + _r(vb * n)
            elif leaf in targets.scales_input:
                total += _r(vb * k * t) + _r(vb * k)
    return total


def vera_saved(spec: ModelSpec, w: Workload, t: int) -> int:
    """VeRA's own activations in one block of t tokens (src/peft/tuners/vera/layer.py ``Linear.forward``, the same at
    huggingface/peft d787f51b and in peft 0.21.2): ``result + lambda_b * F.linear(lambda_d * F.linear(dropout(x),
    sliced_A), sliced_B)`` on x cast to the vectors' dtype. The frozen projections are buffers, so neither
    ``F.linear`` keeps its input (mm saves ``self`` only for ``mat2``'s gradient): the fp32 copy of x is freed in
    forward. ``lambda_d * h`` keeps h, A's (t, r) output, for lambda_d's gradient; ``lambda_b * h`` keeps h, B's
    (t, out) output, for lambda_b's; both in the vectors' dtype (and the vectors themselves, parameters)."""
    if w.method != "vera" or (names := VERA_TARGETS.get(spec.model_type)) is None:
        return 0
    vb = DTYPE_BYTES[vector_dtype(w)]
    dims = _dims_by_path(spec)
    total = 0
    for g in GROUP_ORDER:
        for path, leaf in linear_groups(spec).get(g, ()):
            if leaf in names:
                n = dims.get(path, (0, 0))[1]
                total += _r(vb * w.vera_rank * t) + _r(vb * n * t)
    return total


def adalora_product(w: Workload, k: int) -> int:
    """AdaLoRA's ``dropout(x) @ (lora_A * lora_E).T @ lora_B.T`` (src/peft/tuners/adalora/layer.py SVDLinear.forward,
    peft 0.21.2 and d787f51b) on an adapted linear of k inputs: the product (r, k), a new tensor in the adapters'
    dtype, is kept by the matmul for its input's gradient (not in the first block, whose input needs none); the
    rest is LoRA's (the fp32 copy of x, A's (t, r) output). ``* scaling / ranknum`` keeps nothing (ranknum is a
    frozen parameter). AdaLoraModel.forward's orthogonal regularisation runs only under a task-typed PeftModel
    (PeftModelForCausalLM calls it; PEFT's MetaMathQA config has task_type None, so PeftModel.forward calls the
    transformers model directly): two (r, r) fp32 tensors per adapted linear there, not counted."""
    return _r(DTYPE_BYTES[w.lora_dtype] * w.lora_rank * k) if w.method == "adalora" else 0


def _lora_saved(spec: ModelSpec, w: Workload, D: Dims, t: int, c: int, tp: int = 1) -> int:
    """LoRA's own activations in one block: B keeps A's output (t x r) per adapted linear, A keeps
    a private copy of its input when it makes one (see lora_casts_input); with lora_dropout each
    adapter keeps its bool mask too (CUDA's ``native_dropout``); DoRA adds _dora_saved."""
    if w.method == "full":
        return 0
    lb = DTYPE_BYTES[w.lora_dtype]
    a_out = c if _autocast(w) else lb  # A's output: autocast's half, else the adapters' dtype
    private = lora_casts_input(w) and lora_a_saves_input(w)
    total = 0
    for g in GROUP_ORDER:
        dims = adapted_dims(spec, w, g, tp)
        if w.fused_qkv and g == "qkv" and dims:
            total += _litgpt_qkv_lora_saved(w, dims[0][0], litgpt_qkv_parts(spec, w, tp), t, a_out, private)
            continue
        for k, n in dims:
            total += _r(a_out * w.lora_rank * t)
            if private:
                total += _r(lb * k * t)  # the input cast to the adapters' dtype, or its dropped copy
            if w.lora_dropout > 0:
                total += _r(k * t)
            if w.dora:
                total += _dora_saved(w, k, n, t, c, a_out)
            if w.method == "adalora":
                total += adalora_product(w, k)
    return total


def litgpt_qkv_parts(spec: ModelSpec, w: Workload, tp: int = 1) -> tuple[int, ...]:
    """The output widths of the q, k and v parts LitGPT's LoRAQKVLinear adapts (``Workload.fused_qkv``), split
    like Megatron TP: the parts the targets name of a fused linear (GPT-NeoX's, Falcon's ``query_key_value``:
    inventory.qkv_slices), or the adapted ones of a model whose q, k and v are separate linears."""
    fused = tuple(_fused_qkv_linears(spec).values())
    if fused:
        on = qkv_slices(spec, fused[0], tuple(w.lora_adapted))
        return tuple(max(1, n // tp) for n, part in zip(qkv_slice_widths(spec), on) if part)
    return tuple(n for _, n in adapted_dims(spec, w, "qkv", tp))


def _litgpt_qkv_lora_saved(w: Workload, k: int, parts: tuple[int, ...], t: int, a_out: int, private: bool) -> int:
    """LitGPT's LoRAQKVLinear (lit_gpt/lora.py at 8641822 lines 351-380, litgpt/lora.py at 5895df10 lines
    396-440: ``forward``, ``conv1d`` and ``zero_pad``): one adapter over the adapted q, k and v (``parts``, their
    output widths) of the fused linear of k inputs. ``F.linear(self.lora_dropout(x), self.lora_A)`` drops the
    input once (the dropped copy and its mask) and makes A's output, t x (r per part), which the grouped
    ``conv1d`` keeps; unless q, k and v are all adapted (``if all(self.enable_lora): return x``), ``zero_pad``
    scatters B's output into the fused width with ``index_copy``, whose backward keeps its source (torch's
    derivatives.yaml: ``grad.index_select(dim, index).expand_as(source)``), ``x.reshape(-1, sum(qkv_shapes))`` of
    the transposed output, a copy: t x the parts' widths, and its index, ``torch.tensor(self.lora_ind)``, made in
    every forward: int64, one per adapted output."""
    lb = DTYPE_BYTES[w.lora_dtype]
    total = _r(a_out * w.lora_rank * len(parts) * t)
    if private:
        total += _r(lb * k * t)
    if w.lora_dropout > 0:
        total += _r(k * t)
    if len(parts) < 3:
        total += _r(lb * sum(parts) * t) + _r(8 * sum(parts))
    return total


def _lora_cross_saved(spec: ModelSpec, w: Workload, t: int, t_kv: int, c: int, tp: int = 1) -> int:
    """A decoder block's cross-attention adapters (_lora_saved's terms): its projections are named as the
    self-attention's, for which the encoder's first block stands in linear_groups; the query and output
    projections see the decoder's t tokens, the key and value the encoder's t_kv (Whisper's
    ``encoder_attn.v_proj`` keeps an fp32 copy of the whole encoder output under fp32 adapters)."""
    if w.method == "full":
        return 0
    lb = DTYPE_BYTES[w.lora_dtype]
    a_out = c if _autocast(w) else lb
    private = lora_casts_input(w) and lora_a_saves_input(w)
    dims = _dims_by_path(spec)
    total = 0
    for g in ("qkv", "attn_out"):
        for path, leaf in linear_groups(spec).get(g, ()):
            if not _adapted(w, leaf) and not any(path.endswith("." + x) for x in w.lora_adapted):
                continue
            k = dims.get(path, (0, 0))[0]
            k = k if g == "qkv" else max(1, k // tp)
            n_tok = t_kv if g == "qkv" and not leaf.startswith("q") else t
            total += _r(a_out * w.lora_rank * n_tok) + (_r(lb * k * n_tok) if private else 0)
            if w.lora_dropout > 0:
                total += _r(k * n_tok)
    return total


def sdpa_core(spec: ModelSpec, w: Workload, *, cross: bool) -> str:
    """The attention that runs: ``w.attention``, except that a model without an SDPA path runs
    eager, and SDPA given a mask which requires grad runs the math kernel, which keeps what eager
    attention keeps.

    The fused kernels refuse such a mask (sdp_utils_cpp.h ``check_attn_mask_shape``). T5's
    relative position bias is that mask: in self-attention when the bias embedding trains (full
    fine-tuning; under LoRA it is frozen); in cross-attention the zero bias T5Attention makes
    requires grad only under gradient checkpointing. Seen on an H200 (torch 2.11):
    validation/events/cuda-h200-t5.json.gz.
    """
    if not spec.attention_interface:
        return "eager"  # the model has no SDPA path (DeBERTa-v2): transformers runs it eager
    if w.attention != "sdpa" or spec.position != "relative" or not w.training:
        return w.attention
    grad_mask = w.checkpointing == "full" if cross else w.method == "full"
    return "eager" if grad_mask else w.attention


def output_copied(spec: ModelSpec, w: Workload) -> bool:
    """Whether the attention hands a fused SDPA kernel contiguous head-major q, k and v, so that the kernel's output
    comes back transposed and the transpose back is a copy (ModelSpec.attention_output_copy, or an older release's
    ModelSpec.legacy_output_copy_before). Flash writes its output in the query's layout (``empty_like`` of the
    transposed query); the memory-efficient kernel, which a padded batch's mask selects (:func:`padded_mask`),
    writes (b, s, a, d) whatever the query's layout, and the transpose back is then a view."""
    if sdpa_masked(spec, w) and w.attention == "sdpa":
        return False
    return spec.attention_output_copy or w.runs_before(spec.legacy_output_copy_before)


def layer_activations(spec: ModelSpec, w: Workload, b: int, s: int, *, cross_s: int = 0, tp: int = 1,
                      layer: int | None = None, local: bool = False) -> LayerActivations:
    """Saved-for-backward bytes of one transformer block for a micro-batch of b sequences of s tokens.

    ``layer`` picks the block's kind where blocks differ (layer_kinds): a sliding-window block
    (ModelSpec.sliding_layer_ids), a dense block of an MoE model. ``local`` marks a sliding-window
    block without naming it. Under SDPA a sliding block gets an explicit mask when the window does
    not cover the sequence (see :func:`sliding_mask_bytes`).
    """
    D = rank_dims(spec, tp)
    t = b * s
    sp = tp  # sequence parallel: per-token tensors outside the TP regions are split too
    c = DTYPE_BYTES[w.compute_dtype]
    autocast = w.autocast
    r = 4 if w.run_dtype == "fp32" else c
    casts = autocast
    p_attn, p_hid = dropout_probs(spec)
    full = w.method == "full"
    norms = w.norms_train  # LN tuning trains the block's norms (copies of them) and nothing else
    kind = norm_kind(spec)
    # linears that keep their input (their weight trains); under LoRA with half weights and no
    # autocast the adapters keep an fp32 copy instead (in _lora_saved), not the input itself
    own = 0 if (lora_casts_input(w) or not lora_a_saves_input(w)) else 1
    qkv_consumers = trained_linears(spec, w, "qkv") * own
    if spec.mla is not None:  # the block's input feeds only the first projections of q and the latent
        first = ("q_proj",) if spec.mla.q_lora_rank is None else ("q_a_proj",)
        qkv_consumers = sum(trains(w, x) for x in (*first, "kv_a_proj_with_mqa")) * own
    mlp_consumers = trained_linears(spec, w, "mlp_in") * own
    attn_out_saves = trained_linears(spec, w, "attn_out") * own > 0
    mlp_out_saves = trained_linears(spec, w, "mlp_out") * own > 0
    if w.bnb_inputs and spec.mla is None:
        # an old bitsandbytes' 4-bit matmuls keep their input too (bnb_kept_inputs): the tensor the
        # trained linears keep (one more under autocast, where each linear keeps its own cast)
        kq, km = bnb_kept_inputs(spec, w, "qkv", tp), bnb_kept_inputs(spec, w, "mlp_in", tp)
        qkv_consumers = qkv_consumers + kq if casts else max(qkv_consumers, min(kq, 1))
        mlp_consumers = mlp_consumers + km if casts else max(mlp_consumers, min(km, 1))
        attn_out_saves = attn_out_saves or bnb_kept_inputs(spec, w, "attn_out", tp) > 0
        mlp_out_saves = mlp_out_saves or bnb_kept_inputs(spec, w, "mlp_out", tp) > 0
    total = _lora_saved(spec, w, D, t, c, tp) + ia3_saved(spec, w, t) + vera_saved(spec, w, t) + delta_saved(spec, w, t)
    quad = 0

    # --- attention input norm (pre-norm); post-norm blocks' linears keep the block input itself ----
    if spec.norm_placement == "post":
        total += _norm_saved(kind, D.h, t, r, c, qkv_consumers, casts, norms) - _norm_saved(kind, D.h, t, r, c, 0,
                                                                                          casts, norms)
    else:
        total += _sp_norm_saved(kind, D.h, t, r, c, qkv_consumers, casts, norms, sp)

    attention = sdpa_core(spec, w, cross=False)
    local = local or (layer is not None and layer in spec.sliding_layer_ids)
    nope = layer is not None and layer in spec.nope_layer_ids  # a block without rotary (Llama 4)
    # a sliding block whose window is shorter than the sequence; under SDPA it takes an explicit mask
    masked = local and spec.sliding_window is not None and s > spec.sliding_window
    mask = sliding_mask_bytes(spec, w, b, s) if local and attention == "sdpa" else 0
    # prefix tuning: every block's keys and values run over the n virtual tokens too (masks.kv_prefix)
    S = s + kv_prefix(w)
    if sdpa_masked(spec, w) and attention == "sdpa" and not (w.checkpointing == "selective"
                                                             and spec.attention_interface):
        # a padded batch (or a KV prefix): every block, global or sliding, gets the mask, and SDPA keeps its
        # additive copy (eager attention gets the mask it gets unpadded; selective recomputation's checkpoint
        # around the attention function keeps k and v as the projections made them, and recomputes repeat_kv and
        # the conversion)
        masked = True
        mask = _sliding_mask_saved(b, s, c, S)
    o_copied = False
    if spec.mla is not None:
        t_mla, q_mla = _mla_saved(spec, w, D, b, s, c, casts, full, own, attention, attn_out_saves, mask > 0)
        total += t_mla
        quad += q_mla
        q = 0
    else:
        # --- q, k, v (rotary makes new tensors; learned positions keep the projections' outputs) ----
        q = _r(c * D.a * D.d * t)
        kv = _r(c * D.kv * D.d * t)
        if S != s:
            # the cache's torch.cat of the prefix and the block's own keys (values): (b, kv, S, d), what attention
            # reads; the rotated keys and the projected values it copied are freed
            kv = _r(c * D.kv * D.d * b * S)
        if repeats_kv(spec, attention, masked, c):
            # eager (and SDPA with an explicit mask, which the memory-efficient kernel takes) expands GQA
            # keys/values to every head (repeat_kv); one kv head expands as a view (reshape merges a
            # size-1 dimension without copying). So does SDPA in fp32, which CUDA runs on the
            # memory-efficient kernel (flash takes fp16/bf16 only; aten/src/ATen/native/transformers/
            # cuda/sdp_utils.cpp), and that kernel has no GQA
            kv_saved = _r(c * D.a * D.d * b * S) if D.kv != D.a and (D.kv != 1 or not masked) else kv
        elif w.gqa_expand:
            # the stack copies keys and values to every head before the kernel (torchtune's
            # ``k.unsqueeze(2).expand(...).flatten(1, 2)``), and the kernel keeps the copies, not the
            # projections' outputs; one kv head flattens as a view
            kv_saved = _r(c * D.a * D.d * t) if D.kv not in (1, D.a) else kv
        else:
            kv_saved = kv
        if w.fused_qkv and attention != "eager":
            k_saved, v_saved = litgpt_kv_saved(D, t, c)
            total += q + k_saved + v_saved
        else:
            total += q + 2 * kv_saved
        # selective recomputation wraps the attention interface's function (vramlens.trace.build): its checkpoint
        # keeps the function's inputs (q, k and v's view) and recomputes the rest
        selective = w.checkpointing == "selective" and spec.attention_interface
        eager_core = attention == "eager" and not selective
        if eager_core and spec.legacy_rotary_cache_dim and c < 4 and w.runs_before(spec.legacy_buffers_before):
            # GPT-NeoX before 4.49 rotates with its fp32 cos/sin caches: q and k come out of torch.cat in fp32, and
            # eager's baddbmm keeps them so (v4.42.4 wheel, modeling_gpt_neox.py lines 247-249 and 261-281; SDPA
            # casts them back first, lines 550-554)
            total += _r(4 * D.a * D.d * t) - q + _r(4 * D.kv * D.d * t) - kv
        if nope and spec.attention_temperature:
            # Llama 4's NoPE blocks: ``query_states * attn_scales`` keeps the fp32 (b, s, 1, 1) scales
            total += _r(4 * t)
        if (spec.fused_qkv_kept and spec.position == "rotary" and not eager_core
                and not (w.fused_qkv and attention != "eager")):
            # the fused projection output: the kernel (or selective's checkpoint) keeps v's view, and so its q and
            # k parts too; eager's matmul reshapes that strided view into a copy (counted above) and keeps the copy
            total += q + kv
        if spec.qk_norm == "l2":
            # Llama4TextL2Norm on the rotated q and k of a rotary block: ``x.float() * rsqrt(mean(x^2) + eps)``
            # keeps the fp32 copy and the fp32 (t, heads, 1) rsqrt; no weight
            if not nope:
                total += _r(4 * (D.a + D.kv) * D.d * t) + _r(4 * D.a * t) + _r(4 * D.kv * t)
        elif spec.qk_norm != "none":
            # q_norm and k_norm over the projections' outputs (compute dtype); what they return goes
            # into the rotation, which keeps nothing of it
            total += _norm_saved(kind, D.a * D.d, t, c, c, 0, False, full) + _norm_saved(kind, D.kv * D.d, t, c, c, 0,
                                                                                      False, full)
        # a model computing its attention itself (DeBERTa-v2) keeps its scores under selective recomputation
        if eager_core:
            # with attention sinks (gpt-oss) the softmax runs over S + 1 columns, and the row maximum
            # subtracted first keeps its int64 indices (b, a, s, 1) for backward
            probs = b * D.a * s * (S + 1 if spec.attention_sinks else S)
            q_bytes = _softmax_saved(spec, probs, c, autocast, p_attn)
            if spec.attention_sinks:
                total += _r(8 * b * D.a * s)
            if spec.attn_softcap:
                # Gemma 2's eager_attention_forward: tanh(scores / cap) keeps its output (the division and
                # the multiplication by the cap keep nothing)
                q_bytes += _r(c * b * D.a * s * S)
            if spec.score_clamp and w.legacy_score_clamp:
                # transformers <= 4.48 OPTAttention: ``torch.max(scores + mask, finfo.min)`` before the fp32
                # softmax; maximum's backward keeps both inputs (derivatives.yaml ``maximum``: self, other),
                # the masked scores in the compute dtype and the 0-dim floor (modeling_opt.py lines 200-203 of
                # the v4.48.0 wheel)
                q_bytes += _r(c * b * D.a * s * S)
                total += _r(c)
            quad += q_bytes
            total += q_bytes
        elif attention != "eager":
            # flash / memory-efficient SDPA keep the output, the fp32 log-sum-exp (b, a, s) and the
            # philox seed and offset (one int64 each); under selective recomputation the kernel runs
            # inside torch.utils.checkpoint, which keeps its inputs (q, k, v, already counted) and
            # returns its output (the out projection keeps it): the log-sum-exp and the seed are not kept
            total += _r(c * D.a * D.d * t) + (0 if w.checkpointing == "selective" else _r(4 * b * D.a * s) + SDPA_RNG)
            if mask:  # flash-attn takes the window itself, with no mask
                total += mask
                quad += mask
            if spec.position == "relative":
                # T5: the relative position bias (plus the causal mask) becomes SDPA's additive
                # attn_mask (1, a, s, S), which the memory-efficient kernel keeps for backward
                # (transformers/integrations/sdpa_attention.py create_position_bias_mask)
                bias = _r(c * D.a * s * S)
                total += bias
                quad += bias
        if spec.rel_terms:
            rel, rel_quad = disentangled_saved(spec, w, D, b, s)
            total += rel
            quad += rel_quad
        # (fp32 runs the memory-efficient kernel, which writes (b, s, a, d) whatever the query's layout)
        o_copied = attn_out_saves and (attention == "eager" or (output_copied(spec, w) and c != 4))
        if o_copied:
            # attn_output.transpose(1, 2).contiguous(): a copy (b, s, a*d) that o_proj keeps. The fused
            # kernels (flash, memory-efficient) write their output as (b, s, a, d) and return it
            # transposed, so the transpose back is already contiguous: o_proj keeps the kernel's own
            # saved output, no copy (seen in the H200's events, validation/events/cuda-h200-bf16)
            total += _r(c * D.a * D.d * t)
    if p_hid > 0 and spec.block_dropouts >= 2:
        total += _r(D.h * t) // sp  # residual dropout mask after o_proj (BERT; DistilBERT has none)
    if spec.norm_placement != "pre":
        # a norm on the attention's output (Gemma's post_attention_layernorm, OLMo 2's): its input is
        # o_proj's output in the compute dtype, and only the residual add reads what it returns
        total += _norm_saved(kind, D.h, t, c, c, 0, False, norms) // sp

    # --- cross-attention (encoder-decoder decoder blocks) ---------------------------------------------
    if cross_s:
        total += _norm_saved(kind, D.h, t, r, c, 1 if qkv_consumers else 0, casts, norms) // sp
        cross_core = sdpa_core(spec, w, cross=True)
        total += q + 2 * _r(c * D.a * D.d * b * cross_s) + _lora_cross_saved(spec, w, t, b * cross_s, c, tp)
        if cross_core == "eager":
            probs = b * D.a * s * cross_s
            cq = _softmax_saved(spec, probs, c, autocast, p_attn)
            quad += cq
            total += cq + _r(c * D.a * D.d * t)  # the contiguous copy o keeps
        else:
            total += _r(c * D.a * D.d * t) + _r(4 * b * D.a * s) + SDPA_RNG
            if attn_out_saves and output_copied(spec, w) and c != 4:
                total += _r(c * D.a * D.d * t)  # the head-major output's copy the out projection keeps
            if spec.position == "relative":
                # T5's cross-attention bias (zeros, (1, a, s, S)) is SDPA's attn_mask, kept for backward
                total += _r(c * D.a * s * cross_s)
        if p_hid > 0:
            total += _r(D.h * t) // sp

    # --- MLP --------------------------------------------------------------------------------------
    if spec.norm_placement == "post":
        total += _norm_saved(kind, D.h, t, r, c, mlp_consumers, casts, norms) - _norm_saved(kind, D.h, t, r, c, 0,
                                                                                          casts, norms)
    elif spec.shared_block_norm:
        # the attention's norm output feeds the MLP too: only what the MLP's own consumers add (its output, when
        # no attention linear keeps it already; one cast per consumer under autocast)
        total += (_sp_norm_saved(kind, D.h, t, r, c, qkv_consumers + mlp_consumers, casts, norms, sp)
                  - _sp_norm_saved(kind, D.h, t, r, c, qkv_consumers, casts, norms, sp))
    else:
        total += _sp_norm_saved(kind, D.h, t, r, c, mlp_consumers, casts, norms, sp)
        if spec.parallel_norms_share_input and kind == "layernorm":
            total -= _r(r * D.h * t) // sp  # its input is the block's, which the attention's norm keeps
    dense = spec.is_moe and layer is not None and layer in spec.dense_layer_ids
    # fused MoE experts are not nn.Linear (not in linear_groups): they train only in full fine-tuning
    total += _mlp_saved(spec, D, t, c, (full and own > 0) if (spec.is_moe and not dense) else mlp_out_saves, autocast,
                        dense=dense, shared_out_saved=mlp_out_saves)
    if spec.norm_placement != "pre":
        total += _norm_saved(kind, D.h, t, c, c, 0, False, norms) // sp  # the norm on the MLP's output
    if p_hid > 0 and spec.block_dropouts >= 1:
        total += _r(D.h * t) // sp
    # --fp8 under TP: torchao's float8 styles keep float8 copies of the matmul inputs (vramlens.estimator.fp8)
    total += F8.tp_saved_delta(spec, w, b, s, tp, o_input_copied=o_copied)
    return LayerActivations(saved=total, quadratic=quad, checkpoint_input=_r(r * D.h * t) // sp)


def sliding_mask_bytes(spec: ModelSpec, w: Workload, b: int, s: int) -> int:
    """The mask a sliding-window block hands SDPA, as the kernel keeps it for backward.

    transformers builds a bool b x 1 x s x s mask for the sliding blocks
    (masking_utils.create_bidirectional_sliding_window_mask; none for the global blocks of an
    unpadded batch), and SDPA converts it to an additive mask in the query's dtype in every call
    (sdp::convert_boolean_attn_mask), which the memory-efficient kernel keeps for backward. No
    mask is made when s is below the window on either side (masking_utils._ignore_bidirectional_mask_sdpa:
    ``kv_length < local_attention_size``). A decoder's sliding causal mask
    (masking_utils.create_sliding_window_causal_mask) is needed once the window is shorter than the
    sequence; SDPA then cannot run flash and the memory-efficient kernel takes it.
    """
    window = spec.sliding_window or 0
    if not spec.n_sliding_layers or s < window or (spec.kind == "decoder" and s == window):
        return 0
    return _sliding_mask_saved(b, s, DTYPE_BYTES[w.compute_dtype])


def disentangled_saved(spec: ModelSpec, w: Workload, D: Dims, b: int, s: int) -> tuple[int, int]:
    """(bytes, of which quadratic in s) DeBERTa-v2's disentangled attention keeps beyond eager attention.

    transformers/models/deberta_v2/modeling_deberta_v2.py ``DisentangledSelfAttention``, per block,
    with R = ``rel_span`` relative-position rows (2 x the buckets) and c the compute dtype:

    * the relative embeddings through ``pos_dropout``: in full fine-tuning a bool mask and the
      dropped R x h (kept once by the position projections, or one cast each under autocast);
      under LoRA they need no gradient, and only an adapted projection's lora_A keeps its input;
    * each term's position projection, made contiguous and repeated over the batch
      (``transpose_for_scores(...).repeat``): (b*a, R, d) kept by its ``bmm``;
    * each term's raw scores ``bmm(q or k, pos^T)`` (b*a, s, R), which ``torch.gather`` keeps
      (GatherBackward0 saves ``self``), and its int64 index (``clamp(relative_pos + span)``, 1 x s x s);
    * ``key_layer.transpose(-1, -2) / scale``, a copy of k kept by the content ``bmm``;
    * the bool mask ``~attention_mask`` (b x 1 x s x s) that ``masked_fill`` keeps: the model makes
      a b x s mask of ones when none is given (DebertaV2Model.forward) and expands it per block.
    """
    c = DTYPE_BYTES[w.compute_dtype]
    autocast = w.autocast
    r = 4 if w.run_dtype == "fp32" else c
    R = spec.rel_span
    n = len(spec.rel_terms)
    _, p_hid = dropout_probs(spec)
    total = _r(c * D.a * D.d * b * s)  # k / scale
    if w.method == "full":
        if p_hid > 0:
            total += _r(R * D.h)  # pos_dropout's mask
        total += n * _r(c * R * D.h) if autocast else _r((r if p_hid > 0 else c) * R * D.h)
    else:
        adapted = sum(1 for leaf in position_projections(spec) if _adapted(w, leaf))
        total += adapted * (_r((c if autocast else 4 if lora_casts_input(w) else c) * R * D.h) * lora_a_saves_input(w)
                            + _r((c if autocast else 4) * w.lora_rank * R))
    total += n * _r(c * b * D.a * R * D.d)
    quad = n * (_r(c * b * D.a * s * R) + _r(8 * s * s)) + _r(b * s * s)
    return total + quad, quad


def position_projections(spec: ModelSpec) -> tuple[str, ...]:
    """The linears DeBERTa-v2 runs on the relative embeddings: with ``share_att_key`` the content
    ``key_proj`` (c2p) and ``query_proj`` (p2c), else ``pos_key_proj`` and ``pos_query_proj``."""
    names = {t.module for t in spec.tensors if t.layer is not None}
    shared = "pos_key_proj" not in names and "pos_query_proj" not in names
    out = []
    if "c2p" in spec.rel_terms:
        out.append("key_proj" if shared else "pos_key_proj")
    if "p2c" in spec.rel_terms:
        out.append("query_proj" if shared else "pos_query_proj")
    return tuple(out)


def _adapted(w: Workload, leaf: str) -> bool:
    targets = tuple(w.lora_adapted)
    return "all-linear" in targets or leaf in targets


def disentangled_model_level(spec: ModelSpec, w: Workload, b: int, s: int) -> int:
    """DeBERTa-v2's tensors made once per forward and handed to every block.

    ``DebertaV2Encoder.get_rel_embedding`` normalizes the relative embeddings once (LayerNorm: fp32
    mean and rstd per row; its output is what each block's ``pos_dropout`` reads). Under full
    checkpointing every block keeps its inputs for the recomputation: that output (when it needs a
    gradient), the fp32 b x 1 x s x s attention mask (``get_attention_mask`` of ``torch.ones``) and
    the int64 1 x s x s relative positions.
    """
    if not spec.rel_terms:
        return 0
    c = DTYPE_BYTES[w.compute_dtype]
    r = 4 if w.run_dtype == "fp32" else c
    R, h = spec.rel_span, spec.hidden_size
    total = 2 * _r(4 * R) if w.method == "full" else 0
    if any(checkpointed(spec, w)):
        total += _r(4 * b * s * s) + _r(8 * s * s) + _r(r * R * h)
    elif w.method != "full" and "p2c" in spec.rel_terms and not _adapted(w, "key_proj") and not whole_blocks(w):
        # under LoRA the first block's keys need no gradient (a frozen key_proj over the frozen
        # embeddings, untracked without checkpointing: see whole_blocks): its p2c bmm keeps no
        # position queries, and no copy of the keys
        c_b = DTYPE_BYTES[w.compute_dtype]
        total -= _r(c_b * b * R * h) + _r(c_b * b * s * h)
    return total


def _sliding_mask_saved(b: int, s: int, c: int, S: int | None = None) -> int:
    """The additive mask a block's SDPA keeps when it is given a mask: a sliding-window block whose window is
    shorter than the sequence, or any block of a padded batch (:func:`padded_mask`).

    transformers builds one boolean (b, 1, s, S) mask per kind of block
    (masking_utils.create_sliding_window_causal_mask, create_causal_mask); SDPA then cannot run flash, and the
    memory-efficient kernel takes an additive mask in the query's dtype, which every call makes
    from the boolean one (sdp::convert_boolean_attn_mask) and keeps for backward. ``S`` keys when they are more
    than the queries (a KV prefix: masks.kv_prefix).
    """
    return _r(c * b * s * (s if S is None else S))


def padded_bool_masks(spec: ModelSpec, w: Workload, b: int, s: int, S: int) -> int:
    """The padded batch's bool (b, 1, s, S) masks SDPA blocks receive, made once per forward and alive through
    it (masking_utils.sdpa_mask): one per kind of block (a sliding model's global and local masks)."""
    if not padded_mask(spec, w) or w.attention != "sdpa" or not spec.attention_interface:
        return 0
    kinds = 2 if spec.n_sliding_layers and spec.n_sliding_layers < spec.n_layers else 1
    return kinds * _r(b * s * S)


def _mla_saved(spec: ModelSpec, w: Workload, D: Dims, b: int, s: int, c: int, casts: bool, full: bool, own: int,
               attention: str, attn_out_saves: bool, masked: bool) -> tuple[int, int]:
    """(saved, of which quadratic) of multi-head latent attention (``DeepseekV3Attention.forward``).

    With ``q_lora_rank``: ``q_a_layernorm`` keeps its fp32 input (and, trained, its normalized
    cast), ``q_b_proj`` keeps what it returns; ``kv_a_layernorm`` the same over the kv_lora_rank
    part of the latent, which ``kv_b_proj`` keeps. Attention keeps the query built by ``torch.cat``
    (a*(nope+rope)), the key built by ``new_empty`` and two ``copy_`` (the same width), and the
    values, a view of ``kv_b_proj``'s whole (a*(nope+v)) output. Values narrower than queries rule
    flash out: CUDA runs the memory-efficient kernel, which keeps its output (a*v) and the fp32
    log-sum-exp. The rotation (interleaved or not) multiplies by the shared cos/sin and keeps nothing.
    """
    m = spec.mla
    assert m is not None
    t = b * s
    a = D.a
    kind = norm_kind(spec)
    total = quad = 0
    if m.q_lora_rank is not None:
        total += _norm_saved(kind, m.q_lora_rank, t, c, c, int(trains(w, "q_b_proj")) * own, casts, full)
    total += _norm_saved(kind, m.kv_lora_rank, t, c, c, int(trains(w, "kv_b_proj")) * own, casts, full)
    total += _r(c * a * (m.qk_nope_head_dim + m.v_head_dim) * t)  # kv_b_proj's output: the values' storage
    total += 2 * _r(c * a * m.qk_head_dim * t)  # query and key
    if attention == "eager" and w.checkpointing != "selective":
        probs = _softmax_saved(spec, b * a * s * s, c, casts, dropout_probs(spec)[0])
        total += probs
        quad += probs
    elif attention != "eager":
        # output, log-sum-exp, philox state (under selective recomputation only the output: see layer_activations)
        total += _r(c * a * m.v_head_dim * t) + (0 if w.checkpointing == "selective" else _r(4 * b * a * s) + SDPA_RNG)
        if masked:
            mask = _sliding_mask_saved(b, s, c)
            total += mask
            quad += mask
    if attn_out_saves and attention == "eager":
        total += _r(c * a * m.v_head_dim * t)  # the output's contiguous copy that o_proj keeps
    return total, quad


def _softmax_saved(spec: ModelSpec, probs: int, c: int, autocast: bool, p_drop: float = 0.0) -> int:
    """What eager attention keeps of its b*a*s*S probabilities.

    Softmax keeps its output (fp32 when the model or autocast asks for it). ``probs @ v`` keeps
    its input in the compute dtype: the cast copy of an fp32 softmax, or with dropout the dropped
    probabilities, whose bool mask dropout keeps (the cast copy before dropout is then not kept).
    """
    sm = 4 if (autocast or c == 4 or spec.softmax_fp32) else c
    if p_drop > 0:
        return _r(sm * probs) + _r(probs) + _r(c * probs)
    return _r(sm * probs) + (_r(c * probs) if sm != c else 0)


#: transformers' activations written as several Python ops (transformers/activations.py ACT2CLS):
#: (tensors kept in the compute dtype, tensors kept that come from ``torch.pow``, which CUDA
#: autocast runs in fp32: AT_FORALL_FP32 in aten/src/ATen/autocast_mode.h). Counted with
#: saved-tensor hooks on transformers 5.24; the H200's events (validation/events/
#: cuda-h200-gpt2.json.gz) show NewGELU's three fp32 tensors. Any other activation is one aten
#: op that keeps its input.
PYTHON_ACTIVATIONS: dict[str, tuple[int, int]] = {
    "gelu_new": (1, 3),          # NewGELUActivation: 0.5*x; pow's input (x, or its fp32 copy), tanh, 1 + tanh
    "gelu_accurate": (1, 3),     # AccurateGELUActivation: the same ops
    "gelu_python_tanh": (1, 3),  # GELUTanh(use_gelu_tanh_python=True): the same ops
    "gelu_fast": (7, 0),         # FastGELUActivation (no pow): x, 0.044715*x, x*0.798, 1 + .., tanh, 0.5*x, 1 + tanh
    "quick_gelu": (2, 0),        # QuickGELUActivation: x and sigmoid(1.702*x)
    "gelu_python": (3, 0),       # GELUActivation(use_gelu_python=True): erf's input, 0.5*x, 1 + erf
}


def act_upcasts(act: str, autocast: bool) -> bool:
    """Whether the activation's output is fp32: under autocast, one that calls ``torch.pow``."""
    return autocast and PYTHON_ACTIVATIONS.get(act, (1, 0))[1] > 0


def _act_own(act: str, n: int, c: int, autocast: bool) -> int:
    """Bytes an activation keeps of an n-element input for its own backward (not its output)."""
    low, pow_made = PYTHON_ACTIVATIONS.get(act, (1, 0))
    return low * _r(c * n) + pow_made * _r((4 if autocast else c) * n)


def _act_saved(act: str, n: int, c: int, out_saved: bool = True, autocast: bool = False) -> int:
    """Bytes an activation function keeps of an n-element input, plus its output when the next
    linear keeps its input (its weight is trained): the output, or under autocast that linear's
    half cast of an fp32 output."""
    if act in ("relu",):
        return _r(c * n)  # relu keeps only its output, which the next linear keeps too
    out = _r(c * n) if out_saved else 0
    return _act_own(act, n, c, autocast) + out


def _mlp_saved(spec: ModelSpec, D: Dims, t: int, c: int, out_saved: bool = True, autocast: bool = False, *,
               dense: bool = False, shared_out_saved: bool = True) -> int:
    if spec.is_moe and not dense and spec.experts_see_all_tokens:
        # Llama4TextMoe.forward: every expert on every token. ``hidden_states.repeat(E, 1)`` (E*t, h) is
        # kept by its product with the scores (which need a gradient), and the scores' (E*t, 1) copy
        # (``router_scores.transpose(0, 1).reshape(-1, 1)``) by the same product; Llama4TextExperts:
        # ``bmm`` gate_up (E, t, 2f: silu keeps its gate half, a view), ``act(gate)`` (f, kept by the
        # product with up, another view); the scaled input (h) and the product (f) kept by the bmms only
        # when the experts' weights train. ``.sum(dim=0)`` over the experts keeps nothing.
        n = t * max(1, spec.n_experts)
        total = _r(c * D.h * n) + _r(c * n) + _r(c * 2 * D.f * n) + _r(c * D.f * n)
        if out_saved:
            total += _r(c * D.h * n) + _r(c * D.f * n)
        total += _router_saved(spec, D, t, c, router_trains=out_saved)
        if spec.shared_expert_ffn:
            fs = max(1, spec.shared_expert_ffn // D.tp)
            total += 3 * _r(c * fs * t) + (_r(c * fs * t) if shared_out_saved else 0)
        return total
    if spec.is_moe and not dense:
        k = max(1, spec.experts_per_token)
        routed = t * k
        # transformers 5 grouped experts: gate_up output (2f, kept by act and the product),
        # act(gate) (f), and the expert output (h, kept by the routing-weight product); the
        # routed input (h) and the product (f) only when the experts' weights train
        per_expert = 3 * _r(c * D.f * routed) + _r(c * D.h * routed)
        if spec.expert_gate == "clamped_swiglu":
            # GptOssExperts._apply_gate: both clamps keep their input (views of gate_up: 2f), the
            # clamped gate (kept by the product with its sigmoid), the sigmoid's output, up + 1 and
            # glu (kept by their product): 2f + 4f, and the expert output (h)
            per_expert = 2 * _r(c * D.f * routed) + 4 * _r(c * D.f * routed) + _r(c * D.h * routed)
        if out_saved:
            per_expert += _r(c * D.h * routed) + _r(c * D.f * routed)
        total = per_expert + _router_saved(spec, D, t, c, router_trains=out_saved)
        if spec.shared_expert_ffn:
            # the shared experts: a gated MLP every token runs through (DeepseekV3MLP, Qwen2MoeMLP)
            fs = max(1, spec.shared_expert_ffn // D.tp)
            total += 3 * _r(c * fs * t) + (_r(c * fs * t) if shared_out_saved else 0)
        return total
    f = max(1, spec.dense_ffn_size // D.tp) if dense and spec.dense_ffn_size else D.f
    inner_dropout = 0
    if spec.model_type in ("t5", "mt5", "umt5") and dropout_probs(spec)[1] > 0:
        # T5's DenseReluDense / DenseGatedActDense drop out between wi and wo: a bool mask, and
        # the dropped tensor that wo keeps (instead of the activation's output)
        inner_dropout = _r(f * t)
    n = f * t
    if spec.gated_mlp:
        # act(gate) keeps gate (or its own tensors), the product keeps act(gate) (fp32 when the
        # activation upcasts) and up; down_proj keeps the product (under autocast, its half cast)
        act_out = _r((4 if act_upcasts(spec.activation, autocast) else c) * n)
        return (_act_own(spec.activation, n, c, autocast) + act_out + _r(c * n)
                + (_r(c * n) if out_saved else 0) + inner_dropout)
    if inner_dropout:
        # relu keeps its output for its derivative; wo keeps the dropped output
        return _act_saved(spec.activation, n, c, False, autocast) + inner_dropout + (_r(c * n) if out_saved else 0)
    return _act_saved(spec.activation, n, c, out_saved, autocast)


def mlp_backward_bytes(spec: ModelSpec, w: Workload, b: int, s: int, tp: int = 1) -> int:
    """The transient of the last block's MLP backward, the first block backward after the head's.

    Alive at once besides the saved activations (traced for ELECTRA: mm, gelu_backward,
    native_layer_norm_backward): the gradient entering the block (b*s*h, in the residual stream's
    dtype), the down projection's input gradient and the activation's input gradient (b*s*f each).
    A gated MLP holds one more (the gate's) but has freed the product it saved by then (traced for
    ModernBERT). When the last block is checkpointed (full, selective-op, every:N with no trailing
    blocks) the recomputed block's figure (core.BlockFigures ``recompute``) covers it. The two
    (b*s, f) gradients are fp32 under autocast when the activation's output is (``act_upcasts``:
    NewGELU's pow), as in the recomputed block's figure.
    """
    if last_block_checkpointed(spec, w) or spec.is_moe:
        return 0
    t = b * s
    c = DTYPE_BYTES[w.compute_dtype]
    r = 4 if w.run_dtype == "fp32" else c
    g = 4 if act_upcasts(spec.activation, _autocast(w)) else c
    f = max(1, spec.ffn_size // tp)
    return _r(r * spec.hidden_size * t) + max(2 * _r(g * f * t), ia3_mul_backward(spec, w, f * t))


def ia3_mul_backward(spec: ModelSpec, w: Workload, n: int) -> int:
    """The backward of IA3's ``x.to(dtype) * ia3_scaling`` on an input-scaled linear of n = t x k elements, before
    the MLP's own: the gradient in the vectors' dtype (``.to``'s backward casts it), and the multiplication's two
    input gradients, both full-size until the engine sums the vector's down to (k,) (``validate_outputs`` runs
    ``at::sum_to`` after the node returns): three (t, k) tensors in the vectors' dtype (traced)."""
    if w.method != "ia3" or (targets := IA3_TARGETS.get(spec.model_type)) is None or not targets.scales_input:
        return 0
    return 3 * _r(DTYPE_BYTES[vector_dtype(w)] * n)


def _router_saved(spec: ModelSpec, D: Dims, t: int, c: int, *, router_trains: bool) -> int:
    """What an MoE router keeps for backward (ModelSpec.router).

    ``softmax`` (MixtralTopKRouter and its copies): the logits in the compute dtype and their
    fp32 softmax. ``softmax_fp32`` (DeepseekV2TopkRouter): ``F.linear`` of an fp32 copy of the
    input and the fp32 weight (the copy kept when the weight trains), the fp32 softmax and the
    top-k indices (int64). ``sigmoid_grouped`` (DeepseekV3TopkRouter): the same fp32 copy, the
    sigmoid's output, the top-k indices that ``gather`` keeps, and the weights' normalization
    (the top-k weights and their sum, fp32); the group-limited selection works on a branch no
    output depends on, so its tensors are freed in forward.
    """
    E = spec.n_experts
    k = max(1, spec.experts_per_token)
    if spec.router == "topk_softmax":
        # GptOssTopKRouter: topk of the biased logits keeps its int64 indices, the softmax over the
        # k values (compute dtype) its output; the logits themselves are not kept
        return _r(8 * k * t) + _r(c * k * t)
    if spec.router == "softmax":
        return _r(c * E * t) + _r(4 * E * t)
    if spec.router == "sigmoid_topk":
        # Llama4Router: topk's int64 indices (scatter_ keeps the same tensor) and the fp32 sigmoid's
        # output (t, E); the logits are not kept
        return _r(8 * k * t) + _r(4 * E * t)
    total = _r(4 * D.h * t) if router_trains else 0
    total += _r(4 * E * t) + _r(8 * k * t)
    if spec.router == "sigmoid_grouped":
        total += _r(4 * k * t) + _r(4 * t)
    return total


def has_lm_head(spec: ModelSpec) -> bool:
    """Whether the head ends in a vocabulary projection (vramlens.estimator.heads)."""
    return H.has_lm_head(spec)


def local_vocab(spec: ModelSpec, w: Workload) -> int:
    """The vocabulary entries of the logits on one GPU.

    Under tensor parallelism the output layer is column-parallel over the vocabulary. Without
    loss parallelism its output is gathered (torchtitan's ``ColwiseParallel(output_layouts=
    Replicate())``), so every rank holds all V logits and the whole loss; with ``--loss-parallel``
    (torchtitan ``output_layouts=Shard(-1)`` and ``loss_parallel()``, torch/distributed/tensor/
    parallel/loss.py) the logits, their upcast, ``log_softmax`` and its gradients stay sharded: V/tp.
    """
    if w.training and w.loss_parallel and w.tp > 1:
        return -(-spec.vocab_size // w.tp)
    return spec.vocab_size


def logits_bytes(spec: ModelSpec, w: Workload, tokens: int) -> int:
    """The logits of ``tokens`` tokens in the compute dtype on one GPU (0 without an LM head)."""
    return _r(DTYPE_BYTES[w.compute_dtype] * local_vocab(spec, w) * tokens) if has_lm_head(spec) else 0


def largest_loss_tensor(spec: ModelSpec, w: Workload, b: int, s: int) -> int:
    """The largest tensor the loss allocates over ``b`` x ``s`` tokens on one GPU: one b*s*V tensor (one chunk's
    of a chunked loss) in the widest dtype the loss gives it; 0 without an LM head.

    The reserve's allowance for short-lived tensors scales with it (allocator.analytic.LOSS_TENSOR_ALLOWANCE):
    the segments the previous step cut for it are split by the gradients and optimizer states allocated after
    it was freed, so each step's loss takes fresh ones. Transformers' own loss: the fp32 upcast and
    log_softmax of a causal LM (4*V per token), nll_loss's fp32 copy under CUDA autocast, else the logits'
    dtype (heads.cross_entropy_kept); the chunked, fused and compiled losses of vramlens.estimator.losses:
    one chunk's logits (fp32 when the chunk is upcast), Liger's logits chunk, the logits.
    """
    if not has_lm_head(spec):
        return 0
    from vramlens.estimator.losses import liger_chunk_tokens, seq_chunks

    t = b * s
    V = local_vocab(spec, w)
    c = DTYPE_BYTES[w.compute_dtype]
    if w.loss == "fused-linear":
        return _r(c * V * min(t, liger_chunk_tokens(t, spec.hidden_size, V)))
    if w.loss == "logits-sum":
        return _r(c * V * t)
    if w.loss_chunks <= 1:
        if w.compiled_loss:  # one fused reduction: no fp32 copy of the logits (losses.compiled_chunks)
            return _r(c * V * t)
        sm, cast = H.cross_entropy_kept(w, H.loss_upcasts(spec))
        return _r(max(c, sm, cast) * V * t)
    size = seq_chunks(s, w.loss_chunks)[0]
    compiled = w.compile and w.training and c != 4
    widest = 4 if (w.loss_upcast or w.output_upcast) and not compiled else c
    return _r(widest * V * b * size)


def head_saved(spec: ModelSpec, w: Workload, b: int, s: int) -> tuple[int, int, str]:
    """(saved for backward at the loss, transient peak at the loss, explanation) of the head.

    Causal LMs in transformers (``ForCausalLMLoss``) upcast the logits to fp32 and
    ``cross_entropy`` keeps the fp32 ``log_softmax`` output: c*V + 4*V + 4*V bytes per token at
    the loss. Masked LMs and T5 take ``cross_entropy`` of the logits as they are: log_softmax in
    the logits' dtype, plus under CUDA autocast nll_loss's fp32 copy of it
    (:func:`vramlens.estimator.heads.cross_entropy_kept`). Other heads: vramlens.estimator.heads.
    """
    t = b * s
    V = local_vocab(spec, w)
    c = DTYPE_BYTES[w.compute_dtype]
    if not has_lm_head(spec):
        return H.loss_saved(spec, w, b, s)
    from vramlens.estimator.losses import loss_figures

    lf = loss_figures(spec, w, b, s)
    if lf is not None:
        return lf.saved, lf.peak, lf.formula
    sm, cast = H.cross_entropy_kept(w, H.loss_upcasts(spec))
    logits = _r(c * V * t)
    upcast = _r(4 * V * t) if H.loss_upcasts(spec) and c != 4 else 0
    lsm = _r(sm * V * t)
    if V != spec.vocab_size and upcast:
        # loss_parallel (torch/distributed/tensor/parallel/loss.py ``_log_softmax``, torch 2.13) decomposes
        # log_softmax on the local shard: shifted = x - max (all-reduced), exp(shifted) summed, result =
        # shifted - log(sum): shifted is alive beside the fp32 input and exp(shifted), then beside the result
        saved, peak, formula = _head_without_cap(sm, lsm, logits, upcast, cast, V, t)
        return saved, peak + _r(4 * V * t), formula + ", and loss_parallel's shifted logits (4*V) beside them"
    if spec.logit_softcap:
        # Gemma 2's final_logit_softcapping: tanh(logits / cap) keeps its output beside what the loss keeps
        capped = logits
        saved, peak, formula = _head_without_cap(sm, lsm, logits, upcast, cast, V, t)
        return (saved + capped, peak + capped,
                formula + "; tanh(logits / cap)'s output (c*V) kept for backward (final_logit_softcapping)")
    return _head_without_cap(sm, lsm, logits, upcast, cast, V, t)


def _head_without_cap(sm: int, lsm: int, logits: int, upcast: int, cast: int, V: int,
                      t: int) -> tuple[int, int, str]:
    """:func:`head_saved` of transformers' causal-LM loss on logits that no softcap keeps."""
    if upcast:
        return lsm, logits + upcast + lsm, "logits (c*V), their fp32 upcast (4*V) and log_softmax (4*V) per token"
    if cast:
        nll = _r(cast * V * t)
        return (lsm + nll, logits + lsm + nll,
                f"logits, log_softmax ({sm} B x V per token) and nll_loss's fp32 copy of it (CUDA autocast)")
    return lsm, logits + lsm, f"logits and log_softmax ({sm} B x V per token)"


@dataclass(frozen=True, slots=True)
class LossBackward:
    """The backward of transformers' own cross-entropy when nll_loss kept an fp32 copy (CUDA
    autocast, a head that does not upcast), in bytes."""

    transient: int  # its largest set of temporaries at once: nll_loss's fp32 gradient and its half cast
    over_saved: int  # live beyond the saved activations at its peak: the fp32 gradient, beside the copy


def loss_backward(spec: ModelSpec, w: Workload, b: int, s: int) -> LossBackward | None:
    """See :class:`LossBackward`; None for the usual two fp32 gradients (2 x what the loss keeps).

    NllLossBackward makes the fp32 gradient while its fp32 copy is alive, then frees the copy;
    ToCopyBackward casts the gradient to the logits' dtype (both alive), LogSoftmaxBackward
    makes the half gradient of the logits beside that cast.
    """
    if not has_lm_head(spec):
        return None
    sm, cast = H.cross_entropy_kept(w, H.loss_upcasts(spec))
    n = local_vocab(spec, w) * b * s
    if not cast:
        if spec.logit_softcap:
            # the usual two fp32 gradients of what the loss keeps, not of the softcap's kept tanh output
            # (head_saved counts it; its own backward, tanh_backward, makes c*V per token, less)
            two = 2 * _r(sm * n)
            return LossBackward(transient=two, over_saved=two)
        return None
    lsm, g32 = _r(sm * n), _r(cast * n)
    return LossBackward(transient=H.cross_entropy_backward(w, lsm, g32), over_saved=max(g32, 2 * lsm - g32))


def rotary_saved(spec: ModelSpec, c: int, s: int) -> int:
    """The rotary cos and sin every block multiplies by (and keeps): (1, s, d) each, from
    position_ids = cache_position.unsqueeze(0), shared by the batch; one pair per table
    (ModelSpec.rotary_tables: one per layer type, Gemma 3's local and global, ModernBERT's),
    ``rotary_dim`` wide (MLA rotates qk_rope_head_dim of each head), in the compute dtype or fp32
    (ModelSpec.rotary_tables_fp32: OLMo 2)."""
    width = spec.rotary_dim or spec.head_dim
    return 2 * spec.rotary_tables * _r((4 if spec.rotary_tables_fp32 else c) * width * s)


def model_level_saved(spec: ModelSpec, w: Workload, b: int, s: int) -> int:
    """Inputs, position tables and the final norm: tensors outside the blocks kept for backward."""
    t = b * s
    c = DTYPE_BYTES[w.compute_dtype]
    r = 4 if w.run_dtype == "fp32" else c
    labels = 0 if w.loss == "logits-sum" else H.label_bytes(spec, b, s)  # the loop passes no labels
    total = (pixel_saved(spec, w, b) if spec.vision is not None else _r(8 * t)) + labels
    if padded_mask(spec, w):
        total += _r(8 * t)  # the collator's int64 attention_mask (b, s), an input like the ids
    if spec.position == "rotary":
        # cos and sin (per layer type), shared by the blocks: (1, s, d), from position_ids =
        # cache_position.unsqueeze(0) (modeling_llama.py LlamaModel.forward; ModernBertModel.forward)
        total += rotary_saved(spec, c, s)
    _, p_hid = dropout_probs(spec)
    if p_hid > 0:
        total += _r((spec.embedding_size or spec.hidden_size) * t)  # embedding dropout mask
    total += (embedding_projection_saved(spec, w, b, s) + disentangled_model_level(spec, w, b, s)
              + embedding_leaf_saved(spec, w, b, s))
    total += final_norm_saved(spec, w, b, s)
    if spec.kind == "encoder-decoder":
        # the encoder's final norm, whose output every cross-attention's k and v projections read: kept by
        # them when they train, by their adapters when those take it as it is (not a private cast), or as an
        # input by checkpointed decoder blocks
        kv = [leaf for _, leaf in linear_groups(spec).get("qkv", ()) if not leaf.startswith("q")]
        reads = (w.method == "full" or (any(_adapted(w, x) for x in kv) and not lora_casts_input(w)
                                        and lora_a_saves_input(w))
                 or whole_blocks(w))
        total += _norm_saved(norm_kind(spec), spec.hidden_size, b * encoder_tokens(spec, w), r, c, int(reads), False)
    if spec.audio is not None:
        total += front_end_saved(spec, w, b)  # the log-mel features and the conv front end
    if spec.position == "relative" and any(checkpointed(spec, w)):
        # T5 computes its position biases (1, a, s, s) once per stack and hands them to every
        # checkpointed block, which keeps them as inputs: the encoder's, the decoder's self- and
        # cross-attention's (the bias embedding's dtype: the weights', autocast does not cast it)
        bias_b = DTYPE_BYTES[w.run_dtype] if w.method == "full" else DTYPE_BYTES[w.compute_dtype]
        n_bias = 3 if spec.kind == "encoder-decoder" else 1
        total += n_bias * _r(bias_b * spec.n_heads * s * s)
    return total + checkpointed_mask(spec, w, b, s) + H.head_level_saved(spec, w, b, s)


def pixel_saved(spec: ModelSpec, w: Workload, b: int) -> int:
    """A vision encoder's input kept through the step: the fp32 pixel_values (b, C, H, W) fed to it and,
    when it trains, their cast to the weights' dtype, kept by the patch Conv2d for its weight's gradient
    (``pixel_values.to(expected_dtype)``: ViTModel.forward, modeling_vit.py:368-370; CLIP's and SigLIP's
    embeddings cast to ``patch_embedding.weight.dtype``). CLIP's ``pre_layrnorm`` keeps the embeddings
    and its fp32 mean and rstd."""
    v = spec.vision
    assert v is not None
    H_, W_ = w.image_size or (v.image_size, v.image_size)
    px = b * v.channels * H_ * W_
    total = _r(4 * px)
    c = DTYPE_BYTES[w.compute_dtype]
    r = 4 if w.run_dtype == "fp32" else c
    if r != 4 and ((w.training and w.method == "full") or v.input_cast_held):
        total += _r(r * px)  # the cast copy the Conv2d keeps (or ViTModel.forward's local holds)
    if v.pre_norm and w.training:
        total += _norm_saved(norm_kind(spec), spec.hidden_size, b * w.seq, r, c, 0, False, w.method == "full")
    return total


def pixel_inference(spec: ModelSpec, w: Workload, b: int) -> int:
    """A vision encoder's pixels alive through a no-grad forward (pixel_saved without the training terms)."""
    if spec.vision is None:
        return 0
    return pixel_saved(spec, w.replace(mode="inference") if w.training else w, b)


def final_norm_saved(spec: ModelSpec, w: Workload, b: int, s: int) -> int:
    """What the final norm keeps for backward (freed before the last block's backward starts)."""
    t = b * s
    c = DTYPE_BYTES[w.compute_dtype]
    r = 4 if w.run_dtype == "fp32" else c
    # the last norm's output is kept by the head's first op unless a dropout stands in front of it
    # (a fused linear cross-entropy keeps the gradient it computed in forward instead)
    consumers = 1 if H.head_keeps_input(spec, w) and not (w.loss == "fused-linear" and has_lm_head(spec)) else 0
    # under tensor parallelism the final norm is SequenceParallel and the output layer ColwiseParallel
    # over its all-gathered input (_sp_norm_saved); without it, sp = 1 and this is _norm_saved
    return _sp_norm_saved(norm_kind(spec), spec.hidden_size, t, r, c, consumers, w.autocast, w.norms_train, w.tp)


def checkpointed_mask(spec: ModelSpec, w: Workload, b: int, s: int) -> int:
    """A decoder's eager attention mask (or a padded batch's SDPA masks), kept as an input by checkpointed blocks.

    transformers builds a (b, 1, s, s) additive causal mask for eager attention
    (masking_utils ``eager_mask``: 0 or the dtype's minimum, in the embeddings' dtype) and hands
    it to every block; attention adds it without saving it, but a checkpointed block keeps its
    inputs (torch.utils.checkpoint ``_NoopSaveInputs``). SDPA takes ``is_causal`` and no mask.
    """
    if spec.kind != "decoder" or not any(checkpointed(spec, w)):
        return 0
    if w.attention != "eager":
        return padded_bool_masks(spec, w, b, s, s)  # a padded batch's bool masks for SDPA
    r = 4 if w.run_dtype == "fp32" else DTYPE_BYTES[w.compute_dtype]
    return _r(r * b * s * s)


def embedding_projection_saved(spec: ModelSpec, w: Workload, b: int, s: int) -> int:
    """What an embedding projection adds to the first block's norm (counted as a hidden-wide LayerNorm
    whose output the first q/k/v keep).

    ELECTRA (modeling_electra.py: ``embeddings`` LayerNorm and dropout at ``embedding_size`` E, then
    ``ElectraModel.embeddings_project`` to h): the LayerNorm keeps an E-wide input, the projection
    keeps the E-wide dropped output (its own cast under autocast), and q/k/v keep the projection's
    h-wide output. DeBERTa-v2 (``embed_proj`` before the LayerNorm): the projection keeps its E-wide input.
    Under LoRA the frozen embeddings and projection track no gradient, but with blocks checkpointed
    (checkpointing.whole_blocks) the embeddings are tracked (embedding_leaf_saved) and the LayerNorm
    keeps its E-wide input.
    """
    E = spec.embedding_size
    if not E or (w.method != "full" and not whole_blocks(w)):
        return 0
    t = b * s
    c = DTYPE_BYTES[w.compute_dtype]
    r = 4 if w.run_dtype == "fp32" else c
    autocast = w.autocast
    # under LoRA with checkpointing the embeddings are tracked (embedding_leaf_saved) but the
    # frozen projection keeps nothing
    proj_in = _r((c if autocast else r) * E * t) if w.method == "full" else 0
    if not spec.embedding_norm_first:
        return proj_in
    # the norm's own input at E instead of h, and the projection's input; q/k/v keep the projection's
    # output, as they keep a norm's output (no extra: the first block counts it). A checkpointed
    # first block keeps the projection's output as its input: in the compute dtype under autocast
    first_input = _r(r * spec.hidden_size * t) - _r(c * spec.hidden_size * t) if (
        autocast and first_block_checkpointed(w)) else 0
    return _r(r * E * t) - _r(r * spec.hidden_size * t) + proj_in - first_input


def embedding_leaf_saved(spec: ModelSpec, w: Workload, b: int, s: int) -> int:
    """The input embeddings' output kept under LoRA with gradient checkpointing.

    transformers' ``gradient_checkpointing_enable`` on a model with adapters calls
    ``enable_input_require_grads`` (modeling_utils.py): a forward hook makes the word embeddings'
    output require grad, a leaf whose gradient autograd keeps it for. When positions or token types
    are added to it (learned positions) it is a tensor of its own; otherwise it is the embedding
    norm's input, already counted. ModernBERT's pre-norm embeddings.norm keeps its input besides
    the final norm's when the first block is checkpointed (``ModelSpec.embedding_norm``; that
    block's own norm is an identity, so uncheckpointed it counts the embeddings' norm).
    """
    if not whole_blocks(w):
        return 0
    t = b * s
    c = DTYPE_BYTES[w.compute_dtype]
    r = 4 if w.run_dtype == "fp32" else c
    total = 0
    if spec.embedding_norm and first_block_checkpointed(w):
        total += _norm_saved(norm_kind(spec), spec.hidden_size, t, r, c, 0, False, w.method == "full")
    if w.method != "full" and spec.kind == "encoder" and spec.position == "learned":
        total += _r(c * (spec.embedding_size or spec.hidden_size) * t)
    return total


def offloaded_model_level(spec: ModelSpec, w: Workload, b: int, s: int) -> tuple[int, int]:
    """Under torchtune's activation offloading (vramlens.estimator.offload): (what of
    model_level_saved moves to the host, what of it is copied there but stays on the GPU).

    Moved: the rotary cos/sin and the embedding dropout mask (saved inside the blocks), T5's
    position biases. Copied and kept: the final norm's own saved tensors, the last saves of the
    forward, held on the GPU by the offloader's stash of its 5 most recent copies.
    """
    t = b * s
    c = DTYPE_BYTES[w.compute_dtype]
    r = 4 if w.run_dtype == "fp32" else c
    moved = 0
    if spec.position == "rotary" and not whole_blocks(w):  # checkpointed blocks keep them as their inputs
        moved += rotary_saved(spec, c, s)
    if dropout_probs(spec)[1] > 0:
        moved += _r((spec.embedding_size or spec.hidden_size) * t)
    if spec.position == "relative" and any(checkpointed(spec, w)):
        bias_b = DTYPE_BYTES[w.run_dtype] if w.method == "full" else DTYPE_BYTES[w.compute_dtype]
        moved += (3 if spec.kind == "encoder-decoder" else 1) * _r(bias_b * spec.n_heads * s * s)
    moved += checkpointed_mask(spec, w, b, s)
    if spec.kind == "encoder-decoder":
        moved += _norm_saved(norm_kind(spec), spec.hidden_size, t, r, c, 1, False)  # the encoder's final norm
    stashed = _norm_saved(norm_kind(spec), spec.hidden_size, t, r, c, 0, False, w.method == "full") // max(1, w.tp)
    return moved, stashed


def _packed(n: int) -> int:
    """Bytes of one host copy: torchtune packs a saved tensor of at least 1,024 bytes
    (``min_offload_size``), ``empty_like`` its numel x element size; a smaller one stays on the GPU."""
    return n if n >= OFFLOAD_MIN_BYTES else 0


#: torchtune OffloadActivations' default ``min_offload_size``.
OFFLOAD_MIN_BYTES = 1024


def offload_copies_modelled(spec: ModelSpec, w: Workload) -> bool:
    """Whether :func:`offload_recopies` itemizes every pack of the blocks: eager decoder blocks
    (no compile, no MLA or MoE experts, no 4-bit weights, one GPU's dims), not checkpointed or
    all checkpointed (each block's input is then its one pack)."""
    return (spec.kind == "decoder" and w.checkpointing in ("none", "full") and not w.compile and spec.mla is None
            and not spec.is_moe and w.method in ("full", "lora") and not w.dora and spec.norm_placement == "pre"
            and w.tp == 1)


def offload_recopies(spec: ModelSpec, w: Workload, b: int, s: int) -> tuple[int, int]:
    """Host bytes torchtune's OffloadActivations copies beyond each saved storage once: (all the
    blocks', the final norm's).

    ``pack_tensor`` (torchtune/training/_activation_offloading.py) makes a pinned host copy of
    every tensor an op saves, of at least 1,024 bytes, that is not an ``nn.Parameter`` or
    ``nn.Buffer`` instance: each save is its own copy, views included, so one storage saved by
    several ops (or through several views) is copied each time. Beyond what the GPU keeps
    (layer_activations, counted once), per block:

    - each ``nn.Linear`` whose input needs a gradient saves ``weight.t()`` for it (``mm``): a view,
      not a Parameter, so the weight is copied (c*k*n); under autocast the saved weight is the
      half cast (the frozen ones are counted with the frozen casts); GPT-2's ``Conv1D`` saves the
      Parameter itself (``addmm``), skipped unless cast. LoRA's ``lora_A`` and ``lora_B`` weights too;
    - the linears reading one input (q, k, v; gate, up; or their adapters' ``lora_A``) each save
      their own ``view(-1, k)`` of it: one copy per consumer;
    - the fused attention's output, kept by the kernel and viewed again by ``o_proj``;
    - LlamaRMSNorm's fp32 input, saved by ``pow`` and by ``hidden * rsqrt``, and the (t, 1) fp32
      rsqrt, saved by ``rsqrt`` and by the same ``mul``;
    - rotary's cos and sin, saved by ``q * cos``, ``k * cos`` and the two ``* sin`` in every block
      (counted once for the whole model on the GPU);
    less the SDPA's philox seed and offset (under 1,024 bytes, left on the GPU).
    """
    t = b * s
    # the final norm runs inside the offloading context, never checkpointed; under tensor parallelism
    # on the rank's s/tp tokens (SequenceParallel)
    ts = t // max(1, w.tp)
    final = (_packed(4 * spec.hidden_size * ts) + 2 * _packed(4 * ts)) if norm_kind(spec) == "rmsnorm" else 0
    if not offload_copies_modelled(spec, w) or w.checkpointing == "full":
        return 0, final
    c = DTYPE_BYTES[w.compute_dtype]
    autocast = w.autocast
    full = w.method == "full"
    dims = _dims_by_path(spec)
    lora_b = c if autocast else DTYPE_BYTES[w.lora_dtype]
    untracked = set(untracked_before_first_adapter(spec, w, b, s)[1])
    own = 0 if lora_casts_input(w) else 1
    per_block = 0
    first_block = 0  # what block 0 does not save under LoRA (its input needs no gradient)
    for group, members in linear_groups(spec).items():
        for path, leaf in members:
            k, n = dims.get(path, (0, 0))
            role = next((x.role for x in spec.tensors if x.name == path + ".weight"), "linear")
            trained = full or _adapted(w, leaf)
            frozen_cast = autocast and not full  # counted with the frozen casts (core.offload_frozen_casts)
            if full:
                wb = _packed(c * k * n) if (role == "linear" or autocast) else 0
            else:
                wb = 0 if frozen_cast else _packed(c * k * n)
                if trained:
                    r = w.lora_rank
                    wb += _packed(lora_b * r * k) + _packed(lora_b * r * n)
            per_block += wb
            if group in untracked:  # block 0: the base weight and lora_A's are not saved
                first_block += wb - (_packed(lora_b * w.lora_rank * n) if trained and not full else 0)
        if group in ("qkv", "mlp_in") and not autocast:
            consumers = trained_linears(spec, w, group) * own
            k = dims.get(members[0][0], (0, 0))[0] if members else 0
            per_block += max(0, consumers - 1) * _packed(c * k * t)
    D = rank_dims(spec, 1)
    attention = sdpa_core(spec, w, cross=False)
    attn_out_saves = trained_linears(spec, w, "attn_out") * own > 0
    if attention != "eager":
        if attn_out_saves and not (output_copied(spec, w) and c != 4):
            per_block += _packed(c * D.a * D.d * t)
        per_block -= SDPA_RNG
    norms = len({x.module for x in spec.tensors
                 if x.layer == 0 and x.role == "norm" and x.module not in ("q_norm", "k_norm")})
    norm_extra = (_packed(4 * D.h * t) + 2 * _packed(4 * t)) if norm_kind(spec) == "rmsnorm" else 0
    per_block += norms * norm_extra
    if not full and untracked:
        first_block += norm_extra  # the first norm of block 0 saves nothing
    rotary = 0
    if spec.position == "rotary":
        # the tables come in the hidden states' dtype (LlamaRotaryEmbedding: cos.to(x.dtype)): fp32 under autocast
        one = _packed((4 if spec.rotary_tables_fp32 or autocast else c) * (spec.rotary_dim or spec.head_dim) * s)
        rotary = 4 * one
        per_block += rotary
        if not full and "qkv" in untracked:
            # block 0: only the adapted q or k is rotated with a gradient
            rot = [x for x in ("q_proj", "k_proj") if _adapted(w, x)]
            first_block += rotary - 2 * one * len(rot)
    blocks = per_block * spec.n_layers - first_block - (rotary_saved(spec, c, s) if rotary else 0)
    return max(0, blocks), final


def inference_layer_peak(spec: ModelSpec, w: Workload, b: int, s: int, S: int, tp: int = 1) -> int:
    """Largest working set inside one block during a no-grad forward of s new tokens over S keys."""
    D = rank_dims(spec, tp)
    t = b * s
    c = DTYPE_BYTES[w.compute_dtype]
    # alive while a block runs: the embeddings (the model's forward keeps inputs_embeds), the
    # block's input (the caller's loop variable), the residual after attention and the norm's
    # output; GPT-2-style blocks also keep attn_output; learned positions add a (1, s, h) table
    stream = 4 * _r(c * D.h * t)
    if spec.model_type in ("gpt2", "gpt_bigcode"):
        stream += _r(c * D.h * t)
    if spec.position == "learned" and spec.kind == "decoder":
        stream += _r(c * D.h * s)
    # a padded batch's bool masks, made once per forward (padded_bool_masks)
    stream += padded_bool_masks(spec, w, b, s, S)
    # during attention there is no residual yet, and a post-norm block has no input norm either
    attn_stream = stream - (_r(c * D.h * t) if spec.norm_placement != "post" else 2 * _r(c * D.h * t))
    masked = (spec.kind == "decoder" and spec.n_sliding_layers and spec.sliding_window is not None and s > 1
              and S > spec.sliding_window and w.attention == "sdpa")
    if padded_bool_masks(spec, w, b, s, S):
        # a padded prefill: every block's SDPA converts the masks to an additive one and expands GQA keys and
        # values, as a sliding block over more keys than its window does
        masked = True
    if spec.mla is not None:
        attn = _mla_inference(spec, w, D, b, s, S, c)
    elif spec.rel_terms:
        # DeBERTa-v2 at its p2c term (eager, always): q, k, v made contiguous, the repeated position
        # projections, that term's raw (b*a, s, R) scores, both gathered terms, their sum and the
        # content scores; the int64 indices, the normalized relative embeddings, the fp32 mask
        n, R = len(spec.rel_terms), spec.rel_span
        attn = (3 * _r(c * D.a * D.d * t) + n * _r(c * b * D.a * R * D.d) + _r(c * b * D.a * s * R)
                + (n + 2) * _r(c * b * D.a * s * S) + n * _r(8 * s * S) + _r(c * R * D.h) + _r(4 * b * s * S))
    elif w.attention == "eager":
        probs = b * D.a * s * S
        # q, and the keys and values it attends to; with GQA, eager_attention_forward calls repeat_kv
        # (transformers/integrations/sdpa_attention.py), a copy of all S keys and values at the full
        # head count: 2*b*a*S*d per attention call, gigabytes at long context when decoding (one kv
        # head expands as a view: reshape merges its size-1 dimension without copying)
        kv = 2 * _r(c * D.a * D.d * b * S) if D.kv not in (1, D.a) else 2 * _r(c * D.a * D.d * t)
        attn = 2 * _r(c * probs) + _r(4 * probs) + _r(c * D.a * D.d * t) + kv
        if spec.attention_sinks and not spec.softmax_fp32:
            # gpt-oss's eager_attention_forward: the masked scores (s x S) stay referenced while the
            # sinks are concatenated (s x (S+1)), the row maximum subtracted (a new s x (S+1)) and the
            # softmax taken in the scores' dtype (another): three quadratic tensors at once
            wide = b * D.a * s * (S + 1)
            attn = _r(c * probs) + 2 * _r(c * wide) + _r(c * D.a * D.d * t) + kv
    else:
        attn = 4 * _r(c * D.a * D.d * t) + _r(4 * b * D.a * s)
        if masked:
            # a local block's SDPA over more keys than its window: the additive (b, 1, s, S) mask the
            # memory-efficient kernel takes, and keys and values expanded to every head (repeat_kv;
            # a view for one kv head)
            attn += _sliding_mask_saved(b, s, c) // s * S
        if (masked or w.gqa_expand) and D.kv not in (1, D.a):
            # keys and values copied to every head for the kernel (repeat_kv, or the stack's own expansion)
            attn += 2 * _r(c * D.a * D.d * b * S)
    if spec.rotary_fp32:
        # ModernBERT's rotary in fp32 while the fused q/k/v output is alive: q.float(), q * cos, the
        # rotated half (neg, half width) and cat, and the sum (four and a half fp32 b*s*a*d tensors)
        attn = max(attn, 3 * _r(c * D.a * D.d * t) + 4 * _r(4 * D.a * D.d * t) + _r(2 * D.a * D.d * t))
    if spec.n_sliding_layers and spec.kind == "encoder" and w.attention == "sdpa":
        attn += _r(b * s * S)  # the bool bidirectional sliding-window mask (b, 1, s, S), made once per forward
    if spec.qk_norm != "none" and spec.mla is None:
        # the q and k norms: the projection, its fp32 copy and the fp32 normalized (or squared) tensor
        attn = max(attn, 3 * _r(c * D.a * D.d * t) + 2 * _r(4 * D.a * D.d * t))
    if spec.rotary_complex:
        # Llama 4's apply_rotary_emb: q, k and v in the compute dtype beside the fp32 copies of q and k
        # (``view_as_complex(xq.float() ...)``, referenced until it returns), their complex products (fp32
        # pairs) and the casts back of both
        attn = max(attn, _r(c * (D.a + 2 * D.kv) * D.d * t) + 2 * _r(4 * (D.a + D.kv) * D.d * t)
                   + _r(c * (D.a + D.kv) * D.d * t))
    elif spec.rotary_tables_fp32:
        # rotating half-precision q and k by fp32 cos/sin (OLMo 2): q, k and v in the compute dtype
        # beside the fp32 rotated q and the rotation of k (two products and their sum)
        attn = max(attn, _r(c * (D.a + 2 * D.kv) * D.d * t) + _r(4 * D.a * D.d * t) + 3 * _r(4 * D.kv * D.d * t))
    if spec.is_moe and spec.experts_see_all_tokens:
        # Llama4TextMoe: every expert on every token, n = E*t rows. The scaled copy of the tokens (h; the
        # unscaled repeat is freed when the name is rebound), the bmm's gate_up (2f), act(gate) (f), their
        # product (f), then the down projection's output (h) beside the product and gate_up
        n = t * max(1, spec.n_experts)
        mlp = _r(c * D.h * n) + _r(c * 2 * D.f * n) + _r(c * D.f * n) + max(_r(c * D.f * n), _r(c * D.h * n))
        if spec.shared_expert_ffn:
            # then the shared expert on the block's input beside the experts' output (E*t, h)
            fs = max(1, spec.shared_expert_ffn // tp)
            mlp = max(mlp, _r(c * D.h * n) + 3 * _r(c * fs * t))
        if spec.dense_layer_ids and spec.dense_ffn_size:
            mlp = max(mlp, 3 * _r(c * max(1, spec.dense_ffn_size // tp) * t))
    elif spec.is_moe:
        # transformers 5 grouped experts: the routed copies of the hidden states (t*k, h) and
        # the fused gate_up output (t*k, 2f), then act(gate) and the product (t*k, f each)
        tk = t * max(1, spec.experts_per_token)
        mlp = _r(c * D.h * tk) + _r(c * 2 * D.f * tk) + 2 * _r(c * D.f * tk)
        if spec.expert_gate == "clamped_swiglu":
            # GptOssExperts._apply_gate at its last product: gate_up (2f) and the gathered gate_up bias
            # (2f, biased experts: referenced until the down projection's bias replaces it), the
            # clamped gate and up, glu, up + 1 and the product (f each)
            mlp = _r(c * D.h * tk) + 2 * _r(c * 2 * D.f * tk) + 5 * _r(c * D.f * tk)
        # then the down projection's output beside the routed input, weighted by the routing weights
        # and put back in token order (integrations/moe.py grouped_mm_experts_forward): two (t*k, h)
        # tensors in the weights' dtype, fp32 for DeepSeek's routers
        wb = c if spec.router == "softmax" else 4
        mlp = max(mlp, 2 * _r(c * D.h * tk) + 2 * _r(wb * D.h * tk))
        if spec.shared_expert_ffn:
            # the shared experts run on the block's input after the routed ones: their gated MLP
            # beside the routed output (t, h)
            fs = max(1, spec.shared_expert_ffn // tp)
            mlp = max(mlp, _r(c * D.h * t) + 3 * _r(c * fs * t))
        if spec.dense_layer_ids and spec.dense_ffn_size:
            mlp = max(mlp, 3 * _r(c * max(1, spec.dense_ffn_size // tp) * t))
    elif spec.gated_mlp:
        mlp = 3 * _r(c * D.f * t)
    elif spec.activation in ("gelu_new", "gelu_fast"):
        mlp = 4 * _r(c * D.f * t)  # NewGELUActivation in Python: the input and three intermediates
    elif spec.activation == "quick_gelu":
        # QuickGELUActivation (activations.py): x * sigmoid(1.702 * x): the input, the sigmoid and the product
        mlp = 3 * _r(c * D.f * t)
    else:
        mlp = 2 * _r(c * D.f * t)
    # one token: bitsandbytes' gemv_4bit, nothing dequantized (torchao's weight-only linears dequantize still);
    # AutoGPTQ's cuda-old kernel under 128 rows (weights.dequant_min_rows)
    deq = dequantized_by_group(spec, w, tp) if t >= Wt.dequant_min_rows(w) else {}
    if deq:
        # a 4-bit matmul holds its weight dequantized: q_proj..v_proj with the projections made before
        # them, o_proj with the attention output; up_proj with act(gate) and its own output
        def most(groups: tuple[str, ...], size: Callable[[int, int, int], int]) -> int:
            return max((size(k, n, wb) for g in groups for k, n, wb in deq.get(g, ())), default=0)

        attn_groups, mlp_groups = ("qkv", "attn_out"), ("mlp_in", "mlp_out")
        w_attn = most(attn_groups, lambda k, n, wb: wb)
        w_mlp = most(mlp_groups, lambda k, n, wb: wb)
        m = DTYPE_BYTES[w.quant_matmul_dtype]

        def cast_io(k: int, n: int, wb: int) -> int:
            """bitsandbytes' Linear4bit.forward in a matmul dtype other than the activations' (bnb_compute_dtype):
            ``x = x.to(self.compute_dtype)`` is kept until it returns, the matmul's output is in that dtype and
            ``out.to(inp_dtype)`` copies it back; beyond the weight and the output in the compute dtype counted
            below: the larger of (the cast input, the weight, the output) at the matmul and (the cast input,
            the output, its copy) at the cast back, the weight freed by then."""
            if m == c:
                return 0
            x_m, out_m, out_c = _r(m * k * t), _r(m * n * t), _r(c * n * t)
            return max(x_m + wb + out_m, x_m + out_m + out_c) - (wb + out_c)

        attn = max(attn, 3 * _r(c * D.a * D.d * t) + w_attn + most(attn_groups, cast_io))
        mlp = max(mlp, (2 * _r(c * D.f * t) if spec.gated_mlp else _r(c * D.f * t) + _r(c * D.h * t)) + w_mlp
                  + most(mlp_groups, cast_io))
        # dequantized to another dtype first (fp16 under dequant_dtype="fp16", the model's under bnb_compute_dtype):
        # that weight beside its copy at the cast, before the output exists; with the cast input under the latter
        def at_cast(k: int, n: int, wb: int) -> int:
            return Wt.dequant_cast_bytes(w, n, k) + (_r(m * k * t) if m != c else 0)

        x_attn = most(attn_groups, at_cast)
        x_mlp = most(mlp_groups, at_cast)
        if x_attn:
            attn = max(attn, 2 * _r(c * D.a * D.d * t) + w_attn + x_attn)
        if x_mlp:
            mlp = max(mlp, (_r(c * D.f * t) if spec.gated_mlp else _r(c * D.h * t)) + w_mlp + x_mlp)
    if (w.attention == "eager" and spec.kind == "decoder" and spec.attention_interface and spec.mla is None
            and not spec.rel_terms):
        # eager attention returns its probabilities (attn_weights, the compute dtype; with sinks a view of
        # the s x (S+1) softmax), which the decoder layer binds to ``_`` (``hidden_states, _ =
        # self.self_attn(...)``) and so keeps through the MLP; and the model's additive masks (b, 1, s, S)
        # in the compute dtype, one per layer type (create_causal_mask, create_sliding_window_causal_mask)
        kept = _r(c * b * D.a * s * (S + 1 if spec.attention_sinks else S))
        masks = (2 if spec.n_sliding_layers and spec.n_sliding_layers < spec.n_layers else 1) * _r(c * b * s * S)
        stream += masks
        attn_stream += masks
        mlp += kept
    # the post-attention RMSNorm upcasts its input (LlamaRMSNorm.forward: hidden_states.to(float32), then
    # hidden_states * rsqrt(variance)): two fp32 (t, h) beside the embeddings, the block's input and the
    # residual sum, before its output exists. It outgrows the MLP when f/tp < h (transformers' tp_plan keeps
    # the norms whole: Llama 2 7B from tp 4)
    norm = 0
    if spec.norm == "rmsnorm" and spec.norm_placement == "pre" and not spec.norm_weight_fp32 and c < 4:
        norm = stream - _r(c * D.h * t) + 2 * _r(4 * D.h * t)
    return max(attn_stream + attn, stream + max(mlp, dora_forward_transient(spec, w, training=False, tp=tp)), norm)


def _mla_inference(spec: ModelSpec, w: Workload, D: Dims, b: int, s: int, S: int, c: int) -> int:
    """Multi-head latent attention's working set over S keys (``DeepseekV3Attention.forward``).

    The query (``q_b_proj``'s output stays referenced until the end of forward, beside the query
    ``torch.cat`` builds), the latent ``kv_a_proj_with_mqa`` returns (also referenced until then),
    and what ``expand_kv`` rebuilds from the cached latent of all S tokens at every call:
    ``kv_b_proj``'s output (b, S, a*(nope+v)), whose value part is the values, and the keys
    (b, a, S, nope+rope). Then the attention itself (memory-efficient SDPA: its output and
    log-sum-exp; eager: the scores and fp32 softmax).
    """
    m = spec.mla
    assert m is not None
    t = b * s
    a = D.a
    total = 2 * _r(c * a * m.qk_head_dim * t) + _r(c * m.latent * t)
    total += _r(c * a * (m.qk_nope_head_dim + m.v_head_dim) * b * S) + _r(c * a * m.qk_head_dim * b * S)
    if w.attention == "eager":
        probs = b * a * s * S
        # the scores, the fp32 softmax and its cast, the output, and a contiguous copy of the values
        # (a strided view of kv_b_proj's output) for the probabilities' matmul
        total += 2 * _r(c * probs) + _r(4 * probs) + _r(c * a * m.v_head_dim * t) + _r(c * a * m.v_head_dim * b * S)
    else:
        total += _r(c * a * m.v_head_dim * t) + _r(4 * b * a * s)
    return total
