"""A generic Llama-style decoder of about N parameters, for ``--params 7B`` without a model.

The shape is read off real checkpoints (:data:`SHAPES`): hidden size and depth are
interpolated in log-parameter space between the two neighbours of the request, the head
size is 64 below hidden 1536 and 128 above (as in those models), the hidden size a
multiple of 2 heads (8 from 4096 up), the GQA ratio the nearer neighbour's, and the MLP width is then solved so that the count lands on the
request. The vocabulary is Llama 2's 32,000 and embeddings are untied. Every chosen
dimension is recorded in ``ModelSpec.assumed``.
"""

from __future__ import annotations

import dataclasses
import math
from functools import lru_cache

from vramlens.errors import InputError
from vramlens.limits import MAX_PARAMS
from vramlens.models.inventory import spec_from_config
from vramlens.models.spec import ModelSpec
from vramlens.units import human_count, parse_count

#: (name, hidden, layers, heads, kv_heads, ffn) of real Llama-style checkpoints, by size
#: (their config.json files; the larger ones are in the catalog).
SHAPES: tuple[tuple[str, int, int, int, int, int], ...] = (
    ("SmolLM-135M", 576, 30, 9, 3, 1536),
    ("SmolLM-360M", 960, 32, 15, 5, 2560),
    ("TinyLlama-1.1B", 2048, 22, 32, 4, 5632),
    ("Llama-3.2-3B", 3072, 28, 24, 8, 8192),
    ("Llama-2-7B", 4096, 32, 32, 32, 11_008),
    ("Llama-2-13B", 5120, 40, 40, 40, 13_824),
    ("Qwen2.5-32B", 5120, 64, 40, 8, 27_648),
    ("Llama-2-70B", 8192, 80, 64, 8, 28_672),
    ("Llama-3.1-405B", 16_384, 126, 128, 8, 53_248),
)
VOCAB = 32_000  # Llama 2's tokenizer
MIN_PARAMS = 50_000_000  # below this the 32k-vocabulary embeddings alone exceed the request


def llama_params(h: int, L: int, a: int, kv: int, f: int, V: int = VOCAB) -> int:
    """Parameters of an untied Llama decoder: 2Vh + h + L (2h·a·d + 2h·kv·d + 3hf + 2h), d = h/a."""
    d = h // a
    per_layer = 2 * h * a * d + 2 * h * kv * d + 3 * h * f + 2 * h
    return 2 * V * h + h + L * per_layer


def _row_params(row: tuple[str, int, int, int, int, int]) -> int:
    _, h, L, a, kv, f = row
    return llama_params(h, L, a, kv, f)


def generic_dims(n: int) -> tuple[dict[str, int], str]:
    """(hidden, layers, heads, kv_heads, ffn) for about ``n`` parameters, and how they were chosen."""
    counts = [_row_params(r) for r in SHAPES]
    if n <= counts[0]:
        lo = hi = 0
        t = 0.0
    elif n >= counts[-1]:
        lo = hi = len(SHAPES) - 1
        t = 0.0
    else:
        hi = next(i for i, c in enumerate(counts) if c >= n)
        lo = hi - 1
        t = (math.log(n) - math.log(counts[lo])) / (math.log(counts[hi]) - math.log(counts[lo]))
    r0, r1 = SHAPES[lo], SHAPES[hi]
    # Beyond the largest shape, width and depth grow together (params ~ 12·L·h², so each by the
    # cube root of the ratio): depth alone would pass MAX_LAYERS near 13T, at MAX_PARAMS
    # (100T) this gives h ~ 103k and L ~ 800, inside the bounds.
    grow = (n / counts[-1]) ** (1 / 3) if n > counts[-1] else 1.0
    h_raw = grow * math.exp((1 - t) * math.log(r0[1]) + t * math.log(r1[1]))
    d = 64 if h_raw < 1536 else 128
    step = d * (8 if h_raw >= 4096 else 2)  # head counts that split evenly over 8 (or 2) GPUs
    h = max(step, round(h_raw / step) * step)
    a = h // d
    near = r0 if t < 0.5 else r1
    want = a * near[4] / near[3]
    kv = min((k for k in range(1, a + 1) if a % k == 0), key=lambda k: (abs(k - want), k))
    f_ratio = (1 - t) * r0[5] / r0[1] + t * r1[5] / r1[1]
    f = max(256, round(h * f_ratio / 256) * 256)
    fixed = 2 * VOCAB * h + h
    per_layer = llama_params(h, 1, a, kv, f) - fixed
    L = max(1, round((n - fixed) / per_layer))
    # Solve the MLP width for the exact depth so that the count lands on the request.
    attn_norm = llama_params(h, 1, a, kv, 0) - fixed
    f = max(64, round((n - fixed - L * attn_norm) / (3 * h * L) / 64) * 64)
    how = (f"from {r0[0]}" if lo == hi else f"between {r0[0]} and {r1[0]}")
    if grow >= 1.005:
        how += f", widened and deepened {grow:.2f}x"
    return dict(hidden_size=h, num_hidden_layers=L, num_attention_heads=a, num_key_value_heads=kv,
                intermediate_size=f), how


@lru_cache(maxsize=64)
def generic_spec(params: str | int) -> ModelSpec:
    """A Llama-style decoder of about ``params`` parameters (``"7B"``, ``"350M"``, 7_000_000_000).

    Raises:
        InputError: ``params`` is not a count, is below 50M or above MAX_PARAMS.
    """
    n = parse_count(params, what="params", limit=MAX_PARAMS)
    if n < MIN_PARAMS:
        raise InputError(f"params={params!r} is below {human_count(MIN_PARAMS)}, the smallest generic "
                         f"decoder: use a catalog name or a config.json for tiny models")
    dims, how = generic_dims(n)
    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
        "max_position_embeddings": 4096, "rms_norm_eps": 1e-05, "tie_word_embeddings": False,
        "torch_dtype": "bfloat16", "vocab_size": VOCAB, **dims,
    }
    label = str(params).strip() if isinstance(params, str) else human_count(n)
    spec = spec_from_config(config, name=f"generic-{label}", source="generic")
    notes = [f"generic Llama-style decoder for params={label} ({human_count(spec.params)} built), "
             f"shape interpolated {how} (vramlens.models.generic.SHAPES)"]
    notes += [f"{k}={v}" for k, v in dims.items()]
    notes += [f"vocab_size={VOCAB}", "tie_word_embeddings=false", "max_position_embeddings=4096"]
    return dataclasses.replace(spec, assumed=tuple(notes))
