"""Terminal views with rich: rendered at a fixed width into a string, with and without colour."""

from __future__ import annotations

import io
import subprocess
import sys

import pytest

pytest.importorskip("rich", reason="the rich views need the rich extra")

from rich.console import Console  # noqa: E402

from vramlens.report import rich_view as R  # noqa: E402
from vramlens.units import GiB  # noqa: E402

ESC = "\x1b["


def render(view, *, force_terminal: bool = False, color_system=None, **kw) -> str:
    buf = io.StringIO()
    Console(file=buf, width=100, force_terminal=force_terminal, color_system=color_system, **kw).print(view)
    return buf.getvalue()


# ---- the bar ----------------------------------------------------------------------------------
def test_stacked_bar_cells_headroom_and_free():
    pal = R._Palette(False)
    # 50 and 25 of 100 bytes on 20 cells: 10 + 5 cells, 5 free; headroom line at round(0.9 * 20) = 18
    bar = R.stacked_bar([("weights", 50), ("activations", 25)], pal, width=20, capacity=100, headroom=0.10)
    assert bar.plain == "[" + "█" * 10 + "#" * 5 + "···|·" + "]"


def test_stacked_bar_past_the_capacity_marks_it():
    pal = R._Palette(False)
    # 200 bytes on a 100-byte GPU: the axis is the stack; capacity at cell 5, headroom at round(4.5) = 4
    bar = R.stacked_bar([("weights", 200)], pal, width=10, capacity=100, headroom=0.10)
    assert bar.plain == "[████|┃████]"


def test_stacked_bar_without_capacity_is_the_stack_alone():
    pal = R._Palette(False)
    bar = R.stacked_bar([("weights", 1), ("gradients", 1), ("optimizer_states", 2)], pal, width=8)
    assert bar.plain == "[██▒▒░░░░]"


def test_colour_uses_solid_blocks_and_one_span_per_run():
    pal = R._Palette(True)
    bar = R.stacked_bar([("weights", 1), ("gradients", 1)], pal, width=4)
    assert bar.plain == "[████]"
    assert [bar.plain[s.start:s.end] for s in bar.spans] == ["██", "██"]
    assert [str(s.style) for s in bar.spans] == ["#0072B2", "#009E73"]


# ---- estimate ---------------------------------------------------------------------------------
def test_estimate_view_without_colour(tiny_estimate):
    d = tiny_estimate.to_dict()
    out = R.render_text("estimate", d)
    assert ESC not in out
    lines = out.splitlines()
    assert lines[0] == f"tiny-llama: {d['model']['params']:,} params"
    assert lines[1] == "train, full, dtype bf16, batch 2 x seq 128, adamw, checkpointing none, attention sdpa"
    assert "memory per GPU, GiB = 1024³ bytes:" in out
    assert "component" in out and "GiB" in out and "where it comes from" in out
    gpu = d["gpu"]
    bar_line = next(line for line in lines if line.startswith(f"{gpu['name']}: ["))
    total = f"{d['device_total_bytes'] / GiB:,.2f}"
    assert bar_line.endswith(f"] {total} of {gpu['usable_bytes'] / GiB:,.2f} GiB "
                             f"({d['device_total_bytes'] / gpu['usable_bytes']:.1%})")
    assert "|" in bar_line and "·" in bar_line
    assert f"| headroom line: 10% kept free, {gpu['usable_bytes'] * 0.9 / GiB:,.2f} GiB usable; · free" in out
    assert "@ CUDA context + workspaces" in out  # the legend names the glyph of each component
    assert "FITS (" + d["verdict"].split(" (", 1)[1] in " ".join(out.split())  # the one verdict rule, both numbers
    assert all(len(line) <= 100 for line in lines)


def test_estimate_view_in_colour_when_the_terminal_has_it(tiny_estimate):
    out = render(R.estimate_view(tiny_estimate), force_terminal=True, color_system="truecolor")
    assert ESC + "38;2;" in out  # truecolor foreground of the components
    assert "FITS" in out


def test_a_terminal_without_colour_gets_no_escape_codes(tiny_estimate):
    out = render(R.estimate_view(tiny_estimate.to_dict()), force_terminal=True, color_system=None)
    assert ESC not in out
    assert "@ CUDA context + workspaces" in out


