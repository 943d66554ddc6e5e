"""`vramlens run`: run a training script unchanged, watched, and write one report (merged over ranks)."""

from __future__ import annotations

import argparse
import json
import sys

from vramlens.cli.options import size_arg

#: The CPU cap accepted on the command line (1 PiB: far above any host).
MAX_CPU_LIMIT = 2**50

EXAMPLE = """Examples:
  vramlens run --report run.html -- python train.py --lr 3e-4
  vramlens run --json run.json -- torchrun --nproc_per_node 2 train.py

The command runs as typed, with a generated sitecustomize.py first on PYTHONPATH (an existing one
still runs first). Its exit code and traceback are its own; vramlens adds the report after them."""


def split_command(rest: list[str]) -> list[str]:
    """The command after `--` (argparse keeps the `--` in a REMAINDER)."""
    return rest[1:] if rest and rest[0] == "--" else rest


def add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--label", default=None, help="a label for the runs database")
    p.add_argument("--cpu-limit", type=size_arg("cpu-limit", MAX_CPU_LIMIT), default=None, metavar="SIZE",
                   help="CPU backend only: raise an out-of-memory error past this many bytes of live tensors "
                        "(rehearse an OOM, or calibrate against a capacity, without a GPU)")
    p.add_argument("command", nargs=argparse.REMAINDER, metavar="-- COMMAND ...",
                   help="the command to run, after --")


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "run", help="run a script unchanged and watch its memory (no code change)",
        description="Run a Python training command with vramlens.watch() started in each of its processes "
                    "(under torchrun one report per rank, merged).",
        epilog=EXAMPLE, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--report", default=None, metavar="FILE.html", help="write the HTML report here")
    p.add_argument("--json", default=None, metavar="FILE", help="write the report as JSON here")
    add_common(p)
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    from vramlens.errors import InputError
    from vramlens.monitor.launch import run_command

    command = split_command(args.command)
    if not command:
        raise InputError("give the command after --: vramlens run -- python train.py")
    for flag, path in (("report", args.report), ("json", args.json)):
        check_path(flag, path)
    options = {"label": args.label}
    if args.cpu_limit is not None:
        options.update(backend="cpu", cpu_limit_bytes=args.cpu_limit)
    try:
        result = run_command(command, options=options)
    except (FileNotFoundError, PermissionError) as e:
        raise InputError(f"cannot run {command[0]!r}: {e.strerror or e}") from None
    sys.stdout.flush()
    print(result.text(), file=sys.stderr)
    for path, text in ((args.report, result.to_html), (args.json, lambda: json.dumps(result.to_dict(), indent=2) + "\n")):
        if path:
            from vramlens.report.html import write_text_atomic

            write_text_atomic(path, text())
            print(f"vramlens run: wrote {path}", file=sys.stderr)
    return result.exit_code


def check_path(flag: str, value: str | None) -> None:
    """Refuse before the run a report path that cannot be written (a folder, a missing folder)."""
    from pathlib import Path

    from vramlens.errors import InputError

    if not value:
        return
    target = Path(value)
    if target.is_dir():
        raise InputError(f"--{flag} {value!r} is a folder: give a file path")
    if not (target.parent if str(target.parent) else Path(".")).is_dir():
        raise InputError(f"--{flag} {value!r}: the folder {str(target.parent)!r} does not exist")
