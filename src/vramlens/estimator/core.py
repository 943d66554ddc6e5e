"""estimate(): put the components together into a per-GPU Breakdown and a verdict.

The phase arithmetic lives in :mod:`vramlens.estimator.state` (shared with the advisor);
inference adds the KV cache, the largest block working set during prefill and the logits.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from vramlens.estimator import activations as A
from vramlens.estimator import audio as AU
from vramlens.estimator import checkpointing as C
from vramlens.estimator import compiled as CP
from vramlens.estimator import context as CTX
from vramlens.estimator import fp8 as F8
from vramlens.estimator import heads as H
from vramlens.estimator import kv_cache as K
from vramlens.estimator import masks as M
from vramlens.estimator.breakdown import Breakdown, make_breakdown
from vramlens.estimator.loading import HostLoad, host_load
from vramlens.estimator.ondevice import on_device_quant
from vramlens.estimator.parallel import Split
from vramlens.estimator.state import (
    TrainState,
    block_share,
    default_stream_state,
    head_recasts,
    recompute_casts,
    reserved_total,
    tied_last,
    train_phases,
    train_state,
)
from vramlens.estimator.verdict import usable_bytes, verdict
from vramlens.hardware.gpu import GPU
from vramlens.models.spec import ModelSpec
from vramlens.units import DTYPE_BYTES, human_bytes
from vramlens.units import block_bytes as _r  # one allocation's bytes, in 512-byte blocks
from vramlens.workload import FOUR_BIT, PREFILL_LAST_LOGITS_FROM, Workload

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
        headroom_bytes: usable memory (capacity less the headroom) minus device_total: >= 0 exactly when it fits.
        advice: the largest component, and when it does not fit, what attacks it in this workload.
        verdict: the one verdict rule in words, with both numbers ("fits (A100-80GB): 13.2 GiB of ...").
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
    verdict: str = ""
    explain: dict[str, str] = field(default_factory=dict)

    @property
    def peak_allocated(self) -> int:
        return self.breakdown.peak_allocated

    @property
    def device_total(self) -> int:
        return self.breakdown.device_total

    @property
    def host_load(self) -> HostLoad:
        """Host RAM to load the checkpoint (vramlens.estimator.loading), in the dtype the weights load in."""
        w = self.workload
        return host_load(self.model, w.dtype if w.method != "qlora" else w.compute_dtype)

    def to_dict(self) -> dict[str, Any]:
        """The ``vramlens estimate --json`` object (schema documented in the README)."""
        b = self.breakdown
        m = self.model
        return {
            "model": {
                "name": m.name,
                "model_type": m.model_type,
                "architecture": m.architecture,
                "head": m.head,
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
            "host_load": self.host_load.to_dict(),
            "effective_batch": self.workload.effective_batch,
            "gpu": None if self.gpu is None else {
                "name": self.gpu.name,
                "memory_bytes": self.gpu.memory_bytes,
                "usable_bytes": self.gpu.capacity_bytes,
            },
            "fits": self.fits,
            "headroom_bytes": self.headroom_bytes,
            "verdict": self.verdict,
            "advice": self.advice,
            "notes": list(b.notes),
        }


@dataclass(frozen=True, slots=True)
class ActivationTotals:
    """A training step's activation figures, in bytes, and the formula that explains them."""

    saved: int           # every activation kept for backward on this GPU
    one_layer: int       # one block's (recomputed in backward under full checkpointing)
    loss_transient: int  # the loss-time transient beyond what the head keeps
    head_saved: int      # what the head keeps for backward
    formula: str
    later_pass: int = 0  # embedding: alive besides gradients when the first column's backward starts
    pass_working: int = 0  # of later_pass, the block backward's own tensors (not saved activations)
    loss_backward: int | None = None  # the loss' backward transient (None: two fp32 b*s*V gradients)
    loss_backward_over: int | None = None  # ... beyond the saved activations at its peak (None: loss_backward)
    head_backward: int | None = None  # the logits' gradient entering the output layer's backward (None: the logits)
    head_grads: int = 1  # output-layer weight gradients alive at once in its later backwards (chunked logits)
    head_backward_later: int = 0  # ... and the logits' gradients still alive then
    head_grad_in_forward: bool = False  # the output layer's weight gradient exists from forward (fused loss)
    final_norm_backward: int = 0  # chunked or fused loss: the final norm's backward (losses.final_norm_backward)
    host: int = 0  # activation offloading: the saved activations' host copies (a lower bound, see README)
    dequant_forward: int = 0  # a transient inside a block's forward: 4-bit weight dequantized, DoRA's weight norm
    dequant_backward: int = 0  # ... inside a block's backward: a 4-bit weight dequantized with its gradients
    dequant_temporary: int = 0  # of those, the part that is a temporary (DoRA's identity is kept by autograd)
    mlp_backward: int = 0  # the last block's MLP backward transient (activations.mlp_backward_bytes)
    head_dequant_forward: int = 0  # a 4-bit output layer's forward matmul (activations.head_dequant_transients)
    head_dequant_backward: int = 0  # ... its backward matmul
    fp8_temporary: int = 0  # --fp8: the MLP input projection's backward casts (fp8.gate_up_backward), temporaries only
    recompute: int = 0  # what a checkpointed block's recomputation and backward add (0: nothing recomputed)
    recompute_after: int = 0  # activations freed before the first recomputation (every:N, trailing blocks)
    block_kept: int = 0  # what one block keeps for backward, on average
    loss_outside_model: bool = False  # FSDP2 under torchtune's recipe: the loss runs with nothing gathered
    #: ... and (blocks on this GPU, a block's parameters, all parameters, a block's input norm's backward with
    #: its fp32 input brought back): see offloaded_block
    offloaded_block: tuple[int, int, int, int] = (0, 0, 1, 0)
    block_backward: int = 0  # what a block's backward holds above its saved tensors
    uncheckpointed: tuple[int, int] = (1, 1)  # blocks not checkpointed, of all (autocast copies through backward)
    logits_held: int = 0  # of head_saved, what the loop holds past the loss' backward (losses.LossFigures.held)
    loss_tensor: int = 0  # the loss' largest tensor (activations.largest_loss_tensor): the reserve's allowance


@dataclass(frozen=True, slots=True)
class VisionFigures:
    """A VLM's image path for ``w.batch * w.images`` images: what training keeps until backward (the
    tower's blocks, pixels and the projector's inputs) and the working set of inference's prefill
    while the tower runs."""

    saved: int
    prefill: int
    tokens: int  # image tokens added to each sequence
    held: int = 0  # inference: the image outputs the model's output keeps alive through the decoder


def vision_figures(spec: ModelSpec, w: Workload) -> VisionFigures:
    """The tower of ``spec.vlm`` run over b x images images at the processor's size, its blocks' activations
    from the same formulas as a ViT (layer_activations on the tower's own spec, every block: transformers runs
    the whole tower although LLaVA reads hidden_states[-2]), then the projector:

    * ``mlp2`` (LlavaMultiModalProjector.forward): ``linear_1`` keeps its input when it trains, a copy of
      the features without the class token (``[:, 1:]`` is not viewable as 2-D), the activation keeps
      ``linear_1``'s output and ``linear_2`` the activation's output when it trains (b*i*F*H each); under
      LoRA an adapted linear's lora_A keeps the input (or its fp32 cast) instead.
    * ``pool_norm_matmul`` (Gemma3MultiModalProjector.forward): ``AvgPool2d`` keeps its contiguous input
      (b*i*T*h_v), the RMSNorm its fp32 input and output over the pooled tokens, the matmul its input
      when the projection weight trains.

    ``masked_scatter`` keeps only its (b, S, 1) bool mask; the merged embeddings are the decoder's input.
    The model's output holds its ``image_outputs`` through the step (the tower's last hidden state, the
    projector's output), and in inference the pixels and LLaVA's selected hidden state and concatenated
    features too (``held``, alive through the decoder). LLaVA-NeXT (``VLM.anyres``): the tower and projector
    over b x images x (1 + tiles) crops, and the output holds pack_image_features' packed per-image tensors
    (b x image tokens x H) instead of linear_2's output (inference: those and the forward's torch.cat of them).
    Checked by crosscheck.VLM_ROWS.
    """
    v = spec.vlm
    assert v is not None
    if v.dynamic is not None:
        return dynamic_vision_figures(spec, w)
    if v.tiled is not None:
        return tiled_vision_figures(spec, w)
    tower, tv = v.tower, v.tower.vision
    assert tv is not None
    n_img = w.batch * w.images
    tokens = w.images * v.image_tokens
    packed = 0  # LLaVA-NeXT: the packed per-image features (pack_image_features' output), b*i*tokens*H
    if v.anyres is not None:
        # anyres: the tower and the projector run over every crop (1 + tiles an image); pack_image_features
        # then builds each image's sequence (unpadded tiles, newlines, base crop) as a new tensor
        Hq, Wq = w.image_size or v.anyres.default_image
        tokens = w.images * v.anyres.tokens(Hq, Wq)
        packed = _r(DTYPE_BYTES[w.compute_dtype] * w.batch * tokens * v.text_hidden)
        n_img *= v.anyres.crops(Hq, Wq)
    if not n_img:
        return VisionFigures(0, 0, 0)
    T = tv.tokens(v.image_size, v.image_size)
    wt = replace(w, batch=n_img, seq=T, images=0, image_size=None, task=None, new_tokens=0)
    c = DTYPE_BYTES[w.compute_dtype]
    r = 4 if w.run_dtype == "fp32" else c
    hv, H_, F = tower.hidden_size, v.text_hidden, v.feature_tokens
    if not w.training:
        embeds = _r(c * spec.hidden_size * w.batch * (w.seq + tokens))  # the text embeddings wait for the images
        work = A.inference_layer_peak(tower, wt, n_img, T, T, tp=1) + A.pixel_inference(tower, wt, n_img)
        # held through the decoder by the output's image_outputs and the forward's locals: the pixels, the
        # tower's last hidden state (and LLaVA's selected one), the projector's output and LLaVA's torch.cat
        # of its per-image list
        # (LLaVA-NeXT: the output's pooler_output is the packed list, and the forward's torch.cat of it)
        proj_out = 2 * packed if v.anyres is not None else 2 * _r(c * n_img * F * H_)
        held = A.pixel_inference(tower, wt, n_img) + _r(c * n_img * T * hv) + proj_out // 2
        if v.projector == "mlp2":
            held += _r(c * n_img * T * hv) + proj_out // 2
        return VisionFigures(0, embeds + work, tokens, held)
    blocks = _block_figures(tower, wt, [(A.layer_activations(tower, wt, n_img, T), tower.n_layers)])
    saved = blocks.kept + A.pixel_saved(tower, wt, n_img)
    full = w.method == "full"
    if v.projector == "mlp2":
        # a linear keeps its input for its weight's gradient (full), or peft's lora_A keeps it (the fp32 cast
        # when the adapters' dtype differs: lora_casts_input) with its (tokens, r) output for lora_B; frozen, none
        lora_b = 4 if A.lora_casts_input(w) else r
        for leaf, k, copy in (("linear_1", hv, F != T), ("linear_2", H_, False)):
            tokens_in = n_img * F
            if full:
                saved += _r(r * tokens_in * k) if (copy or leaf == "linear_2") else 0
            elif A.trains(w, leaf):
                saved += _r(lora_b * tokens_in * k) + _r(4 * tokens_in * w.lora_rank)
        saved += _r(r * n_img * F * H_)  # the activation's input (a gradient flows to the tower)
    else:
        n = v.image_tokens
        saved += _r(r * n_img * T * hv)  # AvgPool2d's contiguous input
        if tv.final_norm_all_tokens:
            saved += A._norm_saved("layernorm", hv, n_img * T, r, c, 0, False, full)  # post_layernorm, every token
        # mm_soft_emb_norm, and the matmul that keeps its output for the projection weight's gradient (full)
        saved += A._norm_saved(A.norm_kind(spec), hv, n_img * n, r, c, 1 if full else 0, False, full)
    saved += _r(w.batch * (w.seq + tokens))  # masked_scatter's bool mask
    # the model's output keeps its image_outputs through the step: the tower's last hidden state and the
    # projector's output (LLaVA's per-image views of linear_2's, Gemma 3's projected tokens)
    # (LLaVA-NeXT: pack_image_features' packed per-image tensors instead, linear_2's output then freed)
    saved += _r(c * n_img * T * hv) + (packed if v.anyres is not None else
                                         _r(c * n_img * (F if v.projector == "mlp2" else v.image_tokens) * H_))
    return VisionFigures(saved, 0, tokens)


