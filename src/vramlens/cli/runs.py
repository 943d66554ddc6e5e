"""`vramlens runs`: the watched runs remembered in the runs database (list, show, compare, export)."""

from __future__ import annotations

import argparse
import json

from vramlens.cli.options import bounded, print_json
from vramlens.monitor.runs import compare, database_path, list_runs, load_run
from vramlens.units import human_bytes

#: Bounds of the arguments: run ids are SQLite rowids (63-bit), far above any real count of runs.
MAX_ID = 2**63 - 1
MAX_LIST = 10_000

EXAMPLE = """Examples:
  vramlens runs list
  vramlens runs show 3 --json
  vramlens runs compare 3 4
  vramlens runs export 3 > run3.json"""


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "runs",
        help="list, show, compare and export watched runs",
        description="Runs watched with vramlens.watch() are stored in a SQLite database in VRAMLENS_HOME "
        "(default ~/.cache/vramlens).",
        epilog=EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = p.add_subparsers(dest="runs_command", metavar="ACTION", required=True)
    ls = sub.add_parser("list", help="the most recent runs, newest first")
    ls.add_argument("--limit", type=bounded(MAX_LIST), default=50, help=f"how many runs (default 50, at most {MAX_LIST:,})")
    show = sub.add_parser("show", help="one run: its steps, leak and OOM findings")
    show.add_argument("id", type=bounded(MAX_ID), metavar="ID")
    cmp = sub.add_parser("compare", help="two runs side by side by category")
    cmp.add_argument("a", type=bounded(MAX_ID), metavar="ID")
    cmp.add_argument("b", type=bounded(MAX_ID), metavar="ID")
    export = sub.add_parser("export", help="one run as JSON (the form WatchReport.to_dict() gives)")
    export.add_argument("id", type=bounded(MAX_ID), metavar="ID")
    export.add_argument("--html", default=None, metavar="FILE", help="write the run's HTML report instead")
    for q in (ls, show, cmp, export):
        q.add_argument("--json", action="store_true", help="print JSON")
        q.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    action = args.runs_command
    if action == "list":
        rows = list_runs(args.limit)
        if args.json:
            print_json({"database": str(database_path()), "runs": [r.to_dict() for r in rows]})
            return 0
        if not rows:
            print(f"no runs in {database_path()} yet: wrap a loop in vramlens.watch() to record one")
            return 0
        print(f"{'id':>4} {'created':<25} {'backend':<7} {'steps':>6} {'peak':>12} {'leak/step':>11} oom  label")
        for r in rows:
            leak = human_bytes(r.leak_bytes_per_step) if r.leak_bytes_per_step else "-"
            print(f"{r.id:>4} {r.created:<25} {r.backend:<7} {r.steps:>6} {human_bytes(r.peak_allocated_bytes):>12} "
                  f"{leak:>11} {'yes' if r.oom else 'no ':<4} {r.label or ''}")
        return 0
    if action == "show":
        report = load_run(args.id)
        if args.json:
            print_json(report.to_dict())
        else:
            print(f"run {args.id}")
            print(report.text())
        return 0
    if action == "compare":
        d = compare(load_run(args.a), load_run(args.b))
        if args.json:
            print_json(d)
            return 0
        print(f"{'':<30} {'run ' + str(args.a):>14} {'run ' + str(args.b):>14} {'difference':>14}")
        for name, row in d["rows"].items():
            print(f"{name:<30} {human_bytes(row['a']):>14} {human_bytes(row['b']):>14} {human_bytes(row['difference']):>14}")
        return 0
    report = load_run(args.id)
    if args.html:
        from vramlens.report.html import write_text_atomic

        write_text_atomic(args.html, report.to_html())
        print(f"wrote {args.html}")
        return 0
    print(json.dumps(report.to_dict(), indent=2))
    return 0
