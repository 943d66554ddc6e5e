"""`vramlens trace`: run the model's real steps under fake tensors and measure every allocation."""

from __future__ import annotations

import argparse
import contextlib
import sys

from vramlens.cli.options import (
    add_model_arg,
    add_output_args,
    add_workload_args,
    bounded,
    print_json,
    workload_kwargs,
)
from vramlens.cli.render import add_file_args, progress_bar, show, wants_files, write_files
from vramlens.limits import MAX_LAYERS, MAX_TOP
from vramlens.limits import show as shown
from vramlens.trace.events import TIMELINE_POINTS

#: Traced optimizer steps (2 show step 1 and the steady state; more add nothing but time).
MAX_TRACE_STEPS = 64
#: Points of a down-sampled timeline (0 keeps every event).
MAX_TIMELINE_POINTS = 10_000_000

EXAMPLES = """examples:
  vramlens trace gpt2 --mode train --batch 4 --seq 512
  vramlens trace llama-2-7b --mode train --dtype bf16 --seq 512 --layers 3 --json
  vramlens trace mistral-7b --mode inference --seq 1024 --new-tokens 64 --timeline events.jsonl
  vramlens trace mypkg.models:build --input-shape 8x3x224x224 --mode train --dtype fp32
  vramlens trace ./config.json --mode train --real-cpu --seq 64   (real CPU tensors, raw sizes)
  vramlens trace gpt2 --mode train --seq 256 --html trace.html --svg timeline.svg
  vramlens trace gpt2 --mode train --seq 256 --json --timeline-points 500

MODEL may also be package.module:factory. The factory is called with no arguments and
returns (module, example_inputs) with example_inputs(batch, seq) giving the forward's
arguments (a tuple or a dict of tensors), or a bare module together with --input-shape.
"""


def _shape(text: str) -> tuple[int, ...]:
    from math import prod

    from vramlens.limits import MAX_TENSOR_NUMEL

    parts = text.lower().replace(",", "x").split("x")
    if len(parts) > 8:
        raise argparse.ArgumentTypeError(f"{shown(text)} has {len(parts)} dimensions: at most 8")
    try:
        dims = tuple(int(x) for x in parts if x)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{shown(text)} is not a shape: write e.g. 8x3x224x224") from None
    if not dims or any(d < 1 for d in dims):
        raise argparse.ArgumentTypeError(f"{shown(text)} is not a shape: every dimension must be >= 1")
    if prod(dims) > MAX_TENSOR_NUMEL:
        raise argparse.ArgumentTypeError(f"{shown(text)} has {prod(dims):.3g} elements: over the limit of "
                                         f"{MAX_TENSOR_NUMEL:,}")
    return dims


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "trace", help="measure memory by running the model under fake tensors (no GPU)",
        description=("Run the model's real training or inference steps under fake tensors that allocate like "
                     "CUDA, record every storage allocated and freed, and report the measured breakdown."),
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_model_arg(p)
    add_workload_args(p)
    t = p.add_argument_group("trace")
    t.add_argument("--steps", type=bounded(MAX_TRACE_STEPS), default=2, help="optimizer steps in training (default 2: step 1 and steady state)")
    t.add_argument("--layers", type=bounded(MAX_LAYERS), default=None, metavar="K",
                   help="trace the first K-1 and K blocks only and extrapolate to all (K >= 3); a hybrid "
                        "model: whole periods of its layer pattern, at least K blocks")
    t.add_argument("--real-cpu", action="store_true", help="real CPU tensors instead of fake ones (raw sizes; small models)")
    t.add_argument("--cuda", action="store_true", help="real CUDA tensors (needs a GPU): also reads torch.cuda's peaks")
    t.add_argument("--input-shape", type=_shape, default=None, help="input shape for a factory's bare module (8x3x224x224)")
    t.add_argument("--timeline", default=None, metavar="FILE", help="write the events as JSON lines (.jsonl) or CSV (.csv)")
    t.add_argument("--top", type=bounded(MAX_TOP, minimum=0), default=10, help="modules and tensors alive at the peak to list (default 10)")
    t.add_argument("--quiet", action="store_true", help="no progress on stderr (a bar on a terminal, else lines)")
    t.add_argument("--timeline-points", type=bounded(MAX_TIMELINE_POINTS, minimum=0), default=0, metavar="N",
                   help='with --json, add "timeline": [[event, {component: live bytes}], ...], the memory over '
                        "the step(s) thinned to at most N points, each the largest of its run of events so the "
                        "peak is exact (default 0: left out, to keep --json small)")
    add_file_args(t, f"the memory timeline ({TIMELINE_POINTS:,} points, stacked by component, peak marked)")
    add_output_args(p)
    p.set_defaults(func=run)
    return p


def _is_path(text: str) -> bool:
    from pathlib import Path

    return Path(text).exists()


