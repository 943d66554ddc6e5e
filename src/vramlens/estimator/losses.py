"""The causal-LM loss as training stacks run it: chunked cross-entropy and fused linear cross-entropy.

With t = b*s tokens, V the vocabulary, h the hidden size, c bytes of the compute dtype:

* transformers (``ForCausalLMLoss``): the logits (c*V*t), their fp32 upcast and the fp32
  ``log_softmax`` (kept for backward); backward holds two fp32 b*s*V gradients
  (vramlens.estimator.activations.head_saved).
* ``--loss-chunks n``: torchtune's chunked output (``TransformerDecoder(num_output_chunks=n)``
  runs the output layer on ``h.chunk(n, dim=1)``) and ``CEWithChunkedOutputLoss``
  (torchtune/modules/loss/ce_chunked_output_loss.py: ``F.cross_entropy(chunk.float(), ...)`` per
  chunk). Every chunk's logits and fp32 ``log_softmax`` exist as before, but the fp32 upcast
  exists one chunk at a time, and the loss' backward holds one chunk's two fp32 gradients.
  Autograd runs every chunk's loss backward before the output layer's (the loss nodes are
  younger), then the output layer's backward once per chunk: its weight gradients meet in
  autograd's InputBuffer, which adds them out of place (the sum and two addends: 3 x V*h).
* ``--loss fused-linear``: Liger's ``fused_linear_cross_entropy_forward``
  (liger_kernel/ops/fused_linear_cross_entropy.py) computes the gradients in forward:
  ``grad_input = zeros_like(input)`` (c*h*t, kept for backward), ``grad_weight =
  zeros_like(weight)`` when the output layer trains (it becomes the weight's .grad), an fp32
  loss per token, and per chunk of ``next_power_of_2(ceil(t / ceil(V / h)))`` tokens (Liger's
  rule: a chunk's logits about the size of the input) the chunk's logits, overwritten in place
  by their gradient, and ``chunk_grad @ weight`` (c*h per token) copied into grad_input.
* ``--loss logits-sum``: the loop of transformers' model docs' SDPA benchmarks (``outputs =
  model(**inputs); loss = outputs.logits.sum(); loss.backward()``, no labels). Nothing is saved
  for the sum, but ``outputs`` holds the logits (c*V*t) through backward, and the previous step's
  until the next forward returns (the name is rebound then). ``SumBackward`` hands back
  ``grad.expand(sizes)`` (no bytes); on CUDA the output layer's matmuls cannot read that stride-0
  gradient and clone it dense (``prepare_matrix_for_cublas``, aten/src/ATen/native/cuda/Blas.cpp):
  c*V*t more while the output layer's backward runs. With an older ``--transformers-version`` whose forward
  returns a (key, value) tuple per block (ModelSpec.legacy_presents, Workload.holds_presents), ``outputs`` holds
  those too: :func:`presents_held`.
"""

from __future__ import annotations

from dataclasses import dataclass

from vramlens.estimator.masks import kv_prefix, repeats_kv, sdpa_masked
from vramlens.models.spec import ModelSpec
from vramlens.units import DTYPE_BYTES
from vramlens.units import block_bytes as _r  # one allocation's bytes, in 512-byte blocks
from vramlens.workload import Workload, evolve


