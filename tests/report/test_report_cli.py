"""`vramlens estimate --html/--svg/--png` write their files, and only whole ones."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

from vramlens.cli.main import main


def test_estimate_writes_html_svg_and_png(tmp_path, capsys):
    html, svg, png = tmp_path / "r.html", tmp_path / "r.svg", tmp_path / "r.png"
    argv = ["estimate", "--params", "1B", "--mode", "train", "--gpu", "24GB", "--json",
            "--html", str(html), "--svg", str(svg)]
    try:
        import cairosvg  # noqa: F401

        argv += ["--png", str(png)]
    except (ImportError, OSError):
        png = None
    assert main(argv) == 0
    d = json.loads(capsys.readouterr().out)
    root = ET.fromstring(svg.read_text("utf-8"))
    assert "1 GiB = 1024³ bytes" in "".join(root.itertext())
    doc = html.read_text("utf-8")
    assert f"{d['device_total_bytes']:,}" in doc
    if png is not None:
        assert png.read_bytes()[:4] == b"\x89PNG"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["r.html", "r.svg"] + (["r.png"] if png else []))


def test_png_without_cairosvg_is_one_line_and_exit_2(tmp_path, capsys, monkeypatch):
    import vramlens.report.svg as S
    from vramlens.errors import MissingExtraError

    def missing(svg, **kw):
        raise MissingExtraError("cairosvg", "png")

    monkeypatch.setattr(S, "svg_to_png", missing)
    assert main(["estimate", "--params", "1B", "--png", str(tmp_path / "x.png")]) == 2
    assert capsys.readouterr().err.startswith("error: cairosvg is not installed")
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("flag", ["--svg", "--html"])
def test_unwritable_target_leaves_nothing(tmp_path, capsys, flag):
    target = tmp_path / "missing-dir" / "r.out"
    assert main(["estimate", "--params", "1B", flag, str(target)]) == 2
    assert capsys.readouterr().err == (f"error: {flag} '{target}': the folder '{target.parent}' does not exist: "
                                       "create it first or choose a file in an existing folder\n")
    assert not (tmp_path / "missing-dir").exists()
