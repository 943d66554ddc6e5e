"""The page as a product, in headless Chromium against a real local server: the figures, the
phase chart's labels, the model card, the knobs that apply, the CLI line, the downloads, the
dtype table, the GPU matrix, the plans, a phone-sized screen and an accessibility check.

Screenshots go to ``test-artifacts/`` (git-ignored). The accessibility check injects axe-core
from ``$VRAMLENS_AXE`` or ``/tmp/axe/node_modules/axe-core/axe.min.js`` when present (installed
with ``npm install axe-core`` into /tmp, never shipped); without it, it checks labels and the tab
order itself.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from pathlib import Path

import pytest
from web_helpers import TINY_LLAMA, chromium_path, launch

pytestmark = [pytest.mark.browser, pytest.mark.slow]

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
GiB = 1024**3
TIMEOUT = 30_000  # ms: a shared, loaded machine; never asserted, only waited on


@pytest.fixture(scope="module")
def browser():
    executable = chromium_path()
    sync_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright (the dev extra)")
    with sync_api.sync_playwright() as p:
        b = launch(p, executable)
        yield b
        b.close()


class Session:
    """One page with its request log and script errors."""

    def __init__(self, browser, server, *, width=1280, height=1000, **context):
        from playwright.sync_api import expect

        self.expect = expect
        self.server = server
        self.context = browser.new_context(viewport={"width": width, "height": height}, accept_downloads=True,
                                           **context)
        self.page = self.context.new_page()
        self.requests: list[str] = []
        self.errors: list[str] = []
        self.page.on("request", lambda r: self.requests.append(r.url))
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))

    def open(self, query: str) -> None:
        self.page.goto(self.server + "/" + query)

    def wait_result(self) -> int:
        self.expect(self.page.locator("#total")).not_to_have_attribute("data-bytes", "", timeout=TIMEOUT)
        return int(self.page.get_attribute("#total", "data-bytes"))

    def wait_idle(self) -> None:
        self.expect(self.page.locator("#result")).to_have_attribute("aria-busy", "false", timeout=TIMEOUT)

    def shot(self, name: str) -> None:
        ARTIFACTS.mkdir(exist_ok=True)
        self.page.screenshot(path=str(ARTIFACTS / name), full_page=True)

    def close(self) -> None:
        local = [u for u in self.requests if not u.startswith(self.server + "/") and not u.startswith("blob:")]
        assert not local, f"requests left this server: {local}"
        assert not self.errors, self.errors
        self.context.close()


@pytest.fixture
def session(browser, server):
    made: list[Session] = []

    def make(**kw) -> Session:
        s = Session(browser, server, **kw)
        made.append(s)
        return s

    yield make
    for s in made:
        s.close()


def api(server: str, path: str, **params):
    import httpx

    r = httpx.get(server + path, params=params, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()


def _overlap(a: dict, b: dict) -> bool:
    return not (a["x"] + a["width"] <= b["x"] or b["x"] + b["width"] <= a["x"]
                or a["y"] + a["height"] <= b["y"] or b["y"] + b["height"] <= a["y"])


def assert_labels_clear(page) -> int:
    """No two text labels of the chart overlap, and each lies inside the SVG; returns how many."""
    svg = page.locator("#chart svg").bounding_box()
    boxes = []
    for t in page.locator("#chart svg text").all():
        b = t.bounding_box()
        assert b is not None and b["width"] > 0, t.text_content()
        boxes.append((t.text_content(), b))
    for text, b in boxes:
        assert b["x"] >= svg["x"] - 0.5 and b["y"] >= svg["y"] - 0.5, (text, b, svg)
        assert b["x"] + b["width"] <= svg["x"] + svg["width"] + 0.5, (text, b, svg)
        assert b["y"] + b["height"] <= svg["y"] + svg["height"] + 0.5, (text, b, svg)
    for i, (ta, a) in enumerate(boxes):
        for tb, b in boxes[i + 1:]:
            assert not _overlap(a, b), f"chart labels overlap: {ta!r} {a} and {tb!r} {b}"
    return len(boxes)


@pytest.mark.parametrize(("query", "width"), [
    ("?model=llama-2-7b&mode=train&gpu=24GB", 1280),
    ("?model=llama-2-7b&mode=train&method=lora&gpu=24GB", 1280),
    ("?model=gpt2&new_tokens=64&gpu=RTX-3080", 1280),
    # close lines (peak allocated, nvidia-smi and the GPU within a few %) on a phone's width
    ("?model=llama-2-7b&gpu=16GB", 390),
])
def test_figures_and_the_phase_chart_with_labels_that_never_collide(session, server, query, width):
    s = session(width=width, height=844 if width < 500 else 1000)
    s.open(query)
    total = s.wait_result()
    s.wait_idle()  # the loading line above the result is gone: the layout holds still while measured
    params = dict(p.split("=") for p in query[1:].split("&"))
    want = api(server, "/api/estimate", **params)
    page = s.page
    assert total == want["device_total_bytes"]
    assert page.inner_text("#fig-allocated") == f"{want['peak_allocated_bytes'] / GiB:.2f} GiB"
    assert page.inner_text("#fig-reserved") == f"{want['peak_reserved_bytes'] / GiB:.2f} GiB"
    assert page.inner_text("#fig-total") == f"{want['device_total_bytes'] / GiB:.2f} GiB"
    assert page.inner_text("#fig-phase") == want["peak_phase"]
    # one bar label per phase, the peak's marked; the peak line labelled with its figure and phase
    phases = [t.text_content() for t in page.locator("#chart svg text.phase").all()]
    assert len(phases) == len(want["phases"])
    assert [p for p in phases if p.endswith("(peak)")] == [want["peak_phase"] + " (peak)"]
    labels = [t.text_content() for t in page.locator("#chart svg text.line-label").all()]
    assert f"peak allocated {want['peak_allocated_bytes'] / GiB:.2f} GiB ({want['peak_phase']})" in labels
    # the bars' segments add up to each phase's live total (the peak's on to nvidia-smi)
    note = page.inner_text("#chart-note")
    assert f"add up to {sum(want['components'].values()) / GiB:.2f} GiB" in note
    assert f"holds {want['peak_allocated_bytes'] / GiB:.2f} GiB allocated" in note
    assert assert_labels_clear(page) >= 6
    s.shot(f"web-chart-{width}-{len(s.requests)}.png")


def test_the_phase_bars_sum_to_the_phase_totals(session, server):
    s = session()
    s.open("?model=llama-2-7b&mode=train&gpu=24GB")
    s.wait_result()
    want = api(server, "/api/estimate", model="llama-2-7b", mode="train", gpu="24GB")
    rects = s.page.locator("#chart svg rect[data-seg]").all()
    heights = [float(r.get_attribute("height")) for r in rects]
    assert len(rects) >= len(want["phases"]) * 2
    # pixel heights are proportional to bytes: the tallest bar (the peak's) is nvidia-smi's total
    xs: dict[str, float] = {}
    for r, h in zip(rects, heights):
        xs[r.get_attribute("x")] = xs.get(r.get_attribute("x"), 0) + h
    bars = sorted(xs.values())
    ratios = [b / bars[-1] for b in bars]
    expect = sorted(v for k, v in want["phases"].items() if k != want["peak_phase"]) + [want["device_total_bytes"]]
    for got, total in zip(ratios, expect):
        assert abs(got - total / want["device_total_bytes"]) < 0.01


def test_model_card_shows_sizes_context_and_the_assumed_dims_of_a_size(session, server):
    s = session()
    s.open("?params=7B&method=lora")
    s.wait_result()
    card = api(server, "/api/model", params="7B")
    s.expect(s.page.locator("#model-section")).to_be_visible(timeout=TIMEOUT)
    dd = lambda f: s.page.inner_text(f'#model-card dd[data-field="{f}"]')  # noqa: E731
    assert dd("layers") == f"{card['layers']:,}"
    assert dd("attention heads") == f"{card['heads']:,}"
    assert dd("KV heads") == f"{card['kv_heads']:,}"
    assert dd("context length") == f"{card['context_length']:,} tokens"
    assert dd("source") == "generic"
    assumed = s.page.locator("#assumed li").all_inner_texts()
    assert "hidden_size=4096" in assumed and any(a.startswith("generic Llama-style decoder") for a in assumed)
    # inference with LoRA: the estimate's note is shown
    notes = s.page.locator("#notes li").all_inner_texts()
    assert notes == api(server, "/api/estimate", params="7B", method="lora")["notes"] and notes
    s.shot("web-model-card.png")


def test_loading_indicator_and_stale_results_cleared_on_error(session):
    s = session()
    page = s.page
    held = []
    page.route("**/api/estimate?*", lambda route: held.append(route))
    s.open("?model=gpt2")
    s.expect(page.locator("#status")).to_have_text("estimating...", timeout=TIMEOUT)
    s.expect(page.locator("#result")).to_have_attribute("aria-busy", "true")
    assert len(held) == 1
    held[0].continue_()
    page.unroute("**/api/estimate?*")
    s.wait_result()
    s.wait_idle()
    s.expect(page.locator("#status")).to_be_hidden()
    assert page.locator("#components tbody tr").count() > 0
    # a new query that fails leaves nothing of the old answer on screen
    page.fill("#f-model", "no-such-model-anywhere")
    s.expect(page.locator("#error")).to_be_visible(timeout=TIMEOUT)
    s.expect(page.locator("#answer")).to_be_hidden()
    assert page.get_attribute("#total", "data-bytes") == ""
    assert page.locator("#components tbody tr").count() == 0
    assert page.locator("#chart svg").count() == 0


def test_knobs_that_do_not_apply_are_hidden_and_not_sent(session):
    s = session()
    page = s.page
    s.open("?model=gpt2")
    s.wait_result()
    hidden = lambda k: page.locator(f"#k-{k}").is_hidden()  # noqa: E731
    for k in ("optimizer", "optimizer_impl", "grad_accum", "checkpointing", "keep_grads", "fsdp_strategy",
              "lora_rank", "lora_targets"):
        assert hidden(k), k
    for k in ("new_tokens", "kv_dtype", "kv_block", "batch", "seq"):
        assert not hidden(k), k
    page.select_option("#f-mode", "train")
    s.expect(page.locator("#k-optimizer")).to_be_visible()
    for k in ("new_tokens", "kv_dtype", "kv_block", "fsdp_strategy", "lora_rank"):
        assert hidden(k), k
    page.check("#f-fsdp")
    s.expect(page.locator("#k-fsdp_strategy")).to_be_visible()
    page.select_option("#f-method", "lora")
    s.expect(page.locator("#k-lora_rank")).to_be_visible()
    # a hidden knob's value is not in the URL: back to inference drops the optimizer
    page.select_option("#f-optimizer", "sgd")
    s.expect(page).to_have_url(re.compile("optimizer=sgd"), timeout=TIMEOUT)
    page.select_option("#f-mode", "inference")
    s.expect(page).not_to_have_url(re.compile("optimizer|fsdp|mode="), timeout=TIMEOUT)
    assert "method=lora" in page.url  # still applies (LoRA at inference: adapters in the weights)
    s.wait_idle()


def test_the_copied_cli_command_gives_the_figure_on_the_page(session, capsys):
    from vramlens.cli.main import main

    s = session(permissions=["clipboard-read", "clipboard-write"])
    page = s.page
    s.open("?model=llama-2-7b&mode=train&method=lora&lora_rank=16&checkpointing=full&batch=2&seq=1024&gpu=RTX-4090"
           "&keep_grads=true&headroom=0.2&dora=true&lora_dropout=0.05")
    shown = s.wait_result()
    line = page.inner_text("#cli")
    page.click("#copy-cli")
    s.expect(page.locator("#copied")).to_have_text("copied", timeout=TIMEOUT)
    argv = shlex.split(line)
    assert argv[:3] == ["vramlens", "estimate", "llama-2-7b"]
    assert "--keep-grads" in argv and "--lora-rank" in argv and "--headroom" in argv
    assert "--dora" in argv and argv[argv.index("--lora-dropout") + 1] == "0.05"
    capsys.readouterr()
    assert main([*argv[1:], "--json"]) == 0
    cli = json.loads(capsys.readouterr().out)
    assert cli["device_total_bytes"] == shown
    assert cli["fits"] == page.inner_text("#verdict").startswith("FITS")


def test_downloads_json_svg_and_html_report(session, server):
    s = session()
    page = s.page
    s.open("?model=gpt2&gpu=24GB")
    shown = s.wait_result()
    with page.expect_download() as d:
        page.click("#dl-json")
    data = json.loads(Path(d.value.path()).read_text())
    assert data == api(server, "/api/estimate", model="gpt2", gpu="24GB") and data["device_total_bytes"] == shown
    with page.expect_download() as d:
        page.click("#dl-svg")
    svg = Path(d.value.path()).read_text()
    assert svg.startswith("<svg") and "peak allocated" in svg and "<script" not in svg
    with page.expect_download() as d:
        page.click("#dl-html")
    html = Path(d.value.path()).read_text()
    assert d.value.suggested_filename == "vramlens-estimate.html"
    assert html.startswith("<!DOCTYPE html>") and "openai-community/gpt2" in html


def test_a_pasted_config_wins_over_the_model_name_visibly_and_in_the_url(session, server):
    import httpx

    s = session()
    page = s.page
    s.open("?model=gpt2&gpu=4090")
    gpt2 = s.wait_result()
    page.click("text=paste a config.json")
    page.fill("#f-config", json.dumps(TINY_LLAMA))
    want = httpx.post(server + "/api/estimate", json={"config": TINY_LLAMA, "gpu": "4090"}).json()
    s.expect(page.locator("#total")).to_have_attribute("data-bytes", str(want["device_total_bytes"]), timeout=TIMEOUT)
    assert want["device_total_bytes"] != gpt2
    s.expect(page.locator("#source-note")).to_have_text(
        "Using the pasted config.json; the model \u201cgpt2\u201d is ignored until the config is cleared.")
    assert "source=config" in page.url and "model=" not in page.url and "gpu=4090" in page.url
    assert "RTX-4090" in page.inner_text("#verdict")  # the GPU named 4090 stayed a string in the JSON body
    assert page.inner_text("#cli").startswith("vramlens estimate config.json --gpu 4090")
    page.fill("#f-config", "")
    s.expect(page.locator("#total")).to_have_attribute("data-bytes", str(gpt2), timeout=TIMEOUT)
    s.expect(page.locator("#source-note")).to_be_hidden()
    assert "model=gpt2" in page.url and "source=" not in page.url


def test_dtype_table_and_gpu_matrix_match_the_api(session, server):
    s = session()
    page = s.page
    s.open("?model=llama-2-7b&gpu=24GB")
    s.wait_result()
    s.expect(page.locator("#compare-section")).to_be_visible(timeout=TIMEOUT)
    cmp = api(server, "/api/compare", model="llama-2-7b", gpu="24GB")
    rows = page.locator("#compare tbody tr").all()
    assert [r.locator("th").inner_text() for r in rows] == ["inference", "training"]
    for r, want in zip(rows, cmp["rows"]):
        for dt in ("fp32", "bf16", "int8", "int4"):
            assert r.locator(f'td[data-dtype="{dt}"]').inner_text() == \
                f"{want['cells'][dt]['device_total_bytes'] / GiB:.2f} GiB"
    # the bf16 inference cell is the page's own estimate (bf16 is the default dtype)
    assert cmp["rows"][0]["cells"]["bf16"]["device_total_bytes"] == int(page.get_attribute("#total", "data-bytes"))
    matrix = api(server, "/api/gpu-matrix", model="llama-2-7b", gpu="24GB")
    shown = page.locator("#gpu-matrix tbody tr").all()
    assert len(shown) == len(matrix["gpus"]) >= 10
    for r, want in zip(shown, matrix["gpus"]):
        cells = r.locator("td").all_inner_texts()
        assert cells[0] == want["name"] and cells[2] == ("yes" if want["fits"] else "no")
    fitting = [g["name"] for g in matrix["gpus"] if g["fits"]]
    assert page.inner_text("#gpus-summary").startswith(f"{len(fitting)} of {len(matrix['gpus'])} catalog GPUs fit")
    s.shot("web-compare.png")


def test_advice_names_the_knobs_not_the_flags(session, server):
    """The CLI's advice says "--optimizer adamw-8bit"; the page says the same with its knob labels."""
    s = session()
    page = s.page
    s.open("?model=llama-2-7b&mode=train&method=full&gpu=24GB")
    s.wait_result()
    est = api(server, "/api/estimate", model="llama-2-7b", mode="train", method="full", gpu="24GB")
    assert "--optimizer adamw-8bit" in est["advice"]  # the API and the CLI speak flags
    shown = page.inner_text("#advice")
    label = page.inner_text("#k-optimizer span").strip()
    assert f"{label} = adamw-8bit" in shown and "--optimizer" not in shown
    assert "vramlens fit finds the cheapest change" in shown


