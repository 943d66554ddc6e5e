"""The serving advisor: the cheapest GPUs, tensor parallel degree, weight format and KV dtype
that serve ``users`` requests of ``context`` tokens at once (and, when asked, ``tokens_per_s``
decode speed per request) in vLLM or SGLang.

Each candidate is one call of :func:`vramlens.serving.capacity` with the plan's settings
(``max_model_len`` = context and ``max_num_seqs`` = users, so concurrency and speed are what the
engine would give those users); a plan serves when the engine starts, its cache holds ``users``
requests of ``context`` tokens, and the decode roofline at ``users`` running requests meets
``tokens_per_s``. Plans rank by GPU count, then GPU memory (a price-free proxy for cost; at equal
memory the lower bandwidth first), then the least lossy format (16-bit before fp8 before AWQ, model-dtype cache before fp8).
The search checks the time budget between candidates (vramlens.advise.budget).
"""

from __future__ import annotations

from dataclasses import dataclass

from vramlens import limits as L
from vramlens.advise.budget import Budget, stopped_line
from vramlens.errors import ConfigError, EngineRefusal, InputError
from vramlens.hardware.gpu import GPU
from vramlens.serving.result import Capacity

#: Catalog GPUs tried when none is given: one of each memory size in common rental use.
DEFAULT_GPUS = ("L4", "L40S", "A100-80GB", "H100-SXM-80GB", "H200-141GB")
#: Tensor parallel degrees tried (GPUs in one node).
TP_DEGREES = (1, 2, 4, 8)
#: Weight formats in order of preference: None = the checkpoint's 16-bit dtype.
WEIGHT_FORMATS = (None, "fp8", "awq")
#: fp8 weights need FP8 tensor cores (vLLM's fp8 linear: compute capability 8.9+).
FP8_ARCHS = ("ada", "hopper", "blackwell")
#: Each engine's flag for an fp8 KV cache.
KV_FP8 = {"vllm": "fp8", "sglang": "fp8_e4m3"}
PLAN_ENGINES = ("vllm", "sglang")


@dataclass(frozen=True, slots=True)
class ServingPlan:
    """One way to serve the load, with the command line that starts it."""

    gpu: str
    gpus: int
    tp: int
    quantization: str | None
    kv_cache_dtype: str
    concurrency: float
    decode_tokens_s: float
    decode_tokens_s_total: float
    flags: str
    capacity: Capacity

    def to_dict(self) -> dict:
        return {"gpu": self.gpu, "gpus": self.gpus, "tp": self.tp, "quantization": self.quantization or "none",
                "kv_cache_dtype": self.kv_cache_dtype, "concurrency": round(self.concurrency, 4),
                "decode_tokens_s": round(self.decode_tokens_s, 3),
                "decode_tokens_s_total": round(self.decode_tokens_s_total, 3), "flags": self.flags}


@dataclass(frozen=True, slots=True)
class CapacityPlan:
    """The plans that serve the load, best first; ``stopped`` says when the budget cut the search."""

    model: str
    engine: str
    users: int
    context: int
    tokens_per_s: float | None
    plans: tuple[ServingPlan, ...]
    examined: int
    candidates: int
    stopped: str | None = None
    #: where the model's weights came from when no family models it (ServedModel.source_notes)
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        return {"model": self.model, "engine": self.engine, "users": self.users, "context": self.context,
                "tokens_per_s": self.tokens_per_s, "plans": [p.to_dict() for p in self.plans],
                "examined": self.examined, "candidates": self.candidates, "stopped": self.stopped,
                "notes": list(self.notes)}


