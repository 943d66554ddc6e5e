"""The local web app (``vramlens serve``): needs the [web] extra (fastapi, uvicorn)."""

from __future__ import annotations


def create_app(**options):
    """The ASGI app (``options``: see ``vramlens.web.app.create_app``); raises MissingExtraError when
    FastAPI is not installed."""
    try:
        import fastapi  # noqa: F401
    except ImportError:
        from vramlens.errors import MissingExtraError

        raise MissingExtraError("fastapi", "web") from None
    from vramlens.web.app import create_app as _create

    return _create(**options)


__all__ = ["create_app"]
