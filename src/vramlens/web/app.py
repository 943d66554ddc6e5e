"""The local web app: one page and a JSON API under /api (endpoint list at /docs).

FastAPI because the API is the product here: typed query parameters give the OpenAPI
document, and it runs in-process under an ASGI transport in tests.

Safety, since anything on the machine (and any web page its browser opens) can reach a local port:

* the Host header must name this machine (127.0.0.1, localhost, [::1] or the ``--host``):
  a DNS-rebinding page cannot talk to the server under its own name (421);
* a request that changes nothing is the only kind a foreign page may send: POSTs with a foreign
  ``Origin`` are refused (403) and POST bodies must be ``application/json`` (415), which a
  cross-site form cannot send without a CORS preflight this server never grants;
* request bodies are limited to :data:`MAX_BODY_BYTES` (413 beyond), checked while reading, and
  must arrive within ``Budget.body_seconds`` (408: a trickled body holds no worker);
* the estimate and fit work runs in a worker process with a time and memory budget (503 beyond,
  see ``budget``); every value has a bound before it gets there;
* a pasted config is parsed as JSON (never executed, never unpickled) and refused when it
  asks for an absurd size (layer or expert counts) before anything is built from it;
* the ``model`` parameter must be a catalog name or a hub id: never a local path;
* every answer carries nosniff, no-referrer, ``X-Frame-Options: DENY`` and a CSP without inline
  script; every error is ``{"error": "<one line>"}``, the framework's own 404/405/422 included.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from html import escape
from typing import TYPE_CHECKING, Annotated, Any, Literal

from fastapi import Body, FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field, create_model
from starlette.exceptions import HTTPException as StarletteHTTPException

from vramlens import __version__, limits
from vramlens.errors import InputError, VramlensError
from vramlens.serving import speculative_config
from vramlens.web.budget import Budget, JobError, OverBudget, Pool
from vramlens.web.jobs import capacity_job, compare_job, estimate_job, fit_job, gpu_matrix_job, model_job

log = logging.getLogger("vramlens.web")

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

#: Upper bounds of the Workload's integer fields as API parameters (the limits module's values).
_INT_BOUNDS = {
    "batch": limits.MAX_BATCH, "seq": limits.MAX_SEQ, "new_tokens": limits.MAX_SEQ,
    "grad_accum": limits.MAX_GRAD_ACCUM, "lora_rank": limits.MAX_LORA_RANK, "gpus": limits.MAX_GPUS,
    "zero": 3, "fsdp_version": 2, "tp": limits.MAX_PARALLEL, "pp": limits.MAX_PARALLEL,
    "kv_block": limits.MAX_KV_BLOCK,
}
#: Bound of an integer Workload field not listed above (a new flag, until it gets its own):
#: 2**31 - 1, the C int every CUDA size argument fits in.
_INT_FALLBACK = 2**31 - 1
#: Longest text parameter (gpu, params, lora_targets, the choices). The longest real one, a
#: LoRA target list naming every projection, is < 100 characters.
_MAX_TEXT = 256

#: The hosts the server answers to besides ``--host``: this machine's own names.
LOCAL_HOSTS = ("127.0.0.1", "localhost", "[::1]")
#: The page's Content-Security-Policy: nothing from anywhere but this server, no inline script.
PAGE_CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; "
            "base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
#: Every other answer's (JSON, SVG, the endpoint list): it runs nothing and loads nothing.
API_CSP = "default-src 'none'; style-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
SECURITY_HEADERS = (
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
)


def _workload_fields() -> dict[str, Any]:
    """Every Workload field as a query/body field with its CLI default and a bound, so the API
    takes exactly the flags of ``vramlens estimate`` (and gains a flag when the Workload does)."""
    from dataclasses import MISSING, fields

    from vramlens.workload import Workload

    out: dict[str, Any] = {}
    for f in fields(Workload):
        default = f.default if f.default is not MISSING else None
        if isinstance(default, tuple):  # lora_targets: comma-separated, as on the command line
            out[f.name] = (str, Field(",".join(default), max_length=_MAX_TEXT))
        elif default is None:
            out[f.name] = (str | None, Field(None, max_length=_MAX_TEXT))
        elif isinstance(default, bool):
            out[f.name] = (bool, default)
        elif isinstance(default, int):
            out[f.name] = (int, Field(default, ge=0, le=_INT_BOUNDS.get(f.name, _INT_FALLBACK)))
        elif isinstance(default, float):
            out[f.name] = (float, Field(default, ge=0, le=1, allow_inf_nan=False))  # lora_dropout
        elif isinstance(default, str):
            out[f.name] = (str, Field(default, max_length=_MAX_TEXT))
        else:  # pragma: no cover - a new kind of field: decide its bound here
            raise TypeError(f"Workload.{f.name}: no API type for {type(default).__name__}")
    return out


class _Base(BaseModel):
    model_config = ConfigDict(extra="forbid")

    params: str | None = Field(None, max_length=_MAX_TEXT,
                               description="model size (7B) for a generic decoder when model is omitted")
    gpu: str | None = Field(None, max_length=_MAX_TEXT, description="GPU name from /api/gpus or a size (24GB)")
    headroom: float = Field(0.10, ge=0, lt=1, allow_inf_nan=False, description="fraction of the GPU kept free")


#: The flags of ``vramlens estimate``, by name (dashes as underscores).
if TYPE_CHECKING:
    Settings = _Base  # its fields are made at run time: the type checker knows the base
else:
    Settings = create_model("Settings", __base__=_Base, **_workload_fields())


class EstimateQuery(Settings):
    model: str | None = Field(None, max_length=_MAX_TEXT,
                              description="catalog name or hub id (llama-2-7b, meta-llama/Llama-2-7b-hf)")


class EstimateBody(Settings):
    """A pasted config.json (an object or its text) and the workload flags."""

    config: dict[str, Any] | str = Field(..., description="the config.json, as an object or as text")


class CapacityQuery(BaseModel):
    """``vramlens capacity``'s flags, underscored; each engine's own settings by their names
    (the bounds and the engine's rules are checked by vramlens.serving, as for the CLI)."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field(..., max_length=_MAX_TEXT, description="catalog name or hub id")
    engine: Literal["vllm", "sglang", "llama.cpp", "transformers"] = "vllm"
    gpu: str = Field(..., max_length=limits.MAX_GPU_NAME, description="GPU name or size (A100-80GB, 24GB)")
    gpus: int | None = None
    tp: int = 1
    pp: int = 1
    context: int | None = None
    gpu_memory_utilization: float | None = None
    max_model_len: int | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    kv_cache_dtype: str | None = Field(None, max_length=64)
    block_size: int | None = None
    enforce_eager: bool | None = None
    quantization: str | None = Field(None, max_length=64)
    dtype: str | None = Field(None, max_length=64)
    version: str | None = Field(None, max_length=64, description="vLLM or SGLang: the release whose arithmetic to follow "
                                   "(vLLM 0.19, SGLang 0.5.3)")
    use_v1: bool | None = None
    enable_prefix_caching: bool | None = None
    mamba_cache_mode: str | None = Field(None, max_length=64, description="vLLM 0.15+: none, align or all")
    mem_fraction_static: float | None = None
    chunked_prefill_size: int | None = None
    max_running_requests: int | None = None
    context_length: int | None = None
    swa_full_tokens_ratio: float | None = None
    max_mamba_cache_size: int | None = None
    mamba_ssm_dtype: str | None = Field(None, max_length=64)
    speculative_config: str | None = Field(None, max_length=limits.MAX_MODEL_ARG,
                                           description="vLLM --speculative-config JSON (a draft: catalog name or hub id)")
    speculative_algorithm: str | None = Field(None, max_length=64)
    speculative_draft_model_path: str | None = Field(None, max_length=_MAX_TEXT, description="catalog name or hub id")
    speculative_num_steps: int | None = None
    speculative_eagle_topk: int | None = None
    speculative_num_draft_tokens: int | None = None
    ctx_size: int | None = None
    batch_size: int | None = None
    ubatch_size: int | None = None
    n_gpu_layers: int | None = None
    cache_type_k: str | None = Field(None, max_length=64)
    cache_type_v: str | None = Field(None, max_length=64)
    flash_attn: bool | None = None
    parallel: int | None = None
    weights_type: str | None = Field(None, max_length=64)
    max_batch: int | None = None


def run_capacity(pool: Pool, q: CapacityQuery) -> dict:
    """The same call as ``vramlens capacity --json``, under the endpoints' budget."""
    model = check_model_id(q.model)  # a catalog name or hub id: the web app reads no files (no GGUF)
    d = q.model_dump()
    layout = {k: d.pop(k) for k in ("gpus", "tp", "pp", "context")}
    for k in ("model", "engine", "gpu"):
        d.pop(k)
    settings = {k: v for k, v in d.items() if v is not None}
    # a draft is named like the model: a catalog name or hub id, never a local file
    if "speculative_config" in settings:
        settings["speculative_config"] = speculative_config(settings["speculative_config"])
        draft = settings["speculative_config"].get("model")
        if isinstance(draft, str) and draft not in ("ngram", "[ngram]"):
            check_model_id(draft)
    if "speculative_draft_model_path" in settings:
        check_model_id(settings["speculative_draft_model_path"])
    return pool.run(capacity_job, model, q.engine, q.gpu, layout, settings)


class FitQuery(EstimateQuery):
    top: int = Field(5, ge=1, le=50, description="how many plans")


class FitBody(EstimateBody):
    top: int = Field(5, ge=1, le=50, description="how many plans")


def _json_error(status: int, message: str, headers: tuple = ()) -> tuple[dict, bytes]:
    body = json.dumps({"error": message}).encode()
    start = {"type": "http.response.start", "status": status,
             "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                         *headers]}
    return start, body


async def _send_error(send, status: int, message: str) -> None:
    start, body = _json_error(status, message)
    await send(start)
    await send({"type": "http.response.body", "body": body})


class BodyLimit:
    """ASGI middleware: 413 for a body over ``limit`` bytes, whether announced or streamed, and 408
    for a body that has not fully arrived ``seconds`` after the request began (a trickled body)."""

    def __init__(self, app, limit: int = MAX_BODY_BYTES, seconds: float = Budget().body_seconds):
        self.app = app
        self.limit = limit
        self.seconds = seconds

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        for k, v in scope.get("headers", []):
            if k == b"content-length" and v.isdigit() and int(v) > self.limit:
                return await self._reject(send)
        seen = 0
        started = rejected = body_done = False
        deadline = asyncio.get_running_loop().time() + self.seconds

        async def counted_receive():
            # Over a limit: answer now and tell the app the client left, so whatever the app does
            # next (FastAPI turns a failed body read into a 400) is dropped.
            nonlocal seen, rejected, body_done
            if rejected:
                return {"type": "http.disconnect"}
            if body_done:
                return await receive()
            try:
                left = deadline - asyncio.get_running_loop().time()
                msg = await asyncio.wait_for(receive(), timeout=max(left, 0))
            except asyncio.TimeoutError:
                rejected = True
                if not started:
                    await _send_error(send, 408, f"the request body did not arrive within {self.seconds:g} s: "
                                                 "send the whole body at once")
                return {"type": "http.disconnect"}
            if msg["type"] == "http.request":
                seen += len(msg.get("body", b""))
                body_done = not msg.get("more_body", False)
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
        await _send_error(send, 413, f"request body over {self.limit // 1024} KiB: paste a config.json, "
                                     "not a checkpoint")


def _host_name(value: str) -> str | None:
    """The name in a Host header (``[::1]:8000`` -> ``[::1]``), or None when it is malformed."""
    value = value.strip().lower()
    if value.startswith("["):
        end = value.find("]")
        if end < 0:
            return None
        name, rest = value[: end + 1], value[end + 1:]
    else:
        name, colon, port = value.partition(":")
        rest = colon + port
    if rest and not (rest.startswith(":") and rest[1:].isdigit() and len(rest) <= 6):
        return None
    return name or None


def host_names(host: str | None, extra: tuple[str, ...] = ()) -> frozenset[str]:
    """The Host header names the server answers to when bound to ``host``."""
    names = set(LOCAL_HOSTS)
    for h in (host, *extra):
        if h:
            h = h.strip().lower()
            names.add(f"[{h}]" if ":" in h and not h.startswith("[") else h)
    return frozenset(names)


def _media_type(value: str) -> str:
    return value.split(";", 1)[0].strip().lower()


class Guard:
    """ASGI middleware, outermost: the Host check, the cross-site checks, the security headers on
    every answer, and a JSON 500 for whatever escaped every handler (logged; tested never to happen)."""

    def __init__(self, app, hosts: frozenset[str]):
        self.app = app
        self.hosts = hosts

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started = False

        async def secured_send(msg):
            nonlocal started
            if msg["type"] == "http.response.start":
                started = True
                headers = list(msg.get("headers", []))
                present = {k.lower() for k, _ in headers}
                headers += [(k, v) for k, v in SECURITY_HEADERS if k not in present]
                if b"content-security-policy" not in present:
                    headers.append((b"content-security-policy", API_CSP.encode()))
                msg = {**msg, "headers": headers}
            await send(msg)

        problem = self._problem(scope)
        if problem is not None:
            return await _send_error(secured_send, *problem)
        try:
            await self.app(scope, receive, secured_send)
        except Exception:
            log.exception("unhandled error in %s %s", scope.get("method"), scope.get("path"))
            if not started:
                await _send_error(secured_send, 500, "internal error")

    def _problem(self, scope) -> tuple[int, str] | None:
        hosts = [v.decode("latin-1") for k, v in scope.get("headers", []) if k == b"host"]
        if len(hosts) != 1:
            return 400, "the request needs exactly one Host header: open http://127.0.0.1:<port>/"
        name = _host_name(hosts[0])
        if name not in self.hosts:
            return 421, (f"Host {limits.show(hosts[0])} is not this server's address (DNS-rebinding protection): "
                         f"open it as http://127.0.0.1:<port>/, or start it with --host NAME")
        repeated = _repeated_parameter(scope.get("query_string", b""))
        if repeated is not None:
            return 400, repeated
        method = scope.get("method", "GET")
        if method in ("GET", "HEAD", "OPTIONS"):
            return None
        headers = {k: v.decode("latin-1") for k, v in scope.get("headers", [])}
        origin = headers.get(b"origin")
        own = f"{scope.get('scheme', 'http')}://{hosts[0].strip().lower()}"
        if origin is not None and origin.strip().lower() != own:
            return 403, (f"Origin {limits.show(origin)} is not this server ({own}): the API takes no cross-site "
                         "requests; use the vramlens page, or call it without an Origin header (curl, scripts)")
        ctype = headers.get(b"content-type")
        if method not in ("POST", "PUT", "PATCH"):  # no body to type
            return None
        if ctype is None or _media_type(ctype) != "application/json":
            return 415, (f"Content-Type {limits.show(ctype) if ctype else '(none)'} is not accepted: "
                         "send the body as JSON with Content-Type: application/json")
        return None


def _repeated_parameter(query: bytes) -> str | None:
    """The message for a query parameter given more than once (the API takes none twice: FastAPI would keep
    the last one silently, so ``?gpu=A100-80GB&gpu=RTX-4090`` answered for a GPU the user may not mean)."""
    if not query:
        return None
    from collections import Counter
    from urllib.parse import parse_qsl

    counts = Counter(k for k, _ in parse_qsl(query.decode("latin-1"), keep_blank_values=True))
    name, n = max(counts.items(), key=lambda kv: kv[1], default=("", 0))
    if n < 2:
        return None
    return f"query parameter {limits.show(name)} is given {n} times: give each parameter once"


def check_model_id(model: str) -> str:
    """A catalog name or hub id; anything that could name a local file is refused."""
    if not _MODEL_ID.match(model) or ".." in model or model.lower().endswith((".json", ".gguf", ".safetensors")) \
            or os.path.exists(model):
        raise InputError(f"model={limits.show(model)} is not a catalog name or hub id: the web app reads no local "
                         "files; paste the config.json instead")
    return model


def _check_sizes(config: dict[str, Any]) -> None:
    """Refuse numbers of more than MAX_INT_DIGITS digits and nesting deeper than MAX_JSON_DEPTH
    anywhere in the config (iteratively: a deep config cannot exhaust the stack here)."""
    stack: list[tuple[Any, str, int]] = [(config, "", 0)]
    while stack:
        value, where, depth = stack.pop()
        if depth > limits.MAX_JSON_DEPTH:
            raise InputError(f"the pasted config nests deeper than {limits.MAX_JSON_DEPTH} levels at {where}: "
                             "a config.json is a flat object; check the config")
        if isinstance(value, dict):
            stack.extend((v, f"{where}.{k}" if where else str(k), depth + 1) for k, v in value.items())
        elif isinstance(value, list):
            stack.extend((v, f"{where}[{i}]", depth + 1) for i, v in enumerate(value))
        elif isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 100 \
                and len(str(abs(value))) > limits.MAX_INT_DIGITS:
            raise InputError(f"{where}={limits.show(value)} in the pasted config has more than "
                             f"{limits.MAX_INT_DIGITS} digits: no model has such a size; check the config")


def parse_config(config: dict[str, Any] | str) -> dict[str, Any]:
    """A pasted config as a dict, refused when malformed or absurdly large."""
    if isinstance(config, str):
        from vramlens.safe_io import UnsafeJSON, loads_bounded

        try:
            config = loads_bounded(config)
        except UnsafeJSON as e:
            if e.kind == "syntax":
                raise InputError(f"the pasted config is {e}") from None
            raise InputError(f"the pasted config: {e}; check the config") from None
    if not isinstance(config, dict):
        raise InputError(f"the pasted config must be a JSON object (a config.json), not {type(config).__name__}")
    _check_sizes(config)
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


def run_fit(pool: Pool, model: str | dict | None, q) -> Any:
    """The same search as ``vramlens fit``, returning ``FitResult.to_dict()`` with the top plans."""
    if advisor() is None:
        return _error(501, "the advisor (vramlens.advise.fit) is not available in this version")
    top, work = _settings(q)
    # as `vramlens fit` does: the method is searched over unless the request names one
    method_locked = "method" in q.model_fields_set
    return pool.run(fit_job, model, top, work, method_locked, q.top)


def run_estimate(pool: Pool, model: str | dict | None, s: Settings) -> dict:
    """The same call as ``vramlens estimate``, returning ``Estimate.to_dict()``."""
    top, work = _settings(s)
    if model is None and top["params"] is None:
        raise InputError("give a model (a catalog name or hub id), a pasted config, or params (e.g. 7B)")
    return pool.run(estimate_job, model, top, work)


def run_job(pool: Pool, job, model: str | dict | None, s: Settings) -> dict:
    """One of the page's extra views (dtype table, GPU matrix, model card) of the workload ``s``,
    under the same budget as an estimate."""
    top, work = _settings(s)
    if model is None and top["params"] is None:
        raise InputError("give a model (a catalog name or hub id), a pasted config, or params (e.g. 7B)")
    if job is model_job:
        return pool.run(job, model, top)
    return pool.run(job, model, top, work)


def _view_routes(pool: Pool, job):
    """The GET (model name) and POST (pasted config) handlers of one extra view."""

    def get_view(q: Annotated[EstimateQuery, Query()]) -> dict:
        model = check_model_id(q.model) if q.model else None
        return run_job(pool, job, model, q)

    def post_view(body: Annotated[EstimateBody, Body()]) -> dict:
        return run_job(pool, job, parse_config(body.config), body)

    return get_view, post_view


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


def _error(status: int, message: str, headers: Mapping[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers=headers)


#: Validation errors whose message is clearer with the value beside the field.
_BOUND_ERRORS = frozenset({"less_than_equal", "greater_than_equal", "less_than", "greater_than", "string_too_long",
                           "finite_number"})
_BODY_EXAMPLE = 'send a JSON object such as {"config": {...}, "mode": "train"}'


def validation_message(errors: Sequence[Mapping[str, Any]]) -> str:
    """One line from pydantic's errors: ``field: message`` (with the value for a bound), joined."""
    parts = []
    for e in errors:
        loc = ".".join(str(x) for x in e.get("loc", ()) if x not in ("query", "body"))
        kind, msg = e.get("type", ""), e.get("msg", "invalid")
        if kind == "json_invalid":
            return f"the request body is not valid JSON ({(e.get('ctx') or {}).get('error', msg)}): {_BODY_EXAMPLE}"
        if not loc and kind in ("model_attributes_type", "dict_type"):
            return f"the request body must be a JSON object of settings: {_BODY_EXAMPLE}"
        if not loc and kind == "missing":
            return f"the request body is missing: {_BODY_EXAMPLE}"
        if kind in _BOUND_ERRORS and "input" in e:
            loc = f"{loc}={limits.show(e['input'])}"
        parts.append(f"{loc}: {msg}" if loc else msg)
    return "; ".join(parts).replace("\n", " ") or "invalid request"


def _methods(request: Request) -> list[str]:
    """Every method some route of this path takes (Starlette's Allow names only the first route's)."""
    from starlette.routing import Match

    methods: set[str] = set()
    for route in request.app.routes:
        if getattr(route, "methods", None) and route.matches(request.scope)[0] != Match.NONE:
            methods |= route.methods
    return sorted(methods - {"HEAD"})


def _http_message(request: Request, exc: StarletteHTTPException) -> str:
    path = limits.show(request.url.path)
    if exc.status_code == 404:
        return f"no such page: {path}: the page is at / and the API under /api (listed at /docs)"
    if exc.status_code == 405:
        allow = ", ".join(_methods(request)) or "another method"
        return f"{request.method} is not allowed on {path}: use {allow}"
    if exc.status_code == 400 and "parsing the body" in str(exc.detail):
        return ("the request body could not be read: send UTF-8 JSON (numbers under 4,300 digits) with "
                "Content-Type: application/json")
    return str(exc.detail).splitlines()[0] if exc.detail else f"HTTP {exc.status_code}"


def _docs_page(spec: dict[str, Any]) -> str:
    """The endpoints of the OpenAPI document as one static page (no script, nothing from a CDN)."""
    rows = []
    for path, ops in spec.get("paths", {}).items():
        for method, op in ops.items():
            params = ", ".join(p["name"] for p in op.get("parameters", []))
            body = " (JSON body: config and the same settings)" if "requestBody" in op else ""
            rows.append(f"<tr><td><code>{escape(method.upper())} {escape(path)}</code></td>"
                        f"<td>{escape(op.get('summary', ''))}{escape(body)}</td><td><small>{escape(params)}</small></td></tr>")
    return ("<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>vramlens API</title>"
            "<link rel=\"stylesheet\" href=\"/static/style.css\"></head><body><main><h1>vramlens API</h1>"
            "<p>The JSON API of <code>vramlens serve</code>; the full OpenAPI document is at "
            "<a href=\"/openapi.json\">/openapi.json</a>. Errors are <code>{\"error\": \"...\"}</code>.</p>"
            "<table><thead><tr><th>endpoint</th><th>what</th><th>parameters</th></tr></thead><tbody>"
            + "".join(rows) + "</tbody></table></main></body></html>")


#: The files under /static: a fixed list, so no request path ever reaches the file system.
_STATIC = {"app.js": "text/javascript; charset=utf-8", "serving.js": "text/javascript; charset=utf-8",
           "style.css": "text/css; charset=utf-8"}


def create_app(*, budget: Budget = Budget(), host: str | None = None, allow_hosts: tuple[str, ...] = (),
               offline: bool = False):
    """The ASGI app.

    Args:
        budget: what one request may spend (time, memory, workers, body upload time).
        host: the address ``vramlens serve`` binds: Host headers naming it are accepted too.
        allow_hosts: further names the server is reached by (``--allow-host``).
        offline: never contact the Hugging Face hub (hub ids answer from the local cache or with
            the offline error), as ``HF_HUB_OFFLINE=1`` does.
    """
    from contextlib import asynccontextmanager

    pool = Pool(budget, {"HF_HUB_OFFLINE": "1"} if offline else None)

    @asynccontextmanager
    async def lifespan(app):
        yield
        pool.close()

    app = FastAPI(
        title="vramlens", version=__version__, docs_url=None, redoc_url=None, lifespan=lifespan,
        description="Will this model fit on my GPU? The same results as `vramlens estimate --json`.",
    )
    app.state.pool = pool

    @app.exception_handler(OverBudget)
    async def _over_budget(request: Request, exc: OverBudget):
        return _error(503, str(exc), {"retry-after": "5"})

    @app.exception_handler(JobError)
    async def _job_error(request: Request, exc: JobError):
        return _error(422, str(exc))

    @app.exception_handler(VramlensError)
    async def _vramlens_error(request: Request, exc: VramlensError):
        return _error(422, str(exc).splitlines()[0] if str(exc) else type(exc).__name__)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError):
        return _error(422, validation_message(exc.errors()))

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException):
        return _error(exc.status_code, _http_message(request, exc), exc.headers)

    @app.exception_handler(Exception)
    async def _internal(request: Request, exc: Exception):
        log.error("unhandled error in %s %s", request.method, request.url.path, exc_info=exc)
        return _error(500, "internal error")

    @app.api_route("/", methods=["GET", "HEAD"], response_class=HTMLResponse, include_in_schema=False)
    def page() -> HTMLResponse:
        from vramlens.web.page import render_page

        return HTMLResponse(render_page(), headers={"content-security-policy": PAGE_CSP})

    @app.get("/static/{name}", include_in_schema=False)
    def static(name: str) -> Response:
        from importlib import resources

        if name not in _STATIC:
            return _error(404, f"no such file: {limits.show('/static/' + name)}: the page's files are "
                               + ", ".join(sorted(_STATIC)))
        text = (resources.files("vramlens.web") / "static" / name).read_text("utf-8")
        return Response(text, media_type=_STATIC[name], headers={"cache-control": "no-cache"})

    @app.get("/favicon.ico", include_in_schema=False)
    def favicon() -> Response:
        return Response(status_code=204)

    @app.get("/docs", response_class=HTMLResponse, include_in_schema=False)
    def docs() -> HTMLResponse:
        return HTMLResponse(_docs_page(app.openapi()))

    @app.get("/api/health", summary="Liveness: answers while the server runs")
    def get_health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/api/estimate", summary="Estimate memory (same object as `vramlens estimate --json`)")
    def get_estimate(q: Annotated[EstimateQuery, Query()]) -> dict:
        model = check_model_id(q.model) if q.model else None
        return run_estimate(pool, model, q)

    @app.post("/api/estimate", summary="Estimate memory of a pasted config.json")
    def post_estimate(body: Annotated[EstimateBody, Body()]) -> dict:
        return run_estimate(pool, parse_config(body.config), body)

    @app.get("/api/estimate.svg", summary="The breakdown chart of an estimate, as SVG",
             response_class=Response, responses={200: {"content": {"image/svg+xml": {}}}})
    def get_estimate_svg(q: Annotated[EstimateQuery, Query()]) -> Response:
        from vramlens.report.svg import estimate_chart

        model = check_model_id(q.model) if q.model else None
        return Response(estimate_chart(run_estimate(pool, model, q), headroom=q.headroom), media_type="image/svg+xml")

    @app.post("/api/estimate.svg", summary="The breakdown chart of a pasted config's estimate, as SVG",
              response_class=Response, responses={200: {"content": {"image/svg+xml": {}}}})
    def post_estimate_svg(body: Annotated[EstimateBody, Body()]) -> Response:
        from vramlens.report.svg import estimate_chart

        data = run_estimate(pool, parse_config(body.config), body)
        return Response(estimate_chart(data, headroom=body.headroom), media_type="image/svg+xml")

    def _html_report(data: dict, headroom: float) -> Response:
        from vramlens.report.html import render_html

        return Response(render_html("estimate", data, headroom=headroom), media_type="text/html; charset=utf-8",
                        headers={"content-disposition": 'attachment; filename="vramlens-estimate.html"'})

    @app.get("/api/estimate.html", summary="The estimate as a self-contained HTML report (a download)",
             response_class=Response, responses={200: {"content": {"text/html": {}}}})
    def get_estimate_html(q: Annotated[EstimateQuery, Query()]) -> Response:
        model = check_model_id(q.model) if q.model else None
        return _html_report(run_estimate(pool, model, q), q.headroom)

    @app.post("/api/estimate.html", summary="A pasted config's estimate as an HTML report (a download)",
              response_class=Response, responses={200: {"content": {"text/html": {}}}})
    def post_estimate_html(body: Annotated[EstimateBody, Body()]) -> Response:
        return _html_report(run_estimate(pool, parse_config(body.config), body), body.headroom)

    views = (("compare", compare_job, "The dtype table: fp32/bf16/int8/int4 x inference/training"),
             ("gpu-matrix", gpu_matrix_job, "Which GPU: every catalog GPU, fits or not, for the workload"),
             ("model", model_job, "The model card: sizes, context length, source, assumed dims"))
    for name, job, summary in views:
        get_view, post_view = _view_routes(pool, job)
        app.get(f"/api/{name}", summary=summary)(get_view)
        app.post(f"/api/{name}", summary=summary + " (a pasted config.json)")(post_view)

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
        return run_fit(pool, model, q)

    @app.post("/api/fit", summary="Plans that fit a pasted config.json")
    def post_fit(body: Annotated[FitBody, Body()]) -> Any:
        return run_fit(pool, parse_config(body.config), body)

    @app.get("/api/capacity", summary="Serving capacity (same object as `vramlens capacity --json`)")
    def get_capacity(q: Annotated[CapacityQuery, Query()]) -> dict:
        return run_capacity(pool, q)

    @app.get("/api/version", summary="The vramlens version")
    def get_version() -> dict[str, str]:
        return {"version": __version__}

    return Guard(BodyLimit(app, seconds=budget.body_seconds), host_names(host, allow_hosts))


def openapi_app(wrapped) -> FastAPI:
    """The FastAPI app inside the middleware (for its OpenAPI document and its worker pool)."""
    return wrapped.app.app


__all__ = ["MAX_BODY_BYTES", "Budget", "check_model_id", "create_app", "parse_config", "run_estimate"]
