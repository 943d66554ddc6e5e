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
    ("image_size", "image size (HxW, vision)", "text", None, ""),
    ("new_tokens", "new tokens", "number", None, "0"),
    ("grad_accum", "grad accum", "number", None, "1"),
    ("keep_grads", "keep grads", "check", None, "false"),
    ("optimizer_in_backward", "optimizer in backward", "check", None, "false"),
    ("checkpointing", "checkpointing", "select", W.CHECKPOINTING_CHOICES, "none"),
    ("activation_offload", "activation offload", "check", None, "false"),
    ("fp8", "FP8 (torchao)", "check", None, "false"),
    ("fp8_recipe", "FP8 recipe", "select", W.FP8_RECIPES, "tensorwise"),
    ("compile", "torch.compile", "check", None, "false"),
    ("compile_scope", "compile scope", "select", W.COMPILE_SCOPES, "model"),
    ("loss_chunks", "loss chunks", "number", None, "1"),
    ("loss_upcast", "chunked loss upcast to fp32", "check", None, "true"),
    ("output_upcast", "logits cast to fp32 (Fabric)", "check", None, "false"),
    ("loss", "loss", "select", W.LOSSES, "cross-entropy"),
    ("holds_outputs", "loop holds outputs", "select", W.HELD_FOR, "none"),
    ("loss_parallel", "loss parallel", "check", None, "false"),
    ("attention", "attention", "select", W.ATTENTION, "sdpa"),
    ("gqa_expand", "GQA keys/values expanded", "check", None, "false"),
    ("padded", "padded batch (attention mask)", "check", None, "false"),
    ("fused_qkv", "fused q/k/v (LitGPT)", "check", None, "false"),
    ("lora_rank", "LoRA rank", "number", None, "8"),
    ("num_virtual_tokens", "virtual tokens (prompt tuning)", "number", None, "0"),
    ("vera_rank", "VeRA rank", "number", None, "256"),
    ("decompose_factor", "LoKr decompose factor", "number", None, "-1"),
    ("oft_block_size", "OFT block size", "number", None, "32"),
    ("boft_block_size", "BOFT block size", "number", None, "4"),
    ("lora_targets", "LoRA targets", "text", None, "q_proj,v_proj"),
    ("lora_dropout", "LoRA dropout", "number", None, "0"),
    ("lora_dtype", "LoRA dtype", "select", W.LORA_DTYPES, "fp32"),
    ("dora", "DoRA", "check", None, "false"),
    ("lora_fa", "LoRA-FA (frozen lora_A)", "check", None, "false"),
    ("quant_targets", "quantize", "select", W.QUANT_TARGETS, "all"),
    ("quant_head", "quantize lm_head", "check", None, "false"),
    ("dequant_dtype", "4-bit dequant dtype", "select", W.DEQUANT_DTYPES, "compute"),
    ("bnb_compute_dtype", "bnb 4-bit compute dtype", "select", ("",) + W.DTYPES, ""),
    ("nf4_impl", "NF4 code", "select", W.NF4_IMPLS, "bitsandbytes"),
    ("quant_impl", "quantized matmul", "select", W.QUANT_IMPLS, "kernel"),
    ("quant_group_size", "quant group size", "number", None, "0"),
    ("quantize_on_device", "quantized on the GPU (torchao)", "check", None, "false"),
    ("bnb_inputs", "bnb < 0.43.2 keeps 4-bit inputs", "check", None, "false"),
    ("gpus", "GPUs", "number", None, "1"),
    ("zero", "ZeRO stage", "select", ("0", "1", "2", "3"), "0"),
    ("fsdp", "FSDP", "check", None, "false"),
    ("zero_buckets", "ZeRO bucket sizes", "select", W.ZERO_BUCKETS, "default"),
    ("fsdp_strategy", "FSDP strategy", "select", W.FSDP_STRATEGIES, "full"),
    ("fsdp_version", "FSDP version", "select", tuple(map(str, W.FSDP_VERSIONS)), "2"),
    ("fsdp_units", "FSDP units", "select", W.FSDP_UNITS, "blocks"),
    ("tp", "tensor parallel", "number", None, "1"),
    ("pp", "pipeline parallel", "number", None, "1"),
    ("pp_schedule", "pipeline schedule", "select", W.PP_SCHEDULES, "1f1b"),
    ("cp", "context parallel", "number", None, "1"),
    ("offload", "offload", "select", W.OFFLOAD, "none"),
    ("kv_dtype", "KV dtype", "select", ("",) + W.KV_DTYPES, ""),
    ("kv_block", "KV block (paged)", "number", None, "0"),
    ("cache", "KV cache", "select", W.CACHES, "dynamic"),
    ("max_cache_len", "max cache len", "number", None, "0"),
    ("transformers_version", "transformers version", "text", None, ""),
    ("audio_seconds", "audio seconds (Whisper)", "text", None, ""),
    ("alloc_conf", "PYTORCH_CUDA_ALLOC_CONF", "text", None, ""),
    ("headroom", "headroom", "number", None, "0.1"),
    ("images", "images per sample (VLM)", "number", None, "0"),
)


