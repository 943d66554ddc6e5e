"""``--compile``: what a ``torch.compile``d training step saves for backward.

torch.compile (inductor) runs AOT autograd on the forward and backward as one joint graph and
splits it with the min-cut rematerialization partitioner (torch/_functorch/partitioners.py
``min_cut_rematerialization_partition``, after inductor's decompositions and joint-graph passes,
torch/_inductor/compile_fx.py ``partition_fn``): of the values backward needs it saves a cheapest
cut and recomputes the pointwise ops behind it in backward. Measured with vramlens' tracer
(``vramlens trace --compile``: the partitioned graphs of Llama 2 and 3 and Qwen2.5 blocks, torch 2.13,
transformers 5.24), a Llama-style block (pre-RMSNorm, rotary, SDPA, gated SiLU MLP, no dropout)
keeps, per token t = b*s, in the compute dtype c unless named:

* ``residual_in``: the block's input (c*h); the attention norm's fp32 upcast and output are
  recomputed from it;
* ``norm_rsqrt``: each RMSNorm's fp32 ``rsqrt`` (b, s, 1), two per block;
* ``norm_out``: each RMSNorm's output, the projections' input (c*h), two per block;
* ``qkv``: the rotated q, and k and v expanded to every head (c*a*d each): under dynamo
  transformers builds the 4-D causal mask (``masking_utils.find_packed_sequence_indices`` skips
  only when not tracing), so SDPA takes the memory-efficient kernel, which has no GQA, and
  ``repeat_kv`` copies. Under ``--compile-scope blocks`` the mask is built eagerly, outside the
  graphs, and is None for a causal batch without padding, so SDPA reads k and v as they are
  (``enable_gqa``: c*kv*d each) unless the model's own code expands them (``--gqa-expand``);
* ``sdpa``: the kernel's output (c*a*d), its fp32 log-sum-exp (b, a, s) and philox seed and offset;
* ``residual_mid``: the out projection's output (c*h), from which the residual sum is recomputed;
* ``mlp``: the gate and up projections' outputs and ``act(gate) * up`` (c*f each); SiLU's output
  is recomputed (eager keeps it: 4 c*f in all).

GPT-2's blocks (:func:`gpt2_block`, measured on GPT-2) differ: Conv1D's weight gradients read their inputs
transposed, and the partitioner keeps those transposes, so the LayerNorms' and GELU's outputs stay; the
dropout masks stay too (1 byte per element).

Under LoRA on q/k/v_proj (peft's fp32 adapters, :func:`lora_block`) frozen linears keep no input: the
norm's output is kept once in fp32 (the adapters' input) with each lora_A's output, the MLP keeps gate
and up only, and nothing before the first adapter needs a gradient.

Outside the blocks: the causal mask (c*b*s*s, once), the final norm's input, rsqrt and output,
the logits in the compute dtype (the loss' fp32 ``log_softmax`` is recomputed from them in
backward, keeping its fp32 row max and log-sum, 4 bytes per token each), ForCausalLMLoss' padded
labels (b, s + 1) int64. The rotary tables are recomputed.

Under full checkpointing (Llama-style blocks, full training) each block keeps its input either way
(eager's checkpointing figures, recomputation included); the partitioner recomputes the last block's
output for the final norm and rebuilds the mask inside each block from the packed-sequence check's three
int64 (b, s) values, and the head is the compiled one (bf16 logits, not the fp32 ``log_softmax``).

Temporaries: the tracer runs the partitioned aten graphs op by op, so its in-graph temporaries
are an upper bound on inductor's, which fuses pointwise chains into kernels. The estimate takes
the same bound for the loss' backward (the aten graph's fp32 chain, :func:`loss_backward`) and
says so in notes; inductor's fused kernel needs at least the logits' bf16 gradient.
"""

from __future__ import annotations

from dataclasses import dataclass

from vramlens.estimator.activations import SDPA_RNG, dropout_probs, has_lm_head
from vramlens.models.spec import ModelSpec
from vramlens.units import BLOCK, DTYPE_BYTES
from vramlens.units import block_bytes as _r  # one allocation's bytes, in 512-byte blocks
from vramlens.workload import Workload