def test_no_color_is_respected(tiny_estimate, monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")
    out = render(R.estimate_view(tiny_estimate), force_terminal=True, color_system="truecolor")
    assert "38;2;" not in out and "38;5;" not in out
    assert "@ CUDA context + workspaces" in out  # glyphs instead of colours


def test_sixteen_colours_keep_glyphs(tiny_estimate):
    out = render(R.estimate_view(tiny_estimate), force_terminal=True, color_system="standard")
    assert ESC in out and "@" in out


@pytest.mark.parametrize("system", ["256", "truecolor"])
def test_256_colours_and_more_draw_solid_blocks(tiny_estimate, system):
    # Console.color_system is a name ("256"), not a ColorSystem: comparing with the enum never matched
    out = render(R.estimate_view(tiny_estimate), force_terminal=True, color_system=system)
    assert "@ CUDA context + workspaces" not in out
    assert "█ CUDA context + workspaces" in out  # the legend's swatch is the coloured block


def test_does_not_fit_verdict():
    d = {"model": {"name": "m", "params": 10}, "workload": {"mode": "inference", "batch": 1, "seq": 8},
         "components": {"weights": 30 * GiB}, "explanations": {"weights": "w"}, "device_total_bytes": 30 * GiB,
         "gpu": {"name": "G", "usable_bytes": 20 * GiB}, "fits": False, "headroom_bytes": -12 * GiB,
         "verdict": "does not fit (G): needs 30.00 GiB, 18.00 GiB usable (20.00 GiB less 10% headroom), 12.00 GiB short"}
    out = R.render_text("estimate", d)
    assert "DOES NOT FIT (G): needs 30.00 GiB, 18.00 GiB usable (20.00 GiB less 10% headroom), 12.00 GiB short" in out
    assert "┃ capacity, exceeded" in out
    assert "30.00 of 20.00 GiB (150.0%)" in out


# ---- fit, trace, place ------------------------------------------------------------------------
def _plan(total_gib: float, **settings) -> dict:
    return {"settings": {"mode": "train", **settings}, "fits": True, "device_total_bytes": int(total_gib * GiB),
            "components": {"weights": int(total_gib * GiB * 0.5), "activations": int(total_gib * GiB * 0.5)},
            "host_bytes": 0, "step_time_s": 1.5, "tokens_per_s": 100.0, "tradeoffs": ["slower"]}


def test_fit_view_plans_side_by_side():
    d = {"gpu": "G", "gpus_per_node": 1, "nodes": 1, "headroom": 0.1, "message": "2 of 9 valid plans fit",
         "plans": [_plan(10, checkpointing="full"), _plan(15, batch=2)], "usable_bytes": 20 * GiB,
         "model": {"name": "m"}, "max_batch": {"value": 6, "limited_by": "memory", "settings": {"batch": 6}}}
    out = R.render_text("fit", d)
    assert ESC not in out
    assert out.splitlines()[:2] == ["m on 1 x G", "2 of 9 valid plans fit"]
    assert "vs 20.00 GiB" in out and "GiB per GPU" in out
    assert "1.5 s/step" in out and "checkpointing=full" in out and "batch=2" in out and "- slower" in out
    # 10 of 20 GiB on 20 cells: 10 cells used, the headroom line at 18
    assert "[█████#####········|·]" in out
    assert "max_batch: value=6, limited_by=memory" in out and "settings" not in out
    assert "█ weights   # activations" in out


def test_fit_view_closest_plan_when_none_fits():
    p = dict(_plan(30), fits=False)
    out = R.render_text("fit", {"message": "no plan fits", "plans": [], "closest": p, "usable_bytes": 20 * GiB,
                                "headroom": 0.1})
    assert "closest plan (does not fit):" in out
    assert "30.00 (no)" in out


def _trace_dict() -> dict:
    timeline = [[i, {"weights": GiB, "activations": i * GiB // 10}] for i in range(11)]
    timeline += [[11, {"weights": GiB}]]
    return {
        "model": {"name": "t", "params": 1000, "trainable_params": 1000, "layers": 2},
        "workload": {"mode": "train", "method": "full", "dtype": "bf16", "batch": 1, "seq": 8, "optimizer": "adamw",
                     "checkpointing": "none", "attention": "sdpa"},
        "components": {"weights": GiB, "activations": GiB}, "explanations": {"weights": "traced: parameters"},
        "peak_allocated_bytes": 2 * GiB, "peak_reserved_bytes": 2 * GiB, "device_total_bytes": 2 * GiB,
        "peak_phase": "backward", "host_bytes": 0, "notes": ["a note"],
        "trace": {"backend": "fake", "seconds": 1.25, "events": 24,
                  "step_peaks": [{"step": 1, "peak_bytes": 2 * GiB}],
                  "phase_peaks": [{"step": 1, "phase": "setup", "peak_bytes": GiB},
                                  {"step": 1, "phase": "backward", "peak_bytes": 2 * GiB}],
                  "top_modules_at_peak": [{"module": "model.layers.0", "bytes": GiB}],
                  "top_tensors_at_peak": [{"bytes": GiB, "tag": "activation", "module": "model.layers.0.mlp",
                                           "op": "mm.default", "phase": "forward", "step": 1}]},
        "timeline": timeline,
    }


def test_trace_view():
    out = R.render_text("trace", _trace_dict())
    assert ESC not in out
    assert "t: 1,000 parameters (1,000 trainable)" in out
    assert "traced (fake) in 1.2 s, 24 events" in out
    assert "live memory over the step(s), 12 points, peak 2.00 GiB at event 10:" in out
    # totals 1.0 .. 2.0 GiB, then 1.0, one cell each, on a scale from 0 to the peak: round(7 * t / 2)
    assert " ▅▅▅▆▆▆▇▇▇██▅\n" in out
    assert "peak by step: step 1 2.00 GiB" in out
    assert "peak by phase: backward 2.00 GiB" in out  # setup left out
    assert "alive at the peak (backward), by module:" in out and "largest tensors alive at the peak:" in out
    assert "model.layers.0" in out and "1.000" in out and "mm.default" in out
    assert "note: a note" in out


def test_sparkline_keeps_the_largest_of_each_cell():
    points = [[i, {"x": v}] for i, v in enumerate([1, 8, 1, 1, 4, 1])]
    line, top, at = R.sparkline(points, 3)
    # cells (1, 8), (1, 1), (4, 1) -> 8, 1, 4 of 8: levels round(7 * v / 8) = 7, 1, 4 (3.5 rounds to even)
    assert (line.plain, top, at) == ("█▂▅", 8, 1)


def test_place_view():
    d = {"model": "m", "gpu": "G", "gpus": 1, "budgets": {"0": 10 * GiB}, "reserved": {"0": GiB},
         "workload": {"mode": "inference", "method": "full", "dtype": "bf16", "batch": 1, "seq": 8, "new_tokens": 4},
         "options": [
             {"kind": "gpu", "fits": False, "tokens_per_s": 0.0, "device_bytes": {"0": 9 * GiB},
              "device_map": {}, "reason": "layer 3 does not fit"},
             {"kind": "hybrid", "fits": True, "tokens_per_s": 4.5, "device_bytes": {"0": 5 * GiB, "cpu": 3 * GiB},
              "device_map": {"embed": 0, "layers.0": 0, "layers.1": "cpu", "head": "cpu"}, "reason": ""},
             {"kind": "cpu", "fits": True, "tokens_per_s": 1.0, "device_bytes": {"cpu": 8 * GiB}, "device_map": {},
              "reason": ""}]}
    out = R.render_text("place", d)
    assert "m on 1 x G" in out
    assert "GPU 0 GiB" in out and "CPU RAM GiB" in out
    assert out.splitlines()[5].split() == ["budget", "10.00"]
    assert "layer 3 does not fit" in out
    assert "[%%%%%%%%%%··········]" in out  # 5 of 10 GiB on 20 cells (GPU 0 has an extra glyph)
    assert "device_map (hybrid): embed .. layers.0 -> 0; layers.1 .. head -> cpu" in out


def test_unknown_kind():
    with pytest.raises(KeyError):
        R.render_text("snapshot", {})


# ---- progress ---------------------------------------------------------------------------------
def test_progress_counts_and_messages():
    buf = io.StringIO()
    console = Console(file=buf, width=80, force_terminal=True, color_system=None)
    with R.TerminalProgress(console, "tracing", delay=0) as bar:
        bar.messages()("step 1/2 traced in 0.1 s")
        task = bar._progress.tasks[0]
        assert (task.completed, task.total, task.description) == (1, 2, "tracing: step 1/2 traced in 0.1 s")
        bar.counter()(7, 9)
        assert (task.completed, task.total) == (7, 9)
    assert bar._progress is None
    assert "tracing" in buf.getvalue()


def test_progress_waits_for_the_delay():
    console = Console(file=io.StringIO(), width=80, force_terminal=True)
    with R.TerminalProgress(console, "searching plans", delay=60) as bar:
        for i in range(100):
            bar.counter()(i, 100)
        assert bar._progress is None  # a fast search shows nothing
    assert console.file.getvalue() == ""


# ---- rich stays optional ----------------------------------------------------------------------
def test_the_core_and_the_cli_do_not_import_rich():
    code = ("import sys, vramlens, vramlens.estimator, vramlens.advise, vramlens.report.html, vramlens.report.text, "
            "vramlens.cli.main; vramlens.cli.main.build_parser(); assert 'rich' not in sys.modules, "
            "sorted(m for m in sys.modules if m.startswith('rich'))")
    subprocess.run([sys.executable, "-c", code], check=True)
