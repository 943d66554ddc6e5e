"""Write tests/corpus/models/: bad model files that `vramlens estimate` must refuse in one line.

Deterministic (no randomness, sorted names): rerun it after changing the readers and commit
the output. Two kinds of cases:

- ``config/<base>--<field>--<variant>.json``: a real catalog config (tiny or small models of
  every family) with one integer field the family builder reads replaced by a bad value:
  huge (10x its bound), negative, zero, NaN, Infinity, a string, a nested object, a list,
  10**400, 1e400, a fraction, a boolean. Fields the builder does not read for that config
  (qwen2's sliding_window without use_sliding_window) are accepted, so they are left out:
  the script keeps only cases that load_model refuses, and says how many it dropped.
- ``safetensors/<case>/``: tiny-llama's config.json beside a ``model.safetensors`` (or an
  index) whose header is mutated: nested entries, bad dtypes, shapes and offsets, lengths
  past the file, invalid or hostile JSON, shards outside the folder.

Usage: python scripts/make_model_corpus.py [--out tests/corpus/models]
"""

from __future__ import annotations

import argparse
import json
import shutil
import struct
import sys
from pathlib import Path

from vramlens.errors import VramlensError
from vramlens.models import load_model
from vramlens.models._reader import DEFAULT_LIMIT, FIELD_LIMITS
from vramlens.models.catalog import find_config

#: Catalog configs the config cases start from: one per family, small where one exists.
BASES = ("tiny-llama", "tiny-gpt2", "tiny-mixtral", "tiny-t5", "bert-base-uncased", "opt-125m",
         "qwen1.5-moe", "falcon-7b")

#: variant name -> JSON text of the bad value (OVER: 10x the field's bound).
VARIANTS = {
    "huge": "OVER",
    "negative": "-1",
    "zero": "0",
    "nan": "NaN",
    "infinity": "Infinity",
    "string": '"4096"',
    "nested": '{"value": {"value": 4096}}',
    "list": "[4096, 4096]",
    "pow400": "1" + "0" * 400,
    "float1e400": "1e400",
    "fraction": "2.5",
    "bool": "true",
}


def config_cases(out: Path) -> tuple[int, int]:
    kept = dropped = 0
    for base in BASES:
        _, config = find_config(base)
        fields = sorted(k for k, v in config.items() if k in FIELD_LIMITS and isinstance(v, int))
        for field in fields:
            for variant, text in VARIANTS.items():
                value = text.replace("OVER", str(FIELD_LIMITS.get(field, DEFAULT_LIMIT) * 10))
                body = json.dumps({**config, field: "@@"}).replace('"@@"', value)
                path = out / "config" / f"{base}--{field}--{variant}.json"
                path.write_text(body + "\n")
                if refused(path):
                    kept += 1
                else:
                    path.unlink()
                    dropped += 1
                    print(f"accepted, left out: {path.name}")
    return kept, dropped


OK = {"dtype": "BF16", "shape": [1000, 256], "data_offsets": [0, 512_000]}
NAME = "model.embed_tokens.weight"


def header_bytes(header: object) -> bytes:
    return header if isinstance(header, bytes) else json.dumps(header).encode()


def safetensors(header: object, data_len: int = 512_000, length: int | None = None) -> bytes:
    raw = header_bytes(header)
    # the data is never read: a short file with a consistent size is enough for most cases
    return struct.pack("<Q", len(raw) if length is None else length) + raw + b"\0" * min(data_len, 64)


