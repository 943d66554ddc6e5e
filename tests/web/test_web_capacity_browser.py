"""The Serving tab in headless Chromium: the form asks /api/capacity and shows the engine's figures."""

from __future__ import annotations

import pytest
from web_helpers import chromium_path, launch

pytestmark = [pytest.mark.browser, pytest.mark.slow]
TIMEOUT = 30_000  # ms: waited on, never asserted


def test_serving_tab_shows_vllm_blocks_then_an_engine_refusal(server):
    executable = chromium_path()
    sync_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright (the dev extra)")
    with sync_api.sync_playwright() as p:
        browser = launch(p, executable)
        page = browser.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(server + "/")
        page.click("#serving-tab summary")
        assert page.is_hidden("label:has(#s-ctx_size)")  # a llama.cpp setting, hidden for vLLM
        page.fill("#s-max_model_len", "8192")
        page.click("#s-go")
        row = page.locator('#serving-figures tr[data-key="num_gpu_blocks"] td.num')
        sync_api.expect(row).not_to_have_text("", timeout=TIMEOUT)
        blocks = int(row.inner_text().replace(",", ""))
        api = page.request.get(server + "/api/capacity?engine=vllm&model=llama-3-8b&gpu=A100-80GB&tp=1&context=4096"
                               "&gpu_memory_utilization=0.9&max_model_len=8192").json()
        assert blocks == api["figures"]["num_gpu_blocks"]["value"]
        page.fill("#s-tp", "3")
        page.click("#s-go")
        sync_api.expect(page.locator("#serving-error")).to_contain_text(
            "must be divisible by tensor parallel size (3)", timeout=TIMEOUT)
        assert errors == []
        browser.close()
