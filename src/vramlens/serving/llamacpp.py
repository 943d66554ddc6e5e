"""llama.cpp: n_gpu_layers, the KV cells of n_ctx, and the compute buffer, per device.

Follows llama.cpp b4000-b7342 (src/llama-model.cpp ``load_tensors``, src/llama-kv-cache*.cpp,
src/llama-context.cpp), what ``llama-server`` logs as "CUDA0 model buffer size", "CUDA0 KV buffer
size" / "KV self size = X MiB, K (f16): Y MiB, V (f16): Z MiB" and "CUDA0 compute buffer size":

- Layers: block i runs on a GPU when i >= n_layer - n_gpu_layers (the last blocks first); with
  n_gpu_layers > n_layer the output layer goes too; the token embedding stays in host memory.
  Several GPUs (``--split-mode layer``) share the offloaded blocks in order, evenly for equal GPUs
  (``--tensor-split`` default: proportional to free memory).
- n_ctx is padded to a multiple of 256 with flash attention and 32 without
  (``llama_kv_cache_get_padding``). K and V of one layer: n_ctx x n_kv x head_dim elements each,
  at the cache type's ggml size: f16 2 B, q8_0 34 B per 32 values, q4_0 18 B per 32
  (ggml ``type_traits``). A quantized V cache needs flash attention.
- Sliding-window layers (Gemma 2/3, from a catalog model; GGUF headers as read here carry no
  window) keep min(n_ctx, pad(window + n_ubatch, 256)) cells (``llama_kv_cache_unified_iswa``,
  b5500+); a GGUF is taken as all full attention.
- Compute buffer (``ggml_gallocr_reserve`` of the worst-case graph: one ubatch of n_ubatch tokens
  against n_kv = n_ctx cells). ggml-alloc frees a tensor's memory after its last consumer and runs
  softmax, RoPE and the residual adds in place, so the buffer is the largest set of f32 tensors
  alive at one node, not their sum (:func:`compute_buffer_bytes`).
- Hybrid and recurrent models (ServedModel.hybrid, from a config: Qwen3-Next, Granite 4.0-H, Bamba, Nemotron-H,
  Jamba; or from a GGUF of architecture qwen3next, qwen35(moe), granitehybrid, nemotron_h(_moe), jamba, falcon-h1,
  lfm2(moe), mamba, mamba2, rwkv6/7, whose header gives the block kinds and state sizes: vramlens.advise.gguf_header):
  ``llama_memory_hybrid`` (src/llama-model.cpp ``create_memory``) keeps the KV cells above for the attention
  blocks only and, for each recurrent block, ``llama_memory_recurrent``'s r_l and s_l rows of
  ``n_embd_r()`` = (ssm_d_conv - 1) x (ssm_d_inner + 2 ssm_n_group ssm_d_state) and ``n_embd_s()`` =
  ssm_d_state x ssm_d_inner values (src/llama-hparams.cpp; GGUF's ssm_d_inner is v_heads x v_dim for Gated
  DeltaNet, ssm_n_group its key heads and ssm_d_state its key dim: the same counts as
  :meth:`HybridLayout.shapes` at tp 1), in f32 (``recurrent_type_k/v`` GGML_TYPE_F32), one per sequence:
  ``recurrent_kv_size`` = max(1, n_seq_max), n_seq_max being llama-server's ``--parallel``. The compute buffer
  keeps the attention/FFN model (the recurrent blocks' scan temporaries are not modelled; a model without
  attention blocks has no KQ phase). LFM2's short convolutions keep r_l only (n_embd_r() = n_embd x
  (L_cache - 1), n_embd_s() = 0), RWKV token_shift_count x n_embd and n_embd x head_size; a Falcon-H1 block
  keeps both its KV cells and its rows (``create_memory``: filter_attn and filter_recr true for every block).
  A GGUF of another recurrent architecture (plamo2, kimi-linear: GGUF_RECURRENT_ARCHS) is refused.
"""

