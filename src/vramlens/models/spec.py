"""ModelSpec: what vramlens knows about a model, wherever it came from.

A ModelSpec holds the architecture facts the formulas need (the symbols of the papers:
h hidden size, a heads, L layers, V vocabulary) and an exact tensor inventory: one
TensorInfo per entry of ``model.named_parameters()`` (tied weights listed once) plus the
buffers, so that parameter counts equal what transformers reports for the same config.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from math import ceil, floor, prod, sqrt
from typing import Any, Literal

from vramlens.errors import ConfigError
from vramlens.models.heads import Head

# What a tensor is, for the formulas that treat kinds differently (quantization touches
# only "linear"/"conv1d"/"expert"; LoRA targets "linear"/"conv1d" by module name; norms and
# biases stay in high precision).
Role = Literal[
    "embedding",           # token embedding (nn.Embedding)
    "position_embedding",  # learned absolute positions / token types / relative-attention bias
    "linear",              # weight of an nn.Linear, shape (out_features, in_features)
    "conv1d",              # weight of GPT-2's Conv1D, shape (in_features, out_features)
    "expert",              # weight of an MoE expert linear, shape (out, in) (or stacked, see shape)
    "router",              # MoE gate weight
    "lm_head",             # untied output projection, shape (vocab, hidden)
    "bias",                # any bias
    "norm",                # LayerNorm / RMSNorm weight or bias
    "other",               # anything else (e.g. classifier heads, poolers counted as linear)
    "buffer",              # a registered buffer (not a parameter)
]

ModelKind = Literal["decoder", "encoder", "encoder-decoder"]
#: Where a block's norms sit: "pre" (before attention and before the MLP: Llama), "sandwich"
#: (also after each, on the branch output: Gemma 2 and 3), "post" (only after each: OLMo 2).
NormPlacement = Literal["pre", "sandwich", "post"]
#: RMSNorm on queries and keys: "head" (per head, over d_head: Qwen3, Gemma 3), "full" (over all
#: heads, a*d_head and n_kv*d_head: OLMo 2), "l2" (per head, an L2 norm without weight on the rotary
#: blocks only: Llama 4's ``Llama4TextL2Norm``, fp32 inside, after the rotation).
QKNorm = Literal["none", "head", "full", "l2"]
#: How an MoE router scores experts, for what it keeps: "softmax" (Mixtral, Qwen: logits in the
#: compute dtype, fp32 softmax), "softmax_fp32" (DeepSeek V2: an fp32 copy of the input and fp32
#: weight), "sigmoid_grouped" (DeepSeek V3: fp32 input, sigmoid, group-limited top-k).
#: "topk_softmax" (gpt-oss ``GptOssTopKRouter``): biased logits in the compute dtype, top-k of them,
#: then a softmax over those k in the compute dtype.
#: "sigmoid_topk" (Llama 4 ``Llama4Router``): top-k of the logits, the others set to -inf, then an fp32
#: sigmoid over all E (0 outside the top-k), cast back to the compute dtype.
Router = Literal["softmax", "softmax_fp32", "sigmoid_grouped", "topk_softmax", "sigmoid_topk"]
#: What an MoE expert does between its two projections: "act" (``act_fn(gate) * up`` on the halves
#: of gate_up: Mixtral, Qwen, DeepSeek), "clamped_swiglu" (gpt-oss ``GptOssExperts._apply_gate``:
#: interleaved gate/up, both clamped, ``(up + 1) * gate * sigmoid(alpha * gate)``).
ExpertGate = Literal["act", "clamped_swiglu"]


@dataclass(frozen=True, slots=True)
class Vision:
    """An image encoder's input side (ViT, CLIP's and SigLIP's vision towers: models/families/vision.py).

    A Conv2d of stride ``patch_size`` turns (b, channels, H, W) pixels into (H//p)*(W//p) patch
    tokens; ``class_token``: a learned token is concatenated in front (ViT, CLIP; SigLIP has none);
    ``pre_norm``: a LayerNorm runs over the embeddings before the blocks (CLIP's ``pre_layrnorm``);
    ``final_norm_all_tokens``: the final norm runs over every token (ViT, SigLIP), else over the
    class token only (CLIP's ``post_layernorm`` on ``last_hidden_state[:, 0, :]``).
    """

    image_size: int
    patch_size: int
    channels: int = 3
    class_token: bool = True
    pre_norm: bool = False
    final_norm_all_tokens: bool = True
    attention_dropout: float = 0.0
    #: the forward rebinds its local to the pixels cast to the weights' dtype, so the cast copy lives
    #: through the forward (ViTModel.forward, modeling_vit.py:368-370); CLIP and SigLIP cast inside the
    #: patch embedding's call, a temporary
    input_cast_held: bool = False

    def tokens(self, height: int, width: int) -> int:
        """Tokens of one (height, width) image: Conv2d(stride=p) floors each side."""
        return (height // self.patch_size) * (width // self.patch_size) + (1 if self.class_token else 0)


@dataclass(frozen=True, slots=True)
class Audio:
    """A speech encoder's input side (Whisper: models/families/whisper.py).

    WhisperFeatureExtractor (feature_extraction_whisper.py: ``chunk_length=30``, ``sampling_rate=16000``,
    ``hop_length=160``, ``nb_max_frames = n_samples // hop_length``) pads or truncates every clip to 30 s:
    3,000 frames of ``mel_bins`` log-mel features, fp32. The encoder takes exactly
    ``source_positions * conv_stride`` frames (WhisperEncoder.forward raises ValueError otherwise) and
    its stride-2 ``conv2`` leaves ``source_positions`` (1,500) tokens per 30-second window, whatever
    the clip's length. The decoder's learned positions bound the transcript to ``target_positions``.
    """

    mel_bins: int
    source_positions: int
    target_positions: int
    conv_stride: int = 2
    #: the feature extractor's window: 30 s at 16 kHz, hop 160 (feature_extraction_whisper.py defaults)
    window_seconds: int = 30

    @property
    def frames(self) -> int:
        """Mel frames one window feeds the encoder (3,000)."""
        return self.source_positions * self.conv_stride

    def windows(self, seconds: float) -> int:
        """30-second windows a clip of ``seconds`` makes (the ASR pipeline's chunking); at least one."""
        return max(1, ceil(seconds / self.window_seconds))


@dataclass(frozen=True, slots=True)
class MLA:
    """Multi-head latent attention (DeepSeek V2/V3; transformers' ``DeepseekV3Attention``).

    Queries come from ``q_proj`` (h -> a*(nope+rope)) or, with ``q_lora_rank``, from
    ``q_a_proj`` (h -> q_lora_rank), ``q_a_layernorm`` and ``q_b_proj``; keys and values from
    one latent: ``kv_a_proj_with_mqa`` (h -> kv_lora_rank + rope), ``kv_a_layernorm`` over the
    kv_lora_rank part and ``kv_b_proj`` (kv_lora_rank -> a*(nope+v)). Query and key heads are
    nope+rope wide, value heads v wide.
    """

    q_lora_rank: int | None
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    @property
    def latent(self) -> int:
        """Elements of the compressed latent one token keeps per layer: kv_lora_rank + rope."""
        return self.kv_lora_rank + self.qk_rope_head_dim


@dataclass(frozen=True, slots=True)
class LegacyPresents:
    """What the per-layer ``(key, value)`` tuple of an older transformers release keeps alive, per token of one
    block, when a training forward returns it: the config's ``use_cache`` (True by default for GPT-2, GPT-NeoX and
    OPT) turned off only under gradient checkpointing, so a loop that calls ``model(**inputs)`` gets every block's
    tuple in ``outputs.past_key_values`` (``--loss logits-sum``: Workload.returns_presents).

    ``kept``: the widths (elements per token, compute dtype) of the storages the tuple's tensors are or view
    (GPT-2: ``c_attn``'s (b, s, 3h) output, split and viewed; OPT: the ``.contiguous()`` keys and values, h each);
    SDPA keeps views of them too; ``eager_copies``: eager attention's matmuls reshape those strided views into
    copies and keep the copies, so in the tuple's own step only the tuple keeps the storages (GPT-2, GPT-NeoX;
    OPT's eager bmm keeps the contiguous tensors themselves). ``key_fp32``: the width of a key the tuple holds in
    fp32 (GPT-NeoX: ``torch.cat`` of the part rotated by the fp32 cos/sin caches and the fp16 rest), which eager's
    baddbmm keeps and SDPA does not (it keeps the fp16 cast).
    """

    before: tuple[int, int]  # the first release whose forward returns a Cache object instead (not modelled)
    kept: tuple[int, ...]
    eager_copies: bool = True
    key_fp32: int = 0


@dataclass(frozen=True, slots=True)
class TensorInfo:
    """One parameter or buffer: its name as in ``state_dict``, shape, dtype and role.

    ``dtype`` is None when the tensor takes the dtype the model is run in; a string
    (``"fp32"``, ``"int8"``, ...) when it is fixed (a quantized checkpoint, an int64 buffer).
    ``module`` is the leaf module's attribute name (``"q_proj"``), what peft's
    ``target_modules`` matches; ``layer`` the block index, None outside the blocks.
    ``logical_shape`` is set when ``shape`` is a packed storage layout (a GPTQ ``qweight``
    int32 (in / 8, out), a bitsandbytes 4-bit uint8 (n / 2, 1)): the (out, in) shape of the
    weight it stands for, from which ``in_features``/``out_features`` are read.
    """

    name: str
    shape: tuple[int, ...]
    role: Role
    module: str = ""
    layer: int | None = None
    dtype: str | None = None
    stack: Literal["encoder", "decoder"] | None = None
    logical_shape: tuple[int, ...] | None = None

    @property
    def numel(self) -> int:
        return prod(self.shape) if self.shape else 1

    @property
    def is_parameter(self) -> bool:
        return self.role != "buffer"

    @property
    def in_features(self) -> int:
        """Input features of a linear-like weight (Conv1D stores it transposed)."""
        if self.logical_shape is not None:
            return self.logical_shape[-1]
        return self.shape[0] if self.role == "conv1d" else self.shape[-1]

    @property
    def out_features(self) -> int:
        if self.logical_shape is not None:
            return self.logical_shape[-2]
        return self.shape[-1] if self.role == "conv1d" else self.shape[-2]


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """Architecture facts plus the exact tensor inventory of one model.

    For decoder-only models ``n_decoder_layers`` is L and ``n_encoder_layers`` is 0; for
    encoder-only models the reverse; encoder-decoder models have both. ``head_dim`` is
    d_head (it may differ from h / a, e.g. T5 or Gemma). ``ffn_size`` is the MLP's inner
    size (per expert for MoE). ``n_kv_heads`` < ``n_heads`` means GQA, == 1 MQA.

    The head facts say what sits on the base model and what its loss keeps: ``head`` (the
    task the class is built for, see :mod:`vramlens.models.heads`), ``num_labels`` (a
    classifier's outputs: per sequence, per token, or 2 start/end logits per token for QA),
    ``mlm_transform`` (a dense + activation + LayerNorm over every token before the vocabulary
    projection: BERT's BertPredictionHeadTransform, RoBERTa's lm_head), ``classifier`` (how a
    sequence classifier reads the sequence: ``pooler`` BERT's pooler on the first token,
    ``dense`` RoBERTa's dropout + dense + tanh on the first token, ``score`` a linear over every
    token whose last non-pad logits are kept, ``transform`` ModernBERT's pooling, first token or masked
    mean, then its prediction head before the classifier), and ``outside_loss`` (parameters the task's loss
    does not reach, so they get no gradient and no optimizer state: BertModel's pooler under
    mean pooling).
    """

    name: str
    model_type: str
    architecture: str
    kind: ModelKind
    hidden_size: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    ffn_size: int
    vocab_size: int
    n_encoder_layers: int = 0
    n_decoder_layers: int = 0
    max_position: int = 2048
    activation: str = "gelu"
    gated_mlp: bool = False
    norm: Literal["layernorm", "rmsnorm"] = "layernorm"
    position: Literal["learned", "rotary", "alibi", "relative", "disentangled", "none"] = "learned"
    tied_embeddings: bool = False
    n_experts: int = 0
    experts_per_token: int = 0
    sliding_window: int | None = None
    torch_dtype: str | None = None
    tensors: tuple[TensorInfo, ...] = ()
    source: str = "catalog"
    assumed: tuple[str, ...] = ()
    config: dict[str, Any] = field(default_factory=dict, compare=False, hash=False, repr=False)
    quantization: dict[str, Any] | None = None
    head: Head = "causal-lm"
    num_labels: int = 0
    mlm_transform: bool = False
    classifier: Literal["pooler", "dense", "score", "transform", "first"] = "score"
    outside_loss: tuple[str, ...] = ()
    #: the attention's fused q/k/v projection output stays alive until backward although rotary
    #: makes new q and k: v is a view of it (GPT-NeoX ``query_key_value``), so a block keeps the
    #: fused output and the rotated q and k (under SDPA; eager's matmul keeps a copy of v)
    fused_qkv_kept: bool = False
    #: q, k and v are views of one fused projection's output with learned positions (GPT-2's and GPT-BigCode's
    #: ``c_attn``): SDPA keeps the output through q even when k and v come from elsewhere (a KV cache's copies)
    qkv_views: bool = False
    #: residual dropouts per block: BERT drops out the attention output and the MLP output (2),
    #: DistilBERT only the FFN output (modeling_distilbert.py ``FFN.ff_chunk``)
    block_dropouts: int = 2
    #: the attention runs through transformers' attention interface (``attn_implementation``: SDPA,
    #: flash, and what vramlens' selective recomputation wraps); False when the module computes it
    #: itself (DeBERTa-v2's DisentangledSelfAttention): it always runs eager, never recomputed
    attention_interface: bool = True
    #: the embeddings' width when a linear projects them to hidden_size (ELECTRA ``embeddings_project``,
    #: DeBERTa-v2 ``embed_proj``), None when they are hidden_size wide
    embedding_size: int | None = None
    #: with a projection: True when the embeddings' LayerNorm works at embedding_size before it
    #: (ELECTRA), False when the projection comes first (DeBERTa-v2's embed_proj, then LayerNorm)
    embedding_norm_first: bool = True
    #: the dropout in front of the task head's classifier (DistilBERT's ``seq_classif_dropout`` and
    #: ``qa_dropout``); None reads ``classifier_dropout``/``hidden_dropout_prob`` from the config
    head_dropout: float | None = None
    #: the masked-LM loss calls ``logits.float()`` first (transformers/loss/loss_utils.py
    #: ``ForMaskedLMLoss``, which ModernBERT uses; BERT's heads call CrossEntropyLoss as they are)
    mlm_loss_upcast: bool = False
    #: the MLM prediction transform's width when not hidden_size (ELECTRA's generator_predictions
    #: and DeBERTa-v2's legacy head work at ``embedding_size``)
    mlm_width: int | None = None
    #: the classification heads run the prediction head (dense, activation, LayerNorm) before the
    #: classifier: ModernBertPredictionHead in ModernBert{Sequence,Token}Classification and QA
    head_transform: bool = False
    #: how a sequence classifier pools: "cls" the first token, "mean" the masked mean over tokens
    #: (ModernBERT's ``classifier_pooling``)
    pooling: Literal["cls", "mean"] = "cls"
    #: a pre-norm model whose embeddings end in a norm outside the blocks (ModernBERT's
    #: ``embeddings.norm``): under full checkpointing it keeps its input besides the final norm's
    #: (a post-norm encoder's embedding LayerNorm takes the final norm's place, which is checkpointed)
    embedding_norm: bool = False
    #: the rotary embedding runs in fp32 on upcast queries and keys (ModernBERT's
    #: ``apply_rotary_pos_emb``: ``q.float() * cos``, then ``.to(original_dtype)``), whose fp32
    #: intermediates are the inference forward's transient peak inside a block
    rotary_fp32: bool = False
    #: DeBERTa-v2 disentangled attention: relative-position rows used per layer (2 x att_span, the
    #: position buckets or max_relative_positions), 0 without relative attention
    rel_span: int = 0
    #: the disentangled terms ("c2p", "p2c") that add relative-position scores to the attention
    rel_terms: tuple[str, ...] = ()
    # ---- attention and block-layout facts the formulas read (set by models/families) ----------
    #: eager attention computes ``softmax(..., dtype=torch.float32)`` and casts back
    #: (modeling_llama.py ``eager_attention_forward`` and its copies, ModernBERT's); GPT-2, BERT, T5
    #: and Falcon take the softmax in the compute dtype unless autocast upcasts it
    softmax_fp32: bool = False
    #: the causal-LM forward of transformers 4.35 - 4.44 upcast all its logits to fp32 (``logits =
    #: logits.float()``: LlamaForCausalLM and its copies); 4.45 (#31292) does it only with labels.
    #: Read only for an older ``Workload.transformers_version``
    legacy_logits_fp32: bool = False
    #: eager attention of transformers before 4.49 clamps the masked scores from below (OPTAttention:
    #: ``torch.max(attn_weights, torch.tensor(torch.finfo(attn_weights.dtype).min))``); maximum keeps its
    #: input for backward, one more (b, a, s, S) tensor in the compute dtype per block. Read only for an
    #: older ``Workload.transformers_version`` (Workload.legacy_score_clamp)
    score_clamp: bool = False
    #: the first transformers release without per-block buffers that older ones registered in every attention
    #: module: a (1, 1, P, P) bool causal mask ``bias`` and a scalar ``masked_bias``, P = ``max_position``
    #: (GPT2Attention through 4.57: (5, 0); GPTNeoXAttention before 4.49: (4, 49)), allocated with the model.
    #: Read only for an older ``Workload.transformers_version``; None: no such buffers
    legacy_buffers_before: tuple[int, int] | None = None
    #: with them, GPTNeoXAttention's own rotary embedding (before 4.49): ``inv_freq`` and fp32 ``cos_cached`` and
    #: ``sin_cached`` of (P, this width) per block; 0: none
    legacy_rotary_cache_dim: int = 0
    #: the first transformers release whose attention modules no longer hold a rotary embedding of their own with
    #: ``inv_freq`` (head_dim / 2 fp32) and cos/sin caches of (``max_position``, head_dim) in the load dtype
    #: (``torch.get_default_dtype()``, which ``from_pretrained(torch_dtype=...)`` sets while it builds the model):
    #: LlamaAttention before 4.41, (4, 41); allocated with the model, in any mode. Read only for an older
    #: ``Workload.transformers_version``; None: no such caches
    legacy_rotary_cache_before: tuple[int, int] | None = None
    #: the per-layer (key, value) tuple an older release returns from a training forward (LegacyPresents); read
    #: only for an older ``Workload.transformers_version`` under ``--loss logits-sum``; None: none
    legacy_presents: LegacyPresents | None = None
    #: blocks whose attention sees only the last ``sliding_window`` tokens (transformers'
    #: ``layer_types``; ModernBERT: all but every ``global_attn_every_n_layers``-th, a window on each
    #: side); transformers caches at most the window for a decoder's (DynamicSlidingWindowLayer), and
    #: with SDPA each such block gets an explicit mask when the window does not cover the sequence
    sliding_layer_ids: tuple[int, ...] = ()
    norm_placement: NormPlacement = "pre"
    qk_norm: QKNorm = "none"
    #: the RMSNorm multiplies by its weight in fp32 and casts after (Gemma's ``(1 + w)``, OLMo 2):
    #: the weight's gradient keeps the fp32 normalized tensor, not a cast in the input dtype
    norm_weight_fp32: bool = False
    #: (cos, sin) tables the rotary embedding makes per forward (one per layer type: Gemma 3's local
    #: and global, ModernBERT's)
    rotary_tables: int = 1
    #: width of the rotary cos/sin when it is not ``head_dim`` (MLA rotates qk_rope_head_dim)
    rotary_dim: int | None = None
    #: the rotary cos/sin stay fp32 (``Olmo2RotaryEmbedding`` does not cast them), so rotating
    #: half-precision q and k computes in fp32 and casts back
    rotary_tables_fp32: bool = False
    mla: MLA | None = None
    # ---- MoE layout -----------------------------------------------------------------------------
    #: decoder blocks with a dense MLP in an MoE model (DeepSeek ``first_k_dense_replace``, Qwen
    #: ``mlp_only_layers``), and that MLP's width when it differs from ``ffn_size``
    dense_layer_ids: tuple[int, ...] = ()
    dense_ffn_size: int = 0
    #: width of the shared expert(s) every token also runs through (DeepSeek n_shared_experts x
    #: moe_intermediate_size, Qwen2-MoE shared_expert_intermediate_size); 0 without
    shared_expert_ffn: int = 0
    router: Router = "softmax"
    expert_gate: ExpertGate = "act"
    # ---- gpt-oss --------------------------------------------------------------------------------
    #: a learned per-head logit concatenated to the scores before the softmax (gpt-oss ``sinks``):
    #: eager attention's probabilities are b x a x s x (S+1), and the row maximum is subtracted first
    attention_sinks: bool = False
    #: transformers lets the model run SDPA (``_supports_sdpa``); False (gpt-oss): it runs eager
    #: when SDPA is asked for or nothing is, so vramlens estimates ``--attention sdpa`` as eager
    sdpa: bool = True
    #: GPT-NeoX's parallel block (``use_parallel_residual``): attention and MLP both read the block's input
    #: through a LayerNorm each, ``x + attn(ln1(x)) + mlp(ln2(x))``, so the two norms keep one input
    parallel_norms_share_input: bool = False
    # ---- Gemma 2 --------------------------------------------------------------------------------
    #: ``attn_logit_softcapping``: eager attention computes ``tanh(scores / cap) * cap`` before the mask
    #: and softmax, and tanh keeps its output (b x a x s x S in the compute dtype) for backward
    attn_softcap: bool = False
    #: ``final_logit_softcapping``: the causal-LM head computes ``tanh(logits / cap) * cap``, and tanh
    #: keeps its output (c x V per token) for backward
    logit_softcap: bool = False
    #: how the checkpoint stores the MoE experts when not in the model dtype: "mxfp4" (gpt-oss's
    #: ``quantization_config.quant_method``: 4-bit E2M1 values in blocks of 32 sharing one E8M0 scale
    #: byte, 4.25 bits per weight; transformers dequantizes it at load, vLLM and SGLang keep it)
    expert_format: Literal["mxfp4"] | None = None
    #: SGLang keeps the sliding layers' keys and values in a pool of their own (``SWAKVPool``; its
    #: model_config.py ``is_hybrid_swa_model`` lists GptOssForCausalLM among others)
    hybrid_swa_pool: bool = False
    # ---- Llama 4 --------------------------------------------------------------------------------
    #: what the local blocks (sliding_layer_ids) see: "sliding" the last ``sliding_window`` tokens,
    #: "chunked" the tokens of their own chunk of ``sliding_window`` (Llama 4's ``attention_chunk_size``:
    #: masking_utils.create_chunked_causal_mask); transformers caches both alike (cache_utils
    #: ``"chunked_attention": DynamicSlidingWindowLayer``), and so does the SDPA mask (b, 1, s, S)
    local_attention: Literal["sliding", "chunked"] = "sliding"
    #: blocks without rotary (Llama 4's ``no_rope_layers`` zeros): their q and k are the projections'
    #: outputs, and no qk norm runs there
    nope_layer_ids: tuple[int, ...] = ()
    #: the NoPE blocks scale their query by an fp32 per-position factor and cast it back (Llama 4's
    #: ``attn_temperature_tuning``)
    attention_temperature: bool = False
    #: every expert runs on every token, scaled by its router score (0 outside the top-k):
    #: ``Llama4TextMoe.forward`` repeats the tokens E times (``hidden_states.repeat(E, 1)``) and runs
    #: ``torch.bmm`` over (E, t, h); False: each token goes to its top-k experts only
    experts_see_all_tokens: bool = False
    #: the rotary embedding is a complex64 ``freqs_cis`` and rotates complex views of fp32 copies of q
    #: and k, cast back after (Llama 4's ``apply_rotary_emb``)
    rotary_complex: bool = False
    # ---- vision encoders ------------------------------------------------------------------------
    #: the image side of a vision encoder (patch size, class token); None for text models
    vision: Vision | None = None
    #: the attention makes q, k and v contiguous head-major, (b, a, s, d) (Whisper's
    #: ``.transpose(1, 2).contiguous()``), so a fused SDPA kernel writes its output in that layout (flash
    #: allocates it like the query) and transformers' transpose back to (b, s, a*d) is a copy, which the
    #: output projection keeps when it trains; a query left as a transposed view gets it for free (Llama), and
    #: so does fp32, whose memory-efficient kernel writes (b, s, a, d) whatever the query's layout
    attention_output_copy: bool = False
    #: releases before this one made q, k and v so (OPT's ``_shape``: ``.transpose(1, 2).contiguous()``, v4.48.3
    #: wheel modeling_opt.py lines 128 and 408-409; v4.49.0 leaves transposed views, lines 148-153), with the same
    #: output copy; read only for an older ``Workload.transformers_version`` (activations.output_copied)
    legacy_output_copy_before: tuple[int, int] | None = None
    # ---- speech encoders ------------------------------------------------------------------------
    #: the audio side of a speech encoder-decoder (mel bins, 1,500 encoder positions per 30 s); None otherwise
    audio: Audio | None = None
    # ---- vision-language models -----------------------------------------------------------
    #: the image side of a VLM (tower, projector, image tokens); None for text-only models
    vlm: VLM | None = None

    # ---- counts -------------------------------------------------------------------------
    @property
    def n_layers(self) -> int:
        """All transformer blocks (encoder plus decoder)."""
        return self.n_encoder_layers + self.n_decoder_layers

    @property
    def params(self) -> int:
        """Parameters, tied weights once: equals ``sum(p.numel() for p in model.parameters())``."""
        return sum(t.numel for t in self.tensors if t.role != "buffer")

    @property
    def buffer_elements(self) -> int:
        return sum(t.numel for t in self.tensors if t.role == "buffer")

    @property
    def is_moe(self) -> bool:
        return self.n_experts > 0

    @property
    def n_sliding_layers(self) -> int:
        """Blocks with a sliding window (0 without a window)."""
        return len(self.sliding_layer_ids) if self.sliding_window else 0

    @property
    def kv_latent(self) -> int:
        """Elements one token keeps per layer in a latent KV cache (MLA), 0 for per-head K and V.

        transformers >= 5 caches MLA's compressed latent, not the expanded heads:
        ``DeepseekV3Attention.forward`` calls ``cache.update(kv_nope, k_rot)`` with kv_nope
        (b, 1, s, kv_lora_rank) and k_rot (b, 1, s, qk_rope_head_dim), and expands them with
        ``kv_b_proj`` after reading the cache; vLLM and SGLang keep the same latent.
        """
        return self.mla.latent if self.mla is not None else 0

    def parameters(self) -> tuple[TensorInfo, ...]:
        return tuple(t for t in self.tensors if t.role != "buffer")

    def buffers(self) -> tuple[TensorInfo, ...]:
        return tuple(t for t in self.tensors if t.role == "buffer")


def smart_resize(height: int, width: int, factor: int, min_pixels: int = 56 * 56,
                 max_pixels: int = 28 * 28 * 1280) -> tuple[int, int]:
    """The size Qwen2VLImageProcessor resizes a (height, width) image to (image_processing_qwen2_vl.py
    ``smart_resize``): each side rounded to a multiple of ``factor``, then scaled into the pixel range.

    Raises:
        ConfigError: the aspect ratio is over 200 (the processor raises ValueError).
    """
    if max(height, width) / min(height, width) > 200:
        raise ConfigError(f"image_size={height}x{width}: the aspect ratio must be at most 200 (Qwen2VLImageProcessor "
                          "refuses it): give a less elongated --image-size")
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = sqrt((height * width) / max_pixels)
        h_bar = max(factor, floor(height / beta / factor) * factor)
        w_bar = max(factor, floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = sqrt(min_pixels / (height * width))
        h_bar = ceil(height * beta / factor) * factor
        w_bar = ceil(width * beta / factor) * factor
    return h_bar, w_bar


@dataclass(frozen=True, slots=True)
class DynamicImages:
    """A VLM whose image tokens follow the image's size (Qwen2.5-VL: models/families/qwen_vl.py).

    The processor (Qwen2VLImageProcessor ``smart_resize``) resizes each side to a multiple of
    ``patch * merge`` (28) with the pixel count in [``min_pixels``, ``max_pixels``]; the tower sees
    (H'/patch) * (W'/patch) patches, the text model a ``merge``**2-th of them. The blocks in
    ``full_blocks`` attend over all patches of an image, the others within windows of ``window``
    merged tokens a side (Qwen2_5_VisionTransformerPretrainedModel.forward, ``get_vision_window_index``).
    """

    patch: int
    merge: int
    window: int
    full_blocks: tuple[int, ...]
    temporal_patch: int = 2
    min_pixels: int = 56 * 56
    max_pixels: int = 28 * 28 * 1280

    def resized(self, height: int, width: int) -> tuple[int, int]:
        """The (H', W') the processor resizes a (height, width) image to."""
        return smart_resize(height, width, self.patch * self.merge, self.min_pixels, self.max_pixels)

    def grid(self, height: int, width: int) -> tuple[int, int]:
        """Patches a side of the resized image (grid_thw's h and w)."""
        h, w = self.resized(height, width)
        return h // self.patch, w // self.patch

    def tokens(self, height: int, width: int) -> int:
        """Image tokens one (height, width) image puts in the text sequence."""
        gh, gw = self.grid(height, width)
        return gh * gw // (self.merge * self.merge)

    def windows(self, height: int, width: int) -> tuple[tuple[int, int], ...]:
        """The window-attention blocks' windows over one image, as (patches in a window, how many such windows):
        ``get_vision_window_index`` tiles the merged grid (grid / merge a side) with windows of ``window``
        merged tokens a side, the last row and column of windows cut short (empty ones dropped)."""
        gh, gw = self.grid(height, width)
        mh, mw, k = gh // self.merge, gw // self.merge, max(1, self.window)
        rows = [k] * (mh // k) + ([mh % k] if mh % k else [])
        cols = [k] * (mw // k) + ([mw % k] if mw % k else [])
        count: dict[int, int] = {}
        for r in rows:
            for c in cols:
                n = r * c * self.merge * self.merge
                count[n] = count.get(n, 0) + 1
        return tuple(sorted(count.items(), key=lambda kv: -kv[0]))


def select_best_resolution(height: int, width: int, pinpoints: tuple[tuple[int, int], ...]) -> tuple[int, int]:
    """The (height, width) of ``pinpoints`` an image of (height, width) is resized and padded to
    (transformers' image_processing_utils.select_best_resolution): the most of the image's pixels kept
    after downscaling into it, ties to the least padding."""
    best, most, waste = pinpoints[0], 0, float("inf")
    for ph, pw in pinpoints:
        scale = min(pw / width, ph / height)
        effective = min(int(width * scale) * int(height * scale), width * height)
        wasted = pw * ph - effective
        if effective > most or (effective == most and wasted < waste):
            best, most, waste = (ph, pw), effective, wasted
    return best


@dataclass(frozen=True, slots=True)
class AnyRes:
    """LLaVA-NeXT's "anyres" images (models/families/vlm.py): each image is resized and padded to the
    ``pinpoints`` resolution that fits it best, cut into ``crop`` x ``crop`` tiles, and the tower runs over
    1 + tiles crops (the whole image at ``crop`` first). The text sequence gets the base crop's tokens,
    the tiles' patch grid with the padding rows or columns cut away (``unpad_image``) and one
    ``image_newline`` token per row of patches (LlavaNextProcessor._get_number_of_features)."""

    pinpoints: tuple[tuple[int, int], ...]
    crop: int
    patch: int
    #: the (height, width) assumed when the workload gives no image size
    default_image: tuple[int, int] = (672, 672)

    def grid(self, height: int, width: int) -> tuple[int, int]:
        """Tiles a side (rows, columns) for a (height, width) image (get_anyres_image_grid_shape)."""
        bh, bw = select_best_resolution(height, width, self.pinpoints)
        return bh // self.crop, bw // self.crop

    def crops(self, height: int, width: int) -> int:
        """The tower's rows for one image: the base crop and the tiles (image_size_to_num_patches)."""
        gh, gw = self.grid(height, width)
        return 1 + gh * gw

    def tokens(self, height: int, width: int) -> int:
        """Image tokens one (height, width) image puts in the text sequence (the base crop's patches, the
        unpadded tiles' patches and one newline a row of them), the class token dropped."""
        side = self.crop // self.patch
        gh, gw = self.grid(height, width)
        ch, cw = side * gh, side * gw
        if width / height > cw / ch:
            new_h = int(round(height * (cw / width), 7))
            ch -= (ch - new_h) // 2 * 2
        else:
            new_w = int(round(width * (ch / height), 7))
            cw -= (cw - new_w) // 2 * 2
        return ch * cw + ch + side * side


def _f32(x: float) -> float:
    """``x`` rounded to float32, as torch's int64 tensor / int division gives it (get_best_fit's scales)."""
    return float(struct.unpack("f", struct.pack("f", x))[0])


@dataclass(frozen=True, slots=True)
class TiledImages:
    """How Llama 4's processor turns one image into tiles and image tokens (models/families/llama4_vision.py):
    ``Llama4ImageProcessorFast`` (image_processing_llama4.py ``find_supported_resolutions``, ``get_best_fit``)
    picks a canvas of th x tw tiles of ``tile`` pixels (th * tw <= ``max_tiles``) and adds a global tile when
    th * tw > 1; each tile is (tile/patch)**2 patches, pixel-shuffled to a ``shuffle``**2-th of them."""

    tile: int = 336
    patch: int = 14
    shuffle: float = 0.5
    max_tiles: int = 16  # Llama4ImageProcessorFast's max_patches default

    def canvas(self, height: int, width: int) -> tuple[int, int]:
        """(th, tw): the tiles a side of the canvas ``get_best_fit`` picks for a (height, width) image: the smallest
        upscale >= 1 of the aspect-preserving fits, else the least downscale; ties to the smallest canvas."""
        # find_supported_resolutions: grouped by aspect ratio in order of first appearance, n from max_tiles down
        groups: dict[float, list[tuple[int, int]]] = {}
        for n in range(self.max_tiles, 0, -1):
            for f in (f for f in range(1, n + 1) if n % f == 0):
                groups.setdefault(f / (n // f), []).append((f, n // f))
        options = [o for g in groups.values() for o in g]
        scales = [_f32(min(_f32(th * self.tile / height), _f32(tw * self.tile / width))) for th, tw in options]
        up = [s for s in scales if s >= 1]
        pick = min(up) if up else max(scales)
        best = [o for o, s in zip(options, scales, strict=True) if s == pick]
        return min(best, key=lambda o: o[0] * o[1])  # argmin of the areas: the first of the smallest

    def tiles(self, height: int, width: int) -> int:
        """Tiles the tower runs for one image: th * tw, plus the global tile when th * tw > 1."""
        th, tw = self.canvas(height, width)
        return th * tw + (1 if th * tw > 1 else 0)

    @property
    def per_tile(self) -> int:
        """Image tokens a tile leaves the pixel shuffle with: (336/14)**2 * 0.5**2 = 144."""
        side = self.tile // self.patch
        return int(side * side * self.shuffle * self.shuffle)

    def image_tokens(self, height: int, width: int) -> int:
        """``<|patch|>`` tokens of one image (the ones the projected tiles replace): 144 per tile run."""
        return self.tiles(height, width) * self.per_tile

    def prompt_tokens(self, height: int, width: int) -> int:
        """All tokens ``_prompt_split_image`` puts in the sequence for one image: the patches, ``<|image_start|>``,
        ``<|image|>``, ``<|image_end|>`` and, when tiled, th * (tw - 1) x-separators and th y-separators."""
        th, tw = self.canvas(height, width)
        return self.image_tokens(height, width) + 3 + (th * tw if th * tw > 1 else 0)


@dataclass(frozen=True, slots=True)
class VLM:
    """A vision-language model's image path (models/families/vlm.py): a vision ``tower`` (its own
    ModelSpec: ViT-style encoder over the pixels), a ``projector`` into the text model's width, and
    the image tokens the processor puts in the text sequence for each image.

    ``projector``: ``mlp2`` (LLaVA's ``linear_1``, ``projector_act``, ``linear_2``: modeling_llava.py
    LlavaMultiModalProjector) or ``pool_norm_matmul`` (Gemma 3's avg-pool to ``image_tokens``, RMSNorm and
    one matmul: modeling_gemma3.py Gemma3MultiModalProjector), ``patch_merger`` (Qwen2.5-VL's merger, in the tower) or
    ``tiles_linear`` (Llama 4: the pixel-shuffle adapter in the tower, then ``multi_modal_projector.linear_1``,
    over the tiles of ``tiled``). ``feature_tokens``: the tower's tokens the
    projector takes per image (LLaVA's "default" strategy drops the class token). ``image_tokens``: what
    one image becomes in the text sequence (LLaVA-1.5: 576; Gemma 3: ``mm_tokens_per_image`` 256).
    ``image_size``: the side the processor resizes every image to (the tower's ``image_size``).
    """

    tower: ModelSpec
    projector: Literal["mlp2", "pool_norm_matmul", "patch_merger", "tiles_linear"]
    image_tokens: int
    feature_tokens: int
    image_token_id: int
    image_size: int
    projector_act: str = "gelu"
    text_hidden: int = 0
    #: Qwen2.5-VL: image tokens from the image's size (``image_tokens`` is then the default size's),
    #: the merger inside the tower (``projector`` "patch_merger"); None: a fixed-size VLM
    dynamic: DynamicImages | None = None
    #: the tower's parameters' prefix in the VLM's names
    tower_prefix: str = "model.vision_tower."
    #: LLaVA-NeXT: image tokens and the tower's crops from the image's size; None: one crop an image
    anyres: AnyRes | None = None
    #: Llama 4: images as tiles of the tower's size (``image_tokens`` is then the default size's); None otherwise
    tiled: TiledImages | None = None
