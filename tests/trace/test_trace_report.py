"""The trace's memory timeline, and `vramlens trace --timeline-points / --html / --svg`."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET

import pytest
from tests.trace.conftest import tiny_llama

from vramlens.cli.main import main
from vramlens.trace.events import INFERENCE_COMPONENT, Event, memory_timeline


def ev(seq: int, action: str, storage: int, nbytes: int, tag: str) -> Event:
    return Event(seq, action, storage, nbytes, tag, "m", "forward", 1, "op")


def test_timeline_follows_the_live_bytes_by_component():
    events = [ev(0, "alloc", 1, 100, "parameter"), ev(1, "alloc", 2, 50, "activation"),
              ev(2, "alloc", 3, 30, "temporary"), ev(3, "free", 3, 30, "temporary"), ev(4, "free", 2, 50, "activation")]
    assert memory_timeline(events) == (
        (0, {"weights": 100}),
        (1, {"weights": 100, "activations": 50}),
        (2, {"weights": 100, "activations": 50, "temporaries": 30}),
        (3, {"weights": 100, "activations": 50}),
        (4, {"weights": 100}),
    )
    # inference: the working set is what the breakdown calls activations
    assert memory_timeline(events, component_of=INFERENCE_COMPONENT)[2] == (2, {"weights": 100, "activations": 80})


def test_timeline_skips_host_tags_and_unknown_frees():
    events = [ev(0, "alloc", 1, 100, "parameter"), ev(1, "alloc", 2, 8, "host"), ev(2, "free", 9, 64, "temporary")]
    assert memory_timeline(events) == ((0, {"weights": 100}),)


def test_thinning_keeps_each_runs_largest_point_and_the_peak():
    # a saw tooth of 1,000 allocations and frees (seq 1, 2, 3, ...), one of 10,000 B at seq 1,233
    events, seq = [ev(0, "alloc", 0, 1_000, "parameter")], 1
    for i in range(1, 1_001):
        size = 10_000 if seq == 1_233 else 10
        events.append(ev(seq, "alloc", i, size, "temporary"))
        events.append(ev(seq + 1, "free", i, size, "temporary"))
        seq += 2
    points = memory_timeline(events, max_points=100)
    assert len(points) <= 100
    totals = [sum(p[1].values()) for p in points]
    assert max(totals) == 1_000 + 10_000  # the spike survives the thinning
    assert [p[0] for p in points] == sorted(p[0] for p in points)
    assert memory_timeline(events, max_points=1) == ((1_233, {"weights": 1_000, "temporaries": 10_000}),)


def test_max_points_must_be_positive():
    with pytest.raises(ValueError, match=r"^max_points=0 must be >= 1$"):
        memory_timeline([], max_points=0)


@pytest.fixture(scope="module")
def traced():
    from vramlens.trace import trace

    return trace(tiny_llama(), mode="train", seq=32, steps=2, top=5)


def test_trace_result_timeline_peaks_at_the_measured_peak(traced):
    points = traced.timeline(500)
    assert 0 < len(points) <= 500
    totals = [sum(by.values()) for _, by in points]
    assert max(totals) == traced.summary.peak_allocated
    assert points[totals.index(max(totals))][0] == traced.summary.peak_seq
    assert {c for _, by in points for c in by} <= set(traced.breakdown.as_dict())


def test_to_dict_has_a_timeline_only_when_asked(traced):
    assert "timeline" not in traced.to_dict()
    d = traced.to_dict(timeline_points=50)
    assert 0 < len(d["timeline"]) <= 50
    assert json.loads(json.dumps(d))["timeline"][0] == [list(p) for p in traced.timeline(50)][0]


@pytest.fixture
def config(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(tiny_llama()))
    return str(path)


def test_cli_json_timeline_points(config, capsys):
    base = ["trace", config, "--mode", "train", "--seq", "32", "--steps", "1", "--json", "--quiet"]
    assert main(base + ["--timeline-points", "40"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert 0 < len(d["timeline"]) <= 40
    assert max(sum(by.values()) for _, by in d["timeline"]) == d["peak_allocated_bytes"]
    assert main(base + ["--timeline-points", "-1"]) == 2
    assert capsys.readouterr().err == ("error: argument --timeline-points: '-1' must be >= 0 "
                                       "(see vramlens trace --help)\n")


def test_cli_html_and_svg(config, tmp_path, capsys):
    html, svg = tmp_path / "trace.html", tmp_path / "timeline.svg"
    rc = main(["trace", config, "--mode", "train", "--seq", "32", "--steps", "1", "--top", "3", "--quiet", "--json",
               "--html", str(html), "--svg", str(svg)])
    assert rc == 0
    d = json.loads(capsys.readouterr().out)
    assert "timeline" not in d  # the report has one; --json stays small
    doc = html.read_text("utf-8")
    assert doc.startswith("<!DOCTYPE html>") and "<script" not in doc and "<link" not in doc
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", doc)
    for s in re.findall(r"<svg.*?</svg>", doc, re.S):
        ET.fromstring(s)
    assert '<figure id="timeline">' in doc and "live memory by category over the traced step(s)" in doc
    assert '<table id="top_modules_at_peak">' in doc and '<table id="top_tensors_at_peak">' in doc
    assert f"{d['device_total_bytes']:,}" in doc
    root = ET.fromstring(svg.read_text("utf-8"))
    ns = "{http://www.w3.org/2000/svg}"
    areas = [p.get("data-category") for p in root.iter(ns + "polygon")]
    assert {"weights", "gradients", "optimizer_states", "activations"} <= set(areas)
    peak = [c for c in root.iter(ns + "circle") if c.get("class") == "peak"]
    assert len(peak) == 1 and f"peak {d['peak_allocated_bytes'] / 2**30:,.2f} GiB" in peak[0].find(ns + "title").text


def test_rich_view_of_a_real_trace(traced):
    pytest.importorskip("rich")
    from vramlens.report.rich_view import render_text

    out = render_text("trace", traced.to_dict(top=3, timeline_points=200))
    assert "live memory over the step(s)" in out and "peak by step: step 1" in out
    assert "largest tensors alive at the peak:" in out
