"""llama.cpp: n_gpu_layers, the KV cells of n_ctx, and the compute buffer, per device.

Follows llama.cpp b4000-b5500 (src/llama-model.cpp ``load_tensors``, src/llama-kv-cache*.cpp,
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
- Compute buffer (ggml_gallocr's reservation of the worst-case graph, one ubatch): without flash
  attention the f32 KQ matrix n_ubatch x n_ctx x n_head x 4 B, with it the FFN's f32 gate and up
  outputs 2 x n_ubatch x f x 4 B, whichever is larger, plus 3 residual-stream f32 tensors
  n_ubatch x h x 4 B, plus the f32 logits n_vocab x n_ubatch x 4 B on the device with the output
  layer. An estimate, not ggml's exact graph.
"""

from __future__ import annotations

from vramlens.advise.place import CPU_BYTES_S
from vramlens.errors import ConfigError, EngineRefusal
from vramlens.hardware.gpu import GPU
from vramlens.hardware.runtime import context_bytes_for
from vramlens.serving.common import ServedModel, roofline
from vramlens.serving.result import Capacity, DeviceBuffers, EngineFigure
from vramlens.units import MiB, ceil_div, round_up

ACCOUNTING = "llama.cpp b4000-b5500 (llama_kv_cache sizing, load_tensors placement)"
#: ``--cache-type-k/-v`` -> (values per block, bytes per block): ggml type_traits.
CACHE_TYPES = {"f32": (1, 4), "f16": (1, 2), "bf16": (1, 2), "q8_0": (32, 34), "q4_0": (32, 18),
               "q4_1": (32, 20), "q5_0": (32, 22), "q5_1": (32, 24)}
#: llama-server defaults (common/common.h): n_ctx 4096, n_batch 2048, n_ubatch 512, 1 slot.
DEFAULT_CTX, DEFAULT_BATCH, DEFAULT_UBATCH = 4096, 2048, 512
#: n_gpu_layers above n_layer means "everything, output layer included" (-ngl 99 / 999).
ALL_LAYERS = 999


def row_bytes(cache_type: str, n: int) -> int:
    """ggml_row_size: bytes of n values of the cache type."""
    per, size = CACHE_TYPES[cache_type]
    return n // per * size


def llamacpp_capacity(m: ServedModel, gpu: GPU, *, gpus: int, tp: int, pp: int, context: int | None,
                      ctx_size: int | None = None, batch_size: int = DEFAULT_BATCH, ubatch_size: int = DEFAULT_UBATCH,
                      n_gpu_layers: int = ALL_LAYERS, cache_type_k: str = "f16", cache_type_v: str = "f16",
                      flash_attn: bool = False, parallel: int = 1) -> Capacity:
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
    if p:
        raise ConfigError(p)
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

    def layer_kv(i: int) -> int:
        cells = swa_cells if i in sliding and win else n_ctx
        return row_bytes(cache_type_k, cells * kv_n) + row_bytes(cache_type_v, cells * kv_n)

    devices = []
    ctx_bytes, _why = context_bytes_for(None)
    for d in range(n_dev):
        mine = [i for i in gpu_layers if dev_of[i] == d]
        last = d == n_dev - 1
        model_b = sum(m.layer_bytes[i] for i in mine) + (m.head_bytes if output_on_gpu and last else 0)
        kv_b = sum(layer_kv(i) for i in mine)
        attn = ubatch * n_ctx * m.n_heads * 4 if not flash_attn else 0
        ffn = 2 * ubatch * m.ffn * 4
        compute = (max(attn, ffn) + 3 * ubatch * m.hidden * 4 + (m.vocab * ubatch * 4 if last else 0)) if mine or last else 0
        devices.append(DeviceBuffers(f"CUDA{d}", model_b, kv_b, compute, len(mine)))
    for dev in devices:
        if dev.total_bytes + ctx_bytes > gpu.capacity_bytes:
            raise EngineRefusal(
                f"{dev.device}: ggml_backend_cuda_buffer_type_alloc_buffer: allocating "
                f"{dev.total_bytes / MiB:,.2f} MiB on device failed: cudaMalloc failed: out of memory (llama.cpp; the "
                f"GPU has {gpu.capacity_bytes / MiB:,.0f} MiB; lower --n-gpu-layers, --ctx-size or the cache type)")
    kv_total = sum(layer_kv(i) for i in range(L))
    k_total = sum(row_bytes(cache_type_k, (swa_cells if i in sliding and win else n_ctx) * kv_n) for i in range(L))
    ctx = context or n_ctx
    conc = n_ctx / ctx
    running = max(1, min(parallel, int(conc)))
    gpu_model = sum(dev.model_bytes for dev in devices)
    host_bytes = m.weight_bytes - gpu_model
    kv_per_token = row_bytes(cache_type_k, kv_n) * len(gpu_layers) + row_bytes(cache_type_v, kv_n) * len(gpu_layers)
    busiest = max(devices, key=lambda dv: dv.total_bytes)
    speed = roofline(m, gpu, weights_per_gpu=gpu_model, kv_per_token_per_gpu=max(kv_per_token, 1), running=running,
                     context=ctx, tp=1, pp=1, compute_dtype="fp16", extra_step_s=host_bytes / CPU_BYTES_S)
    figures = [
        EngineFigure("n_ctx", "n_ctx (padded)", n_ctx),
        EngineFigure("kv_self_size_mib", "KV self size (MiB)", round(kv_total / MiB, 2)),
        EngineFigure("k_size_mib", f"K ({cache_type_k}) (MiB)", round(k_total / MiB, 2)),
        EngineFigure("v_size_mib", f"V ({cache_type_v}) (MiB)", round((kv_total - k_total) / MiB, 2)),
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
        f"compute buffer: max(KQ f32 {'(flash attention: none)' if flash_attn else 'n_ubatch x n_ctx x n_head x 4'}, "
        "FFN 2 x n_ubatch x f x 4) + 3 x n_ubatch x h x 4 + logits n_vocab x n_ubatch x 4 (estimate)",
        f"CUDA context {ctx_bytes / MiB:,.0f} MiB per device outside these buffers (vramlens.hardware.runtime)",
    )
    return Capacity(
        engine="llama.cpp", accounting=ACCOUNTING, model=m.name, gpu=gpu.name, gpus=n_dev, tp=1, pp=n_dev,
        gpu_bytes=gpu.capacity_bytes, budget_bytes=gpu.capacity_bytes, weights_bytes=busiest.model_bytes,
        non_torch_bytes=ctx_bytes, cuda_graph_bytes=0, activation_bytes=busiest.compute_bytes,
        kv_cache_bytes=busiest.kv_bytes, kv_bytes_per_token=ceil_div(kv_per_token, n_dev), kv_tokens=n_ctx,
        max_model_len=n_ctx, context=ctx, concurrency=conc, max_running=running,
        decode_tokens_s=speed.decode_tokens_s, decode_tokens_s_total=speed.decode_tokens_s_total,
        ttft_s=speed.ttft_s, figures=tuple(figures), devices=tuple(devices), notes=notes)