def plan_capacity(model, *, users: int, context: int, engine: str = "vllm", gpu: str | GPU | None = None,
                  tokens_per_s: float | None = None, max_gpus: int = 8, top: int = 5,
                  budget_s: float | None = L.SEARCH_BUDGET_S, trace_fallback: bool = True) -> CapacityPlan:
    """The cheapest plans that serve ``users`` requests of ``context`` tokens.

    Args:
        model: what :func:`vramlens.serving.capacity` takes (not a GGUF: llama.cpp has no plans here).
        users: requests served at once.
        context: tokens per request (prompt + output); becomes the engine's longest request.
        engine: "vllm" or "sglang".
        gpu: the GPU to plan for; None tries DEFAULT_GPUS.
        tokens_per_s: decode tokens/s each request needs, or None.
        max_gpus: most GPUs per plan (tensor parallel degrees 1, 2, 4, 8 up to it).
        top: plans returned.
        budget_s: seconds the search may take (vramlens.limits.SEARCH_BUDGET_S).
        trace_fallback: as :func:`vramlens.serving.capacity`.

    Returns:
        A CapacityPlan; its ``plans`` are empty when nothing within ``max_gpus`` serves the load.

    Raises:
        InputError: an engine without plans, or a value over its bound.
    """
    from vramlens.hardware.catalog import get_gpu
    from vramlens.serving.api import capacity, resolve_model

    if engine not in PLAN_ENGINES:
        raise InputError(f"engine={L.show(engine)} has no serving plans: use {' or '.join(PLAN_ENGINES)}")
    users = L.check_int("users", users, L.MAX_BATCH)
    context = L.check_int("context", context, L.MAX_SEQ)
    max_gpus = L.check_int("max_gpus", max_gpus, L.MAX_GPUS)
    top = L.check_int("top", top, L.MAX_TOP)
    if tokens_per_s is not None and (isinstance(tokens_per_s, bool) or not isinstance(tokens_per_s, (int, float))
                                     or not 0 < tokens_per_s < float("inf")):
        raise InputError(f"tokens_per_s={L.show(tokens_per_s)} must be a number of tokens per second > 0")
    budget = Budget.begin(budget_s)
    gpus = [get_gpu(gpu) if isinstance(gpu, str) else gpu] if gpu is not None else [get_gpu(n) for n in DEFAULT_GPUS]
    served = resolve_model(model, engine=engine, trace_fallback=trace_fallback)
    candidates = [(g, tp, q, kv) for g in gpus for tp in TP_DEGREES if tp <= max_gpus and served.n_heads % tp == 0
                  for q in WEIGHT_FORMATS if q != "fp8" or g.arch in FP8_ARCHS for kv in ("auto", KV_FP8[engine])]
    # equal memory: the lower-bandwidth (older, cheaper) GPU first
    candidates.sort(key=lambda c: (c[1], c[0].memory_bytes, c[0].bandwidth_bytes_s, WEIGHT_FORMATS.index(c[2]),
                                   c[3] != "auto"))
    found: list[ServingPlan] = []
    examined = 0
    stopped = None
    for g, tp, q, kv in candidates:
        if examined and budget.spent():
            stopped = stopped_line(budget.seconds, examined, len(candidates))
            break
        examined += 1
        if len(found) >= top:
            break  # candidates come in rank order: every later one ranks below these
        settings = _settings(engine, users, context, kv)
        try:
            # the resolved model serves the 16-bit plans; a quantized one is resolved with its format
            cap = capacity(served if q is None else model, engine, gpu=g, tp=tp, context=context, quantization=q,
                           trace_fallback=trace_fallback, **settings)
        except (ConfigError, EngineRefusal):
            continue
        if cap.concurrency < users or (tokens_per_s is not None and cap.decode_tokens_s < tokens_per_s):
            continue
        found.append(ServingPlan(g.name, tp, tp, q, kv, cap.concurrency, cap.decode_tokens_s,
                                 cap.decode_tokens_s_total, _flags(engine, served.name, tp, q, kv, users, context,
                                                                   settings), cap))
    return CapacityPlan(served.name, engine, users, context, tokens_per_s, tuple(found[:top]), examined,
                        len(candidates), stopped, served.source_notes)


def _settings(engine: str, users: int, context: int, kv: str) -> dict:
    if engine == "vllm":
        # max_num_batched_tokens must cover max_num_seqs (vLLM SchedulerConfig): raise it with the users
        mnbt = max(context if context <= 32_768 else 2048, 2048, users)
        return {"max_model_len": context, "max_num_seqs": users, "max_num_batched_tokens": mnbt, "kv_cache_dtype": kv}
    return {"context_length": context, "max_running_requests": users, "kv_cache_dtype": kv}


def _flags(engine: str, name: str, tp: int, q: str | None, kv: str, users: int, context: int, settings: dict) -> str:
    if engine == "vllm":
        parts = [f"vllm serve {name}", f"--tensor-parallel-size {tp}", f"--max-model-len {context}",
                 f"--max-num-seqs {users}", f"--max-num-batched-tokens {settings['max_num_batched_tokens']}"]
        # always written: V1's default (8192 on >= 70 GiB GPUs, else 2048) differs from the plan's
        parts += [f"--quantization {q}"] if q else []
        parts += [f"--kv-cache-dtype {kv}"] if kv != "auto" else []
        parts.append("--gpu-memory-utilization 0.9")
    else:
        parts = [f"python -m sglang.launch_server --model-path {name}", f"--tp {tp}", f"--context-length {context}",
                 f"--max-running-requests {users}"]
        parts += [f"--quantization {q}"] if q else []
        parts += [f"--kv-cache-dtype {kv}"] if kv != "auto" else []
    line = " ".join(parts)
    return line + ("  # an AWQ checkpoint of the model" if q == "awq" else "")
