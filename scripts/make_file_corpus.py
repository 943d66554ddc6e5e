"""Write the corpus of bad GGUF files and bad snapshots under tests/corpus/ (deterministic).

Every file here must be refused: `vramlens place FILE.gguf --gpu 24GB` and `vramlens snapshot FILE`
exit with code 2 and one line on stderr (tests/test_file_corpus.py runs them all). Each file is
bad by construction, not by chance: a truncation of a file whose last tensor (or pickle opcode)
ends at its last byte, or one field set to a value over a bound, of the wrong type, or
contradicting another field. Seeded generators only: the same files on every run (a test
checks the committed files are what this script writes).

Run: python scripts/make_file_corpus.py   (rewrites tests/corpus/gguf and tests/corpus/snapshot)
"""

from __future__ import annotations

import json
import pickle
import random
import shutil
import struct
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "corpus"

# GGUF value types (ggml/docs/gguf.md)
U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
_FMT = {U8: "B", I8: "b", U16: "H", I16: "h", U32: "I", I32: "i", F32: "f", BOOL: "?", U64: "Q", I64: "q", F64: "d"}
#: ggml type id -> (elements per block, bytes per block) for the types the corpus uses
_TYPES = {0: (1, 4), 1: (1, 2), 8: (32, 34)}


def _s(text: str | bytes, length: int | None = None) -> bytes:
    raw = text.encode() if isinstance(text, str) else text
    return struct.pack("<Q", len(raw) if length is None else length) + raw


def _value(vtype: int, value) -> bytes:
    if vtype == STR:
        return _s(value)
    if vtype == ARR:
        etype, items = value
        return struct.pack("<IQ", etype, len(items)) + b"".join(_value(etype, v) for v in items)
    return struct.pack("<" + _FMT[vtype], value)


def base_kv() -> list[tuple[str, int, object]]:
    """The metadata of a tiny valid llama GGUF: 2 blocks, width 32, 4 heads (2 KV), context 256."""
    return [
        ("general.architecture", STR, "llama"),
        ("general.name", STR, "tiny"),
        ("llama.block_count", U32, 2),
        ("llama.context_length", U32, 256),
        ("llama.embedding_length", U32, 32),
        ("llama.attention.head_count", U32, 4),
        ("llama.attention.head_count_kv", U32, 2),
        ("tokenizer.ggml.tokens", ARR, (STR, ["<s>", "</s>", "a", "b"])),
        ("tokenizer.ggml.scores", ARR, (F32, [0.0, 0.0, -1.0, -2.0])),
    ]


def base_tensors() -> list[tuple[str, tuple[int, ...], int]]:
    """(name, ggml shape (ne0 first), ggml type id) of the tiny model's tensors."""
    return [("token_embd.weight", (32, 8), 1),
            ("blk.0.attn_q.weight", (32, 4), 1), ("blk.0.ffn_up.weight", (32, 4), 8),
            ("blk.1.attn_q.weight", (32, 4), 1), ("blk.1.ffn_up.weight", (32, 4), 8),
            ("output_norm.weight", (32,), 0), ("output.weight", (32, 8), 1)]


