"""``vramlens.capacity(model, engine=..., gpu=...)``: the front door of the capacity package.

Resolves the model (catalog name, hub id, config, ModelSpec, a GGUF file or its GGUFInfo), the
GPU and the engine settings (each under the engine's own name, each bounded by vramlens.limits),
then hands them to the engine's module.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from vramlens import limits as L
from vramlens.advise.gguf_split import GGUFInfo
from vramlens.errors import ConfigError, InputError
from vramlens.hardware.gpu import GPU
from vramlens.models.spec import ModelSpec
from vramlens.safe_io import UnsafeJSON, loads_bounded
from vramlens.serving.common import ServedModel, served_from_gguf, served_from_spec
from vramlens.serving.llamacpp import llamacpp_capacity
from vramlens.serving.result import Capacity
from vramlens.serving.sglang import sglang_capacity
from vramlens.serving.transformers import transformers_capacity
from vramlens.serving.vllm import DTYPES, QUANTIZATIONS, vllm_capacity

ENGINES = ("vllm", "sglang", "llama.cpp", "transformers")
#: The keys of vLLM's ``--speculative-config`` vramlens reads (vllm/config/speculative.py SpeculativeConfig).
SPECULATIVE_KEYS = ("method", "model", "num_speculative_tokens")

#: Each engine's settings (its own names) -> (kind, bound): "int" bounded by limits, "int0" the
#: same from 0, "fraction" a float in (0, 1] checked by the engine, "bool", "model" (what ``model`` takes:
#: a draft), "speculative" (vLLM's ``--speculative-config``: a JSON object or dict, SPECULATIVE_KEYS), or a
#: choice string.
SETTINGS: dict[str, dict[str, tuple[str, int]]] = {
    "vllm": {"gpu_memory_utilization": ("fraction", 0), "max_model_len": ("int", L.MAX_POSITIONS),
             "max_num_seqs": ("int", L.MAX_BATCH), "max_num_batched_tokens": ("int", L.MAX_SEQ),
             "kv_cache_dtype": ("str", 0), "block_size": ("int", L.MAX_KV_BLOCK), "enforce_eager": ("bool", 0),
             "quantization": ("str", 0), "dtype": ("str", 0), "version": ("str", 0),
             "use_v1": ("bool", 0), "speculative_config": ("speculative", 0),
             "enable_prefix_caching": ("bool", 0), "mamba_cache_mode": ("str", 0)},
    "sglang": {"mem_fraction_static": ("fraction", 0), "chunked_prefill_size": ("int", L.MAX_SEQ),
               "max_running_requests": ("int", L.MAX_BATCH), "context_length": ("int", L.MAX_POSITIONS),
               "kv_cache_dtype": ("str", 0), "quantization": ("str", 0),
               "swa_full_tokens_ratio": ("fraction", 0), "page_size": ("int", L.MAX_KV_BLOCK),
               "version": ("str", 0), "speculative_algorithm": ("str", 0),
               "speculative_draft_model_path": ("model", 0),
               "speculative_num_steps": ("int", L.MAX_SPECULATIVE_TOKENS),
               "speculative_eagle_topk": ("int", L.MAX_SPECULATIVE_TOKENS),
               "speculative_num_draft_tokens": ("int", L.MAX_SPECULATIVE_TOKENS),
               "max_mamba_cache_size": ("int", L.MAX_BATCH), "mamba_ssm_dtype": ("str", 0)},
    "llama.cpp": {"ctx_size": ("int0", L.MAX_SEQ), "batch_size": ("int", L.MAX_SEQ), "ubatch_size": ("int", L.MAX_SEQ),
                  "n_gpu_layers": ("int0", L.MAX_LAYERS), "cache_type_k": ("str", 0), "cache_type_v": ("str", 0),
                  "flash_attn": ("bool", 0), "parallel": ("int", L.MAX_BATCH), "weights_type": ("str", 0)},
    "transformers": {"max_batch": ("int", L.MAX_BATCH), "quantization": ("str", 0)},
}


#: Engine settings that size a hybrid model's recurrent state (vLLM --mamba-cache-mode, SGLang
#: --max-mamba-cache-size / --mamba-ssm-dtype): named as ignored for a model without one.
HYBRID_ONLY = ("mamba_cache_mode", "max_mamba_cache_size", "mamba_ssm_dtype")


def capacity(model: str | dict | ModelSpec | GGUFInfo | ServedModel, engine: str = "vllm", *, gpu: str | GPU,
             gpus: int | None = None, tp: int = 1, pp: int = 1, context: int | None = None,
             trace_fallback: bool = True, **engine_settings: Any) -> Capacity:
    """What ``engine`` will do with the memory of each GPU when it serves ``model``.

    Args:
        model: a catalog name, hub id, config path or dict, a ModelSpec, a path to a ``.gguf``
            file (header only), or a GGUFInfo.
        engine: "vllm", "sglang", "llama.cpp" or "transformers".
        gpu: a GPU name from the catalog, a size ("24GB"), or a GPU.
        gpus: GPUs used (default tp x pp; llama.cpp: devices the layers are split over).
        tp, pp: tensor and pipeline parallel degrees.
        context: tokens per request for the concurrency and speed figures (default: the longest
            request the engine accepts).
        trace_fallback: for a ``model_type`` no family models, the weights are the exact inventory of
            the transformers model built on the meta device (needs the ``trace`` extra; cached on disk);
            False takes a generic Llama-style approximation of the config's standard fields instead.
        **engine_settings: the engine's own settings, e.g. ``gpu_memory_utilization=0.9`` (vLLM),
            ``mem_fraction_static=0.85`` (SGLang), ``n_gpu_layers=20`` (llama.cpp); speculative decoding:
            vLLM's ``speculative_config={"method": "eagle3", "model": DRAFT, "num_speculative_tokens": 3}``
            (or its JSON), SGLang's ``speculative_algorithm``, ``speculative_draft_model_path``,
            ``speculative_num_steps``, ``speculative_eagle_topk``, ``speculative_num_draft_tokens``
            (DRAFT: anything ``model`` takes, at the target's dtype); ``quantization``
            ("awq", "gptq", "fp8", "bitsandbytes") for vLLM, SGLang and transformers; vLLM's
            ``dtype`` ("auto", "float16", "bfloat16", "float32") and ``version`` (the release whose
            arithmetic to follow, "0.4" or later; default "0.19") and ``use_v1`` (VLLM_USE_V1 for 0.8-0.10);
            SGLang's ``version`` ("0.3.3" or later; default "0.5.3": its default mem_fraction_static,
            chunked_prefill_size and the NCCL communicator 0.3.3-0.4.6 make after reading the free memory);
            SGLang's hybrid mamba pool: ``max_mamba_cache_size``, ``mamba_ssm_dtype`` ("float32", "bfloat16");
            vLLM's ``enable_prefix_caching`` and ``mamba_cache_mode`` ("none", "align", "all"; 0.15 and later):
            a hybrid model's state blocks with prefix caching.

    Returns:
        A frozen Capacity (``.to_dict()`` for JSON).

    Raises:
        InputError: an unknown engine, setting, model or GPU, or a value over its bound.
        ConfigError: settings the engine refuses, each in the engine's words; a hybrid model (attention and
            recurrent-state blocks) in an engine or layout vramlens does not model.
        EngineRefusal: the engine would not start (no room for the KV cache, out of memory).
        MissingExtraError: an unmodelled ``model_type`` whose inventory is not cached, without torch.
    """
    if engine not in ENGINES:
        raise InputError(f"engine={L.show(engine)} is not one of {', '.join(ENGINES)}")
    tp = L.check_int("tp", tp, L.MAX_PARALLEL)
    pp = L.check_int("pp", pp, L.MAX_PARALLEL)
    n_gpus = L.check_int("gpus", gpus if gpus is not None else tp * pp, L.MAX_GPUS)
    if context is not None:
        context = L.check_int("context", context, L.MAX_SEQ)
    settings = check_settings(engine, engine_settings)
    if n_gpus < tp * pp and engine != "llama.cpp":
        raise InputError(f"gpus={n_gpus} is fewer than tp x pp = {tp * pp}: pass --gpus {tp * pp}")
    quant = settings.pop("quantization", None)
    served = resolve_model(model, quant=quant, engine=engine, dtype=DTYPES[settings.pop("dtype", "auto")],
                           trace_fallback=trace_fallback)
    from vramlens.hardware.catalog import as_gpu

    g = as_gpu(gpu)
    if g is None:
        raise InputError("capacity needs a GPU: give gpu='H100-SXM-80GB' (a catalog name) or a size such as '80GB'")
    common: dict[str, Any] = {"gpus": n_gpus, "tp": tp, "pp": pp, "context": context}
    draft_arg = (settings.get("speculative_config") or {}).get("model") if engine == "vllm" else (
        settings.get("speculative_draft_model_path") if engine == "sglang" else None)
    if engine in ("vllm", "sglang"):
        settings.pop("speculative_draft_model_path", None)
        # the draft runs at the target's dtype (vLLM SpeculativeConfig: dtype=target_model_config.dtype)
        common["draft"] = None
        if draft_arg is not None and draft_arg not in ("ngram", "[ngram]"):
            where = "speculative_config model" if engine == "vllm" else "speculative_draft_model_path"
            try:
                common["draft"] = resolve_model(draft_arg, engine=engine, dtype=served.dtype)
            except InputError as e:
                raise InputError(f"{where}: {e}") from None
    if engine == "vllm":
        cap = vllm_capacity(served, g, **common, **settings)
    elif engine == "sglang":
        cap = sglang_capacity(served, g, **common, **settings)
    elif engine == "llama.cpp":
        cap = llamacpp_capacity(served, g, **common, **settings)
    else:
        cap = transformers_capacity(served, g, **common, **settings)
    if served.source_notes:
        cap = replace(cap, notes=served.source_notes + cap.notes)
    fallback = g.capacity_note()
    if fallback is not None:  # the engines read CUDA's total (mem_get_info); the catalog has only nvidia-smi's
        cap = replace(cap, notes=cap.notes + (fallback,))
    alone = [k for k in engine_settings if k.replace("-", "_").startswith("speculative_") and engine_settings[k] is not None]
    if engine == "sglang" and alone and engine_settings.get("speculative_algorithm") is None:
        # SGLang 0.5.3 server_args reads the other speculative_* flags only under a speculative_algorithm
        cap = replace(cap, notes=cap.notes + (f"ignored: {', '.join(sorted(alone))} apply only with "
                                              "--speculative-algorithm (SGLang reads them under one)",))
    state_only = sorted(k for k in HYBRID_ONLY if engine_settings.get(k) is not None)
    if state_only and served.hybrid is None:  # a plain transformer has no recurrent state to size
        cap = replace(cap, notes=cap.notes + (f"ignored: {', '.join(state_only)} "
                                              f"{'applies' if len(state_only) == 1 else 'apply'} only to hybrid models (a "
                                              f"recurrent state per request); {served.name} has none",))
    if context is not None and context > cap.max_model_len:
        # the engine rejects a request longer than its limit: no concurrency or speed to give for it
        raise InputError(f"context={context:,} tokens is longer than the longest request {engine} accepts here "
                         f"({cap.max_model_len:,}: the model's context or the engine's length setting): lower "
                         "--context, or raise the engine's limit where the model allows it")
    return cap


def check_settings(engine: str, given: dict[str, Any]) -> dict[str, Any]:
    """The settings as the engine module takes them; every problem collected (ConfigError)."""
    known = SETTINGS[engine]
    out: dict[str, Any] = {}
    problems = []
    for key, value in given.items():
        name = key.replace("-", "_")
        if value is None:
            continue
        if name not in known:
            problems.append(f"{name} is not a {engine} setting: use {', '.join(known)}")
            continue
        kind, bound = known[name]
        try:
            if kind in ("int", "int0"):
                out[name] = L.check_int(name, value, bound, minimum=0 if kind == "int0" else 1)
            elif kind == "fraction":
                if isinstance(value, bool) or not isinstance(value, (int, float)) or isinstance(value, int) and abs(
                        value) > 2 or not math.isfinite(value):  # a 5,000-digit int overflows math.isfinite
                    raise InputError(f"{name}={L.show(value)} is not a number between 0 and 1")
                out[name] = float(value)
            elif kind == "model":
                if isinstance(value, str) and not 0 < len(value) <= L.MAX_MODEL_ARG:
                    raise InputError(f"{name}={L.show(value)} is not a model: give a catalog name or a config.json "
                                     f"path of at most {L.MAX_MODEL_ARG:,} characters")
                out[name] = value
            elif kind == "speculative":
                out[name] = speculative_config(value)
            elif kind == "bool":
                if not isinstance(value, bool):
                    raise InputError(f"{name}={L.show(value)} is not true or false")
                out[name] = value
            else:
                if not isinstance(value, str) or len(value) > 64:
                    flag = f"--{engine}-version" if name == "version" else "--" + name.replace("_", "-")
                    raise InputError(f"{name}={L.show(value)} is not a name: {flag} takes at most 64 characters")
                out[name] = value
        except InputError as e:
            problems.append(str(e))
    if "dtype" in out and out["dtype"] not in DTYPES:
        problems.append(f"dtype={L.show(out['dtype'])} is not one of {', '.join(DTYPES)} (vLLM --dtype)")
    if "quantization" in out and out["quantization"] not in QUANTIZATIONS:
        problems.append(f"quantization={L.show(out['quantization'])} is not one of {', '.join(QUANTIZATIONS)}")
    if problems:
        raise ConfigError(problems)
    return out


def speculative_config(value: Any) -> dict[str, Any]:
    """vLLM's ``--speculative-config`` as a dict of SPECULATIVE_KEYS, from a dict or its JSON text.

    Raises:
        InputError: not a JSON object, another key, or a value of the wrong type or over its bound
            (num_speculative_tokens below 1 is left for vLLM's own refusal).
    """
    flag = "--speculative-config"
    if isinstance(value, str):
        if len(value) > L.MAX_MODEL_ARG:
            raise InputError(f"speculative_config is {len(value):,} characters, over {L.MAX_MODEL_ARG:,}: give "
                             f"{flag} '{{\"method\": \"eagle3\", \"model\": DRAFT, \"num_speculative_tokens\": 3}}'")
        try:  # bounded: nesting, digits and NaN refused (a 2,000-deep list is a RecursionError in json.loads)
            value = loads_bounded(value)
        except UnsafeJSON as e:
            why = "" if e.kind == "syntax" else f" ({e})"
            raise InputError(f"speculative_config={L.show(value)} is not JSON{why}: give {flag} "
                             "'{\"method\": \"eagle3\", \"model\": DRAFT, \"num_speculative_tokens\": 3}'") from None
    if not isinstance(value, dict):
        raise InputError(f"speculative_config={L.show(value)} is not an object: give {flag} "
                         "'{\"method\": \"ngram\", \"num_speculative_tokens\": 3}'")
    extra = sorted(str(k) for k in value if k not in SPECULATIVE_KEYS)
    if extra:
        raise InputError(f"speculative_config key(s) {', '.join(map(L.show, extra))} not read by vramlens: "
                         f"give only {', '.join(SPECULATIVE_KEYS)}")
    method, model, n = value.get("method"), value.get("model"), value.get("num_speculative_tokens")
    if method is not None and (not isinstance(method, str) or len(method) > 64):
        raise InputError(f"speculative_config method={L.show(method)} is not a name (e.g. \"eagle3\")")
    if model is not None and not isinstance(model, (str, dict, ModelSpec, ServedModel)) or (
            isinstance(model, str) and not 0 < len(model) <= L.MAX_MODEL_ARG):
        raise InputError(f"speculative_config model={L.show(model)} is not a model: give a catalog name or a "
                         "config.json path")
    if n is not None and (isinstance(n, bool) or not isinstance(n, int)):
        raise InputError(f"speculative_config num_speculative_tokens={L.show(n)} is not a whole number")
    if isinstance(n, int) and n > L.MAX_SPECULATIVE_TOKENS:
        raise InputError(f"speculative_config num_speculative_tokens={L.show(n)} is over {L.MAX_SPECULATIVE_TOKENS:,}")
    return {k: value[k] for k in SPECULATIVE_KEYS if value.get(k) is not None}


def resolve_model(model: str | dict | ModelSpec | GGUFInfo | ServedModel, *, quant: str | None = None,
                  engine: str = "vllm", dtype: str | None = None, trace_fallback: bool = True) -> ServedModel:
    """A ServedModel from any model argument ``capacity`` takes (``trace_fallback``: see :func:`capacity`)."""
    if isinstance(model, ServedModel):
        return model
    if isinstance(model, GGUFInfo):
        return served_from_gguf(model)
    if isinstance(model, str) and model.lower().endswith(".gguf"):
        if engine != "llama.cpp":
            raise InputError(f"{L.show(model)} is a GGUF file: only --engine llama.cpp serves it")
        from vramlens.advise.gguf_header import read_gguf_file

        return served_from_gguf(read_gguf_file(model))
    if engine == "llama.cpp" and quant:
        raise InputError("llama.cpp takes its quantization from the GGUF file: pass a .gguf as MODEL")
    notes: tuple[str, ...] = ()
    if isinstance(model, ModelSpec):
        spec = model
    else:
        from vramlens.fallback import serving_spec
        from vramlens.models.catalog import whole_checkpoint_spec

        # vLLM builds the checkpoint's architecture (Llama4ForConditionalGeneration, Gemma3ForConditionalGeneration):
        # the vision tower and projector load with the text model, split over the TP ranks like it
        # (MultiModalConfig.mm_encoder_tp_mode "weights", vllm/config/multimodal.py)
        whole = whole_checkpoint_spec(model) if engine == "vllm" and isinstance(model, str) else None
        if whole is not None:
            spec = whole
        else:
            # an unmodelled model_type: the meta-device inventory (vramlens.fallback.serving_spec)
            spec, notes = serving_spec(model, trace_fallback=trace_fallback)
    if spec.kind != "decoder":
        raise InputError(f"{spec.name} is an {spec.kind} model: serving engines generate with decoders")
    # vLLM and SGLang serve a checkpoint's MXFP4 experts as they are; transformers dequantizes them
    served = served_from_spec(spec, dtype=dtype, quant=QUANTIZATIONS.get(quant or ""),
                              native_experts=engine in ("vllm", "sglang"))
    return replace(served, source_notes=notes) if notes else served


