"""Read safetensors headers (never the tensor data) and sharded checkpoint indexes.

The safetensors format (github.com/huggingface/safetensors, README "Format"): 8 bytes
little-endian u64 N, then N bytes of UTF-8 JSON ``{name: {"dtype", "shape",
"data_offsets"}, "__metadata__": {...}}``, then the data. Reading the header costs one
small read however large the file is. A sharded checkpoint has a
``*.safetensors.index.json`` whose ``weight_map`` maps tensor names to shard files.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from vramlens.errors import ModelSourceError
from vramlens.limits import (
    MAX_CONFIG_BYTES,
    MAX_SAFETENSORS_HEADER,
    MAX_SHARDS,
    MAX_TENSOR_NUMEL,
    MAX_TENSORS,
    show,
)
from vramlens.models._files import loads_bounded, open_regular, read_json_object

#: Largest header accepted: the format caps it at 100 MB (safetensors/src/tensor.rs
#: MAX_HEADER_SIZE = 100_000_000); anything larger is not a safetensors file.
MAX_HEADER_BYTES = MAX_SAFETENSORS_HEADER

#: safetensors dtype names (safetensors/src/tensor.rs ``Dtype``) -> vramlens names. Unsigned
#: 16/32/64-bit integers have no vramlens name; they map to the signed type of the same
#: width, which is all the byte counts need.
SAFETENSORS_DTYPES: dict[str, str] = {
    "F64": "fp64", "F32": "fp32", "F16": "fp16", "BF16": "bf16",
    "F8_E4M3": "fp8", "F8_E5M2": "fp8", "F8_E4M3FN": "fp8", "F8_E8M0": "uint8",
    "I64": "int64", "I32": "int32", "I16": "int16", "I8": "int8",
    "U64": "int64", "U32": "int32", "U16": "int16", "U8": "uint8", "BOOL": "bool",
}
#: Bytes per element of each safetensors dtype (safetensors/src/tensor.rs ``Dtype::size``).
SAFETENSORS_BYTES: dict[str, int] = {
    "F64": 8, "F32": 4, "F16": 2, "BF16": 2, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E4M3FN": 1, "F8_E8M0": 1,
    "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U64": 8, "U32": 4, "U16": 2, "U8": 1, "BOOL": 1,
}


def read_safetensors_header(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The JSON header of a safetensors file, read without touching the tensor data.

    Args:
        path: a ``.safetensors`` file.

    Returns:
        The header dict: tensor name -> ``{"dtype", "shape", "data_offsets"}``, plus
        ``"__metadata__"`` when the file has one.

    Raises:
        ModelSourceError: the file cannot be read or is not a safetensors file.
    """
    return _read_header(Path(path))[0]


def _read_header(p: Path) -> tuple[dict[str, Any], int]:
    """The header and the number of data bytes after it (what data_offsets may address)."""
    with open_regular(p) as f:
        try:
            size = os.fstat(f.fileno()).st_size
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
    header = loads_bounded(raw, str(p), "safetensors header", subject="safetensors header is ")
    if not isinstance(header, dict):
        raise ModelSourceError(f"{p}: safetensors header must be a JSON object, not {type(header).__name__}")
    if len(header) > MAX_TENSORS + 1:
        raise ModelSourceError(f"{p}: safetensors header lists {len(header):,} tensors, over the limit of "
                               f"{MAX_TENSORS:,}: this is not a model checkpoint")
    return header, size - 8 - n


def header_tensors(header: dict[str, Any], where: str,
                   data_bytes: int | None = None) -> Iterator[tuple[str, str, tuple[int, ...]]]:
    """(name, vramlens dtype, shape) for each tensor of a header, in the header's order.

    Each entry must be ``{"dtype": known name, "shape": [non-negative ints],
    "data_offsets": [begin, end]}`` with ``end - begin`` the tensor's bytes, inside the data
    (``data_bytes``, when the header came from a file); no tensor may exceed MAX_TENSOR_NUMEL elements.

    Raises:
        ModelSourceError: an entry that breaks one of these rules; the message names it.
    """
    for name, info in header.items():
        if name == "__metadata__":
            continue
        label = show(name)
        if not isinstance(info, dict):
            raise ModelSourceError(f"{where}: tensor {label} maps to {show(info)}: it must map to an object "
                                   f"with dtype, shape and data_offsets")
        st_dtype, shape = info.get("dtype"), info.get("shape")
        if not isinstance(st_dtype, str) or st_dtype not in SAFETENSORS_DTYPES:
            raise ModelSourceError(
                f"{where}: tensor {label} has dtype {show(st_dtype)}, which vramlens does not know: "
                f"known are {', '.join(SAFETENSORS_DTYPES)}"
            )
        if not isinstance(shape, list) or not all(
            isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape
        ):
            raise ModelSourceError(f"{where}: tensor {label} has shape {show(shape)}: "
                                   f"must be a list of non-negative integers")
        numel = 1
        for d in shape:
            numel *= d
            if numel > MAX_TENSOR_NUMEL:
                break
        if numel > MAX_TENSOR_NUMEL:
            raise ModelSourceError(f"{where}: tensor {label} has shape {show(shape)}, over the limit of "
                                   f"{MAX_TENSOR_NUMEL:,} elements: this is not a real tensor")
        _check_offsets(info.get("data_offsets"), numel * SAFETENSORS_BYTES[st_dtype], data_bytes, where, label)
        yield name, SAFETENSORS_DTYPES[st_dtype], tuple(shape)


