"""`vramlens serve`: the local web page and JSON API."""

from __future__ import annotations

import argparse

from vramlens.cli.options import bounded

EXAMPLES = """examples:
  vramlens serve                      # http://127.0.0.1:8000, API docs at /docs
  vramlens serve --port 8080
  open 'http://127.0.0.1:8000/?model=llama-2-7b&mode=train&batch=4&gpu=A100-80GB'
"""


def _seconds(text: str) -> float:
    """A request budget: a finite number of seconds in (0, 3600]."""
    import math

    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a number of seconds") from None
    if not math.isfinite(value) or not 0 < value <= 3600:
        raise argparse.ArgumentTypeError(f"{text[:40]!r} must be more than 0 and at most 3600 seconds")
    return value


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "serve", help="a local web page and JSON API (needs vramlens[web])",
        description="Serve a local page that estimates memory as you change the knobs, and a JSON API under /api.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--host", default="127.0.0.1",
                   help="address to bind (default 127.0.0.1: this machine only; 0.0.0.0 exposes it to the network)")
    p.add_argument("--port", type=bounded(65_535), default=8000, help="port (default 8000)")
    p.add_argument("--allow-host", action="append", default=[], metavar="NAME",
                   help="a further name the server is reached by (its Host header); by default only "
                        "127.0.0.1, localhost, [::1] and --host are answered (DNS-rebinding protection)")
    p.add_argument("--offline", action="store_true",
                   help="never contact the Hugging Face hub: hub ids answer from the local cache or with an error")
    p.add_argument("--request-seconds", type=_seconds, default=None, metavar="S",
                   help="time budget of one estimate or fit request (default 15); over it the answer is 503")
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    from vramlens.errors import InputError, MissingExtraError
    from vramlens.web import create_app

    if not 0 <= args.port <= 65535:
        raise InputError(f"port={args.port} must be in 0..65535: e.g. --port 8000")
    from vramlens.web.budget import Budget

    if args.request_seconds is not None and not 0 < args.request_seconds <= 3600:
        raise InputError(f"--request-seconds={args.request_seconds} must be in (0, 3600]: e.g. --request-seconds 15")
    budget = Budget() if args.request_seconds is None else Budget(seconds=args.request_seconds)
    app = create_app(budget=budget, host=args.host, allow_hosts=tuple(args.allow_host), offline=args.offline)
    try:
        import uvicorn
    except ImportError:
        raise MissingExtraError("uvicorn", "web") from None
    print(f"vramlens: serving on http://{args.host}:{args.port}/ (API docs at /docs); Ctrl-C stops it")
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning", server_header=False)
    return 0
