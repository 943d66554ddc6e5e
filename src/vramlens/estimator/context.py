"""Context parallelism (``--cp N``): torch's ``context_parallel`` as torchtitan applies it.

torchtitan (``parallelism.context_parallel_degree``, train.py ``create_context_parallel_ctx``) shards the
inputs, labels and rotary table over the sequence with torch's head-tail load balancer (each of the cp
ranks takes chunks i and 2cp-1-i of 2cp equal chunks), so every tensor a step makes per token exists for
``seq / cp`` tokens on a rank: vramlens estimates the step at the local sequence. FSDP shards over the
data-parallel and context-parallel ranks together (the ``dp_shard_cp`` mesh), which ``Workload.dp`` counts.

Each causal SDPA call becomes ring attention (torch/distributed/tensor/experimental/_context_parallel/
_attention.py, torch 2.13: ``_templated_ring_attention`` and its backward, ``_cp_options`` defaults
``rotate_method = ALL_GATHER``, ``convert_to_f32 = True``). With t local tokens, a query heads, kv key/value
heads of size d, c bytes of the compute dtype, per attention call:

* forward: the local keys and values concatenated (``torch.cat([key.flatten(), value.flatten()])``,
  2*c*kv*d*t) and their all-gather over the cp ranks (``_AllGatherRotater``: cp times that, kept for the
  loop), one step's SDPA output and log-sum-exp (c*a*d*t, 4*a*t) and the merger's fp32 output and
  log-sum-exp (``_SDPAMerger``: 4*a*d*t, 4*a*t);
* backward: the same all-gathered keys and values, the fp32 gradient accumulators of q, k and v
  (``grad_query = zeros_like(query, dtype=float32)``...) and one step's fp32 partial gradients
  (``grad_query_``...), the SDPA backward's own gradients in the compute dtype, and the keys' and values'
  fp32 gradients rotated by all-to-all (sent and received: 2 x 4*2*kv*d*t).

The step's peak sees these beside what a recomputed block holds at its attention call (its input's norm,
q, k and v): :func:`ring_attention_bytes` is that candidate, against the block's own recomputation peak.
"""

from __future__ import annotations

from vramlens.estimator.activations import rank_dims
from vramlens.models.spec import ModelSpec
from vramlens.units import DTYPE_BYTES
from vramlens.units import block_bytes as _r  # one allocation's bytes, in 512-byte blocks
from vramlens.workload import Workload


def ring_attention_bytes(spec: ModelSpec, w: Workload, b: int, s_local: int) -> tuple[int, int]:
    """(forward, backward) bytes of one ring-attention call's own buffers on a rank (see the module docstring);
    (0, 0) without context parallelism."""
    if w.cp <= 1:
        return 0, 0
    c = DTYPE_BYTES[w.compute_dtype]
    D = rank_dims(spec, max(1, w.tp))
    a, kv, d = D.a, D.kv, D.d
    t = b * s_local
    local_kv = _r(2 * c * kv * d * t)
    gathered = w.cp * local_kv
    forward = local_kv + gathered + _r(c * a * d * t) + _r(4 * a * t) + _r(4 * a * d * t) + _r(4 * a * t)
    qkv32 = _r(4 * a * d * t) + 2 * _r(4 * kv * d * t)
    backward = (gathered + 2 * qkv32 + _r(c * a * d * t) + 2 * _r(c * kv * d * t)
                + 2 * _r(4 * 2 * kv * d * t))
    return forward, backward


def at_attention_bytes(spec: ModelSpec, w: Workload, b: int, s_local: int) -> int:
    """What a recomputed (or running) block holds when its attention is called: the attention norm's output
    and the rotated q, k and v, in the compute dtype."""
    c = DTYPE_BYTES[w.compute_dtype]
    D = rank_dims(spec, max(1, w.tp))
    t = b * s_local
    return _r(c * D.h * t) + _r(c * D.a * D.d * t) + 2 * _r(c * D.kv * D.d * t)


def note(w: Workload, seq: int) -> str:
    """The estimate's note for ``--cp``."""
    if w.cp <= 1:
        return ""
    return (f"context parallelism over {w.cp} ranks (torch's context_parallel, torchtitan's CP): {seq // w.cp:,} of "
            f"the {seq:,} tokens on each rank; ring attention all-gathers the keys and values (torch 2.13's "
            "allgather rotation, fp32 merging); FSDP shards over the data- and context-parallel ranks together")