def _check_offsets(offsets: Any, nbytes: int, data_bytes: int | None, where: str, label: str) -> None:
    """data_offsets [begin, end]: begin <= end, end - begin = the tensor's bytes, end within the data.

    Headers without offsets (the hub's metadata API returns none) are not checked.
    """
    if offsets is None and data_bytes is None:
        return
    if (not isinstance(offsets, list) or len(offsets) != 2
            or not all(isinstance(o, int) and not isinstance(o, bool) and o >= 0 for o in offsets)):
        raise ModelSourceError(f"{where}: tensor {label} has data_offsets {show(offsets)}: "
                               f"must be [begin, end], two non-negative integers")
    begin, end = offsets
    if end - begin != nbytes:
        raise ModelSourceError(f"{where}: tensor {label} has data_offsets {show(offsets)}, {end - begin:,} bytes, "
                               f"but its dtype and shape need {nbytes:,}: the header is inconsistent")
    if data_bytes is not None and end > data_bytes:
        raise ModelSourceError(f"{where}: tensor {label} has data_offsets {show(offsets)} past the end of "
                               f"the file's {data_bytes:,} data bytes: the file is truncated or corrupt")


def read_index(path: str | os.PathLike[str]) -> dict[str, str]:
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


def checkpoint_tensors(folder: str | os.PathLike[str]) -> list[tuple[str, str, tuple[int, ...]]] | None:
    """(name, dtype, shape) of every tensor of the safetensors checkpoint in ``folder``.

    Looks for ``*.safetensors.index.json`` (sharded) first, then ``model.safetensors``,
    then any other ``*.safetensors`` files except LoRA adapters. Returns None when the
    folder holds no safetensors checkpoint.

    Raises:
        ModelSourceError: an index names a missing shard, or a header is unreadable.
    """
    d = Path(folder)
    indexes = sorted(d.glob("*.safetensors.index.json"))
    out: list[tuple[str, str, tuple[int, ...]]] = []
    if indexes:
        index = indexes[0]
        weight_map = read_index(index)
        shards = list(dict.fromkeys(weight_map.values()))
        if len(shards) > MAX_SHARDS:
            raise ModelSourceError(f"{index}: weight_map names {len(shards):,} shard files, over the limit of "
                                   f"{MAX_SHARDS:,}")
        files = [_shard_path(d, shard, index) for shard in shards]
    else:
        files = [d / "model.safetensors"] if (d / "model.safetensors").is_file() else sorted(
            f for f in d.glob("*.safetensors") if not f.name.startswith("adapter_")
        )
        if not files:
            return None
        if len(files) > MAX_SHARDS:
            raise ModelSourceError(f"{d}: holds {len(files):,} safetensors files, over the limit of {MAX_SHARDS:,}")
    for f in files:
        header, data_bytes = _read_header(f)
        out.extend(header_tensors(header, str(f), data_bytes))
        if len(out) > MAX_TENSORS:
            raise ModelSourceError(f"{d}: the checkpoint holds over {MAX_TENSORS:,} tensors, the limit: "
                                   f"this is not a model checkpoint")
    return out


def _shard_path(folder: Path, shard: str, index: Path) -> Path:
    """The file of a shard named in an index, which must be a regular file inside ``folder``.

    Raises:
        ModelSourceError: the name leaves the folder (``..``, an absolute path, a symlink
            pointing out) or the file is missing.
    """
    root = folder.resolve()
    try:
        target = (folder / shard).resolve()
    except (OSError, RuntimeError, ValueError) as e:  # a symlink loop, a NUL byte
        raise ModelSourceError(f"{index}: shard {show(shard)} cannot be resolved ({e}): "
                               f"name a file in {folder}") from None
    if not target.is_relative_to(root):
        raise ModelSourceError(f"{index}: shard {show(shard)} is outside the model folder {folder}: "
                               f"an index may only name files in its own folder")
    if not target.is_file():
        raise ModelSourceError(f"{index}: shard {show(shard)} listed in weight_map is not in {folder}")
    return target


def read_json(path: Path) -> dict[str, Any]:
    """A JSON object from a file, with errors that name the file.

    Only a regular file of at most MAX_CONFIG_BYTES is read, and its JSON must keep to the
    bounds of :mod:`vramlens.limits` (nesting, integer digits, finite numbers).

    Raises:
        ModelSourceError: unreadable, too large, not JSON, or not an object.
    """
    return read_json_object(Path(path), limit=MAX_CONFIG_BYTES, what=Path(path).name or "JSON file")
