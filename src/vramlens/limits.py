"""Upper bounds on every input vramlens reads: the one home for them (SECURITY.md lists them).

Each bound is far above what any real model or run uses (the margin is stated beside it), and
low enough that work proportional to the value (tensors built per layer, a divisor search, a
header read into memory) stays bounded in time and memory. A value over its bound is refused
where it is parsed, with one line naming the field, the value and the limit (``check_int``),
so that every entry point (CLI, API, web, files) gets the same rule.
"""

from __future__ import annotations

import math
from typing import Any

from vramlens.errors import InputError

# ---- model dimensions (config.json, GGUF metadata, --params) -------------------------------
#: Transformer blocks. Largest published: 126 (Llama-3.1-405B), 160 (PaLM-540B has 118).
MAX_LAYERS = 4_096
#: Model width. Largest published: 18,432 (PaLM), 16,384 (Llama-3.1-405B), 25,600 (MT-NLG 20,480).
MAX_HIDDEN = 262_144
#: MLP width (and any other per-layer width). Largest published: 73,728 (PaLM), 53,248 (405B).
MAX_INTERMEDIATE = 2_097_152
#: Attention heads (query or key/value). Largest published: 128 (405B, DeepSeek-V3).
MAX_HEADS = 16_384
#: Vocabulary. Largest published: 262,144 (Gemma 3), 256,000 (Gemma, BLOOM 250,880).
MAX_VOCAB = 16_777_216
#: Experts per MoE layer. Largest published: 384 (Kimi K2), 256 (DeepSeek-V3).
MAX_EXPERTS = 65_536
#: Context length a config may declare. Largest published: 10,485,760 (Llama 4 Scout).
MAX_POSITIONS = 1_073_741_824
#: Parameters of a model (``--params``, or a whole inventory). Largest published: 2T (Kimi K2 is 1T).
MAX_PARAMS = 100 * 10**12
#: Elements of one tensor. Largest real tensor: about 4e9 (a 262k x 16k embedding).
MAX_TENSOR_NUMEL = 2**45
#: Tensors in one checkpoint or GGUF file. Largest published checkpoints hold < 100,000.
MAX_TENSORS = 1_000_000

# ---- the run (Workload and the fit/place questions) ----------------------------------------
#: Micro-batch per GPU.
MAX_BATCH = 1_048_576
#: Tokens per sequence (prompt, or prompt + new tokens). 2**30 is 100x the longest context.
MAX_SEQ = 1_073_741_824
#: Pixels on a side of an image a vision encoder sees: 16,384 is 16x the 1,024 of the largest released
#: ViT inputs (SigLIP so400m: 384; ViT-H/14 at 518), and a 16,384^2 image at patch 14 is 1.4M tokens.
MAX_IMAGE_SIDE = 16_384
#: Seconds of audio in one sample a speech model hears (Whisper: ceil(S / 30) windows of 1,500 positions).
#: 360,000 s is 100 hours, 12,000 windows: longer than any recording transcribed in one call.
MAX_AUDIO_SECONDS = 360_000

#: Images per sample fed to a vision-language model: 1,024 is 10x the longest multi-image prompts
#: (video frames as images: 64 to 100), and 1,024 LLaVA-1.5 images are 589,824 tokens.
MAX_IMAGES = 1_024
#: Gradient accumulation steps.
MAX_GRAD_ACCUM = 1_048_576
#: GPUs in one job. The largest training clusters have about 200,000.
MAX_GPUS = 1_048_576
#: Tensor / pipeline parallel degree.
MAX_PARALLEL = 65_536
#: LoRA rank (also bounded by the smaller side of each adapted matrix).
MAX_LORA_RANK = 65_536
#: Paged KV cache block, tokens (vLLM uses 16; 65,536 is far beyond any engine).
MAX_KV_BLOCK = 65_536
#: Largest quantization group (weights per scale); groups are at most one row (hidden sizes stay under MAX_HIDDEN).
MAX_QUANT_GROUP = MAX_HIDDEN
#: Effective batch that `fit --effective-batch` is asked to reach.
MAX_EFFECTIVE_BATCH = MAX_BATCH * MAX_GRAD_ACCUM
#: A network or interconnect bandwidth, bytes/s (NVLink 5 is 1.8e12; 1e15 is 500x that).
MAX_BANDWIDTH = 10**15
#: Speculative tokens, steps or draft tokens per step: 1,024 is 16x SGLang's largest default tree
#: (64 draft tokens in its EAGLE examples) and 100x the few tokens vLLM's drafts propose.
MAX_SPECULATIVE_TOKENS = 1_024
#: Rows of a "top N" listing (fit's plans, trace's tensors, a snapshot's source lines).
MAX_TOP = 10_000
#: Length of a GPU name or size ("NVIDIA H100 80GB HBM3" is 20).
MAX_GPU_NAME = 100
#: Length of a model argument (name, hub id or path). PATH_MAX on Linux is 4,096.
MAX_MODEL_ARG = 4_096
#: Seconds a search (`fit`, `place`, inverse questions) may run before returning what it has.
SEARCH_BUDGET_S = 10.0