def unmodelled(spec: ModelSpec, w: Workload) -> str:
    """Why the compiled formula does not cover ``w`` on ``spec`` ("" when it does).

    Covered: what the tracer verified, a Llama-style decoder block in full training of half weights
    without autocast, with SDPA and transformers' own loss, on one GPU, without checkpointing.
    """
    why: list[str] = []
    p_attn, p_hid = dropout_probs(spec)
    if spec.kind != "decoder" or spec.head != "causal-lm" or not has_lm_head(spec) or spec.vision is not None:
        why.append("a causal-LM decoder")
    if not (llama_style(spec) or gpt2_style(spec)):
        why.append("Llama-style blocks (pre-RMSNorm, full rotary, gated SiLU MLP, dense, no dropout, not one KV "
                   "head) and GPT-2's (pre-LayerNorm, learned positions, GELU MLP, multi-head, dropout)")
    if (not (w.method == "full" or (lora_on_qkv(w) and llama_style(spec))) or w.quant is not None or w.fp8
            or w.dora):
        why.append("full training, or LoRA on q/k/v_proj with peft's fp32 adapters and no dropout")
    if w.autocast or w.amp is not None or w.compute_dtype == "fp32":
        why.append("half weights without autocast (--dtype bf16 or fp16)")
    if w.checkpointing not in ("none", "full") or (w.checkpointing == "full" and (w.method != "full"
                                                                                  or not llama_style(spec))):
        why.append("no checkpointing (full checkpointing: Llama-style blocks in full training)")
    if w.attention != "sdpa":
        why.append("SDPA")
    if w.tp > 1 or w.pp > 1 or w.fsdp or w.gpus > 1:
        why.append("one GPU")
    if w.loss != "cross-entropy" or w.activation_offload or w.bnb_inputs:
        why.append("transformers' own loss or torchtune's chunked one, no offloading")
    if not why:
        return ""
    return "the compiled step is modelled for " + ", ".join(why)


def llama_style(spec: ModelSpec) -> bool:
    """A Llama-style block (Llama 2 and 3, Qwen2.5 measured): pre-RMSNorm, full rotary, SDPA, gated SiLU MLP,
    dense, no dropout, and not a single KV head (one is expanded as a view, not measured)."""
    p_attn, p_hid = dropout_probs(spec)
    return (spec.kind == "decoder" and spec.norm == "rmsnorm" and not spec.norm_weight_fp32
            and spec.norm_placement == "pre" and spec.qk_norm == "none" and spec.gated_mlp
            and spec.activation in ("silu", "swish") and spec.position == "rotary"
            and spec.rotary_dim in (None, spec.head_dim) and not spec.n_experts and spec.mla is None
            and not spec.sliding_layer_ids and not spec.attention_sinks and not spec.fused_qkv_kept
            and not spec.rel_terms and not spec.nope_layer_ids and not p_attn and not p_hid
            and not (spec.n_kv_heads == 1 and spec.n_heads > 1))


def gpt2_style(spec: ModelSpec) -> bool:
    """A GPT-2 block (measured on GPT-2): pre-LayerNorm, learned positions, one fused q/k/v projection,
    multi-head attention, a plain GELU MLP, attention, residual and embedding dropout, tied embeddings."""
    p_attn, p_hid = dropout_probs(spec)
    return (spec.kind == "decoder" and spec.norm == "layernorm" and spec.norm_placement == "pre"
            and spec.position == "learned" and not spec.gated_mlp and spec.activation.startswith("gelu")
            and spec.n_kv_heads == spec.n_heads and not spec.n_experts and spec.block_dropouts == 2
            and spec.tied_embeddings and p_attn > 0 and p_hid > 0 and spec.embedding_size is None)


#: The linears a compiled LoRA block is modelled with (the attention's input projections).
QKV = ("q_proj", "k_proj", "v_proj")


def lora_on_qkv(w: Workload) -> bool:
    """LoRA (not QLoRA) on some of q/k/v_proj only, with peft's fp32 adapters and no dropout: the case measured."""
    t = tuple(w.lora_adapted)
    return (w.method == "lora" and bool(t) and set(t) <= set(QKV) and w.lora_dtype == "fp32"
            and not w.lora_dropout and not w.dora)


