"""One exception hierarchy for vramlens.

::

    VramlensError                 every error vramlens raises on purpose
    ├── InputError                a value the user gave is wrong (CLI exit code 2)
    │   ├── ConfigError           several problems found at once in a workload or config
    │   ├── UnknownModelError     a model name not in the catalog (lists the closest names)
    │   ├── UnknownGPUError       a GPU name not in the catalog
    │   ├── ModelSourceError      a config.json / folder / checkpoint header that cannot be read
    │   │   └── UnmodelledModelError  a model_type with no analytic family and no generic fields (carries the config)
    │   └── EngineRefusal         a serving engine would refuse to start (vramlens capacity)
    ├── OfflineError              the Hugging Face hub is needed but cannot be reached
    ├── SnapshotError             a memory snapshot file that is not one, or is hostile
    ├── TraceError                a model that cannot be traced (names the module and op)
    └── MissingExtraError         an optional dependency is not installed (names the extra)

Messages name the bad value, the rule, and the fix, on one line.
"""

from __future__ import annotations

from typing import Any


class VramlensError(Exception):
    """Base class of every error vramlens raises on purpose."""


class InputError(VramlensError, ValueError):
    """A value given by the user is wrong."""


class ConfigError(InputError):
    """Several problems with one configuration, collected before raising."""

    def __init__(self, problems: list[str] | str):
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        super().__init__("; ".join(self.problems))


class UnknownModelError(InputError):
    """A model name that is neither in the catalog, a local path, nor a hub id."""


class UnknownGPUError(InputError):
    """A GPU name that is not in the catalog (and is not a size)."""


class ModelSourceError(InputError):
    """A config.json, model folder, or checkpoint header that cannot be used."""


class UnmodelledModelError(ModelSourceError):
    """A ``model_type`` vramlens has no family for, whose config cannot be built as a generic decoder.

    ``model_type`` and ``config`` travel with it, so a caller with the ``trace`` extra can trace the
    real transformers model instead (:mod:`vramlens.fallback`).
    """

    def __init__(self, message: str, *, model_type: str, config: dict[str, Any]):
        self.model_type = model_type
        self.config = config
        super().__init__(message)


class EngineRefusal(InputError):
    """Settings a serving engine would refuse at start-up; the message gives the engine's reason."""


class OfflineError(VramlensError):
    """The Hugging Face hub is needed but is not reachable and nothing is cached."""


class SnapshotError(VramlensError):
    """A memory snapshot that cannot be read safely."""


class TraceError(VramlensError):
    """A model that cannot be traced; the message names the module, the op and an alternative."""


class MissingExtraError(VramlensError, ImportError):
    """An optional dependency is missing; the message names the extra to install."""

    def __init__(self, package: str, extra: str, *, why: str = ""):
        self.package = package
        self.extra = extra
        super().__init__(f"{why}{package} is not installed: pip install 'vramlens[{extra}]'")
