"""Capacity: what a serving engine will do with one GPU's memory, in the engine's own terms.

A frozen value (STYLE rule 3): the byte split per GPU (weights, memory outside PyTorch, the
profiled activation peak, the KV cache), the figures the engine logs at start-up under their own
names, and what they mean for users (concurrency at a context, decode and prefill speed).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class EngineFigure:
    """One figure as the engine logs it: ``label`` is the engine's wording, ``value`` the number.

    ``key`` is a stable identifier for JSON and validation (``"num_gpu_blocks"``).
    """

    key: str
    label: str
    value: int | float


@dataclass(frozen=True, slots=True)
class DeviceBuffers:
    """llama.cpp's per-device buffers as its log names them (``CUDA0 model buffer size``)."""

    device: str
    model_bytes: int
    kv_bytes: int
    compute_bytes: int
    n_layers: int

    @property
    def total_bytes(self) -> int:
        return self.model_bytes + self.kv_bytes + self.compute_bytes


@dataclass(frozen=True, slots=True)
class Capacity:
    """A serving engine's memory split on each GPU and the concurrency and speed that follow.

    Attributes:
        engine: "vllm", "sglang", "llama.cpp" or "transformers".
        accounting: the engine version whose start-up arithmetic is followed.
        model, gpu: names. gpus, tp, pp: the layout.
        gpu_bytes: memory of one GPU as the engine sees it: CUDA's device total (``cudaMemGetInfo``,
            GPU.capacity_bytes), nvidia-smi's where the catalog has no CUDA total (a note says so).
        budget_bytes: what the engine lets itself use (vLLM: utilization x total; SGLang: the
            static fraction; llama.cpp and transformers: the whole GPU).
        weights_bytes: weights on the busiest GPU.
        non_torch_bytes: CUDA context and NCCL buffers (outside PyTorch's allocator).
        cuda_graph_bytes: CUDA graph pools (0 with enforce_eager, or where the engine has none).
        activation_bytes: the activation peak the engine profiles or reserves.
        kv_cache_bytes: the KV cache the engine allocates on one GPU.
        kv_bytes_per_token: cache bytes one token costs on one GPU (all its layers).
        kv_tokens: tokens the cache holds (vLLM's "GPU KV cache size", SGLang's max_total_num_tokens).
        max_model_len: the longest request the engine accepts.
        context: tokens per request the concurrency and speeds are given for.
        concurrency: requests of ``context`` tokens the cache holds at once (engine's own rule).
        max_running: requests that run together: min(concurrency, the engine's request cap).
        decode_tokens_s: tokens/s one request sees when ``max_running`` requests decode together.
        decode_tokens_s_total: tokens/s over all running requests.
        ttft_s: time to first token for one ``context``-token prompt (compute roofline).
        figures: what the engine logs, in its words.
        devices: per-device buffers (llama.cpp).
        notes: the formulas and assumptions behind the figures, one line each.
        speculative: the speculative decoding set-up ("eagle3, 3 tokens, draft NAME"), "" without one.
        draft_weights_bytes: the draft's share of ``weights_bytes``.
        draft_kv_cache_bytes: the draft layers' share of ``kv_cache_bytes``.
    """

    engine: str
    accounting: str
    model: str
    gpu: str
    gpus: int
    tp: int
    pp: int
    gpu_bytes: int
    budget_bytes: int
    weights_bytes: int
    non_torch_bytes: int
    cuda_graph_bytes: int
    activation_bytes: int
    kv_cache_bytes: int
    kv_bytes_per_token: int
    kv_tokens: int
    max_model_len: int
    context: int
    concurrency: float
    max_running: int
    decode_tokens_s: float
    decode_tokens_s_total: float
    ttft_s: float
    figures: tuple[EngineFigure, ...] = ()
    devices: tuple[DeviceBuffers, ...] = ()
    notes: tuple[str, ...] = ()
    speculative: str = ""
    draft_weights_bytes: int = 0
    draft_kv_cache_bytes: int = 0

    @property
    def total_bytes(self) -> int:
        """Everything on the busiest GPU: what nvidia-smi would show once the engine has started."""
        return (self.weights_bytes + self.non_torch_bytes + self.cuda_graph_bytes + self.activation_bytes
                + self.kv_cache_bytes)

    def figure(self, key: str) -> int | float | None:
        """The value of the engine figure ``key``, None when this engine does not log it."""
        return next((f.value for f in self.figures if f.key == key), None)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON types; bytes exact; a ``speculative`` object only with a draft."""
        spec = ({"speculative": {"setup": self.speculative, "draft_weights_bytes": self.draft_weights_bytes,
                                 "draft_kv_cache_bytes": self.draft_kv_cache_bytes}} if self.speculative else {})
        return {
            "engine": self.engine, "accounting": self.accounting, "model": self.model, "gpu": self.gpu,
            "gpus": self.gpus, "tp": self.tp, "pp": self.pp,
            "gpu_bytes": self.gpu_bytes, "budget_bytes": self.budget_bytes, "weights_bytes": self.weights_bytes,
            "non_torch_bytes": self.non_torch_bytes, "cuda_graph_bytes": self.cuda_graph_bytes,
            "activation_bytes": self.activation_bytes, "kv_cache_bytes": self.kv_cache_bytes,
            "kv_bytes_per_token": self.kv_bytes_per_token, "kv_tokens": self.kv_tokens,
            "max_model_len": self.max_model_len, "context": self.context,
            "concurrency": round(self.concurrency, 4), "max_running": self.max_running,
            "decode_tokens_s": round(self.decode_tokens_s, 3),
            "decode_tokens_s_total": round(self.decode_tokens_s_total, 3), "ttft_s": round(self.ttft_s, 6),
            "total_bytes": self.total_bytes,
            "figures": {f.key: {"label": f.label, "value": f.value} for f in self.figures},
            "devices": [{"device": d.device, "model_bytes": d.model_bytes, "kv_bytes": d.kv_bytes,
                         "compute_bytes": d.compute_bytes, "n_layers": d.n_layers} for d in self.devices],
            "notes": list(self.notes),
        } | spec