def note(spec: ModelSpec, w: Workload) -> str:
    """The estimate's note for ``--compile``."""
    if not (w.compile and w.training):
        return ""
    why = unmodelled(spec, w)
    if why:
        chunked = (" except the chunked loss (torchtune's compute_cross_entropy compiled: each chunk's logits and two "
                   "fp32 row statistics kept, not its fp32 log_softmax)" if w.loss_chunks > 1 else
                   " except the loss (torchtitan's compiled cross_entropy_loss: the logits and two fp32 row statistics "
                   "kept, no fp32 upcast or log_softmax)" if w.compiled_loss else "")
        return (f"compile: {why}; this run is not, so the figures are eager PyTorch's{chunked} (the min-cut "
                "partitioner saves less: measure it with `vramlens trace --compile`)")
    if w.compiled_blocks:
        outside = ("the embedding, final norm and output layer outside the blocks save what eager PyTorch saves, "
                   "and the loss is compiled on its own (--compile-scope blocks+loss: inductor keeps the logits and "
                   "two fp32 statistics per token)" if w.compiled_loss and w.loss_chunks == 1 else
                   "the embedding, final norm, output layer and "
                   + ("chunked loss (compiled by torchtune's compile_loss) " if w.loss_chunks > 1 else "loss ")
                   + f"outside the blocks save what eager PyTorch saves (--compile-scope {w.compile_scope})")
        return ("compile: each block's saved tensors as AOT autograd's min-cut partitioner keeps them "
                "(vramlens.estimator.compiled, measured by the tracer); " + outside)
    return ("compile: saved tensors as AOT autograd's min-cut partitioner keeps them (vramlens.estimator.compiled, "
            "measured by the tracer); temporaries are the aten graph's run op by op, an upper bound: inductor's "
            "fused kernels hold less in the loss' backward (at least the logits' gradient)")


def saved_kv_heads(spec: ModelSpec, w: Workload) -> int:
    """The heads of the k and v a compiled block keeps: every query head where they are expanded (one graph
    for the model: transformers builds the 4-D mask under dynamo and ``repeat_kv`` copies; or the model's
    own code expands them, ``--gqa-expand``), the KV heads where SDPA reads them as GQA (per-block graphs,
    the mask None outside them)."""
    return spec.n_heads if (w.compile_scope == "model" or w.gqa_expand) else spec.n_kv_heads


@dataclass(frozen=True, slots=True)
class CompiledBlock:
    """One compiled Llama-style block's saved tensors, term by term (bytes for the micro-batch)."""

    residual_in: int
    norm_rsqrt: int
    norm_out: int
    qkv: int
    sdpa: int
    residual_mid: int
    mlp: int

    @property
    def total(self) -> int:
        return (self.residual_in + self.norm_rsqrt + self.norm_out + self.qkv + self.sdpa + self.residual_mid
                + self.mlp)


def block(spec: ModelSpec, w: Workload, b: int, s: int) -> CompiledBlock:
    """See the module docstring; t = b*s tokens, c bytes of the compute dtype."""
    t = b * s
    c = DTYPE_BYTES[w.compute_dtype]
    h, a, d, f = spec.hidden_size, spec.n_heads, spec.head_dim, spec.ffn_size
    if w.method != "full":
        return lora_block(spec, w, b, s)
    if gpt2_style(spec):
        return gpt2_block(spec, w, b, s)
    return CompiledBlock(
        residual_in=_r(c * h * t),                   # (b, s, h)
        norm_rsqrt=2 * _r(4 * t),                    # (b, s, 1) fp32, two norms
        norm_out=2 * _r(c * h * t),                  # (b*s, h), two norms
        qkv=_r(c * a * d * t) + 2 * _r(c * saved_kv_heads(spec, w) * d * t),  # (b, a, s, d): q rotated; k, v
        sdpa=_r(c * a * d * t) + _r(4 * b * a * s) + SDPA_RNG,  # output, log-sum-exp (b, a, s), seed/offset
        residual_mid=_r(c * h * t),                  # (b*s, h): o_proj's output
        mlp=3 * _r(c * f * t),                       # (b*s, f): gate, up, act(gate) * up
    )


