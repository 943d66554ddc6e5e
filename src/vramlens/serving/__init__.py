"""Serving capacity: what vLLM, SGLang, llama.cpp and transformers do with a GPU's memory.

Each engine module follows the engine's own start-up arithmetic (named in its docstring, with
the version) and returns a frozen :class:`Capacity` in the engine's own terms.

>>> cap = capacity("llama-2-7b", engine="vllm", gpu="A100-80GB")
>>> cap.figure("num_gpu_blocks") > 0
True
"""

from vramlens.serving.api import (
    ENGINES,
    SETTINGS,
    capacity,
    check_settings,
    resolve_model,
    speculative_config,
)
from vramlens.serving.common import ServedModel, served_from_gguf, served_from_spec
from vramlens.serving.plan import CapacityPlan, ServingPlan, plan_capacity
from vramlens.serving.result import Capacity, DeviceBuffers, EngineFigure

__all__ = [
    "Capacity", "CapacityPlan", "DeviceBuffers", "ENGINES", "EngineFigure", "SETTINGS", "ServedModel", "ServingPlan",
    "capacity", "check_settings", "plan_capacity", "resolve_model", "served_from_gguf", "served_from_spec",
    "speculative_config",
]

