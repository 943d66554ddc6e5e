"""`vramlens capacity`: what a serving engine will do with each GPU's memory, in its own log's terms."""

from __future__ import annotations

import argparse

from vramlens.cli.options import bounded, print_json, whole_number
from vramlens.limits import MAX_GPUS

EXAMPLES = """examples:
  vramlens capacity llama-2-7b --engine vllm --gpu A100-80GB --context 4096
  vramlens capacity llama-3.1-70b --engine vllm --gpu H100-SXM-80GB --tp 4 --max-model-len 32768 --kv-cache-dtype fp8
  vramlens capacity qwen2.5-7b --engine sglang --gpu L40S --mem-fraction-static 0.85 --json
  vramlens capacity ./model.Q4_K_M.gguf --engine llama.cpp --gpu RTX-4090 --ctx-size 8192 --flash-attn
  vramlens capacity llama-3.1-8b --engine vllm --gpu H100-SXM-80GB --speculative-config '{"method": "ngram", "num_speculative_tokens": 3}'
  vramlens capacity llama-3.1-8b --engine sglang --gpu H100-SXM-80GB --speculative-algorithm STANDALONE --speculative-draft-model-path llama-3.2-1b
  vramlens capacity llama-3.1-70b --users 32 --context 8192 --tokens-per-s 20 --engine vllm
"""

