"""SGLang: mem_fraction_static and the token-to-KV pool.

Follows the release given as ``version`` (``--sglang-version``, 0.3.3 to 0.5.3 read; the arithmetic of
python/sglang/srt/model_executor/model_runner.py is the same in all of them, the defaults and the NCCL
all-reduce differ, see below):

- ``init_torch_distributed`` records ``total_gpu_memory``: the free memory once the CUDA context
  and NCCL exist (``get_available_gpu_memory``), before the weights load.
- ``profile_max_num_token``: rest = free after loading - total_gpu_memory x (1 - mem_fraction_static)
  = total_gpu_memory x mem_fraction_static - what the load took (:func:`load_bytes`: free memory read after
  ``empty_cache``, so the caching allocator's segments around the parameters and the rotary cos/sin cache,
  which SGLang keeps in fp32 on CUDA); cell_size = n_kv/tp x head_dim x layers x 2
  (K, V) x dtype bytes (MHA; every layer at full length: 0.4 has no sliding-window pool); with
  multi-head latent attention (``model_config.attention_arch == MLA``) cell_size =
  (kv_lora_rank + qk_rope_head_dim) x layers x dtype bytes, the same on every rank
  (``MLATokenToKVPool`` keeps one latent buffer per layer);
  max_total_num_tokens = rest // cell_size.
- The (1 - mem_fraction_static) share is left for activations (a chunked prefill of
  chunked_prefill_size tokens) and CUDA graphs; nothing is profiled.
- hybrid sliding-window models (ServedModel.hybrid_swa, from ModelSpec.hybrid_swa_pool: SGLang's
  model_config.py ``is_hybrid_swa_model`` lists GptOssForCausalLM) follow newer SGLang, the code of
  github:sgl-project/sglang python/sglang/srt/model_executor/model_runner_kv_cache_mixin.py at commit
  001ccef (the 0.5 series): ``get_cell_size_per_token`` sums the full and the SWA layers
  (F x n_full + S x n_swa, F = S = kv heads x (head_dim + v_head_dim) x dtype bytes for gpt-oss),
  max_total_num_tokens = rest // cell as before (page-aligned), then ``set_num_tokens_hybrid_swa``
  splits the same memory: full_max_total_num_tokens = int(max_total_num_tokens x (F n_full + S n_swa)
  / (F n_full + r S n_swa)), swa_max_total_num_tokens = int(full x r), both page-aligned, r =
  ``swa_full_tokens_ratio`` (server_args.py default 0.8); the full-layer count is what the scheduler
  sees as max_total_num_tokens. ``page_size`` defaults to 1 (server_args.py).
- server_args.py defaults, by release (``--sglang-version``, :func:`parse_sglang_version`; ``gpu_mem`` is
  utils.py ``get_device_memory_capacity``: nvidia-smi's memory.total in MiB, the smallest GPU's, taken
  as the GPU's ``nvidia_smi_bytes``; total_gpu_memory itself starts from CUDA's device total, ``capacity_bytes``). mem_fraction_static (:func:`default_mem_fraction`): by TP degree up to
  0.4.5 (0.88 at tp 1, 0.87 at 2, 0.85 at 4, 0.79 at 16; at 8 0.83 in 0.3.3-0.3.5, 0.82 in 0.3.6, 0.81
  from 0.4.0); 0.4.6 keeps that table up to 81,920 MiB and takes (gpu_mem - 13 GiB) / gpu_mem above;
  0.4.7 keys the table on tp x pp up to 81,920 MiB, 0.88 above, then 0.79 over 180,000 MiB (CUDA), or
  min(f + 48 GiB x (1 - f) / gpu_mem, (gpu_mem - 18 GiB) / gpu_mem) over 96 GiB; 0.4.8 to 0.5.2 reserve
  by GPU size, round((gpu_mem - reserved) / gpu_mem, 3) with reserved (2.8 + tp x pp / 10) GiB under
  35 GiB, (9.5 + tp x pp / 2) under 90, (12 + tp x pp / 2) under 160, 32 GiB above; 0.5.3 reserves
  512 MiB + 1.5 x max(chunked_prefill_size, 2048) + 2 x cuda_graph_max_bs + tp x pp / 8 GiB, at least
  10 GiB over 60 GiB (:func:`cuda_graph_max_bs`: 8 under 20 GiB, 16 / 80 (tp >= 4) under 35, 32 / 160
  under 60, 256 / 512 under 160, 512 above). chunked_prefill_size (:func:`default_chunked_prefill_size`):
  8192 in 0.3.3-0.3.5; from 0.3.6, 2048 when gpu_mem < 25,000 (the 24 GiB RTX 3090 and 4090: 24,5xx MiB),
  else 8192 (0.4.7: 16,384 over 180,000 MiB); 0.4.8 to 0.5.3, 2048 under 35 GiB, 8192 under 160 GiB
  (0.5.3: 4096 under 60 GiB), 16,384 above.
- ``init_memory_pool`` (the same from 0.3.3 to 0.5.3): max_num_reqs = min(max(max_total_num_tokens /
  context_len x 512, 2048), 4096), or --max-running-requests; the ReqToTokenPool holds max_num_reqs + 1
  rows of context_len + 4 int32 token indices up to 0.4.3.post4 (the logs' "max_running_requests=2049"),
  max_num_reqs rows from 0.4.8 (``ReqToTokenPool(size=max_num_reqs, ...)`` in the 0.4.8, 0.4.9.post2, 0.4.10,
  0.5.2 and 0.5.3 wheels; 0.4.4-0.4.7 are taken as before), allocated after the pool is sized, so out of the
  (1 - mem_fraction_static) share; tp_worker.py: max_running_requests = min(max_total_num_tokens // 2,
  that pool's size) unless given.
- At tp > 1, 0.3.3 to 0.4.6 read total_gpu_memory and then all-reduce it over the default (NCCL) process
  group (utils.py ``get_available_gpu_memory(distributed=True)``: a CUDA tensor, ``torch.distributed.all_reduce``
  with no group), which creates torch's NCCL communicator after the figure is read, so its buffers come out
  of the pool in full (vramlens' NCCL model: 37 MiB on a PCIe card); from 0.4.7 the all-reduce goes over the
  gloo ``cpu_group`` of the world group (:func:`late_communicator_bytes`). The custom all-reduce's IPC
  buffers (8 MiB ``max_size``, with NVLink or at tp 2) are left out.
- The hybrid SWA pool by release (:func:`hybrid_pool`): none by default up to 0.4.9.post2 (Llama 4's
  chunked layers split only with --hybrid-kvcache-ratio; gpt-oss is not served). From 0.4.10
  model_runner.py ("Check if the model is using hybrid SWA", ``set_num_token_hybrid``: the same split as
  above) splits any model whose class has ``get_attention_sliding_window_size`` (Gemma 2, Gemma 3 and 3n,
  gpt-oss) unless it is a Llama 4 or ``disable_hybrid_swa_memory`` is set, and server_args.py sets it:
  0.4.10 for nothing (Gemma 2 and 3 are split), 0.4.10.post2 for Gemma2ForCausalLM ("Disable hybrid SWA
  memory for Gemma2ForCausalLM"), and from 0.5.0rc2 (read in 0.5.0rc2, 0.5.1, 0.5.1.post3, 0.5.2, 0.5.3)
  for Gemma2ForCausalLM, Gemma3ForCausalLM, Gemma3ForConditionalGeneration, the Gemma 3n classes ("as it
  is not yet supported") and GptOssForCausalLM (its model-specific branch, unconditionally). So gpt-oss is
  split in 0.4.10.x only, and 0.5.0-0.5.3 keep one pool at full length for every model vramlens marks;
  later releases add Llama 4 (0.5.23's ``is_hybrid_swa_model``), split as at 001ccef (gpt-oss taken as
  split there too: 0.5.23's server_args.py is not read). vramlens marks gpt-oss and Llama 4; Gemma 2/3 are
  kept at full length, which is SGLang's own rule from 0.5.0rc2 (0.4.10-0.4.10.post2's Gemma split is not
  modelled).
- Speculative decoding (``--speculative-algorithm`` EAGLE, EAGLE3, NEXTN, STANDALONE, NGRAM; read in the
  0.5.3 wheel, with 0.4.10's and 0.5.2's server_args.py and model_runner.py: :func:`sglang_speculative`,
  :mod:`vramlens.serving.speculative` for the drafts' weights). server_args.py adds to the default reserve
  (:func:`speculative_reserve_mib`: 2 GiB, 6 GiB for STANDALONE, none for NGRAM in 0.5.3), sets
  max_running_requests to 48 when not given, and picks num_steps / eagle_topk / num_draft_tokens by
  architecture (``auto_choose_speculative_params``). model_runner.py ``init_memory_pool``: the target profiles
  its pool as without a draft, then raises max_total_num_tokens to ``draft_runner_cache_size`` = profiled +
  max_num_reqs x (steps x topk + num_draft_tokens) + 100 ("both verify and draft tokens can be concurrently
  allocated"); the draft worker (eagle_worker.py, ``is_draft_worker``) shares req_to_token_pool and the token
  allocator and allocates its own token_to_kv_pool of that many tokens over its own layers; its weights
  load after the target's pool. So the draft's weights and pool and the target's headroom come out of the
  (1 - mem_fraction_static) share, which SGLang's larger default reserve is for; over it, CUDA runs out of
  memory. The request-to-token table is num_draft_tokens longer (``extra_max_context_len``).
- Hybrid models (ServedModel.hybrid, vramlens.models.hybrid), from 0.5.2, the first release with
  models/qwen3_next.py (0.5.1.post3 has none), read in the 0.5.2, 0.5.3 and 0.5.4 wheels (:func:`gdn_pools`).
  0.5.2-0.5.3 serve Gated DeltaNet (Qwen3-Next): model_runner.py ``is_hybrid_gdn`` (architectures[0]
  Qwen3NextForCausalLM, its MTP class, and FalconH1ForCausalLM from 0.5.3, whose layout vramlens does not
  read) disables the radix cache and sets max_mamba_cache_size = --max-mamba-cache-size, else
  --max-running-requests, else 512; ``profile_max_num_token`` counts only the full-attention layers in the
  cell (``len(full_attention_layer_ids)``, every ``full_attention_interval``-th block in SGLang's
  configs/qwen3_next.py; vramlens takes the layout's attention blocks, from ``layer_types`` where the config
  has one, the same blocks in Qwen3-Next's checkpoints) and first takes max_mamba_cache_size x
  ``mamba_cache_per_req`` out of rest (configs/qwen3_next.py: per linear layer, conv (conv_dim / tp, K - 1)
  in bfloat16, whatever the model dtype, + temporal (v_heads / tp, k_dim, v_dim) in --mamba-ssm-dtype,
  float32 by default, server_args.py); ``init_memory_pool`` caps max_num_reqs at max_mamba_cache_size, and
  HybridReqToTokenPool allocates the MambaPool (mem_cache/memory_pool.py) with max_num_reqs + 1 slots per
  linear layer ("Mamba Cache is allocated. conv_state size ..., ssm_state size ...") beside
  HybridLinearKVPool, an MHATokenToKVPool over the full-attention layers only. 0.5.4 (configs/mamba_utils.py
  ``Mamba2CacheParams``: the same shapes for Gated DeltaNet and Mamba2, groups extended to tp) adds
  Nemotron-H (models/nemotron_h.py, ``mamba2_config``: radix cache disabled, the 0.5.3 sizing) and keeps the
  radix cache on for Qwen3-Next, where ``handle_max_mamba_cache`` sizes the pool from the memory:
  max_mamba_cache_size = int(rest x r / (1 + r) // mamba_cache_per_req), r = ``mamba_full_memory_ratio``
  (0.9; --max-mamba-cache-size is not read on that path), max_num_reqs = min(its default,
  max_mamba_cache_size // 3) (``MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO``); its MambaPool has
  max_mamba_cache_size + 1 slots. 0.5.4's CUDA memory defaults (``_handle_gpu_memory_settings``) are 0.5.3's
  (its additions are for NPUs). Refused in one line: Mamba1 hybrids and Mamba2 ones with no SGLang model
  class (Jamba, Granite 4.0-H, Bamba), Nemotron-H before 0.5.4, releases before 0.5.2 or after 0.5.4,
  pipeline parallelism, speculative decoding other than NEXTN / EAGLE with Qwen3-Next's own MTP layer, a tp
  the state dimensions do not divide (SGLang's ``divide``). With NEXTN (0.5.2-0.5.4, :class:`GdnPools`
  ``spec_tokens``) MambaPool keeps speculative_num_draft_tokens intermediate ssm states and conv windows per
  slot; 0.5.4's ``handle_max_mamba_cache`` counts them (x (1 + draft tokens), also dividing the radix path's
  slots), 0.5.2-0.5.3's profile does not, so they come out of the reserve; the draft worker
  (Qwen3NextForCausalLMMTP) keeps a HybridLinearKVPool of one attention layer (``full_attention_layer_ids`` [0])
  and shares the target's mamba pool.
- Releases after 0.5.3 follow its rules. 0.5.23 (arg_groups/memory_hook.py
  ``handle_gpu_memory_settings``) adds 8 MiB per prefill CUDA graph size to 0.5.3's reserve and changes
  the defaults under 60 GiB (chunked_prefill_size 4096 from 20 GiB, cuda_graph_max_bs 48 under 35 GiB
  at tp < 4): not followed here, said in the result's notes.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from math import prod

from vramlens.allocator import CachingAllocator
from vramlens.errors import ConfigError, EngineRefusal
from vramlens.hardware.gpu import GPU
from vramlens.hardware.runtime import nccl_communicator_bytes
from vramlens.serving.common import (
    CUDA_GRAPH_BYTES,
    ServedModel,
    kv_cell_bytes,
    kv_heads_per_gpu,
    non_torch_bytes,
    parse_version,
    profile_activation_bytes,
    roofline,
    stage_layers,
    stage_weight_bytes,
)
from vramlens.serving.result import Capacity, EngineFigure
from vramlens.serving.speculative import KINDS, SGLANG_ALGORITHMS, Draft, draft_for, draft_problems
from vramlens.units import DTYPE_BYTES, GiB, MiB, ceil_div, round_up

#: The release followed when none is given: the newest whose server_args.py, model_runner.py and tp_worker.py
#: were read (the wheels of 0.3.3, 0.4.2.post1, 0.4.3.post4, 0.4.4.post2, 0.4.5, 0.4.6, 0.4.7, 0.4.8,
#: 0.4.9.post2, 0.5.2 and 0.5.3; server_args.py and utils.py also in 0.3.4-0.3.6, 0.4.0, 0.4.1, 0.4.10, 0.5.1).
DEFAULT_VERSION = "0.5.3"
OLDEST_VERSION = (0, 3, 3)
ACCOUNTING = "SGLang {version} (model_runner.profile_max_num_token)"
ACCOUNTING_SWA = ("SGLang {version}, hybrid SWA pool (model_runner.py set_num_token_hybrid from 0.4.10, "
                  "model_runner_kv_cache_mixin.py set_num_tokens_hybrid_swa at sgl-project/sglang 001ccef)")
#: server_args.py ``swa_full_tokens_ratio``: SWA-layer tokens per full-layer token in the hybrid pool.
DEFAULT_SWA_FULL_TOKENS_RATIO = 0.8
DEFAULT_PAGE_SIZE = 1
ACCOUNTING_GDN = ("SGLang {version}, hybrid mamba pools (model_runner.py profile_max_num_token, "
                  "mem_cache/memory_pool.py MambaPool and HybridLinearKVPool)")
#: The first release with a hybrid (Gated DeltaNet) model, models/qwen3_next.py and the mamba pool
#: (absent from the 0.5.1.post3 wheel, present in 0.5.2's).
HYBRID_GDN_FROM = (0, 5, 2)
#: The first release read with SGLang PR 11214's mamba radix cache, ``--mamba-full-memory-ratio``,
#: configs/mamba_utils.py ``Mamba2CacheParams`` and models/nemotron_h.py (the 0.5.4 wheel; 0.5.3 has none).
MAMBA_RADIX_FROM = (0, 5, 4)
#: The last release whose hybrid pools were read.
HYBRID_GDN_UNTIL = (0, 5, 4)
#: 0.5.4 server_args.py ``mamba_full_memory_ratio``: mamba state memory / full KV cache memory with the radix cache on.
MAMBA_FULL_MEMORY_RATIO = 0.9
#: 0.5.4 model_runner.py ``MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO``: mamba slots per running request with the
#: radix cache on (max_num_reqs = max_mamba_cache_size // 3).
MAMBA_SLOTS_PER_REQUEST_RADIX = 3
#: Mamba2 hybrids with an SGLang model class, and the first release read that serves each: Falcon-H1 from 0.5.3
#: (models/falcon_h1.py; 0.5.3's ``is_hybrid_gdn`` lists FalconH1ForCausalLM, so it takes Qwen3-Next's pools with
#: configs/falcon_h1.py ``hybrid_gdn_params``: conv (conv_dim / tp, K - 1) in bfloat16, temporal (d_state, d_head,
#: heads / tp) in --mamba-ssm-dtype, attention and mamba in every layer), Nemotron-H from 0.5.4; 0.5.4's
#: ``mamba2_config`` (FalconH1Config, NemotronHConfig) disables the radix cache for both.
MAMBA2_ARCHITECTURES = {"FalconH1ForCausalLM": (0, 5, 3), "NemotronHForCausalLM": (0, 5, 4)}
#: model_runner.py ``__init__`` (0.5.2, 0.5.3): max_mamba_cache_size when neither it nor --max-running-requests is given.
DEFAULT_MAX_MAMBA_CACHE_SIZE = 512
#: server_args.py ``--mamba-ssm-dtype`` choices (default "float32") -> bytes of the temporal (recurrent) state.
MAMBA_SSM_DTYPES = {"float32": 4, "bfloat16": 2}
DEFAULT_MAMBA_SSM_DTYPE = "float32"
#: configs/qwen3_next.py ``hybrid_gdn_params``: ``conv_dtype = torch.bfloat16`` whatever the model dtype.
GDN_CONV_STATE_BYTES = DTYPE_BYTES["bf16"]
#: ``--kv-cache-dtype`` choices -> bytes; "auto" is the model dtype.
KV_CACHE_DTYPES = {"auto": 0, "fp8_e4m3": 1, "fp8_e5m2": 1}
#: server_args.py ``__post_init__`` mem_fraction_static by TP degree (largest first), 0.4.0 to 0.4.5,
#: and up to 81,920 MiB in 0.4.6 (by tp) and 0.4.7 (by tp x pp).
DEFAULT_MEM_FRACTION = ((16, 0.79), (8, 0.81), (4, 0.85), (2, 0.87), (1, 0.88))
#: The same table in 0.3.3-0.3.5's server_args.py: 0.83 at tp 8; 0.3.6's: 0.82.
DEFAULT_MEM_FRACTION_033 = ((16, 0.79), (8, 0.83), (4, 0.85), (2, 0.87), (1, 0.88))
DEFAULT_MEM_FRACTION_036 = ((16, 0.79), (8, 0.82), (4, 0.85), (2, 0.87), (1, 0.88))
#: server_args.py ``gpu_mem < 25_000``: nvidia-smi's memory.total, MiB, under which chunked prefill defaults
#: to 2048 (0.3.6 to 0.4.7).
SMALL_GPU_MIB = 25_000
#: The first release vramlens follows each --speculative-algorithm from (server_args.py choices: 0.4.10
#: EAGLE, EAGLE3, NEXTN; 0.5.2 adds STANDALONE; 0.5.3 NGRAM; releases between them not read).
SPECULATIVE_RELEASES = {"EAGLE": (0, 4, 10), "EAGLE3": (0, 4, 10), "NEXTN": (0, 4, 10), "STANDALONE": (0, 5, 2),
                        "NGRAM": (0, 5, 3)}
#: server_args.py ``_handle_speculative_decoding``: max_running_requests when not given (0.4.10, 0.5.2, 0.5.3).
SPECULATIVE_MAX_RUNNING = 48
#: model_runner.py ``init_memory_pool``: the "+ 100" buffer of draft_runner_cache_size.
DRAFT_POOL_BUFFER = 100
#: server_args.py ``speculative_ngram_max_bfs_breadth`` and ``speculative_ngram_max_match_window_size`` (0.5.3).
NGRAM_MAX_BFS_BREADTH, NGRAM_MAX_MATCH_WINDOW = 10, 12
#: The hybrid target whose MTP draft vramlens follows in SGLang (configs/model_config.py 0.5.2-0.5.4: a draft of
#: this architecture becomes Qwen3NextForCausalLMMTP).
QWEN3_NEXT_ARCHITECTURE = "Qwen3NextForCausalLM"
#: Architectures whose EAGLE draft defaults to the model's own MTP layers (0.5.3 ``_handle_speculative_decoding``).
MTP_ARCHITECTURES = ("DeepseekV32ForCausalLM", "DeepseekV3ForCausalLM", "Glm4MoeForCausalLM", "BailingMoeForCausalLM",
                     "BailingMoeV2ForCausalLM")
#: ``auto_choose_speculative_params``: architectures given (3 steps, topk 1, 4 draft tokens), from the release that
#: lists them (0.4.10; 0.5.2 adds gpt-oss; 0.5.3 DeepSeek V3.2 and Bailing); the others (5, 4, 8).
SHORT_TREE_ARCHITECTURES = (
    ((0, 4, 10), ("DeepseekV3ForCausalLM", "DeepseekV2ForCausalLM")),
    ((0, 5, 2), ("DeepseekV3ForCausalLM", "DeepseekV2ForCausalLM", "GptOssForCausalLM")),
    ((0, 5, 3), ("DeepseekV32ForCausalLM", "DeepseekV3ForCausalLM", "DeepseekV2ForCausalLM", "GptOssForCausalLM",
                 "BailingMoeForCausalLM", "BailingMoeV2ForCausalLM")),
)
#: The cuda graph capture batch sizes go up to 160 by default (``cuda_graph_max_bs``).
DEFAULT_MAX_RUNNING_FLOOR, DEFAULT_MAX_RUNNING_CEIL, RUNNING_PER_CONTEXT = 2048, 4096, 512


#: The first release read whose ReqToTokenPool has max_num_reqs rows (``size=max_num_reqs``), not max_num_reqs + 1.
REQ_POOL_EXACT_FROM = (0, 4, 8)


#: SGLang keeps the rotary cos/sin cache in fp32 where ``torch.version.cuda`` is set (layers/rotary_embedding.py
#: ``RotaryEmbedding.__init__``, "cache needs to be in FP32 for numerical stability": the cast to the model
#: dtype runs only ``if not _is_cuda_available``, read in the 0.4.2.post1, 0.4.3.post4, 0.4.4.post2 and
#: 0.4.9.post2 wheels); ROCm builds cast it (and 0.3.3 used vLLM's get_rope, which casts it too).
ROPE_CACHE_CUDA_BYTES = DTYPE_BYTES["fp32"]
#: layers/vocab_parallel_embedding.py ``DEFAULT_VOCAB_PADDING_SIZE``: the vocabulary is padded to a multiple
#: of 64 before it is split over the TP ranks (0.4.3.post4).
VOCAB_PADDING = 64


@dataclass(frozen=True, slots=True)
class LoadBytes:
    """What SGLang's "Load weight end ... mem usage" measures on one rank, bytes, by part."""

    params: int
    rope_cache: int
    segments: int
    note: str

    @property
    def total(self) -> int:
        return self.params + self.rope_cache + self.segments