#: When a knob applies: ``field=value|value`` conditions, all of which must hold (``;``-separated).
#: A knob that does not apply is hidden and not sent, so the URL and the CLI line never carry it.
SHOW_WHEN: dict[str, str] = {
    **{k: "mode=train" for k in ("optimizer", "optimizer_impl", "grad_accum", "keep_grads", "checkpointing",
                                 "zero", "fsdp", "offload", "optimizer_in_backward", "activation_offload", "loss_chunks",
                                 "loss", "loss_parallel", "compile")},
    "fsdp_strategy": "mode=train;fsdp=true",
    "fsdp_version": "mode=train;fsdp=true",
    "fsdp_units": "mode=train;fsdp=true",
    "loss_upcast": "mode=train;loss=cross-entropy",
    "holds_outputs": "mode=train;loss=cross-entropy",
    "output_upcast": "mode=train;loss=cross-entropy",
    "cp": "mode=train",
    "pp_schedule": "mode=train",
    "zero_buckets": "mode=train;zero=1|2|3",
    "compile_scope": "mode=train;compile=true",
    "fp8": "mode=train;method=full",  # torchao's Float8Linear: full training only (Workload._fp8_problems)
    "fp8_recipe": "mode=train;method=full;fp8=true",
    **{k: "mode=inference" for k in ("new_tokens", "kv_dtype", "kv_block", "cache")},
    "max_cache_len": "mode=inference;cache=static",
    **{k: "method=lora|qlora" for k in ("dora", "quant_targets")},
    "lora_rank": "method=lora|qlora|adalora|loha|lokr",  # AdaLoRA's init_r, LoHa's and LoKr's r
    "lora_targets": "method=lora|qlora|adalora|loha|lokr|oft|boft",  # their target_modules, and OFT's and BOFT's
    "lora_fa": "mode=train;method=lora|qlora",
    "decompose_factor": "mode=train;method=lokr",
    "oft_block_size": "mode=train;method=oft",
    "boft_block_size": "mode=train;method=boft",
    "lora_dtype": "method=lora|qlora|ia3",  # IA3's vectors too (peft's autocast_adapter_dtype)
    "num_virtual_tokens": "mode=train;method=prompt-tuning|prefix-tuning",
    "vera_rank": "mode=train;method=vera",
    "lora_dropout": "mode=train;method=lora|qlora|adalora",
    "bnb_inputs": "mode=train;method=lora|qlora",
    "quant_group_size": "quant=" + "|".join(W.GROUPED_QUANTS),
    "quantize_on_device": "mode=inference;cache=static;quant=" + "|".join(W.ON_DEVICE_QUANTS),
    "quant_impl": "mode=inference;quant=" + "|".join((*W.WO_DEQUANT_QUANTS, "gptq-4bit")),
    "bnb_compute_dtype": "mode=inference;dtype=fp16;quant=" + "|".join(W.FOUR_BIT),
}
#: Workload fields with no knob on purpose.
API_ONLY: frozenset[str] = frozenset()


