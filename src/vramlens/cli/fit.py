"""`vramlens fit`: which changes make a workload fit, fastest first, and the config that says so."""

from __future__ import annotations

import argparse
import contextlib
import json
from typing import TYPE_CHECKING, Any

from vramlens.cli.options import (
    add_model_arg,
    add_output_args,
    add_workload_args,
    bounded,
    print_json,
    require_model_and_headroom,
    size_arg,
    workload_kwargs,
)
from vramlens.cli.render import add_file_args, progress_bar, show, wants_files, write_files
from vramlens.limits import MAX_BANDWIDTH, MAX_DEVICE_BYTES, MAX_EFFECTIVE_BATCH, MAX_GPUS, MAX_TOP
from vramlens.units import format_gib

if TYPE_CHECKING:  # the CLI loads the advisor only when fit runs
    from vramlens.advise.plan import FitResult

EXAMPLES = """examples:
  vramlens fit llama-2-7b --mode train --batch 8 --seq 2048 --gpu RTX-4090
  vramlens fit llama-2-13b --mode train --gpu A100-80GB --gpus 8 --effective-batch 64 --forbid offload
  vramlens fit llama-2-7b --mode train --method lora --gpu 24GB --emit peft
  vramlens fit meta-llama/Llama-2-70b-hf --seq 4096 --new-tokens 512 --gpu L40S --gpus 4 --max-context --json
  vramlens fit llama-2-7b --mode train --batch 4 --gpu A100-40GB --html plans.html --svg plans.svg

--gpus is the number of GPUs per node; with --nodes M the plans use gpus x M in all.
Remedies for --keep / --forbid: amp, checkpointing, attention, lora, qlora, 8bit, 4bit, grad-accum,
zero, fsdp, tp, pp, offload, quant, kv-quant, optimizer-in-backward, loss-chunks,
activation-offload, loss-parallel. An explicit --method is kept.
Exit codes: 0 plans found, 1 no plan fits (the closest plan and the hardware that would fit
are shown), 2 bad input (one line on stderr).
"""

#: vramlens.advise.search.OBJECTIVES (not imported: the CLI loads the advisor only when fit runs; a test pins them equal)
OBJECTIVES = ("speed", "memory", "cost")
ASKS = ("max_batch", "max_seq", "max_context", "min_gpu", "min_gpus")
#: vramlens.advise.emit.KINDS (not imported, as above; a test pins them equal)
EMIT_KINDS = ("trainer", "peft", "bnb", "deepspeed", "accelerate", "fsdp", "device-map", "alloc-conf", "torchtune", "vllm",
              "llama.cpp", "torchtitan")


