"""`vramlens serve`: the local web page and JSON API."""

from __future__ import annotations

import argparse

from vramlens.cli.options import bounded

EXAMPLES = """examples:
  vramlens serve                      # http://127.0.0.1:8000, API docs at /docs
  vramlens serve --port 8080
  open 'http://127.0.0.1:8000/?model=llama-2-7b&mode=train&batch=4&gpu=A100-80GB'
"""


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "serve", help="a local web page and JSON API (needs vramlens[web])",
        description="Serve a local page that estimates memory as you change the knobs, and a JSON API under /api.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--host", default="127.0.0.1",
                   help="address to bind (default 127.0.0.1: this machine only; 0.0.0.0 exposes it to the network)")
    p.add_argument("--port", type=bounded(65_535), default=8000, help="port (default 8000)")
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    from vramlens.errors import InputError, MissingExtraError
    from vramlens.web import create_app

    if not 0 <= args.port <= 65535:
        raise InputError(f"port={args.port} must be in 0..65535: e.g. --port 8000")
    app = create_app()
    try:
        import uvicorn
    except ImportError:
        raise MissingExtraError("uvicorn", "web") from None
    print(f"vramlens: serving on http://{args.host}:{args.port}/ (API docs at /docs); Ctrl-C stops it")
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    return 0
