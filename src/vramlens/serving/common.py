"""What every engine module needs: the served model's facts, weights per stage, the profile-run
activation peak, memory outside PyTorch, and the decode/prefill rooflines.

A :class:`ServedModel` is built once from a ModelSpec (catalog, config.json, hub) or from a GGUF
header, so the engine modules read facts, never model names.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from vramlens.advise.cost import BANDWIDTH_EFFICIENCY, MFU, peak_flops
from vramlens.advise.gguf_header import GGUF_MIXERS
from vramlens.advise.gguf_split import GGUFInfo
from vramlens.errors import ConfigError
from vramlens.estimator.kv_cache import sliding_layers
from vramlens.estimator.weights import base_weight_bytes
from vramlens.hardware.gpu import GPU
from vramlens.hardware.runtime import context_bytes_for, nccl_communicator_bytes
from vramlens.models.hybrid import HybridLayout, UnsupportedHybrid, hybrid_layout
from vramlens.models.spec import ModelSpec
from vramlens.units import BLOCK, DTYPE_BYTES, ceil_div, round_up
from vramlens.workload import make_workload

#: Logits in the sampler are fp32 (vLLM's Sampler and SGLang's LogitsProcessor upcast them), and
#: the profile run's sampler holds them and their softmax at once: 2 fp32 copies per row.
LOGITS_COPIES = 2
#: CUDA graph pools. vLLM 0.10's piecewise capture logs "Graph capturing finished in 6 secs, took
#: 0.3-0.6 GiB" for 7-8B models (vLLM pull 10027 added the figure; gpustack/runner pull 251 logs an
#: estimated 0.36 GiB), SGLang captures batch sizes up to 160 into a pool of similar size. We take
#: 512 MiB, an allowance with about +-50% spread: it decides no block count (see vllm.py).
CUDA_GRAPH_BYTES = 512 * 2**20


@dataclass(frozen=True, slots=True)
class ServedModel:
    """The facts a serving engine's memory arithmetic reads, for one model in one storage format.

    ``layer_bytes`` holds the weights of each block; ``embed_bytes`` the token embedding (and any
    other tensor before the blocks), ``head_bytes`` the final norm and output layer.
    ``n_sliding`` of the ``n_layers`` blocks attend over ``sliding_window`` tokens only.
    ``kv_latent`` > 0: multi-head latent attention (DeepSeek V2/V3), whose cache keeps one latent of
    that many elements per token and layer (kv_lora_rank + qk_rope_head_dim) in place of K and V.
    """

    name: str
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    hidden: int
    ffn: int
    vocab: int
    max_position: int
    rope_scaled: bool
    n_sliding: int
    sliding_window: int | None
    params: int
    active_params: int
    dtype: str
    layer_bytes: tuple[int, ...]
    embed_bytes: int
    head_bytes: int
    experts_per_token: int = 0
    weights_format: str = ""
    rotary_dim: int = 0

    @property
    def rope_values(self) -> int:
        """Values of the rotary embedding's cos/sin cache the engines build at load time:
        max_position x rotary_dim (vLLM ``RotaryEmbedding._compute_cos_sin_cache``: cos and sin of
        rotary_dim / 2 frequencies for each position, one instance shared by every layer through
        ``get_rope``'s cache; SGLang's rotary_embedding.py the same)."""
        return self.max_position * self.rotary_dim

    @property
    def rope_cache_bytes(self) -> int:
        """The rotary cos/sin cache at the model dtype, as vLLM keeps it (SGLang keeps it in fp32 on
        CUDA: vramlens.serving.sglang). Llama 3.1 8B: 131,072 x 128 x 2 B = 32 MiB, what vLLM's
        "Model loading took 14.99 GiB" adds to the 14.96 GiB of parameters."""
        return self.rope_values * DTYPE_BYTES[self.dtype]
    kv_latent: int = 0
    #: SGLang's hybrid sliding-window pool (ModelSpec.hybrid_swa_pool): the sliding layers' tokens in
    #: a pool of their own, sized by swa_full_tokens_ratio (vramlens.serving.sglang)
    hybrid_swa: bool = False
    #: the local layers are chunked (ModelSpec.local_attention: Llama 4's attention_chunk_size), which
    #: vLLM keeps at full length by default (vramlens.serving.vllm)
    chunked_local: bool = False
    #: routed experts in each MoE layer (ModelSpec.n_experts; 0 for a dense model): the router's
    #: logits are one value per expert and token (vramlens.serving.vllm)
    n_experts: int = 0
    #: width of the shared expert(s) every token also runs through (ModelSpec.shared_expert_ffn)
    shared_expert_ffn: int = 0
    #: the engine serves the checkpoint's MXFP4 experts as they are (``native_experts``): vLLM runs them
    #: through a monolithic kernel, not the modular one whose workspace vramlens.serving.vllm sizes
    mxfp4_experts: bool = False
    #: blocks with routed experts, and the per-expert bias values of one such block (gpt-oss's
    #: gate_up_proj_bias (E, 2f) and down_proj_bias (E, h): E (2f + h)); what vLLM's MXFP4 layout reads
    expert_layers: int = 0
    expert_bias_numel: int = 0
    #: a hybrid model's blocks (attention with a KV cache, recurrent with a fixed state per request) and its
    #: state shapes (vramlens.models.hybrid); None for a plain transformer. vLLM, llama.cpp and transformers serve
    #: it (transformers Gated DeltaNet only), SGLang its Gated DeltaNet form (sglang.gdn_pools); what an engine does
    #: not serve it refuses in one line (:func:`refuse_hybrid`)
    hybrid: HybridLayout | None = None
    #: where the weights came from, when not from an analytic family (a meta-device inventory, or the generic
    #: approximation under --no-trace-fallback): the first "how" lines of the answer
    source_notes: tuple[str, ...] = ()
    #: the checkpoint's ``architectures[0]`` (ModelSpec.architecture): SGLang picks its speculative
    #: defaults by it (server_args.py ``auto_choose_speculative_params``)
    architecture: str = ""
    #: multi-token-prediction layers the checkpoint carries beside its blocks (config.json
    #: ``num_nextn_predict_layers``: DeepSeek V3 / R1 1), which vLLM's ``mtp`` and SGLang's NEXTN load as the draft
    mtp_layers: int = 0
    #: an EAGLE-3 head's own output vocabulary (config.json ``draft_vocab_size``; 0 = the target's)
    draft_vocab: int = 0

    @property
    def weight_bytes(self) -> int:
        return sum(self.layer_bytes) + self.embed_bytes + self.head_bytes


#: MXFP4 (OCP Microscaling, the format of gpt-oss's experts): 4-bit E2M1 values packed two per byte,
#: one E8M0 scale byte per block of 32 (the checkpoint's ``*_blocks`` uint8 (E, n, k/32, 16) and
#: ``*_scales`` uint8 (E, n, k/32)): 4.25 bits per weight.
MXFP4_BLOCK = 32


def mxfp4_bytes(numel: int) -> int:
    """Bytes of ``numel`` weights in MXFP4: numel / 2 packed values plus numel / 32 scales."""
    return ceil_div(numel, 2) + ceil_div(numel, MXFP4_BLOCK)


def served_from_spec(spec: ModelSpec, *, dtype: str | None = None, quant: str | None = None,
                     native_experts: bool = False) -> ServedModel:
    """A ServedModel from a ModelSpec; ``quant`` is a vramlens quantization ("awq-4bit", "fp8", ...).

    Weights come from vramlens.estimator's quantization formulas (embeddings, norms and the output
    layer stay at ``dtype``); the blocks share the rest evenly. With ``native_experts`` (an engine that
    serves the checkpoint's own expert format: vLLM and SGLang load gpt-oss's MXFP4 experts as they are,
    vLLM ``Mxfp4MoEMethod``, SGLang ``Mxfp4MoEMethod``) and no ``quant``, experts stored as MXFP4
    (ModelSpec.expert_format) take :func:`mxfp4_bytes` in place of ``dtype``; their biases stay at ``dtype``.
    """
    dt = dtype or _serving_dtype(spec.torch_dtype)
    w = make_workload(mode="inference", dtype=dt, quant=quant)
    total, _why = base_weight_bytes(spec, w)
    b = DTYPE_BYTES[dt]
    mxfp4 = native_experts and quant is None and spec.expert_format == "mxfp4"
    if mxfp4:
        total += sum(mxfp4_bytes(t.numel) - round_up(t.numel * b, BLOCK) for t in spec.tensors if t.role == "expert")
    embed = sum(t.numel * b for t in spec.tensors if t.layer is None and t.role in ("embedding", "position_embedding"))
    head = sum(t.numel * b for t in spec.tensors if t.layer is None and t.role not in ("embedding", "position_embedding", "buffer"))
    L = max(1, spec.n_decoder_layers or spec.n_layers)
    per_layer = max(0, total - embed - head) // L
    experts = sum(t.numel for t in spec.tensors if t.role == "expert")
    active = spec.params - (experts - experts * spec.experts_per_token // spec.n_experts if spec.n_experts else 0)
    cfg = spec.config or {}
    # rotary_dim = 2 x the entries of inv_freq (models/_tensors.py ``rotary``: ceil(dim / 2) of them)
    inv_freq = next((t.numel for t in spec.tensors if t.role == "buffer" and t.name.endswith("inv_freq")), 0)
    rotary_dim = 2 * inv_freq if spec.position == "rotary" else 0
    expert_layers = len({t.layer for t in spec.tensors if t.role == "expert"})
    # stacked per-expert biases: a bias whose first dimension is the expert count
    expert_bias = sum(t.numel for t in spec.tensors if t.role == "bias" and t.layer is not None and spec.n_experts
                      and len(t.shape) == 2 and t.shape[0] == spec.n_experts)
    try:
        hybrid = hybrid_layout(cfg, L)
    except UnsupportedHybrid as e:
        raise ConfigError(f"{e}: vramlens capacity refuses it rather than count its blocks as attention") from None
    return ServedModel(
        name=spec.name, n_layers=L, n_heads=spec.n_heads, n_kv_heads=spec.n_kv_heads, head_dim=spec.head_dim,
        hidden=spec.hidden_size, ffn=spec.ffn_size, vocab=spec.vocab_size, max_position=spec.max_position,
        rope_scaled=bool(cfg.get("rope_scaling")), n_sliding=sliding_layers(spec),
        sliding_window=spec.sliding_window, params=spec.params, active_params=active, dtype=dt,
        layer_bytes=(per_layer,) * L, embed_bytes=embed, head_bytes=head,
        experts_per_token=spec.experts_per_token,
        weights_format=quant or (f"mxfp4 experts, {dt} rest" if mxfp4 else dt), rotary_dim=rotary_dim,
        kv_latent=spec.kv_latent, hybrid_swa=spec.hybrid_swa_pool,
        chunked_local=spec.local_attention == "chunked" and spec.n_sliding_layers > 0,
        n_experts=spec.n_experts, shared_expert_ffn=spec.shared_expert_ffn, mxfp4_experts=mxfp4,
        expert_layers=expert_layers, expert_bias_numel=expert_bias // max(1, expert_layers), hybrid=hybrid,
        architecture=spec.architecture, mtp_layers=_config_int(cfg, "num_nextn_predict_layers") or (
            # vLLM 0.19.0 qwen3_next_mtp.py Qwen3NextMultiTokenPredictor: getattr(config,
            # "num_nextn_predict_layers", 1): Qwen3-Next checkpoints carry one MTP block (mtp.*)
            QWEN3_NEXT_MTP_LAYERS if spec.architecture == "Qwen3NextForCausalLM" else 0),
        draft_vocab=_config_int(cfg, "draft_vocab_size"))


#: MTP blocks of a Qwen3-Next checkpoint whose config.json has no num_nextn_predict_layers (vLLM 0.19.0
#: vllm/model_executor/models/qwen3_next_mtp.py: ``getattr(config, "num_nextn_predict_layers", 1)``).
QWEN3_NEXT_MTP_LAYERS = 1


def refuse_hybrid(m: ServedModel, engine: str) -> None:
    """One line for an engine whose hybrid cache vramlens does not model (ConfigError)."""
    if m.hybrid is not None:
        h = m.hybrid
        raise ConfigError(f"{m.name} is a hybrid model ({h.n_attention} attention and {h.n_state} {h.mixer} blocks): "
                          f"{engine}'s cache for its recurrent state is not modelled; use --engine vllm")


#: llama.cpp architectures whose blocks keep a recurrent state (``llama_model_is_recurrent`` /
#: ``llama_model_is_hybrid``: ``llama_memory_recurrent`` cells, r_l and s_l per sequence, beside or in place
#: of the KV cache; the names of src/llama-arch.cpp's LLM_ARCH_NAMES). Those vramlens.advise.gguf_header
#: lays out (GGUF_MIXERS) are served; the others are refused.
GGUF_RECURRENT_ARCHS = frozenset({
    "mamba", "mamba2", "jamba", "falcon-h1", "granitehybrid", "nemotron_h", "nemotron_h_moe", "lfm2", "lfm2moe",
    "qwen3next", "plamo2", "rwkv6", "rwkv6qwen2", "rwkv7", "arwkv7", "kimi-linear"})


def _config_int(cfg: dict, key: str) -> int:
    """A non-negative int field of config.json, 0 when absent or not an int."""
    value = cfg.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def served_from_gguf(info: GGUFInfo) -> ServedModel:
    """A ServedModel from a GGUF header: exact bytes per block from the tensor types.

    The header read by vramlens.advise.gguf_header has no FFN width or sliding-window fields: the
    FFN width is taken as 4h for the activation estimate, and every layer as full attention, except in
    a recurrent or hybrid architecture, whose block kinds and state sizes the header gives (GGUFInfo.hybrid).

    Raises:
        ConfigError: an architecture with recurrent state (GGUF_RECURRENT_ARCHS) whose layout is not read.
    """
    if info.arch in GGUF_RECURRENT_ARCHS and info.hybrid is None:
        raise ConfigError(f"{info.name}: GGUF architecture {info.arch!r} keeps a recurrent state per sequence "
                          "(llama.cpp's llama_memory_recurrent / llama_memory_hybrid) whose layout vramlens does not "
                          f"read (it reads {', '.join(sorted(GGUF_MIXERS))}); only its attention layers would keep "
                          "the KV cache counted here")
    params_est = sum(info.layer_bytes) + info.input_bytes + info.output_bytes  # bytes, not params
    types = ",".join(f"{k}x{v}" for k, v in sorted(info.quant_types.items()))
    return ServedModel(
        name=info.name, n_layers=info.n_layers, n_heads=info.n_head, n_kv_heads=info.n_head_kv,
        head_dim=info.head_dim, hidden=info.n_embd, ffn=4 * info.n_embd, vocab=info.vocab or 32_000,
        max_position=info.n_ctx_train, rope_scaled=False, n_sliding=0, sliding_window=None,
        params=_gguf_params(info), active_params=_gguf_params(info), dtype="fp16",
        layer_bytes=tuple(info.layer_bytes), embed_bytes=info.input_bytes, head_bytes=info.output_bytes,
        weights_format=f"GGUF {types}" if types else f"GGUF ({params_est:,} B)", hybrid=info.hybrid)


def _gguf_params(info: GGUFInfo) -> int:
    # 12 h^2 per block (attention 4 h^2 with full heads, MLP 8 h^2) plus the embeddings: a parameter
    # count for the compute roofline only (the header's bytes are exact, its parameter count is not kept).
    h = info.n_embd
    kv_share = info.n_head_kv / max(1, info.n_head)
    return int(info.n_layers * h * h * (2 + 2 * kv_share + 8)) + 2 * (info.vocab or 32_000) * h


def _serving_dtype(torch_dtype: str | None) -> str:
    """The dtype engines run a checkpoint in with dtype="auto": its own, except fp32 -> bf16
    (vLLM 0.6+ ModelConfig ``_get_and_verify_dtype`` downcasts fp32 checkpoints to 16 bits)."""
    if torch_dtype in ("fp16", "bf16"):
        return torch_dtype
    return "bf16"


def stage_weight_bytes(m: ServedModel, tp: int, pp: int) -> int:
    """Weights on the busiest GPU: the heaviest pipeline stage split over ``tp`` ranks.

    Pipeline stages take ceil(L / pp) blocks each (vLLM ``get_pp_indices``, SGLang the same); the
    first stage also holds the embedding and the last the output layer (both on the one stage when
    pp = 1). Tensor parallelism splits every matrix and the vocabulary (VocabParallelEmbedding);
    norms are replicated (under 0.01% of a model, ignored).
    """
    per_stage = ceil_div(m.n_layers, pp)
    blocks = max(sum(m.layer_bytes[i:i + per_stage]) for i in range(0, m.n_layers, per_stage))
    ends = m.embed_bytes + m.head_bytes if pp == 1 else max(m.embed_bytes, m.head_bytes)
    return ceil_div(blocks + ends, tp)


def stage_layers(m: ServedModel, pp: int) -> int:
    """Blocks on the busiest pipeline stage."""
    return ceil_div(m.n_layers, pp)


def kv_heads_per_gpu(m: ServedModel, tp: int) -> int:
    """KV heads one rank holds: n_kv / tp, or 1 replicated head when tp > n_kv (vLLM
    ``ModelConfig.get_num_kv_heads``: max(1, total // tp); SGLang ``get_num_kv_heads`` the same)."""
    return max(1, m.n_kv_heads // tp)


def kv_cell_bytes(m: ServedModel, tp: int, kv_b: int) -> int:
    """Cache bytes one token takes in one layer on one GPU.

    K and V of the rank's KV heads; for multi-head latent attention one latent vector, the same
    on every rank: vLLM's ``AttentionSpec.page_size_bytes`` ("For MLA we only store a single
    latent vector": coef 1 instead of 2, one head of kv_lora_rank + qk_rope_head_dim) and SGLang's
    ``MLATokenToKVPool`` (one buffer per layer of kv_lora_rank + qk_rope_head_dim).
    """
    if m.kv_latent:
        return m.kv_latent * kv_b
    return 2 * kv_heads_per_gpu(m, tp) * m.head_dim * kv_b


def profile_activation_bytes(m: ServedModel, tokens: int, seqs: int, tp: int, b: int) -> int:
    """The activation peak of one forward over ``tokens`` tokens of ``seqs`` sequences on one GPU.

    What the engines' profile run measures (vLLM ``profile_run`` -> ``_dummy_run(max_num_batched_tokens,
    max_num_seqs)`` then the sampler on one row per sequence; SGLang's chunked prefill of
    ``chunked_prefill_size``). The tensors alive at the peak, in the compute dtype b:
    the residual stream and its normed copy (2 T h), plus the larger of the MLP's working set
    (fused gate_up output 2 f and the SiLU-and-mul output f: 3 T f / tp, with f = k x f_expert for
    MoE) and attention's (fused qkv output (a + 2 n_kv) d / tp; FlashAttention keeps no T x T
    matrix); plus the sampler's fp32 logits and probabilities, LOGITS_COPIES x seqs x V x 4.
    """
    f = m.ffn * max(1, m.experts_per_token)
    mlp = 3 * f // tp
    attn = (m.n_heads + 2 * m.n_kv_heads) * m.head_dim // tp
    return tokens * b * (2 * m.hidden + max(mlp, attn)) + LOGITS_COPIES * min(seqs, tokens) * m.vocab * 4


def non_torch_bytes(gpu: GPU, tp: int, pp: int) -> tuple[int, str]:
    """CUDA context (vramlens.hardware.runtime, CUDA 12 lazy loading) plus NCCL communicators of the
    TP group and, with pp > 1, the pipeline's point-to-point one, on each rank."""
    ctx, _why = context_bytes_for(None)
    nccl = nccl_communicator_bytes(gpu, tp) + (nccl_communicator_bytes(gpu, 2, nvls=False) if pp > 1 else 0)
    return ctx + nccl, f"CUDA context {ctx / 2**20:,.0f} MiB + NCCL {nccl / 2**20:,.0f} MiB"


@dataclass(frozen=True, slots=True)
class Speed:
    decode_tokens_s: float
    decode_tokens_s_total: float
    ttft_s: float


def kv_read_tokens(m: ServedModel, context: int) -> float:
    """Tokens of cache a decode step reads per layer, averaged over layers (sliding layers read at
    most their window)."""
    win = m.sliding_window or context
    return ((m.n_layers - m.n_sliding) * context + m.n_sliding * min(context, win)) / m.n_layers


def roofline(m: ServedModel, gpu: GPU, *, weights_per_gpu: int, kv_per_token_per_gpu: int, running: int,
             context: int, tp: int, pp: int, compute_dtype: str, extra_step_s: float = 0.0) -> Speed:
    """Decode from memory bandwidth, prefill from compute (Pope et al. 2022, §2 and §3).

    Decode step = (weights + running x cache bytes read) / (bandwidth x BANDWIDTH_EFFICIENCY) on each
    GPU; pipeline stages run one after another for one token (x pp). Per request: 1 / step; in total:
    running / step. Time to first token for one ``context``-token prompt = (2 x active params x s +
    causal attention 2 x L x s^2 x a x d) / (tp x pp x peak FLOP/s x MFU); efficiencies from
    vramlens.advise.cost (BANDWIDTH_EFFICIENCY 0.70, MFU 0.40).
    """
    running = max(1, running)
    read = weights_per_gpu + running * kv_per_token_per_gpu * kv_read_tokens(m, context)
    step = pp * read / (gpu.bandwidth_bytes_s * BANDWIDTH_EFFICIENCY) + extra_step_s
    flops = 2 * m.active_params * context + 2 * m.n_layers * context * context * m.n_heads * m.head_dim
    ttft = flops / (tp * pp * peak_flops(gpu, compute_dtype) * MFU)
    return Speed(1.0 / step, running / step, ttft)


def parse_version(text: str) -> tuple[int, int, int] | None:
    """An engine release: ``"0.6.4.post1"`` -> (0, 6, 4); None when the text is not a release number (ASCII digits,
    two to four parts (vLLM 0.10.1.1), then at most PEP 440's pre/post/dev and local suffixes: ``rc1``, ``.post2``, ``.dev0+gabc``)."""
    found = re.fullmatch(r"v?(\d+)\.(\d+)(?:\.(\d+))?(?:\.\d+)?(?:[.-]?(?:a|b|rc|post|dev)\d*)*(?:\+[0-9a-z.]+)?",
                         text.strip(), re.ASCII | re.IGNORECASE)
    if not found:
        return None
    major, minor, patch = found.groups()
    return int(major), int(minor), int(patch or 0)