def gguf_bytes(kv=None, tensors=None, *, magic=b"GGUF", version=3, n_tensors=None, n_kv=None, align=32,
               raw_kv: bytes = b"", raw_tensors: bytes = b"", offsets=None) -> bytes:
    """A GGUF file; every default gives a valid one whose last tensor ends at the last byte.

    ``n_tensors``/``n_kv`` override the declared counts; ``raw_kv``/``raw_tensors`` are appended
    as they are after the encoded pairs / tensor infos; ``offsets`` overrides tensor offsets.
    """
    kv = base_kv() if kv is None else kv
    tensors = base_tensors() if tensors is None else tensors
    body = b"".join(_s(k) + struct.pack("<I", t) + _value(t, v) for k, t, v in kv) + raw_kv
    infos, data, offset = b"", b"", 0
    for i, (name, shape, type_id) in enumerate(tensors):
        block, size = _TYPES.get(type_id, (1, 1))
        numel = 1
        for n in shape:
            numel *= n
        nbytes = numel // block * size if numel < 2**20 else 0
        off = offset if offsets is None else offsets[i]
        infos += _s(name) + struct.pack("<I", len(shape)) + struct.pack(f"<{len(shape)}Q", *shape)
        infos += struct.pack("<IQ", type_id, off)
        pad = -(-nbytes // align) * align if i < len(tensors) - 1 else nbytes
        data += bytes(pad)
        offset += pad
    infos += raw_tensors
    head = magic + struct.pack("<IQQ", version, len(tensors) if n_tensors is None else n_tensors,
                               len(kv) + bool(raw_kv) if n_kv is None else n_kv)
    header = head + body + infos
    return header + bytes(-len(header) % align) + data


def _set(kv, key, vtype, value):
    return [(k, vtype, value) if k == key else (k, t, v) for k, t, v in kv] + (
        [] if any(k == key for k, _, _ in kv) else [(key, vtype, value)])


def _drop(kv, key):
    return [x for x in kv if x[0] != key]


def gguf_cases() -> dict[str, bytes]:
    kv, ts = base_kv(), base_tensors()
    cases: dict[str, bytes] = {
        "four-bytes": b"GGUF",
        "empty": b"",
        "magic-ggml": gguf_bytes(magic=b"GGML"),
        "magic-text": b"GGUF not really",
        "version-1": gguf_bytes(version=1),
        "version-0": gguf_bytes(version=0),
        "version-99": gguf_bytes(version=99),
        "kv-count-2e62": gguf_bytes(n_kv=2**62),
        "kv-count-2e64-1": gguf_bytes(n_kv=2**64 - 1),
        "kv-count-65537": gguf_bytes(n_kv=65_537),
        "kv-count-one-more": gguf_bytes(n_kv=len(kv) + 1),
        "kv-count-zero": gguf_bytes(n_kv=0),
        "tensor-count-2e63": gguf_bytes(n_tensors=2**63),
        "tensor-count-1e7": gguf_bytes(n_tensors=10**7),
        "tensor-count-one-more": gguf_bytes(n_tensors=len(ts) + 1),
        "tensor-count-40": gguf_bytes(n_tensors=40),
        "key-length-2e63": gguf_bytes(raw_kv=_s("x", 2**63)),
        "key-length-2e16": gguf_bytes(raw_kv=_s("x", 2**16)),
        "key-length-past-end": gguf_bytes(raw_kv=_s("x", 10_000)),
        "string-length-2e63": gguf_bytes(raw_kv=_s("general.url") + struct.pack("<I", STR) + _s("x", 2**63)),
        "string-length-2e40": gguf_bytes(raw_kv=_s("general.url") + struct.pack("<I", STR) + _s("x", 2**40)),
        "string-length-past-end": gguf_bytes(raw_kv=_s("general.url") + struct.pack("<I", STR) + _s("x", 99_999)),
        "key-not-utf8": gguf_bytes(raw_kv=_s(b"\xff\xfe") + struct.pack("<I", U8) + b"\x00"),
        "key-twice": gguf_bytes(kv + [("llama.block_count", U32, 2)]),
        "value-type-13": gguf_bytes(raw_kv=_s("x.y") + struct.pack("<I", 13)),
        "value-type-2e32-1": gguf_bytes(raw_kv=_s("x.y") + struct.pack("<I", 2**32 - 1)),
        "array-elem-type-77": gguf_bytes(raw_kv=_s("x.y") + struct.pack("<IIQ", ARR, 77, 1)),
        "array-2e60-in-60-bytes": b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + _s("a") + struct.pack("<IIQ", ARR, U64, 2**60),
        "array-2e60": gguf_bytes(raw_kv=_s("x.y") + struct.pack("<IIQ", ARR, U8, 2**60)),
        "array-2e24-1": gguf_bytes(raw_kv=_s("x.y") + struct.pack("<IIQ", ARR, U8, 2**24 + 1)),
        "array-strings-past-end": gguf_bytes(raw_kv=_s("x.y") + struct.pack("<IIQ", ARR, STR, 5_000)),
        "array-string-length-2e63": gguf_bytes(raw_kv=_s("x.y") + struct.pack("<IIQ", ARR, STR, 1) + _s("", 2**63)),
        "array-nested-9": gguf_bytes(raw_kv=_s("x.y") + struct.pack("<I", ARR)
                                     + struct.pack("<IQ", ARR, 1) * 9 + struct.pack("<IQ", U8, 0)),
        "block-count-0": gguf_bytes(_set(kv, "llama.block_count", U32, 0)),
        "block-count-negative": gguf_bytes(_set(kv, "llama.block_count", I32, -1)),
        "block-count-string": gguf_bytes(_set(kv, "llama.block_count", STR, "32")),
        "block-count-1e12": gguf_bytes(_set(kv, "llama.block_count", U64, 10**12)),
        "block-count-4097": gguf_bytes(_set(kv, "llama.block_count", U32, 4097)),
        "block-count-float": gguf_bytes(_set(kv, "llama.block_count", F32, 2.5)),
        "block-count-nan": gguf_bytes(_set(kv, "llama.block_count", F64, float("nan"))),
        "block-count-bool": gguf_bytes(_set(kv, "llama.block_count", BOOL, True)),
        "block-count-array": gguf_bytes(_set(kv, "llama.block_count", ARR, (U32, [2, 2]))),
        "block-count-missing": gguf_bytes(_drop(kv, "llama.block_count")),
        "embedding-0": gguf_bytes(_set(kv, "llama.embedding_length", U32, 0)),
        "embedding-2e40": gguf_bytes(_set(kv, "llama.embedding_length", U64, 2**40)),
        "embedding-missing": gguf_bytes(_drop(kv, "llama.embedding_length")),
        "heads-0": gguf_bytes(_set(kv, "llama.attention.head_count", U32, 0)),
        "heads-negative": gguf_bytes(_set(kv, "llama.attention.head_count", I64, -4)),
        "heads-empty-array": gguf_bytes(_set(kv, "llama.attention.head_count", ARR, (U32, []))),
        "heads-kv-0": gguf_bytes(_set(kv, "llama.attention.head_count_kv", U32, 0)),
        "heads-kv-string": gguf_bytes(_set(kv, "llama.attention.head_count_kv", STR, "2")),
        "context-0": gguf_bytes(_set(kv, "llama.context_length", U32, 0)),
        "context-2e63": gguf_bytes(_set(kv, "llama.context_length", U64, 2**63)),
        "context-short-for-seq": gguf_bytes(_set(kv, "llama.context_length", U32, 16)),
        "arch-number": gguf_bytes(_set(kv, "general.architecture", U32, 7)),
        "arch-empty": gguf_bytes(_set(kv, "general.architecture", STR, "")),
        "arch-unknown-no-keys": gguf_bytes(_set(kv, "general.architecture", STR, "mamba9")),
        "alignment-0": gguf_bytes(_set(kv, "general.alignment", U32, 0)),
        "alignment-3": gguf_bytes(_set(kv, "general.alignment", U32, 3)),
        "alignment-string": gguf_bytes(_set(kv, "general.alignment", STR, "32")),
        "tensor-blk-5-of-2": gguf_bytes(tensors=ts + [("blk.5.attn_q.weight", (32, 4), 1)]),
        "tensor-blk-2-of-2": gguf_bytes(tensors=ts + [("blk.2.attn_q.weight", (32, 4), 1)]),
        "tensor-blk-x": gguf_bytes(tensors=ts + [("blk.x.attn_q.weight", (32, 4), 1)]),
        "tensor-blk-negative": gguf_bytes(tensors=ts + [("blk.-1.attn_q.weight", (32, 4), 1)]),
        "tensor-blk-huge": gguf_bytes(tensors=ts + [("blk." + "9" * 5000 + ".w", (32,), 0)]),
        "tensor-blk-unicode-digit": gguf_bytes(tensors=ts + [("blk.\u0661.w", (32,), 0)]),
        "tensor-blk-no-index": gguf_bytes(tensors=ts + [("blk.", (32,), 0)]),
        "tensor-dims-5": gguf_bytes(tensors=ts + [("blk.0.x", (32, 1, 1, 1, 1), 0)]),
        "tensor-dims-0": gguf_bytes(tensors=ts + [("blk.0.x", (), 0)]),
        "tensor-dims-2e32-1": gguf_bytes(raw_tensors=_s("blk.0.x") + struct.pack("<I", 2**32 - 1),
                                         n_tensors=len(ts) + 1),
        "tensor-numel-2e60": gguf_bytes(tensors=ts + [("blk.0.x", (2**30, 2**30), 0)]),
        "tensor-dim-2e63": gguf_bytes(tensors=ts + [("blk.0.x", (2**63,), 0)]),
        "tensor-type-4": gguf_bytes(tensors=ts + [("blk.0.x", (32,), 4)]),
        "tensor-type-99": gguf_bytes(tensors=ts + [("blk.0.x", (32,), 99)]),
        "tensor-type-2e32-1": gguf_bytes(tensors=ts + [("blk.0.x", (32,), 2**32 - 1)]),
        "tensor-q8-row-33": gguf_bytes(tensors=ts + [("blk.0.x", (33, 2), 8)]),
        "tensor-twice": gguf_bytes(tensors=ts + [ts[1]]),
        "tensor-name-2e63": gguf_bytes(raw_tensors=_s("x", 2**63), n_tensors=len(ts) + 1),
        "tensor-name-not-utf8": gguf_bytes(tensors=ts + [(b"\xc3(".decode("latin-1"), (32,), 0)]),
        "tensor-info-truncated": gguf_bytes(raw_tensors=_s("blk.0.x") + struct.pack("<I", 2), n_tensors=len(ts) + 1),
        "tensor-offset-misaligned": gguf_bytes(offsets=[0, 3, 0, 0, 0, 0, 0]),
        "tensor-offset-past-end": gguf_bytes(offsets=[0] * 6 + [2**40]),
        "tensor-offset-2e64-1": gguf_bytes(offsets=[0] * 6 + [2**64 - 32]),
    }
    # the non-UTF-8 tensor name: latin-1 text re-encoded as UTF-8 is valid, so patch the bytes
    good = gguf_bytes(tensors=ts + [("blk.0.Z(", (32,), 0)])
    cases["tensor-name-not-utf8"] = good.replace(b"blk.0.Z(", b"blk.0.\xc3(")
    # every proper prefix of a valid file: the last tensor ends at the last byte, so each is short
    whole = gguf_bytes()
    rng = random.Random(20240601)
    header_end = whole.index(b"output.weight") + 40
    cuts = sorted(set(range(0, header_end, 7)) | set(rng.sample(range(header_end, len(whole)), 20)))
    for n in cuts:
        cases[f"truncated-at-{n:05d}"] = whole[:n]
    # random 8-byte overwrites of the counts and lengths near the front, each with a declared
    # count pushed over its bound (the top bit set): never a valid file
    for i in range(30):
        at = rng.choice((8, 16))  # tensor_count, kv_count
        cases[f"count-{i:02d}"] = whole[:at] + struct.pack("<Q", (1 << 63) | rng.getrandbits(62)) + whole[at + 8:]
    return cases


# ---- snapshots --------------------------------------------------------------------------------
MiB = 1 << 20


def _block(size, state="active_allocated", **extra):
    return dict({"address": 0, "size": size, "requested_size": size, "state": state, "frames": []}, **extra)


def _segment(blocks, **extra):
    return dict({"device": 0, "address": 0, "total_size": sum(b["size"] for b in blocks if isinstance(b["size"], int)),
                 "stream": 0, "segment_type": "large", "blocks": blocks}, **extra)


def valid_snapshot() -> dict:
    blocks = [_block(2 * MiB), _block(18 * MiB, "inactive")]
    trace = [{"action": "segment_alloc", "addr": 0, "size": 20 * MiB, "frames": []},
             {"action": "alloc", "addr": 0, "size": 2 * MiB, "frames": [{"filename": "t.py", "line": 1, "name": "f"}]}]
    return {"segments": [_segment(blocks)], "device_traces": [trace], "allocator_settings": {}}


def valid_stats() -> dict:
    return {"allocated_bytes.all.current": 3 * MiB, "allocated_bytes.all.peak": 38 * MiB,
            "reserved_bytes.all.current": 22 * MiB, "reserved_bytes.all.peak": 52 * MiB,
            "active_bytes.all.current": 3 * MiB, "inactive_split_bytes.all.current": 17 * MiB,
            "segment.all.current": 2, "num_alloc_retries": 1, "num_ooms": 0}


BAD_NUMBERS = [10**400, -1, -2**63, 2**64, float("nan"), float("inf"), float("-inf"), 1.5, "12", None, [], {}, True,
               (1, 2), b"\x00"]


def snapshot_cases() -> dict[str, bytes]:
    cases: dict[str, bytes] = {}
    for i, v in enumerate(BAD_NUMBERS):
        for field in ("size", "requested_size"):
            if field == "requested_size" and v is None:
                continue  # a missing requested_size defaults to the size
            s = valid_snapshot()
            s["segments"][0]["blocks"][0][field] = v
            cases[f"block-{field}-{i:02d}.pickle"] = pickle.dumps(s, protocol=2 + i % 4)
        s = valid_snapshot()
        s["segments"][0]["total_size"] = v
        cases[f"segment-total-{i:02d}.pickle"] = pickle.dumps(s, protocol=2 + i % 4)
        s = valid_snapshot()
        s["device_traces"][0][1]["size"] = v
        cases[f"trace-size-{i:02d}.pickle"] = pickle.dumps(s, protocol=2 + i % 4)
        s = valid_snapshot()
        s["device_traces"][0][1]["addr"] = v
        cases[f"trace-addr-{i:02d}.pickle"] = pickle.dumps(s, protocol=2 + i % 4)
        if v != 0:
            s = valid_snapshot()
            s["segments"][0]["device"] = v if v is not None else "cuda:0"
            cases[f"segment-device-{i:02d}.pickle"] = pickle.dumps(s, protocol=2 + i % 4)
    s = valid_snapshot()
    s["segments"][0]["device"] = "cuda:0"
    cases["segment-device-cuda0.pickle"] = pickle.dumps(s)
    s = valid_snapshot()
    s["segments"][0]["total_size"] = 1 * MiB  # blocks in use hold 2 MiB
    cases["allocated-over-total.pickle"] = pickle.dumps(s)
    s = valid_snapshot()
    s["segments"][0]["blocks"][0]["state"] = "zombie"
    cases["block-state.pickle"] = pickle.dumps(s)
    for name, obj in {"list": [1, 2], "int": 7, "none": None, "str": "segments", "no-segments": {"traces": []},
                      "segments-dict": {"segments": {}}, "segment-int": {"segments": [3]},
                      "blocks-missing": {"segments": [{"device": 0}]}, "version": {"segments": [], "version": 2},
                      "traces-dict": {"segments": [], "device_traces": {}},
                      "trace-entry-int": {"segments": [], "device_traces": [[5]]}}.items():
        cases[f"not-a-snapshot-{name}.pickle"] = pickle.dumps(obj)
    # nesting: lists 1,000 deep (EMPTY_LIST x n, APPEND x n-1) and a list that holds itself
    n = 1_000
    cases["nested-1000.pickle"] = b"\x80\x02" + b"]" * n + b"a" * (n - 1) + b"."
    cases["nested-in-segments.pickle"] = (b"\x80\x02}X\x08\x00\x00\x00segments" + b"]" * n + b"a" * (n - 1) + b"s.")
    cases["self-containing.pickle"] = b"\x80\x02]q\x00h\x00a."  # l = []; l.append(l)
    cases["hostile-os-system.pickle"] = b"cos\nsystem\n(S'echo pwned'\ntR."
    cases["hostile-eval.pickle"] = b"cbuiltins\neval\n(S'1'\ntR."
    cases["persistent-id.pickle"] = b"\x80\x02(X\x03\x00\x00\x00abcq\x00h\x00Q."
    cases["long4-huge.pickle"] = b"\x80\x02\x8b\xff\xff\xff\x7f."  # LONG4 of 2 GiB - 1 bytes, absent
    cases["binunicode-huge.pickle"] = b"\x80\x02X\xff\xff\xff\xff."
    cases["text.pickle"] = b"not a snapshot\n"
    cases["empty.pickle"] = b""
    # every proper prefix of valid snapshots, protocols 2-5 (a pickle ends with STOP)
    rng = random.Random(7)
    for proto in (2, 3, 4, 5):
        whole = pickle.dumps(valid_snapshot(), protocol=proto)
        for cut in sorted(rng.sample(range(len(whole)), 12)):
            cases[f"truncated-p{proto}-{cut:04d}.pickle"] = whole[:cut]
    # random plain structures with one bad block inside (a negative size): never a valid snapshot
    for i in range(20):
        s = valid_snapshot()
        noise = _noise(rng, 3)
        s["segments"][0]["blocks"].insert(rng.randrange(3), _block(-rng.randrange(1, 2**40)))
        s["segments"][0]["blocks"][-1]["frames"] = [noise]
        cases[f"random-{i:02d}.pickle"] = pickle.dumps(s, protocol=rng.choice((2, 3, 4, 5)))
    # memory_stats JSON
    for i, v in enumerate([10**400, -1, 2**51, 1.5, "12", None, [], {}, True]):
        for key in ("allocated_bytes.all.current", "reserved_bytes.all.current", "allocated_bytes.all.peak",
                    "num_ooms"):
            if v is None and key in ("num_ooms", "allocated_bytes.all.peak"):
                continue  # absent optional values are fine
            st = valid_stats()
            st[key] = v
            cases[f"stats-{key.split('.')[0]}-{key.split('.')[-1]}-{i:02d}.json"] = json.dumps(st).encode()
    for word in ("NaN", "Infinity", "-Infinity", "1e400", "-1e400"):
        text = json.dumps(valid_stats()).replace(str(3 * MiB), word, 1)
        cases[f"stats-{word.strip('-').lower()}{'-neg' if word[0] == '-' else ''}.json"] = text.encode()
    st = valid_stats()
    st["allocated_bytes.all.current"] = 30 * MiB  # over reserved 22 MiB
    cases["stats-allocated-over-reserved.json"] = json.dumps(st).encode()
    st = valid_stats()
    st["allocated_bytes.all.peak"] = 1 * MiB  # under current
    cases["stats-peak-under-current.json"] = json.dumps(st).encode()
    st = valid_stats()
    st["inactive_split_bytes.all.current"] = 20 * MiB  # more than reserved - allocated
    cases["stats-split-over-gap.json"] = json.dumps(st).encode()
    cases["stats-missing-reserved.json"] = json.dumps({"allocated_bytes.all.current": 1}).encode()
    cases["stats-deep-5000.json"] = b"{\"a\": " + b"[" * 5000 + b"]" * 5000 + b"}"
    cases["stats-deep-100.json"] = b"{\"a\": " + b"[" * 100 + b"]" * 100 + b"}"
    cases["stats-digits-5000.json"] = b"{\"allocated_bytes.all.current\": " + b"9" * 5000 + b"}"
    cases["stats-malformed.json"] = b'{"allocated_bytes.all.current": '
    cases["stats-not-utf8.json"] = b'{"\xff": 1}'
    return cases


def _noise(rng: random.Random, depth: int):
    """A random plain structure: dicts, lists, ints (huge too), floats (NaN too), strings."""
    kind = rng.randrange(6 if depth else 4)
    if kind == 0:
        return rng.choice((0, -1, 2**63, 10**40, rng.randrange(-2**31, 2**31)))
    if kind == 1:
        return rng.choice((float("nan"), float("inf"), 1.5, -0.0))
    if kind == 2:
        return rng.choice(("", "segments", "x" * rng.randrange(20), "\u00e9"))
    if kind == 3:
        return None
    if kind == 4:
        return [_noise(rng, depth - 1) for _ in range(rng.randrange(4))]
    return {rng.choice(("size", "state", "frames", "device", "k")): _noise(rng, depth - 1) for _ in range(rng.randrange(4))}


def write(out: Path = OUT) -> int:
    """Write every case under ``out`` (replacing what is there); returns the number of files."""
    n = 0
    for folder, cases, suffix in (("gguf", gguf_cases(), ".gguf"), ("snapshot", snapshot_cases(), "")):
        d = out / folder
        if d.exists():
            shutil.rmtree(d)
        d.mkdir(parents=True)
        for name, data in cases.items():
            (d / (name + suffix)).write_bytes(data)
            n += 1
    return n


if __name__ == "__main__":
    print(f"wrote {write(Path(sys.argv[1]) if len(sys.argv) > 1 else OUT)} files under tests/corpus/")