def test_plans_say_how_many_fit_and_apply_sets_the_knobs(session, server):
    s = session()
    page = s.page
    s.open("?model=llama-2-7b&mode=train&gpu=24GB")
    s.wait_result()
    s.expect(page.locator("#plans tbody tr").first).to_be_visible(timeout=60_000)
    fit = api(server, "/api/fit", model="llama-2-7b", mode="train", gpu="24GB", top=5)
    assert page.inner_text("#plans-summary").startswith(f"{fit['fitting']} of {fit['evaluated']} plans fit.")
    first = fit["plans"][0]
    row = page.locator("#plans tbody tr").first
    assert row.locator("td").nth(2).inner_text() == f"{first['device_total_bytes'] / GiB:.2f}"
    assert row.locator("td").nth(7).inner_text() == "; ".join(first["tradeoffs"])
    row.locator("button.apply").click()
    s.expect(page.locator("#total")).to_have_attribute("data-bytes", str(first["device_total_bytes"]),
                                                       timeout=TIMEOUT)
    for k, v in first["settings"].items():
        el = page.locator(f"#f-{k}")
        if el.count() and el.get_attribute("type") != "checkbox":
            assert el.input_value() == ("" if v is None else str(v)), k
    s.wait_idle()
    s.shot("web-plans.png")


