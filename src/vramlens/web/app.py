"""The local web app: one page and a JSON API under /api (OpenAPI at /docs).

FastAPI because the API is the product here: typed query parameters give the OpenAPI
document and /docs for free, and it runs in-process under an ASGI transport in tests.

Safety, since anything on the machine can reach a local port:

* request bodies are limited to :data:`MAX_BODY_BYTES` (413 beyond), checked while reading;
* a pasted config is parsed as JSON (never executed, never unpickled) and refused when it
  asks for an absurd size (layer or expert counts) before anything is built from it;
* the ``model`` parameter must be a catalog name or a hub id: never a local path.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import asdict
from typing import Annotated, Any

from fastapi import Body, FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field, create_model

from vramlens import __version__
from vramlens.errors import InputError, VramlensError

#: Largest request body accepted, bytes. A config.json is a few KiB; 256 KiB leaves room.
MAX_BODY_BYTES = 256 * 1024

#: Config fields that multiply work (tensors built per layer or expert), and their ceiling.
#: The largest published models have < 200 layers and < 400 experts.
_COUNT_FIELDS = (
    "num_hidden_layers", "n_layer", "n_layers", "num_layers", "num_decoder_layers", "num_encoder_layers",
    "num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts", "n_head", "num_attention_heads",
)
_MAX_COUNT = 4096

#: A catalog name or a Hugging Face hub id (``org/name``): letters, digits, ``._-``, one slash.
_MODEL_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}(/[A-Za-z0-9][A-Za-z0-9._-]{0,95})?$")


def _workload_fields() -> dict[str, Any]:
    """Every Workload field as a query/body field with its CLI default, so the API takes exactly
    the flags of ``vramlens estimate`` (and gains a flag when the Workload does)."""
    from dataclasses import MISSING, fields

    from vramlens.workload import Workload

    out: dict[str, Any] = {}
    for f in fields(Workload):
        default = f.default if f.default is not MISSING else None
        if isinstance(default, tuple):  # lora_targets: comma-separated, as on the command line
            out[f.name] = (str, ",".join(default))
        elif default is None:
            out[f.name] = (str | None, None)
        else:
            out[f.name] = (type(default), default)
    return out


class _Base(BaseModel):
    model_config = ConfigDict(extra="forbid")

    params: str | None = Field(None, description="model size (7B) for a generic decoder when model is omitted")
    gpu: str | None = Field(None, description="GPU name from /api/gpus or a size (24GB)")
    headroom: float = Field(0.10, ge=0, lt=1, description="fraction of the GPU kept free")


#: The flags of ``vramlens estimate``, by name (dashes as underscores).
Settings = create_model("Settings", __base__=_Base, **_workload_fields())


class EstimateQuery(Settings):
    model: str | None = Field(None, description="catalog name or hub id (llama-2-7b, meta-llama/Llama-2-7b-hf)")


class EstimateBody(Settings):
    """A pasted config.json (an object or its text) and the workload flags."""

    config: dict[str, Any] | str = Field(..., description="the config.json, as an object or as text")


class FitQuery(EstimateQuery):
    top: int = Field(5, ge=1, le=50, description="how many plans")


class FitBody(EstimateBody):
    top: int = Field(5, ge=1, le=50, description="how many plans")


class BodyLimit:
    """ASGI middleware: 413 for a body over ``limit`` bytes, whether announced or streamed."""

    def __init__(self, app, limit: int = MAX_BODY_BYTES):
        self.app = app
        self.limit = limit

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        for k, v in scope.get("headers", []):
            if k == b"content-length" and v.isdigit() and int(v) > self.limit:
                return await self._reject(send)
        seen = 0
        started = rejected = False

        async def counted_receive():
            # Over the limit: answer 413 now and tell the app the client left, so whatever the
            # app does next (FastAPI turns a failed body read into a 400) is dropped.
            nonlocal seen, rejected
            if rejected:
                return {"type": "http.disconnect"}
            msg = await receive()
            if msg["type"] == "http.request":
                seen += len(msg.get("body", b""))
                if seen > self.limit:
                    rejected = True
                    if not started:
                        await self._reject(send)
                    return {"type": "http.disconnect"}
            return msg

        async def tracked_send(msg):
            nonlocal started
            if rejected:
                return
            if msg["type"] == "http.response.start":
                started = True
            await send(msg)

        try:
            await self.app(scope, counted_receive, tracked_send)
        except Exception:
            if not rejected:
                raise

    async def _reject(self, send):
        body = json.dumps({"error": f"request body over {self.limit // 1024} KiB: paste a config.json, "
                                    "not a checkpoint"}).encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})


def check_model_id(model: str) -> str:
    """A catalog name or hub id; anything that could name a local file is refused."""
    if not _MODEL_ID.match(model) or ".." in model or model.lower().endswith((".json", ".gguf", ".safetensors")) \
            or os.path.exists(model):
        raise InputError(f"model={model!r} is not a catalog name or hub id: the web app reads no local files; "
                         "paste the config.json instead")
    return model


def parse_config(config: dict[str, Any] | str) -> dict[str, Any]:
    """A pasted config as a dict, refused when malformed or absurdly large."""
    if isinstance(config, str):
        try:
            config = json.loads(config)
        except (ValueError, RecursionError) as e:
            msg = getattr(e, "msg", None) or "nested too deeply"
            where = f" at line {e.lineno} column {e.colno}" if hasattr(e, "lineno") else ""
            raise InputError(f"the pasted config is not valid JSON: {msg}{where}") from None
    if not isinstance(config, dict):
        raise InputError(f"the pasted config must be a JSON object (a config.json), not {type(config).__name__}")
    for section in (config, *(v for v in config.values() if isinstance(v, dict))):
        for k in _COUNT_FIELDS:
            v = section.get(k)
            if isinstance(v, int) and not isinstance(v, bool) and v > _MAX_COUNT:
                raise InputError(f"{k}={v} in the pasted config is larger than {_MAX_COUNT}: no such model exists; "
                                 "check the config")
    return config


def _settings(s: Settings) -> tuple[dict[str, Any], dict[str, Any]]:
    d = s.model_dump()
    top = {k: d.pop(k) for k in ("params", "gpu", "headroom")}
    d.pop("model", None)
    d.pop("config", None)
    d.pop("top", None)
    return top, d


def run_fit(model, q) -> Any:
    """The same search as ``vramlens fit``, returning ``FitResult.to_dict()`` with the top plans."""
    fit = advisor()
    if fit is None:
        return _error(501, "the advisor (vramlens.advise.fit) is not available in this version")
    top, work = _settings(q)
    # as `vramlens fit` does: the method is searched over unless the request names one
    method_locked = "method" in q.model_fields_set
    gpus = work.pop("gpus")
    result = fit(model, gpu=top["gpu"], params=top["params"], gpus=gpus, headroom=top["headroom"],
                 method_locked=method_locked, max_plans=q.top, **work)
    d = result.to_dict()
    d["plans"] = d["plans"][: q.top]
    return d


def run_estimate(model: str | dict | None, s: Settings) -> dict:
    """The same call as ``vramlens estimate``, returning ``Estimate.to_dict()``."""
    from vramlens.estimate import estimate

    top, work = _settings(s)
    if model is None and top["params"] is None:
        raise InputError("give a model (a catalog name or hub id), a pasted config, or params (e.g. 7B)")
    if isinstance(model, dict):
        # a pasted config goes straight to the pure builder: no loader, no path, no hub
        from vramlens.models.inventory import spec_from_config

        model = spec_from_config(model, source="pasted config.json", where="the pasted config")
    est = estimate(model, gpu=top["gpu"], params=top["params"], headroom=top["headroom"], **work)
    return est.to_dict()


def catalog_models() -> list[dict[str, Any]]:
    """The model catalog entries as dicts (id, aliases, params, ...); empty while it is missing."""
    try:
        from vramlens.models.catalog import list_catalog
    except ImportError:  # the catalog module is another engineer's, and may not exist yet
        return []
    out = []
    for e in list_catalog():  # dataclass entries: every field, tuples as lists
        d = asdict(e)
        out.append({k: list(v) if isinstance(v, tuple) else v for k, v in d.items()})
    return out


def advisor():
    """``vramlens.advise.fit`` when the advisor exists, else None."""
    try:
        from vramlens import advise
    except ImportError:  # pragma: no cover
        return None
    return getattr(advise, "fit", None)


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


def create_app() -> FastAPI:
    app = FastAPI(
        title="vramlens", version=__version__,
        description="Will this model fit on my GPU? The same results as `vramlens estimate --json`.",
    )

    @app.exception_handler(VramlensError)
    async def _vramlens_error(request: Request, exc: VramlensError):
        return _error(422, str(exc).splitlines()[0] if str(exc) else type(exc).__name__)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError):
        parts = []
        for e in exc.errors():
            loc = ".".join(str(x) for x in e.get("loc", ()) if x not in ("query", "body"))
            parts.append(f"{loc}: {e.get('msg', 'invalid')}" if loc else e.get("msg", "invalid"))
        return _error(422, "; ".join(parts) or "invalid request")

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    def page() -> HTMLResponse:
        from vramlens.web.page import render_page

        # the page needs nothing from anywhere but this server: say so to the browser
        csp = ("default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
               "connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'")
        return HTMLResponse(render_page(), headers={"content-security-policy": csp})

    @app.get("/api/estimate", summary="Estimate memory (same object as `vramlens estimate --json`)")
    def get_estimate(q: Annotated[EstimateQuery, Query()]) -> dict:
        model = check_model_id(q.model) if q.model else None
        return run_estimate(model, q)

    @app.post("/api/estimate", summary="Estimate memory of a pasted config.json")
    def post_estimate(body: Annotated[EstimateBody, Body()]) -> dict:
        return run_estimate(parse_config(body.config), body)

    @app.get("/api/estimate.svg", summary="The breakdown chart of an estimate, as SVG",
             response_class=Response, responses={200: {"content": {"image/svg+xml": {}}}})
    def get_estimate_svg(q: Annotated[EstimateQuery, Query()]) -> Response:
        from vramlens.report.svg import estimate_chart

        model = check_model_id(q.model) if q.model else None
        return Response(estimate_chart(run_estimate(model, q), headroom=q.headroom), media_type="image/svg+xml")

    @app.post("/api/estimate.svg", summary="The breakdown chart of a pasted config's estimate, as SVG",
              response_class=Response, responses={200: {"content": {"image/svg+xml": {}}}})
    def post_estimate_svg(body: Annotated[EstimateBody, Body()]) -> Response:
        from vramlens.report.svg import estimate_chart

        data = run_estimate(parse_config(body.config), body)
        return Response(estimate_chart(data, headroom=body.headroom), media_type="image/svg+xml")

    @app.get("/api/models", summary="The model catalog")
    def get_models() -> list[dict]:
        return catalog_models()

    @app.get("/api/gpus", summary="The GPU catalog")
    def get_gpus() -> list[dict]:
        from vramlens.hardware.catalog import list_gpus

        return [{"name": g.name, "memory_bytes": g.memory_bytes, "usable_bytes": g.capacity_bytes,
                 "vendor": g.vendor, "arch": g.arch, "aliases": list(g.aliases)} for g in list_gpus()]

    @app.get("/api/fit", summary="Plans that fit (same object as `vramlens fit --json`)")
    def get_fit(q: Annotated[FitQuery, Query()]) -> Any:
        model = check_model_id(q.model) if q.model else None
        if model is None and q.params is None:
            raise InputError("give a model (a catalog name or hub id) or params (e.g. 7B)")
        return run_fit(model, q)

    @app.post("/api/fit", summary="Plans that fit a pasted config.json")
    def post_fit(body: Annotated[FitBody, Body()]) -> Any:
        from vramlens.models.inventory import spec_from_config

        spec = spec_from_config(parse_config(body.config), source="pasted config.json", where="the pasted config")
        return run_fit(spec, body)

    @app.get("/api/version", summary="The vramlens version")
    def get_version() -> dict[str, str]:
        return {"version": __version__}

    return BodyLimit(app)


def openapi_app(wrapped) -> FastAPI:
    """The FastAPI app inside the body-limit middleware (for its OpenAPI document)."""
    return wrapped.app


__all__ = ["MAX_BODY_BYTES", "check_model_id", "create_app", "parse_config", "run_estimate"]