# ---- files ---------------------------------------------------------------------------------
#: A config.json (real ones are a few KiB; with an embedded tokenizer map, < 1 MiB).
MAX_CONFIG_BYTES = 8 * 1024 * 1024
#: Nesting of JSON objects and arrays in config.json / memory_stats (real ones: < 5).
MAX_JSON_DEPTH = 64
#: Digits of an integer in any JSON or text input (CPython refuses > 4,300 with a ValueError).
MAX_INT_DIGITS = 30
#: A safetensors header (the safetensors library itself refuses headers over 100,000,000 bytes).
MAX_SAFETENSORS_HEADER = 100_000_000
#: Shard files named by a ``*.safetensors.index.json``.
MAX_SHARDS = 100_000
#: GGUF metadata key/value pairs (llama.cpp's files hold < 100).
MAX_GGUF_KV = 65_536
#: One GGUF string (a chat template is < 64 KiB; a tokenizer token is a few bytes).
MAX_GGUF_STRING = 16 * 1024 * 1024
#: Elements of one GGUF metadata array (a 262k vocabulary's tokens, scores and merges).
MAX_GGUF_ARRAY = 16_777_216
#: Length of a GGUF key or tensor name (gguf.md: keys are at most 2**16 - 1 bytes; ggml names < 64).
MAX_GGUF_KEY = 65_535
#: Arrays nested in arrays in GGUF metadata (gguf.md allows it; no llama.cpp file nests at all).
MAX_GGUF_ARRAY_DEPTH = 8
#: Dimensions of one GGUF tensor (ggml's GGML_MAX_DIMS is 4).
MAX_GGUF_DIMS = 4
#: A memory snapshot pickle (a 100,000-entry history with stacks is about 200 MB).
MAX_SNAPSHOT_BYTES = 2 * 1024**3
#: Nesting of containers in a snapshot pickle.
MAX_PICKLE_DEPTH = 64
#: A CUDA device index in a snapshot (one process sees at most 16-72 GPUs; 65,535 is far beyond).
MAX_DEVICE_INDEX = 65_535
#: Any byte count in a snapshot or memory_stats (1 PiB: no device comes close).
MAX_DEVICE_BYTES = 2**50


def check_int(what: str, value: Any, limit: int, *, minimum: int = 1, fix: str = "") -> int:
    """``value`` as an int in [minimum, limit], or InputError naming the field, value and limit.

    Accepts whole floats (``4096.0``: JSON writers emit them) but not bools, NaN or infinities.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputError(f"{what}={show(value)} is not a whole number{_fix(fix)}")
    if isinstance(value, float):
        if not math.isfinite(value) or not value.is_integer():
            raise InputError(f"{what}={show(value)} is not a whole number{_fix(fix)}")
    n = int(value)
    if n < minimum:
        raise InputError(f"{what}={show(n)} must be >= {minimum}{_fix(fix)}")
    if n > limit:
        raise InputError(f"{what}={show(n)} is over the limit of {limit:,}{_fix(fix)}")
    return n


def check_bool(what: str, value: Any) -> bool:
    """``value`` when it is True or False, else InputError: a truthy 1, "no" or [0] is not taken for a switch."""
    if not isinstance(value, bool):
        raise InputError(f"{what}={show(value)} must be true or false")
    return value


def over(value: Any, limit: int) -> bool:
    """True when ``value`` is a number above ``limit`` (NaN counts as over)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    if isinstance(value, float) and not math.isfinite(value):
        return True
    return value > limit


def _fix(fix: str) -> str:
    return f": {fix}" if fix else ""


def show(value: Any) -> str:
    """How a bad value is named in a message: its repr, cut short when huge (a 5,000-digit integer
    stays one readable line)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 100:
        return f"a {len(str(abs(value))) if value.bit_length() < 14_000 else 'many'}-digit number"
    text = repr(value)
    return text if len(text) <= 80 else text[:60] + f"...({len(text)} chars)"
