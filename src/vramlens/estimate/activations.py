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

from dataclasses import dataclass

from vramlens.models.spec import ModelSpec
from vramlens.units import DTYPE_BYTES, round_up
from vramlens.workload import Workload

BLOCK = 512

#: Model types whose eager attention computes ``softmax(..., dtype=torch.float32)`` and casts back
#: (transformers/models/llama/modeling_llama.py ``eager_attention_forward`` and its copies); the
#: others (GPT-2, BERT, ...) take the softmax in the compute dtype unless autocast upcasts it.
FP32_SOFTMAX = frozenset({
    "llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "phi3", "gemma", "gemma2",
    "gemma3_text", "starcoder2", "olmo", "olmo2", "cohere", "granite", "opt", "bloom", "phi", "gpt_bigcode",
    "gpt_neox",
})


def _r(n: int) -> int:
    return round_up(int(n), BLOCK) if n > 0 else 0


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


def _dims(spec: ModelSpec, tp: int) -> Dims:
    # Megatron tensor parallelism splits heads and the FFN across tp ranks; with sequence
    # parallelism (assumed whenever tp > 1) the remaining per-token tensors are split too.
    return Dims(
        h=spec.hidden_size,
        a=max(1, spec.n_heads // tp),
        kv=max(1, spec.n_kv_heads // tp),
        d=spec.head_dim,
        f=max(1, spec.ffn_size // tp),
        V=spec.vocab_size,
    )


def _cfg(spec: ModelSpec, *keys: str, default=None):
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


def _fused_qkv(spec: ModelSpec) -> bool:
    return any(t.module in ("c_attn", "query_key_value", "qkv_proj", "Wqkv") for t in spec.tensors[:64])


def _fused_gate_up(spec: ModelSpec) -> bool:
    return any(t.module in ("gate_up_proj",) for t in spec.tensors[:64])


@dataclass(frozen=True, slots=True)
class LayerActivations:
    """Bytes one block saves for backward (training) and its transient peak."""

    saved: int          # kept until this layer's backward
    quadratic: int      # of `saved`, the part that grows with S^2 (eager attention)
    checkpoint_input: int  # what full checkpointing keeps instead (the block's input)


def _norm_saved(kind: str, h: int, t: int, r: int, c: int, consumers: int, casts: bool) -> int:
    """What a norm and the linears reading its output keep.

    RMSNorm (HF LlamaRMSNorm): ``x.to(float32)`` (kept by ``pow``), the normalized tensor cast
    back to the input dtype (kept by ``weight * x``), and the output (kept by the next linears).
    LayerNorm (``native_layer_norm``): its input and fp32 mean/rstd (b*s each).
    Under autocast each consuming linear keeps its own cast of the output.
    """
    if kind == "rmsnorm":
        own = _r(4 * h * t) + _r(r * h * t) if r != 4 else 2 * _r(4 * h * t)
    else:
        own = _r(r * h * t) + 2 * _r(4 * t)
    out = consumers * _r(c * h * t) if casts else _r(r * h * t)
    return own + out


def layer_activations(spec: ModelSpec, w: Workload, b: int, s: int, *, cross_s: int = 0, tp: int = 1) -> LayerActivations:
    """Saved-for-backward bytes of one transformer block for a micro-batch of b sequences of s tokens."""
    D = _dims(spec, tp)
    t = b * s
    sp = tp  # sequence parallel: per-token tensors outside the TP regions are split too
    c = DTYPE_BYTES[w.compute_dtype]
    autocast = w.amp is not None and w.dtype == "fp32"
    r = 4 if (w.dtype == "fp32") else c
    casts = autocast
    p_attn, p_hid = dropout_probs(spec)
    qkv_consumers = 1 if _fused_qkv(spec) else 3
    mlp_consumers = 1 if (_fused_gate_up(spec) or not spec.gated_mlp) else 2
    total = 0
    quad = 0

    # --- attention input norm (pre-norm) / post-norm after attention ---------------------------------
    total += _norm_saved(spec.norm, D.h, t, r, c, qkv_consumers, casts) // sp

    # --- q, k, v (rotary makes new tensors; learned positions keep the projections' outputs) --------
    q = _r(c * D.a * D.d * t)
    kv = _r(c * D.kv * D.d * t)
    attention = w.attention
    S = s
    if attention == "eager" or (attention == "sdpa" and spec.kind != "decoder"):
        # eager (and SDPA with an explicit mask) expands GQA keys/values to every head (repeat_kv)
        kv_saved = _r(c * D.a * D.d * t) if D.kv != D.a else kv
    else:
        kv_saved = kv
    total += q + 2 * kv_saved
    if attention == "eager" and w.checkpointing != "selective":
        probs = b * D.a * s * S
        q_bytes = _softmax_saved(spec, probs, c, autocast)
        if p_attn > 0:
            q_bytes += _r(probs) + _r(c * probs)  # dropout mask (bool on CUDA) and dropped probabilities
        quad += q_bytes
        total += q_bytes
    elif attention != "eager":
        # flash / memory-efficient SDPA keep the output and the fp32 log-sum-exp (b, a, s)
        total += _r(c * D.a * D.d * t) + _r(4 * b * D.a * s)
    total += _r(c * D.a * D.d * t)  # attn_output.transpose(1, 2).contiguous(): input of o_proj
    if p_hid > 0:
        total += _r(D.h * t) // sp  # residual dropout mask after o_proj

    # --- cross-attention (encoder-decoder decoder blocks) ---------------------------------------------
    if cross_s:
        total += _norm_saved(spec.norm, D.h, t, r, c, 1, casts) // sp
        total += q + 2 * _r(c * D.a * D.d * b * cross_s) + _r(c * D.a * D.d * t)
        if attention == "eager":
            probs = b * D.a * s * cross_s
            cq = _softmax_saved(spec, probs, c, autocast)
            if p_attn > 0:
                cq += _r(probs) + _r(c * probs)
            quad += cq
            total += cq
        else:
            total += _r(c * D.a * D.d * t) + _r(4 * b * D.a * s)
        if p_hid > 0:
            total += _r(D.h * t) // sp

    # --- MLP --------------------------------------------------------------------------------------
    total += _norm_saved(spec.norm, D.h, t, r, c, mlp_consumers, casts) // sp
    total += _mlp_saved(spec, D, t, c)
    if p_hid > 0:
        total += _r(D.h * t) // sp
    return LayerActivations(saved=total, quadratic=quad, checkpoint_input=_r(r * D.h * t) // sp)


def _softmax_saved(spec: ModelSpec, probs: int, c: int, autocast: bool) -> int:
    """Softmax keeps its output; an fp32 softmax (by the model or by autocast) adds the cast copy for probs @ v."""
    sm = 4 if (autocast or c == 4 or spec.model_type in FP32_SOFTMAX) else c
    return _r(sm * probs) + (_r(c * probs) if sm != c else 0)


def _act_saved(act: str, n: int, c: int) -> int:
    """Bytes an activation function keeps of an n-element input, plus its output (kept by the next linear)."""
    if act in ("relu",):
        return _r(c * n)  # relu keeps only its output, which the next linear keeps too
    if act in ("gelu_new", "gelu_fast"):
        # transformers NewGELUActivation is written in Python: x, tanh(.), 0.5*x and 1+tanh(.) are kept
        return 5 * _r(c * n)
    return 2 * _r(c * n)  # input (for the derivative) and output


def _mlp_saved(spec: ModelSpec, D: Dims, t: int, c: int) -> int:
    if spec.is_moe:
        k = max(1, spec.experts_per_token)
        E = spec.n_experts
        routed = t * k
        per_expert = _r(c * D.h * routed) + 4 * _r(c * D.f * routed) + _r(c * D.h * routed)
        router = _r(c * E * t) + _r(4 * E * t)
        return per_expert + router
    if spec.gated_mlp:
        return 4 * _r(c * D.f * t)  # gate, act(gate), up, act(gate)*up
    return _act_saved(spec.activation, D.f * t, c)


def has_lm_head(spec: ModelSpec) -> bool:
    """Whether the architecture ends in a vocabulary projection (``...LMHeadModel``, ``...ForCausalLM``...)."""
    arch = spec.architecture
    if "LMHead" in arch or arch.endswith(("ForCausalLM", "ForMaskedLM", "ForConditionalGeneration", "ForPreTraining")):
        return True
    return False


def logits_bytes(spec: ModelSpec, w: Workload, tokens: int) -> int:
    """The logits of ``tokens`` tokens in the compute dtype (0 without an LM head)."""
    return _r(DTYPE_BYTES[w.compute_dtype] * spec.vocab_size * tokens) if has_lm_head(spec) else 0


def head_saved(spec: ModelSpec, w: Workload, b: int, s: int) -> tuple[int, int, str]:
    """(saved for backward at the loss, transient peak at the loss, explanation) of the LM head.

    Causal LMs in transformers (``ForCausalLMLoss``) upcast the logits to fp32 and
    ``cross_entropy`` keeps the fp32 ``log_softmax`` output: c*V + 4*V + 4*V bytes per token
    at the loss. Masked LMs take cross entropy in the compute dtype. Classifiers are tiny.
    """
    t = b * s
    V = spec.vocab_size
    c = DTYPE_BYTES[w.compute_dtype]
    arch = spec.architecture
    if not has_lm_head(spec):
        return 0, 0, "no LM head"
    logits = _r(c * V * t)
    if arch.endswith("ForMaskedLM"):
        saved = _r(c * V * t)
        return saved, logits + saved, "masked-LM logits and log_softmax in the compute dtype"
    upcast = _r(4 * V * t) if c != 4 else 0
    lsm = _r(4 * V * t)
    return lsm, logits + upcast + lsm, "logits (c*V), their fp32 upcast (4*V) and log_softmax (4*V) per token"


def model_level_saved(spec: ModelSpec, w: Workload, b: int, s: int) -> int:
    """Inputs, position tables and the final norm: tensors outside the blocks kept for backward."""
    t = b * s
    c = DTYPE_BYTES[w.compute_dtype]
    r = 4 if w.dtype == "fp32" else c
    total = _r(8 * t) * 2  # input_ids and labels, int64
    if spec.position == "rotary":
        total += 2 * _r(c * spec.head_dim * t)  # cos and sin, shared by all layers
    _, p_hid = dropout_probs(spec)
    if p_hid > 0:
        total += _r(spec.hidden_size * t)  # embedding dropout mask
    total += _norm_saved(spec.norm, spec.hidden_size, t, r, c, 1, w.amp is not None and w.dtype == "fp32")
    if spec.kind == "encoder-decoder":
        total += _norm_saved(spec.norm, spec.hidden_size, t, r, c, 1, False)  # encoder final norm
    return total


def inference_layer_peak(spec: ModelSpec, w: Workload, b: int, s: int, S: int, tp: int = 1) -> int:
    """Largest working set inside one block during a no-grad forward of s new tokens over S keys."""
    D = _dims(spec, tp)
    t = b * s
    c = DTYPE_BYTES[w.compute_dtype]
    stream = 2 * _r(c * D.h * t)  # residual and normalized input
    if w.attention == "eager":
        probs = b * D.a * s * S
        attn = 2 * _r(c * probs) + _r(4 * probs) + 3 * _r(c * D.a * D.d * t)
    else:
        attn = 4 * _r(c * D.a * D.d * t) + _r(4 * b * D.a * s)
    if spec.is_moe:
        k = max(1, spec.experts_per_token)
        mlp = 3 * _r(c * D.f * t * k) // max(1, k) + _r(c * D.h * t * k)
    elif spec.gated_mlp:
        mlp = 3 * _r(c * D.f * t)
    else:
        mlp = 2 * _r(c * D.f * t)
    return stream + max(attn, mlp)