#: flag -> (setting, engines that take it, argparse options). The engines' own flag names; argparse keeps
#: each under the flag's own name (:func:`arg_name`), as --vllm-version and --sglang-version set one setting.
FLAGS: tuple[tuple[str, str, tuple[str, ...], dict], ...] = (
    ("--gpu-memory-utilization", "gpu_memory_utilization", ("vllm",), {"type": float, "metavar": "F",
                                  "help": "vLLM: share of the GPU it may use (default 0.9)"}),
    ("--max-model-len", "max_model_len", ("vllm",), {"type": int, "metavar": "N",
                         "help": "vLLM: longest request (default: the model's context)"}),
    ("--max-num-seqs", "max_num_seqs", ("vllm",), {"type": int, "metavar": "N",
                        "help": "vLLM: running requests cap (V1: 1024 on >= 70 GiB GPUs, else 256)"}),
    ("--max-num-batched-tokens", "max_num_batched_tokens", ("vllm",), {"type": int, "metavar": "N",
                                  "help": "vLLM: tokens per step, the profile run's size"}),
    ("--block-size", "block_size", ("vllm",), {"type": int, "metavar": "N", "help": "vLLM: tokens per KV block (16)"}),
    ("--dtype", "dtype", ("vllm",), {"metavar": "T", "help": "vLLM: auto, float16, bfloat16, float32 (auto)"}),
    ("--vllm-version", "version", ("vllm",), {"metavar": "V",
                        "help": "vLLM: the release whose arithmetic to follow, 0.4 or later (0.19)"}),
    ("--enforce-eager", "enforce_eager", ("vllm",), {"action": "store_true", "default": None,
                         "help": "vLLM: no CUDA graphs"}),
    ("--enable-prefix-caching", "enable_prefix_caching", ("vllm",), {"action": "store_true", "default": None,
                                 "help": "vLLM: prefix caching (off by default for hybrid models; changes their "
                                         "state blocks)"}),
    ("--mamba-cache-mode", "mamba_cache_mode", ("vllm",), {"metavar": "M",
                            "help": "vLLM 0.15+: a hybrid's state cache with prefix caching: none, align or all "
                                    "(default all for Mamba hybrids, align for the others)"}),
    ("--speculative-config", "speculative_config", ("vllm",), {"metavar": "JSON",
                              "help": "vLLM: speculative decoding, e.g. '{\"method\": \"eagle3\", \"model\": DRAFT, "
                                      "\"num_speculative_tokens\": 3}' (methods eagle, eagle3, mtp, ngram, "
                                      "draft_model; DRAFT a catalog name or config.json)"}),
    ("--speculative-algorithm", "speculative_algorithm", ("sglang",), {"metavar": "A",
                                 "help": "SGLang: EAGLE, EAGLE3, NEXTN, STANDALONE or NGRAM"}),
    ("--speculative-draft-model-path", "speculative_draft_model_path", ("sglang",), {"metavar": "DRAFT",
                                        "help": "SGLang: the draft (catalog name or config.json)"}),
    ("--speculative-num-steps", "speculative_num_steps", ("sglang",), {"type": int, "metavar": "N",
                                 "help": "SGLang: draft steps (default by architecture: 5, DeepSeek 3)"}),
    ("--speculative-eagle-topk", "speculative_eagle_topk", ("sglang",), {"type": int, "metavar": "N",
                                  "help": "SGLang: draft branches per step (default 4, DeepSeek 1)"}),
    ("--speculative-num-draft-tokens", "speculative_num_draft_tokens", ("sglang",), {"type": int, "metavar": "N",
                                        "help": "SGLang: tokens verified per step (default 8, DeepSeek 4)"}),
    ("--kv-cache-dtype", "kv_cache_dtype", ("vllm", "sglang"), {"metavar": "T",
                          "help": "vLLM: auto, fp8, fp8_e4m3, fp8_e5m2; SGLang: auto, fp8_e4m3, fp8_e5m2"}),
    ("--quantization", "quantization", ("vllm", "sglang", "transformers"), {"metavar": "Q",
                        "help": "awq, gptq, fp8 or bitsandbytes (weights by vramlens' quantization formulas)"}),
    ("--mem-fraction-static", "mem_fraction_static", ("sglang",), {"type": float, "metavar": "F",
                               "help": "SGLang: share for weights + KV pool (default by release, GPU size and tp: "
                                       "0.836 on an A100 80GB in 0.5.3)"}),
    ("--chunked-prefill-size", "chunked_prefill_size", ("sglang",), {"type": int, "metavar": "N",
                                "help": "SGLang: prefill chunk tokens (default by release and GPU size: 8192 on "
                                        "an A100 80GB)"}),
    ("--max-running-requests", "max_running_requests", ("sglang",), {"type": int, "metavar": "N",
                                "help": "SGLang: running requests cap"}),
    ("--context-length", "context_length", ("sglang",), {"type": int, "metavar": "N",
                          "help": "SGLang: longest request (default: the model's context)"}),
    ("--sglang-version", "version", ("sglang",), {"metavar": "V",
                          "help": "SGLang: the release whose defaults and arithmetic to follow, 0.3.3 or later "
                                  "(0.5.3)"}),
    ("--swa-full-tokens-ratio", "swa_full_tokens_ratio", ("sglang",), {"type": float, "metavar": "R",
                                 "help": "SGLang: sliding-layer tokens per full-layer token of the hybrid SWA "
                                         "pool (gpt-oss; 0.8)"}),
    ("--max-mamba-cache-size", "max_mamba_cache_size", ("sglang",), {"type": int, "metavar": "N",
                                "help": "SGLang: mamba state slots of a hybrid (Qwen3-Next, Nemotron-H; default "
                                        "--max-running-requests, else 512; 0.5.4's Qwen3-Next: from the memory)"}),
    ("--mamba-ssm-dtype", "mamba_ssm_dtype", ("sglang",), {"metavar": "T",
                           "help": "SGLang: float32 or bfloat16, a hybrid's temporal (SSM) state (float32)"}),
    ("--ctx-size", "ctx_size", ("llama.cpp",), {"type": int, "metavar": "N", "help": "llama.cpp: n_ctx (4096; 0 = the model's)"}),
    ("--batch-size", "batch_size", ("llama.cpp",), {"type": int, "metavar": "N", "help": "llama.cpp: n_batch (2048)"}),
    ("--ubatch-size", "ubatch_size", ("llama.cpp",), {"type": int, "metavar": "N", "help": "llama.cpp: n_ubatch (512)"}),
    ("--n-gpu-layers", "n_gpu_layers", ("llama.cpp",), {"type": int, "metavar": "N",
                        "help": "llama.cpp: blocks on the GPU (default all, output layer too)"}),
    ("--cache-type-k", "cache_type_k", ("llama.cpp",), {"metavar": "T", "help": "llama.cpp: f16, q8_0, q4_0 ... (f16)"}),
    ("--cache-type-v", "cache_type_v", ("llama.cpp",), {"metavar": "T",
                        "help": "llama.cpp: f16, q8_0, q4_0 ... (f16; quantized needs --flash-attn)"}),
    ("--flash-attn", "flash_attn", ("llama.cpp",), {"action": "store_true", "default": None,
                      "help": "llama.cpp: flash attention (pads n_ctx to 256)"}),
    ("--weights-type", "weights_type", ("llama.cpp",), {"metavar": "T",
                        "help": "llama.cpp, catalog model: f16, bf16, f32 or q8_0 storage (default: the checkpoint's)"}),
    ("--parallel", "parallel", ("llama.cpp",), {"type": int, "metavar": "N", "help": "llama.cpp: server slots (1)"}),
    ("--max-batch", "max_batch", ("transformers",), {"type": int, "metavar": "N",
                     "help": "transformers: cap on the generate() batch"}),
)


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "capacity", help="serving capacity in vLLM, SGLang, llama.cpp or transformers",
        description="Predict what a serving engine logs at start-up (weights, non-torch memory, activation peak, "
                    "KV cache, vLLM's # GPU blocks, SGLang's max_total_num_tokens, llama.cpp's buffers), then "
                    "concurrency at --context and decode/prefill speed from rooflines.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("model", metavar="MODEL", help="catalog name, hub id, config.json or folder, or a .gguf (llama.cpp)")
    p.add_argument("--engine", default="vllm", choices=("vllm", "sglang", "llama.cpp", "transformers"),
                   help="serving engine (default vllm)")
    p.add_argument("--gpu", default=None, help="GPU name from `vramlens gpus` or a size (24GB, 80GiB); with --users, "
                   "the GPU to plan for (default: L4, L40S, A100-80GB, H100-SXM-80GB, H200-141GB)")
    p.add_argument("--users", type=whole_number, default=None,
                   help="plan mode: the cheapest GPUs, tp, quantization and KV dtype serving N requests of --context")
    p.add_argument("--tokens-per-s", dest="tokens_per_s", type=float, default=None,
                   help="plan mode: decode tokens/s each request needs")
    p.add_argument("--max-gpus", dest="max_gpus", type=bounded(MAX_GPUS), default=None,
                   help="plan mode: most GPUs per plan (8)")
    p.add_argument("--gpus", type=whole_number, default=None,
                   help="GPUs (default tp x pp; llama.cpp: devices to split layers over)")
    p.add_argument("--tp", type=whole_number, default=1, help="tensor parallel degree")
    p.add_argument("--pp", type=whole_number, default=1, help="pipeline parallel degree")
    p.add_argument("--context", type=whole_number, default=None, help="tokens per request for concurrency and speed")
    for flag, dest, _engines, opts in FLAGS:
        # a whole number's range is vramlens.serving's to check (as for the API); a 5,000-digit one is shown shortened
        p.add_argument(flag, dest=arg_name(flag), **dict(opts, type=whole_number) if opts.get("type") is int else opts)
    p.add_argument("--trace-fallback", action=argparse.BooleanOptionalAction, default=True,
                   help="a model_type vramlens does not model: weights from the transformers model built on the meta "
                        "device (needs the trace extra; cached); --no-trace-fallback: a generic Llama-style "
                        "approximation")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=run)
    return p