def knobs() -> tuple[tuple[str, str, str, tuple | None, str], ...]:
    """KNOBS, then a generated knob for every Workload field KNOBS does not list yet (a new flag
    shows up on the page the day it joins the Workload, as it does in the API)."""
    from dataclasses import MISSING, fields

    from vramlens.workload import Workload

    listed = {k[0] for k in KNOBS}
    extra: list[tuple[str, str, str, tuple[str, ...] | None, str]] = []
    for f in fields(Workload):
        if f.name in listed or f.name in API_ONLY:
            continue
        default = f.default if f.default is not MISSING else None
        choices = getattr(W, f.name.upper() + "S", None)
        label = f.name.replace("_", " ")
        if isinstance(default, bool):
            extra.append((f.name, label, "check", None, "true" if default else "false"))
        elif isinstance(default, int):
            extra.append((f.name, label, "number", None, str(default)))
        elif isinstance(choices, tuple):
            opts = choices if default is not None else ("",) + choices
            extra.append((f.name, label, "select", opts, "" if default is None else str(default)))
        else:
            text = ",".join(default) if isinstance(default, tuple) else ("" if default is None else str(default))
            extra.append((f.name, label, "text", None, text))
    return KNOBS[:-1] + tuple(extra) + KNOBS[-1:]  # headroom stays last


def _control(param: str, kind: str, choices: tuple | None, default: str) -> str:
    attrs = (f'id="f-{param}" name="{param}" data-param="{param}" data-kind="{kind}" '
             f'data-default="{escape(default)}"')
    if kind == "select":
        opts = "".join(f'<option value="{escape(c)}"{" selected" if c == default else ""}>{escape(c or "(none)")}</option>'
                       for c in choices or ())
        return f"<select {attrs}>{opts}</select>"
    if kind == "check":
        return f'<input type="checkbox" {attrs}{" checked" if default == "true" else ""}>'
    if kind == "text":
        return f'<input type="text" {attrs} value="{escape(default)}">'
    step = ' step="0.05" min="0" max="0.95"' if param in ("headroom", "lora_dropout") else ' step="1" min="0"'
    return f'<input type="number" {attrs} value="{escape(default)}"{step}>'


def render_form() -> str:
    out = [
        "<fieldset><legend>Model</legend>",
        '<label><span>model</span>'
        '<input id="f-model" name="model" data-param="model" data-kind="text" data-default="" list="model-list" type="search" '
        'placeholder="search the catalog or type a hub id"></label>',
        '<datalist id="model-list"></datalist>',
        '<label><span>or size</span>'
        '<input id="f-params" name="params" data-param="params" data-kind="text" data-default="" placeholder="7B"></label>',
        '<details id="config-box"><summary>paste a config.json</summary>'
        '<textarea id="f-config" name="config" aria-label="config.json (wins over the model name)" '
        'placeholder="{&quot;model_type&quot;: ...}"></textarea></details>',
        '<p id="source-note" class="note" role="status" hidden></p>',
        "</fieldset><fieldset><legend>GPU</legend>",
        '<label><span>GPU</span><input id="f-gpu" name="gpu" data-param="gpu" data-kind="text" data-default="" list="gpu-list" '
        'type="search" placeholder="A100-80GB or 24GB"></label>',
        '<datalist id="gpu-list"></datalist>',
        "</fieldset><fieldset><legend>Workload</legend>",
    ]
    for param, label, kind, choices, default in knobs():
        show = f' data-show="{escape(SHOW_WHEN[param])}"' if param in SHOW_WHEN else ""
        out.append(f'<label id="k-{param}"{show}><span>{escape(label)}</span>'
                   f"{_control(param, kind, choices, default)}</label>")
    out.append("</fieldset>")
    return "\n".join(out)


@lru_cache(maxsize=1)
def render_page() -> str:
    static = resources.files("vramlens.web") / "static"
    html = (static / "index.html").read_text("utf-8")
    return (html.replace("{{VERSION}}", escape(__version__))
            .replace("{{FORM}}", render_form()))
