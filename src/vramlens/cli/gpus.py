"""`vramlens gpus`: the GPU catalog as a table or JSON."""

from __future__ import annotations

import argparse

from vramlens.cli.options import add_output_args, print_json
from vramlens.hardware.catalog import list_gpus
from vramlens.hardware.gpu import GPU
from vramlens.units import GiB

EXAMPLE = "Example: vramlens gpus --json"


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "gpus",
        help="list the GPU catalog (memory, bandwidth, throughput)",
        description="List the accelerators vramlens knows, with their datasheet figures. "
        "--gpu also takes a size such as 24GB or 80GiB.",
        epilog=EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_output_args(p)
    p.set_defaults(func=run)
    return p


def gpu_to_dict(gpu: GPU) -> dict:
    """A GPU as JSON-ready values (bytes exact, rates in their base units)."""
    return {
        "name": gpu.name,
        "vendor": gpu.vendor,
        "arch": gpu.arch,
        "compute_capability": list(gpu.compute_capability) if gpu.compute_capability else None,
        "memory_bytes": gpu.memory_bytes,
        "usable_bytes": gpu.usable_bytes,
        "cuda_total_bytes": gpu.cuda_total_bytes,
        "cuda_total_source": gpu.cuda_total_source,
        "capacity_bytes": gpu.capacity_bytes,
        "bandwidth_bytes_s": gpu.bandwidth_bytes_s,
        "bf16_flops": gpu.bf16_flops,
        "fp16_flops": gpu.fp16_flops,
        "fp32_flops": gpu.fp32_flops,
        "interconnect_bytes_s": gpu.interconnect_bytes_s,
        "pcie_bytes_s": gpu.pcie_bytes_s,
        "unified": gpu.unified,
        "aliases": list(gpu.aliases),
        "source": gpu.source,
    }


def render_table(gpus: tuple[GPU, ...]) -> str:
    header = f"{'GPU':<16} {'memory':>10} {'nvidia-smi':>10} {'CUDA':>10} {'bandwidth':>11} {'bf16':>12} {'arch'}"
    lines = [header, "-" * len(header)]
    for g in gpus:
        usable = f"{g.usable_bytes / GiB:.2f} GiB" if g.usable_bytes is not None else "unknown"
        cuda = f"{g.cuda_total_bytes / GiB:.2f} GiB" if g.cuda_total_bytes is not None else "unknown"
        lines.append(
            f"{g.name:<16} {g.memory_bytes / GiB:>6.2f} GiB {usable:>10} {cuda:>10} "
            f"{g.bandwidth_bytes_s / 1e12:>6.2f} TB/s {g.bf16_flops / 1e12:>7.1f} TFLOPS {g.arch}"
        )
    lines.append("memory: as sold; nvidia-smi: its total where known; CUDA: the total cudaMemGetInfo reports "
                 "(nvidia-smi's less the driver's reserve), what a process can use and what fit and capacity "
                 "compare with (nvidia-smi's, else the sold size, where unknown); bf16: dense tensor peak.")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    gpus = list_gpus()
    if args.json:
        print_json({"gpus": [gpu_to_dict(g) for g in gpus]})
    else:
        print(render_table(gpus))
    return 0
