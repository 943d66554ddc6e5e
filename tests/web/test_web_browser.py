"""End to end: a real server on a free localhost port, the page driven in headless Chromium.

Needs Debian's ``chromium`` package (``apt-get install -y chromium``) and the ``playwright``
Python package (in the dev extra); it drives the system Chromium, so ``playwright install``
is never needed. Skips with the reason when either is missing.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from web_helpers import TINY_LLAMA, chromium_path, launch

pytestmark = [pytest.mark.browser, pytest.mark.slow]

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
GiB = 1024**3


def test_hub_lookup_shows_that_it_is_looking_then_the_error(server):
    executable = chromium_path()
    sync_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright (the dev extra) to drive Chromium")
    expect = sync_api.expect
    with sync_api.sync_playwright() as p:
        browser = launch(p, executable)
        try:
            page = browser.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            held = []  # the estimate request, held until the test has seen the in-flight state
            page.route("**/api/estimate?*", lambda route: held.append(route))
            page.goto(server + "/?model=nobody/not-a-model")
            status = page.locator("#status")
            expect(status).to_have_text("looking up nobody/not-a-model on the hub...", timeout=15_000)
            expect(status).to_be_visible()
            assert len(held) == 1
            held[0].continue_()
            expect(page.locator("#error")).to_have_text(
                "cannot reach the Hugging Face hub for 'nobody/not-a-model' and it is not in the local cache: use a "
                "catalog name (vramlens models), a local config.json / model folder, or go online "
                "(HF_HUB_OFFLINE is set)", timeout=15_000)
            expect(status).to_be_hidden()
            assert not errors, errors
        finally:
            browser.close()


def test_changing_the_batch_updates_the_total_to_the_api_figure(server):
    executable = chromium_path()
    sync_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright (the dev extra) to drive Chromium")
    import httpx

    with sync_api.sync_playwright() as p:
        try:
            browser = p.chromium.launch(executable_path=executable, headless=True,
                                        args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"])
        except Exception as e:  # a Chromium this Playwright cannot drive
            pytest.skip(f"cannot launch {executable} with Playwright: {str(e).splitlines()[0]}")
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 1000})
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(server + "/?mode=train&gpu=24GB")
            page.click("text=paste a config.json")
            page.fill("#f-config", __import__("json").dumps(TINY_LLAMA))
            total = page.locator("#total")
            expect = sync_api.expect  # locator assertions: no string eval, so the page's CSP stays on
            expect(total).not_to_have_attribute("data-bytes", "", timeout=15_000)
            before = int(page.get_attribute("#total", "data-bytes"))

            page.fill("#f-batch", "8")
            want = httpx.post(server + "/api/estimate",
                              json={"config": TINY_LLAMA, "mode": "train", "gpu": "24GB", "batch": 8}).json()
            expected = want["device_total_bytes"]
            assert expected != before
            expect(total).to_have_attribute("data-bytes", str(expected), timeout=15_000)
            assert page.inner_text("#total") == f"{expected / GiB:.2f}"
            assert "batch=8" in page.url and "mode=train" in page.url  # the state is in the address
            assert page.inner_text("#verdict").startswith(("FITS", "DOES NOT FIT"))
            assert page.locator("#chart svg").count() == 1
            assert not errors, errors
            ARTIFACTS.mkdir(exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / "web-estimate.png"), full_page=True)
        finally:
            browser.close()
