"""One home for running the CLI in a test: ``run_cli(capsys, argv) -> (exit code, stdout, stderr)``."""

from __future__ import annotations


def run_cli(capsys, argv: list[str]) -> tuple[int, str, str]:
    """``vramlens ARGV`` in-process; argparse's own rejections (SystemExit) give their exit code."""
    from vramlens.cli.main import main

    try:
        code = main(argv)
    except SystemExit as e:
        code = e.code
    out, err = capsys.readouterr()
    return code, out, err
