"""The commands print rich views on a terminal and their plain text elsewhere."""

from __future__ import annotations

import io
import sys

import pytest

from vramlens.cli import render
from vramlens.cli.main import main

ESC = "\x1b["


class FakeTTY(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture
def terminal(monkeypatch):
    """stdout is a 100-column terminal without colour; returns its buffer."""
    pytest.importorskip("rich", reason="the rich views need the rich extra")
    from rich.console import Console

    buf = io.StringIO()
    console = Console(file=buf, width=100, force_terminal=True, color_system=None)
    monkeypatch.setattr(render, "rich_console", lambda stream=None: console if stream is None else None)
    return buf


def test_estimate_on_a_terminal_is_the_rich_view(terminal, capsys):
    assert main(["estimate", "vramlens/tiny-llama", "--mode", "train", "--gpu", "24GB"]) == 0
    assert capsys.readouterr().out == ""
    out = terminal.getvalue()
    assert ESC not in out
    assert "| headroom line: 10% kept free" in out and "24 GB GPU: [" in out and "FITS (24 GB GPU)" in out


def test_fit_and_place_on_a_terminal(terminal):
    assert main(["fit", "vramlens/tiny-llama", "--mode", "train", "--gpu", "24GB", "--top", "2"]) == 0
    out = terminal.getvalue()
    assert out.startswith("vramlens/tiny-llama on 1 x 24 GB GPU\n")
    assert "GiB per GPU" in out and "vs 22.35 GiB" in out
    terminal.truncate(0)
    terminal.seek(0)
    assert main(["place", "vramlens/tiny-llama", "--gpu", "24GB"]) == 0
    out = terminal.getvalue()
    assert "GPU 0 GiB" in out and "device_map (hybrid):" in out


def test_json_is_never_rich(terminal, capsys):
    assert main(["estimate", "vramlens/tiny-llama", "--json"]) == 0
    assert capsys.readouterr().out.startswith("{")
    assert terminal.getvalue() == ""


def test_plain_text_when_not_a_terminal(capsys):
    assert main(["estimate", "vramlens/tiny-llama", "--gpu", "24GB"]) == 0
    out = capsys.readouterr().out
    assert "component                         GiB  where it comes from" in out  # report.text's table
    assert "24 GB GPU: [#" in out


def test_rich_console_needs_a_terminal_and_rich(monkeypatch):
    assert render.rich_console(io.StringIO()) is None
    pytest.importorskip("rich")
    assert render.rich_console(FakeTTY()) is not None
    monkeypatch.setitem(sys.modules, "rich.console", None)  # rich not installed
    assert render.rich_console(FakeTTY()) is None


def test_progress_bar_only_on_a_terminal_and_when_enabled(monkeypatch):
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    assert render.progress_bar("x") is None
    pytest.importorskip("rich")
    monkeypatch.setattr(sys, "stderr", FakeTTY())
    assert render.progress_bar("x", enabled=False) is None
    bar = render.progress_bar("x", delay=5)
    assert bar is not None and bar.delay == 5