def lora_block(spec: ModelSpec, w: Workload, b: int, s: int) -> CompiledBlock:
    """A compiled Llama-style block under LoRA on q/k/v_proj (:func:`lora_on_qkv`): frozen linears keep no
    input, and nothing before the first block needs a gradient, so the first block's input and its norm's
    rsqrt are not kept; counted instead per block on its output side (the next norm's input and rsqrt, the
    final norm's for the last block):

    * ``residual_in``: the block's output (c*h), the next norm's input;
    * ``norm_rsqrt``: the MLP norm's and the next norm's fp32 rsqrt;
    * ``norm_out``: the attention norm's output cast to fp32 once (peft's fp32 adapters; lora_A's input,
      shared by the adapters) and each lora_A's fp32 output (r per token; lora_B's input);
    * ``qkv``, ``sdpa``: as in full training;
    * ``residual_mid``: the residual after attention (c*h), the MLP norm's input;
    * ``mlp``: the gate and up outputs (c*f each); the down projection is frozen, so their product is not kept.
    """
    t = b * s
    c = DTYPE_BYTES[w.compute_dtype]
    h, a, d, f = spec.hidden_size, spec.n_heads, spec.head_dim, spec.ffn_size
    adapters = len(set(w.lora_adapted) & set(QKV))
    return CompiledBlock(
        residual_in=_r(c * h * t),                   # (b, s, h): the block's output
        norm_rsqrt=2 * _r(4 * t),                    # (b, s, 1) fp32: the MLP norm's, the next norm's
        norm_out=_r(4 * h * t) + adapters * _r(4 * w.lora_rank * t),  # fp32 (b*s, h), each (b*s, r)
        qkv=_r(c * a * d * t) + 2 * _r(c * saved_kv_heads(spec, w) * d * t),
        sdpa=_r(c * a * d * t) + _r(4 * b * a * s) + SDPA_RNG,
        residual_mid=_r(c * h * t),
        mlp=2 * _r(c * f * t),                       # (b*s, f): gate, up
    )


def eager_final_norm_overlap(spec: ModelSpec, w: Workload, b: int, s: int) -> int:
    """Under ``--compile-scope blocks``, what the last compiled block's formula counts that the eager final
    norm counts again: :func:`lora_block` counts each block on its output side (its output and the next
    norm's rsqrt), and after the last block that norm is the model's final norm, which runs eagerly and keeps
    its own fp32 copy and rsqrt (activations.final_norm_saved). A full-training block counts its input side:
    nothing overlaps."""
    if not w.compiled_blocks or w.method == "full":
        return 0
    lb = lora_block(spec, w, b, s)
    return lb.residual_in + _r(4 * b * s)


def gpt2_block(spec: ModelSpec, w: Workload, b: int, s: int) -> CompiledBlock:
    """A compiled GPT-2 block (modeling_gpt2.py). Its Conv1D layers' weight gradients read their inputs
    transposed (``x.t() @ grad``), and the partitioner keeps those transposes (views of the LayerNorms' and
    GELU's outputs) rather than recompute them; the dropout masks are kept (1 byte per element: inductor's
    random ops are not recomputed). Counted on the output side, as the first block's input is rebuilt from
    the embeddings (:func:`model_level`):

    * ``residual_in``: the block's output (c*h), the next LayerNorm's input;
    * ``norm_rsqrt``: the two LayerNorms' mean and rstd ((b, s, 1) each, in the compute dtype);
    * ``norm_out``: the two LayerNorms' outputs (c*h each), c_attn's and c_fc's inputs;
    * ``qkv``: c_attn's output (c*3h; q, k and v are views of it);
    * ``sdpa``: the kernel's output, log-sum-exp and seeds (attention dropout inside the kernel);
    * ``residual_mid``: the residual after attention (c*h) and the residual dropout's mask (h bytes);
    * ``mlp``: c_fc's output and GELU's (c*f each) and the MLP dropout's mask (h bytes).
    """
    t = b * s
    c = DTYPE_BYTES[w.compute_dtype]
    h, a, d, f = spec.hidden_size, spec.n_heads, spec.head_dim, spec.ffn_size
    return CompiledBlock(
        residual_in=_r(c * h * t),
        norm_rsqrt=4 * _r(c * t),                    # mean and rstd of ln_1 and ln_2
        norm_out=2 * _r(c * h * t),                  # (b*s, h), kept transposed
        qkv=_r(3 * c * h * t),                       # (b*s, 3h)
        sdpa=_r(c * a * d * t) + _r(4 * b * a * s) + SDPA_RNG,
        residual_mid=_r(c * h * t) + _r(h * t),      # the residual, the bool mask after c_proj
        mlp=2 * _r(c * f * t) + _r(h * t),           # c_fc's and GELU's outputs, the bool mask after the MLP
    )


