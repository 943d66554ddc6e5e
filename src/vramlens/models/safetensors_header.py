"""Read safetensors headers (never the tensor data) and sharded checkpoint indexes.

The safetensors format (github.com/huggingface/safetensors, README "Format"): 8 bytes
little-endian u64 N, then N bytes of UTF-8 JSON ``{name: {"dtype", "shape",
"data_offsets"}, "__metadata__": {...}}``, then the data. Reading the header costs one
small read however large the file is. A sharded checkpoint has a
``*.safetensors.index.json`` whose ``weight_map`` maps tensor names to shard files.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from vramlens.errors import ModelSourceError

#: Largest header accepted: the format caps it at 100 MB (safetensors/src/tensor.rs
#: MAX_HEADER_SIZE = 100_000_000); anything larger is not a safetensors file.
MAX_HEADER_BYTES = 100_000_000

#: safetensors dtype names (safetensors/src/tensor.rs ``Dtype``) -> vramlens names. Unsigned
#: 16/32/64-bit integers have no vramlens name; they map to the signed type of the same
#: width, which is all the byte counts need.
SAFETENSORS_DTYPES: dict[str, str] = {
    "F64": "fp64", "F32": "fp32", "F16": "fp16", "BF16": "bf16",
    "F8_E4M3": "fp8", "F8_E5M2": "fp8", "F8_E4M3FN": "fp8", "F8_E8M0": "uint8",
    "I64": "int64", "I32": "int32", "I16": "int16", "I8": "int8",
    "U64": "int64", "U32": "int32", "U16": "int16", "U8": "uint8", "BOOL": "bool",
}


def read_safetensors_header(path: str | os.PathLike) -> dict[str, Any]:
    """The JSON header of a safetensors file, read without touching the tensor data.

    Args:
        path: a ``.safetensors`` file.

    Returns:
        The header dict: tensor name -> ``{"dtype", "shape", "data_offsets"}``, plus
        ``"__metadata__"`` when the file has one.

    Raises:
        ModelSourceError: the file cannot be read or is not a safetensors file.
    """
    p = Path(path)
    try:
        size = p.stat().st_size
        with p.open("rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise ModelSourceError(f"{p}: not a safetensors file (shorter than its 8-byte header length)")
            n = int.from_bytes(head, "little")
            if n > MAX_HEADER_BYTES or n > size - 8:
                raise ModelSourceError(
                    f"{p}: not a safetensors file (header length {n} exceeds the file or the 100 MB limit)"
                )
            raw = f.read(n)
    except OSError as e:
        raise ModelSourceError(f"{p}: cannot read safetensors header: {e.strerror or e}") from e
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ModelSourceError(f"{p}: safetensors header is not valid JSON: {e}") from e
    if not isinstance(header, dict):
        raise ModelSourceError(f"{p}: safetensors header must be a JSON object, not {type(header).__name__}")
    return header


def header_tensors(header: dict[str, Any], where: str) -> Iterator[tuple[str, str, tuple[int, ...]]]:
    """(name, vramlens dtype, shape) for each tensor of a header, in the header's order.

    Raises:
        ModelSourceError: a tensor entry lacks a known dtype or an integer shape.
    """
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if not isinstance(info, dict):
            raise ModelSourceError(f"{where}: tensor {name!r} must map to an object with dtype and shape")
        st_dtype, shape = info.get("dtype"), info.get("shape")
        if st_dtype not in SAFETENSORS_DTYPES:
            raise ModelSourceError(
                f"{where}: tensor {name!r} has dtype {st_dtype!r}, which vramlens does not know: "
                f"known are {', '.join(SAFETENSORS_DTYPES)}"
            )
        if not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
            raise ModelSourceError(f"{where}: tensor {name!r} has shape {shape!r}: must be a list of integers")
        yield name, SAFETENSORS_DTYPES[st_dtype], tuple(shape)


def read_index(path: str | os.PathLike) -> dict[str, str]:
    """The ``weight_map`` (tensor name -> shard file name) of a sharded checkpoint index.

    Raises:
        ModelSourceError: the index cannot be read or has no usable ``weight_map``.
    """
    p = Path(path)
    data = read_json(p)
    wm = data.get("weight_map")
    if not isinstance(wm, dict) or not all(isinstance(v, str) for v in wm.values()):
        raise ModelSourceError(f"{p}: missing field 'weight_map' (tensor name -> shard file name)")
    return wm


def checkpoint_tensors(folder: str | os.PathLike) -> list[tuple[str, str, tuple[int, ...]]] | None:
    """(name, dtype, shape) of every tensor of the safetensors checkpoint in ``folder``.

    Looks for ``*.safetensors.index.json`` (sharded) first, then ``model.safetensors``,
    then any other ``*.safetensors`` files except LoRA adapters. Returns None when the
    folder holds no safetensors checkpoint.

    Raises:
        ModelSourceError: an index names a missing shard, or a header is unreadable.
    """
    d = Path(folder)
    indexes = sorted(d.glob("*.safetensors.index.json"))
    if indexes:
        index = indexes[0]
        weight_map = read_index(index)
        shards = list(dict.fromkeys(weight_map.values()))
        out = []
        for shard in shards:
            sp = d / shard
            if not sp.is_file():
                raise ModelSourceError(f"{index}: shard {shard!r} listed in weight_map is not in {d}")
            out.extend(header_tensors(read_safetensors_header(sp), str(sp)))
        return out
    files = [d / "model.safetensors"] if (d / "model.safetensors").is_file() else sorted(
        f for f in d.glob("*.safetensors") if not f.name.startswith("adapter_")
    )
    if not files:
        return None
    out = []
    for f in files:
        out.extend(header_tensors(read_safetensors_header(f), str(f)))
    return out


def read_json(path: Path) -> dict[str, Any]:
    """A JSON object from a file, with errors that name the file.

    Raises:
        ModelSourceError: unreadable, not JSON, or not an object.
    """
    try:
        text = path.read_text("utf-8")
    except OSError as e:
        raise ModelSourceError(f"{path}: cannot read: {e.strerror or e}") from e
    except UnicodeDecodeError as e:
        raise ModelSourceError(f"{path}: not UTF-8 text: {e}") from e
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ModelSourceError(f"{path}: not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})") from e
    if not isinstance(data, dict):
        raise ModelSourceError(f"{path}: must hold a JSON object, not {type(data).__name__}")
    return data
