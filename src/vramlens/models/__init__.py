"""Where a model comes from: catalog, config.json, model folder, hub id, or a size.

Everything turns into a :class:`ModelSpec` whose ``tensors`` list, name for name and shape
for shape, what transformers' ``model.named_parameters()`` and ``named_buffers()`` give for
the class in ``architectures[0]``. No torch, no transformers: see DESIGN.md.

>>> spec = load_model("llama-2-7b")
>>> spec.params
6738415616
"""

from __future__ import annotations

from vramlens.models.catalog import CatalogEntry, list_catalog
from vramlens.models.generic import generic_spec
from vramlens.models.inventory import SUPPORTED_MODEL_TYPES, spec_from_config
from vramlens.models.loaders import load_model
from vramlens.models.peft_targets import (
    delta_linears,
    lokr_shapes,
    oft_block,
    peft_delta_numels,
    peft_method_problem,
    peft_vector_numels,
)
from vramlens.models.safetensors_header import read_safetensors_header
from vramlens.models.spec import ModelSpec, TensorInfo

__all__ = [
    "CatalogEntry",
    "ModelSpec",
    "SUPPORTED_MODEL_TYPES",
    "TensorInfo",
    "delta_linears",
    "generic_spec",
    "list_catalog",
    "load_model",
    "lokr_shapes",
    "oft_block",
    "peft_delta_numels",
    "peft_method_problem",
    "peft_vector_numels",
    "read_safetensors_header",
    "spec_from_config",
]
