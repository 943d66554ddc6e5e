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

from collections.abc import Mapping
from typing import Any

from vramlens.errors import ModelSourceError
from vramlens.models.defaults import ATTRIBUTE_MAPS, DEFAULTS, LEGACY_ALIASES

_REQUIRED = object()


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
    def int(self, key: str, default: Any = _REQUIRED, *, minimum: int = 1) -> int:
        """A whole number >= ``minimum``; a bad or missing value is recorded and 1 returned."""
        value = self._value(key, default)
        if value is None:
            return max(minimum, 1) if default is _REQUIRED else default
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            self.problems.append(f"{key}={value!r} must be an integer")
            self.bad.add(key)
            return max(minimum, 1)
        if value < minimum:
            self.problems.append(f"{key}={value} must be >= {minimum}")
            self.bad.add(key)
            return max(minimum, 1)
        return value

    def opt_int(self, key: str, *, minimum: int = 1) -> int | None:
        """Like :meth:`int`, but a missing or null field (and a null default) gives None."""
        if self._value(key, None) is None:
            return None
        return self.int(key, minimum=minimum)

    def bool(self, key: str, default: Any = _REQUIRED) -> bool:
        value = self._value(key, default)
        if value is None:
            return False
        if not isinstance(value, bool):
            self.problems.append(f"{key}={value!r} must be true or false")
            return False
        return value

    def str(self, key: str, default: Any = _REQUIRED) -> str:
        value = self._value(key, default)
        if value is None:
            return ""
        if not isinstance(value, str):
            self.problems.append(f"{key}={value!r} must be a string")
            return ""
        return value

    def float(self, key: str, default: Any = _REQUIRED) -> float:
        value = self._value(key, default)
        if value is None:
            return 0.0
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            self.problems.append(f"{key}={value!r} must be a number")
            return 0.0
        return float(value)

    def list_int(self, key: str) -> list[int]:
        value = self._value(key, [])
        if value is None:
            return []
        if not isinstance(value, list) or not all(isinstance(v, int) for v in value):
            self.problems.append(f"{key}={value!r} must be a list of integers")
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