def liger_chunk_tokens(tokens: int, hidden: int, vocab: int) -> int:
    """Liger's chunk: ``triton.next_power_of_2(triton.cdiv(BT, triton.cdiv(V, H)))`` tokens."""
    inc = -(-vocab // hidden)
    n = -(-tokens // inc)
    return 1 << max(0, (n - 1).bit_length())


def seq_chunks(s: int, n: int) -> tuple[int, int]:
    """(tokens per chunk along the sequence, number of chunks) of ``torch.chunk(n, dim=1)``."""
    size = -(-s // n)
    return size, -(-s // size)


@dataclass(frozen=True, slots=True)
class LossFigures:
    """What the loss keeps and holds, in bytes (see the module docstring)."""

    saved: int          # kept from the loss' forward into backward (activations)
    peak: int           # alive at the loss' forward peak, saved included
    backward: int       # the loss' backward transient beyond what it saved
    head_backward: int  # the output layer's first backward: the logits' gradients alive (beyond acts - saved)
    head_grads: int     # output-layer weight gradients (state's head_grad) alive at once in its later backwards
    head_backward_later: int  # what else is alive then: logits' gradients, the summed weight gradients
    grad_in_forward: bool  # the output layer's weight gradient exists from the forward on (Liger)
    formula: str
    final_norm_backward: int = 0  # the final norm's backward, with the hidden states' gradient (c*h*t)
    held: int = 0  # of saved, what the loop holds past the loss' backward (Fabric's fp32 logits in LitGPT's loop)
    #: of ``backward``, what is alive beyond ``saved`` at its peak (None: all of it)
    backward_over: int | None = None


def final_norm_backward(spec: ModelSpec, w: Workload, t: int) -> int:
    """The final norm's backward over t tokens, with the gradient it receives (c*h*t).

    Once the loss no longer dominates, the next peak of backward is here, with every activation
    still alive. HF's RMSNorm is Python ops (``x.float()``, ``pow``, ``mean``, ``rsqrt``, two
    products): their backward makes five fp32 h*t tensors; ``native_layer_norm_backward`` makes
    the input's gradient alone.
    """
    h = spec.hidden_size
    c = DTYPE_BYTES[w.compute_dtype]
    own = 5 * _r(4 * h * t) if spec.norm in ("rmsnorm", "t5norm") else _r((4 if w.run_dtype == "fp32" else c) * h * t)
    return _r(c * h * t) + own


def presents_held(spec: ModelSpec, w: Workload, t: int) -> tuple[int, int]:
    """What the loop's ``outputs`` holds of the per-block (key, value) tuples an older transformers release returns
    (ModelSpec.legacy_presents), over t tokens: (one step's, alive through its backward and the next forward until
    it returns; of those, what the step's autograd does not keep). (0, 0) unless Workload.holds_presents.

    Every storage a tuple views stays alive with it: GPT-2's whole ``c_attn`` output, GPT-NeoX's ``query_key_value``
    output, OPT's contiguous keys and values. In the tuple's own step SDPA keeps views of them anyway, and so does
    OPT's eager bmm; GPT-2's and GPT-NeoX's eager matmuls keep copies instead (``LegacyPresents.eager_copies``), so
    only the tuple keeps the storages. GPT-NeoX's fp32 key: eager's baddbmm keeps it (counted in the blocks:
    vramlens.estimator.activations.layer_activations), SDPA its fp16 cast.
    """
    lp = spec.legacy_presents
    if lp is None or not w.holds_presents(lp.before):
        return 0, 0
    c, L, tp = DTYPE_BYTES[w.compute_dtype], spec.n_decoder_layers, max(1, w.tp)
    eager = w.attention == "eager"
    storages, key = sum(_r(c * n // tp * t) for n in lp.kept), _r(4 * lp.key_fp32 // tp * t)
    return L * (storages + key), L * (storages if eager and lp.eager_copies else 0) + L * (0 if eager else key)


def cache_held(spec: ModelSpec, w: Workload, b: int, s: int) -> tuple[int, int]:
    """What a loop that holds ``outputs`` (Workload.outputs_held) keeps of the KV cache its training forward
    returned, over b sequences of s tokens on this GPU: (all of it; of that, what the step's autograd does not keep).

    An older release's per-block tuples: :func:`presents_held`. Otherwise the forward builds a DynamicCache when the
    config's ``use_cache`` is on (LlamaModel.forward and its kin in transformers 5; gradient checkpointing turns it
    off, GradientCheckpointingLayer in modeling_layers.py): each layer's keys and values, copied by
    ``DynamicLayer.update``'s ``torch.cat`` onto an empty tensor (cache_utils.py), and the attention then runs on
    the copies, so its kernel keeps them and not the projections' outputs: separate projections (Llama, Qwen, OPT)
    hold nothing beyond autograd then. Where the kernel keeps something else, by what the tracer measures:

    * the attention expands GQA keys and values to every head (repeat_kv, or --gqa-expand) and keeps the expanded
      copies: the cache's copies are on top;
    * GPT-2's fused ``c_attn`` (learned positions, ModelSpec.qkv_views): under SDPA q is still a view of the fused
      output, which stays, and the copies of k and v are on top;
    * GPT-NeoX's fused ``query_key_value`` (rotary, ModelSpec.fused_qkv_kept): under SDPA the kernel kept v's view
      of the fused output (activations.layer_activations); it keeps v's copy instead and the fused output goes, a
      saving of as much as the copies (negative); eager's matmuls kept copies already (nothing).

    A sliding layer's cache still holds the whole sequence after one forward (kv_cache.kv_cache_bytes' prefill).
    The layers' keys and values stay in ``outputs`` after backward.
    """
    from vramlens.estimator.kv_cache import kv_cache_bytes

    lp = spec.legacy_presents
    if lp is not None and w.holds_presents(lp.before):
        return presents_held(spec, w, b * s)
    if not (w.outputs_held and w.checkpointing == "none" and spec.head == "causal-lm"
            and spec.config.get("use_cache", True) is not False):
        return 0, 0
    # the training forward's own DynamicCache: in the compute dtype, unpaged (--kv-dtype and --kv-block describe an
    # inference cache and are ignored in training: Workload.ignored)
    # prefix tuning: peft's cache starts with the virtual tokens' keys and values (masks.kv_prefix)
    cache = kv_cache_bytes(spec, evolve(w, kv_dtype=None, kv_block=0), s + kv_prefix(w), b, max(1, w.tp),
                           prefill=True)
    c = DTYPE_BYTES[w.compute_dtype]
    # a padded batch's mask (or a KV prefix's) makes SDPA expand them too (masks.sdpa_masked)
    if (repeats_kv(spec, w.attention, sdpa_masked(spec, w), c) or w.gqa_expand) and spec.n_kv_heads not in (1, spec.n_heads):
        return cache, cache
    if w.attention == "eager" or w.fused_qkv:
        return cache, 0
    if spec.qkv_views:
        return cache, cache
    return cache, -cache if spec.fused_qkv_kept and spec.position == "rotary" else 0


def loss_figures(spec: ModelSpec, w: Workload, b: int, s: int) -> LossFigures | None:
    """The figures of a chunked or fused causal-LM loss, or None for transformers' own loss."""
    t = b * s
    V, h = spec.vocab_size, spec.hidden_size
    c = DTYPE_BYTES[w.compute_dtype]
    if w.loss_chunks <= 1 and w.loss == "cross-entropy":
        if not (w.compiled_loss and c != 4):
            return None
        # torchtitan's compiled cross_entropy_loss: one "chunk" of the whole sequence
        return compiled_chunks(b, s, 1, _r(c * V * t), 0, final_norm_backward(spec, w, t))
    norm = final_norm_backward(spec, w, t)
    if w.loss == "logits-sum":
        logits = _r(c * V * t)
        prev, held = cache_held(spec, w, b, s)
        # saved: this step's logits (and what of its presents autograd does not keep), held by ``outputs`` (not
        # by autograd) through backward; peak: the previous step's outputs beside them until the forward
        # returns; the output layer's backward: the logits and their dense gradient; the final norm's: the
        # logits still held
        return LossFigures(saved=logits + held, peak=2 * logits + held + prev, backward=0,
                           head_backward=2 * logits + held, head_grads=1, head_backward_later=0, grad_in_forward=False,
                           final_norm_backward=norm + logits + held,
                           formula="logits.sum() (no labels): the logits (c*V per token) held by the loop's outputs, "
                                   "the previous step's until the forward returns, their gradient cloned dense for "
                                   "the output layer's matmuls (CUDA)"
                                   + (f"; with them every block's (key, value) tuple of transformers "
                                      f"{w.transformers_version} (the previous step's {prev:,} B, this step's fp32 "
                                      f"keys {held:,} B)" if prev else ""))
    if w.loss == "fused-linear":
        k = min(t, liger_chunk_tokens(t, h, V))
        grad_x = _r(c * h * t)
        loss_1d = _r(4 * t)
        work = _r(c * V * k) + _r(c * h * k)
        # a tied output layer's grad_weight is not the .grad: autograd adds the embedding's gradient
        # to it (a new tensor), so it stays an activation until the embedding's backward
        tied = _r(DTYPE_BYTES[w.dtype] * V * h // max(1, w.tp)) if (w.method == "full" and spec.tied_embeddings) else 0
        return LossFigures(saved=grad_x + tied, peak=grad_x + tied + loss_1d + work, backward=0, head_backward=0,
                           head_grads=1, head_backward_later=0,
                           grad_in_forward=not tied, final_norm_backward=norm,
                           formula=f"fused linear cross-entropy (Liger): grad_input c*h*t kept, one chunk of {k:,} "
                                   "tokens of logits (next_power_of_2(ceil(t / ceil(V/h)))) at a time")
    size, n = seq_chunks(s, w.loss_chunks)
    lc = _r(c * V * b * size)   # one chunk's logits (the last may be shorter: counted full, an upper bound)
    # one chunk's fp32 upcast or log_softmax; LitGPT's chunked_cross_entropy (--no-loss-upcast) keeps the
    # log_softmax in the logits' dtype and makes no upcast
    fc = _r(4 * V * b * size) if w.loss_upcast else lc
    upcast = fc if (c != 4 and w.loss_upcast) else 0
    # the output layer's backward runs per chunk, last chunk first: the first holds the other chunks'
    # logit gradients and one weight gradient; from the second on, two weight-gradient addends and
    # their sum (in the compute dtype under autocast: the gradients of autocast's cached cast)
    later = max(0, n - 2) * lc
    if w.method == "full" and n > 1:
        wb = c if w.autocast else DTYPE_BYTES[w.run_dtype]
        later += 3 * _r(wb * V * h // max(1, w.tp))
    if w.compile and w.training and c != 4:
        return compiled_chunks(b, size, n, lc, later, norm)
    if w.output_upcast:
        return fabric_upcast_chunks(b, size, n, lc, _r(4 * V * b * size), later, norm, w.holds_next)
    # the loss' backward: autograd runs every chunk's cross-entropy before any output-layer call (made later: higher
    # sequence numbers), each leaving its chunk's logit gradient (the upcast's backward casts it back to the logits'
    # dtype) and freeing its saved log_softmax; the last one's two fp32 gradients (nll's, log_softmax's) beside the
    # other n - 1 chunks' gradients. Beyond what the loss saved that is at most 2*fc (a chunk's gradient, lc, is
    # no larger than the log_softmax it replaces)
    return LossFigures(saved=n * fc, peak=n * lc + n * fc + upcast, backward=(n - 1) * lc + 2 * fc,
                       backward_over=2 * fc, head_backward=(n - 1) * lc,
                       head_grads=0 if n > 1 else 1, head_backward_later=later, grad_in_forward=False,
                       final_norm_backward=norm,
                       formula=(f"chunked cross-entropy ({n} chunks of {b}x{size} tokens): every chunk's logits and "
                                "fp32 log_softmax, the fp32 upcast and the backward's two fp32 gradients one chunk at a time"
                                if w.loss_upcast else
                                f"chunked cross-entropy in the logits' dtype ({n} chunks of {b}x{size} tokens, LitGPT's "
                                "chunked_cross_entropy): every chunk's logits and log_softmax, the backward's two "
                                "gradients one chunk at a time"))


def upcast_logits_held(spec: ModelSpec, w: Workload, b: int, s: int) -> int:
    """The fp32 logits a loop holds after Lightning Fabric's output cast (Workload.output_upcast): every chunk's
    4*V*(b x chunk) bytes; 0 without the cast."""
    if not w.output_upcast or not w.training or w.loss_chunks <= 1:
        return 0
    size, n = seq_chunks(s, w.loss_chunks)
    return n * _r(4 * spec.vocab_size * b * size)


def fabric_upcast_chunks(b: int, size: int, n: int, lc: int, f32: int, later: int, norm: int,
                         next_forward: bool) -> LossFigures:
    """LitGPT's chunked loss on the logits Lightning Fabric cast to fp32 (Workload.output_upcast).

    ``_FabricModule.forward`` returns ``convert_output(output)``: ``apply_to_collection`` makes every chunk's fp32
    copy (``tensor.to(torch.get_default_dtype())``) while the half chunks are still listed, so n*lc + n*f32 are
    alive at once; then the half chunks go (the output layer's backward does not keep its output). LitGPT's loop
    holds the fp32 list (``logits = model(...)``) through backward; ``chunked_cross_entropy`` keeps each chunk's
    fp32 ``log_softmax`` (F.cross_entropy on the fp32 chunk). Backward runs every chunk's loss first (younger
    nodes), each chunk's fp32 gradient replacing its freed log_softmax, with the next chunk's two fp32 gradients
    (nll's and log_softmax's) in flight: 2*n*f32 + 2*f32 throughout. The casts' backward comes next, each
    fp32 gradient becoming a half one, then the output layer's per chunk, the fp32 logits still held. With
    ``next_forward`` the previous step's fp32 list is held until this forward returns: beside the cast of this
    step's chunks. Checked against a fake-tensor trace of Lit-GPT 8641822's GPT and finetune/lora.py loop with
    Fabric's cast (the published cases' notes)."""
    held = n * f32
    prev = held if next_forward else 0
    saved = n * f32 + held  # the log_softmax outputs (autograd) and the fp32 logits (the loop)
    return LossFigures(saved=saved, peak=max(saved, n * lc + held + prev), backward=2 * f32,
                       head_backward=(n - 1) * lc, head_grads=0 if n > 1 else 1,
                       head_backward_later=later, grad_in_forward=False, final_norm_backward=norm, held=held,
                       formula=(f"chunked cross-entropy on fp32 logits ({n} chunks of {b}x{size} tokens, LitGPT's "
                                "chunked_cross_entropy after Lightning Fabric's convert_output): every chunk's fp32 "
                                "copy held by the loop" + (" into the next forward" if next_forward else "")
                                + " and its fp32 log_softmax, the backward's two fp32 gradients one chunk at a time"))


def compiled_chunks(b: int, size: int, n: int, lc: int, later: int, norm: int) -> LossFigures:
    """torchtune's chunked loss under ``compile=True``: ``training.compile_loss`` compiles
    ``CEWithChunkedOutputLoss.compute_cross_entropy`` (``F.cross_entropy(chunk.float(), ...)``) in place;
    with n = 1, torchtitan's ``torch.compile(cross_entropy_loss)`` (``F.cross_entropy(pred.flatten(0, 1).float(),
    ...)``, torchtitan/components/loss.py, --compile-scope blocks+loss).
    With inductor's decompositions the min-cut partitioner saves each chunk's logits in the compute
    dtype and two fp32 row statistics (the row max and the log of the exponentials' sum, (rows, 1) each),
    not the fp32 ``log_softmax``: measured with the same capture as ``vramlens trace --compile``
    (torch/_inductor/decomposition.py ``select_decomp_table``, ``min_cut_rematerialization_partition``).
    The generated kernels are one reduction in forward (its outputs only: no fp32 copy of the chunk)
    and one pointwise kernel in backward that writes the chunk's gradient in the compute dtype."""
    stats = 2 * _r(4 * b * size)
    if n == 1:
        formula = (f"compiled cross-entropy over {b}x{size} tokens (torchtitan's cross_entropy_loss under "
                   "torch.compile): the logits and two fp32 row statistics kept, no fp32 upcast or log_softmax; the "
                   "backward writes the logits' gradient in the compute dtype")
    else:
        formula = (f"compiled chunked cross-entropy ({n} chunks of {b}x{size} tokens, compute_cross_entropy under "
                   "torch.compile): every chunk's logits and two fp32 row statistics kept, no fp32 log_softmax; the "
                   "backward writes one chunk's gradient at a time")
    return LossFigures(saved=n * (lc + stats), peak=n * (lc + stats), backward=lc, head_backward=(n - 1) * lc,
                       head_grads=0 if n > 1 else 1, head_backward_later=later, grad_in_forward=False,
                       final_norm_backward=norm, formula=formula)