from __future__ import annotations

from dataclasses import replace

from vramlens.advise.place import CPU_BYTES_S
from vramlens.errors import ConfigError, EngineRefusal
from vramlens.hardware.gpu import GPU
from vramlens.hardware.runtime import context_bytes_for
from vramlens.serving.common import ServedModel, roofline
from vramlens.serving.result import Capacity, DeviceBuffers, EngineFigure
from vramlens.units import DTYPE_BYTES, MiB, ceil_div, round_up

ACCOUNTING = "llama.cpp b4000-b7342 (llama_kv_cache sizing, load_tensors placement, ggml-alloc compute buffer)"
#: ``--cache-type-k/-v`` -> (values per block, bytes per block): ggml type_traits.
CACHE_TYPES = {"f32": (1, 4), "f16": (1, 2), "bf16": (1, 2), "q8_0": (32, 34), "q4_0": (32, 18),
               "q4_1": (32, 20), "q5_0": (32, 22), "q5_1": (32, 24)}
#: llama-server defaults (common/common.h): n_ctx 4096, n_batch 2048, n_ubatch 512, 1 slot.
DEFAULT_CTX, DEFAULT_BATCH, DEFAULT_UBATCH = 4096, 2048, 512
#: n_gpu_layers above n_layer means "everything, output layer included" (-ngl 99 / 999).
ALL_LAYERS = 999


#: ``weights_type`` for a catalog model (no .gguf at hand): the GGUF file types that store every
#: matrix in one type (``llama_model_quantize``: LLAMA_FTYPE_ALL_F32, MOSTLY_F16, MOSTLY_BF16 and
#: MOSTLY_Q8_0, token embedding and output layer included), as (values per block, bytes per block).
#: The K-quant mixes (Q4_K_M, ...) and Q4_0 (q6_K output) vary by tensor: give the .gguf for them.
WEIGHTS_TYPES = {"f32": (1, 4), "f16": (1, 2), "bf16": (1, 2), "q8_0": (32, 34)}


def with_weights_type(m: ServedModel, weights_type: str) -> ServedModel:
    """``m`` stored as one GGUF type: every byte count rescaled from the model dtype (the 1-D norms,
    f32 in every GGUF, are under 0.01% of a model and follow the rest)."""
    per, size = WEIGHTS_TYPES[weights_type]
    b = DTYPE_BYTES[m.dtype]

    def scale(n: int) -> int:
        return n // b * size // per

    return replace(m, layer_bytes=tuple(scale(x) for x in m.layer_bytes), embed_bytes=scale(m.embed_bytes),
                   head_bytes=scale(m.head_bytes), weights_format=f"GGUF {weights_type} (from the catalog's config)")


def row_bytes(cache_type: str, n: int) -> int:
    """ggml_row_size: bytes of n values of the cache type."""
    per, size = CACHE_TYPES[cache_type]
    return n // per * size


def compute_buffer_bytes(m: ServedModel, *, n_ctx: int, ubatch: int, flash_attn: bool, output: bool) -> int:
    """One device's compute buffer: the largest of the graph's phases on it (f32 = 4 B).

    - attention without flash attention: the KQ scores n_ctx x n_ubatch x n_head (``ggml_mul_mat(k,
      q)``, ``ggml_soft_max_ext`` in place) and the f32 KQ mask n_ctx x n_ubatch (``llm_graph_input_attn``),
      beside four n_ubatch x h tensors (the residual, its norm, Q and the attention output);
    - attention with flash attention: the mask, f16, n_ctx x n_ubatch x 2 B, beside the same four;
    - the FFN: the residual, its norm, the gate and up projections: n_ubatch x (2h + 2f);
    - the output, on the device with the output layer: the logits n_vocab x n_ubatch and the final
      norm n_ubatch x h.
    Checked against logged buffers: Llama 3 8B at n_ctx 8192 without flash attention 560.00 MiB
    (attention), at n_ctx 512 258.50 MiB (output), Mistral 7B at n_ctx 2048 164.00 MiB; Pythia
    2.8B (fused QKV, one more n_ubatch x 3h tensor alive) 152 MiB against 162.00 logged.
    """
    streams = 4 * ubatch * m.hidden * 4
    if m.hybrid is not None and m.hybrid.n_attention == 0:  # Mamba, RWKV: no KQ, no mask
        attn = streams
    elif flash_attn:
        attn = n_ctx * ubatch * 2 + streams
    else:
        attn = n_ctx * ubatch * (m.n_heads + 1) * 4 + streams
    ffn = ubatch * (2 * m.hidden + 2 * m.ffn) * 4
    logits = ubatch * (m.vocab + m.hidden) * 4 if output else 0
    return max(attn, ffn, logits)


