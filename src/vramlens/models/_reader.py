"""Read the fields of a config.json dict the way transformers would, collecting problems.

A config.json written by ``save_pretrained`` holds only the fields that differ from the
config class's defaults (and often a few more), so a missing field means "the transformers
default" (:mod:`vramlens.models.defaults`). The essential dimensions (hidden size, layers,
heads, vocabulary, MLP size) have no safe default: a config without them is broken, and
the reader says so instead of silently building a 4096-wide model.

Every problem is collected before raising, so that one message names all of them
(torchtune's ConfigError habit).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from vramlens.errors import ModelSourceError
from vramlens.limits import (
    MAX_EXPERTS,
    MAX_HEADS,
    MAX_HIDDEN,
    MAX_INTERMEDIATE,
    MAX_LAYERS,
    MAX_POSITIONS,
    MAX_VOCAB,
    show,
)
from vramlens.models.defaults import ATTRIBUTE_MAPS, DEFAULTS, LEGACY_ALIASES

_REQUIRED = object()

#: The bound of every integer field the family builders read (vramlens.limits gives the
#: margins). A bound is checked where the field is read, before anything is built from it,
#: so that ``num_hidden_layers: 10**9`` is refused at once instead of building a billion blocks.
FIELD_LIMITS: dict[str, int] = {
    **dict.fromkeys(("num_hidden_layers", "n_layer", "num_layers", "num_decoder_layers",
                     "decoder_sparse_step", "num_ln_in_parallel_attn", "max_window_layers",
                     "sliding_window_pattern", "first_k_dense_replace"), MAX_LAYERS),
    **dict.fromkeys(("hidden_size", "n_embd", "d_model", "word_embed_proj_dim", "head_dim", "d_kv",
                     "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"),
                    MAX_HIDDEN),
    **dict.fromkeys(("intermediate_size", "ffn_dim", "n_inner", "d_ff", "moe_intermediate_size",
                     "shared_expert_intermediate_size", "ffn_hidden_size"), MAX_INTERMEDIATE),
    **dict.fromkeys(("num_attention_heads", "n_head", "num_heads", "num_key_value_heads", "num_kv_heads"),
                    MAX_HEADS),
    **dict.fromkeys(("vocab_size", "type_vocab_size"), MAX_VOCAB),
    **dict.fromkeys(("num_experts", "num_local_experts", "num_experts_per_tok", "n_routed_experts",
                     "n_shared_experts"), MAX_EXPERTS),
    **dict.fromkeys(("max_position_embeddings", "n_positions", "seq_length", "sliding_window",
                     "relative_attention_num_buckets", "relative_attention_max_distance"), MAX_POSITIONS),
}
#: Any other integer field: the widest per-layer bound.
DEFAULT_LIMIT = MAX_INTERMEDIATE


def _finite(value: int | float) -> bool:
    """False for NaN and infinities; ints are always finite (math.isfinite(10**400) overflows)."""
    return isinstance(value, int) or math.isfinite(value)


class ConfigReader:
    """Typed access to one config dict, with transformers' defaults for ``model_type``.

    Args:
        raw: the parsed config.json.
        model_type: whose defaults apply (``"llama"``); unknown types have none.
        where: how to name the config in messages (a path, a catalog id, ``"config"``).
    """

    def __init__(self, raw: Mapping[str, Any], model_type: str, where: str):
        self.raw = raw
        self.model_type = model_type
        self.where = where
        self.defaults: Mapping[str, Any] = DEFAULTS.get(model_type, {})
        # config.json may use either side of the config class's attribute_map
        # (gpt2 accepts hidden_size for n_embd), so look a field up under both names.
        self._aliases: dict[str, list[str]] = {}
        maps = {**ATTRIBUTE_MAPS.get(model_type, {}), **LEGACY_ALIASES.get(model_type, {})}
        for alias, field in maps.items():
            self._aliases.setdefault(field, []).append(alias)
            self._aliases.setdefault(alias, []).append(field)
        self.problems: list[str] = []
        self.assumed: list[str] = []
        self.bad: set[str] = set()  # fields already reported, so that rules on them stay quiet

    # ---- raw access -----------------------------------------------------------------------
    def has(self, key: str) -> bool:
        """True when the config gives ``key`` (or an alias of it) a non-null value."""
        return self._lookup(key) is not None

    def _lookup(self, key: str) -> Any:
        for name in (key, *self._aliases.get(key, ())):
            value = self.raw.get(name)
            if value is not None:
                return value
        return None

    def _value(self, key: str, default: Any) -> Any:
        value = self._lookup(key)
        if value is not None:
            return value
        if key in self.defaults:
            return self.defaults[key]
        if default is _REQUIRED:
            self.problems.append(f"missing field {key!r} ({self.model_type} configs need it)")
            self.bad.add(key)
            return None
        return default

    # ---- typed access ---------------------------------------------------------------------
    def get_int(self, key: str, default: Any = _REQUIRED, *, minimum: int = 1) -> int:
        """A whole number in [``minimum``, the field's bound]; a bad or missing value is recorded
        and 1 returned.

        The bound is :data:`FIELD_LIMITS` (``DEFAULT_LIMIT`` for other fields)."""
        value = self._value(key, default)
        if value is None:
            return max(minimum, 1) if default is _REQUIRED else default
        if isinstance(value, float) and math.isfinite(value) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            self.problems.append(f"{key}={show(value)} must be an integer")
            self.bad.add(key)
            return max(minimum, 1)
        if value < minimum:
            self.problems.append(f"{key}={show(value)} must be >= {minimum}")
            self.bad.add(key)
            return max(minimum, 1)
        limit = FIELD_LIMITS.get(key, DEFAULT_LIMIT)
        if value > limit:
            self.problems.append(f"{key}={show(value)} is over the limit of {limit:,}: "
                                 f"no real model comes close; fix the config")
            self.bad.add(key)
            return max(minimum, 1)
        return value

    def opt_int(self, key: str, *, minimum: int = 1) -> int | None:
        """Like :meth:`get_int`, but a missing or null field (and a null default) gives None.

        A field written as null is None even where the class default is not: transformers
        keeps an explicit ``"sliding_window": null`` (Mistral-7B-Instruct-v0.2: no window)."""
        if any(name in self.raw and self.raw[name] is None for name in (key, *self._aliases.get(key, ()))):
            return None
        if self._value(key, None) is None:
            return None
        return self.get_int(key, minimum=minimum)

    def get_bool(self, key: str, default: Any = _REQUIRED) -> bool:
        value = self._value(key, default)
        if value is None:
            return False
        if not isinstance(value, bool):
            self.problems.append(f"{key}={show(value)} must be true or false")
            return False
        return value

    def get_str(self, key: str, default: Any = _REQUIRED) -> str:
        value = self._value(key, default)
        if value is None:
            return ""
        if not isinstance(value, str):
            self.problems.append(f"{key}={show(value)} must be a string")
            return ""
        return value

    def get_float(self, key: str, default: Any = _REQUIRED) -> float:
        value = self._value(key, default)
        if value is None:
            return 0.0
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not _finite(value):
            self.problems.append(f"{key}={show(value)} must be a finite number")
            return 0.0
        return float(value)

    def fraction(self, key: str, value: Any = None) -> float:
        """``key`` as a number in (0, 1] (or ``value``, found by the caller in a section);
        anything else is recorded and 1.0 returned."""
        if value is None:
            value = self._lookup(key)
        if (isinstance(value, bool) or not isinstance(value, (int, float)) or not _finite(value)
                or not 0 < value <= 1):
            self.problems.append(f"{key}={show(value)} must be a number in (0, 1]")
            self.bad.add(key)
            return 1.0
        return float(value)

    def list_int(self, key: str, *, limit: int = MAX_LAYERS) -> list[int]:
        """A list of at most ``limit`` integers, each in [0, limit] (layer indices)."""
        value = self._value(key, [])
        if value is None:
            return []
        if (not isinstance(value, list) or len(value) > limit
                or not all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= limit for v in value)):
            self.problems.append(f"{key}={show(value)} must be a list of at most {limit:,} integers "
                                 f"in [0, {limit:,}]")
            return []
        return value

    # ---- rules ----------------------------------------------------------------------------
    def divisible(self, a_key: str, a: int, b_key: str, b: int, fix: str = "fix the config") -> None:
        """Record ``a_key=a is not divisible by b_key=b`` when b does not divide a."""
        if a_key in self.bad or b_key in self.bad:
            return
        if b > 0 and a % b:
            self.problems.append(f"{a_key}={a} is not divisible by {b_key}={b}: {fix}")

    def problem(self, text: str) -> None:
        self.problems.append(text)

    def assume(self, text: str) -> None:
        self.assumed.append(text)

    def check(self) -> None:
        """Raise one ModelSourceError naming every problem found so far.

        Raises:
            ModelSourceError: at least one problem was recorded.
        """
        if self.problems:
            raise ModelSourceError(f"{self.where}: " + "; ".join(dict.fromkeys(self.problems)))