def arg_name(flag: str) -> str:
    """Where argparse keeps a FLAGS flag: ``--sglang-version`` -> ``sglang_version``."""
    return flag.removeprefix("--").replace("-", "_")


def engine_settings(args: argparse.Namespace) -> dict:
    """The settings given on the command line; a flag of another engine is an error."""
    from vramlens.errors import ConfigError

    out, wrong = {}, []
    for flag, dest, engines, _opts in FLAGS:
        value = getattr(args, arg_name(flag), None)
        if value is None:
            continue
        if args.engine not in engines:
            wrong.append(f"{flag} is a {' / '.join(engines)} flag, not one of {args.engine}'s")
        out[dest] = value
    if wrong:
        raise ConfigError(wrong)
    return out


def run(args: argparse.Namespace) -> int:
    from vramlens.errors import InputError
    from vramlens.serving import capacity

    if args.users is not None:
        return run_plan(args)
    if args.gpu is None:
        raise InputError("give --gpu NAME (what the engine does on it) or --users N --context C (plans that serve N)")
    for flag, value in (("--tokens-per-s", args.tokens_per_s), ("--max-gpus", args.max_gpus)):
        if value is not None:
            raise InputError(f"{flag} plans with --users N: add --users")

    cap = capacity(args.model, args.engine, gpu=args.gpu, gpus=args.gpus, tp=args.tp, pp=args.pp,
                   context=args.context, trace_fallback=args.trace_fallback, **engine_settings(args))
    if args.json:
        print_json(cap.to_dict())
    else:
        print(render(cap))
    return 0