def run(args: argparse.Namespace) -> int:
    from vramlens.errors import InputError
    from vramlens.workload import make_workload

    # every value first (pure Python), so a bad one is named even where torch is not installed
    make_workload(**workload_kwargs(args))  # --alloc-conf included (a workload setting)
    from vramlens.trace import trace, write_timeline

    if args.params is not None:  # a generic decoder of that size (checked like estimate's)
        from vramlens.models import load_model

        args.model = load_model(args.model, params=args.params)
    if args.model is None:
        raise InputError("give a MODEL to trace (a catalog name, a config.json, or package.module:factory) "
                         "or --params SIZE")
    if args.real_cpu and args.cuda:
        raise InputError("--real-cpu and --cuda both given: choose one")
    if args.timeline:  # before the trace (minutes, maybe) and before any report file is written
        from pathlib import Path

        where = Path(args.timeline)
        if where.suffix.lower() not in (".jsonl", ".csv"):
            raise InputError(f"timeline={args.timeline!r}: the file must end in .jsonl (JSON lines) or .csv")
        if where.is_dir() or not (where.parent if str(where.parent) else Path(".")).is_dir():
            raise InputError(f"cannot write timeline {args.timeline!r}: "
                             f"{'it is a folder' if where.is_dir() else 'its folder does not exist'}: "
                             "choose a .jsonl or .csv file in a folder that exists")
    if isinstance(args.model, str) and ":" in args.model and not _is_path(args.model):
        # package.module:factory is imported like `python -m` would: from the current folder too
        import os

        if os.getcwd() not in sys.path:
            sys.path.insert(0, os.getcwd())
    backend = "real-cpu" if args.real_cpu else "cuda" if args.cuda else "fake"
    bar = progress_bar(f"tracing {getattr(args.model, 'name', args.model)}", enabled=not (args.quiet or args.json), delay=0)
    if bar is not None:
        progress = bar.messages()
    else:
        progress = None if args.quiet else (lambda msg: print(f"vramlens trace: {msg}", file=sys.stderr, flush=True))
    with bar or contextlib.nullcontext():
        res = trace(args.model, steps=args.steps, layers=args.layers, backend=backend, input_shape=args.input_shape,
                    progress=progress, top=max(args.top, 1), **workload_kwargs(args))
    if wants_files(args):
        write_files(args, "trace", res.to_dict(top=args.top, timeline_points=TIMELINE_POINTS))
    if args.timeline:
        try:
            write_timeline(list(res.events), args.timeline)
        except OSError as e:
            raise InputError(f"cannot write timeline {args.timeline!r}: {e.strerror}") from None
    if args.json:
        print_json(res.to_dict(top=args.top, timeline_points=args.timeline_points))
    else:
        show("trace", lambda: res.to_dict(top=args.top, timeline_points=TIMELINE_POINTS),
             lambda: render_trace(res, top=args.top), top=args.top)
    return 0


def render_trace(res, *, top: int = 10, width: int = 100) -> str:
    """The breakdown table, per-step and per-phase peaks, and what is alive at the peak."""
    from vramlens.report.text import breakdown_table
    from vramlens.trace.result import top_modules
    from vramlens.units import GiB, human_count

    wl = res.workload
    s = res.summary
    head = (f"{res.model_name}: {human_count(res.params)} parameters ({human_count(res.trainable_params)} trainable), "
            f"{wl.mode}, {wl.method}, dtype {wl.dtype}{' amp ' + wl.amp if wl.amp else ''}, batch {wl.batch}, "
            f"seq {wl.seq}" + (f", new tokens {wl.new_tokens}" if wl.new_tokens else ""))
    m1, m2 = res.truncated or ((res.layers - 1, res.layers) if res.layers else (0, 0))
    how = f"traced ({res.backend}" + (f", extrapolated from {m1} and {m2} of {res.n_layers} layers"
                                       if res.layers else "") + f") in {res.seconds:.1f} s"
    lines = [head, how, ""]
    lines += breakdown_table(res.breakdown, width=width)
    lines.append("")
    lines.append("peak by step: " + ", ".join(f"step {st} {b / GiB:,.2f} GiB" for st, b in res.step_peaks))
    lines.append("peak by phase: " + ", ".join(f"{p}{'' if len(res.step_peaks) < 2 else f' (step {st})'} "
                                                f"{b / GiB:,.2f} GiB" for st, p, b in res.phase_peaks if p != "setup"))
    if top:
        lines.append("")
        lines.append(f"alive at the peak ({s.peak_phase}, step {s.peak_step}), by module:")
        for m, b in top_modules(s, top):
            lines.append(f"  {b / GiB:>10,.3f} GiB  {m}")
        lines.append("largest tensors alive at the peak:")
        for t in s.top_tensors[:top]:
            lines.append(f"  {t.nbytes / GiB:>10,.3f} GiB  {t.tag:<15} {t.module or '<top>'}  ({t.op}, {t.phase})")
    if res.breakdown.notes:
        lines.append("")
        lines += [f"note: {n}" for n in res.breakdown.notes]
    return "\n".join(lines)
