"""Shared values of the web tests (a uniquely named module: conftest names clash across folders)."""

from __future__ import annotations

from tiny_configs import TINY_LLAMA  # noqa: F401  (re-exported for this folder's tests)


def needs_model_loader():
    """Catalog names resolve (vramlens.models.load_model): a failure here is a real failure."""
    from vramlens.models import load_model

    load_model("llama-2-7b")


def allocate(n_bytes: int) -> int:
    """A job for the worker pool's memory budget test: holds ``n_bytes`` of memory."""
    return len(bytearray(n_bytes))


def ask(app, method: str, url: str, **kwargs):
    """One request to ``app`` in-process through httpx's ASGI transport (as 127.0.0.1)."""
    import asyncio

    import httpx

    async def go():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as c:
            return await c.request(method, url, **kwargs)

    return asyncio.run(go())


def assert_json_error(r, status: int | tuple[int, ...]) -> str:
    """``r`` is ``status`` with the one error shape, ``{"error": "<one line>"}``; returns the line."""
    statuses = status if isinstance(status, tuple) else (status,)
    assert r.status_code in statuses, (r.status_code, r.text)
    assert r.headers["content-type"].startswith("application/json"), r.headers
    body = r.json()
    assert set(body) == {"error"} and isinstance(body["error"], str) and body["error"], body
    assert "\n" not in body["error"] and "\r" not in body["error"]
    return body["error"]


def chromium_path() -> str:
    """Debian's Chromium (never a downloaded one), or a skip naming the package."""
    import shutil

    import pytest

    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    pytest.skip("no Chromium found: apt-get install -y chromium (Debian's package)")


def launch(p, executable: str):
    """Headless Chromium under Playwright, or a skip with the reason it cannot be driven."""
    import pytest

    try:
        return p.chromium.launch(executable_path=executable, headless=True,
                                 args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"])
    except Exception as e:  # a Chromium this Playwright cannot drive
        pytest.skip(f"cannot launch {executable} with Playwright: {str(e).splitlines()[0]}")


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
