"""Derive the reserve's allowance for short-lived tensors (allocator.analytic's *_LOSS_TENSOR_ALLOWANCE and
*_FRAGMENTATION).

Traces two training steps of each workload below with vramlens' tracer (fake tensors: tiny
llama-, GPT-2-, Qwen2- and BERT-shaped configs, each at DERIVATION_LAYERS = 4, 12 and 28 blocks;
fp32 / bf16 / fp32 + bf16 autocast;
batch 1-32, sequence 128-2048; no and full checkpointing; full and LoRA; AdamW foreach and
fused), replays each trace's events through the allocator simulator with PyTorch's default
settings and with ``expandable_segments:True``, and computes the share the analytic model has to
allow, in analytic.py's own terms:

* persistent: the storages kept all step (parameters, buffers, fp32 master weights, optimizer
  states), in the order they were allocated, packed by ``persistent_reserved``;
* short-lived: every other storage live at the allocated peak, its bytes rounded to blocks
  (what the estimator feeds ``transient_reserve``: peak allocated minus the persistent bytes);
* excess = replayed peak reserved - persistent_reserved - min(slack, short-lived) - short-lived,
  slack being the one partly used segment per pool that reserved_breakdown adds;
* per loss tensor = excess / the loss' largest tensor, the estimator's own figure
  (estimator.activations.largest_loss_tensor), which a training step's allowance multiplies;
* share = excess / short-lived, inference's allowance (a share of the short-lived bytes).

The excess follows the loss' largest tensor, not the short-lived bytes: its median per loss tensor
is about the same at every depth (0.64, 0.63, 0.77 with the default settings) and with or without
checkpointing, where the share falls with depth (16%, 13%, 9%) and more than doubles under
checkpointing (which shrinks the short-lived bytes, not the loss). In the replays it is the second
step's b*s*V loss tensors placed in new segments: the first step's segments for them were split by
gradients and optimizer states allocated after the loss was freed.

Prints one row per workload, depth and setting, then min / median / mean / max per setting and per
group (depth, dtype, checkpointing, method). Usage::

    PYTHONPATH=src python scripts/derive_fragmentation.py [--json OUT] [--only SUBSTRING] [--layers 4,12,28]
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
from vramlens.estimator.activations import largest_loss_tensor
from vramlens.models.inventory import spec_from_config
from vramlens.trace import trace
from vramlens.trace.events import HOST_TAGS
from vramlens.workload import Workload, make_workload

#: Tags of the storages the estimator treats as kept all step (estimator.state's persistent parts).
PERSISTENT_TAGS = frozenset({"parameter", "buffer", "master_weight", "optimizer_state"})
SETTINGS = {"default": None, "expandable": "expandable_segments:True"}
#: Blocks per traced model in the derivation (the configs below are written with 4): every workload at each.
DERIVATION_LAYERS = (4, 12, 28)


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


def loss_tensor(cfg: dict[str, Any], w: Workload) -> int:
    """The estimator's largest loss tensor of ``w`` on the model of ``cfg``, bytes."""
    return largest_loss_tensor(spec_from_config(cfg, name="derivation"), w, w.batch, w.seq)


def workload(fields: dict[str, Any]) -> Workload:
    """The derivation's training workload with these fields."""
    return make_workload(mode="train", optimizer="adamw", **fields)


def allowance(events, alloc_conf: str | None, loss_bytes: int = 0) -> dict[str, float | int]:
    """Replay ``events`` and return what the analytic model must allow (module docstring); ``loss_bytes``: the
    loss' largest tensor (0: no per-loss-tensor figure)."""
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
    excess = peak_reserved - pers - min(slack, short) - short
    return dict(peak_reserved=peak_reserved, peak_allocated=peak_alloc, persistent_reserved=pers,
                short_lived=short, excess=excess, share=excess / short if short else 0.0,
                per_loss_tensor=excess / loss_bytes if loss_bytes else 0.0)


def stats(xs: list[float]) -> str:
    return (f"n={len(xs):2d} min {min(xs):6.3f}  median {statistics.median(xs):6.3f}  "
            f"mean {statistics.fmean(xs):6.3f}  max {max(xs):6.3f}")


def medians(rows: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per setting, the medians of the rows' per-loss-tensor excess and share."""
    return {s: {k: statistics.median(r[s][k] for r in rows) for k in ("per_loss_tensor", "share")} for s in SETTINGS}


def derive(layers: tuple[int, ...] = DERIVATION_LAYERS, only: str | None = None,
           echo: bool = False) -> list[dict[str, Any]]:
    """Trace and replay every workload at every depth in ``layers``: one row each."""
    rows = []
    for n_layers in layers:
        for name, cfg, fields in WORKLOADS:
            if only and only not in name:
                continue
            t0 = time.perf_counter()
            w, c = workload(fields), with_layers(cfg, n_layers)
            events = trace(c, w, steps=2).events
            loss = loss_tensor(c, w)
            row: dict[str, Any] = {"name": name, "layers": n_layers, "loss_tensor": loss}
            for setting, conf in SETTINGS.items():
                row[setting] = allowance(events, conf, loss)
            rows.append(row)
            if echo:
                d, e = row["default"], row["expandable"]
                print(f"{name:36s} L={n_layers:2d} short {d['short_lived'] / 2**20:7.0f} MiB  loss tensor "
                      f"{loss / 2**20:6.0f} MiB  default {d['per_loss_tensor']:6.3f} ({d['share']:6.1%})  "
                      f"expandable {e['per_loss_tensor']:6.3f} ({e['share']:6.1%})  "
                      f"({time.perf_counter() - t0:.1f} s)", flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", help="write the rows here")
    ap.add_argument("--only", help="run only the workloads whose name contains this")
    ap.add_argument("--layers", default=",".join(map(str, DERIVATION_LAYERS)),
                    help=f"blocks per model, comma-separated (default {DERIVATION_LAYERS}, the derivation's)")
    args = ap.parse_args(argv)
    rows = derive(tuple(int(n) for n in args.layers.split(",")), args.only, echo=True)
    for setting in SETTINGS:
        for what in ("per_loss_tensor", "share"):
            print(f"\n{setting} {what}: {stats([r[setting][what] for r in rows])}")
            for label, key in (("layers", lambda r: r["layers"]), ("dtype", lambda r: r["name"].split()[1]),
                               ("ckpt", lambda r: "ckpt" in r["name"]), ("lora", lambda r: "lora" in r["name"]),
                               ("fused", lambda r: "fused" in r["name"]), ("family", lambda r: r["name"].split("-")[0])):
                groups: dict[Any, list[float]] = {}
                for r in rows:
                    groups.setdefault(key(r), []).append(r[setting][what])
                for g, xs in sorted(groups.items(), key=lambda kv: str(kv[0])):
                    print(f"  {label}={g!s:8s} {stats(xs)}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