def model_level(spec: ModelSpec, w: Workload, b: int, s: int) -> int:
    """Saved outside the blocks and the head: input ids and labels (int64), ForCausalLMLoss' padded
    labels (b, s + 1), the 4-D causal mask (b, 1, s, s) in the compute dtype, the final norm's input,
    fp32 rsqrt and output."""
    t = b * s
    c = DTYPE_BYTES[w.compute_dtype]
    h = spec.hidden_size
    if gpt2_style(spec):
        # the first block's input, dropout(wte(ids) + wpe(positions)): the partitioner keeps the token and
        # position embeddings' outputs (b, s, h) and (1, s, h) when b > 1 and the dropped sum itself when b = 1
        # (measured at b = 1, 2 and 4; a choice of the min-cut, not derived here), with the dropout's mask and
        # the position ids (1, s); ln_f's mean and rstd and its output (the tied output layer's input); ln_f's
        # input is the last block's output (gpt2_block)
        inputs = _r(c * h * t) + (_r(c * h * s) if b > 1 else 0)
        embed = inputs + _r(h * t) + _r(8 * s)
        final_norm = 2 * _r(c * t) + _r(c * h * t)
        return 2 * _r(8 * t) + _r(8 * b * (s + 1)) + _r(c * b * s * s) + embed + final_norm
    if w.checkpointing == "full":
        # every block checkpointed (its input kept, counted with the blocks): the partitioner recomputes the
        # last block's output for the final norm (kept: its rsqrt and output) and rebuilds the mask in each
        # block from the packed-sequence check's three int64 (b, s) values instead of keeping it
        return 2 * _r(8 * t) + _r(8 * b * (s + 1)) + 3 * _r(8 * t) + _r(c * h * t) + _r(4 * t)
    # under LoRA the final norm's input and rsqrt are the last block's (lora_block), and the frozen output
    # layer keeps no input
    final_norm = 2 * _r(c * h * t) + _r(4 * t) if w.method == "full" else 0
    return 2 * _r(8 * t) + _r(8 * b * (s + 1)) + _r(c * b * s * s) + final_norm


def head(spec: ModelSpec, w: Workload, b: int, s: int) -> tuple[int, int, str]:
    """(saved, peak at the loss, formula) of the head: the logits kept in the compute dtype, the fp32 row
    max and log-sum (b*s, 1) each, the loss' fp32 divisor (a scalar); in forward the fp32 upcast, its
    shifted copy and their exp run op by op beside the logits."""
    t = b * s
    c = DTYPE_BYTES[w.compute_dtype]
    V = spec.vocab_size
    saved = _r(c * V * t) + 2 * _r(4 * t) + BLOCK
    peak = saved + 3 * _r(4 * V * t)
    return saved, peak, "compiled: logits (c*V) kept, fp32 row max and log-sum per token; log_softmax recomputed"


def loss_backward(spec: ModelSpec, w: Workload, b: int, s: int) -> int:
    """The loss' backward as the aten graph runs it: the logits' zero gradient (AOT autograd materializes
    the tangent of the logits output, which the loop drops, c*V) and three fp32 (b*s, V) values at once
    (the masked one-hot gradient, the logits' fp32 upcast and its shift by the row max); the saved logits
    and row statistics are read (and dropped) by then: :func:`head`'s saved bytes are not live beside it."""
    t = b * s
    c = DTYPE_BYTES[w.compute_dtype]
    V = spec.vocab_size
    return _r(c * V * t) + 3 * _r(4 * V * t)
