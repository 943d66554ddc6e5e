"""`vramlens validate trace`: the analytic estimate against the fake-tensor tracer.

Registered by vramlens.cli.validate (``add_subparser``); needs the ``trace`` extra.
"""

from __future__ import annotations

import argparse
import sys

from vramlens.cli.options import print_json


def add_subparser(vsub) -> argparse.ArgumentParser:
    p = vsub.add_parser(
        "trace", help="the estimate against the tracer, per component, on a matrix of tiny architectures",
        description=("Estimate and trace the same workloads on shrunk catalog architectures (MHA, GQA, MQA, MoE, "
                     "encoder-only, encoder-decoder, tied and untied embeddings) and print, per component, the "
                     "estimate, the traced figure and the error. Tensors only: cuBLAS workspaces are left out."),
        epilog="example: vramlens validate trace --models gpt2,t5-small --json",
    )
    p.add_argument("--models", default=None, help="comma-separated catalog names (default: the whole matrix)")
    p.add_argument("--json", action="store_true", help="print JSON rows")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    p.set_defaults(func=run_trace)
    return p


def run_trace(args: argparse.Namespace) -> int:
    from vramlens.errors import InputError
    from vramlens.trace import require_torch

    require_torch()
    from vramlens.trace.crosscheck import ARCHITECTURES, render, run_matrix

    models = None
    if args.models:
        models = tuple(m.strip() for m in args.models.split(",") if m.strip())
        unknown = [m for m in models if m not in ARCHITECTURES]
        if unknown:
            raise InputError(f"models {', '.join(unknown)} are not in the cross-check matrix: "
                             f"use some of {', '.join(ARCHITECTURES)}")
    progress = None if args.quiet else (lambda m: print(f"vramlens validate trace: {m}", file=sys.stderr, flush=True))
    rows = run_matrix(models, progress=progress)
    if args.json:
        print_json([r.to_dict() for r in rows])
    else:
        print(render(rows))
    return 0
