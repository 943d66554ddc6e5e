"""`vramlens place`: a device map across GPUs, CPU RAM and disk for inference, with decode speed."""

from __future__ import annotations

import argparse

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
    return p


def read_gguf_info(path: str):
    """A GGUFInfo from a .gguf file's header (tensor data is memory-mapped, never read)."""
    from collections import Counter

    from vramlens.advise.gguf_split import GGUFInfo
    from vramlens.errors import MissingExtraError, ModelSourceError

    try:
        import gguf
    except ImportError:
        raise MissingExtraError("gguf", "gguf") from None
    try:
        r = gguf.GGUFReader(path, "r")
    except (OSError, ValueError) as e:
        raise ModelSourceError(f"{path}: not a readable GGUF file ({e})") from None

    def field(key: str, default=None):
        f = r.fields.get(key)
        if f is None:
            return default
        v = f.contents()
        return v

    arch = field("general.architecture", "llama")
    n_layers = field(f"{arch}.block_count")
    n_embd = field(f"{arch}.embedding_length")
    n_head = field(f"{arch}.attention.head_count")
    if n_layers is None or n_embd is None or n_head is None:
        raise ModelSourceError(f"{path}: the header lacks {arch}.block_count / embedding_length / "
                               "attention.head_count: not a transformer GGUF vramlens can place")
    n_head_kv = field(f"{arch}.attention.head_count_kv", n_head)
    layer = [0] * int(n_layers)
    input_b = output_b = vocab = 0
    types: Counter = Counter()
    for t in r.tensors:
        types[t.tensor_type.name] += 1
        name = t.name
        if name.startswith("blk."):
            layer[int(name.split(".")[1])] += int(t.n_bytes)
        elif name.startswith("output"):
            output_b += int(t.n_bytes)
        else:
            input_b += int(t.n_bytes)
            if name == "token_embd.weight":
                vocab = int(max(t.shape))
    return GGUFInfo(name=path, arch=str(arch), n_layers=int(n_layers),
                    n_ctx_train=int(field(f"{arch}.context_length", 2048)), n_embd=int(n_embd), n_head=int(n_head),
                    n_head_kv=int(n_head_kv), layer_bytes=tuple(layer), input_bytes=input_b, output_bytes=output_b,
                    quant_types=dict(types), vocab=vocab)


def _run_gguf(args: argparse.Namespace) -> int:
    from vramlens.advise.gguf_split import split_layers
    from vramlens.hardware.catalog import get_gpu

    info = read_gguf_info(args.model)
    n_ctx = min(info.n_ctx_train, args.seq + (args.new_tokens or 0))
    s = split_layers(info, get_gpu(args.gpu), gpus=args.gpus, n_ctx=n_ctx, headroom=args.headroom)
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
    out, run = [], []
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
