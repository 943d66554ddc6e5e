"""Shared values of the web tests (a uniquely named module: conftest names clash across folders)."""

from __future__ import annotations

from tiny_configs import TINY_LLAMA  # noqa: F401  (re-exported for this folder's tests)


def needs_model_loader():
    """Catalog names resolve (vramlens.models.load_model): a failure here is a real failure."""
    from vramlens.models import load_model

    load_model("llama-2-7b")
