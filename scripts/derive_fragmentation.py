"""Derive the reserve's allowance for short-lived tensors (allocator.analytic's *_FRAGMENTATION).

Traces two training steps of each workload below with vramlens' tracer (fake tensors: tiny
llama-, GPT-2-, Qwen2- and BERT-shaped configs, DERIVATION_LAYERS = 28 blocks; fp32 / bf16 /
fp32 + bf16 autocast;
batch 1-32, sequence 128-2048; no and full checkpointing; full and LoRA; AdamW foreach and
fused), replays each trace's events through the allocator simulator with PyTorch's default
settings and with ``expandable_segments:True``, and computes the share the analytic model has to
allow, in analytic.py's own terms:

* persistent: the storages kept all step (parameters, buffers, fp32 master weights, optimizer
  states), in the order they were allocated, packed by ``persistent_reserved``;
* short-lived: every other storage live at the allocated peak, its bytes rounded to blocks
  (what the estimator feeds ``transient_reserve``: peak allocated minus the persistent bytes);
* share = (replayed peak reserved - persistent_reserved - min(slack, short-lived) - short-lived)
  / short-lived, slack being the one partly used segment per pool that reserved_breakdown adds.

Prints one row per workload and setting, then min / median / mean / max per setting and per
group (dtype, checkpointing, method). Usage::

    PYTHONPATH=src python scripts/derive_fragmentation.py [--json OUT] [--only SUBSTRING] [--layers N]

``--layers`` re-runs the same workloads at another depth. Depth matters: a model of few blocks puts
the output layer and the loss, allocated once per step, at a large part of the short-lived bytes,
and its shares run high (at 4 blocks: median 16.1% with the default settings, 12.8% with expandable
segments, against 8.8% and 5.3% at 28), so the constants come from 28 blocks, the depth of
Llama 3.2 3B and Qwen2 1.5B.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from typing import Any

from vramlens.allocator.analytic import persistent_reserved
from vramlens.allocator.config import parse_alloc_conf
from vramlens.allocator.simulator import K_LARGE_BUFFER, K_SMALL_BUFFER, CachingAllocator, round_size
from vramlens.trace import trace
from vramlens.trace.events import HOST_TAGS
from vramlens.workload import make_workload

#: Tags of the storages the estimator treats as kept all step (estimator.state's persistent parts).
PERSISTENT_TAGS = frozenset({"parameter", "buffer", "master_weight", "optimizer_state"})
SETTINGS = {"default": None, "expandable": "expandable_segments:True"}
#: Blocks per traced model in the derivation (the configs below are written with 4).
DERIVATION_LAYERS = 28


def _llama(d: int, inter: int, vocab: int = 32_000) -> dict[str, Any]:
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": d,
            "intermediate_size": inter, "num_hidden_layers": 4, "num_attention_heads": d // 64,
            "num_key_value_heads": d // 128, "vocab_size": vocab, "max_position_embeddings": 4096,
            "tie_word_embeddings": False}


def _qwen2(d: int, inter: int) -> dict[str, Any]:
    return {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": d,
            "intermediate_size": inter, "num_hidden_layers": 4, "num_attention_heads": d // 64,
            "num_key_value_heads": 2, "vocab_size": 151_936, "max_position_embeddings": 4096,
            "tie_word_embeddings": True}


def _gpt2(d: int) -> dict[str, Any]:
    return {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_embd": d, "n_layer": 4,
            "n_head": d // 64, "vocab_size": 50_257, "n_positions": 2048, "n_ctx": 2048}


def _bert(d: int) -> dict[str, Any]:
    return {"architectures": ["BertForMaskedLM"], "model_type": "bert", "hidden_size": d,
            "intermediate_size": 4 * d, "num_hidden_layers": 4, "num_attention_heads": d // 64,
            "vocab_size": 30_522, "max_position_embeddings": 512, "type_vocab_size": 2}


LLAMA, LLAMA_BIG, QWEN, GPT2, BERT = _llama(1024, 2816), _llama(2048, 5632), _qwen2(896, 4864), _gpt2(768), _bert(768)
BF16, AMP, FP32 = dict(dtype="bf16"), dict(dtype="fp32", amp="bf16"), dict(dtype="fp32")
CKPT, FUSED = dict(checkpointing="full"), dict(optimizer_impl="fused")

#: (name, config, workload fields). Chosen before looking at any share; none is dropped after.
WORKLOADS: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("llama-d1024 bf16 b4 s512", LLAMA, dict(**BF16, batch=4, seq=512)),
    ("llama-d1024 amp b2 s1024", LLAMA, dict(**AMP, batch=2, seq=1024)),
    ("llama-d1024 fp32 b2 s512", LLAMA, dict(**FP32, batch=2, seq=512)),
    ("llama-d1024 bf16 ckpt b1 s2048", LLAMA, dict(**BF16, **CKPT, batch=1, seq=2048)),
    ("llama-d1024 bf16 fused b8 s512", LLAMA, dict(**BF16, **FUSED, batch=8, seq=512)),
    ("llama-d1024 bf16 lora b4 s1024", LLAMA, dict(**BF16, method="lora", batch=4, seq=1024)),
    ("llama-d1024 bf16 lora ckpt b4 s1024", LLAMA, dict(**BF16, **CKPT, method="lora", batch=4, seq=1024)),
    ("llama-d2048 bf16 b2 s1024", LLAMA_BIG, dict(**BF16, batch=2, seq=1024)),
    ("llama-d2048 amp ckpt fused b4 s512", LLAMA_BIG, dict(**AMP, **CKPT, **FUSED, batch=4, seq=512)),
    ("gpt2-d768 fp32 b8 s512", GPT2, dict(**FP32, batch=8, seq=512)),
    ("gpt2-d768 bf16 b4 s1024", GPT2, dict(**BF16, batch=4, seq=1024)),
    ("gpt2-d768 amp fused b4 s1024", GPT2, dict(**AMP, **FUSED, batch=4, seq=1024)),
    ("gpt2-d768 bf16 ckpt b8 s1024", GPT2, dict(**BF16, **CKPT, batch=8, seq=1024)),
    ("gpt2-d768 fp32 lora b4 s512", GPT2, dict(**FP32, method="lora", lora_targets=("c_attn",), batch=4, seq=512)),
    ("gpt2-d768 bf16 b1 s2048", GPT2, dict(**BF16, batch=1, seq=2048)),
    ("qwen2-d896 bf16 b2 s1024", QWEN, dict(**BF16, batch=2, seq=1024)),
    ("qwen2-d896 bf16 ckpt b4 s512", QWEN, dict(**BF16, **CKPT, batch=4, seq=512)),
    ("qwen2-d896 amp b1 s2048", QWEN, dict(**AMP, batch=1, seq=2048)),
    ("qwen2-d896 bf16 lora b4 s1024", QWEN, dict(**BF16, method="lora", batch=4, seq=1024)),
    ("qwen2-d896 bf16 fused b8 s256", QWEN, dict(**BF16, **FUSED, batch=8, seq=256)),
    ("qwen2-d896 fp32 b2 s512", QWEN, dict(**FP32, batch=2, seq=512)),
    ("bert-d768 fp32 b8 s512", BERT, dict(**FP32, task="masked-lm", batch=8, seq=512)),
    ("bert-d768 bf16 b16 s512", BERT, dict(**BF16, task="masked-lm", batch=16, seq=512)),
    ("bert-d768 amp fused b8 s512", BERT, dict(**AMP, **FUSED, task="masked-lm", batch=8, seq=512)),
    ("bert-d768 bf16 ckpt b8 s512", BERT, dict(**BF16, **CKPT, task="masked-lm", batch=8, seq=512)),
    ("bert-d768 fp32 lora b16 s256", BERT, dict(**FP32, method="lora", lora_targets=("query", "value"),
                                                task="masked-lm", batch=16, seq=256)),
    ("bert-d768 bf16 b32 s128", BERT, dict(**BF16, task="masked-lm", batch=32, seq=128)),
]


def with_layers(cfg: dict[str, Any], layers: int) -> dict[str, Any]:
    """The config with ``layers`` blocks."""
    return {**cfg, ("n_layer" if "n_layer" in cfg else "num_hidden_layers"): layers}


def allowance(events, alloc_conf: str | None) -> dict[str, float | int]:
    """Replay ``events`` and return the share the analytic model must allow (module docstring)."""
    conf = parse_alloc_conf(alloc_conf)
    a = CachingAllocator(conf)
    live: dict[int, Any] = {}
    info: dict[int, tuple[int, int, bool]] = {}  # storage -> (bytes, bytes rounded to a block, persistent)
    order: list[int] = []  # persistent storages in allocation order
    # the allocated peak as the trace and the estimator count it: requests rounded to blocks
    # (round_size), not the simulator's blocks, which keep unsplit remainders
    allocated = peak_alloc = peak_reserved = 0
    at_peak: frozenset[int] = frozenset()
    for e in events:
        if e.tag in HOST_TAGS:
            continue
        if e.action == "alloc":
            live[e.storage] = a.malloc(e.nbytes, 0)
            keep = e.tag in PERSISTENT_TAGS
            info[e.storage] = (e.nbytes, round_size(e.nbytes, conf), keep)
            allocated += info[e.storage][1]
            if keep:
                order.append(e.storage)
            peak_reserved = max(peak_reserved, a.reserved)
            if allocated > peak_alloc:
                peak_alloc, at_peak = allocated, frozenset(live)
        elif e.storage in live:
            a.free(live.pop(e.storage))
            allocated -= info[e.storage][1]
    kept = [info[s][0] for s in order if s in at_peak]
    short = sum(info[s][1] for s in at_peak if not info[s][2])
    pers = persistent_reserved(kept, conf)
    slack = K_LARGE_BUFFER if conf.expandable_segments else K_LARGE_BUFFER + K_SMALL_BUFFER
    share = (peak_reserved - pers - min(slack, short) - short) / short if short else 0.0
    return dict(peak_reserved=peak_reserved, peak_allocated=peak_alloc, persistent_reserved=pers,
                short_lived=short, share=share)


def stats(xs: list[float]) -> str:
    return (f"n={len(xs):2d} min {min(xs):7.2%}  median {statistics.median(xs):7.2%}  "
            f"mean {statistics.fmean(xs):7.2%}  max {max(xs):7.2%}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", help="write the rows here")
    ap.add_argument("--only", help="run only the workloads whose name contains this")
    ap.add_argument("--layers", type=int, default=DERIVATION_LAYERS,
                    help=f"blocks per model (default {DERIVATION_LAYERS}, the derivation's)")
    args = ap.parse_args(argv)
    rows = []
    for name, cfg, fields in WORKLOADS:
        if args.only and args.only not in name:
            continue
        t0 = time.perf_counter()
        w = make_workload(mode="train", optimizer="adamw", **fields)
        events = trace(with_layers(cfg, args.layers), w, steps=2).events
        row: dict[str, Any] = {"name": name}
        for setting, conf in SETTINGS.items():
            row[setting] = allowance(events, conf)
        rows.append(row)
        print(f"{name:38s} short {row['default']['short_lived'] / 2**20:8.1f} MiB  "
              f"default {row['default']['share']:7.2%}  expandable {row['expandable']['share']:7.2%}  "
              f"({time.perf_counter() - t0:.1f} s)", flush=True)
    for setting in SETTINGS:
        print(f"\n{setting}: {stats([r[setting]['share'] for r in rows])}")
        for label, key in (("dtype", lambda n: n.split()[1]), ("ckpt", lambda n: "ckpt" in n),
                           ("lora", lambda n: "lora" in n), ("fused", lambda n: "fused" in n),
                           ("family", lambda n: n.split("-")[0])):
            groups: dict[Any, list[float]] = {}
            for r in rows:
                groups.setdefault(key(r["name"]), []).append(r[setting]["share"])
            for g, xs in sorted(groups.items(), key=lambda kv: str(kv[0])):
                print(f"  {label}={g!s:8s} {stats(xs)}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
