"""`vramlens place`: a device map across GPUs, CPU RAM and disk for inference, with decode speed."""

from __future__ import annotations

import argparse
from typing import Any

from vramlens.cli.options import (
    add_model_arg,
    add_output_args,
    add_workload_args,
    print_json,
    require_model_and_headroom,
    size_arg,
    workload_kwargs,
)
from vramlens.cli.render import add_file_args, show, wants_files, write_files
from vramlens.limits import MAX_DEVICE_BYTES

EXAMPLES = """examples:
  vramlens place llama-2-7b --gpu RTX-3060 --host-ram 32GB
  vramlens place llama-2-13b --gpu T4 --gpus 2 --seq 2048 --new-tokens 256 --json
  vramlens place llama-2-70b --gpu RTX-4090 --quant nf4 --host-ram 64GB --no-disk
  vramlens place ./llama-2-7b.Q4_K_M.gguf --gpu RTX-3060 --seq 4096   (llama.cpp --n-gpu-layers)
  vramlens place llama-2-13b --gpu RTX-4090 --host-ram 64GB --html place.html --svg place.svg

Compares three options side by side: every block on the GPUs, GPUs then CPU RAM then disk
(Accelerate-style, blocks never split), and CPU only; decode speed from memory bandwidth and the
PCIe copies of offloaded blocks.
"""


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "place", help="device map across GPUs, CPU RAM and disk for inference, with tokens/s",
        description="Place a model's blocks across GPUs, CPU RAM and disk for inference, the way Accelerate's "
                    "infer_auto_device_map does, with the KV cache and activations reserved on the GPUs.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_model_arg(p)
    add_workload_args(p)
    p.set_defaults(new_tokens=128)
    p.add_argument("--gpu", required=True, help="GPU name from `vramlens gpus` or a size (24GB, 80GiB)")
    p.add_argument("--host-ram", type=size_arg("host RAM", MAX_DEVICE_BYTES), default=None, help="CPU RAM for offloaded weights (e.g. 32GB; default: not limited)")
    p.add_argument("--no-disk", dest="disk", action="store_false", help="do not offload to disk")
    p.add_argument("--disk", dest="disk", action="store_true", default=True, help="allow disk offload (default)")
    p.add_argument("--headroom", type=float, default=0.10, help="fraction of each GPU kept free (default 0.10)")
    add_file_args(p, "the options side by side (bytes per device, against the GPU budget)")
    add_output_args(p)
    p.set_defaults(func=run)
    p.set_defaults(place_defaults={dest: p.get_default(dest) for dest in GGUF_UNUSED})
    return p


#: Flags that say nothing about a GGUF split (its tensor types are fixed in the file; llama.cpp
#: places whole blocks with --n-gpu-layers): given with a .gguf, they are refused, not ignored.
GGUF_UNUSED = ("params", "mode", "method", "dtype", "amp", "quant", "optimizer", "optimizer_impl", "batch",
               "grad_accum", "keep_grads", "checkpointing", "attention", "lora_rank", "lora_targets", "zero",
               "fsdp", "fsdp_strategy", "tp", "pp", "pp_schedule", "offload", "kv_dtype", "kv_block", "host_ram", "disk",
               "lora_dropout", "lora_dtype", "dora", "lora_fa", "vera_rank", "quant_targets", "quant_head", "nf4_impl", "quant_impl", "quant_group_size", "quantize_on_device", "cache", "max_cache_len",
               "transformers_version", "alloc_conf")


def _gguf_refusals(args: argparse.Namespace) -> list[str]:
    """The flags given with a .gguf that a GGUF split does not use, as the user typed them."""
    given = []
    for dest in GGUF_UNUSED:
        value, default = getattr(args, dest, None), args.place_defaults.get(dest)
        if value == default:
            continue
        if dest == "disk":
            given.append("--no-disk")
        elif isinstance(value, bool):
            given.append(f"--{dest.replace('_', '-')}")
        elif dest == "host_ram" and value is not None:
            given.append(f"--host-ram {value / 1e9:g}GB")
        else:
            given.append(f"--{dest.replace('_', '-')} {value}")
    return given