def load_bytes(m: ServedModel, gpu: GPU, tp: int, pp: int) -> LoadBytes:
    """The load's drop in free memory on the busiest rank.

    SGLang measures it with ``torch.cuda.mem_get_info`` after ``torch.cuda.empty_cache()``
    (utils.py ``get_available_gpu_memory``, model_runner.py ``load_model``), so it is the caching
    allocator's reserved segments, not the tensors' bytes: the parameters (vramlens' inventory,
    stage_weight_bytes), the rotary cache (fp32 on CUDA: ROPE_CACHE_CUDA_BYTES; the model dtype on an
    AMD GPU) and what the allocator's segment sizes add around them, :func:`param_segment_bytes`.
    """
    params = stage_weight_bytes(m, tp, pp)
    cuda = gpu.vendor != "amd"  # a GPU given by its size ("generic") is taken as a CUDA one, SGLang's usual
    rope = m.rope_values * (ROPE_CACHE_CUDA_BYTES if cuda else DTYPE_BYTES[m.dtype])
    seg = param_segment_bytes(m, tp, pp, fp32_rope=cuda)
    if seg is None:
        return LoadBytes(params, rope, 0, f"load = parameters {params:,} + rotary cache {rope:,} B (the allocator's "
                         "segment rounding is modelled for dense models at the model dtype only)")
    return LoadBytes(params, rope, seg, f"load = parameters {params:,} + rotary cache {rope:,} + the caching "
                     f"allocator's segment rounding of SGLang's parameters {seg:,} B (param_segment_bytes)")


