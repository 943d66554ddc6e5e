"""Hybrid models' cache layout: which blocks keep a KV cache and which a fixed recurrent state.

One home for the config fields of attention/state-space hybrids (the serving engines read the
:class:`HybridLayout` this returns, never ``model_type``): Qwen3-Next's ``layer_types``
(``linear_attention`` Gated DeltaNet, ``full_attention``), Granite 4.0-H's ``layer_types``
(``mamba`` / ``attention``), Bamba's ``attn_layer_indices``, Nemotron-H's ``hybrid_override_pattern``
(``M`` Mamba2, ``*`` attention, ``-`` MLP, ``E`` MoE; transformers 5's ``layers_block_type``), Jamba's
``attn_layer_period`` / ``attn_layer_offset``, Falcon-H1 (attention and Mamba2 side by side in every block:
BOTH), LFM2's ``layer_types`` (``conv`` short convolutions, ``full_attention``; older configs
``full_attn_idxs``). Zamba2 (shared attention blocks) and any other model with state-space fields are
reported as ``unsupported`` so that the engines refuse them in one line.

The state shapes of one block on one tensor-parallel rank are vLLM's ``MambaStateShapeCalculator``
(vllm/model_executor/layers/mamba/mamba_utils.py, commit 02d710837549; the default "SD" conv layout,
no speculative tokens), fed from the config as each model's ``get_mamba_state_shape_from_config`` does:

- Gated DeltaNet (qwen3_next.py): conv (K - 1, (2 k_heads k_dim + v_heads v_dim) / tp),
  recurrent (v_heads / tp, v_dim, k_dim), K = ``linear_conv_kernel_dim``.
- Mamba2 (bamba.py, granitemoehybrid.py: intermediate = ``mamba_expand`` x hidden; nemotron_h.py:
  intermediate = ``mamba_num_heads`` x ``mamba_head_dim``): groups g extended to tp when tp does not
  divide them (``extra_groups_for_head_shards``: + tp - g), conv (K - 1, (intermediate + 2 g N) / tp),
  ssm (heads / tp, head_dim, N), N = the state size.
- Mamba1 (jamba.py: intermediate = ``mamba_expand`` x hidden): conv (K - 1, intermediate / tp),
  ssm (intermediate / tp, N).
- Falcon-H1 (falcon_h1.py at vllm-project/vllm 59e459897da4: Mamba2 with intermediate = ``mamba_d_ssm``, else
  ``mamba_expand`` x hidden, ``mamba_n_groups``, ``mamba_n_heads``, ``mamba_d_head``, ``mamba_d_state``,
  ``mamba_d_conv``; transformers' FalconH1Config defaults where absent).
- LFM2 short convolutions (lfm2.py, ``short_conv_state_shape``): conv (``conv_L_cache`` - 1, hidden / tp) only.

The dtypes are ``MambaStateDtypeCalculator``'s: the conv state in the cache dtype ("auto": the model
dtype), the ssm/recurrent state in ``mamba_ssm_cache_dtype`` ("auto": the same); vLLM's
``NemotronHForCausalLMConfig.verify_and_update_config`` (vllm/model_executor/models/config.py) takes
the config's ``mamba_ssm_cache_dtype``, float16 when it has none, which :attr:`HybridLayout.ssm_dtype`
carries (None: "auto").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from math import prod
from typing import Any

from vramlens import limits as L
from vramlens.errors import ConfigError, InputError

#: block kinds: "attention" keeps a KV cache, "state" a fixed recurrent state, "none" neither (MLP, MoE),
#: "attention+state" both (Falcon-H1: attention and Mamba2 side by side in every block)
ATTENTION, STATE, NONE, BOTH = "attention", "state", "none", "attention+state"
#: config dtype names of ``mamba_ssm_cache_dtype`` -> vramlens dtypes
_DTYPES = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16", "half": "fp16", "float": "fp32"}
#: config.json fields that only state-space / linear-attention models have: a model with one of them that
#: no reader below lays out is a hybrid the engines must refuse, not serve as a plain transformer
_STATE_FIELDS = ("mamba_d_state", "ssm_state_size", "mamba_n_heads", "mamba_num_heads", "linear_num_value_heads",
                 "conv_L_cache", "hybrid_layer_ids", "mamba_d_ssm")


@dataclass(frozen=True, slots=True)
class HybridLayout:
    """Which blocks keep what, and the state one recurrent block keeps per request.

    ``kinds``: one of ATTENTION, STATE, NONE, BOTH per decoder block. ``mixer``: "gated_deltanet", "mamba2",
    "mamba1", "short_conv" (LFM2: a conv state of ``intermediate`` channels, no ssm state) or "rwkv" (RWKV 6/7
    as llama.cpp keeps it: ``token_shift`` rows of ``intermediate`` = n_embd values, and a wkv state of
    n_embd x ``head_dim`` values). The shape fields are the config's (whole model, before tensor parallelism).
    """

    kinds: tuple[str, ...]
    mixer: str
    conv_kernel: int
    # Gated DeltaNet
    k_heads: int = 0
    v_heads: int = 0
    k_dim: int = 0
    v_dim: int = 0
    # Mamba1 / Mamba2
    intermediate: int = 0
    n_groups: int = 0
    n_heads: int = 0
    head_dim: int = 0
    state_size: int = 0
    ssm_dtype: str | None = None
    # RWKV
    token_shift: int = 0
    #: the config's ``mamba_chunk_size``, else its ``chunk_size`` (the Mamba2 SSD kernel's chunk; vLLM
    #: ``ModelConfig.get_mamba_chunk_size`` reads these two), 0 when it has neither
    chunk_size: int = 0

    @property
    def n_attention(self) -> int:
        """Blocks with a KV cache (BOTH included)."""
        return self.kinds.count(ATTENTION) + self.kinds.count(BOTH)

    @property
    def n_state(self) -> int:
        """Blocks with a recurrent state (BOTH included)."""
        return self.kinds.count(STATE) + self.kinds.count(BOTH)

    def has_kv(self, i: int) -> bool:
        return self.kinds[i] in (ATTENTION, BOTH)

    def has_state(self, i: int) -> bool:
        return self.kinds[i] in (STATE, BOTH)

    def shapes(self, tp: int, num_spec: int = 0) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(conv state, ssm/recurrent state) shapes of one block on one of ``tp`` ranks, per request; ``()``
        for a state the mixer does not keep (short_conv has no ssm state). ``num_spec``: the speculative
        tokens vLLM keeps conv rows for (Gated DeltaNet only here: vLLM 0.19.0
        ``MambaStateShapeCalculator.gated_delta_net_state_shape``, conv rows K - 1 + num_spec)."""
        k = self.conv_kernel - 1
        if self.mixer == "short_conv":  # vLLM short_conv_state_shape: (L_cache - 1, hidden / tp)
            return (k, self.intermediate // tp), ()
        if self.mixer == "rwkv":  # llama.cpp n_embd_r = token_shift_count x n_embd, n_embd_s = n_embd x head size
            return (self.token_shift, self.intermediate), (self.intermediate, self.head_dim)
        if self.mixer == "gated_deltanet":
            conv_dim = 2 * self.k_heads * self.k_dim + self.v_heads * self.v_dim
            return (k + num_spec, conv_dim // tp), (self.v_heads // tp, self.v_dim, self.k_dim)
        if self.mixer == "mamba2":
            g = self.n_groups + (0 if self.n_groups % tp == 0 else tp - self.n_groups)
            return (k, (self.intermediate + 2 * g * self.state_size) // tp), (self.n_heads // tp, self.head_dim,
                                                                                self.state_size)
        return (k, self.intermediate // tp), (self.intermediate // tp, self.state_size)

    def state_bytes(self, tp: int, conv_b: int, ssm_b: int, num_spec: int = 0) -> int:
        """Bytes of one block's state for one request on one rank (vLLM ``MambaSpec.page_size_bytes``
        before padding: the sum of each shape's elements x its dtype's bytes; ``num_spec`` as in :meth:`shapes`)."""
        conv, ssm = self.shapes(tp, num_spec)
        return _numel(conv) * conv_b + _numel(ssm) * ssm_b

    def llama_rs_values(self) -> tuple[int, int]:
        """llama.cpp's ``n_embd_r()`` and ``n_embd_s()`` (src/llama-hparams.cpp): the values of one recurrent
        block's r_l and s_l rows for one sequence, the tp-1 shapes' element counts: Mamba and Gated DeltaNet
        (d_conv - 1) x (d_inner + 2 n_group d_state) and d_state x d_inner; LFM2 n_embd x (L_cache - 1) and
        0; RWKV token_shift_count x n_embd and n_embd x head_size."""
        conv, ssm = self.shapes(1)
        return _numel(conv), _numel(ssm)

    def tp_problem(self, tp: int) -> str | None:
        """Why vLLM's ``divide`` would fail for ``tp`` (a dimension the ranks cannot split evenly), or None."""
        if self.mixer == "gated_deltanet":
            dims = {"linear_num_value_heads": self.v_heads,
                    "conv dim": 2 * self.k_heads * self.k_dim + self.v_heads * self.v_dim}
        elif self.mixer == "mamba2":
            g = self.n_groups + (0 if self.n_groups % tp == 0 else tp - self.n_groups)
            dims = {"mamba heads": self.n_heads, "conv dim": self.intermediate + 2 * g * self.state_size}
        elif self.mixer == "short_conv":
            dims = {"hidden size": self.intermediate}
        else:
            dims = {"mamba intermediate size": self.intermediate}
        bad = [f"{name} {v}" for name, v in dims.items() if v % tp]
        return f"{', '.join(bad)} not divisible by tensor parallel size {tp}" if bad else None


class UnsupportedHybrid(ValueError):
    """A model with recurrent state whose layout vramlens does not read (the message names it)."""


def hybrid_layout(config: Mapping[str, Any] | None, n_layers: int) -> HybridLayout | None:
    """The layout of a hybrid model's ``config`` (config.json fields), None for a plain transformer.

    Raises:
        UnsupportedHybrid: state-space fields whose layout is not read here (Zamba2, pure Mamba, RWKV, ...).
        ConfigError: a field the layout is read from that no model could have (a zero, negative or non-integer
            size, a layer list or pattern of another length than the blocks, an unknown layer type, Jamba's
            ``attn_layer_offset`` outside ``[0, attn_layer_period)``), each named with the fix.
    """
    c = dict(config or {})
    if isinstance(c.get("text_config"), Mapping) and not any(k in c for k in _STATE_FIELDS):
        c = {**c, **c["text_config"]}
    layout = _layout(c, n_layers)
    chunk = next((v for v in (c.get("mamba_chunk_size"), c.get("chunk_size"))
                  if isinstance(v, int) and not isinstance(v, bool) and 0 < v <= L.MAX_INTERMEDIATE), 0)
    return replace(layout, chunk_size=chunk) if layout is not None and chunk else layout


def _layout(c: dict[str, Any], n_layers: int) -> HybridLayout | None:
    """:func:`hybrid_layout` of the (text) config ``c``, without its chunk size."""
    mt = str(c.get("model_type") or "")
    n = n_layers
    problems: list[str] = []

    def ints(*keys: str, default: int = 0, minimum: int = 1, limit: int = L.MAX_INTERMEDIATE) -> int:
        """The first of ``keys`` the config gives, in [minimum, limit] (a problem otherwise), else ``default``."""
        for key in keys:
            if c.get(key) is not None:
                try:
                    return L.check_int(key, c[key], limit, minimum=minimum, fix=_FIX)
                except InputError as e:
                    problems.append(str(e))
                    return max(default, minimum)
        return default

    layout = _read(c, mt, n, ints, problems)
    if layout is not None and not problems:
        problems.extend(_missing(layout, c) or _uneven(layout))
        if len(layout.kinds) != n:
            problems.append(f"{_kinds_source(c, mt)} gives {len(layout.kinds)} block(s) for num_hidden_layers={n}: "
                            "give one per decoder block")
        elif layout.kinds and all(k == NONE for k in layout.kinds):  # was a confident 0-byte cache (llama.cpp)
            problems.append(f"{_kinds_source(c, mt)} makes none of the {n} blocks attention or recurrent (every one an "
                            f"MLP or MoE): {_FIX}")
    if problems:
        raise ConfigError(problems)
    return layout


#: Convolution kernels (linear_conv_kernel_dim, mamba_d_conv, conv_kernel, conv_L_cache) read with minimum=2: the
#: conv state keeps kernel - 1 columns, and the kernels refuse a width under 2 (Dao-AILab/causal-conv1d
#: csrc/causal_conv1d.cpp causal_conv1d_fwd: ``TORCH_CHECK(width >= 2 && width <= 4)``, as vLLM's copy in
#: csrc/mamba/causal_conv1d).
#: How a bad hybrid field's message ends (vramlens.limits.check_int's ``fix``).
_FIX = "use the model's own config.json"
#: Layer types of ``layer_types`` / ``layers_block_type`` (Qwen3NextConfig, GraniteMoeHybridConfig, BambaConfig,
#: NemotronHConfig of transformers 5.24: "mlp", "linear_attention", "full_attention", "moe"; the legacy "mamba")
_TYPES_ATTENTION = ("full_attention", "attention", "sliding_attention")
_TYPES_STATE = ("linear_attention", "mamba", "mamba2", "conv")
_TYPES_NONE = ("mlp", "moe")
#: ``hybrid_override_pattern`` letters (NemotronHConfig._pattern_to_list)
_LETTERS = {"M": STATE, "*": ATTENTION, "-": NONE, "E": NONE}


def _read(c: dict[str, Any], mt: str, n: int, ints: Any, problems: list[str]) -> HybridLayout | None:
    """The layout as each model's config reads it (see :func:`hybrid_layout`); bad fields go to ``problems``."""
    if "linear_num_value_heads" in c and mt not in ("lfm2", "kimi_linear"):
        if c.get("layer_types") is not None:
            kinds = _kinds_from_types(c["layer_types"], "layer_types", problems)
        else:  # Qwen3NextConfig without layer_types: full attention every full_attention_interval-th block
            every = ints("full_attention_interval", default=4, limit=L.MAX_LAYERS)
            kinds = tuple(ATTENTION if (i + 1) % every == 0 else STATE for i in range(n))
        return HybridLayout(kinds=kinds, mixer="gated_deltanet", conv_kernel=ints("linear_conv_kernel_dim", default=4, minimum=2),
                            k_heads=ints("linear_num_key_heads", limit=L.MAX_HEADS),
                            v_heads=ints("linear_num_value_heads", limit=L.MAX_HEADS),
                            k_dim=ints("linear_key_head_dim"), v_dim=ints("linear_value_head_dim"))
    hidden = ints("hidden_size", limit=L.MAX_HIDDEN)
    if "mamba_n_heads" in c and mt in ("bamba", "granitemoehybrid"):
        kinds = _kinds_from_types_or_indices(c, "attn_layer_indices", n, problems)
        expand, heads = ints("mamba_expand", default=2, limit=L.MAX_HEADS), ints("mamba_n_heads", limit=L.MAX_HEADS)
        head_dim = c.get("mamba_d_head")
        # BambaConfig / GraniteMoeHybridConfig __post_init__: "auto" is mamba_expand x hidden_size // mamba_n_heads
        d_head = expand * hidden // heads if head_dim == "auto" and heads else ints("mamba_d_head")
        if heads and d_head and not problems and heads * d_head != expand * hidden:
            # BambaConfig / GraniteMoeHybridConfig.validate_architecture (transformers 5.24) refuse it too
            problems.append(f"mamba_n_heads={heads} x mamba_d_head={d_head} must equal mamba_expand={expand} x "
                            f"hidden_size={hidden} (the Mamba2 intermediate size): {_FIX}")
        return HybridLayout(kinds=kinds, mixer="mamba2", conv_kernel=ints("mamba_d_conv", default=4, minimum=2),
                            intermediate=expand * hidden, n_groups=ints("mamba_n_groups", default=1, limit=L.MAX_HEADS),
                            n_heads=heads, head_dim=d_head, state_size=ints("mamba_d_state"))
    if "mamba_num_heads" in c and mt == "nemotron_h":
        pattern = c.get("hybrid_override_pattern")
        if isinstance(pattern, str):
            bad = sorted(set(pattern) - set(_LETTERS))
            if bad:
                problems.append(f"hybrid_override_pattern has {L.show(''.join(bad))}: its letters are M (Mamba2), * "
                                f"(attention), - (MLP) and E (MoE); {_FIX}")
            kinds = tuple(_LETTERS.get(ch, NONE) for ch in pattern)
        elif pattern is not None:
            problems.append(f"hybrid_override_pattern={L.show(pattern)} is not a string of M, *, - and E: {_FIX}")
            kinds = ()
        else:
            kinds = _kinds_from_types(c.get("layers_block_type") or [], "layers_block_type", problems)
        heads, hd = ints("mamba_num_heads", limit=L.MAX_HEADS), ints("mamba_head_dim")
        ssm = c.get("mamba_ssm_cache_dtype")
        if ssm is not None and ssm != "auto" and str(ssm) not in _DTYPES:
            problems.append(f"mamba_ssm_cache_dtype={L.show(ssm)} is not one of auto, {', '.join(_DTYPES)}: {_FIX}")
        return HybridLayout(kinds=kinds, mixer="mamba2", conv_kernel=ints("conv_kernel", default=4, minimum=2),
                            intermediate=heads * hd, n_groups=ints("n_groups", default=1, limit=L.MAX_HEADS),
                            n_heads=heads, head_dim=hd, state_size=ints("ssm_state_size"),
                            ssm_dtype=_DTYPES.get(str(ssm), "fp16"))
    if mt == "jamba":
        period = ints("attn_layer_period", default=8, limit=L.MAX_LAYERS)
        offset = ints("attn_layer_offset", default=4, minimum=0, limit=L.MAX_LAYERS)
        if offset >= period:  # JambaConfig._check_supported_offset (transformers 5.24) refuses it too
            problems.append(f"attn_layer_offset={offset} must be smaller than attn_layer_period={period} (else no "
                            f"block is attention): {_FIX}")
        kinds = tuple(ATTENTION if i % period == offset else STATE for i in range(n))
        return HybridLayout(kinds=kinds, mixer="mamba1", conv_kernel=ints("mamba_d_conv", default=4, minimum=2),
                            intermediate=ints("mamba_expand", default=2, limit=L.MAX_HEADS) * hidden,
                            state_size=ints("mamba_d_state"))
    if mt == "falcon_h1":  # every block runs attention and Mamba2 side by side (FalconH1ParallelHybrid)
        d_ssm = c.get("mamba_d_ssm")
        expand = ints("mamba_expand", default=2, limit=L.MAX_HEADS)
        inner = ints("mamba_d_ssm") if d_ssm is not None else expand * hidden
        return HybridLayout(kinds=(BOTH,) * n, mixer="mamba2", conv_kernel=ints("mamba_d_conv", default=4, minimum=2),
                            intermediate=inner, n_groups=ints("mamba_n_groups", default=1, limit=L.MAX_HEADS),
                            n_heads=ints("mamba_n_heads", default=128, limit=L.MAX_HEADS),
                            head_dim=ints("mamba_d_head", default=64), state_size=ints("mamba_d_state", default=256))
    if mt == "lfm2" and "conv_L_cache" in c:  # short convolutions ("conv") beside full attention
        kinds = _kinds_from_types_or_indices(c, "full_attn_idxs", n, problems)
        return HybridLayout(kinds=kinds, mixer="short_conv", conv_kernel=ints("conv_L_cache", default=3, minimum=2),
                            intermediate=hidden)
    if any(k in c for k in _STATE_FIELDS) or mt in ("zamba", "zamba2", "lfm2", "mamba", "mamba2",
                                                    "falcon_mamba", "rwkv", "minimax", "kimi_linear"):
        raise UnsupportedHybrid(f"model_type {mt!r} keeps a recurrent (state-space or linear-attention) state whose "
                                "layout vramlens does not read (it reads qwen3_next, granitemoehybrid, bamba, "
                                "nemotron_h, jamba, falcon_h1 and lfm2)")
    return None


def _numel(shape: tuple[int, ...]) -> int:
    """Elements of a state ``shape``; 0 for a state not kept (``()``)."""
    return prod(shape) if shape else 0


#: The config fields each mixer's state is sized by (the first name is the one a message gives).
_NEEDED = {"gated_deltanet": (("k_heads", "linear_num_key_heads"), ("v_heads", "linear_num_value_heads"),
                              ("k_dim", "linear_key_head_dim"), ("v_dim", "linear_value_head_dim")),
           "mamba2": (("n_heads", "mamba_n_heads or mamba_num_heads"), ("head_dim", "mamba_d_head or mamba_head_dim"),
                      ("state_size", "mamba_d_state or ssm_state_size"), ("intermediate", "hidden_size")),
           "mamba1": (("intermediate", "hidden_size"), ("state_size", "mamba_d_state")),
           "short_conv": (("intermediate", "hidden_size"),)}


def _missing(h: HybridLayout, c: Mapping[str, Any]) -> list[str]:
    """The fields a state's size needs that the config does not give (a state of 0 bytes is no model's)."""
    return [f"{names} is missing: the {h.mixer} state of each block is sized by it; {_FIX}"
            for attr, names in _NEEDED[h.mixer] if getattr(h, attr) < 1]


def _uneven(h: HybridLayout) -> list[str]:
    """Head counts transformers' mixers cannot split (5.24: modeling_qwen3_next.py repeats each key head over
    num_v_heads // num_k_heads value heads; modeling_bamba.py and modeling_nemotron_h.py repeat B and C over
    num_heads // n_groups heads, ``repeat_interleave(..., output_size=num_heads)``)."""
    if h.mixer == "gated_deltanet" and h.v_heads % h.k_heads:
        return [f"linear_num_value_heads={h.v_heads} must be a multiple of linear_num_key_heads={h.k_heads} (each key "
                f"head serves the same number of value heads): {_FIX}"]
    if h.mixer == "mamba2" and h.n_heads % h.n_groups:
        return [f"{h.n_groups} Mamba2 groups (mamba_n_groups or n_groups) must divide its {h.n_heads} heads (each group's "
                f"B and C serve the same number of heads): {_FIX}"]
    return []


def _kinds_source(c: Mapping[str, Any], mt: str) -> str:
    """The config field the block kinds were read from, for a message."""
    for key in ("layer_types", "hybrid_override_pattern", "layers_block_type", "attn_layer_indices", "full_attn_idxs"):
        if c.get(key) is not None and not (key == "layer_types" and mt == "nemotron_h"):
            return key
    return "the config"


def _kinds_from_types_or_indices(c: Mapping[str, Any], indices: str, n: int, problems: list[str]) -> tuple[str, ...]:
    """Block kinds from ``layer_types`` where the config has it, else from the list of attention blocks' indices
    ``indices`` (Bamba / Granite 4.0-H ``attn_layer_indices``, LFM2's older ``full_attn_idxs``); the others keep a
    state. An index list that is not block indices in [0, n) is a problem."""
    if c.get("layer_types") is not None:
        return _kinds_from_types(c["layer_types"], "layer_types", problems)
    given = c.get(indices) or []
    if not isinstance(given, list) or not all(isinstance(i, int) and not isinstance(i, bool) and 0 <= i < n
                                              for i in given):
        problems.append(f"{indices}={L.show(given)} is not a list of block indices in [0, {n}): {_FIX}")
        given = []
    return tuple(ATTENTION if i in set(given) else STATE for i in range(n))


def _kinds_from_types(types: Any, field: str, problems: list[str]) -> tuple[str, ...]:
    """``layer_types`` / ``layers_block_type`` entries -> block kinds; an entry of no known type is a problem."""
    known = _TYPES_ATTENTION + _TYPES_STATE + _TYPES_NONE
    if not isinstance(types, list):
        problems.append(f"{field}={L.show(types)} is not a list of layer types: {_FIX}")
        return ()
    bad = sorted({L.show(t) for t in types if not isinstance(t, str) or t not in known})
    if bad:
        problems.append(f"{field} has {', '.join(bad[:3])}{' ...' if len(bad) > 3 else ''}, not a layer type "
                        f"({', '.join(known)}): {_FIX}")
        return ()
    return tuple(ATTENTION if t in _TYPES_ATTENTION else STATE if t in _TYPES_STATE else NONE for t in types)


__all__ = ["ATTENTION", "BOTH", "NONE", "STATE", "HybridLayout", "UnsupportedHybrid", "hybrid_layout"]
