"""HTML reports are single self-contained files and are written atomically."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from vramlens import __version__
from vramlens.errors import InputError
from vramlens.report import html
from vramlens.units import GiB

EXTERNAL = re.compile(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", re.I)


def assert_self_contained(doc: str) -> None:
    assert doc.startswith("<!DOCTYPE html>")
    assert not EXTERNAL.search(doc), EXTERNAL.search(doc)
    assert "<script" not in doc and "<link" not in doc and "@import" not in doc
    for s in re.findall(r"<svg.*?</svg>", doc, re.S):
        ET.fromstring(s)


def test_estimate_report(tiny_estimate):
    d = tiny_estimate.to_dict()
    doc = html.render_html("estimate", d)
    assert_self_contained(doc)
    assert f"vramlens {__version__}" in doc
    assert "<strong>FITS</strong> (" in doc and "usable" in doc
    for name, text in d["explanations"].items():  # the formula of every number
        if text:
            assert html.escape(text) in doc, name
    assert f"{d['device_total_bytes']:,}" in doc
    assert "<dt>batch</dt><dd>2</dd>" in doc and "<dt>model.name</dt><dd>tiny-llama</dd>" in doc


def test_write_estimate_html(tmp_path: Path, tiny_estimate):
    out = html.write_estimate_html(tiny_estimate, tmp_path / "r.html")
    assert out.read_text("utf-8").startswith("<!DOCTYPE html>")
    assert [p.name for p in tmp_path.iterdir()] == ["r.html"]  # no temporary file left


def test_a_failed_write_leaves_nothing(tmp_path: Path, monkeypatch):
    target = tmp_path / "r.html"
    target.write_text("old")

    def boom(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(html.os, "replace", boom)
    with pytest.raises(InputError, match="cannot write .*r.html: disk full"):
        html.write_text_atomic(target, "new")
    assert [p.name for p in tmp_path.iterdir()] == ["r.html"]
    assert target.read_text() == "old"


def test_fit_report_shows_plans_side_by_side():
    data = {"model": {"name": "m"}, "gpu": {"name": "24GB GPU", "usable_bytes": 24 * GiB},
            "plans": [{"name": "lora", "components": {"weights": 13 * GiB}, "device_total_bytes": 14 * GiB,
                       "fits": True, "changes": {"method": "lora"}},
                      {"name": "qlora", "components": {"weights": 4 * GiB}, "fits": True}]}
    doc = html.render_html("fit", data)
    assert_self_contained(doc)
    assert 'id="plans"' in doc and "method=lora" in doc and 'class="seg" data-plan="1"' in doc


def test_fit_report_of_advisor_shaped_plans():
    data = {"gpu": "24 GB GPU", "message": "2 of 9 plans fit", "plans": [
        {"settings": {"mode": "train", "method": "lora", "zero": 0, "batch": 1}, "fits": True,
         "device_total_bytes": 15 * GiB, "components": {"weights": 13 * GiB}, "tradeoffs": ["fewer trainable params"]}]}
    doc = html.render_html("fit", data)
    assert_self_contained(doc)
    assert "2 of 9 plans fit" in doc and "<td>method=lora</td>" in doc and "fewer trainable params" in doc
    assert html.plan_label({"settings": {"mode": "train", "zero": 3, "offload": "all"}}) == "zero=3 offload=all"


def test_trace_report_timeline_and_top_tensors():
    events = [{"seq": 0, "action": "alloc", "nbytes": GiB, "tag": "parameter"},
              {"seq": 1, "action": "alloc", "nbytes": 2 * GiB, "tag": "activation"},
              {"seq": 2, "action": "free", "nbytes": 2 * GiB, "tag": "activation"}]
    data = {"model": {"name": "m"}, "components": {"weights": GiB, "activations": 2 * GiB},
            "device_total_bytes": 3 * GiB, "events_list": events,
            "trace": {"top_modules_at_peak": [{"module": "model.layers.0.mlp", "bytes": 2 * GiB}],
                      "top_tensors_at_peak": [{"bytes": 2 * GiB, "tag": "activation", "module": "mlp", "op": "mm",
                                               "phase": "forward", "step": 0}]}}
    doc = html.render_html("trace", data)
    assert_self_contained(doc)
    assert 'id="timeline"' in doc and "peak 3.00 GiB" in doc and "model.layers.0.mlp" in doc


def test_timeline_from_events_keeps_the_peak_when_thinning():
    events = [{"seq": i, "action": "alloc" if i != 7 else "alloc", "nbytes": 1, "tag": "t"} for i in range(10)]
    events += [{"seq": 10 + i, "action": "free", "nbytes": 1, "tag": "t"} for i in range(10)]
    pts = html.timeline_from_events(events, max_points=4)
    assert max(sum(p[1].values()) for p in pts) == 10
    assert pts[-1][1] == {"t": 0}


def test_unknown_kind():
    with pytest.raises(InputError) as e:
        html.render_html("snapshot", {})
    assert str(e.value) == "kind='snapshot' is not one of: estimate, fit, trace, place"
