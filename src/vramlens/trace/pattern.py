"""The layer pattern of a model, for extrapolation by whole periods (hybrid attention/SSM models).

A uniform transformer repeats one block; a hybrid one repeats a pattern of blocks of different
kinds: Qwen3-Next three gated-DeltaNet blocks and one attention block (``layer_types``), Jamba one
attention block in ``attn_layer_period`` (at ``attn_layer_offset``) and MoE every
``expert_layer_period``, Nemotron-H the letters of ``hybrid_override_pattern``, Bamba
``attn_layer_indices``, LFM2 ``full_attn_idxs``. Truncating such a model to its first 2 and 3
blocks keeps only recurrent blocks, so the extrapolation must count whole periods.

A block's kind is read off the model transformers builds, not off each family's config fields:
the block's class and its parameters' names and shapes (attention or mixer, MoE or dense MLP) and
the config's ``layer_types`` entry (which also tells sliding from full attention, whose weights
are the same). The pattern is ``prefix + period * n + tail`` where the tail is the start of a
period (attention at blocks 9, 18, ..., 45 of 50: one Mamba block, then 5 periods of 8 Mamba and 1
attention, then 4 Mamba blocks), so the truncated models are prefixes of the full one and memory
is a line in ``n``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class LayerPattern:
    """``n_layers`` blocks: ``prefix`` blocks, then ``periods`` repeats of ``period`` blocks, then ``tail``
    blocks that are the first ``tail`` of a period."""

    n_layers: int
    prefix: int
    period: int
    periods: int
    tail: int
    kinds: tuple[str, ...]  # one short name per block of the full model, for messages

    def blocks(self, periods: int) -> int:
        """Blocks of the truncated model with ``periods`` whole periods (the same prefix and tail)."""
        return self.prefix + periods * self.period + self.tail

    def truncations(self, k: int) -> tuple[int, int]:
        """Periods of the two truncated models for ``layers=k``: the larger has the fewest whole periods
        (at least 3) that give it at least ``k`` blocks, the smaller one period less. For a uniform model
        (period 1, no prefix or tail) that is k-1 and k blocks. The smaller model has 2 periods at least, as
        it has 2 blocks at least for a uniform one: its first period is not also its last, and a component
        whose peak moves from one phase to another (backward's recomputation, then the optimizer's foreach
        temporaries as the model grows) has moved already (Qwen3-Next, full checkpointing: between 1 and 2
        periods)."""
        p2 = max(3, -(-(k - self.prefix - self.tail) // self.period))
        return p2 - 1, p2

    @property
    def uniform(self) -> bool:
        return self.period == 1 and self.prefix == 0

    def shown(self) -> str:
        """The kinds in a short form: ``mamba x3, attention`` for one period (with prefix and tail)."""
        def run(kinds: tuple[str, ...]) -> str:
            out: list[str] = []
            for k in kinds:
                if out and out[-1].rsplit(" x", 1)[0] == k:
                    head, _, n = out[-1].rpartition(" x")
                    out[-1] = f"{head} x{int(n) + 1}" if head else f"{k} x2"
                else:
                    out.append(k)
            return ", ".join(out)

        p = self.kinds[self.prefix:self.prefix + self.period]
        s = f"({run(p)}) x{self.periods}"
        if self.prefix:
            s = f"{run(self.kinds[:self.prefix])}, {s}"
        if self.tail:
            s += f", {run(self.kinds[self.n_layers - self.tail:])}"
        return s


def block_kinds(model: Any, n_layers: int) -> list[tuple[Any, ...]]:
    """Each block's kind: the config's ``layer_types`` entry and, for every ModuleList of ``n_layers``
    modules (the decoder's blocks), the block's class and its parameters' names and shapes."""
    from torch import nn

    conf: Any = getattr(model, "config", None)
    text = conf.get_text_config(decoder=True) if hasattr(conf, "get_text_config") else conf
    types = getattr(text, "layer_types", None)
    lists = [m for m in model.modules() if isinstance(m, nn.ModuleList) and len(m) == n_layers]
    out = []
    for i in range(n_layers):
        sig: list[Any] = [types[i] if isinstance(types, (list, tuple)) and len(types) == n_layers else None]
        for ml in lists:
            block = ml[i]
            sig.append((type(block).__name__,
                        tuple(sorted((n, tuple(p.shape)) for n, p in block.named_parameters()))))
        out.append(tuple(sig))
    return out


def short_kind(sig: tuple[Any, ...]) -> str:
    """A block kind for messages: the layer type, else the block's class name."""
    if sig[0] is not None:
        return str(sig[0])
    return str(sig[1][0]) if len(sig) > 1 else "block"


def find_pattern(kinds: list[tuple[Any, ...]]) -> LayerPattern | None:
    """The cheapest ``prefix + period * n + tail`` form of ``kinds`` with at least 2 periods, or None
    when none repeats (not periodic). Cheapest: fewest blocks in the larger truncated model of
    ``layers=3``, then the shortest period."""
    L = len(kinds)
    shown = tuple(short_kind(k) for k in kinds)
    best: tuple[int, int, LayerPattern] | None = None
    for P in range(1, L // 2 + 1):
        # the smallest prefix after which kinds repeat every P blocks
        a = 0
        for i in range(L - P - 1, -1, -1):
            if kinds[i] != kinds[i + P]:
                a = i + 1
                break
        n, c = divmod(L - a, P)
        if n < 2:
            continue
        pat = LayerPattern(n_layers=L, prefix=a, period=P, periods=n, tail=c, kinds=shown)
        cost = pat.blocks(pat.truncations(3)[1])
        if best is None or (cost, P) < best[:2]:
            best = (cost, P, pat)
    return best[2] if best is not None else None


__all__ = ["LayerPattern", "block_kinds", "find_pattern", "short_kind"]