def param_segment_bytes(m: ServedModel, tp: int, pp: int, *, fp32_rope: bool = True) -> int | None:
    """Bytes the CUDA caching allocator reserves beyond the requests for SGLang's parameters on one rank.

    SGLang allocates the parameters one by one while it builds the model under ``torch.device("cuda")``
    (model_loader/loader.py ``_initialize_model``), in the order the modules are made (models/llama.py
    and qwen2.py, 0.4.3.post4): the embedding (VocabParallelEmbedding: vocabulary padded to 64, split
    over tp), then each layer's fused ``qkv_proj`` ((a/tp + 2 n_kv/tp) d x h), ``o_proj`` (h x a d/tp),
    the rotary cache (first layer only: ``_compute_cos_sin_cache`` makes freqs, cos and sin of
    max_position x rotary_dim / 2 fp32 values, keeps their concatenation and frees them), the fused
    ``gate_up_proj`` (2 f/tp x h), ``down_proj`` (h x f/tp) and two norms (h); the final norm; the
    lm_head unless tied (at pp > 1 the first stage: the embedding and its layers). Replayed through
    vramlens' port of CUDACachingAllocator.cpp (:class:`vramlens.allocator.CachingAllocator`: requests
    of 10 MiB and more get their own segment rounded up to 2 MiB, those of 1-10 MiB share 20 MiB ones,
    smaller ones 2 MiB ones; a remainder over 1 MiB is split off and may serve a later request), then
    ``empty_cache``: reserved - requested. Biases (Qwen2's qkv bias: small-pool requests) are left out.
    None where the layout is not that one (MoE, multi-head latent attention, quantized weights).
    """
    if m.n_experts or m.kv_latent or m.weights_format != m.dtype:
        return None
    b = DTYPE_BYTES[m.dtype]
    h, d = m.hidden, m.head_dim
    kv = kv_heads_per_gpu(m, tp)
    f = ceil_div(m.ffn, tp)
    vocab = ceil_div(round_up(m.vocab, VOCAB_PADDING), tp)
    layer = ((m.n_heads // tp + 2 * kv) * d * h * b, h * (m.n_heads // tp) * d * b)
    mlp = (2 * f * h * b, h * f * b, h * b, h * b)
    tied = m.head_bytes < m.vocab * h * b
    rope_b = ROPE_CACHE_CUDA_BYTES if fp32_rope else b
    a = CachingAllocator()
    requested = 0

    def alloc(size: int) -> None:
        nonlocal requested
        a.malloc(size, 0)
        requested += size

    alloc(vocab * h * b)
    for i in range(stage_layers(m, pp)):
        for size in layer:
            alloc(size)
        if i == 0 and m.rotary_dim:
            half = m.rope_values // 2 * DTYPE_BYTES["fp32"]  # freqs, cos, sin: torch.float
            temps = [a.malloc(half, 0) for _ in range(3)]
            alloc(m.rope_values * rope_b)
            for t in temps:
                if t is not None:
                    a.free(t)
        for size in mlp:
            alloc(size)
    alloc(h * b)
    if not tied and pp == 1:
        alloc(vocab * h * b)
    a.release_cached_blocks()
    return a.reserved - requested


def parse_sglang_version(version: str) -> tuple[tuple[int, int, int], tuple[str, ...]]:
    """The release to follow and a note when it is later than the newest read.

    Raises:
        ConfigError: not a release number, or one before 0.3.3.
    """
    parsed = parse_version(version) if isinstance(version, str) else None
    if parsed is None or parsed < OLDEST_VERSION:
        raise ConfigError(f"version={version!r} is not an SGLang release vramlens follows: give 0.3.3 or later, "
                          f"e.g. version='{DEFAULT_VERSION}' (--sglang-version {DEFAULT_VERSION})")
    newest = parse_version(DEFAULT_VERSION)
    assert newest is not None
    if parsed > newest:
        # no later release's defaults are followed: 0.5.23's memory_hook.py adds its prefill CUDA graphs
        # (see the module docstring)
        return parsed, (f"SGLang {version} is later than the newest release whose code vramlens follows "
                        f"({DEFAULT_VERSION}): its defaults and profile_max_num_token are used (0.5.23 sizes the "
                        "default mem_fraction_static from more CUDA graphs: pass --mem-fraction-static "
                        "and --chunked-prefill-size from the log)",)
    return parsed, ()


def _by_tp(table: tuple[tuple[int, float], ...], n: int) -> float:
    return next(f for min_tp, f in table if n >= min_tp)


def default_mem_fraction(version: tuple[int, int, int], gpu_mem: float, tp: int, pp: int = 1,
                         cuda: bool = True, chunked_prefill_size: int | None = None,
                         speculative: str | None = None) -> float:
    """server_args.py ``__post_init__`` (``_handle_gpu_memory_settings`` from 0.4.8): the default
    mem_fraction_static of ``version`` on a GPU of ``gpu_mem`` MiB (nvidia-smi's memory.total), with no
    speculative decoding, DP attention or multimodal model (each of which changes it). From 0.5.3 it
    reads the chunked prefill size (``chunked_prefill_size``, default :func:`default_chunked_prefill_size`)
    and the CUDA graph max batch size. ``speculative`` (an algorithm of SPECULATIVE_RELEASES, 0.4.10 on)
    adds :func:`speculative_reserve_mib` to the reserve."""
    if version < (0, 3, 6):  # 0.3.3-0.3.5
        return _by_tp(DEFAULT_MEM_FRACTION_033, tp)
    if version < (0, 4, 0):  # 0.3.6
        return _by_tp(DEFAULT_MEM_FRACTION_036, tp)
    if version < (0, 4, 6):  # 0.4.0 - 0.4.5
        return _by_tp(DEFAULT_MEM_FRACTION, tp)
    if version < (0, 4, 7):  # 0.4.6: "FIXME: more fine grained auto-selection polices"
        return _by_tp(DEFAULT_MEM_FRACTION, tp) if gpu_mem <= 81920 else (gpu_mem - 1024 * 13) / gpu_mem
    if version < (0, 4, 8):  # 0.4.7
        f = _by_tp(DEFAULT_MEM_FRACTION, tp * pp) if gpu_mem <= 81920 else 0.88
        if gpu_mem > 180 * 1000 and cuda:
            return 0.79
        if gpu_mem > 96 * 1024:
            # "15 GB + additional 3GB for cuda graph"
            return min(f + 48 * 1024 * (1 - f) / gpu_mem, (gpu_mem - 1024 * 18) / gpu_mem)
        return f
    n = tp * pp
    if version < (0, 5, 3):
        # 0.4.8 to 0.5.2: "GPU memory capacity = model weights + KV cache pool + activations + cuda graph buffers"
        if gpu_mem < 35 * 1024:  # "T4, 4080" under 20 GiB and "A10, L40, 4090, 5090" under 35: the same reserve
            reserved = (2.8 + n / 10) * 1024
        elif gpu_mem < 90 * 1024:  # "H100, A100"
            reserved = (9.5 + n / 2) * 1024
        elif gpu_mem < 160 * 1024:  # "H20", "H200"
            reserved = (12 + n / 2) * 1024
        else:  # "B200, MI300"
            reserved = 32 * 1024
        reserved += speculative_reserve_mib(version, speculative)
        return round((gpu_mem - reserved) / gpu_mem, 3)
    # 0.5.3: "reserved_mem = chunked_prefill_size * 1.5 + cuda_graph_max_bs * 2", in MiB, plus 512 and tp x pp / 8
    # GiB, at least 10 GiB over 60 GiB
    cps = chunked_prefill_size or default_chunked_prefill_size(version, gpu_mem)
    reserved = 512 + max(cps, 2048) * 1.5 + cuda_graph_max_bs(gpu_mem, tp) * 2 + n / 8 * 1024
    if gpu_mem > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    reserved += speculative_reserve_mib(version, speculative)
    return round((gpu_mem - reserved) / gpu_mem, 3)


def speculative_reserve_mib(version: tuple[int, int, int], algorithm: str | None) -> int:
    """MiB server_args.py adds to the default reserve for speculative decoding: 0.4.10 "draft model and
    larger cuda graph buffers" 2 GiB for any algorithm; 0.5.2 6 GiB for STANDALONE ("the draft model is
    typically larger"), 2 GiB for the others; 0.5.3 the same, none for NGRAM."""
    if algorithm is None or (algorithm == "NGRAM" and version >= (0, 5, 3)):
        return 0
    return 6 * 1024 if algorithm == "STANDALONE" else 2 * 1024


def cuda_graph_max_bs(gpu_mem: float, tp: int) -> int:
    """0.5.3 server_args.py ``_handle_gpu_memory_settings``: the default CUDA graph max batch size."""
    if gpu_mem < 20 * 1024:
        return 8
    if gpu_mem < 35 * 1024:
        return 16 if tp < 4 else 80
    if gpu_mem < 60 * 1024:
        return 32 if tp < 4 else 160
    if gpu_mem < 160 * 1024:
        return 256 if tp < 4 else 512
    return 512


def default_chunked_prefill_size(version: tuple[int, int, int], gpu_mem: float) -> int:
    """server_args.py's default chunked_prefill_size of ``version`` on a GPU of ``gpu_mem`` MiB."""
    if version < (0, 3, 6):  # 0.3.3-0.3.5: the dataclass default
        return 8192
    if version < (0, 4, 8):  # 0.3.6 ("make it 2048") to 0.4.7 (which adds 16,384 over 180,000 MiB)
        if version >= (0, 4, 7) and gpu_mem > 180_000:
            return 16384
        return 2048 if gpu_mem < SMALL_GPU_MIB else 8192
    if gpu_mem < 35 * 1024:  # 0.4.8 to 0.5.3: "A10, L40, 4090"
        return 2048
    if version >= (0, 5, 3) and gpu_mem < 60 * 1024:  # 0.5.3: "A100 (40GB), L40"
        return 4096
    return 8192 if gpu_mem < 160 * 1024 else 16384


def hybrid_pool(m: ServedModel, version: tuple[int, int, int]) -> bool:
    """Whether ``version`` splits ``m``'s KV pool into full and sliding layers (ServedModel.hybrid_swa).

    Up to 0.4.9.post2 nothing is split by default (Llama 4's chunked layers only with
    --hybrid-kvcache-ratio, default None: model_config.py ``is_hybrid_model``); 0.5.0 to 0.5.3 neither
    (server_args.py sets ``disable_hybrid_swa_memory`` for gpt-oss, see the module docstring); 0.4.10.x
    split a model with a sliding window unless it is a Llama 4 (model_runner.py "Check if the model is using hybrid
    SWA": ``not any("Llama4" in arch ...)``), by ``set_num_token_hybrid``'s total_tokens / (r n_swa + n_full),
    the split of :func:`hybrid_swa_tokens`; later releases list Llama4ForConditionalGeneration in
    ``is_hybrid_swa_model`` (0.5.23's configs/model_config.py; the split read at 001ccef).
    """
    if not m.hybrid_swa or version < (0, 4, 10) or (0, 5, 0) <= version <= (0, 5, 3):
        return False  # 0.5.0rc2-0.5.3: disable_hybrid_swa_memory for GptOssForCausalLM (server_args.py)
    return not (m.chunked_local and version <= (0, 5, 3))


@dataclass(frozen=True, slots=True)
class GdnPools:
    """SGLang's pools for a hybrid Gated DeltaNet model on one rank (see the module docstring)."""

    #: max_mamba_cache_size after model_runner.py's defaulting (what profile_max_num_token takes out); 0 when
    #: the radix cache is on (0.5.4 Gated DeltaNet): sized from the memory by mamba_full_memory_ratio
    cache_size: int
    #: 0.5.4 keeps the radix cache for Gated DeltaNet models: max_mamba_cache_size from mamba_full_memory_ratio,
    #: 3 slots per running request
    radix: bool
    #: 0.5.4: MambaPool has max_mamba_cache_size + 1 slots (HybridReqToTokenPool mamba_size); 0.5.2-0.5.3:
    #: max_num_reqs + 1
    pool_from_cache_size: bool
    #: mamba_cache_per_req: the conv and temporal state of one request over every linear layer, bytes
    per_req: int
    conv_per_req: int
    ssm_per_req: int
    ssm_dtype: str
    n_linear: int
    n_full: int
    #: --speculative-num-draft-tokens D with a speculative algorithm: MambaPool keeps, per slot, D intermediate
    #: ssm states and D conv windows of the state's shapes (mem_cache/memory_pool.py, 0.5.2-0.5.4), i.e.
    #: D x mamba_cache_per_req more; 0.5.4's handle_max_mamba_cache counts them ("(1 + speculativa_ratio)"),
    #: 0.5.2-0.5.3's profile_max_num_token does not (they come out of the (1 - mem_fraction_static) share)
    spec_tokens: int = 0

    @property
    def counted_per_req(self) -> int:
        """What profile_max_num_token takes out per max_mamba_cache_size slot."""
        return self.per_req * (1 + self.spec_tokens if self.pool_from_cache_size else 1)


def gdn_pools(m: ServedModel, release: tuple[int, int, int], *, tp: int, pp: int, speculative: bool,
              max_running_requests: int | None, max_mamba_cache_size: int | None,
              mamba_ssm_dtype: str) -> tuple[GdnPools | None, list[str]]:
    """The hybrid mamba pools of ``m`` in ``release`` (None for a model without recurrent state), or the
    problems that keep vramlens from following them, each in one line.

    configs/qwen3_next.py ``hybrid_gdn_params`` / ``mamba_cache_per_req`` (0.5.2, 0.5.3), configs/mamba_utils.py
    ``Mamba2CacheParams`` (0.5.4): per state layer conv (conv_dim / tp, K - 1) x 2 B (bfloat16) + temporal
    (heads / tp, head_dim, state) x the --mamba-ssm-dtype bytes; model_runner.py: max_mamba_cache_size =
    --max-mamba-cache-size, else --max-running-requests, else 512 (divided by dp_size under DP attention, not
    modelled), or with 0.5.4's radix cache (Gated DeltaNet) sized later from the memory (``cache_size`` 0 here).
    """
    h = m.hybrid
    bad_dtype = ([f"mamba_ssm_dtype={mamba_ssm_dtype!r} is not one of {', '.join(MAMBA_SSM_DTYPES)} "
                  "(SGLang --mamba-ssm-dtype)"] if mamba_ssm_dtype not in MAMBA_SSM_DTYPES else [])
    if h is None:
        return None, bad_dtype  # server_args.py's choices apply whatever the model
    v = ".".join(map(str, release))
    what = f"{m.name} is a hybrid model ({h.n_attention} attention and {h.n_state} {h.mixer} blocks)"
    first = MAMBA2_ARCHITECTURES.get(m.architecture or "") if h.mixer == "mamba2" else None
    if h.mixer != "gated_deltanet" and not (first and release >= first):
        if first:
            name = "Falcon-H1" if m.architecture == "FalconH1ForCausalLM" else "Nemotron-H"
            f = ".".join(map(str, first))
            served, fix = f"SGLang serves {name} from {f} (models/{name.lower().replace('-', '_')}.py)", (
                f"pass --sglang-version {f} or later")
        else:
            served = ("SGLang up to 0.5.4 keeps a recurrent state for Qwen3-Next's Gated DeltaNet, from 0.5.3 for "
                      "Falcon-H1 and from 0.5.4 for Nemotron-H only")
            fix = (f"it has no model class for {m.architecture or 'this ' + h.mixer + ' hybrid'} in the releases "
                   "read: use --engine vllm")
        return None, [f"{what}: {served}; {fix}"]
    if release < HYBRID_GDN_FROM:
        return None, [f"{what}: SGLang {v} has no hybrid Gated DeltaNet model (models/qwen3_next.py and the mamba "
                      "pool arrive in 0.5.2): pass --sglang-version 0.5.2 or later"]
    if release > HYBRID_GDN_UNTIL:
        return None, [f"{what}: vramlens follows SGLang's hybrid pools as 0.5.2 to 0.5.4 size them; {v} is not "
                      "read for hybrids: pass --sglang-version 0.5.4"]
    p = []
    if h.n_state == 0:  # Qwen3-Next with full_attention_interval=1: per_req / n_linear divided by zero
        p.append(f"{what}: vramlens follows SGLang's hybrid pools for a model with at least one recurrent layer "
                 "(a config with none is no released model): check layer_types / full_attention_interval, or use "
                 "--engine vllm")
    if pp > 1:
        p.append(f"pp={pp}: pipeline parallelism of a hybrid model is not modelled for SGLang (HybridLinearKVPool "
                 "takes every full-attention layer): use --tp")
    if speculative and h.mixer != "gated_deltanet":
        p.append(f"speculative decoding on a {h.mixer} hybrid is not modelled for SGLang (read for Qwen3-Next's "
                 "Gated DeltaNet with its MTP layers only): drop --speculative-algorithm")
    bad = h.tp_problem(tp)
    if bad:
        p.append(f"{bad} (SGLang's hybrid_gdn_params, Mamba2StateShape.create from 0.5.4, divides them over the "
                 "ranks): choose another --tp")
    p += bad_dtype
    if p:
        return None, p
    conv, ssm = h.shapes(tp)
    conv_b, ssm_b = prod(conv) * GDN_CONV_STATE_BYTES, prod(ssm) * MAMBA_SSM_DTYPES[mamba_ssm_dtype]
    # 0.5.4 model_runner.py: a mamba2_config model (Nemotron-H) disables the radix cache ("model detected,
    # disable radix cache"); Qwen3-Next keeps it (server_args.py disable_radix_cache False)
    radix = release >= MAMBA_RADIX_FROM and h.mixer == "gated_deltanet"
    size = 0 if radix else max_mamba_cache_size or max_running_requests or DEFAULT_MAX_MAMBA_CACHE_SIZE
    return GdnPools(cache_size=size, radix=radix, pool_from_cache_size=release >= MAMBA_RADIX_FROM,
                    per_req=(conv_b + ssm_b) * h.n_state, conv_per_req=conv_b * h.n_state,
                    ssm_per_req=ssm_b * h.n_state, ssm_dtype=mamba_ssm_dtype, n_linear=h.n_state,
                    n_full=h.n_attention), []


def late_communicator_bytes(version: tuple[int, int, int], gpu: GPU, tp: int) -> int:
    """Bytes torch's NCCL communicator of the default group takes out of the KV pool on each rank.

    SGLang 0.3.3 to 0.4.6 all-reduce the free memory they have just read over the default process group
    (utils.py ``get_available_gpu_memory(distributed=tp_size > 1)``: a CUDA tensor and no group), the first
    collective on it, so its communicator (world = the tp ranks) is created after total_gpu_memory is read
    and after the load's "avail mem", and comes out of the pool; 0.4.7 passes
    ``cpu_group=get_world_group().cpu_group`` (gloo, a CPU tensor). vramlens' NCCL model of the channels'
    buffers, without NVLS ones: a 4-byte all-reduce connects none (as for vLLM 0.19's torch communicator,
    serving/vllm_nontorch.py).
    """
    if version >= (0, 4, 7) or tp <= 1:
        return 0
    return nccl_communicator_bytes(gpu, tp, nvls=False)


def sglang_capacity(m: ServedModel, gpu: GPU, *, gpus: int, tp: int, pp: int, context: int | None,
                    mem_fraction_static: float | None = None, chunked_prefill_size: int | None = None,
                    max_running_requests: int | None = None, context_length: int | None = None,
                    kv_cache_dtype: str = "auto", swa_full_tokens_ratio: float = DEFAULT_SWA_FULL_TOKENS_RATIO,
                    page_size: int = DEFAULT_PAGE_SIZE, version: str = DEFAULT_VERSION,
                    speculative_algorithm: str | None = None, draft: ServedModel | None = None,
                    speculative_num_steps: int | None = None, speculative_eagle_topk: int | None = None,
                    speculative_num_draft_tokens: int | None = None, max_mamba_cache_size: int | None = None,
                    mamba_ssm_dtype: str = DEFAULT_MAMBA_SSM_DTYPE) -> Capacity:
    """SGLang's start-up memory arithmetic for ``m`` on ``gpu`` (see the module docstring), as ``version``
    does it (0.3.3 or later; a later release than DEFAULT_VERSION follows DEFAULT_VERSION, with a note).

    Speculative decoding: ``speculative_algorithm`` and the three ``speculative_*`` sizes as SGLang takes
    them, ``draft`` the inventory of --speculative-draft-model-path (see :func:`sglang_speculative`).

    A hybrid model (Qwen3-Next from 0.5.2, Nemotron-H in 0.5.4) gets the mamba pool of ``max_mamba_cache_size``
    slots (default --max-running-requests, else 512; 0.5.4's Qwen3-Next: from the memory by
    mamba_full_memory_ratio) with its temporal state in ``mamba_ssm_dtype`` ("float32" or "bfloat16"), see
    :func:`gdn_pools`.

    Raises:
        ConfigError: settings SGLang refuses, a version before 0.3.3, or a hybrid model or setting vramlens
            does not follow for SGLang (:func:`gdn_pools`).
        EngineRefusal: no memory left for the KV pool, or for the draft worker.
    """
    release, later = parse_sglang_version(version)
    gdn, hybrid_problems = gdn_pools(m, release, tp=tp, pp=pp, speculative=speculative_algorithm is not None,
                                     max_running_requests=max_running_requests,
                                     max_mamba_cache_size=max_mamba_cache_size, mamba_ssm_dtype=mamba_ssm_dtype)
    if hybrid_problems:
        raise ConfigError(hybrid_problems)
    spec = (sglang_speculative(m, draft, release, algorithm=speculative_algorithm, steps=speculative_num_steps,
                               topk=speculative_eagle_topk, draft_tokens=speculative_num_draft_tokens,
                               page_size=page_size) if speculative_algorithm is not None else None)
    if spec is not None and max_running_requests is None:
        max_running_requests = SPECULATIVE_MAX_RUNNING  # server_args.py _handle_speculative_decoding
    if gdn is not None and spec is not None:
        # model_runner.py reads max_running_requests after server_args set it to 48; MambaPool gets
        # speculative_num_draft_tokens (HybridReqToTokenPool, 0.5.2-0.5.4)
        gdn, _ = gdn_pools(m, release, tp=tp, pp=pp, speculative=True, max_running_requests=max_running_requests,
                           max_mamba_cache_size=max_mamba_cache_size, mamba_ssm_dtype=mamba_ssm_dtype)
        assert gdn is not None
        gdn = replace(gdn, spec_tokens=spec.draft_tokens)
    ctx_len = context_length or m.max_position
    # total_gpu_memory is read with torch.cuda.mem_get_info: CUDA's device total less the context (GPU.capacity_bytes;
    # nvidia-smi's total where the catalog has no CUDA total, GPU.capacity_note)
    total = gpu.capacity_bytes
    gpu_mem = gpu.nvidia_smi_bytes / MiB  # get_device_memory_capacity: nvidia-smi's memory.total, MiB
    cps = chunked_prefill_size or default_chunked_prefill_size(release, gpu_mem)
    mfs = (default_mem_fraction(release, gpu_mem, tp, pp, cuda=gpu.vendor != "amd", chunked_prefill_size=cps,
                                speculative=speculative_algorithm if spec is not None else None)
           if mem_fraction_static is None else mem_fraction_static)
    p = []
    if not 0 < mfs < 1:
        p.append(f"mem_fraction_static={mfs} must be between 0 and 1 (SGLang keeps 1 - mem_fraction_static for "
                 "activations and CUDA graphs): pass e.g. --mem-fraction-static 0.88")
    if ctx_len > m.max_position and not m.rope_scaled:
        p.append(f"User-specified context_length ({ctx_len}) is greater than the derived context_length "
                 f"({m.max_position}). This may lead to incorrect model outputs or CUDA errors (SGLang refuses it "
                 "unless SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1)")
    if m.n_heads % tp:
        p.append(f"tp_size={tp} must divide the {m.n_heads} attention heads of {m.name} (SGLang asserts "
                 "num_attention_heads % tp_size == 0)")
    if pp > m.n_layers:
        p.append(f"pp_size={pp} exceeds the {m.n_layers} layers of {m.name}")
    if not 0 < swa_full_tokens_ratio <= 1:
        p.append(f"swa_full_tokens_ratio={swa_full_tokens_ratio} must be in (0, 1] (SWA-layer tokens per "
                 "full-layer token of SGLang's hybrid pool)")
    if kv_cache_dtype not in KV_CACHE_DTYPES:
        p.append(f"kv_cache_dtype={kv_cache_dtype!r} is not one of {', '.join(KV_CACHE_DTYPES)} (SGLang server_args)")
    if spec is not None and (pp > 1 or hybrid_pool(m, release)):
        p.append("speculative decoding is modelled for one pipeline stage and one KV pool only: "
                 f"{m.name} at pp={pp}" + (" has a hybrid SWA pool" if hybrid_pool(m, release) else ""))
    if p:
        raise ConfigError(p)
    b = DTYPE_BYTES[m.dtype]
    kv_b = KV_CACHE_DTYPES[kv_cache_dtype] or b
    outside, outside_why = non_torch_bytes(gpu, tp, pp)
    total_free = total - outside  # total_gpu_memory as SGLang measures it
    # "Load weight end. ... mem usage=X GB": the parameters, the rotary cos/sin cache and the
    # caching allocator's segments around them (load_bytes)
    load = load_bytes(m, gpu, tp, pp)
    weights = load.total
    # 0.3.3-0.4.6 at tp > 1: torch's NCCL communicator of the default group, made after the figure was read
    late = late_communicator_bytes(release, gpu, tp)
    rest = int(total_free * mfs) - weights - late
    if gdn is not None and gdn.radix and rest > 0:
        # 0.5.4 handle_max_mamba_cache with the radix cache on: mamba memory / KV memory = mamba_full_memory_ratio,
        # max_mamba_cache_size = int(rest x r / (1 + r) // mamba_cache_per_req) (--max-mamba-cache-size ignored)
        # // (1 + speculative_num_draft_tokens) with a speculative algorithm
        gdn = replace(gdn, cache_size=int(rest * MAMBA_FULL_MEMORY_RATIO / (1 + MAMBA_FULL_MEMORY_RATIO)
                                          // gdn.per_req // (1 + gdn.spec_tokens)))
    if gdn is not None:  # profile_max_num_token: rest_memory -= max_mamba_cache_size x mamba_cache_per_req
        rest -= gdn.cache_size * gdn.counted_per_req
    kv_heads = kv_heads_per_gpu(m, tp)
    layers = stage_layers(m, pp)
    # is_hybrid_gdn: num_layers = len(full_attention_layer_ids)
    cell_layers = gdn.n_full if gdn is not None else layers
    cell = kv_cell_bytes(m, tp, kv_b) * cell_layers
    if rest <= 0 or rest // cell <= 0:
        raise EngineRefusal(
            "Not enough memory. Please try to increase --mem-fraction-static. (SGLang: "
            f"{mfs} x {total_free / GiB:.2f} GiB free = {total_free * mfs / GiB:.2f} GiB does not cover the "
            f"weights {weights / GiB:.2f} GiB" + (f" and NCCL's {late / MiB:,.0f} MiB" if late else "")
            + (f" and the mamba pool's {gdn.cache_size:,} x {gdn.counted_per_req / MiB:,.2f} MiB" if gdn is not None else "")
            + ")")
    tokens = profiled = rest // cell // page_size * page_size
    headroom = 0
    d: Draft | None = None
    if spec is not None:
        d = draft_for(spec.kind, m, draft, tp=tp, kv_b=kv_b)
        if spec.kind != "ngram":
            # init_memory_pool: draft_runner_cache_size, the target's pool too ("both verify and draft tokens
            # can be concurrently allocated, so we should give a headroom for it")
            assert max_running_requests is not None
            headroom = (max_running_requests * spec.steps * spec.topk + max_running_requests * spec.draft_tokens
                        + DRAFT_POOL_BUFFER)
            tokens = (rest // cell + headroom) // page_size * page_size
    swa = (hybrid_swa_tokens(m, tokens, cell // layers, pp=pp, ratio=swa_full_tokens_ratio, page_size=page_size)
           if hybrid_pool(m, release) else None)
    if swa is not None:
        tokens, swa_tokens = swa
        # one request keeps its last sliding_window tokens in every sliding layer: a pool smaller than
        # that serves none (a ratio such as 1e-300 rounded it to 0 tokens while the full layers had room)
        need = min(m.sliding_window or ctx_len, context or ctx_len)
        if swa_tokens < need:
            raise ConfigError([f"swa_full_tokens_ratio={swa_full_tokens_ratio} leaves the sliding layers "
                               f"{swa_tokens:,} tokens, less than one request's window of {need:,} tokens: raise "
                               f"--swa-full-tokens-ratio (SGLang's default {DEFAULT_SWA_FULL_TOKENS_RATIO})"])
    max_num_reqs = max_running_requests or min(max(int(tokens / ctx_len * RUNNING_PER_CONTEXT),
                                                   DEFAULT_MAX_RUNNING_FLOOR), DEFAULT_MAX_RUNNING_CEIL)
    if gdn is not None:  # init_memory_pool: min(max_num_reqs, max_mamba_cache_size // (3 with the radix cache, else 1))
        max_num_reqs = max(1, min(max_num_reqs, gdn.cache_size // (MAMBA_SLOTS_PER_REQUEST_RADIX if gdn.radix else 1)))
    # tp_worker.py: min(max_total_num_tokens // 2, ReqToTokenPool size) unless given; the pool has max_num_reqs + 1
    # rows up to 0.4.3.post4, max_num_reqs from 0.4.8 (model_runner.py init_memory_pool)
    pool_rows = max_num_reqs + (1 if release < REQ_POOL_EXACT_FROM else 0)
    max_running = min(max_running_requests, pool_rows) if max_running_requests else max(1, min(tokens // 2, pool_rows))
    extra_len = 4 + (spec.draft_tokens if spec is not None else 0)  # init_memory_pool extra_max_context_len
    req_to_token = pool_rows * (ctx_len + extra_len) * 4  # ReqToTokenPool: int32 indices
    ctx = context or ctx_len
    conc = tokens / ctx
    # HybridReqToTokenPool: a MambaPool of max_num_reqs + 1 slots (one spare) per linear layer; each running
    # request holds one slot, so no more than max_num_reqs requests run whatever the KV pool holds
    mamba_slots = ((gdn.cache_size if gdn.pool_from_cache_size else max_num_reqs) + 1) if gdn is not None else 0
    mamba_bytes = mamba_slots * gdn.per_req * (1 + gdn.spec_tokens) if gdn is not None else 0
    # 0.5.2-0.5.3: the intermediate caches are allocated beyond what the profile took out
    uncounted = mamba_slots * gdn.per_req * gdn.spec_tokens if gdn is not None and not gdn.pool_from_cache_size else 0
    if gdn is not None:
        conc = min(conc, max_num_reqs)
    running = max(1, min(int(conc), max_running))
    act = profile_activation_bytes(m, cps, min(cps, max_running), tp, b)
    reserve = total_free - int(total_free * mfs)
    speed = roofline(m, gpu, weights_per_gpu=weights, kv_per_token_per_gpu=cell, running=running, context=ctx,
                     tp=tp, pp=pp, compute_dtype=m.dtype)
    if swa is not None:
        n_swa = min(layers, ceil_div(m.n_sliding, pp))
        per_layer = cell // layers
        kv_bytes = tokens * per_layer * (layers - n_swa) + swa_tokens * per_layer * n_swa
    else:
        kv_bytes = tokens * cell
    # the draft worker (loaded after the target's pool): its weights and its own token_to_kv_pool of the
    # same max_total_num_tokens, out of the (1 - mem_fraction_static) share
    draft_kv = tokens * d.kv_cell * d.kv_layers if d is not None else 0
    draft_w = d.weights_bytes if d is not None else 0
    spec_bytes = draft_w + draft_kv + (tokens - profiled) * cell + uncounted
    if spec is not None and spec_bytes > reserve:
        raise EngineRefusal(
            f"CUDA out of memory: the draft worker does not fit (SGLang {version}, {spec.algorithm}: draft weights "
            f"{draft_w / GiB:.2f} GiB + its KV pool {draft_kv / GiB:.2f} GiB + the target pool's speculative headroom "
            f"{(tokens - profiled) * cell / GiB:.2f} GiB"
            + (f" + the mamba pool's intermediate caches {uncounted / GiB:.2f} GiB" if uncounted else "")
            + f" > the {reserve / GiB:.2f} GiB left by mem_fraction_static={mfs}): lower --mem-fraction-static")
    spec_figures = (
        EngineFigure("speculative_num_steps", "speculative_num_steps", spec.steps),
        EngineFigure("speculative_eagle_topk", "speculative_eagle_topk", spec.topk),
        EngineFigure("speculative_num_draft_tokens", "speculative_num_draft_tokens", spec.draft_tokens),
        EngineFigure("draft_kv_size", "draft worker KV Cache K + V size (GB = GiB)", round(draft_kv / GiB, 2)),
    ) if spec is not None else ()
    figures = (
        EngineFigure("max_total_num_tokens", "max_total_num_tokens", tokens),
        # MLATokenToKVPool logs one "KV size" (the latent buffers): reported as K, with V 0
        EngineFigure("k_size", "KV Cache is allocated. K size (GB = GiB)",
                     round((kv_bytes if m.kv_latent else kv_bytes / 2) / GiB, 2)),
        EngineFigure("v_size", "V size (GB = GiB)", round((0 if m.kv_latent else kv_bytes / 2) / GiB, 2)),
        *((EngineFigure("max_mamba_cache_size", "max_mamba_cache_size", gdn.cache_size),
           EngineFigure("mamba_conv_state_size", "Mamba Cache is allocated. conv_state size (GB = GiB)",
                        round(mamba_slots * gdn.conv_per_req / GiB, 2)),
           EngineFigure("mamba_ssm_state_size", "ssm_state size (GB = GiB)",
                        round(mamba_slots * gdn.ssm_per_req / GiB, 2))) if gdn is not None else ()),
        *((EngineFigure("mamba_intermediate_ssm_size", "intermediate_ssm_state_cache size (GB = GiB)",
                        round(mamba_slots * gdn.spec_tokens * gdn.ssm_per_req / GiB, 2)),
           EngineFigure("mamba_intermediate_conv_size", "intermediate_conv_window_cache size (GB = GiB)",
                        round(mamba_slots * gdn.spec_tokens * gdn.conv_per_req / GiB, 2)))
          if gdn is not None and gdn.spec_tokens else ()),
        *((EngineFigure("full_layer_tokens", "Use sliding window memory pool. full_layer_tokens", tokens),
           EngineFigure("swa_layer_tokens", "swa_layer_tokens", swa_tokens)) if swa is not None else ()),
        EngineFigure("max_running_requests", "max_running_requests", max_running),
        EngineFigure("chunked_prefill_size", "chunked_prefill_size", cps),
        EngineFigure("context_len", "context_len", ctx_len),
        EngineFigure("mem_fraction_static", "mem_fraction_static", mfs),
        *spec_figures,
    )
    notes = later + (
        f"max_total_num_tokens = ({mfs} x {total_free:,} free - weights {weights:,}"
        + (f" - NCCL {late:,}" if late else "")
        + (f" - mamba {gdn.cache_size:,} x {gdn.counted_per_req:,}" if gdn is not None else "")
        + f") // cell {cell:,} B (profile_max_num_token)",
        (f"cell = {m.kv_latent} latent (kv_lora_rank + qk_rope_head_dim) x {layers} layers x {kv_b} B (MLA)"
         if m.kv_latent else f"cell = {kv_heads} kv heads x {m.head_dim} x {cell_layers} "
         + ("full-attention " if gdn is not None else "") + f"layers x 2 x {kv_b} B"),
        f"free at start = GPU {total:,} - {outside_why}",
        load.note,
        *((f"torch's NCCL communicator of the default group, {late / MiB:,.0f} MiB, is created after the free "
           f"memory is read (get_available_gpu_memory's all-reduce over the default group, SGLang 0.3.3-0.4.6) and "
           "comes out of the pool",) if late else ()),
        f"left for activations and CUDA graphs: {reserve / GiB:.2f} GiB; the request-to-token table "
        f"({pool_rows:,} x {ctx_len + extra_len:,} int32) takes {req_to_token / GiB:.2f} GiB of it, a {cps:,}-token "
        f"chunked prefill about {act / GiB:.2f} GiB, graphs {CUDA_GRAPH_BYTES / GiB:.2f} GiB"
        + (f", the draft worker {spec_bytes / GiB:.2f} GiB" if spec is not None else "")
        + (" (does not fit: lower --chunked-prefill-size, --context-length or --mem-fraction-static)"
           if req_to_token + act + CUDA_GRAPH_BYTES + spec_bytes > reserve else ""),
    ) + (spec.notes if spec is not None else ()) + ((
        f"speculative {spec.algorithm}: max_total_num_tokens = profiled {profiled:,} + {max_running_requests} requests x "
        f"({spec.steps} steps x topk {spec.topk} + {spec.draft_tokens} draft tokens) + {DRAFT_POOL_BUFFER} = {tokens:,} "
        "(init_memory_pool draft_runner_cache_size: the target's and the draft's pools)",
        f"draft weights: {d.why}",
        f"draft KV pool: {tokens:,} tokens x {d.kv_layers} layer(s) x {d.kv_cell:,} B = {draft_kv:,} B (the draft "
        "worker's token_to_kv_pool; req_to_token_pool shared)") if spec is not None and d is not None
        and spec.kind != "ngram" else ()) + ((f"one {ctx_len:,}-token request does not fit the {tokens:,}-token pool",) if tokens < ctx_len else ()) + (
        (f"SGLang {version} keeps every layer of {m.name} in one pool at full length ("
         + ("no hybrid SWA pool by default before 0.4.10, model_runner.py" if release < (0, 4, 10)
            else "0.4.10-0.5.3 leave Llama 4 out of the hybrid SWA pool, model_runner.py" if m.chunked_local
            else "0.5.0-0.5.3 set disable_hybrid_swa_memory for it, server_args.py") + ")",)
        if m.hybrid_swa and m.n_sliding and swa is None else ()) + (
        (f"hybrid SWA pool (set_num_tokens_hybrid_swa): the {profiled:,} tokens profiled over every layer split "
         f"into {tokens:,} full-layer and "
         f"{swa_tokens:,} sliding-layer tokens (swa_full_tokens_ratio {swa_full_tokens_ratio})",)
        if swa is not None else ()) + (gdn_notes(m, gdn, tp=tp, max_num_reqs=max_num_reqs, slots=mamba_slots,
                                                  given=max_mamba_cache_size) if gdn is not None else ())
    return Capacity(
        engine="sglang", accounting=(ACCOUNTING_GDN if gdn is not None else ACCOUNTING_SWA if swa is not None
                                     else ACCOUNTING).format(version=version),
        model=m.name, gpu=gpu.name, gpus=gpus, tp=tp, pp=pp,
        gpu_bytes=total, budget_bytes=int(total_free * mfs), weights_bytes=weights + draft_w,
        non_torch_bytes=outside + late, cuda_graph_bytes=CUDA_GRAPH_BYTES, activation_bytes=act,
        kv_cache_bytes=kv_bytes + draft_kv + mamba_bytes, kv_bytes_per_token=cell + (d.kv_cell * d.kv_layers if d else 0),
        kv_tokens=tokens, max_model_len=ctx_len, context=ctx, concurrency=conc, max_running=running,
        decode_tokens_s=speed.decode_tokens_s, decode_tokens_s_total=speed.decode_tokens_s_total,
        ttft_s=speed.ttft_s, figures=figures, notes=notes,
        speculative=(f"{spec.algorithm}, {spec.steps} steps, topk {spec.topk}, {spec.draft_tokens} draft tokens, "
                     f"draft {d.name}") if spec is not None and d is not None else "",
        draft_weights_bytes=draft_w, draft_kv_cache_bytes=draft_kv)


def gdn_notes(m: ServedModel, g: GdnPools, *, tp: int, max_num_reqs: int, slots: int,
              given: int | None) -> tuple[str, ...]:
    """The hybrid mamba pools in words (what the log shows and what vramlens leaves out)."""
    h = m.hybrid
    assert h is not None
    conv, ssm = h.shapes(tp)
    kind = "Gated DeltaNet" if h.mixer == "gated_deltanet" else "Mamba2"
    if g.radix:
        how = (f"mamba pool: the radix cache stays on (0.5.4), so handle_max_mamba_cache gives the mamba state "
               f"{MAMBA_FULL_MEMORY_RATIO} / {1 + MAMBA_FULL_MEMORY_RATIO:.1f} of the pool's memory: max_mamba_cache_size "
               f"{g.cache_size:,} slots of {g.per_req:,} B" + (f" (--max-mamba-cache-size {given:,} is ignored on this path)"
                                                               if given else "")
               + f"; max_num_reqs = min(its default, {g.cache_size:,} // {MAMBA_SLOTS_PER_REQUEST_RADIX}) = "
               f"{max_num_reqs:,}; MambaPool allocates max_mamba_cache_size + 1 = {slots:,} slots")
    else:
        how = (f"mamba pool: profile_max_num_token takes max_mamba_cache_size {g.cache_size:,} x {g.per_req:,} B out of "
               f"the pool's memory; MambaPool allocates "
               + ("max_mamba_cache_size" if g.pool_from_cache_size else "max_num_reqs") + f" + 1 = {slots:,} slots "
               f"(max_num_reqs = min(its default, max_mamba_cache_size) = {max_num_reqs:,}); no more than "
               f"{max_num_reqs:,} requests run")
    return (
        f"hybrid: {g.n_full} full-attention layers keep the KV pool (HybridLinearKVPool), {g.n_linear} {kind} layers "
        f"a state per mamba slot: conv {'x'.join(map(str, conv))} x {GDN_CONV_STATE_BYTES} B (bfloat16) + temporal "
        f"{'x'.join(map(str, ssm))} x {MAMBA_SSM_DTYPES[g.ssm_dtype]} B ({g.ssm_dtype}) = {g.per_req // g.n_linear:,} B "
        f"per layer, {g.per_req:,} B per slot (mamba_cache_per_req)",
        how,
        *((f"hybrid: speculative decoding: MambaPool keeps {g.spec_tokens} intermediate ssm states and conv windows "
           f"per slot (speculative_num_draft_tokens), {g.spec_tokens} x {g.per_req:,} B more per slot"
           + (", counted by handle_max_mamba_cache (x (1 + draft tokens))" if g.pool_from_cache_size else
              ", allocated after profile_max_num_token (which does not count them): out of the (1 - "
              "mem_fraction_static) share") + "; the draft worker's HybridLinearKVPool keeps one attention layer "
           "(full_attention_layer_ids [0]) and shares the mamba pool",) if g.spec_tokens else ()),
        ("hybrid: the radix cache stays on (scheduler.py MambaRadixCache for Gated DeltaNet models)"
         if g.radix else "hybrid: SGLang disables the radix cache for this model (model_runner.py)")
        + f"; the {kind} kernels' own working set in a prefill is not modelled (the activation figure is the "
        "generic one)",
    )


@dataclass(frozen=True, slots=True)
class SglangSpeculative:
    """The speculative settings as SGLang's server_args settle them (``_handle_speculative_decoding``)."""

    algorithm: str
    kind: str
    steps: int
    topk: int
    draft_tokens: int
    notes: tuple[str, ...]


def sglang_speculative(m: ServedModel, draft: ServedModel | None, release: tuple[int, int, int], *, algorithm: str,
                       steps: int | None, topk: int | None, draft_tokens: int | None,
                       page_size: int) -> SglangSpeculative:
    """``--speculative-*`` as ``release`` settles them, or ConfigError (SGLang's words where it has them).

    NEXTN becomes EAGLE; EAGLE without a draft path on a model of MTP_ARCHITECTURES drafts with its own
    MTP layers (the draft path defaults to the model path). With no --speculative-num-steps the three
    sizes come from ``auto_choose_speculative_params`` (:data:`SHORT_TREE_ARCHITECTURES`: (3, 1, 4), STANDALONE
    too; else (5, 4, 8)); topk 1 sets num_draft_tokens to steps + 1; NGRAM takes topk =
    speculative_ngram_max_bfs_breadth (10) and num_draft_tokens = speculative_ngram_max_match_window_size (12).
    """
    p = []
    since = SPECULATIVE_RELEASES.get(algorithm)
    if since is None:
        raise ConfigError(f"speculative_algorithm={algorithm!r} is not one of {', '.join(SGLANG_ALGORITHMS)} "
                          "(SGLang --speculative-algorithm)")
    if release < since:
        raise ConfigError(f"--speculative-algorithm {algorithm} is not in SGLang {'.'.join(map(str, release))}: "
                          f"vramlens follows it from {'.'.join(map(str, since))} (the releases read: 0.4.10, 0.5.2, 0.5.3)")
    alg = "EAGLE" if algorithm == "NEXTN" else algorithm
    kind = KINDS[alg]
    notes: list[str] = []
    if alg == "EAGLE" and draft is None and m.mtp_layers and m.architecture in MTP_ARCHITECTURES:
        kind = "mtp"  # speculative_draft_model_path = model_path
    elif algorithm == "NEXTN" and draft is None:
        kind = "mtp"
    elif (alg == "EAGLE" and draft is not None and m.hybrid is not None
          and draft.architecture == m.architecture == QWEN3_NEXT_ARCHITECTURE):
        # the draft path is the model itself: configs/model_config.py (0.5.2-0.5.4) loads it as
        # Qwen3NextForCausalLMMTP, the checkpoint's MTP layer (models/qwen3_next_mtp.py)
        kind, draft = "mtp", None
    if m.hybrid is not None and kind != "mtp":
        p.append(f"speculative decoding on a hybrid model is modelled for SGLang's NEXTN / EAGLE with the model's own "
                 f"MTP layers (Qwen3NextForCausalLMMTP) only: {algorithm}"
                 + (f" with the draft {draft.name}" if draft is not None else "")
                 + " is not read: use --speculative-algorithm NEXTN")
    else:
        p += draft_problems(kind, m, draft, model_flag="--speculative-draft-model-path")
    notes.append(f"speculative {algorithm}" + (" (EAGLE in server_args)" if algorithm == "NEXTN" else "")
                 + f": draft {'the MTP layers of ' + m.name if kind == 'mtp' else draft.name if draft else 'none'}")
    if alg == "NGRAM":
        topk = NGRAM_MAX_BFS_BREADTH
        draft_tokens = draft_tokens or NGRAM_MAX_MATCH_WINDOW
        steps = steps or 1
    elif steps is None:
        if topk is not None or draft_tokens is not None:
            p.append("speculative_eagle_topk and speculative_num_draft_tokens need speculative_num_steps "
                     "(SGLang asserts all three unset, then chooses them itself)")
        else:
            short = next(archs for since_, archs in reversed(SHORT_TREE_ARCHITECTURES) if release >= since_)
            steps, topk, draft_tokens = (3, 1, 4) if alg == "STANDALONE" or m.architecture in short else (5, 4, 8)
            notes.append(f"speculative_num_steps {steps}, eagle_topk {topk}, num_draft_tokens {draft_tokens}: "
                         f"auto_choose_speculative_params for {m.architecture or 'this architecture'}")
    if topk is None or draft_tokens is None or steps is None:
        if not p:
            p.append("give speculative_num_steps, speculative_eagle_topk and speculative_num_draft_tokens together, "
                     "or none of them")
        raise ConfigError(p)
    if alg != "NGRAM" and topk == 1 and draft_tokens != steps + 1:
        notes.append(f"speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when "
                     f"speculative_eagle_topk == 1: {draft_tokens} -> {steps + 1}")
        draft_tokens = steps + 1
    if topk > 1 and page_size > 1:
        p.append(f"speculative_eagle_topk({topk}) > 1 with page_size({page_size}) > 1 is unstable and produces "
                 "incorrect results for paged attention backends. This combination is only supported for the "
                 "'flashinfer' backend.")
    if p:
        raise ConfigError(p)
    return SglangSpeculative(algorithm, kind, steps, topk, draft_tokens, tuple(notes))


def hybrid_swa_tokens(m: ServedModel, tokens: int, per_layer: int, *, pp: int = 1,
                      ratio: float = DEFAULT_SWA_FULL_TOKENS_RATIO,
                      page_size: int = DEFAULT_PAGE_SIZE) -> tuple[int, int] | None:
    """(full-layer tokens, SWA-layer tokens) of SGLang's hybrid pool, None when SGLang keeps one pool.

    ``tokens`` is max_total_num_tokens as profiled over every layer, ``per_layer`` the bytes one token
    takes in one layer (F = S: gpt-oss's sliding and full layers have the same K/V width). As
    model_runner_kv_cache_mixin.py ``set_num_tokens_hybrid_swa`` computes it: total_memory = tokens x
    (F n_full + S n_swa); full = int(total_memory / (F n_full + r S n_swa)); swa = int(full x r); both
    page-aligned; with no full layer every token goes to the SWA pool.
    """
    if not m.hybrid_swa or not m.n_sliding:
        return None
    layers = stage_layers(m, pp)
    n_swa = min(layers, ceil_div(m.n_sliding, pp))
    n_full = layers - n_swa
    if n_full == 0:
        return 0, tokens // page_size * page_size
    total_memory = tokens * (per_layer * n_full + per_layer * n_swa)
    full = int(total_memory / (per_layer * n_full + ratio * per_layer * n_swa))
    swa = int(full * ratio)
    return full // page_size * page_size, swa // page_size * page_size