def _run_gguf(args: argparse.Namespace) -> int:
    from vramlens.advise.gguf_split import split_layers
    from vramlens.errors import InputError
    from vramlens.hardware.catalog import get_gpu

    unused = _gguf_refusals(args)
    if unused:
        raise InputError(f"{', '.join(unused)}: not used for a GGUF file (its tensor types are fixed in the file "
                         "and llama.cpp places whole blocks with --n-gpu-layers): drop them")
    if args.gpus < 1:
        raise InputError(f"gpus={args.gpus} must be a whole number >= 1")
    if args.seq < 1 or args.new_tokens < 0:
        raise InputError(f"seq={args.seq} must be >= 1 and new_tokens={args.new_tokens} >= 0")
    gpu = get_gpu(args.gpu)
    from vramlens.advise.gguf_header import read_gguf_file

    info = read_gguf_file(args.model)
    n_ctx = args.seq + args.new_tokens
    if n_ctx > info.n_ctx_train:
        raise InputError(f"--seq {args.seq} + --new-tokens {args.new_tokens} = {n_ctx} tokens exceeds the "
                         f"{info.n_ctx_train}-token context of {info.name} ({info.arch}.context_length): "
                         "use a shorter --seq or --new-tokens")
    s = split_layers(info, gpu, gpus=args.gpus, n_ctx=n_ctx, headroom=args.headroom)
    if args.json:
        print_json(s.to_dict())
        return 0
    types = ", ".join(f"{k} x{v}" for k, v in sorted(s.quant_types.items()))
    print(f"{info.name}: {info.arch}, {info.n_layers} blocks, tensor types {types}")
    print(f"llama.cpp: --n-gpu-layers {s.n_gpu_layers} --ctx-size {s.n_ctx}  "
          f"(GPU {s.gpu_bytes / 2**30:.2f} GiB of {s.budget_bytes / 2**30:.2f} GiB budget, "
          f"host {s.host_bytes / 2**30:.2f} GiB, ~{s.tokens_per_s:.1f} tok/s)")
    return 0


def run(args: argparse.Namespace) -> int:
    from vramlens.advise.place import place
    from vramlens.errors import InputError
    from vramlens.hardware.catalog import get_gpu
    from vramlens.models import load_model
    from vramlens.workload import make_workload

    require_model_and_headroom(args)
    if args.model and str(args.model).endswith(".gguf"):
        if wants_files(args):
            raise InputError("--html/--svg/--png are not drawn for a GGUF split yet: use --json")
        return _run_gguf(args)
    settings = workload_kwargs(args)
    gpus = settings["gpus"]
    if settings["tp"] != 1 or settings["pp"] != 1:  # were silently dropped; place splits by whole blocks
        raise InputError(f"tp={settings['tp']} pp={settings['pp']}: place puts whole blocks on devices "
                         "(Accelerate's device_map): drop --tp/--pp, or use `vramlens fit` for parallel plans")
    if settings["mode"] != "inference":  # was silently forced to inference
        raise InputError(f"mode={settings['mode']}: place is for inference; training plans are `vramlens fit`")
    make_workload(**settings)  # every value in range, gpus included
    del settings["gpus"]
    w = make_workload(**settings)
    spec = load_model(args.model, params=args.params)
    ram = args.host_ram
    p = place(spec, get_gpu(args.gpu), gpus=gpus, workload=w, host_ram=ram, disk=args.disk, headroom=args.headroom)
    report = dict(p.to_dict(), workload=w.to_dict())
    if wants_files(args):
        write_files(args, "place", report, headroom=args.headroom)
    if args.json:
        print_json(p.to_dict())
        return 0
    show("place", report, lambda: render_placement(p))
    return 0 if any(o.fits for o in p.options) else 1


def render_placement(p) -> str:
    lines = [f"{p.model} on {p.gpus} x {p.gpu} (batch {p.workload.batch}, {p.workload.seq} prompt + "
             f"{p.workload.new_tokens} new tokens)", ""]
    if p.partial:
        lines[-1:] = [p.stopped, ""]
    lines.append(f"{'option':<8} {'fits':<5} {'tok/s':>9}  bytes per device (GiB)")
    for o in p.options:
        per = ", ".join(f"{k}: {v / 2**30:.2f}" for k, v in o.device_bytes.items())
        lines.append(f"{o.kind:<8} {'yes' if o.fits else 'no':<5} {o.tokens_per_s:>9.2f}  {per}")
        if o.reason:
            lines.append(f"{'':<15}{o.reason}")
    hybrid = p.option("hybrid")
    if hybrid.fits:
        lines.append("")
        lines.append("device_map (hybrid): " + _ranges(hybrid.device_map))
    return "\n".join(lines)


def _ranges(dm: dict) -> str:
    """Consecutive blocks on the same device, compressed: 'model.layers.0-20: 0'."""
    out: list[str] = []
    run: list[tuple[str, Any]] = []  # (module name, device)
    for name, dev in dm.items():
        if run and run[-1][1] == dev:
            run.append((name, dev))
        else:
            if run:
                out.append(_fmt(run))
            run = [(name, dev)]
    if run:
        out.append(_fmt(run))
    return "; ".join(out)


def _fmt(run) -> str:
    first, last = run[0][0], run[-1][0]
    return f"{first}{' .. ' + last if last != first else ''} -> {run[0][1]}"