#: case -> header (dict, or raw bytes) of model.safetensors, or ("index", weight_map).
SAFETENSORS_CASES: dict[str, object] = {
    "entry-nested-object": {NAME: {"dtype": {"dtype": "BF16"}, "shape": [1000, 256]}},
    "entry-is-a-list": {NAME: [1000, 256]},
    "entry-is-a-string": {NAME: "BF16"},
    "entry-is-null": {NAME: None},
    "dtype-dict": {NAME: {**OK, "dtype": {"a": 1}}},
    "dtype-list": {NAME: {**OK, "dtype": ["BF16"]}},
    "dtype-int": {NAME: {**OK, "dtype": 16}},
    "dtype-null": {NAME: {**OK, "dtype": None}},
    "dtype-unknown": {NAME: {**OK, "dtype": "F128"}},
    "dtype-lowercase": {NAME: {**OK, "dtype": "bf16"}},
    "shape-string": {NAME: {**OK, "shape": "1000x256"}},
    "shape-negative": {NAME: {**OK, "shape": [-1000, 256]}},
    "shape-bool": {NAME: {**OK, "shape": [True, 256]}},
    "shape-nested": {NAME: {**OK, "shape": [[1000], [256]]}},
    "shape-float": {NAME: {**OK, "shape": [1000.5, 256]}},
    "shape-null": {NAME: {**OK, "shape": None}},
    "shape-numel-1e24": {NAME: {**OK, "shape": [10**12, 10**12]}},
    "shape-numel-2e45": {NAME: {**OK, "shape": [2**23, 2**23]}},
    "shape-many-dims": {NAME: {**OK, "shape": [2] * 60}},
    "offsets-missing": {NAME: {"dtype": "BF16", "shape": [1000, 256]}},
    "offsets-three": {NAME: {**OK, "data_offsets": [0, 256_000, 512_000]}},
    "offsets-negative": {NAME: {**OK, "data_offsets": [-512_000, 0]}},
    "offsets-reversed": {NAME: {**OK, "data_offsets": [512_000, 0]}},
    "offsets-short": {NAME: {**OK, "data_offsets": [0, 1000]}},
    "offsets-strings": {NAME: {**OK, "data_offsets": ["0", "512000"]}},
    "offsets-past-the-end": {NAME: {**OK, "data_offsets": [10**9, 10**9 + 512_000]}},
    "header-a-list": [OK],
    "header-a-number": 7,
    "header-not-json": b"{not json",
    "header-not-utf8": b'{"\xff\xfe": 1}',
    "header-nested-deep": b'{"a": ' + b"[" * 10_000 + b"]" * 10_000 + b"}",
    "header-5000-digit-int": b'{"' + NAME.encode() + b'": {"dtype": "BF16", "shape": [' + b"9" * 5000 + b"]}}",
    "header-nan": b'{"' + NAME.encode() + b'": {"dtype": "BF16", "shape": [NaN]}}',
    "header-1e400": b'{"' + NAME.encode() + b'": {"dtype": "BF16", "shape": [1e400]}}',
    "length-past-the-file": ("length", 1_000_000),
    "length-2-pow-63": ("length", 2**63),
    "length-over-100MB": ("length", 100_000_001),
    "file-shorter-than-8-bytes": ("bytes", b"\x10\0\0"),
    "index-parent-dir": ("index", {NAME: "../model.safetensors"}),
    "index-absolute": ("index", {NAME: "/etc/passwd"}),
    "index-missing-shard": ("index", {NAME: "model-00001-of-00002.safetensors"}),
    "index-weight-map-list": ("index", ["model.safetensors"]),
    "index-weight-map-ints": ("index", {NAME: 1}),
}


def safetensors_cases(out: Path) -> tuple[int, int]:
    _, config = find_config("tiny-llama")
    kept = dropped = 0
    for case, spec in SAFETENSORS_CASES.items():
        folder = out / "safetensors" / case
        folder.mkdir(parents=True)
        (folder / "config.json").write_text(json.dumps(config) + "\n")
        if isinstance(spec, tuple) and spec[0] == "index":
            (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": spec[1]}) + "\n")
        elif isinstance(spec, tuple) and spec[0] == "length":
            (folder / "model.safetensors").write_bytes(safetensors({NAME: OK}, length=spec[1]))
        elif isinstance(spec, tuple) and spec[0] == "bytes":
            (folder / "model.safetensors").write_bytes(spec[1])
        else:
            (folder / "model.safetensors").write_bytes(safetensors(spec))
        if refused(folder):
            kept += 1
        else:
            shutil.rmtree(folder)
            dropped += 1
    return kept, dropped


def refused(path: Path) -> bool:
    try:
        load_model(str(path))
    except VramlensError:
        return True
    return False


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent.parent / "tests/corpus/models")
    out = parser.parse_args().out
    for sub in ("config", "safetensors"):
        shutil.rmtree(out / sub, ignore_errors=True)
        (out / sub).mkdir(parents=True)
    c_kept, c_dropped = config_cases(out)
    s_kept, s_dropped = safetensors_cases(out)
    print(f"config: {c_kept} cases ({c_dropped} accepted, left out); "
          f"safetensors: {s_kept} cases ({s_dropped} accepted, left out)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
