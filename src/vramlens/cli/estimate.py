"""`vramlens estimate`: how much memory a workload needs, by component, and whether it fits."""

from __future__ import annotations

import argparse

from vramlens.cli.options import (
    add_model_arg,
    add_output_args,
    add_workload_args,
    print_json,
    require_model_and_headroom,
    workload_kwargs,
)

EXAMPLES = """examples:
  vramlens estimate llama-2-7b --gpu A100-80GB
  vramlens estimate meta-llama/Llama-2-7b-hf --mode train --method lora --lora-rank 16 --gpu 24GB
  vramlens estimate --params 7B --mode train --dtype bf16 --amp bf16 --checkpointing full --json
  vramlens estimate ./my-model/config.json --mode inference --seq 4096 --new-tokens 512 --kv-dtype fp8
  vramlens estimate ./stablelm/config.json --mode train --seq 512   (no family: traced once, then cached)
"""


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "estimate", help="memory per GPU by component, and whether it fits",
        description="Estimate GPU memory of a model and workload, component by component, before anything runs.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_model_arg(p)
    add_workload_args(p)
    p.add_argument("--gpu", default=None, help="GPU name from `vramlens gpus` or a size (24GB, 80GiB)")
    p.add_argument("--headroom", type=float, default=0.10, help="fraction of the GPU kept free (default 0.10)")
    p.add_argument("--html", default=None, metavar="FILE", help="also write a self-contained HTML report")
    p.add_argument("--svg", default=None, metavar="FILE", help="also write the breakdown chart as SVG")
    p.add_argument("--png", default=None, metavar="FILE", help="also write the breakdown chart as PNG (needs cairosvg)")
    p.add_argument("--trace-fallback", action=argparse.BooleanOptionalAction, default=True,
                   help="trace the real transformers model when its model_type is not modelled analytically "
                        "(needs vramlens[trace]; cached after the first call; default on)")
    add_output_args(p)
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    import sys

    from vramlens.fallback import estimate

    require_model_and_headroom(args)
    def progress(msg: str) -> None:  # a trace runs (the fallback's first call): say so on a terminal
        if sys.stderr.isatty():
            print(f"vramlens estimate: {msg}", file=sys.stderr, flush=True)

    est = estimate(args.model, gpu=args.gpu, params=args.params, headroom=args.headroom,
                   trace_fallback=args.trace_fallback, progress=progress, **workload_kwargs(args))
    if getattr(args, "html", None):
        from vramlens.report.html import write_estimate_html

        write_estimate_html(est, args.html, headroom=args.headroom)
    if getattr(args, "svg", None) or getattr(args, "png", None):
        from vramlens.report.html import write_text_atomic
        from vramlens.report.svg import estimate_chart, svg_to_png

        chart = estimate_chart(est.to_dict(), headroom=args.headroom)
        if args.png:
            write_text_atomic(args.png, svg_to_png(chart))
        if args.svg:
            write_text_atomic(args.svg, chart)
    if args.json:
        print_json(est.to_dict())
    else:
        from vramlens.cli.render import show
        from vramlens.report.text import render_estimate, use_color

        show("estimate", est.to_dict, lambda: render_estimate(est, color=use_color(), headroom=args.headroom),
             headroom=args.headroom)
    return 0