def render(cap) -> str:
    """Lines to hold beside the engine's start-up log."""
    from vramlens.units import format_gib

    lines = [f"{cap.model} on {cap.gpus} x {cap.gpu} (tp={cap.tp}, pp={cap.pp}) in {cap.engine}: {cap.accounting}",
             "",
             "per GPU (the busiest):",
             f"  weights                 {format_gib(cap.weights_bytes):>12}",
             f"  non-torch (CUDA, NCCL)  {format_gib(cap.non_torch_bytes):>12}",
             f"  CUDA graphs             {format_gib(cap.cuda_graph_bytes):>12}",
             f"  activation peak         {format_gib(cap.activation_bytes):>12}",
             f"  KV cache                {format_gib(cap.kv_cache_bytes):>12}",
             f"  total                   {format_gib(cap.total_bytes):>12}  of {format_gib(cap.gpu_bytes)}",
             *((f"  speculative: {cap.speculative}; the draft's weights {format_gib(cap.draft_weights_bytes)} and "
                f"KV cache {format_gib(cap.draft_kv_cache_bytes)} are in the lines above",) if cap.speculative else ()),
             "",
             f"as {cap.engine} logs it:"]
    for f in cap.figures:
        value = f"{f.value:,}" if isinstance(f.value, int) else f"{f.value:,.2f}"
        lines.append(f"  {f.label}: {value}")
    for d in cap.devices:
        lines.append(f"  {d.device}: {d.n_layers} blocks, model {d.model_bytes / 2**20:,.2f} MiB, KV {d.kv_bytes / 2**20:,.2f} "
                     f"MiB, compute {d.compute_bytes / 2**20:,.2f} MiB")
    lines += ["",
              f"at {cap.context:,} tokens per request: {cap.concurrency:,.2f} requests fit the cache; {cap.max_running:,} run",
              f"decode: {cap.decode_tokens_s:,.1f} tokens/s per request, {cap.decode_tokens_s_total:,.0f} tokens/s in total "
              "(bandwidth roofline x 0.70)",
              f"time to first token for a {cap.context:,}-token prompt: {cap.ttft_s * 1000:,.0f} ms (compute roofline x 0.40 MFU)",
              "",
              "how:"]
    lines += [f"  {n}" for n in cap.notes]
    return "\n".join(lines)


def run_plan(args: argparse.Namespace) -> int:
    from vramlens.errors import InputError
    from vramlens.serving import plan_capacity

    if args.context is None:
        raise InputError("--users N needs --context C: the tokens of each request (prompt + output)")
    engine_settings(args)  # a flag of another engine is refused first
    extra = [flag for flag, *_ in FLAGS if getattr(args, arg_name(flag), None) is not None]
    if extra:
        raise InputError(f"plan mode sets the engine's settings itself: drop {', '.join(extra)}")
    if args.gpus is not None or args.tp != 1 or args.pp != 1:
        raise InputError("plan mode chooses the GPUs and tp itself: drop --gpus, --tp and --pp (use --max-gpus)")
    plan = plan_capacity(args.model, users=args.users, context=args.context, engine=args.engine, gpu=args.gpu,
                         tokens_per_s=args.tokens_per_s, max_gpus=8 if args.max_gpus is None else args.max_gpus,
                         trace_fallback=args.trace_fallback)
    if args.json:
        print_json(plan.to_dict())
    else:
        print(render_plan(plan))
    return 0


def render_plan(plan) -> str:
    """The plans, best first, each with its command line."""
    need = f"{plan.users:,} requests of {plan.context:,} tokens" + (
        f" at {plan.tokens_per_s:g} tokens/s each" if plan.tokens_per_s else "")
    lines = [f"{plan.model} in {plan.engine}: {need}", ""]
    if not plan.plans:
        lines.append(f"no plan of {plan.candidates:,} candidates serves it: more GPUs (--max-gpus), a shorter "
                     "--context or fewer --users")
    for i, p in enumerate(plan.plans, 1):
        lines.append(f"{i}. {p.gpus} x {p.gpu}, tp {p.tp}, weights {p.quantization or '16-bit'}, KV cache "
                     f"{p.kv_cache_dtype}: {p.concurrency:,.1f} requests fit, {p.decode_tokens_s:,.1f} tokens/s each "
                     f"({p.decode_tokens_s_total:,.0f} in total)")
        lines.append(f"   {p.flags}")
    if plan.stopped:
        lines += ["", plan.stopped]
    lines += ["", "ranked by GPU count, then GPU memory, then the least lossy format; speeds from the decode roofline "
              "(bandwidth x 0.70) with all requests running"]
    lines += plan.notes
    return "\n".join(lines)
