"""`vramlens validate`: how far the estimates are from independent references.

Subcommands:
  published   the published GPU measurements and paper formulas in validation/published-cases.json
  trace       the analytic estimate against the fake-tensor tracer on a matrix of architectures
  capacity    serving engines' start-up logs (validation/capacity-cases.json) against `vramlens capacity`
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from vramlens.cli.options import print_json

EXAMPLES = """examples:
  vramlens validate published
  vramlens validate published --json
  vramlens validate trace
  vramlens validate capacity --json
"""


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("validate", help="compare estimates with published figures and with the tracer",
                       description=__doc__, epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    vsub = p.add_subparsers(dest="validate_what", metavar="WHAT")
    pub = vsub.add_parser("published", help="published GPU measurements and paper formulas",
                          epilog="example: vramlens validate published --json")
    pub.add_argument("--cases", default=None, help="a published-cases.json (default: the bundled one)")
    pub.add_argument("--json", action="store_true", help="print JSON rows")
    pub.set_defaults(func=run_published)
    cap = vsub.add_parser("capacity", help="serving engines' published start-up logs against vramlens capacity",
                          epilog="example: vramlens validate capacity --json")
    cap.add_argument("--cases", default=None, help="a capacity-cases.json (default: validation/capacity-cases.json)")
    cap.add_argument("--json", action="store_true", help="print JSON rows")
    cap.set_defaults(func=run_capacity)
    add_trace = _trace_hook()
    if add_trace is not None:
        add_trace(vsub)
    p.set_defaults(func=_what_missing)
    return p


def _what_missing(args: argparse.Namespace) -> int:
    from vramlens.errors import InputError

    raise InputError("give what to validate: `vramlens validate published` or `vramlens validate trace` "
                     "(vramlens validate --help)")


def _trace_hook():
    try:
        from vramlens.cli import validate_trace
    except ModuleNotFoundError:
        return None
    return validate_trace.add_subparser


def read_cases(path: Path) -> Any:
    """A cases file (JSON), read as every untrusted file is (safe_io: a regular file, bounded JSON).

    Raises:
        InputError: missing, unreadable, over 64 MiB, or not bounded JSON; the message names the file.
    """
    from vramlens.errors import InputError
    from vramlens.safe_io import UnsafeJSON, loads_bounded, read_capped

    limit = 64 * 1024 * 1024  # the bundled cases are ~100 KiB
    try:
        data = read_capped(path, limit)
    except FileNotFoundError:
        raise InputError(f"cases file {str(path)!r} does not exist: pass --cases PATH") from None
    except OSError as e:  # a folder, a FIFO, no permission
        raise InputError(f"cases file {str(path)!r} cannot be read ({e.strerror or e}): pass --cases PATH") from None
    if len(data) > limit:
        raise InputError(f"cases file {str(path)!r} is over {limit:,} bytes: not a cases file")
    try:
        return loads_bounded(data)
    except UnsafeJSON as e:
        raise InputError(f"cases file {str(path)!r} is {e}") from None


def bundled_cases_path() -> Path:
    from importlib.resources import files

    packaged = files("vramlens").joinpath("data/published-cases.json")
    if packaged.is_file():
        return Path(str(packaged))
    return Path(__file__).resolve().parents[1] / "data" / "published-cases.json"


def run_published(args: argparse.Namespace) -> int:
    from vramlens.errors import InputError
    from vramlens.published import run_all

    path = Path(args.cases) if args.cases else bundled_cases_path()
    cases = read_cases(path)
    if not isinstance(cases, list) or not all(
            isinstance(c, dict) and "id" in c and isinstance(c.get("figure"), dict) for c in cases):
        raise InputError(f"cases file {str(path)!r} must hold a JSON list of cases, each an object with \"id\" "
                         "and \"figure\": see the bundled published-cases.json")
    rows = run_all(cases)
    if args.json:
        print_json([
            {"id": r.id, "figure": r.figure, "published_bytes": r.published_bytes, "estimated_bytes": r.estimated_bytes,
             "error": r.error, "first_order_bytes": r.first_order_bytes, "first_order_error": r.first_order_error,
             "reason": r.reason}
            for r in rows
        ])
        return 0
    print(render_rows(rows))
    return 0


def render_rows(rows) -> str:
    mib = 1024**2
    lines = [f"{'case':<48} {'figure':<18} {'published':>12} {'vramlens':>12} {'error':>8} {'1st-order':>10}",
             "-" * 112]
    for r in rows:
        if r.estimated_bytes is None:
            lines.append(f"{r.id:<48} {'-':<18} {r.published_bytes / mib:>10,.0f}Mi {'-':>12} {'-':>8}  {r.reason}")
            continue
        fo = f"{r.first_order_error:+.1%}" if r.first_order_error is not None else ""
        lines.append(f"{r.id:<48} {r.figure:<18} {r.published_bytes / mib:>10,.0f}Mi {r.estimated_bytes / mib:>10,.0f}Mi "
                     f"{r.error:>+8.1%} {fo:>10}")
    errs = [abs(r.error) for r in rows if r.error is not None]
    if errs:
        errs.sort()
        lines.append("-" * 112)
        lines.append(f"{len(errs)} cases: median |error| {errs[len(errs) // 2]:.1%}, max {errs[-1]:.1%} "
                     "(MiB = 2^20 bytes; 1st-order = peak allocated + context, no allocator model)")
    return "\n".join(lines)


def capacity_cases_path() -> Path:
    """validation/capacity-cases.json of a source checkout (it is not packaged)."""
    return Path(__file__).resolve().parents[3] / "validation" / "capacity-cases.json"


def run_capacity(args: argparse.Namespace) -> int:
    from vramlens.errors import InputError
    from vramlens.serving.validation import run_cases

    path = Path(args.cases) if args.cases else capacity_cases_path()
    cases = read_cases(path)
    if not isinstance(cases, list) or not all(isinstance(c, dict) for c in cases):
        raise InputError(f"cases file {str(path)!r} must hold a JSON list of case objects")
    results = run_cases(cases)
    if args.json:
        print_json([
            {"id": r.id, "engine": r.engine, "engine_version": r.engine_version, "source": r.source, "note": r.note,
             "refusal": r.refusal, "engine_refused": r.engine_refused,
             "figures": [{"figure": c.figure, "key": c.key, "logged": c.logged, "predicted": c.predicted,
                          "error": c.error} for c in r.checks]}
            for r in results
        ])
        return 0
    print(render_capacity(results))
    return 0


def render_capacity(results) -> str:
    from vramlens.serving.validation import summarize

    lines = [f"{'case':<38} {'figure':<22} {'logged':>12} {'vramlens':>12} {'error':>8}", "-" * 96]
    for r in results:
        for c in r.checks:
            pred = "refused" if c.predicted is None else f"{c.predicted:,.2f}"
            err = "" if c.error is None else f"{c.error:+.1%}"
            lines.append(f"{r.id:<38} {c.figure:<22} {c.logged:>12,.2f} {pred:>12} {err:>8}")
        if r.refusal or r.engine_refused:
            said = r.refusal.split(" (")[0] if r.refusal else "starts (it should refuse)"
            lines.append(f"{'':<38} engine {'refused' if r.engine_refused else 'started'}; vramlens: {said}")
    lines.append("-" * 96)
    lines.append(f"{'engine':<10} {'cases':>5} {'figures':>7} {'median |err|':>12} {'<=10%':>6}   "
                 f"{'KV cases':>8} {'median |err|':>12} {'<=3%':>6}   refusals agreed")
    for s in summarize(results):
        def pct(x):
            return "-" if x is None else f"{x:.1%}"
        lines.append(f"{s.engine:<10} {s.cases:>5} {s.figures:>7} {pct(s.median_abs_error):>12} {pct(s.within_10):>6}   "
                     f"{s.kv_cases:>8} {pct(s.kv_median_abs_error):>12} {pct(s.kv_within_3):>6}   "
                     f"{s.refusals_agreed}/{s.refusals}")
    lines.append("GiB for memory, MiB for llama.cpp buffers, counts for blocks and tokens; error = vramlens / logged - 1; "
                 "KV: one KV-sizing figure per case. Sources and notes: validation/capacity-cases.json")
    return "\n".join(lines)
