"""First-order reserved memory for the estimator: no replay, microseconds per call.

The estimator knows which tensors live all step (weights, gradients, optimizer states, KV
cache) and how many bytes of short-lived ones (activations, temporaries) are live at the peak,
but not the order of every allocation. This model applies the allocator's size rules exactly
to what it knows and a documented allowance to what it does not:

1. **Persistent tensors** (allocated once, in order, never freed): each is rounded to its block
   (:func:`~vramlens.allocator.simulator.round_size`) and placed by best fit in the cached
   remainders of earlier segments, else in a new segment (2 MiB small; 20 MiB for 1-10 MiB;
   else rounded up to 2 MiB), exactly as the simulator does for allocations without frees.
2. **Short-lived tensors** (activations, temporaries, and gradients when ``zero_grad`` sets them
   to None, PyTorch's default since 2.0): they are freed and allocated again every step, and the segments they
   leave behind are cached. At the peak the reservation for them is their live bytes plus the
   cached pieces too small or on the wrong side of a live block to serve the peak's requests,
   plus one partly used segment per size class (20 MiB + 2 MiB, or the short-lived bytes
   themselves if fewer), rounded up to 2 MiB.
   In a training step those pieces come from the loss: its b*s*V tensors are the step's largest,
   and the segments the first step cut for them are split, once they are freed, by the gradients
   and optimizer states allocated after them, so the next step's loss takes fresh segments while
   the old ones stay cached in pieces. The allowance is LOSS_TENSOR_ALLOWANCE times the loss'
   largest tensor (``loss_tensor_bytes``), about the same at every depth and with checkpointing
   (which only shrink or grow the short-lived bytes around it). Without a training step's loss
   (inference) it is ``transient_fragmentation`` (default TRANSIENT_FRAGMENTATION) of the live
   short-lived bytes.
   With ``expandable_segments`` the cached pieces can grow into one another: the allowances are
   EXPANDABLE_LOSS_TENSOR_ALLOWANCE and EXPANDABLE_FRAGMENTATION instead and the slack is one page per pool.

What it cannot see: allocations on several streams, tensors that outlive their step (a
leaked reference), and sizes that change from step to step (dynamic shapes), all of which the
simulator replays exactly when a trace is available. (The estimator adds FSDP2's two side-stream
pools itself: vramlens.estimator.parallel.fsdp_stream_pools.)
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from vramlens.allocator.config import AllocatorConfig
from vramlens.allocator.simulator import (
    K_LARGE_BUFFER,
    K_MIN_BLOCK,
    K_MIN_LARGE_ALLOC,
    K_ROUND_LARGE,
    K_SMALL_BUFFER,
    K_SMALL_SIZE,
    allocation_size,
    round_size,
)
from vramlens.units import round_up

#: Cached-but-unusable bytes at a training step's peak, per byte of the loss' largest tensor
#: (estimator.activations.largest_loss_tensor: the fp32 upcast of a causal LM's logits, the logits of
#: a masked LM that does not upcast, one chunk of a chunked loss). Derived by
#: scripts/derive_fragmentation.py: the same 27 workloads as below, each traced at 4, 12 and 28 blocks
#: (81 replays), the excess (replayed peak reserved - persistent_reserved(kept tensors) - the partly used
#: segments - short-lived bytes at the allocated peak) divided by that tensor (the estimator's figure,
#: equal to the largest short-lived tensor of every trace). Default settings: -0.07 to 3.31, median
#: 0.685, mean 0.88 (quartiles 0.38 and 1.12); per depth 0.64, 0.63 and 0.77 where the share of the
#: short-lived bytes falls from 16% to 13% and 9%; checkpointed rows 0.75 (18), the others 0.66 (63),
#: where the share is 20% against 11%. The spread is the model's uncertainty and partly systematic:
#: fp32 rows 0.42, bf16 0.73, autocast 0.63; GPT-2 0.31, BERT 0.42, Qwen2 0.68, llama 1.15. In the
#: replays the excess is the second step's new segments for the loss' b*s*V tensors, made while the
#: cached free bytes exceed them but no cached piece holds one: 0.69.
LOSS_TENSOR_ALLOWANCE = 0.69
#: The same with expandable_segments:True (same 81 replays: -0.06 to 2.10, median 0.506, mean 0.48,
#: quartiles 0.09 and 0.57; per depth 0.51, 0.50, 0.52; checkpointed 0.56, the others 0.50). It is
#: bimodal: about the logits' own bytes (half their fp32 copy) when the loss upcasts or casts them
#: (bf16 rows 0.54, autocast 0.57), about nothing when the largest tensor is the logits themselves
#: (fp32 rows 0.03, BERT's bf16 rows): 0.51.
EXPANDABLE_LOSS_TENSOR_ALLOWANCE = 0.51
#: Cached-but-unusable share of the short-lived bytes at the peak, the allowance of a run without a
#: training step's loss (inference; no inference replays were derived). Derived by
#: scripts/derive_fragmentation.py: two training steps of 27 workloads traced on fake tensors
#: (28-block llama-, GPT-2-, Qwen2- and BERT-shaped configs of width 768-2048; fp32, bf16 and
#: fp32 + bf16 autocast; batch 1-32, sequence 128-2048; no and full checkpointing; full and LoRA;
#: AdamW foreach and fused), each replayed through the allocator simulator; the share is
#: (replayed peak reserved - persistent_reserved(kept tensors) - the partly used segments -
#: short-lived bytes at the allocated peak) / those short-lived bytes. Default settings: -0.5% to
#: 71.3%, median 8.8%, mean 12.6%; we take 9%. The spread is the model's uncertainty and it is
#: partly systematic: the 6 checkpointed rows need more (median 22.9%, up to 71%), the 21 others
#: -0.5% to 22.9% (median 7.8%); fp32 rows less (2.6%) than bf16 ones (11.0%); 4-block models more
#: (median 16.1%: their output layer and loss weigh more in the short-lived bytes).
TRANSIENT_FRAGMENTATION = 0.09
#: The same with expandable_segments:True, which lets freed pieces coalesce across the old
#: segment boundaries (same 27 replays: -0.1% to 42.9%, median 5.3%, mean 7.1%; checkpointed rows
#: median 16.1%, the others -0.1% to 9.6%; fp32 rows 0.4%; 4-block models 12.8%): 5%.
EXPANDABLE_FRAGMENTATION = 0.05


def _round2m(n: int) -> int:
    return round_up(n, K_ROUND_LARGE)


def _items(sizes: Sequence[int] | Mapping[int, int]) -> list[tuple[int, int]]:
    if isinstance(sizes, Mapping):
        return [(int(s), int(c)) for s, c in sizes.items() if c and s]
    return [(int(s), 1) for s in sizes if s]


def _pack(blocks: list[tuple[int, int]], small: bool) -> int:
    """Segments' bytes for blocks allocated in order and kept, by the allocator's best fit.

    Each block takes the smallest cached remainder that holds it, else a new segment of
    allocation_size(block); what is left is kept as a remainder only if the pool would split it
    (small pool: >= 512 B; large pool: > 1 MiB).
    """
    remainders: list[int] = []  # sorted free remainders
    reserved = 0
    keep = K_MIN_BLOCK if small else K_SMALL_SIZE + 1
    for block, count in blocks:
        for k in range(count):
            i = bisect_left(remainders, block)
            if i < len(remainders):
                rest = remainders.pop(i) - block
            else:
                if not remainders and not small and block >= K_MIN_LARGE_ALLOC:
                    seg = _round2m(block)
                    if seg - block < keep:  # whole 2 MiB multiples: no remainder to track
                        reserved += seg * (count - k)
                        break
                seg = allocation_size(block)
                reserved += seg
                rest = seg - block
            if rest >= keep:
                insort(remainders, rest)
    return reserved


def persistent_reserved(sizes: Sequence[int] | Mapping[int, int], conf: AllocatorConfig | None = None) -> int:
    """Bytes reserved for tensors allocated once, in the given order, and kept (rule 1).

    For one stream and the default settings this is exactly what the simulator reserves for
    the same allocations; with expandable segments the pools are filled page by page.

    Args:
        sizes: the tensors' byte sizes, or a mapping size -> count (much faster for models whose
            layers repeat).
        conf: allocator settings (roundup_power2_divisions and expandable_segments matter).
    """
    conf = conf or AllocatorConfig()
    small: list[tuple[int, int]] = []
    large: list[tuple[int, int]] = []
    for size, count in _items(sizes):
        block = round_size(size, conf)
        (small if block <= K_SMALL_SIZE else large).append((block, count))
    if conf.expandable_segments:  # one segment per pool, grown page by page
        s = sum(b * c for b, c in small)
        big = sum(b * c for b, c in large)
        return round_up(s, K_SMALL_BUFFER) + round_up(big, K_LARGE_BUFFER)
    return _pack(small, True) + _pack(large, False)


@dataclass(frozen=True, slots=True)
class ReservedEstimate:
    """The first-order reserved figure and its parts, bytes.

    Attributes:
        persistent_bytes: reserved for tensors kept all step (rule 1).
        transient_bytes: reserved for short-lived tensors at the peak (rule 2).
        reserved_bytes: their sum, never below the allocated peak.
        explain: the rule applied, in one line.
    """

    persistent_bytes: int
    transient_bytes: int
    reserved_bytes: int
    explain: str


def reserved_breakdown(
    persistent: Sequence[int] | Mapping[int, int] = (),
    transient_peak_bytes: int = 0,
    *,
    conf: AllocatorConfig | None = None,
    transient_fragmentation: float | None = None,
    loss_tensor_bytes: int | None = None,
) -> ReservedEstimate:
    """Reserved memory at the peak from the tensors live there; see the module docstring.

    Args:
        persistent: sizes (or size -> count) of the tensors that live all step.
        transient_peak_bytes: bytes of short-lived tensors live at the peak.
        conf: allocator settings (expandable_segments changes the allowance).
        transient_fragmentation: override of the cached-but-unusable share (used instead of the loss' allowance).
        loss_tensor_bytes: a training step's largest loss tensor: the allowance is LOSS_TENSOR_ALLOWANCE
            (EXPANDABLE_LOSS_TENSOR_ALLOWANCE) times it; None: a share of the short-lived bytes.
    """
    conf = conf or AllocatorConfig()
    pers = persistent_reserved(persistent, conf)
    by_loss = loss_tensor_bytes is not None and transient_fragmentation is None
    if transient_fragmentation is None:
        transient_fragmentation = EXPANDABLE_FRAGMENTATION if conf.expandable_segments else TRANSIENT_FRAGMENTATION
    allowance = EXPANDABLE_LOSS_TENSOR_ALLOWANCE if conf.expandable_segments else LOSS_TENSOR_ALLOWANCE
    if transient_peak_bytes > 0:
        slack = K_LARGE_BUFFER if conf.expandable_segments else K_LARGE_BUFFER + K_SMALL_BUFFER
        # a partly used segment cannot hold more slack than there are short-lived bytes
        if by_loss:
            live = transient_peak_bytes + int(allowance * (loss_tensor_bytes or 0))
        else:
            live = int(transient_peak_bytes * (1 + transient_fragmentation))
        trans = _round2m(live + min(slack, transient_peak_bytes))
    else:
        trans = 0
    allocated_floor = sum(round_size(s, conf) * c for s, c in _items(persistent)) + transient_peak_bytes
    total = max(pers + trans, allocated_floor)
    rule = (f"+ {allowance:.2f} x the loss' largest tensor ({loss_tensor_bytes or 0:,} B)" if by_loss
            else f"x (1 + {transient_fragmentation:.2f})")
    explain = (f"persistent tensors packed by the allocator's segment rules; short-lived "
               f"{transient_peak_bytes:,} B {rule} + one partly used segment")
    return ReservedEstimate(pers, trans, total, explain)


def estimate_reserved(
    persistent: Sequence[int] | Mapping[int, int] = (),
    transient_peak_bytes: int = 0,
    *,
    conf: AllocatorConfig | None = None,
    transient_fragmentation: float | None = None,
    loss_tensor_bytes: int | None = None,
) -> int:
    """torch.cuda.max_memory_reserved() predicted from the tensors live at the peak.

    Same arguments as :func:`reserved_breakdown`; returns only the total, bytes.
    """
    return reserved_breakdown(persistent, transient_peak_bytes, conf=conf, transient_fragmentation=transient_fragmentation,
                              loss_tensor_bytes=loss_tensor_bytes).reserved_bytes