def test_each_plan_downloads_its_configs_as_the_cli_emits_them(session, server, capsys):
    """The page's config downloads are `vramlens fit --emit KIND`'s text for that plan."""
    from vramlens.cli.main import main

    s = session()
    page = s.page
    s.open("?model=llama-2-7b&mode=train&method=lora&gpu=24GB")
    s.wait_result()
    s.expect(page.locator("#plans tbody tr").first).to_be_visible(timeout=60_000)
    fit = api(server, "/api/fit", model="llama-2-7b", mode="train", method="lora", gpu="24GB", top=5)
    first = fit["plans"][0]
    row = page.locator("#plans tbody tr").first
    kinds = row.locator("select.config-kind option").all_inner_texts()
    assert kinds == list(first["configs"]) and "peft" in kinds and "vllm" not in kinds
    capsys.readouterr()
    argv = ["fit", "llama-2-7b", "--mode", "train", "--method", "lora", "--gpu", "24GB"]
    for kind in ("peft", "trainer"):
        row.locator("select.config-kind").select_option(kind)
        with page.expect_download() as d:
            row.locator("button.download-config").click()
        assert d.value.suggested_filename == first["configs"][kind]["file"]
        assert main(argv + ["--emit", kind]) == 0
        assert Path(d.value.path()).read_text() == capsys.readouterr().out


