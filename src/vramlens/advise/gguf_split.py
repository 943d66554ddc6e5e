"""llama.cpp-style CPU/GPU layer splits (``--n-gpu-layers``) for a GGUF model.

Pure: it takes a :class:`GGUFInfo` (what a GGUF header says; ``vramlens.cli.place`` reads it
with the ``gguf`` package, header only) and a GPU, and answers how many blocks fit on the GPUs.

llama.cpp's placement (src/llama-model.cpp, ``load_tensors``): the token embedding stays in host
memory; block i goes to the GPU when ``i >= n_layer - n_gpu_layers`` (the last blocks first);
``n_gpu_layers > n_layer`` also moves the output layer and its norm. The KV cache of a block
lives where the block runs (``offload_kqv``, default on); a hybrid or recurrent GGUF's blocks keep KV cells
(attention blocks) and one sequence's recurrent rows (state blocks) as GGUFInfo.hybrid says. A compute buffer for the graph sits on
the GPU: we reserve the prefill working set of one block plus the logits.

Decode reads every weight and the cache once per token: GPU blocks at the GPU's bandwidth, host
blocks at CPU_BYTES_S (llama.cpp computes them on the CPU; nothing crosses PCIe but activations).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from vramlens.advise.cost import BANDWIDTH_EFFICIENCY
from vramlens.advise.place import CPU_BYTES_S
from vramlens.errors import InputError
from vramlens.hardware.gpu import GPU
from vramlens.models.hybrid import HybridLayout

#: llama.cpp's default KV-cache type is f16 (``--cache-type-k/-v f16``): 2 bytes per element.
KV_BYTES = {"f16": 2, "f32": 4, "q8_0": 34 / 32, "q4_0": 18 / 32}
#: CUDA context plus cuBLAS/llama.cpp pools outside the weights: an allowance of this size per GPU
#: (order of what llama.cpp's startup log reports for a CUDA context and compute buffers on 7B models).
RUNTIME_ALLOWANCE = 512 * 2**20


@dataclass(frozen=True, slots=True)
class GGUFInfo:
    """What a GGUF header tells about placement.

    Attributes:
        name: file or model name.
        arch: ``general.architecture`` ("llama", ...).
        n_layers: ``{arch}.block_count``.
        n_ctx_train: ``{arch}.context_length``.
        n_embd, n_head, n_head_kv: ``{arch}.embedding_length``, ``.attention.head_count(_kv)``.
        layer_bytes: bytes of each block's tensors (``blk.{i}.*``), in block order.
        input_bytes: token embedding and other tensors before the blocks.
        output_bytes: output norm and output layer.
        quant_types: ggml type name -> tensor count (Q4_K, Q6_K, F16, ...).
        vocab: rows of the token embedding.
        key_length: ``{arch}.attention.key_length`` (0: absent, n_embd / n_head as llama.cpp's default).
        hybrid: the blocks' kinds and recurrent state sizes of a recurrent or hybrid architecture
            (vramlens.advise.gguf_header reads them as llama.cpp's ``load_hparams`` does), None otherwise.
    """

    name: str
    arch: str
    n_layers: int
    n_ctx_train: int
    n_embd: int
    n_head: int
    n_head_kv: int
    layer_bytes: tuple[int, ...]
    input_bytes: int
    output_bytes: int
    quant_types: dict[str, int] = field(default_factory=dict)
    vocab: int = 0
    key_length: int = 0
    hybrid: HybridLayout | None = None

    @property
    def head_dim(self) -> int:
        """``n_embd_head_k``: the header's key_length, else n_embd / n_head (src/llama-model.cpp load_hparams)."""
        return self.key_length or self.n_embd // max(1, self.n_head)

    def kv_bytes_per_layer(self, n_ctx: int, cache_type: str = "f16") -> int:
        return int(2 * n_ctx * self.n_head_kv * self.head_dim * KV_BYTES[cache_type])

    def layer_cache_bytes(self, i: int, n_ctx: int, cache_type: str = "f16") -> int:
        """Block ``i``'s cache for one sequence: its KV cells (an attention block; every block of a plain
        transformer) and its recurrent rows (llama.cpp ``llama_memory_recurrent``: n_embd_r() + n_embd_s()
        f32 values, :meth:`HybridLayout.llama_rs_values`)."""
        h = self.hybrid
        if h is None:
            return self.kv_bytes_per_layer(n_ctx, cache_type)
        kv = self.kv_bytes_per_layer(n_ctx, cache_type) if h.has_kv(i) else 0
        return kv + (4 * sum(h.llama_rs_values()) if h.has_state(i) else 0)


@dataclass(frozen=True, slots=True)
class LayerSplit:
    """The answer: how many blocks go to the GPUs, the bytes on each side and the decode speed."""

    n_gpu_layers: int
    n_layers: int
    gpu_bytes: int
    host_bytes: int
    budget_bytes: int
    tokens_per_s: float
    quant_types: dict[str, int]
    n_ctx: int

    def to_dict(self) -> dict[str, Any]:
        return {"n_gpu_layers": self.n_gpu_layers, "n_layers": self.n_layers, "gpu_bytes": self.gpu_bytes,
                "host_bytes": self.host_bytes, "budget_bytes": self.budget_bytes, "tokens_per_s": self.tokens_per_s,
                "quant_types": dict(self.quant_types), "n_ctx": self.n_ctx,
                "llama_cpp_flags": f"--n-gpu-layers {self.n_gpu_layers} --ctx-size {self.n_ctx}"}


def split_layers(info: GGUFInfo, gpu: GPU, *, gpus: int = 1, n_ctx: int | None = None, headroom: float = 0.10,
                 cache_type: str = "f16", cpu_bytes_s: float = CPU_BYTES_S) -> LayerSplit:
    """The largest ``--n-gpu-layers`` whose blocks, KV cache and compute buffer fit the GPUs.

    Raises:
        InputError: an unknown cache type, gpus < 1, or a context longer than the model was trained for.
    """
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1:
        raise InputError(f"gpus={gpus!r} must be a whole number >= 1")
    if cache_type not in KV_BYTES:
        raise InputError(f"cache type {cache_type!r} is not one of: {', '.join(KV_BYTES)}")
    n_ctx = n_ctx or min(info.n_ctx_train, 4096)
    if n_ctx > info.n_ctx_train:
        raise InputError(f"n_ctx={n_ctx} exceeds the {info.n_ctx_train} tokens {info.name} was trained for")
    # compute buffer: logits of a 512-token batch in fp32 plus a block's activations (llama.cpp ubatch 512)
    compute = 4 * info.vocab * 512 + 4 * 512 * info.n_embd * 8
    budget = int(gpu.capacity_bytes * (1 - headroom)) * gpus - gpus * RUNTIME_ALLOWANCE - compute
    L = info.n_layers
    used = 0
    n = 0
    # blocks are offloaded from the last one backwards; n > L also moves the output layer
    for i in range(L - 1, -1, -1):
        need = info.layer_bytes[i] + info.layer_cache_bytes(i, n_ctx, cache_type)
        if used + need > budget:
            break
        used += need
        n += 1
    if n == L and used + info.output_bytes <= budget:
        used += info.output_bytes
        n = L + 1
    total = (sum(info.layer_bytes) + info.input_bytes + info.output_bytes
             + sum(info.layer_cache_bytes(i, n_ctx, cache_type) for i in range(L)))
    host = total - used
    secs = used / (gpu.bandwidth_bytes_s * BANDWIDTH_EFFICIENCY) + host / cpu_bytes_s
    return LayerSplit(n_gpu_layers=n, n_layers=L, gpu_bytes=used, host_bytes=host, budget_bytes=budget,
                      tokens_per_s=1 / secs if secs else 0.0, quant_types=dict(info.quant_types), n_ctx=n_ctx)