def llamacpp_capacity(m: ServedModel, gpu: GPU, *, gpus: int, tp: int, pp: int, context: int | None,
                      ctx_size: int | None = None, batch_size: int = DEFAULT_BATCH, ubatch_size: int = DEFAULT_UBATCH,
                      n_gpu_layers: int = ALL_LAYERS, cache_type_k: str = "f16", cache_type_v: str = "f16",
                      flash_attn: bool = False, parallel: int = 1, weights_type: str | None = None) -> Capacity:
    """llama.cpp's buffers for ``m`` on ``gpus`` x ``gpu`` (see the module docstring).

    Raises:
        ConfigError: settings llama.cpp refuses, in its words.
        EngineRefusal: a device whose buffers exceed its memory (cudaMalloc failed).
    """
    n_ctx_req = DEFAULT_CTX if ctx_size is None else (ctx_size or m.max_position)  # 0 = the model's
    p = []
    for what, t in (("cache-type-k", cache_type_k), ("cache-type-v", cache_type_v)):
        if t not in CACHE_TYPES:
            p.append(f"Unsupported cache type: {t} (--{what}: {', '.join(CACHE_TYPES)})")
        elif CACHE_TYPES[t][0] > 1 and m.head_dim % CACHE_TYPES[t][0]:
            p.append(f"--{what} {t}: head_dim {m.head_dim} is not a multiple of its {CACHE_TYPES[t][0]}-value block")
    if cache_type_v in CACHE_TYPES and CACHE_TYPES[cache_type_v][0] > 1 and not flash_attn:
        p.append("V cache quantization requires flash_attn (llama.cpp llama_init_from_model): add --flash-attn")
    if tp > 1:
        p.append("llama.cpp has no tensor parallelism in this accounting: use --gpus N (--split-mode layer)")
    if weights_type is not None and weights_type not in WEIGHTS_TYPES:
        p.append(f"weights_type={weights_type!r} is not one of {', '.join(WEIGHTS_TYPES)} (a mixed-type GGUF such "
                 "as Q4_K_M: pass the .gguf file as MODEL)")
    if weights_type is not None and m.weights_format.startswith("GGUF"):
        p.append("weights_type applies to a catalog model: a .gguf brings its own tensor types")
    if p:
        raise ConfigError(p)
    if weights_type is not None:
        m = with_weights_type(m, weights_type)
    ubatch = min(ubatch_size, batch_size)  # llama_context: n_ubatch = min(n_batch, n_ubatch)
    pad = 256 if flash_attn else 32
    n_ctx = round_up(n_ctx_req, pad)
    L = m.n_layers
    ngl = min(n_gpu_layers, L + 1)
    gpu_layers = list(range(L - min(ngl, L), L))
    output_on_gpu = ngl > L
    n_dev = max(1, gpus)
    dev_of = {layer: j * n_dev // max(1, len(gpu_layers)) for j, layer in enumerate(gpu_layers)}
    kv_n = m.n_kv_heads * m.head_dim  # n_embd_k_gqa
    win = m.sliding_window
    swa_cells = min(n_ctx, round_up((win or n_ctx) * parallel + ubatch, 256))
    # which blocks slide does not change the totals, only a partial offload: spread them evenly
    sliding = {i for i in range(L) if i * m.n_sliding // L != (i + 1) * m.n_sliding // L}

    h = m.hybrid
    seqs = max(1, parallel)  # recurrent_kv_size = max(1, n_seq_max)
    r_vals, s_vals = h.llama_rs_values() if h is not None else (0, 0)

    def is_attention(i: int) -> bool:
        return h is None or h.has_kv(i)

    def layer_rs(i: int) -> int:  # r_l and s_l of one recurrent block, f32, one row per sequence
        return (r_vals + s_vals) * 4 * seqs if h is not None and h.has_state(i) else 0

    def layer_kv(i: int) -> int:  # the block's KV cells and its recurrent rows (Falcon-H1 blocks have both)
        if not is_attention(i):
            return layer_rs(i)
        cells = swa_cells if i in sliding and win else n_ctx
        return row_bytes(cache_type_k, cells * kv_n) + row_bytes(cache_type_v, cells * kv_n) + layer_rs(i)

    devices = []
    ctx_bytes, _why = context_bytes_for(None)
    for d in range(n_dev):
        mine = [i for i in gpu_layers if dev_of[i] == d]
        last = d == n_dev - 1
        model_b = sum(m.layer_bytes[i] for i in mine) + (m.head_bytes if output_on_gpu and last else 0)
        kv_b = sum(layer_kv(i) for i in mine)
        # the output matmul runs on the last GPU even when the output layer stays in host memory
        # (its weight is copied over per ubatch), so the logits live there
        compute = compute_buffer_bytes(m, n_ctx=n_ctx, ubatch=ubatch, flash_attn=flash_attn,
                                       output=last) if mine or last else 0
        devices.append(DeviceBuffers(f"CUDA{d}", model_b, kv_b, compute, len(mine)))
    for dev in devices:
        # cudaMalloc fails past what CUDA reports (GPU.capacity_bytes: CUDA's total, nvidia-smi's where unknown);
        # llama.cpp's automatic fitting to the free memory (--fit) is not modelled: the layers are as given
        if dev.total_bytes + ctx_bytes > gpu.capacity_bytes:
            raise EngineRefusal(
                f"{dev.device}: ggml_backend_cuda_buffer_type_alloc_buffer: allocating "
                f"{dev.total_bytes / MiB:,.2f} MiB on device failed: cudaMalloc failed: out of memory (llama.cpp; the "
                f"GPU has {gpu.capacity_bytes / MiB:,.0f} MiB; lower --n-gpu-layers, --ctx-size or the cache type)")
    rs_total = sum(layer_rs(i) for i in range(L))
    kv_total = sum(layer_kv(i) for i in range(L)) - rs_total
    k_total = sum(row_bytes(cache_type_k, (swa_cells if i in sliding and win else n_ctx) * kv_n) for i in range(L)
                  if is_attention(i))
    ctx = context or n_ctx
    conc = n_ctx / ctx
    running = max(1, min(parallel, int(conc)))
    gpu_model = sum(dev.model_bytes for dev in devices)
    host_bytes = m.weight_bytes - gpu_model
    attn_on_gpu = sum(1 for i in gpu_layers if is_attention(i))
    kv_per_token = row_bytes(cache_type_k, kv_n) * attn_on_gpu + row_bytes(cache_type_v, kv_n) * attn_on_gpu
    busiest = max(devices, key=lambda dv: dv.total_bytes)
    speed = roofline(m, gpu, weights_per_gpu=gpu_model, kv_per_token_per_gpu=max(kv_per_token, 1), running=running,
                     context=ctx, tp=1, pp=1, compute_dtype="fp16", extra_step_s=host_bytes / CPU_BYTES_S)
    figures = [
        EngineFigure("n_ctx", "n_ctx (padded)", n_ctx),
        EngineFigure("kv_self_size_mib", "KV self size (MiB)", round(kv_total / MiB, 2)),
        EngineFigure("k_size_mib", f"K ({cache_type_k}) (MiB)", round(k_total / MiB, 2)),
        EngineFigure("v_size_mib", f"V ({cache_type_v}) (MiB)", round((kv_total - k_total) / MiB, 2)),
        *((EngineFigure("rs_size_mib", "RS buffer size (MiB)", round(rs_total / MiB, 2)),
           EngineFigure("r_size_mib", "R (f32) (MiB)", round(r_vals * 4 * seqs * h.n_state / MiB, 2)),
           EngineFigure("s_size_mib", "S (f32) (MiB)", round(s_vals * 4 * seqs * h.n_state / MiB, 2)))
          if h is not None else ()),
        EngineFigure("offloaded_layers", f"offloaded layers to GPU (of {L + 1})", len(gpu_layers) + int(output_on_gpu)),
        EngineFigure("cpu_model_buffer_mib", "CPU_Mapped model buffer size (MiB)", round(host_bytes / MiB, 2)),
    ]
    for dev in devices:
        figures += [EngineFigure(f"{dev.device.lower()}_model_buffer_mib", f"{dev.device} model buffer size (MiB)",
                                 round(dev.model_bytes / MiB, 2)),
                    EngineFigure(f"{dev.device.lower()}_kv_buffer_mib", f"{dev.device} KV buffer size (MiB)",
                                 round(dev.kv_bytes / MiB, 2)),
                    EngineFigure(f"{dev.device.lower()}_compute_buffer_mib", f"{dev.device} compute buffer size (MiB)",
                                 round(dev.compute_bytes / MiB, 2))]
    notes = (
        f"n_ctx = pad({n_ctx_req:,}, {pad}) = {n_ctx:,}; K+V per layer = row(k, n_ctx x {kv_n}) + row(v, n_ctx x {kv_n})",
        f"blocks {gpu_layers[0] if gpu_layers else '-'}..{L - 1} on the GPU, output layer "
        + ("on the GPU" if output_on_gpu else "in host memory") + "; token embedding in host memory",
        "compute buffer: the largest phase, f32: attention "
        + ("(flash attention) n_ctx x n_ubatch x 2 B mask" if flash_attn else "n_ctx x n_ubatch x (n_head + 1)")
        + " + 4 n_ubatch h; FFN n_ubatch (2h + 2f); output n_ubatch (n_vocab + h) on the last device",
        f"CUDA context {ctx_bytes / MiB:,.0f} MiB per device outside these buffers (vramlens.hardware.runtime)",
    ) + ((f"hybrid: KV cells for the {h.n_attention} attention blocks only; each of the {h.n_state} {h.mixer} blocks "
          f"keeps r_l {r_vals:,} + s_l {s_vals:,} f32 values per sequence x {seqs} (n_seq_max) = "
          f"{layer_rs(next(i for i in range(L) if h.has_state(i))):,} B (llama_memory_recurrent, in the "
          "device's KV buffer); the recurrent blocks' compute temporaries are not modelled",)
         if h is not None and h.n_state else ())
    return Capacity(
        engine="llama.cpp", accounting=ACCOUNTING, model=m.name, gpu=gpu.name, gpus=n_dev, tp=1, pp=n_dev,
        gpu_bytes=gpu.capacity_bytes, budget_bytes=gpu.capacity_bytes, weights_bytes=busiest.model_bytes,
        non_torch_bytes=ctx_bytes, cuda_graph_bytes=0, activation_bytes=busiest.compute_bytes,
        kv_cache_bytes=busiest.kv_bytes, kv_bytes_per_token=ceil_div(kv_per_token, n_dev), kv_tokens=n_ctx,
        max_model_len=n_ctx, context=ctx, concurrency=conc, max_running=running,
        decode_tokens_s=speed.decode_tokens_s, decode_tokens_s_total=speed.decode_tokens_s_total,
        ttft_s=speed.ttft_s, figures=tuple(figures), devices=tuple(devices), notes=notes)
