"""Serving capacity: what vLLM, SGLang, llama.cpp and transformers do with a GPU's memory.

Each engine module follows the engine's own start-up arithmetic (named in its docstring, with
the version) and returns a frozen :class:`Capacity` in the engine's own terms.

>>> cap = capacity("llama-2-7b", engine="vllm", gpu="A100-80GB")
>>> cap.figure("num_gpu_blocks") > 0
True
"""

from vramlens.capacity.api import ENGINES, SETTINGS, capacity, check_settings, resolve_model
from vramlens.capacity.common import ServedModel, served_from_gguf, served_from_spec
from vramlens.capacity.result import Capacity, DeviceBuffers, EngineFigure

__all__ = [
    "Capacity", "DeviceBuffers", "ENGINES", "EngineFigure", "SETTINGS", "ServedModel", "capacity",
    "check_settings", "resolve_model", "served_from_gguf", "served_from_spec",
]


def _make_callable() -> None:
    """``vramlens.capacity(...)`` is the function and ``vramlens.capacity`` the package: importing the
    package makes the name the module (the clash DESIGN.md warns of), so the module calls the
    function. Module ``__class__`` assignment is supported since Python 3.5."""
    import sys
    import types

    class _CallableModule(types.ModuleType):
        def __call__(self, *args, **kwargs):
            return capacity(*args, **kwargs)

    sys.modules[__name__].__class__ = _CallableModule


_make_callable()
