"""The live line: drawn on a terminal, nothing otherwise."""

import io

import pytest

pytest.importorskip("torch", reason="vramlens.watch runs inside a torch process (the trace extra)")

import torch  # noqa: E402

import vramlens  # noqa: E402
from vramlens.monitor.live import LiveLine  # noqa: E402

from .loops import tiny_model, train  # noqa: E402


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_line_text_against_the_capacity():
    line = LiveLine(4096, io.StringIO())
    assert line.line(3, 1024, 2048) == "vramlens step 3: 1.00 KiB now, peak 2.00 KiB of 4.00 KiB (50%)"
    assert LiveLine(None, io.StringIO()).line(1, 10, 20) == "vramlens step 1: 10 B now, peak 20 B"


def test_a_terminal_gets_the_line_and_a_pipe_gets_nothing():
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    tty, pipe = Terminal(), io.StringIO()
    with vramlens.watch(model, opt, backend="cpu", cpu_limit_bytes=10_000_000, store=False, live_stream=tty):
        train(model, opt, 3)
    with vramlens.watch(model, opt, backend="cpu", store=False, live_stream=pipe):
        train(model, opt, 3)
    shown = tty.getvalue()
    assert "vramlens step 1: 74.01 KiB now, peak 90.02 KiB of 9.54 MiB" in shown
    assert pipe.getvalue() == ""
