"""`vramlens models`: the bundled offline model catalog."""

from __future__ import annotations

import argparse

from vramlens.cli.options import print_json


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("models", help="list the bundled model catalog",
                       description="List the models vramlens knows offline (hub ids and short aliases).",
                       epilog="examples:\n  vramlens models\n  vramlens models llama --json",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("filter", nargs="?", default=None, help="only names containing this text")
    p.add_argument("--json", action="store_true", help="print a JSON list")
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    from vramlens.models.catalog import list_catalog
    from vramlens.units import human_count

    entries = list_catalog()
    if args.filter:
        f = args.filter.lower()
        entries = tuple(e for e in entries if f in e.id.lower() or any(f in a.lower() for a in e.aliases))
    if args.json:
        print_json([{"id": e.id, "aliases": list(e.aliases), "family": e.family, "kind": e.kind,
                     "params": e.params} for e in entries])
        return 0
    print(f"{'hub id':<44} {'alias':<24} {'type':<12} {'kind':<16} {'params':>9}")
    for e in entries:
        print(f"{e.id:<44} {(e.aliases[0] if e.aliases else ''):<24} {e.family:<12} {e.kind:<16} {human_count(e.params):>9}")
    print(f"{len(entries)} models")
    return 0
