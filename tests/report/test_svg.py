"""SVG charts are well-formed, accessible and draw the numbers they are given."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from vramlens.errors import MissingExtraError
from vramlens.report import svg
from vramlens.units import GiB

NS = "{http://www.w3.org/2000/svg}"


def parse(text: str) -> ET.Element:
    root = ET.fromstring(text)
    assert root.tag == f"{NS}svg"
    assert root.get("role") == "img"
    assert root.find(f"{NS}title").text
    assert root.find(f"{NS}desc").text
    return root


def test_breakdown_bar_segments_capacity_and_headroom():
    comps = {"weights": 10 * GiB, "gradients": 0, "activations": 6 * GiB, "runtime": GiB // 2}
    root = parse(svg.breakdown_bar(comps, capacity=80 * GiB, headroom=0.1, total=15 * GiB, title="t <&>"))
    segs = [e for e in root.iter(f"{NS}rect") if e.get("class") == "seg"]
    assert [s.get("data-component") for s in segs] == ["weights", "activations", "runtime"]  # zero left out
    # widths are proportional to bytes: 10 GiB vs 6 GiB
    w = [float(s.get("width")) for s in segs]
    assert w[0] / w[1] == pytest.approx(10 / 6, rel=1e-3)
    assert segs[0].get("fill") == svg.COLORS["weights"]
    classes = {e.get("class") for e in root.iter(f"{NS}line")}
    assert {"capacity", "headroom", "peak"} <= classes
    text = " ".join(t.text or "" for t in root.iter(f"{NS}text"))
    assert "GiB" in text and "capacity 80.00 GiB" in text
    assert root.find(f"{NS}title").text == "t <&>"  # escaped in the source, intact when parsed


def test_headroom_line_sits_at_capacity_times_one_minus_headroom():
    root = parse(svg.breakdown_bar({"weights": GiB}, capacity=100 * GiB, headroom=0.2))
    lines = {e.get("class"): float(e.get("x1")) for e in root.iter(f"{NS}line") if e.get("class")}
    left = 20.0
    # axis ends at 100 GiB (a tick); headroom at 80 GiB is 0.8 of the way
    assert (lines["headroom"] - left) / (lines["capacity"] - left) == pytest.approx(0.8, rel=1e-3)


def test_timeline_stacks_categories_and_marks_the_peak():
    pts = [(0, {"weights": GiB}), (1, {"weights": GiB, "activations": 2 * GiB}),
           (2, {"weights": GiB, "activations": GiB, "gradients": GiB // 2})]
    root = parse(svg.timeline(pts, capacity=4 * GiB))
    areas = [e.get("data-category") for e in root.iter(f"{NS}polygon")]
    assert areas == ["weights", "gradients", "activations"]  # component order, not first-seen
    peak = root.find(f".//{NS}circle[@class='peak']")
    assert "3.00 GiB" in peak.find(f"{NS}title").text
    assert "peak 3.00 GiB at event 1" in root.find(f"{NS}desc").text


def test_timeline_of_nothing_is_still_valid():
    parse(svg.timeline([]))


def test_plans_side_by_side():
    plans = [{"name": "lora r16", "components": {"weights": 14 * GiB, "activations": 4 * GiB},
              "device_total_bytes": 19 * GiB},
             {"name": "qlora", "components": {"weights": 4 * GiB, "activations": 4 * GiB, "trace_tag": GiB}}]
    root = parse(svg.plans_chart(plans, capacity=24 * GiB))
    segs = [(e.get("data-plan"), e.get("data-component")) for e in root.iter(f"{NS}rect") if e.get("class") == "seg"]
    assert segs == [("0", "weights"), ("0", "activations"), ("1", "weights"), ("1", "activations"), ("1", "trace_tag")]
    assert "lora r16: 18.00 GiB; qlora: 9.00 GiB" == root.find(f"{NS}desc").text


def test_colours_are_stable_for_unknown_categories():
    assert svg.color_of("weights") == "#0072B2"
    assert svg.color_of("mystery") == svg.color_of("mystery")


def test_estimate_chart_of_a_real_estimate(tiny_estimate):
    d = tiny_estimate.to_dict()
    root = parse(svg.estimate_chart(d))
    assert "tiny-llama" in root.find(f"{NS}title").text


def test_png_needs_cairosvg(monkeypatch):
    import builtins

    real = builtins.__import__

    def no_cairo(name, *a, **k):
        if name == "cairosvg":
            raise ImportError(name)
        return real(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_cairo)
    with pytest.raises(MissingExtraError) as e:
        svg.svg_to_png(svg.breakdown_bar({"weights": GiB}))
    assert str(e.value) == "PNG output needs cairosvg, which is not installed: pip install 'vramlens[png]' (or write --svg FILE)"


def test_png_when_cairosvg_is_installed():
    pytest.importorskip("cairosvg", reason="cairosvg is not installed (PNG output is optional)")
    png = svg.svg_to_png(svg.breakdown_bar({"weights": GiB}, capacity=2 * GiB))
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
