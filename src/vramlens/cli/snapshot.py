"""`vramlens snapshot FILE`: where a real run's GPU memory went, from its snapshot or memory_stats."""

from __future__ import annotations

import argparse
from pathlib import Path

from vramlens import safe_io
from vramlens.allocator.snapshot import SnapshotReport, load_report
from vramlens.allocator.snapshot_html import render_html
from vramlens.cli.options import add_output_args, bounded, print_json
from vramlens.errors import SnapshotError
from vramlens.limits import MAX_SNAPSHOT_BYTES, MAX_TOP, show
from vramlens.units import human_bytes

EXAMPLE = """Examples:
  vramlens snapshot dump_snapshot.pickle --top 5
  vramlens snapshot memory_stats.json --json
  vramlens snapshot dump_snapshot.pickle --html memory.html

Record a snapshot in your training script:
  torch.cuda.memory._record_memory_history(max_entries=100000)
  ...  # run a few steps
  torch.cuda.memory._dump_snapshot("dump_snapshot.pickle")
or dump json.dumps(torch.cuda.memory_stats()) to a file. The pickle is read with a restricted
unpickler that refuses every global: nothing in the file is executed."""


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "snapshot",
        help="explain a real run's memory from a snapshot pickle or memory_stats JSON",
        description="Read torch.cuda.memory._dump_snapshot() output (safely) or torch.cuda.memory_stats() "
        "JSON; report reserved, allocated, fragmentation, the largest free block, the allocation history "
        "and the largest allocations by source line.",
        epilog=EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("file", help="snapshot .pickle or memory_stats .json")
    p.add_argument("--top", type=bounded(MAX_TOP, minimum=0), default=10, help="how many source lines to list (default 10)")
    p.add_argument("--html", metavar="OUT", default=None, help="also write a self-contained HTML report")
    add_output_args(p)
    p.set_defaults(func=run)
    return p


def render_text(r: SnapshotReport) -> str:
    def b(v: int | None) -> str:
        return human_bytes(v) if v is not None else "not recorded"

    lines = [
        f"source            {r.source}",
        f"reserved          {b(r.reserved_bytes)}",
        f"allocated         {b(r.allocated_bytes)}",
        f"active            {b(r.active_bytes)}",
        f"reserved-alloc.   {b(r.fragmentation_bytes)}",
        f"largest free      {b(r.largest_free_block_bytes)}",
        f"segments          {r.segments}",
        f"peak allocated    {b(r.peak_allocated_bytes)}",
        f"peak reserved     {b(r.peak_reserved_bytes)}",
    ]
    if r.blocks_by_state:
        lines.append("blocks            " + ", ".join(
            f"{state} {count} ({human_bytes(nbytes)})" for state, (count, nbytes) in r.blocks_by_state.items()))
    if r.history is not None:
        h = r.history
        window = "whole run" if h.complete else f"window starting with {human_bytes(h.baseline_allocated_bytes)} live"
        lines.append(f"history           {h.n_entries} entries ({window}); {len(h.ooms)} OOM")
    lines += ["", "Why reserved exceeds allocated:"] + [f"  - {x}" for x in r.explanation]
    if r.top_frames:
        lines += ["", "Largest live allocations by source line:"]
        lines += [f"  {human_bytes(f.bytes):>12}  x{f.count:<5} {f.frame}" for f in r.top_frames]
    if r.notes:
        lines += [""] + [f"note: {n}" for n in r.notes]
    return "\n".join(lines)


def read_capped(path: Path, limit: int) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes (at most limit + 1 are ever read).

    Raises:
        SnapshotError: missing, unreadable, not a regular file (a FIFO would block), or too large.
    """
    try:
        data = safe_io.read_capped(path, limit)
    except OSError as e:
        name = str(path) if len(str(path)) <= 200 else show(str(path))
        raise SnapshotError(f"cannot read {name}: {e.strerror or e}") from None
    if len(data) > limit:
        raise SnapshotError(f"{path} is over the {limit:,}-byte limit for a snapshot (MAX_SNAPSHOT_BYTES): "
                            "record fewer entries (_record_memory_history(max_entries=...))")
    return data


def run(args: argparse.Namespace) -> int:
    path = Path(args.file)
    if args.top < 0:
        raise SnapshotError(f"--top {args.top} must be 0 or more")
    data = read_capped(path, MAX_SNAPSHOT_BYTES)
    try:
        report = load_report(data, top=args.top)
    except SnapshotError as e:  # the loader sees bytes only: name the file here
        raise SnapshotError(f"{e} (file {path})") from None
    if args.html:
        from vramlens.report.html import write_text_atomic

        write_text_atomic(args.html, render_html(report, title=f"vramlens snapshot: {path.name}"))
    if args.json:
        print_json(report.to_dict())
    else:
        print(render_text(report))
    return 0
