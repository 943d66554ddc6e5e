"""`vramlens calibrate`: run a training command at two batch sizes (and sequence lengths), a warm-up and
two steps each, and answer the largest batch (and sequence) that fits the device."""

from __future__ import annotations

import argparse
import sys

from vramlens.cli.options import print_json
from vramlens.cli.run_cmd import add_common, split_command

EXAMPLE = """Examples:
  vramlens calibrate --gpu A100-80GB -- python train.py --batch-size 8
  vramlens calibrate --gpu 24GB --batch-sizes 4 8 --seq-arg --max-len --seq-lens 512 1024 -- python train.py

The command must take its batch size as a flag (--batch-arg, default --batch-size): vramlens runs it
once per size with that flag's value replaced, stops it after a warm-up and two optimizer steps,
and fits fixed + per-sample (+ quadratic in sequence) memory to the measured peaks."""


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "calibrate", help="measure a script at two batch sizes and answer the largest batch that fits",
        description="Calibrate on your own device: the measured peak at two batch sizes (and two sequence "
                    "lengths), fitted and extrapolated to the device's capacity with a safety margin.",
        epilog=EXAMPLE, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--gpu", default=None, help="the GPU (name or size such as 24GB) the answer is for")
    p.add_argument("--margin", type=float, default=0.1, help="fraction of the capacity kept free (default 0.1)")
    p.add_argument("--batch-arg", default="--batch-size", metavar="FLAG",
                   help="the command's batch-size flag (default --batch-size)")
    p.add_argument("--batch-sizes", type=int, nargs=2, default=(1, 2), metavar=("B1", "B2"),
                   help="the two batch sizes to measure (default 1 2)")
    p.add_argument("--seq-arg", default=None, metavar="FLAG", help="the command's sequence-length flag")
    p.add_argument("--seq-lens", type=int, nargs=2, default=None, metavar=("S1", "S2"),
                   help="two sequence lengths to measure (fits the quadratic term of eager attention)")
    p.add_argument("--model", default=None, help="a model name for vramlens' analytic estimate beside each point")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    add_common(p)
    p.set_defaults(func=run)
    return p


def with_value(argv: list[str], flag: str, value: int) -> list[str]:
    """``argv`` with ``flag``'s value set to ``value`` (``--flag V`` or ``--flag=V``; appended if absent)."""
    out = list(argv)
    for i, a in enumerate(out):
        if a == flag and i + 1 < len(out):
            out[i + 1] = str(value)
            return out
        if a.startswith(flag + "="):
            out[i] = f"{flag}={value}"
            return out
    return [*out, flag, str(value)]


def run(args: argparse.Namespace) -> int:
    from vramlens.errors import InputError
    from vramlens.monitor.calibration import Point, check_sizes, fit
    from vramlens.monitor.launch import run_command

    command = split_command(args.command)
    problems = check_sizes("--batch-sizes", tuple(args.batch_sizes), required=True)
    if args.seq_lens is not None:
        problems += check_sizes("--seq-lens", tuple(args.seq_lens), required=False)
        if not args.seq_arg:
            problems.append("--seq-lens needs --seq-arg FLAG: the command's sequence-length flag")
    if not 0 <= args.margin < 1:
        problems.append(f"--margin {args.margin} must be in [0, 1): e.g. 0.1 keeps 10% of the capacity free")
    if not command:
        problems.append("give the command after --: vramlens calibrate -- python train.py --batch-size 8")
    if problems:
        raise InputError("; ".join(problems))
    capacity = args.cpu_limit
    if args.gpu is not None:
        from vramlens.hardware import get_gpu

        capacity = get_gpu(args.gpu).capacity_bytes
    options = {"label": args.label or "calibrate", "store": False}
    if args.cpu_limit is not None:
        options["backend"] = "cpu"
    points = []
    for s in args.seq_lens or (None,):
        for b in args.batch_sizes:
            argv = with_value(command, args.batch_arg, b)
            if s is not None:
                argv = with_value(argv, args.seq_arg, s)
            result = run_command(argv, options=options, stop_after=3)
            steps = [st for r in result.ranks for st in r.report.steps]
            if result.exit_code != 0 or len(steps) < 3:
                raise InputError(f"{' '.join(argv)} exited with {result.exit_code} after {len(steps)} optimizer "
                                 "step(s): calibrate needs a warm-up and two steps")
            peak = max(st.peak_allocated_bytes for st in steps[1:])  # the warm-up step is left out
            points.append(Point(b, s, peak, _estimate(args.model, b, s)))
    cal = fit(points, capacity_bytes=capacity, margin=args.margin)
    if args.json:
        print_json(cal.to_dict())
    else:
        sys.stdout.flush()
        print(cal.text())
    return 0


def _estimate(model: str | None, b: int, s: int | None) -> int | None:
    if model is None:
        return None
    from vramlens.estimator import estimate
    from vramlens.workload import make_workload

    w = make_workload(mode="train", batch=b, **({"seq": s} if s is not None else {}))
    return int(estimate(model, w).breakdown.peak_allocated)
