"""fit's progress callback, and the --html/--svg/--png reports of `vramlens fit` and `vramlens place`."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET

import pytest

from vramlens.advise import fit
from vramlens.cli.main import main

MODEL = "vramlens/tiny-llama"
EXTERNAL = re.compile(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", re.I)


def assert_self_contained(doc: str) -> None:
    assert doc.startswith("<!DOCTYPE html>")
    assert not EXTERNAL.search(doc)
    assert "<script" not in doc and "<link" not in doc and "@import" not in doc
    for s in re.findall(r"<svg.*?</svg>", doc, re.S):
        ET.fromstring(s)


# ---- progress ---------------------------------------------------------------------------------
@pytest.mark.parametrize("kw", [dict(mode="train", batch=4), dict(mode="inference", seq=256),
                                dict(mode="train", batch=8, gpus=4)])
def test_progress_counts_up_to_the_total(kw):
    calls: list[tuple[int, int]] = []
    with_progress = fit(MODEL, gpu="24GB", progress=lambda done, total: calls.append((done, total)),
                        optimize="speed", **kw)
    without = fit(MODEL, gpu="24GB", optimize="speed", **kw)
    assert with_progress.to_dict() == without.to_dict()  # watching does not change the answer
    total = calls[0][1]
    assert total >= 1
    assert calls == [(i, total) for i in range(total + 1)]


def test_progress_total_is_the_structures_searched():
    calls: list[tuple[int, int]] = []
    # one layout (tp=pp=1 on one GPU) and no remedies but the micro-batch split: one structure
    fit(MODEL, gpu="24GB", mode="train", batch=4,
        forbid="amp,checkpointing,attention,lora,qlora,8bit,4bit,zero,fsdp,tp,pp,offload",
        progress=lambda d, t: calls.append((d, t)), optimize="speed")
    assert calls == [(0, 1), (1, 1)]


# ---- reports ----------------------------------------------------------------------------------
def test_fit_writes_html_and_svg_and_json_is_unchanged(tmp_path, capsys):
    argv = ["fit", MODEL, "--mode", "train", "--batch", "4", "--gpu", "24GB", "--top", "3", "--optimize", "speed",
            "--json"]
    assert main(argv) == 0
    plain = json.loads(capsys.readouterr().out)
    html, svg = tmp_path / "plans.html", tmp_path / "plans.svg"
    assert main(argv + ["--html", str(html), "--svg", str(svg)]) == 0
    assert json.loads(capsys.readouterr().out) == plain
    doc = html.read_text("utf-8")
    assert_self_contained(doc)
    assert f"<h1>{MODEL}: plans that fit</h1>" in doc
    # one row per plan shown: the tiny model's minimal plans (4-bit states, 8-bit states, the base as it is)
    assert doc.count('<tr><td>') == len(plain["plans"]) == 3
    assert f"{plain['plans'][0]['device_total_bytes'] / 2**30:,.2f}" in doc
    root = ET.fromstring(svg.read_text("utf-8"))
    ns = "{http://www.w3.org/2000/svg}"
    plans = {r.get("data-plan") for r in root.iter(ns + "rect") if r.get("data-plan") is not None}
    assert plans == {str(i) for i in range(len(plain["plans"]))}  # the plans side by side
    assert root.find(ns + "title").text == f"Plans side by side: {MODEL}, per GPU"
    assert [x.get("class") for x in root.iter(ns + "line") if x.get("class") in ("capacity", "headroom")] == [
        "capacity", "headroom"]


def test_fit_report_of_no_fit_shows_the_closest_plan(tmp_path, capsys):
    html = tmp_path / "r.html"
    rc = main(["fit", "llama-2-70b", "--mode", "train", "--gpu", "T4", "--method", "full",
               "--forbid", "zero,fsdp,offload,lora,qlora,tp,pp,8bit,quant", "--html", str(html)])
    assert rc == 1
    capsys.readouterr()
    doc = html.read_text("utf-8")
    assert_self_contained(doc)
    assert '<p class="verdict nofit">No plan fits.</p>' in doc
    assert "<h2>Closest plan (does not fit)</h2>" in doc and "Closest plan (does not fit): llama-2-70b" in doc


def test_fit_png_without_cairosvg_writes_nothing(tmp_path, capsys, monkeypatch):
    import vramlens.report.svg as S
    from vramlens.errors import MissingExtraError

    def missing(svg, **kw):
        raise MissingExtraError("cairosvg", "png")

    monkeypatch.setattr(S, "svg_to_png", missing)
    rc = main(["fit", MODEL, "--gpu", "24GB", "--png", str(tmp_path / "x.png"), "--html", str(tmp_path / "x.html")])
    assert rc == 2
    assert capsys.readouterr().err.startswith("error: cairosvg is not installed")
    assert not list(tmp_path.iterdir())


def test_place_writes_html_and_svg(tmp_path, capsys):
    html, svg = tmp_path / "place.html", tmp_path / "place.svg"
    assert main(["place", MODEL, "--gpu", "24GB", "--json", "--html", str(html), "--svg", str(svg)]) == 0
    d = json.loads(capsys.readouterr().out)
    doc = html.read_text("utf-8")
    assert_self_contained(doc)
    assert f"<h1>{MODEL} on 1 x 24 GB GPU: where the blocks go</h1>" in doc
    for o in d["options"]:
        assert f"<tr><td>{o['kind']}</td><td>{'yes' if o['fits'] else 'no'}</td>" in doc
    assert '<table id="device_map">' in doc and "<dt>new_tokens</dt><dd>128</dd>" in doc
    root = ET.fromstring(svg.read_text("utf-8"))
    ns = "{http://www.w3.org/2000/svg}"
    labels = [t.text for t in root.iter(ns + "text")]
    assert {"gpu", "hybrid", "cpu"} <= set(labels) and "GPU 0" in labels and "CPU RAM" in labels


def test_place_gguf_reports_are_refused(tmp_path, capsys):
    rc = main(["place", str(tmp_path / "m.gguf"), "--gpu", "24GB", "--svg", str(tmp_path / "m.svg")])
    assert rc == 2
    assert capsys.readouterr().err == "error: --html/--svg/--png are not drawn for a GGUF split yet: use --json\n"