def _gbps(text: str) -> float:
    from vramlens.errors import InputError
    from vramlens.units import parse_size

    try:
        value = parse_size(text, what="bandwidth")
    except InputError as e:  # argparse would print "invalid _gbps value" and drop the rule
        raise argparse.ArgumentTypeError(str(e)) from None
    if value > MAX_BANDWIDTH:
        raise argparse.ArgumentTypeError(f"bandwidth={text!r} is over the limit of {MAX_BANDWIDTH:,} bytes/s")
    return float(value)


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "fit", help="search the optimizations that make a workload fit, fastest first",
        description="Search mixed precision, checkpointing, LoRA/QLoRA, 8-bit and 4-bit optimizers, micro-batching, "
                    "ZeRO/FSDP, tensor/pipeline parallelism and offload for the plans that fit, ranked by "
                    "estimated step time (training) or tokens per second (inference).",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_model_arg(p)
    add_workload_args(p)
    p.set_defaults(method=None)  # None: not given, so the search may change it
    p.add_argument("--gpu", required=True, help="GPU name from `vramlens gpus` or a size (24GB, 80GiB)")
    p.add_argument("--nodes", type=bounded(MAX_GPUS), default=1, help="nodes of --gpus GPUs each (default 1)")
    p.add_argument("--host-ram", type=size_arg("host RAM", MAX_DEVICE_BYTES), default=None, help="host RAM per node for offloaded state (e.g. 256GB)")
    p.add_argument("--headroom", type=float, default=0.10, help="fraction of each GPU kept free (default 0.10)")
    p.add_argument("--effective-batch", type=bounded(MAX_EFFECTIVE_BATCH), default=None,
                   help="sequences per optimizer step over all GPUs, kept with gradient accumulation")
    p.add_argument("--keep", default="", help="remedies every plan must use, comma-separated")
    p.add_argument("--forbid", default="", help="remedies no plan may use, comma-separated")
    p.add_argument("--top", type=bounded(MAX_TOP), default=5, help="plans to show (default 5)")
    p.add_argument("--optimize", choices=OBJECTIVES, default=None,
                   help="search for better plans even when the workload already fits: speed (step time or "
                        "tokens/s), memory (least per GPU) or cost (GPU-seconds per token; at a fixed --gpus, "
                        "as speed). Without it, a workload that fits is the answer, with its spare memory")
    p.add_argument("--network", type=_gbps, default=None, metavar="BYTES/S",
                   help="network bandwidth between nodes per GPU (e.g. 25GB for 200 Gb/s InfiniBand)")
    p.add_argument("--interconnect", type=_gbps, default=None, metavar="BYTES/S",
                   help="GPU-to-GPU bandwidth inside a node (default: the GPU entry's NVLink/PCIe figure)")
    for a in ASKS:
        p.add_argument("--" + a.replace("_", "-"), action="store_true", dest=a,
                       help={"max_batch": "also find the largest micro-batch that fits",
                             "max_seq": "also find the longest sequence that fits",
                             "max_context": "also find the longest context (prompt + generated) whose KV cache fits",
                             "min_gpu": "also find the smallest catalog GPU that fits",
                             "min_gpus": "also find the fewest GPUs of this kind that fit"}[a])
    p.add_argument("--emit", choices=EMIT_KINDS, default=None, help="print the config of a plan for a library")
    p.add_argument("--plan", type=bounded(MAX_TOP), default=1, help="which plan --emit writes (1 = best)")
    p.add_argument("--trace-fallback", action=argparse.BooleanOptionalAction, default=True,
                   help="when the model_type is not modelled analytically, trace the real transformers model for "
                        "each plan shown (the search ranks with a generic Llama-style approximation; needs "
                        "vramlens[trace]; cached after the first call; default on)")
    add_file_args(p, "the --top plans side by side (stacked by component, against the GPU)")
    add_output_args(p)
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    import sys

    from vramlens.advise.cost import DEFAULT_NETWORK_BYTES_S, Links
    from vramlens.errors import InputError
    from vramlens.fallback import fit  # plans traced for an unmodelled model_type

    require_model_and_headroom(args)
    if args.top < 1 or args.plan < 1:
        raise InputError(f"--top {args.top} / --plan {args.plan}: both must be >= 1")
    if args.nodes < 1:
        raise InputError(f"--nodes {args.nodes} must be >= 1")
    settings = workload_kwargs(args)
    method_locked = settings.get("method") is not None
    if not method_locked:
        settings["method"] = "full"
    gpus_per_node = settings.pop("gpus")
    if args.emit == "torchtune":
        # torchtune's MultiHeadAttention copies GQA keys and values to every head before SDPA: plans for it
        # count those copies (a no-op for multi-head attention)
        settings["gqa_expand"] = True
        # its compile=True compiles each layer (training.compile_model), the head and a plain loss eager
        settings["compile_scope"] = "blocks"
    links = Links(intra_node_bytes_s=args.interconnect, network_bytes_s=args.network or DEFAULT_NETWORK_BYTES_S)
    asks = [a for a in ASKS if getattr(args, a)]
    bar = progress_bar("searching plans", enabled=not args.json)  # shown after a second, on a terminal
    def traced(msg: str) -> None:  # a plan is traced (the fallback's first call for it): say so on a terminal
        if bar is not None:
            bar.update(message=msg)
        elif sys.stderr.isatty():
            print(f"vramlens fit: {msg}", file=sys.stderr, flush=True)

    with bar or contextlib.nullcontext():
        result = fit(args.model, gpu=args.gpu, params=args.params, gpus=gpus_per_node, nodes=args.nodes,
                     host_ram=args.host_ram, headroom=args.headroom, keep=args.keep, forbid=args.forbid,
                     effective_batch=args.effective_batch, method_locked=method_locked,
                     max_plans=max(args.top, args.plan), links=links, ask=asks,
                     progress=bar.counter() if bar else None, optimize=args.optimize,
                     trace_fallback=args.trace_fallback, trace_progress=traced, **dict(settings))
    cfg: dict[str, Any] | None = None
    if args.emit:  # checked, and the config made, before any report file is written: a failed run writes nothing
        if not result.plans:
            raise InputError(f"--emit {args.emit}: {result.message}")
        if args.plan > len(result.plans):
            raise InputError(f"--plan {args.plan}: only {len(result.plans)} plan(s) fit; choose 1..{len(result.plans)}")
        cfg = _emit_or_point(result, args.emit, args.plan)
    if wants_files(args):
        write_files(args, "fit", fit_report(result, args, settings), headroom=args.headroom)
    if args.emit and cfg is not None:
        from vramlens.advise.emit import render

        plan = result.plans[args.plan - 1]
        if args.json:
            print_json(cfg)
        else:
            print(render(cfg, args.emit))
            if args.emit == "llama.cpp":
                print(_llamacpp_log(plan, cfg))
        if args.emit == "peft":
            from vramlens.advise.emit import peft_call

            call = peft_call(plan)
            if call:  # on stderr: stdout stays the config, to redirect into a file
                print(call, file=sys.stderr)
        return 0
    if args.json:
        from vramlens.advise.emit import configs

        d = result.to_dict(configs)
        d["plans"] = d["plans"][: args.top]
        print_json(d)
        return 0 if result.plans else 1
    show("fit", lambda: fit_report(result, args, settings), lambda: render_result(result, top=args.top))
    return 0 if result.plans else 1


