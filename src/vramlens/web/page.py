"""The single page: a template from package data with the form filled in; its script and style
are files under /static (the page's CSP allows no inline script)."""

from __future__ import annotations

from functools import lru_cache
from html import escape
from importlib import resources

from vramlens import __version__
from vramlens import workload as W

#: (param, label, kind, choices or None, default). kind: "text", "number", "select", "check".
KNOBS: tuple[tuple[str, str, str, tuple | None, str], ...] = (
    ("task", "task", "select", ("",) + W.TASKS, ""),
    ("mode", "mode", "select", W.MODES, "inference"),
    ("method", "method", "select", W.METHODS, "full"),
    ("dtype", "dtype", "select", W.DTYPES, "bf16"),
    ("amp", "amp", "select", ("",) + W.AMPS, ""),
    ("quant", "quant", "select", ("",) + W.QUANTS, ""),
    ("optimizer", "optimizer", "select", W.OPTIMIZERS, "adamw"),
    ("optimizer_impl", "optimizer impl", "select", W.OPTIMIZER_IMPLS, "foreach"),
    ("batch", "batch", "number", None, "1"),
    ("seq", "seq", "number", None, "512"),
    ("new_tokens", "new tokens", "number", None, "0"),
    ("grad_accum", "grad accum", "number", None, "1"),
    ("keep_grads", "keep grads", "check", None, "false"),
    ("checkpointing", "checkpointing", "select", W.CHECKPOINTING, "none"),
    ("attention", "attention", "select", W.ATTENTION, "sdpa"),
    ("lora_rank", "LoRA rank", "number", None, "16"),
    ("lora_targets", "LoRA targets", "text", None, "q_proj,v_proj"),
    ("gpus", "GPUs", "number", None, "1"),
    ("zero", "ZeRO stage", "select", ("0", "1", "2", "3"), "0"),
    ("fsdp", "FSDP", "check", None, "false"),
    ("fsdp_strategy", "FSDP strategy", "select", W.FSDP_STRATEGIES, "full"),
    ("tp", "tensor parallel", "number", None, "1"),
    ("pp", "pipeline parallel", "number", None, "1"),
    ("offload", "offload", "select", W.OFFLOAD, "none"),
    ("kv_dtype", "KV dtype", "select", ("",) + W.KV_DTYPES, ""),
    ("kv_block", "KV block (paged)", "number", None, "0"),
    ("headroom", "headroom", "number", None, "0.1"),
)


def _control(param: str, kind: str, choices: tuple | None, default: str) -> str:
    attrs = f'id="f-{param}" name="{param}" data-param="{param}" data-default="{escape(default)}"'
    if kind == "select":
        opts = "".join(f'<option value="{escape(c)}"{" selected" if c == default else ""}>{escape(c or "(none)")}</option>'
                       for c in choices or ())
        return f"<select {attrs}>{opts}</select>"
    if kind == "check":
        return f'<input type="checkbox" {attrs}>'
    if kind == "text":
        return f'<input type="text" {attrs} value="{escape(default)}">'
    step = ' step="0.05" min="0" max="0.95"' if param == "headroom" else ' step="1" min="0"'
    return f'<input type="number" {attrs} value="{escape(default)}"{step}>'


def render_form() -> str:
    out = [
        "<fieldset><legend>Model</legend>",
        '<label><span>model</span>'
        '<input id="f-model" name="model" data-param="model" data-default="" list="model-list" type="search" '
        'placeholder="search the catalog or type a hub id"></label>',
        '<datalist id="model-list"></datalist>',
        '<label><span>or size</span>'
        '<input id="f-params" name="params" data-param="params" data-default="" placeholder="7B"></label>',
        '<details><summary>paste a config.json</summary>'
        '<textarea id="f-config" name="config" aria-label="config.json" placeholder="{&quot;model_type&quot;: ...}">'
        "</textarea></details>",
        "</fieldset><fieldset><legend>GPU</legend>",
        '<label><span>GPU</span><input id="f-gpu" name="gpu" data-param="gpu" data-default="" list="gpu-list" '
        'type="search" placeholder="A100-80GB or 24GB"></label>',
        '<datalist id="gpu-list"></datalist>',
        "</fieldset><fieldset><legend>Workload</legend>",
    ]
    for param, label, kind, choices, default in KNOBS:
        out.append(f"<label><span>{escape(label)}</span>{_control(param, kind, choices, default)}</label>")
    out.append("</fieldset>")
    return "\n".join(out)


@lru_cache(maxsize=1)
def render_page() -> str:
    static = resources.files("vramlens.web") / "static"
    html = (static / "index.html").read_text("utf-8")
    return (html.replace("{{VERSION}}", escape(__version__))
            .replace("{{FORM}}", render_form()))