def vlm_image_size(spec: ModelSpec, w: Workload) -> tuple[int, int]:
    """The (height, width) of the images a VLM's processor hands the tower: --image-size resized by
    smart_resize for a dynamic-resolution VLM (Qwen2.5-VL; its default side when not given), else the
    tower's fixed size."""
    v = spec.vlm
    assert v is not None
    if v.dynamic is None:
        return v.image_size, v.image_size
    h, w_ = w.image_size or (v.image_size, v.image_size)
    return v.dynamic.resized(h, w_)


def dynamic_vision_figures(spec: ModelSpec, w: Workload) -> VisionFigures:
    """Qwen2.5-VL's image path (``VLM.dynamic``; modeling_qwen2_5_vl.py), analytic: no trace checks it.

    Each image, resized by smart_resize to H' x W', is gh x gw = (H'/p) x (W'/p) patches. The blocks'
    activations come from the same formulas as a ViT's (layer_activations on the tower's spec): the blocks in
    ``full_blocks`` over all T = gh*gw patches of an image, the others as windows (``DynamicImages.windows``),
    each window a sequence of its own (transformers splits the packed patches by cu_seqlens and runs the
    attention per window, or flash-attention's varlen kernel over them). The pixels are fp32
    (patches, C * temporal_patch * p * p); the axial rotary's fp32 cos and sin (patches, d) are kept through
    backward. ``Qwen2_5_VLPatchMerger``: ``ln_q`` (an RMSNorm over the tower's
    width, kept as a norm is), ``mlp.0``'s input (the normed patches viewed 4 at a time), GELU's input
    (``mlp.0``'s output) and ``mlp.2``'s input (GELU's output), each n_img * T * h_v elements, when those
    linears train; then ``masked_scatter``'s bool mask. Inference: the tower's largest block working set
    with the pixels, then the merged image tokens held through the decoder.
    """
    v = spec.vlm
    assert v is not None and v.dynamic is not None
    dyn, tower = v.dynamic, v.tower
    n_img = w.batch * w.images
    Hr, Wr = vlm_image_size(spec, w)
    per_image = dyn.tokens(Hr, Wr)
    tokens = w.images * per_image
    if not n_img:
        return VisionFigures(0, 0, 0)
    T = (Hr // dyn.patch) * (Wr // dyn.patch)
    wt = replace(w, batch=n_img, seq=T, images=0, image_size=(Hr, Wr), task=None, new_tokens=0)
    c = DTYPE_BYTES[w.compute_dtype]
    r = 4 if w.run_dtype == "fp32" else c
    hv, H_ = tower.hidden_size, v.text_hidden
    if not w.training:
        pixels = A.pixel_inference(tower, wt, n_img)
        embeds = _r(c * spec.hidden_size * w.batch * (w.seq + tokens))
        work = A.inference_layer_peak(tower, wt, n_img, T, T, tp=1) + pixels
        held = pixels + _r(c * n_img * per_image * H_)
        return VisionFigures(0, embeds + work, tokens, held)
    n_full = sum(1 for i in dyn.full_blocks if i < tower.n_layers)
    groups = [A.layer_activations(tower, replace(wt, seq=size), n_img * count, size)
              for size, count in dyn.windows(Hr, Wr)]
    window = A.LayerActivations(saved=sum(la.saved for la in groups), quadratic=sum(la.quadratic for la in groups),
                                checkpoint_input=sum(la.checkpoint_input for la in groups))
    layers = [(A.layer_activations(tower, wt, n_img, T), n_full), (window, tower.n_layers - n_full)]
    blocks = _block_figures(tower, wt, [(la, n) for la, n in layers if n])
    # the fp32 cos and sin of the axial rotary, (n_img * T, d) each, which every block's rotation keeps
    saved = blocks.kept + A.pixel_saved(tower, wt, n_img) + 2 * _r(4 * n_img * T * tower.head_dim)
    full = w.method == "full"
    t = n_img * T  # the merger's rows, 4 patches each, n_img * T * h_v elements either way
    saved += A._norm_saved(A.norm_kind(tower), hv, t, r, c, 1 if full else 0, False, full)
    lora_b = 4 if A.lora_casts_input(w) else r
    for leaf in ("0", "2"):
        if full:
            saved += _r(r * t * hv) if leaf == "2" else 0  # mlp.0's input is ln_q's output, counted above
        elif A.trains(w, leaf):
            saved += _r(lora_b * t * hv) + _r(4 * (t // (dyn.merge * dyn.merge)) * w.lora_rank)
    saved += _r(r * t * hv)  # GELU's input (a gradient flows to the tower)
    saved += _r(w.batch * (w.seq + tokens))  # masked_scatter's bool mask
    return VisionFigures(saved, 0, tokens)


def tiled_image(spec: ModelSpec, w: Workload) -> tuple[int, int]:
    """The (height, width) a tiled VLM (Llama 4) is asked to take: --image-size, else one tile's size."""
    v = spec.vlm
    assert v is not None
    return w.image_size or (v.image_size, v.image_size)


def tiled_vision_figures(spec: ModelSpec, w: Workload) -> VisionFigures:
    """Llama 4's image path (``VLM.tiled``; modeling_llama4.py), checked by crosscheck.VLM_ROWS (llama4-vlm-tiny).

    Each image is cut into ``TiledImages.tiles`` tiles of 336x336 (the global tile included), each a row of the
    tower: n = b x images x tiles rows of T = 577 tokens (576 patches and the class token). The pixels arrive in
    the weights' dtype (``Llama4VisionModel.forward`` does not cast them) and stay alive through the step;
    ``Llama4UnfoldConvolution``'s linear keeps the unfolded patches (a copy of the pixels' size) when it trains;
    ``layernorm_pre`` and ``layernorm_post`` keep their inputs and fp32 statistics; the blocks come from the ViT
    formulas (layer_activations on the tower's spec). ``Llama4VisionPixelShuffleMLP``: the pixel shuffle's
    ``contiguous`` copies keep nothing, ``fc1`` and ``fc2`` keep their inputs (n * 576 * h and n * 144 *
    projector_input_dim) when they train, each GELU its input; the adapter's output (n * 144 * vision_output_dim)
    is ``image_outputs.last_hidden_state``, held by the model's output through the step and read by
    ``multi_modal_projector.linear_1``; then ``masked_scatter``'s bool mask. Inference: the tower's largest block
    working set with the pixels, then the adapter's output and the projected tokens held through the decoder.
    """
    v = spec.vlm
    assert v is not None and v.tiled is not None
    tiled, tower = v.tiled, v.tower
    tv = tower.vision
    assert tv is not None
    Hq, Wq = tiled_image(spec, w)
    tokens = w.images * tiled.prompt_tokens(Hq, Wq)
    n = w.batch * w.images * tiled.tiles(Hq, Wq)
    if not n:
        return VisionFigures(0, 0, 0)
    T = tv.tokens(v.image_size, v.image_size)
    wt = replace(w, batch=n, seq=T, images=0, image_size=None, task=None, new_tokens=0)
    c = DTYPE_BYTES[w.compute_dtype]
    r = 4 if w.run_dtype == "fp32" else c
    hv, H_, m = tower.hidden_size, v.text_hidden, tiled.per_tile
    fc1 = next(t.shape for t in tower.tensors if t.name == "vision_adapter.mlp.fc1.weight")[0]
    out = next(t.shape for t in tower.tensors if t.name == "vision_adapter.mlp.fc2.weight")[0]
    pixels = _r(r * n * tv.channels * v.image_size * v.image_size)
    adapter_out = _r(c * n * m * out)
    if not w.training:
        embeds = _r(c * spec.hidden_size * w.batch * (w.seq + tokens))
        work = A.inference_layer_peak(tower, wt, n, T, T, tp=1) + pixels
        return VisionFigures(0, embeds + work, tokens, pixels + adapter_out + _r(c * n * m * H_))
    blocks = _block_figures(tower, wt, [(A.layer_activations(tower, wt, n, T), tower.n_layers)])
    full = w.method == "full"
    saved = blocks.kept + pixels
    lora_b = 4 if A.lora_casts_input(w) else r
    # the linears outside the blocks: (leaf, rows, input width); linear_1 reads the held adapter output
    for leaf, rows, k in (("linear", n * (T - 1), tv.channels * tv.patch_size ** 2), ("fc1", n * m, 4 * hv),
                          ("fc2", n * m, fc1), ("linear_1", n * m, out)):
        if full:
            saved += _r(r * rows * k) if leaf != "linear_1" else 0
        elif A.trains(w, leaf):
            saved += _r(lora_b * rows * k) + _r(4 * rows * w.lora_rank)
    for width in (hv, hv):  # layernorm_pre over the embeddings, layernorm_post over the last block's output
        saved += A._norm_saved("layernorm", width, n * T, r, c, 0, False, full)
    saved += _r(r * n * m * fc1) + _r(r * n * m * out)  # the two GELUs' inputs
    saved += adapter_out  # image_outputs.last_hidden_state, held by the output
    saved += _r(w.batch * (w.seq + tokens))  # masked_scatter's bool mask
    return VisionFigures(saved, 0, tokens)


def activation_totals(spec: ModelSpec, w: Workload, sp: Split) -> ActivationTotals:
    """The activations of a training step of ``w`` on the split ``sp`` (shared with the advisor's FastMemory)."""
    b, s = w.batch, w.seq
    tp = w.tp
    if spec.kind == "encoder-decoder":
        se = AU.encoder_tokens(spec, w)  # Whisper's 1,500 positions per window; T5's seq
        enc = A.layer_activations(spec, w, b, se, tp=tp)
        dec = A.layer_activations(spec, w, b, s, cross_s=se, tp=tp)
        layers = [(enc, spec.n_encoder_layers), (dec, spec.n_decoder_layers)]
    else:
        # blocks of different kinds (sliding and global attention, dense and MoE MLPs) each counted as they are
        layers = [(A.layer_activations(spec, w, b, s, tp=tp, layer=i), n) for i, n in A.layer_kinds(spec)]
    compiled = w.compile and w.training and not CP.unmodelled(spec, w)
    if compiled and w.checkpointing == "none":
        # --compile: what the min-cut partitioner keeps (vramlens.estimator.compiled); a checkpointed block
        # keeps its input either way, and its recomputation is eager's
        cb = CP.block(spec, w, b, s)
        layers = [(A.LayerActivations(saved=cb.total, quadratic=0, checkpoint_input=cb.residual_in), spec.n_layers)]
    # the blocks of one stage: under interleaved 1F1B each in-flight (stage, micro-batch) holds a stage's share
    frac = sp.layers / max(1, spec.n_layers * sp.stages_per_rank)
    # the embedding case runs the blocks once per text column, both graphs alive until backward
    inflight = sp.micro_batches_in_flight * H.columns(spec, w)
    blocks = _block_figures(spec, w, layers)
    kept, one, formula = blocks.kept, blocks.one, blocks.formula
    kept = int(kept * frac) * inflight
    # --compile-scope blocks (torchtune, torchtitan): only the blocks are compiled; the embedding, the final
    # norm, the output layer and a plain loss run eagerly, so they save what eager PyTorch saves
    whole = compiled and w.compile_scope == "model"
    if whole:
        model_level = CP.model_level(spec, w, b, s)
    else:
        model_level = A.model_level_saved(spec, w, b, s)
        if compiled and sp.has_head:
            model_level -= CP.eager_final_norm_overlap(spec, w, b, s)
    model_level *= H.columns(spec, w)
    if sp.has_head:
        # bitsandbytes < 0.43.2: a 4-bit output layer keeps its input (the final norm's output) on its node
        model_level += A.bnb_kept_head_input(spec, w, b, s)
    untracked = 0
    if not C.whole_blocks(w) and not compiled:  # a checkpointed block keeps its inputs whatever needs a gradient
        # (the compiled LoRA block counts its own: vramlens.estimator.compiled.lora_block)
        untracked = A.untracked_before_first_adapter(spec, w, b, s)[0] * H.columns(spec, w)
        model_level -= untracked
    host = 0
    if w.activation_offload:
        # torchtune OffloadActivations (training/_activation_offloading.py): every tensor the blocks
        # save (>= 1,024 B, not a parameter) is copied to pinned host memory as it is saved and its GPU
        # storage freed; the output layer (NoOpManager) and the loss (outside the context) keep theirs
        moved, stashed = A.offloaded_model_level(spec, w, b, s)
        cols = H.columns(spec, w)
        # ... and each save is its own host copy: a storage saved by several ops, the linears' weights
        recopied, final_norm_recopied = A.offload_recopies(spec, w, b, s)
        host = (kept - untracked + int(recopied * frac) * inflight
                + (moved + stashed + (final_norm_recopied if sp.has_head else 0)) * cols)
        model_level -= moved * cols
        kept = 0
    # the chunked loss has its own compiled figures (vramlens.estimator.losses.compiled_chunks)
    compiled_head = whole and w.loss_chunks <= 1
    head_saved, head_peak, head_formula = CP.head(spec, w, b, s) if compiled_head else A.head_saved(spec, w, b, s)
    if not sp.has_head:
        head_saved = head_peak = 0
    # a chunked loss under autocast: each chunk's call of the frozen output layer saves a cast weight of its own
    recasts = head_recasts(spec, w, sp.has_head)
    head_saved, head_peak = head_saved + recasts, head_peak + recasts
    # compiled with the model, the loss is one fused reduction: its largest tensor is the logits
    loss_tensor = 0 if not sp.has_head else (A.logits_bytes(spec, w, b * s) if compiled_head
                                             else A.largest_loss_tensor(spec, w, b, s))
    held, held_logits = outputs_in_step(spec, w, sp)
    later = working = 0
    cols = H.columns(spec, w)
    if cols > 1:
        # autograd runs the last column's graph first (higher sequence numbers), so every gradient
        # exists when the first column's backward starts with its activations all alive; each block
        # gradient it computes is a new tensor added into .grad (AccumulateGrad). Its first op, the
        # MLP's down projection, holds the incoming gradient (b*s*h), the gradient of its input
        # (b*s*f) and the new weight gradient (h*f)
        t = b * s
        working = (_r((4 if w.run_dtype == "fp32" else DTYPE_BYTES[w.compute_dtype]) * spec.hidden_size * t)
                   + _r(DTYPE_BYTES[w.compute_dtype] * max(1, spec.ffn_size // tp) * t)
                   + (_r(DTYPE_BYTES[w.dtype] * spec.hidden_size * max(1, spec.ffn_size // tp))
                      if w.method == "full" else 0))
        later = (kept + model_level) * (cols - 1) // cols + working
    from vramlens.estimator.losses import final_norm_backward as norm_backward
    from vramlens.estimator.losses import loss_figures

    lf = loss_figures(spec, w, b, s) if (sp.has_head and A.has_lm_head(spec)) else None
    lb = A.loss_backward(spec, w, b, s) if lf is None else None
    loss_backward = lf.backward if lf is not None else (lb.transient if lb is not None else None)
    loss_backward_over = lb.over_saved if lb is not None else (lf.backward_over if lf is not None else None)
    if compiled_head and sp.has_head:
        loss_backward = CP.loss_backward(spec, w, b, s)
        loss_backward_over = loss_backward - head_saved  # the head's saved tensors are dropped by then
    if A.local_vocab(spec, w) != spec.vocab_size and sp.has_head:
        # loss_parallel's backward (torch/distributed/tensor/parallel/loss.py
        # _nll_loss_and_log_softmax_backward, torch 2.13) computes the logits' gradient from the saved
        # log_softmax x as (zeros_like(x) with -1 scattered in + exp(x)) * grad_output: three fp32 shards
        # beside x at once (the zeros and exp(x) with their sum, then the zeros and the sum with the product)
        loss_backward = 3 * head_saved
        loss_backward_over = None
    deq_fwd, deq_bwd = A.dequant_transients(spec, w, b * s, tp)
    head_fwd, head_bwd = A.head_dequant_transients(spec, w, b, s) if sp.has_head else (0, 0)
    dora = A.dora_forward_transient(spec, w, training=True, tp=tp)
    # LoHa's delta weight: built in forward and backward (against one block's saved tensors, under checkpointing
    # too, where ``one`` is the recomputation's figure)
    delta = A.delta_transients(spec, w, b, s, max(la.saved for la, _ in layers))
    if w.autocast and delta.temporary:
        # the delta methods under autocast: the output layer's frozen cast weight (counted with the frozen casts in
        # forward and through backward) is made after the blocks' forward and freed with the head's backward, before
        # any block's delta backward runs
        head_cast = output_layer_cast(spec, w, sp.has_head)
        delta = replace(delta, forward=max(0, delta.forward - head_cast), backward=max(0, delta.backward - head_cast))
    # --fp8: torchao's casts inside the blocks (vramlens.estimator.fp8); the down projection's backward
    # is a candidate of its own beside the MLP's bf16 gradients, in the last block or a recomputed one
    f8_fwd = F8.forward_transient(spec, w, b, s, tp)
    f8_bwd = F8.down_backward(spec, w, b, s, tp) if sp.layers else 0
    if f8_bwd and tp > 1:
        # under the float8 TP styles the input projections' backward casts once and no saved input: their
        # temporaries, less the MLP's saved tensors freed by then, are the larger candidate of a wide MLP
        f8_bwd = max(f8_bwd, F8.gate_up_backward(spec, w, b, s, tp) - F8.tp_mlp_freed(spec, w, b, s, tp))
    block_bwd = recompute_mlp_gradients(spec, w)
    mlp_bwd = A.mlp_backward_bytes(spec, w, b, s, tp) if sp.layers else 0
    # under autocast a recomputed block casts its weights again (state.recompute_casts)
    recompute = blocks.recompute + (recompute_casts(spec, w)[0] if blocks.recompute else 0)
    delta_in_recompute = bool(recompute and delta.temporary)
    if delta_in_recompute:
        # peft's delta methods under checkpointing (transformers 5.24's gradient_checkpointing_enable: non-reentrant
        # torch.utils.checkpoint around each decoder layer): the block's recomputed forward builds the delta (or
        # OFT's / BOFT's rotation) again and F.linear keeps it, then the block's backward runs the delta's backward
        # (activations.DELTA_BACKWARD) once the tensors saved after that linear (and the MLP's gradients) are
        # freed: delta.backward over the recomputed block's saved tensors with its output's gradient, in place of
        # adding the whole temporary to the recomputation (the existing 4-bit dequantization's way); a trailing
        # uncheckpointed block (every:N) runs it over every block's activations, less those freed by then
        final_norm = A.final_norm_saved(spec, w, b, s) if sp.has_head else 0
        recompute = max(recompute, recompute - block_bwd + delta.backward,
                        delta.backward + int(blocks.freed * frac) * inflight + final_norm
                        if any(C.trailing_uncheckpointed(spec, w)) else 0)
    # the recomputed forward stops at the down projection's input cast (the last tensor its backward needs), the
    # bf16 product alive and the float8 copy being made, the gradient of the block's output waiting: the recomputed
    # block's saved tensors (less the float8 copy torchao's float8 TP styles save), plus the cast. Below the down
    # projection's backward under tensorwise and rowwise; rowwise_with_gw_hp's backward casts no t x f tensor
    recompute_cast = (recompute - block_bwd + f8_fwd - F8.tp_down_input(spec, w, b, s, tp)
                      if f8_fwd and recompute else 0)
    if f8_bwd:
        if C.last_block_checkpointed(spec, w):
            recompute += max(0, f8_bwd - block_bwd)
        else:
            mlp_bwd = max(mlp_bwd, f8_bwd)
        block_bwd = max(block_bwd, f8_bwd)
    recompute = max(recompute, recompute_cast)
    dora_tmp = max(0, dora - A.dora_identity_bytes(spec, w, tp))
    return ActivationTotals(saved=kept + model_level + head_saved + held, one_layer=one,
                            loss_transient=head_peak - head_saved - held_logits,
                            dequant_forward=max(deq_fwd, dora, f8_fwd, delta.forward),
                            dequant_backward=max(deq_bwd, delta.backward),
                            dequant_temporary=max(deq_fwd, deq_bwd, dora_tmp,
                                                  0 if delta_in_recompute else delta.temporary),
                            loss_backward=loss_backward, loss_backward_over=loss_backward_over,
                            head_backward=None if lf is None else lf.head_backward,
                            head_grads=1 if lf is None else lf.head_grads,
                            head_backward_later=0 if lf is None else lf.head_backward_later,
                            head_grad_in_forward=lf is not None and lf.grad_in_forward,
                            final_norm_backward=0 if lf is None else lf.final_norm_backward, host=host,
                            head_saved=head_saved, logits_held=0 if lf is None else lf.held, loss_tensor=loss_tensor,
                            formula=formula + "; " + head_formula
                            + (f"; x{cols} text columns (anchor, positive), each its own forward" if cols > 1 else ""),
                            later_pass=later, pass_working=working, recompute=recompute,
                            recompute_after=(int(blocks.freed * frac) * inflight + (
                                A.final_norm_saved(spec, w, b, s) if blocks.recompute and sp.has_head else 0)),
                            uncheckpointed=blocks.uncheckpointed,
                            # offloaded, a block's saved tensors are not in the GPU's activations to free
                            block_kept=0 if w.activation_offload else blocks.kept // max(1, spec.n_layers),
                            loss_outside_model=w.activation_offload and w.fsdp,
                            offloaded_block=((sp.layers, *block_share(spec),
                                              norm_backward(spec, w, b * s) + _r(4 * spec.hidden_size * b * s))
                                             if w.activation_offload and w.fsdp and sp.layers else (0, 0, 1, 0)),
                            block_backward=block_bwd, mlp_backward=mlp_bwd,
                            head_dequant_forward=head_fwd, head_dequant_backward=head_bwd,
                            fp8_temporary=F8.gate_up_backward(spec, w, b, s, tp) if sp.layers else 0)


@dataclass(frozen=True, slots=True)
class BlockFigures:
    """The blocks' activations under a checkpointing mode (vramlens.estimator.checkpointing)."""

    kept: int            # saved through backward by all blocks (before pipeline split and columns)
    one: int             # one block's figure (its saved activations, or what its recomputation adds)
    recompute: int       # what a checkpointed block's recomputation and backward add (0: none)
    freed: int           # activations freed before the first recomputation's peak (trailing blocks, handed-back outputs)
    uncheckpointed: tuple[int, int]
    formula: str


def checkpointing_notes(spec: ModelSpec, w: Workload) -> list[str]:
    """What the model makes of the checkpointing and precision settings (the Workload cannot tell alone)."""
    out: list[str] = []
    if w.training and w.checkpoint_every is not None and not any(C.checkpointed(spec, w)):
        out.append(f"checkpointing={w.checkpointing!r} checkpoints no block: the model has {spec.n_layers} blocks "
                   f"(torchtitan checkpoints block i when i % {w.checkpoint_every} == 0): use a smaller N")
    if w.fsdp_mixed_precision:
        out.append(f"FSDP2 MixedPrecisionPolicy(param_dtype={w.amp}, reduce_dtype=fp32): fp32 sharded parameters, "
                   f"gradients and optimizer states; each block all-gathered in {w.amp} and computed in {w.amp} (no "
                   "autocast); gradients reduce-scattered in fp32")
    return out


def recompute_mlp_gradients(spec: ModelSpec, w: Workload) -> int:
    """What a block's backward holds beyond its saved tensors, at its MLP.

    Gated MLP (``down(act(gate(x)) * up(x))``): the product's backward computes both its inputs'
    gradients (b*s*f each) from the incoming one (b*s*f); when the down projection kept the
    product as its input (its weight trains) that input is freed by then: two (b*s, f) tensors
    above the saved ones, else three. Plain MLP (``fc2(act(fc1(x)))``): the activation's backward
    makes its input's gradient from the incoming one: one, or two when fc2 kept nothing.
    Under autocast an activation whose output is fp32 (NewGELU's pow) runs its backward as a
    chain of fp32 elementwise ops: three fp32 (b*s, f) gradients at once, whatever fc2 kept.
    """
    f = max(spec.ffn_size, spec.dense_ffn_size)  # the widest MLP: DeepSeek's dense first blocks
    if A.act_upcasts(spec.activation, H.autocast(w)):
        return 3 * _r(4 * max(1, f // w.tp) * w.batch * w.seq)
    f_bytes = _r(DTYPE_BYTES[w.compute_dtype] * max(1, f // w.tp) * w.batch * w.seq)
    own = 0 if A.lora_casts_input(w) else 1
    if spec.is_moe:
        down_keeps = w.method == "full" and own > 0
    else:
        down_keeps = A.trained_linears(spec, w, "mlp_out") * own > 0
    # IA3's input-scaled down projection: its multiplication's backward, before the MLP's own
    ia3 = A.ia3_mul_backward(spec, w, max(1, f // w.tp) * w.batch * w.seq)
    return max(((2 if spec.gated_mlp else 1) + (0 if down_keeps else 1)) * f_bytes, ia3)


def _per_group(per_stack: tuple[int, ...], layers: list[tuple[A.LayerActivations, int]]) -> tuple[int, ...]:
    """Block counts per stack (checkpointing.stack_sizes' order) spread over ``layers``' groups: a
    stack's sliding-window blocks (activation_totals) take their share of its count."""
    if len(per_stack) == len(layers):
        return per_stack
    (count,) = per_stack  # one stack in two groups: global attention, then sliding-window blocks
    total = max(1, sum(n for _, n in layers))
    local = count * layers[1][1] // total
    return (count - local, local)


def _block_figures(spec: ModelSpec, w: Workload,
                   layers: list[tuple[A.LayerActivations, int]]) -> BlockFigures:
    b, s, tp = w.batch, w.seq, w.tp
    # a recomputed block's backward: its MLP's gradients, and the gradient of its output coming in
    r = 4 if w.run_dtype == "fp32" else DTYPE_BYTES[w.compute_dtype]
    grads = recompute_mlp_gradients(spec, w) + _r(r * spec.hidden_size * b * s)
    if spec.rel_terms and w.method == "full":
        # DeBERTa-v2: gather's backward scatters into a zero (b*a, s, R) tensor, and the repeated
        # position projection gets its (b*a, R, d) gradient (traced in full fine-tuning; under
        # LoRA the end of the recomputed forward stays the higher point)
        c = DTYPE_BYTES[w.compute_dtype]
        grads += (_r(c * b * max(1, spec.n_heads // tp) * s * spec.rel_span)
                  + _r(c * b * spec.rel_span * spec.hidden_size // tp))
    saved = max(la.saved for la, _ in layers)
    n_blocks = sum(n for _, n in layers)
    ck = _per_group(C.checkpointed(spec, w), layers)
    n_ck = sum(ck)
    if w.checkpointing == "selective-op":
        stacks = ("encoder", "decoder") if spec.kind == "encoder-decoder" else (None,)
        se = AU.encoder_tokens(spec, w)
        cross = (0, se) if spec.kind == "encoder-decoder" else (0,)
        rows = (se, s) if spec.kind == "encoder-decoder" else (s,)
        sac = [C.sac_saved(spec, w, b, n, cross_s=x, tp=tp, stack=st) for st, x, n in zip(stacks, cross, rows)]
        sac = sac * (len(layers) // len(sac))  # the sliding-window blocks share their stack's policy
        kept = sum((la.checkpoint_input + saved_i) * n for (la, n), (saved_i, _) in zip(layers, sac))
        # the recomputation rebuilds what the block saves but for the outputs the policy kept,
        # which it hands back; those nothing else saves are freed once used, before the peak
        rec = max(max(0, la.saved - shared_i) for (la, _), (_, shared_i) in zip(layers, sac)) + grads
        handed_back = max(saved_i - shared_i for saved_i, shared_i in sac)
        return BlockFigures(kept, rec, rec, handed_back, (0, 1),
                            "torchtitan per-op selective checkpointing: each block keeps its input (b*s*h), the "
                            "outputs of its 1st, 3rd, ... mm and of the SDPA kernel; the rest is recomputed")
    if w.checkpointing == "full" or (w.checkpoint_every is not None and n_ck):
        kept = sum(la.checkpoint_input * c + la.saved * (n - c) for (la, n), c in zip(layers, ck))
        one = max(la.saved for (la, _), c in zip(layers, ck) if c) + grads
        trail = _per_group(C.trailing_uncheckpointed(spec, w), layers)
        freed = sum(la.saved * k for (la, _), k in zip(layers, trail))
        if w.checkpointing == "full":
            formula = "full checkpointing: each block keeps its input (b*s*h), one block recomputed in backward"
        else:
            formula = (f"every:{w.checkpoint_every} (torchtitan selective_ac_option='{w.checkpoint_every}'): {n_ck} of "
                       f"{n_blocks} blocks keep their input (b*s*h) and are recomputed in backward, the others "
                       "keep their activations")
        return BlockFigures(kept, one, one, freed, (n_blocks - n_ck, max(1, n_blocks)), formula)
    formula = "saved for backward per block x blocks"
    if w.checkpointing == "selective":
        formula += (" (selective: attention scores recomputed)" if w.attention == "eager"
                    else " (selective: the SDPA kernel recomputed, its log-sum-exp not kept)")
    elif w.checkpoint_every is not None:
        formula += f" (every:{w.checkpoint_every}: no block is an N-th one, none checkpointed)"
    return BlockFigures(sum(la.saved * n for la, n in layers), saved, 0, 0, (1, 1), formula)


def offloaded_block(st: TrainState, fig: tuple[int, int, int, int]) -> tuple[int, int, int]:
    """train_phases' ``offloaded_block`` from ActivationTotals.offloaded_block: (blocks, one block's
    share of ``st``'s sharded gradients, the norm's backward). Shared with the advisor's FastMemory."""
    layers, block, total, norm = fig
    return layers, st.grads * block // max(1, total), norm


def held_logits_bytes(spec: ModelSpec, w: Workload) -> int:
    """``outputs.logits`` of a training forward with labels on this GPU: the compute dtype, or fp32 where an
    older release's forward upcast them (``logits = logits.float()`` in LlamaForCausalLM before 4.45,
    ModelSpec.legacy_logits_fp32)."""
    if not A.has_lm_head(spec):
        return 0
    fp32 = spec.legacy_logits_fp32 and w.runs_before(PREFILL_LAST_LOGITS_FROM)
    return _r((4 if fp32 else DTYPE_BYTES[w.compute_dtype]) * A.local_vocab(spec, w) * w.batch * w.seq)


def outputs_in_step(spec: ModelSpec, w: Workload, sp: Split) -> tuple[int, int]:
    """--holds-outputs over transformers' own loss: (what the held ``outputs`` keeps during its own step beyond
    what autograd saves, of which the logits). The loss runs inside the model's forward (ForCausalLMLoss), so
    the logits it upcasts are ``outputs.logits``, alive through backward instead of freed with the loss' forward;
    the KV cache's part beyond autograd: losses.cache_held. ``--loss logits-sum`` counts its own
    (losses.loss_figures)."""
    from vramlens.estimator.losses import cache_held

    if not (w.outputs_held and w.loss == "cross-entropy" and sp.has_head):
        return 0, 0
    logits = held_logits_bytes(spec, w)
    return logits + cache_held(spec, w, w.batch, w.seq)[1], logits


def kept_past_backward(spec: ModelSpec, w: Workload, sp: Split, logits: int) -> tuple[int, bool, bool]:
    """For train_phases: (``kept_inputs``, ``kept_next``, ``held_at_loss``), what of the saved activations backward
    does not free, whether the loop holds it into the next forward, and whether still at that forward's loss
    (--holds-outputs over transformers' loss, which runs inside the forward). bitsandbytes < 0.43.2's 4-bit matmuls keep their inputs on
    their nodes (Workload.bnb_inputs); ``--loss logits-sum``'s ``outputs`` holds the logits and, under an older
    release, every block's (key, value) tuple with the storages they view (losses.presents_held), through backward
    and until the next forward returns."""
    from vramlens.estimator.losses import cache_held, upcast_logits_held

    kept = (A.bnb_kept_input_bytes(spec, w, w.batch, w.seq, w.tp) * sp.layers * sp.micro_batches_in_flight
            // sp.stages_per_rank)
    if sp.has_head:
        kept += A.bnb_kept_head_input(spec, w, w.batch, w.seq)
    if w.outputs_held and w.loss == "cross-entropy":
        logits = held_logits_bytes(spec, w)
    outputs = logits + cache_held(spec, w, w.batch, w.seq)[0] if w.outputs_held and sp.has_head else 0
    # LitGPT's loop holds the fp32 logits of Lightning Fabric's output cast (Workload.output_upcast)
    upcast = upcast_logits_held(spec, w, w.batch, w.seq) if sp.has_head and A.has_lm_head(spec) else 0
    total = kept + outputs + upcast
    return total, total > 0 and w.holds_next, outputs > 0 and w.loss == "cross-entropy" and w.holds_next


def output_layer_cast(spec: ModelSpec, w: Workload, has_head: bool) -> int:
    """The output layer's weight cast to the compute dtype (c*V*h/tp bytes), 0 without one on this GPU."""
    if not (has_head and A.has_lm_head(spec)):
        return 0
    return _r(DTYPE_BYTES[w.compute_dtype] * spec.vocab_size * spec.hidden_size // max(1, w.tp))


def offload_frozen_casts(st: TrainState, head_cast: int) -> tuple[TrainState, int]:
    """Activation offloading of the frozen weights' casts: (the state with what stays on the GPU, bytes moved).

    The casts that ``F.linear`` saves are plain tensors, offloaded like the activations, but the
    output layer's (``head_cast``, :func:`output_layer_cast`): torchtune runs it under NoOpManager.
    Shared with the advisor's FastMemory.
    """
    kept = min(head_cast, st.frozen_casts)
    return replace(st, frozen_casts=kept), st.frozen_casts - kept


def version_notes(spec: ModelSpec, w: Workload, b: int, total_tokens: int, share: float) -> list[str]:
    """The transformers release generate() is assumed to be (inference with new tokens, its own caches)."""
    if not w.new_tokens or w.kv_block or w.mode != "inference":
        return []
    v = w.transformers_version
    out = []
    if w.prefill_all_logits and A.has_lm_head(spec) and spec.kind != "encoder-decoder":
        out.append(f"transformers {v}: the prefill computes the logits of all {w.seq:,} prompt tokens (4.45 keeps the "
                   "last one's, transformers #31292)"
                   + (f"; {spec.architecture} upcasts them to fp32 (logits.float())" if spec.legacy_logits_fp32 else "")
                   + ("; generate() keeps each forward's output until the next forward returns" if w.legacy_cache
                      else ""))
    if w.legacy_cache:
        extra = int((K.legacy_decode_bytes(spec, w, w.seq, total_tokens, b, tp=w.tp)
                     - K.decode_bytes(spec, w, w.seq, total_tokens, b, tp=w.tp)) * share)
        return [f"transformers {v}: generate() keeps the previous step's KV cache (a tuple; 4.36 - 4.41 convert it to "
                f"and from a DynamicCache in each forward) until the forward that builds the next one returns, so a "
                f"decode step holds both: +{human_bytes(extra)} of cache over 4.42 and later (transformers #30536)"] + out
    if out:
        return out
    if v is not None:
        return [f"transformers {v}: one {w.cache} cache from the prefill to the last token (4.42 and later)"]
    if w.cache == "dynamic":
        return ["transformers >= 4.42 DynamicCache assumed (give --transformers-version for older: before 4.42 "
                "every decode step held the previous cache beside the new one)"]
    return []  # the other cache kinds: a release before 4.42 is refused (Workload._cache_problems)


def position_notes(spec: ModelSpec, w: Workload) -> list[str]:
    """A note when the run's sequence is longer than the model's ``max_position_embeddings``.

    Learned position tables have that many rows: the model cannot run longer sequences at all.
    Rotary and ALiBi models run them but were not trained there (no ``rope_scaling`` in the
    config to stretch them). T5's relative buckets have no limit. Memory is estimated either way.
    """
    tokens = w.seq + (0 if w.training else w.new_tokens)
    if tokens <= spec.max_position or spec.position in ("relative", "none"):
        return []
    where = f"{tokens:,} tokens exceed the model's max_position_embeddings={spec.max_position:,}"
    if spec.position == "learned":
        return [f"{where}: its learned position table has {spec.max_position:,} rows, so it cannot run them "
                "(memory estimated anyway)"]
    if spec.config.get("rope_scaling"):
        return []
    return [f"{where} and the config has no rope_scaling: the model runs them but was not trained that long"]


def estimate_spec(spec: ModelSpec, w: Workload, gpu: GPU | None = None, *, headroom: float = DEFAULT_HEADROOM) -> Estimate:
    """Estimate per-GPU memory of workload ``w`` for ``spec`` (both already validated)."""
    sdpa_refused = not spec.sdpa and w.attention == "sdpa"
    if sdpa_refused:
        # transformers refuses SDPA for the model (``_supports_sdpa = False``, gpt-oss: its attention
        # sinks need eager, flash or flex) and picks eager when none is asked for
        w = replace(w, attention="eager")
    vision_notes = w.ignored()
    if spec.vision is not None:
        if w.image_size is None and w.seq != 512:  # Workload.seq's default
            vision_notes.append(f"ignored: seq={w.seq!r}: a vision encoder's tokens are its image patches "
                                "(--image-size)")
        H, W_ = w.image_size or (spec.vision.image_size, spec.vision.image_size)
        tokens = spec.vision.tokens(H, W_)
        w = replace(w, seq=tokens)
        p = spec.vision.patch_size
        vision_notes.append(f"{H}x{W_} images in patches of {p}: {tokens:,} tokens per image"
                            + (" (with the class token)" if spec.vision.class_token else ""))
        if (H, W_) != (spec.vision.image_size, spec.vision.image_size):
            # ViTEmbeddings.forward and CLIPVisionEmbeddings.forward raise ValueError on another size
            # unless interpolate_pos_encoding=True (bicubic interpolation of the position table per
            # forward); SigLIP's position_embedding(position_ids) then fails on the shape
            vision_notes.append(f"the model was built for {spec.vision.image_size}x{spec.vision.image_size}: "
                                f"transformers needs interpolate_pos_encoding=True for {H}x{W_} (the "
                                "interpolated position table, one per forward, is not counted)")
        if H % p or W_ % p:
            vision_notes.append(f"{H}x{W_} is not a multiple of the patch size {p}: the stride-{p} Conv2d "
                                "drops the last partial row and column of patches")
    if spec.audio is not None:
        w, audio_notes = AU.audio_workload(spec, w)
        vision_notes += audio_notes
    vis = VisionFigures(0, 0, 0)
    asked = w  # a VLM's Estimate reports the workload as given (seq: the text tokens), not seq + image tokens
    if spec.vlm is not None:
        vis = vision_figures(spec, w)
        size = spec.vlm.image_size
        dyn = spec.vlm.dynamic
        if dyn is not None and w.images:
            Hq, Wq = w.image_size or (size, size)
            Hr, Wr = vlm_image_size(spec, w)
            per = dyn.tokens(Hr, Wr)
            vision_notes.append(
                f"{Hq}x{Wq} images" + (" (the default: --image-size sets it)" if w.image_size is None else "")
                + f" resized by the processor (smart_resize, multiples of {dyn.patch * dyn.merge}) to {Hr}x{Wr}: "
                f"{(Hr // dyn.patch) * (Wr // dyn.patch):,} patches in the tower, {per:,} image tokens per image")
            vision_notes.append(f"{w.images} image(s) per sample: {vis.tokens:,} image tokens added to "
                                f"seq={w.seq:,}, {w.seq + vis.tokens:,} tokens in the decoder")
            vision_notes.append(f"{spec.architecture}'s tower and merger figures are analytic (window blocks "
                                "as per-window sequences, full blocks over each image) and not cross-checked: "
                                "the tracer cannot run this model under fake tensors")
        elif spec.vlm.anyres is not None and w.images:
            ar = spec.vlm.anyres
            Hq, Wq = w.image_size or ar.default_image
            gh, gw = ar.grid(Hq, Wq)
            vision_notes.append(
                f"{Hq}x{Wq} images" + (" (the default: --image-size sets it)" if w.image_size is None else "")
                + f" on the {gh}x{gw} anyres grid ({gh * ar.crop}x{gw * ar.crop}): {ar.crops(Hq, Wq)} crops of "
                f"{ar.crop}x{ar.crop} per image in the tower, {ar.tokens(Hq, Wq):,} image tokens per image (base "
                "crop, unpadded tiles, one newline a row)")
            vision_notes.append(f"{w.images} image(s) per sample: {vis.tokens:,} image tokens added to "
                                f"seq={w.seq:,}, {w.seq + vis.tokens:,} tokens in the decoder")
        elif spec.vlm.tiled is not None and w.images:
            til = spec.vlm.tiled
            Hq, Wq = tiled_image(spec, w)
            th, tw = til.canvas(Hq, Wq)
            vision_notes.append(
                f"{Hq}x{Wq} images" + (" (the default: --image-size sets it)" if w.image_size is None else "")
                + f" on a {th}x{tw} canvas of {til.tile}x{til.tile} tiles (Llama4ImageProcessorFast, max_patches="
                f"{til.max_tiles})" + (", plus the global tile" if th * tw > 1 else "")
                + f": {til.tiles(Hq, Wq)} tower row(s) of {(size // til.patch) ** 2 + 1} tokens (the class token's too) per "
                f"image, {til.image_tokens(Hq, Wq):,} image tokens ({til.per_tile} a tile) and "
                f"{til.prompt_tokens(Hq, Wq) - til.image_tokens(Hq, Wq)} special tokens per image")
            vision_notes.append(f"{w.images} image(s) per sample: {vis.tokens:,} tokens added to seq={w.seq:,}, "
                                f"{w.seq + vis.tokens:,} tokens in the decoder")
            vision_notes.append("the tower runs b x images x tiles rows (the ViT block formulas); transformers 5.24's "
                                f"{spec.architecture}.forward raises AttributeError (it reads image_outputs from the "
                                "language model's output): the tracer patches that in, a real run needs the fix")
        elif dyn is None and w.images:
            vision_notes.append(f"{w.images} image(s) per sample at {size}x{size}: {vis.tokens:,} image tokens "
                                f"({spec.vlm.image_tokens} per image) added to seq={w.seq:,}, "
                                f"{w.seq + vis.tokens:,} tokens in the decoder")
        if (dyn is None and spec.vlm.anyres is None and spec.vlm.tiled is None and w.image_size is not None
                and w.image_size != (size, size)):
            vision_notes.append(f"ignored: image_size={w.image_size[0]}x{w.image_size[1]}: the processor resizes "
                                f"every image to {size}x{size}")
        if w.training and w.method == "full" and dyn is not None:
            vision_notes.append("full fine-tuning trains the vision tower and its merger too (transformers leaves "
                                "every parameter trainable)")
        elif w.training and w.method == "full" and spec.vlm.tiled is not None:
            vision_notes.append("full fine-tuning trains the vision tower, its pixel-shuffle adapter and the projector "
                                "too (transformers leaves every parameter trainable)")
        elif w.training and spec.vlm.tiled is not None:
            hit = [x for x in ("q_proj", "k_proj", "v_proj", "o_proj", "fc1", "fc2", "linear", "linear_1")
                   if A.trains(replace(w, method="lora"), x)]
            vision_notes.append(f"{w.method}: peft adapts every linear named {', '.join(w.lora_adapted)}; in the vision "
                                "tower (self_attn.q/k/v/o_proj, mlp.fc1/fc2, patch_embedding.linear), the adapter "
                                f"(fc1, fc2) and the projector (linear_1) that is {', '.join(hit) if hit else 'none'}")
        elif w.training and w.method == "full":
            vision_notes.append("full fine-tuning trains the vision tower and the projector too (transformers "
                                "leaves every parameter trainable; LLaVA's own recipes freeze the tower)")
        elif w.training and dyn is not None:
            leaves = ("qkv", "proj", "gate_proj", "up_proj", "down_proj", "0", "2")  # the tower's, then the merger's
            hit = [x for x in leaves if A.trains(replace(w, method="lora"), x)]
            vision_notes.append(f"{w.method}: peft adapts every linear named {', '.join(w.lora_adapted)}; in the vision "
                                f"tower (fused attn.qkv, attn.proj, the MLP's gate/up/down_proj, the merger's mlp.0 and "
                                f"mlp.2) that is {', '.join(hit) if hit else 'none'}")
        elif w.training:
            vision_notes.append(f"{w.method}: peft adapts every linear named {', '.join(w.lora_adapted)}, the vision "
                                "tower's (and with all-linear LLaVA's projector's) included")
        w = replace(w, seq=w.seq + vis.tokens)
    if w.method == "prompt-tuning":
        # PeftModelForCausalLM.forward (src/peft/peft_model.py, peft d787f51b and 0.21.2) puts the n prompt
        # embeddings before each sequence (torch.cat((prompts, inputs_embeds), dim=1)), ones before the attention
        # mask and -100 before the labels: the model runs, and computes logits and loss over, s + n positions.
        # Reported as given
        vision_notes.append(f"prompt tuning: {w.num_virtual_tokens:,} virtual tokens before each sequence: the "
                            f"model runs {w.seq + w.num_virtual_tokens:,} positions")
        w = replace(w, seq=w.seq + w.num_virtual_tokens)
    full_seq = w.seq
    if w.cp > 1 and w.training:
        asked = w  # reported as given; the step is estimated at the rank's share of the sequence
        w = replace(w, seq=w.seq // w.cp)
    st = train_state(spec, w, gpu)
    sp = st.sp
    explain = dict(st.explain)
    notes = (vision_notes + list(st.notes)
             + (gpu.dtype_notes(w.dtype, w.amp) if gpu is not None else []))
    if sdpa_refused:
        notes.append(f"{spec.architecture} has no SDPA path in transformers (_supports_sdpa = False): "
                     f"--attention sdpa runs eager, the default; use flash for a fused kernel")
    notes += position_notes(spec, replace(w, seq=full_seq)) if spec.vision is None else []
    if cp_note := CTX.note(w, full_seq):
        notes.append(cp_note)
    cc = gpu.compute_capability if gpu is not None else None
    notes += F8.notes(w, gpu.name if gpu is not None else None, cc)
    if w.training and w.optimizer == "adamw-fp8-torchao" and cc is not None and tuple(cc) < (8, 9):
        # torchao/optim/README.md: "For FP8 optimizers on CUDA, ... CUDA compute capability >= 8.9 are required"
        notes.append(f"torchao's AdamWFp8 needs compute capability 8.9 or later; {gpu.name if gpu else ''} has "
                     f"{cc[0]}.{cc[1]}: use adamw-8bit-torchao (about the same bytes)")
    if not spec.attention_interface and (w.attention != "eager" or w.checkpointing == "selective"):
        notes.append(f"{spec.architecture} computes its attention itself (no attn_implementation): it runs eager"
                     + (", and selective checkpointing recomputes nothing" if w.checkpointing == "selective" else ""))
    notes += checkpointing_notes(spec, w)
    if CP.note(spec, w):
        notes.append(CP.note(spec, w))
    kv = 0
    if w.training:
        at = activation_totals(spec, w, sp)
        if w.cp > 1:
            # ring attention's buffers (estimator.context) beside a block's tensors at its attention call
            ring_fwd, ring_bwd = CTX.ring_attention_bytes(spec, w, w.batch, w.seq)
            at_attn = CTX.at_attention_bytes(spec, w, w.batch, w.seq)
            at = replace(at, recompute=max(at.recompute, at_attn + max(ring_fwd, ring_bwd)) if at.recompute else 0,
                         block_backward=max(at.block_backward, ring_bwd))
        acts, one_layer, loss_tmp, head_saved, act_formula = (at.saved + vis.saved, at.one_layer, at.loss_transient,
                                                              at.head_saved, at.formula)
        explain["activations"] = act_formula + (f"; the vision tower's and projector's saved tensors for "
                                                f"{w.batch * w.images} images ({vis.saved:,} B)" if vis.saved else "")
        act_host = at.host
        if act_host:
            explain["activations"] += (f"; activation offloading: the blocks' saved tensors on the host "
                                       f"({act_host:,} B), the output layer's input and the loss' on the GPU")
            if A.offload_copies_modelled(spec, w):
                notes.append("activation offloading: host_bytes is torchtune's pinned copies, one per saved tensor "
                             "of at least 1 KiB that is not a Parameter (a linear's weight.t() is copied; a tensor "
                             "saved by two ops twice); PyTorch's pinned allocator rounds each up to a power of two")
            else:
                notes.append("activation offloading: host_bytes counts each saved tensor once (a lower bound): "
                             "torchtune copies a tensor each time an op saves it, a linear's weight.t() included")
        if st.frozen_casts:
            explain["activations"] += f"; frozen weights' {w.amp} casts kept for backward ({st.frozen_casts:,} B)"
        logits = A.logits_bytes(spec, w, w.batch * w.seq) if sp.has_head else 0
        if w.activation_offload and st.frozen_casts:
            st, moved = offload_frozen_casts(st, output_layer_cast(spec, w, sp.has_head))
            act_host += moved
        kept_inputs, kept_next, held_at_loss = kept_past_backward(spec, w, sp, logits)

        def phases_of(s: TrainState) -> tuple[tuple[str, int], ...]:
            return train_phases(s, acts, loss_tmp, head_saved, w.grad_accum, logits,
                                later_pass=at.later_pass, recompute=at.recompute, recompute_after=at.recompute_after,
                                uncheckpointed=at.uncheckpointed, block_kept=at.block_kept,
                                block_backward=at.block_backward, loss_outside_model=at.loss_outside_model,
                                offloaded_block=offloaded_block(s, at.offloaded_block),
                                loss_backward=at.loss_backward,
                                loss_backward_over=at.loss_backward_over, head_backward=at.head_backward,
                                head_grads=at.head_grads, head_backward_later=at.head_backward_later,
                                head_grad_in_forward=at.head_grad_in_forward,
                                final_norm_backward=at.final_norm_backward, dequant_forward=at.dequant_forward,
                                dequant_backward=at.dequant_backward, dequant_temporary=at.dequant_temporary,
                                mlp_backward=at.mlp_backward, kept_inputs=kept_inputs,
                                kept_next=kept_next, held_at_loss=held_at_loss,
                                tied_last=tied_last(spec, sp.has_head),
                                head_dequant_forward=at.head_dequant_forward,
                                head_dequant_backward=at.head_dequant_backward, logits_held=at.logits_held)

        phases = phases_of(st)
        if spec.audio is not None and spec.tied_embeddings and st.head_grad:
            phases = _tied_embedding_backward(spec, w, st, phases)
        peak_phase, peak_alloc = max(phases, key=lambda p: p[1])
        # FSDP2: the default stream's own peak (the sharded gradients are on the reduce-scatter stream)
        default_peak = max(v for _, v in phases_of(default_stream_state(st))) if st.stream_pools else None
        reserved, total = reserved_total(st, peak_alloc, default_peak=default_peak, loss_tensor=at.loss_tensor)
        # a checkpointed block is recomputed in backward, its 4-bit matmuls dequantizing again
        recompute = at.recompute + at.dequant_temporary if at.recompute else 0
        if recompute and spec.tied_embeddings and st.head_grad:
            # a tied output layer's weight gradient waits in autograd's InputBuffer for the
            # embedding's (a temporary until they are added) while the blocks are recomputed
            recompute += st.head_grad
        # several columns: the gradients are still accumulating when the first column's backward runs
        second = st.grads + at.pass_working if at.later_pass else 0
        loss_bwd = 2 * head_saved if at.loss_backward is None else at.loss_backward
        if at.head_backward is not None:  # chunked/fused: the output layer's backward, then the final norm's
            made = st.head_grad if at.head_grad_in_forward else 0  # already the gradient, not a temporary
            loss_bwd = max(loss_bwd, at.head_backward, at.head_backward_later + at.head_grads * st.head_grad - made,
                           at.final_norm_backward)
        # Whisper: the tied output layer's gradient and the embedding's, waiting to be added, and the gradient of
        # the encoder's output (_tied_embedding_backward)
        tied = 0
        if spec.audio is not None and spec.tied_embeddings and st.head_grad:
            tied = 2 * st.head_grad + _r((4 if w.run_dtype == "fp32" else DTYPE_BYTES[w.compute_dtype]) * w.batch
                                           * AU.encoder_tokens(spec, w) * spec.hidden_size)
        # loss_parallel's _log_softmax: exp(shifted), the size of the log_softmax it precedes, is a temporary beside
        # the logits, their upcast and the shifted logits before the kept result exists (see activations.head_saved)
        lp_exp = head_saved if A.local_vocab(spec, w) != spec.vocab_size and sp.has_head else 0
        temporaries = max(loss_tmp + lp_exp, loss_bwd, st.opt_tmp + st.master_grads + st.in_backward_addend, recompute,
                          second, at.dequant_temporary, at.mlp_backward, at.fp8_temporary, tied,
                          at.head_dequant_forward, at.head_dequant_backward)
        loss_words = (("the previous step's logits, held until the forward returns", "the held logits and their "
                       "dense gradient") if w.loss == "logits-sum" and sp.has_head
                      else ("the compiled loss' row statistics", "the logits' gradient")
                      if w.compiled_loss and w.loss_chunks == 1 and sp.has_head
                      else ("logits + fp32 upcast + loss_parallel's shifted logits and their exp",
                            "loss_parallel's three fp32 shards") if lp_exp
                      else ("logits + fp32 upcast", "two fp32 gradients"))
        explain["temporaries"] = (f"max(loss: {loss_words[0]} {loss_tmp + lp_exp:,} B, loss backward: {loss_words[1]} "
                                  f"{loss_bwd:,} B, optimizer step {st.opt_tmp + st.master_grads:,} B: "
                                  f"{explain.pop('optimizer_step', '')}"
                                  + (f", one block recomputed in backward {recompute:,} B" if recompute else "")
                                  + (f", the last block's MLP backward {at.mlp_backward:,} B" if at.mlp_backward
                                     else "")
                                  + (f", the first column's backward: gradients still accumulating and a block's "
                                     f"backward tensors {second:,} B" if second else "")
                                  + (f", torchao's float8 casts in the MLP's backward {at.fp8_temporary:,} B"
                                     if at.fp8_temporary else "")
                                  + (f", inside a block: {_block_words(w)} {at.dequant_temporary:,} B"
                                     if at.dequant_temporary else "")
                                  + (f", the 4-bit output layer dequantized for its matmul (forward "
                                     f"{at.head_dequant_forward:,} B, backward {at.head_dequant_backward:,} B, "
                                     "with the logits or their gradients)" if at.head_dequant_forward else "") + ")")
        kept_n, all_n = at.uncheckpointed
        # the output layer's cast (TrainState.head_casts) is outside every checkpointed block: kept either way
        head_casts = min(st.head_casts, st.frozen_casts)
        frozen = head_casts + (st.frozen_casts - head_casts) * kept_n // all_n
        # saved in forward and kept into backward; a checkpointed block's recomputation happens in
        # backward and counts as a temporary
        activation_peak = acts + frozen
        layer_act = one_layer
        master = st.master + st.autocast
    else:
        act_host = 0  # the offloaded cache's host copy (below)
        explain.pop("optimizer_step", None)
        b, s = w.batch, w.seq
        total_tokens = s + w.new_tokens
        share = sp.layers / max(1, spec.n_layers)  # this GPU's blocks under pipeline parallelism
        if w.cache == "dynamic":
            # the cache as prefill leaves it (transformers: sliding layers still hold the whole prompt) and
            # as decoding keeps it, with one layer's old keys alive while torch.cat appends
            kv_prefill = int(K.kv_cache_bytes(spec, w, s, b, tp=w.tp, prefill=not w.kv_block) * share)
            kv_decode = 0
            if w.new_tokens and w.kv_block:
                kv_decode = int(K.kv_cache_bytes(spec, w, total_tokens, b, tp=w.tp) * share)
            elif w.new_tokens and w.legacy_cache:
                kv_decode = int(K.legacy_decode_bytes(spec, w, s, total_tokens, b, tp=w.tp) * share)
            elif w.new_tokens:
                kv_decode = int(K.decode_bytes(spec, w, s, total_tokens, b, tp=w.tp) * share)
            kv = kv_persistent = max(kv_prefill, kv_decode)
            kv_prefill_tail, kv_decode_tail = kv_prefill, kv_decode
            width = (f"{spec.kv_latent} latent elements (kv_lora_rank + qk_rope_head_dim)" if spec.kv_latent else
                     f"2 x {max(1, spec.n_kv_heads // w.tp)} kv heads x {spec.head_dim}")
            explain["kv_cache"] = (
                f"{spec.n_decoder_layers} layers x {width} x {K.kv_dtype_bytes(w)} B x {total_tokens} tokens x batch {b}"
                + (f" ({K.sliding_layers(spec)} sliding layers keep {spec.sliding_window} tokens once decoding, the "
                   f"prompt after prefill)" if K.sliding_layers(spec) else "")
                + (f" + the previous step's whole cache ({total_tokens - 1} tokens): transformers "
                   f"{w.transformers_version}'s generate() holds it until the forward returns"
                   if w.new_tokens and w.legacy_cache else
                   " + one layer's old keys (a sliding layer's keys and values) while torch.cat appends"
                   if w.new_tokens and not w.kv_block else "")
                + (f" + the cross-attention's keys and values of {AU.encoder_tokens(spec, w):,} encoder positions per "
                   "row, computed once from the encoder's output" if spec.audio is not None else "")
            )
        else:
            cf = K.cache_figures(spec, w, tp=w.tp)
            kv_prefill, kv_decode, kv_persistent = (int(x * share) for x in (cf.prefill, cf.decode, cf.persistent))
            kv_prefill_tail = kv_prefill if cf.prefill_tail is None else int(cf.prefill_tail * share)
            kv_decode_tail = kv_decode if cf.decode_tail is None else int(cf.decode_tail * share)
            kv = max(kv_prefill, kv_decode)
            act_host = int(cf.host * share)
            explain["kv_cache"] = cf.formula + (f" ({act_host:,} B on the host)" if act_host else "")
        # eager attention over a static cache attends to all M slots, through a (b, 1, s, M) mask
        # (masking_utils.eager_mask; SDPA skips the mask in a prefill and slices the keys to s)
        eager_static = w.cache == "static" and w.attention == "eager"
        prefill_keys = K.max_cache_len(w) if eager_static else s
        work = A.inference_layer_peak(spec, w, b, s, prefill_keys, tp=w.tp) + A.pixel_inference(spec, w, b)
        work = max(work + vis.held, vis.prefill)  # the vision tower runs first in prefill
        if eager_static:
            work += _r(DTYPE_BYTES[w.compute_dtype] * b * s * prefill_keys)
        c = DTYPE_BYTES[w.compute_dtype]
        logits_tokens = b if w.new_tokens else b * s
        logits = _r(c * spec.vocab_size * logits_tokens) if A.has_lm_head(spec) else 0
        if w.new_tokens and logits:
            logits += _r(4 * spec.vocab_size * b)  # generate() upcasts the last logits to fp32
        # the blocks' working set is gone by the time the head computes the logits
        tail = logits + (_r(c * spec.hidden_size * b * s) if logits else 0)
        if M.padded_mask(spec, w):
            # a padded batch's int64 attention_mask (b, s), an input alive through the forward
            work += _r(8 * b * s)
            tail += _r(8 * b * s)
        # transformers < 4.45 (Workload.prefill_all_logits): generate()'s prefill makes every prompt token's
        # logits, and LlamaForCausalLM and its copies upcast them all (logits.float(), both alive while it runs);
        # < 4.42: generate() keeps that output (``outputs``) until the first decode step's forward returns, and
        # each step's until the next one's (transformers #30536)
        leak_first = leak_last = 0
        if w.prefill_all_logits and logits and spec.kind != "encoder-decoder":
            V = spec.vocab_size
            tail += _r(c * V * b * s) + (_r(4 * V * b * s) if spec.legacy_logits_fp32 else 0) - logits
            if w.legacy_cache:
                out_bytes = 4 if spec.legacy_logits_fp32 else c
                leak_first, leak_last = _r(out_bytes * V * b * s), _r(out_bytes * V * b)
        elif w.legacy_logits_upcast and logits and spec.legacy_logits_fp32 and spec.kind != "encoder-decoder":
            # a plain forward before 4.45: the fp32 copy of every logit beside the compute-dtype ones while
            # ``logits.float()`` runs (the output then holds the fp32 copy)
            tail += _r(4 * spec.vocab_size * b * s)
        # a 4-bit output layer holds its weight dequantized while it makes the logits (one row: gemv_4bit), over
        # every prompt token where the prefill makes all their logits
        head_tokens = b * s if (w.prefill_all_logits and spec.kind != "encoder-decoder") else logits_tokens
        head_deq = A.head_dequant_inference(spec, w, head_tokens) if logits else 0
        if head_deq:
            tail = max(tail, head_deq + _r(c * spec.hidden_size * b * s))
        head_deq_decode = A.head_dequant_inference(spec, w, b) if (logits and w.new_tokens) else 0
        encode = kept = 0
        if spec.audio is not None:
            # Whisper: the encoder runs first over 1,500 positions per window, before any cache exists
            # (its blocks' working set, or the conv front end's); its output and the input features stay
            # alive through the decoder's forward and generate() (encoder_outputs)
            se = AU.encoder_tokens(spec, w)
            feats = AU.features_bytes(spec, w, b)
            kept = _r(c * spec.hidden_size * b * se) + feats
            encode = max(A.inference_layer_peak(spec, w, b, se, se, tp=w.tp) + feats, AU.front_end_inference(spec, w, b))
            work += kept
            tail += kept
        elif logits and spec.kind == "encoder-decoder":
            # the encoder's output (kept for cross-attention) and T5's rescaled decoder output
            tail += 2 * _r(c * spec.hidden_size * b * s)
        prefill = st.weights + max(kv_prefill + work, kv_prefill_tail + tail, encode)
        keys = K.max_cache_len(w) if w.cache == "static" else total_tokens  # a static cache attends to all M slots
        decode_work = A.inference_layer_peak(spec, w, b, 1, keys, tp=w.tp) if w.new_tokens else 0
        if w.new_tokens and w.cache == "static":
            # generate's attention mask, padded to M: transformers' (b, 1, 1, M) bool mask, made an
            # additive mask in the compute dtype by SDPA's memory-efficient kernel (sdp::convert_boolean_attn_mask)
            decode_work += _r(b * keys) + _r(DTYPE_BYTES[w.compute_dtype] * b * keys)
        decode = st.weights + max(kv_decode + decode_work, kv_decode_tail + max(logits, head_deq_decode)) + (
            kept if spec.audio else 0)
        leaked_acts = 0  # the decode steps' activations with the previous forward's logits
        if leak_first:
            # the previous forward's logits through the whole step, beside the two caches (legacy_decode_steps);
            # the first step attends to s + 1 keys
            first, last = (int(x * share) for x in K.legacy_decode_steps(spec, w, s, total_tokens, b, tp=w.tp))
            work_first = A.inference_layer_peak(spec, w, b, 1, s + 1, tp=w.tp)
            head_last = max(logits, head_deq_decode)
            acts_first, acts_last = leak_first + max(work_first, head_last), leak_last + max(decode_work, head_last)
            leaked_acts = max(acts_first, acts_last)
            decode = st.weights + max(first + acts_first, last + acts_last)
        phases = (("prefill", prefill + st.workspace),) + ((("decode", decode + st.workspace),) if w.new_tokens else ())
        peak_phase, peak_alloc = max(phases, key=lambda p: p[1])
        reserved, total = reserved_total(st, peak_alloc, extra_persistent=kv_persistent)
        od = on_device_quant(spec, w)
        if od is not None:
            # the free remainder of the segments that hold the quantized weights and the cache stays reserved; the
            # run's transients are taken to need segments of their own (their reuse of it is not modelled)
            reserved, total = reserved + od.slack_bytes, total + od.slack_bytes
            notes.append(f"quantized on the GPU: {human_bytes(od.slack_bytes)} stays reserved but free inside the "
                         f"segments that hold the quantized weights and the cache (in peak reserved); loading and "
                         f"quantizing peak at {human_bytes(od.load_peak_bytes)} reserved, before the cache is emptied")
        temporaries = 0
        explain["activations"] = ("the larger of one block's working set during prefill and the logits (all tokens "
                                  "for a plain forward, the last one in generate())")
        explain["temporaries"] = "inference: counted in activations"
        activation_peak = max(work, tail, decode_work, encode, leaked_acts)
        layer_act = work
        master = 0
        if w.method != "full":
            notes.append("inference with LoRA: adapters counted in weights")
        notes += version_notes(spec, w, b, total_tokens, share)
    explain["runtime"] = st.runtime_explain
    explain.setdefault("kv_cache", "training: no cache")
    comps = {
        "weights": st.weights,
        "master_weights": master,
        "gradients": max(st.grads, st.pp_grads),
        "optimizer_states": st.opt + st.paged,
        "activations": activation_peak,
        "kv_cache": kv,
        "temporaries": temporaries,
        "comm_buffers": st.comm,
        "runtime": st.outside - st.paged + st.workspace,
    }
    if st.paged and gpu is not None and total > usable_bytes(gpu, headroom) >= total - st.paged:
        notes.append(f"paged optimizer: the allocator's peak fits, and the driver keeps "
                     f"{human_bytes(total - usable_bytes(gpu, headroom))} of the paged states in host RAM, moving "
                     "them over PCIe at each step (slower, not out of memory); the verdict counts them resident")
    bd = make_breakdown(
        comps, explain,
        peak_allocated=peak_alloc, peak_reserved=reserved, device_total=total, peak_phase=peak_phase,
        host_bytes=st.host + act_host, phases=tuple(phases), source="estimate", notes=tuple(notes),
    )
    fits = headroom_bytes = None
    advice = said = ""
    if gpu is not None:
        headroom_bytes = usable_bytes(gpu, headroom) - total  # one rule: fits means total + headroom <= capacity
        fits = headroom_bytes >= 0
        advice = _advice(bd, w, fits)
        said = verdict(total, gpu, headroom)
    return Estimate(
        model=spec, workload=asked if (spec.vlm is not None or w.cp > 1 or w.method == "prompt-tuning") else w, gpu=gpu, breakdown=bd, trainable_params=st.trainable,
        layer_activation_bytes=layer_act, fits=fits, headroom_bytes=headroom_bytes, advice=advice, explain=explain,
        verdict=said,
    )


def _tied_embedding_backward(spec: ModelSpec, w: Workload, st: TrainState,
                             phases: tuple[tuple[str, int], ...]) -> tuple[tuple[str, int], ...]:
    """Whisper's backward when it reaches the decoder's embedding, with the encoder still to go.

    ``proj_out`` is tied to ``decoder.embed_tokens``: autograd holds the output layer's weight gradient
    (V x d) in the shared leaf's InputBuffer until the embedding's backward makes its own and adds the
    two. In a decoder-only model that happens last; here the encoder's backward comes after, so every
    encoder activation, the gradient of the encoder's output (b x 1,500 x d) and the decoder's gradients
    are alive beside the two addends and their sum.
    """
    if st.gather_block or st.gather_root or st.in_backward:
        return phases
    b, se = w.batch, AU.encoder_tokens(spec, w)
    c = DTYPE_BYTES[w.compute_dtype]
    r = 4 if w.run_dtype == "fp32" else c
    enc = A.layer_activations(spec, w, b, se, tp=w.tp)
    ck = sum(C.checkpointed(spec, w)[:1]) if spec.n_encoder_layers else 0
    blocks = enc.checkpoint_input * ck + enc.saved * (spec.n_encoder_layers - ck)
    h = spec.hidden_size
    # the encoder's final norm keeps its input; its output's readers (the decoder's cross-attention) are done
    model_level = AU.front_end_saved(spec, w, b) + A._norm_saved(A.norm_kind(spec), h, b * se, r, c, 0, False)
    outside = set(spec.outside_loss)
    enc_params = sum(t.numel for t in spec.tensors if t.stack == "encoder" and t.is_parameter and t.name not in outside)
    grads = st.grads - _r(st.grads * enc_params // max(1, st.trainable))
    # autocast's weight copies: the decoder's went with its backward, the encoder's are still saved
    casts = _r(st.autocast * enc_params // max(1, st.trainable))
    at = (st.weights + st.master + st.opt + st.comm + casts + blocks + model_level + _r(r * b * se * h)
          + grads + 2 * st.head_grad + st.workspace)
    return tuple((name, max(v, at) if name == "backward" else v) for name, v in phases)


def _block_words(w: Workload) -> str:
    parts = []
    if w.quantized in FOUR_BIT:
        parts.append("a 4-bit weight dequantized for its matmul (bitsandbytes MatMul4Bit)")
    if w.method != "full" and w.dora:
        parts.append("DoRA's weight norm ||W + s*B@A|| (peft DoraLinearLayer)")
    return " or ".join(parts)


def _remedies(component: str, w: Workload) -> list[str]:
    """What attacks ``component`` in this workload: only changes the mode accepts and that are not on
    already (inference never gets ZeRO/FSDP/offload; no "turn on checkpointing" when it is on)."""
    out: list[str] = []
    train = w.training
    if component == "weights":
        if w.quantized is None:
            out.append("quantize the weights (--quant int8/nf4)")
        out.append("split them (--tp, --pp" + (", --zero 3)" if train and w.shard_stage < 3 else ")"))
    elif component == "optimizer_states":
        if "8bit" not in w.optimizer and "4bit" not in w.optimizer and "fp8" not in w.optimizer:
            out.append("use an 8-bit optimizer (--optimizer adamw-8bit, or torchao's adamw-8bit-torchao)")
        if "4bit" not in w.optimizer:
            out.append("use torchao's 4-bit AdamW (--optimizer adamw-4bit-torchao)")
        if w.method == "full":
            out.append("train adapters only (--method lora)")
        if w.shard_stage < 1:
            out.append(_shard("them", 1, w))
        if w.offload == "none":
            out.append("offload them (--offload optimizer, with --zero or --fsdp)")
        if w.offload == "none" and not (w.zero or w.fsdp) and w.optimizer != "adamw-cpu-offload-torchao":
            out.append("offload them on one GPU (--optimizer adamw-cpu-offload-torchao)")
    elif component == "master_weights":
        if w.shard_stage < 1:
            out.append(_shard("the master copy", 1, w))
        out.append("drop --amp")
    elif component == "gradients":
        if w.method == "full":
            out.append("train fewer parameters (--method lora)")
        if w.shard_stage < 2:
            out.append(_shard("gradients", 2, w))
    elif component == "activations":
        if train and w.checkpointing in ("none", "selective"):
            out.append("turn on activation checkpointing (--checkpointing every:2, selective-op or full)")
        elif train and w.checkpointing != "full":
            out.append("checkpoint every block (--checkpointing full)")
        if w.attention == "eager":
            out.append("use --attention sdpa")
        out.append("lower --batch" + (" with --grad-accum to keep the effective batch" if train else "")
                   + (" or --seq" if not train else ""))
    elif component == "kv_cache":
        out.append("shorten the context or lower --batch")
        if w.kv_dtype not in ("fp8", "int8"):
            out.append("store the cache in 8 bits (--kv-dtype fp8)")
    elif component == "temporaries":
        if train and w.loss == "cross-entropy" and w.loss_chunks == 1:
            out.append("chunk the loss (--loss-chunks 8) or fuse it with the output layer (--loss fused-linear)")
        out.append("lower --batch")
    elif component == "comm_buffers" and train:
        out.append("use ZeRO/FSDP sharding instead of DDP buckets")
    return out


def _shard(what: str, stage: int, w: Workload) -> str:
    """ZeRO shards over the data-parallel ranks: with one GPU there is nothing to shard over."""
    if w.dp > 1:
        return f"shard {what} (--zero {stage})"
    return f"shard {what} over several GPUs (--gpus N --zero {stage})"


def _advice(bd: Breakdown, w: Workload, fits: bool) -> str:
    big = bd.largest()
    share = big.bytes / max(1, bd.device_total)
    if fits:  # nothing to change: say what dominates, propose nothing
        return f"largest component: {big.name} ({share:.0%})"
    remedies = _remedies(big.name, w)
    return (f"largest component: {big.name} ({share:.0%})" + (": " + "; or ".join(remedies) if remedies else "")
            + " (vramlens fit finds the cheapest change)")