def _emit_or_point(result: FitResult, kind: str, number: int) -> dict[str, Any]:
    """``emit`` of plan ``number``; when it refuses, its line names the first other plan shown that
    ``kind`` can write (the search may have replaced the flags the refusal asks for)."""
    from vramlens.advise.emit import emit
    from vramlens.errors import InputError

    try:
        cfg: dict[str, Any] = emit(result.plans[number - 1], kind)
        return cfg
    except InputError as e:
        for i, other in enumerate(result.plans, 1):
            if i == number:
                continue
            try:
                emit(other, kind)
            except InputError:
                continue
            raise InputError(f"{e}; plan {i} can be written: --emit {kind} --plan {i}") from None
        raise


def _llamacpp_log(plan: Any, cfg: dict[str, Any]) -> str:
    """A comment line: what the emitted llama-server will log for its buffers (vramlens capacity's
    llama.cpp accounting, which differs from the plan's transformers figure)."""
    from vramlens.advise.emit import llamacpp_settings
    from vramlens.errors import VramlensError
    from vramlens.serving import capacity

    gpu = plan.estimate.gpu
    if gpu is None:
        return "# give --gpu for llama.cpp's own buffer sizes (vramlens capacity --engine llama.cpp)"
    try:
        c = capacity(plan.estimate.model, "llama.cpp", gpu=gpu, **llamacpp_settings(cfg))
    except VramlensError as e:
        return f"# llama.cpp would refuse these settings: {e}"
    figs = {f.key: f for f in c.figures}
    shown = [f"{f.label} {f.value:,}" for k, f in figs.items() if k.endswith(("_model_buffer_mib", "kv_self_size_mib",
                                                                            "_compute_buffer_mib"))
             and not k.startswith("cpu")]
    return "# llama.cpp will log (vramlens capacity --engine llama.cpp): " + "; ".join(shown)


def fit_report(result: FitResult, args: argparse.Namespace, settings: dict[str, Any]) -> dict[str, Any]:
    """The --json object (--top plans) plus what the reports draw: the model's name, the
    GPU's usable bytes and the starting workload."""
    from vramlens.hardware.catalog import get_gpu

    d = result.to_dict()
    d["plans"] = d["plans"][: args.top]
    d["model"] = {"name": args.model or f"--params {args.params}"}
    d["usable_bytes"] = get_gpu(args.gpu).capacity_bytes
    d["workload"] = {k: v for k, v in settings.items() if v is not None}
    return d


def render_result(result: FitResult, *, top: int = 5, width: int = 100) -> str:
    """The human table: one block per plan, best first; the reason when none fits."""
    from vramlens.advise.plan import settings_argv

    lines = [result.message] + ([result.stopped] if result.partial else []) + [""]
    if result.already_fits:
        lines[-1:] = ["nothing to change; ask --optimize speed|memory|cost for faster or smaller plans", ""]
    shown = list(result.plans[:top])
    if not shown and result.closest is not None:
        lines.append("closest plan (does not fit):")
        shown = [result.closest]
    cols = ("weights", "master_weights", "gradients", "optimizer_states", "activations", "kv_cache", "runtime")
    short = ("weights", "master", "grads", "optim", "activ", "kv", "runtime")
    header = f"{'#':>2} {'speed':>14} {'total':>8} " + " ".join(f"{s:>7}" for s in short) + "  (GiB per GPU)"
    lines.append(header)
    lines.append("-" * min(width, len(header)))
    for i, p in enumerate(shown, 1):
        comps = p.estimate.breakdown.as_dict()
        if p.workload.training:
            speed = f"{p.cost.seconds:.3g} s/step"
        else:
            speed = f"{p.cost.tokens_per_s:,.0f} tok/s"
        lines.append(f"{i:>2} {speed:>14} {format_gib(p.device_total, unit=False, grouped=False):>8} " + " ".join(f"{format_gib(comps[c], unit=False, grouped=False):>7}" for c in cols))
        flags = " ".join(settings_argv({k: v for k, v in p.settings.items() if _differs(k, v)}))
        lines.append(f"   flags: {flags}")
        for t in p.tradeoffs:
            lines.append(f"   - {t}")
        if p.estimate.breakdown.host_bytes:
            lines.append(f"   host RAM: {format_gib(p.estimate.breakdown.host_bytes, unit=False, grouped=False)} GiB")
    if shown:
        lines.append("components are each their own peak during the step (they peak in different phases), "
                     "so they do not add up to the total")
    for k, v in result.inverse.items():
        lines.append(f"{k}: {json.dumps(_inverse_summary(v))}")
    return "\n".join(lines)


def _differs(k: str, v: object) -> bool:
    from vramlens.workload import Workload

    defaults = Workload()
    if k == "lora_targets":
        return v != ",".join(defaults.lora_targets)
    return v != getattr(defaults, k, None) or k in ("mode", "batch", "seq", "gpus")


def _inverse_summary(v: object) -> object:
    if isinstance(v, dict):
        return {k: x for k, x in v.items() if k != "settings"}
    return v