def test_on_a_phone_the_result_comes_first(session):
    s = session(width=390, height=844)
    s.open("?model=gpt2&gpu=24GB")
    s.wait_result()
    result = s.page.locator("#result").bounding_box()
    form = s.page.locator("#knobs").bounding_box()
    assert result["y"] < form["y"]
    assert s.page.locator("#total").bounding_box()["y"] < 844  # the figure is on the first screen
    assert result["x"] + result["width"] <= 390 + 0.5  # nothing wider than the phone
    s.shot("web-phone.png")


AXE = Path(os.environ.get("VRAMLENS_AXE", "/tmp/axe/node_modules/axe-core/axe.min.js"))


def test_accessibility_labels_tab_order_and_contrast(session):
    # axe is injected as a script, which the page's CSP forbids: bypass it in this test only
    s = session(bypass_csp=True)
    page = s.page
    s.open("?model=llama-2-7b&mode=train&gpu=24GB")
    s.wait_result()
    s.wait_idle()
    # every visible control has a name a screen reader reads
    for el in page.locator("input:visible, select:visible, textarea:visible, button:visible").all():
        name = el.evaluate("e => (e.labels && e.labels.length ? e.labels[0].textContent : '') || "
                           "e.getAttribute('aria-label') || e.textContent")
        assert name and name.strip(), el.evaluate("e => e.outerHTML")
    # keyboard order follows the page: model, size, (config), GPU, then the knobs in order (the task first)
    page.focus("#f-model")
    order = []
    for _ in range(6):
        order.append(page.evaluate("document.activeElement.id"))
        page.keyboard.press("Tab")
    # the config's <summary> (no id) sits between the size and the GPU
    assert order[:5] == ["f-model", "f-params", "", "f-gpu", "f-task"], order
    if not AXE.is_file():
        pytest.skip(f"axe-core not found at {AXE}: npm install axe-core into /tmp/axe (labels and tab order checked)")
    page.add_script_tag(path=str(AXE))
    result = page.evaluate("axe.run(document, {runOnly: ['wcag2a', 'wcag2aa']})")
    problems = [(v["id"], v["help"], [n["target"] for n in v["nodes"]][:3]) for v in result["violations"]]
    assert not problems, problems
