"""Read a GGUF header into a :class:`GGUFInfo`, every declared count checked before it is used.

The format (ggml/docs/gguf.md; ggml/src/gguf.cpp ``gguf_init_from_file_impl``): magic ``GGUF``,
version (u32), tensor count (u64), key/value count (u64), the key/value pairs, the tensor infos
(name, n_dims, dims, ggml type, offset), padding to ``general.alignment``, then tensor data.

A header is hostile input: a count or a length is a promise the file may not keep. Nothing is
allocated from a declared size: each length is compared with the bytes left in the file (known
up front) and with its bound in :mod:`vramlens.limits` before anything is read; arrays are
skipped, not built (only short integer arrays, such as per-layer head counts, are kept); tensor
data is never read, only checked to lie inside the file. Every problem is one ModelSourceError
naming the file, the field, the value and the limit.
"""

from __future__ import annotations

import struct
from collections import Counter
from dataclasses import dataclass
from typing import Any, BinaryIO, overload

from vramlens.advise.gguf_split import GGUFInfo
from vramlens.errors import InputError, ModelSourceError
from vramlens.limits import (
    MAX_GGUF_ARRAY,
    MAX_GGUF_ARRAY_DEPTH,
    MAX_GGUF_DIMS,
    MAX_GGUF_KEY,
    MAX_GGUF_KV,
    MAX_GGUF_STRING,
    MAX_HEADS,
    MAX_HIDDEN,
    MAX_INTERMEDIATE,
    MAX_LAYERS,
    MAX_POSITIONS,
    MAX_TENSOR_NUMEL,
    MAX_TENSORS,
    check_int,
    show,
)
from vramlens.models.hybrid import ATTENTION, BOTH, NONE, STATE, HybridLayout


@dataclass(frozen=True, slots=True)
class GGMLType:
    """A ggml tensor type: ``block`` elements are stored in ``type_size`` bytes."""

    name: str
    block: int
    type_size: int


#: ggml types by id: ggml/src/ggml.c ``type_traits`` (blck_size, type_size), as gguf-py 0.19's
#: GGML_QUANT_SIZES lists them. Ids 4, 5 (Q4_2, Q4_3) and 31-33, 36-38 were removed from ggml.
GGML_TYPES: dict[int, GGMLType] = {
    0: GGMLType("F32", 1, 4), 1: GGMLType("F16", 1, 2), 2: GGMLType("Q4_0", 32, 18),
    3: GGMLType("Q4_1", 32, 20), 6: GGMLType("Q5_0", 32, 22), 7: GGMLType("Q5_1", 32, 24),
    8: GGMLType("Q8_0", 32, 34), 9: GGMLType("Q8_1", 32, 40), 10: GGMLType("Q2_K", 256, 84),
    11: GGMLType("Q3_K", 256, 110), 12: GGMLType("Q4_K", 256, 144), 13: GGMLType("Q5_K", 256, 176),
    14: GGMLType("Q6_K", 256, 210), 15: GGMLType("Q8_K", 256, 292), 16: GGMLType("IQ2_XXS", 256, 66),
    17: GGMLType("IQ2_XS", 256, 74), 18: GGMLType("IQ3_XXS", 256, 98), 19: GGMLType("IQ1_S", 256, 50),
    20: GGMLType("IQ4_NL", 32, 18), 21: GGMLType("IQ3_S", 256, 110), 22: GGMLType("IQ2_S", 256, 82),
    23: GGMLType("IQ4_XS", 256, 136), 24: GGMLType("I8", 1, 1), 25: GGMLType("I16", 1, 2),
    26: GGMLType("I32", 1, 4), 27: GGMLType("I64", 1, 8), 28: GGMLType("F64", 1, 8),
    29: GGMLType("IQ1_M", 256, 56), 30: GGMLType("BF16", 1, 2), 34: GGMLType("TQ1_0", 256, 54),
    35: GGMLType("TQ2_0", 256, 66), 39: GGMLType("MXFP4", 32, 17), 40: GGMLType("NVFP4", 64, 36),
    41: GGMLType("Q1_0", 128, 18),
}

#: GGUF metadata value types (gguf.md ``gguf_metadata_value_type``) -> struct format.
_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_STRING, _ARRAY = 8, 9
_INTEGER = {0, 1, 2, 3, 4, 5, 10, 11}
#: Strings longer than this are skipped, not kept (chat templates): no field vramlens reads is long.
_KEEP_STRING = 1_024
#: ggml's default tensor data alignment (GGUF_DEFAULT_ALIGNMENT).
DEFAULT_ALIGNMENT = 32
_FIX = "the file is truncated, corrupt or not GGUF: download it again or re-convert it with llama.cpp"


class _Reader:
    """Reads little- (or big-) endian GGUF fields from ``f``; never past ``size``."""

    def __init__(self, f: BinaryIO, size: int, name: str):
        self.f, self.size, self.name, self.pos, self.endian = f, size, name, 0, "<"

    def error(self, text: str) -> ModelSourceError:
        return ModelSourceError(f"{self.name}: not a readable GGUF file ({text})")

    def room(self, n: int, what: str) -> None:
        if n > self.size - self.pos:
            raise self.error(f"{what} needs {n:,} bytes at byte {self.pos:,} but the file has "
                             f"{self.size - self.pos:,} left: {_FIX}")

    def take(self, n: int, what: str) -> bytes:
        self.room(n, what)
        data = self.f.read(n)
        if len(data) != n:  # the file shrank while being read
            raise self.error(f"{what}: the file ended early at byte {self.pos + len(data):,}: {_FIX}")
        self.pos += n
        return data

    def skip(self, n: int, what: str) -> None:
        self.room(n, what)
        self.f.seek(n, 1)
        self.pos += n

    def scalar(self, code: str, what: str) -> Any:
        fmt = self.endian + code
        return struct.unpack(fmt, self.take(struct.calcsize(fmt), what))[0]

    def count(self, what: str, limit: int, unit: int, fix: str = _FIX) -> int:
        """A u64 count of items of at least ``unit`` bytes each: within ``limit`` and the bytes left."""
        n: int = self.scalar("Q", what)
        self.check(what, n, limit, minimum=0, fix=fix)
        self.room(n * unit, f"{what}={n:,}")
        return n

    def check(self, what: str, value: Any, limit: int, *, minimum: int = 0, fix: str = _FIX) -> int:
        try:
            return check_int(what, value, limit, minimum=minimum, fix=fix)
        except InputError as e:
            raise self.error(str(e)) from None

    @overload
    def string(self, what: str, limit: int = MAX_GGUF_STRING, keep: None = None) -> str: ...

    @overload
    def string(self, what: str, limit: int = MAX_GGUF_STRING, *, keep: int) -> str | None: ...

    def string(self, what: str, limit: int = MAX_GGUF_STRING, keep: int | None = None) -> str | None:
        """A GGUF string; None (skipped unread) when longer than ``keep``."""
        n = self.count(f"{what} length", limit, 1)
        if keep is not None and n > keep:
            self.skip(n, what)
            return None
        raw = self.take(n, what)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise self.error(f"{what} is not UTF-8: {_FIX}") from None

    def value(self, vtype: int, what: str, depth: int = 0) -> Any:
        if vtype in _SCALARS:
            return self.scalar(_SCALARS[vtype], what)
        if vtype == _STRING:
            return self.string(what, keep=_KEEP_STRING)
        if vtype != _ARRAY:
            raise self.error(f"{what} has value type {show(vtype)}, not one of GGUF's 0-12: {_FIX}")
        if depth >= MAX_GGUF_ARRAY_DEPTH:
            raise self.error(f"{what} nests arrays deeper than {MAX_GGUF_ARRAY_DEPTH}: {_FIX}")
        etype = self.scalar("I", f"{what} element type")
        if etype in _SCALARS:
            size = struct.calcsize(self.endian + _SCALARS[etype])
            n = self.count(f"{what} array count", MAX_GGUF_ARRAY, size)
            if etype in _INTEGER and n <= MAX_LAYERS:  # per-layer values (head counts) are kept
                return list(struct.unpack(f"{self.endian}{n}{_SCALARS[etype]}", self.take(n * size, what)))
            self.skip(n * size, what)
            return None
        if etype not in (_STRING, _ARRAY):
            raise self.error(f"{what} has array element type {show(etype)}, not one of GGUF's 0-12: {_FIX}")
        # each string is at least its 8-byte length; each array its 4-byte type and 8-byte count
        n = self.count(f"{what} array count", MAX_GGUF_ARRAY, 8 if etype == _STRING else 12)
        for i in range(n):
            if etype == _STRING:
                self.skip(self.count(f"{what}[{i}] length", MAX_GGUF_STRING, 1), f"{what}[{i}]")
            else:
                self.value(_ARRAY, f"{what}[{i}]", depth + 1)
        return None


@dataclass(frozen=True, slots=True)
class _Tensor:
    name: str
    shape: tuple[int, ...]
    ggml_type: GGMLType
    offset: int
    n_bytes: int


def read_gguf_file(path: str) -> GGUFInfo:
    """The placement facts of the GGUF file at ``path``: a regular file only (safe_io), header only.

    Raises:
        ModelSourceError: not a readable GGUF file, or a header vramlens refuses (the message names the
            field, the value and the limit).
    """
    from vramlens.safe_io import open_regular

    try:
        f, size = open_regular(path)
    except OSError as e:
        raise ModelSourceError(f"{path}: not a readable GGUF file ({e.strerror or e})") from None
    with f:
        try:
            return read_gguf(f, size, path)
        except OSError as e:
            raise ModelSourceError(f"{path}: not a readable GGUF file ({e.strerror or e})") from None


def read_gguf(f: BinaryIO, size: int, name: str) -> GGUFInfo:
    """The placement facts of the GGUF file open as ``f`` (``size`` bytes long), header only.

    Raises:
        ModelSourceError: the header is truncated, corrupt, over a bound in vramlens.limits, or
            lacks what placement needs (block count, width, heads); the message names the field.
    """
    r = _Reader(f, size, name)
    magic = r.take(4, "the magic number")
    if magic != b"GGUF":
        raise r.error(f"it starts with {magic!r}, not b'GGUF'")
    version = r.scalar("I", "the version")
    if version & 0xFFFF == 0 and version >> 16:  # written on a big-endian machine
        r.endian = ">"
        version = struct.unpack(">I", struct.pack("<I", version))[0]
    if version not in (2, 3):
        raise r.error(f"GGUF version {version} is not supported (2 and 3 are): re-convert it with llama.cpp")
    # a tensor info is at least 24 bytes (name length, n_dims, type, offset); a pair 13
    n_tensors = r.check("tensor_count", r.scalar("Q", "tensor_count"), MAX_TENSORS)
    n_kv = r.count("kv_count", MAX_GGUF_KV, 13)
    kv: dict[str, Any] = {}
    for i in range(n_kv):
        key = r.string(f"key {i}", limit=MAX_GGUF_KEY)
        if key in kv:
            raise r.error(f"key {show(key)} appears twice: {_FIX}")
        kv[key] = r.value(r.scalar("I", f"type of {key}"), key)
    r.room(n_tensors * 24, f"tensor_count={n_tensors:,}")
    tensors = [_tensor_info(r, i) for i in range(n_tensors)]
    align = kv.get("general.alignment", DEFAULT_ALIGNMENT)
    if isinstance(align, bool) or not isinstance(align, int) or align < 1 or align & (align - 1):
        raise r.error(f"general.alignment={show(align)} is not a power of two: {_FIX}")
    data_start = -(-r.pos // align) * align
    seen: set[str] = set()
    for t in tensors:
        if t.name in seen:
            raise r.error(f"tensor {show(t.name)} appears twice: {_FIX}")
        seen.add(t.name)
        if t.offset % align:
            raise r.error(f"tensor {show(t.name)} offset {t.offset:,} is not a multiple of the alignment {align}: {_FIX}")
        end = data_start + t.offset + t.n_bytes
        if end > size:
            raise r.error(f"tensor {show(t.name)} data ends at byte {end:,} but the file has {size:,} bytes: {_FIX}")
    return _info(r, kv, tensors)


def _tensor_info(r: _Reader, i: int) -> _Tensor:
    name = r.string(f"tensor {i} name", limit=MAX_GGUF_KEY)
    n_dims = r.scalar("I", f"tensor {show(name)} n_dims")
    r.check(f"tensor {show(name)} n_dims", n_dims, MAX_GGUF_DIMS, minimum=1)
    shape = tuple(r.check(f"tensor {show(name)} dimension {d}", r.scalar("Q", f"tensor {show(name)} dims"),
                          MAX_TENSOR_NUMEL) for d in range(n_dims))
    numel = 1
    for n in shape:
        numel *= n
    r.check(f"tensor {show(name)} elements", numel, MAX_TENSOR_NUMEL)
    type_id = r.scalar("I", f"tensor {show(name)} type")
    gt = GGML_TYPES.get(type_id)
    if gt is None:
        raise r.error(f"tensor {show(name)} has ggml type id {type_id}, which this vramlens does not know "
                      f"(known: {', '.join(map(str, GGML_TYPES))}): a newer format, or a corrupt file")
    if shape[0] % gt.block:
        raise r.error(f"tensor {show(name)} rows of {shape[0]} elements are not whole {gt.name} blocks of "
                      f"{gt.block}: {_FIX}")
    offset = r.scalar("Q", f"tensor {show(name)} offset")
    return _Tensor(name, shape, gt, offset, numel // gt.block * gt.type_size)


def _head_count(r: _Reader, key: str, value: Any, minimum: int = 1) -> int:
    """A head count: an integer, or per-layer integers (the largest counts, as the KV cache needs)."""
    if isinstance(value, list):
        if not value:
            raise r.error(f"{key} is an empty array: {_FIX}")
        value = max(value)
    return r.check(key, value, MAX_HEADS, minimum=minimum)


def _check_gqa(r: _Reader, arch: str, kv: dict[str, Any], n_layers: int) -> None:
    """Each attention block's KV head count divides its head count, as llama.cpp requires when it builds the
    graph: ggml-org/llama.cpp ggml/src/ggml.c ``ggml_mul_mat`` asserts ``ggml_can_mul_mat`` (``t1->ne[2] %
    t0->ne[2] == 0``: K's n_head_kv heads broadcast over Q's n_head) in the KQ product of build_attn_mha, and
    ``ggml_flash_attn_ext`` broadcasts the same way. A count of 0 (a recurrent block) has no attention."""
    def per_layer(key: str, default: Any) -> list[Any] | None:
        value = kv.get(f"{arch}.{key}", default)
        if not isinstance(value, list):
            return [value] * n_layers
        return value if len(value) == n_layers else None  # a wrong length is refused where the layout is read

    heads = per_layer("attention.head_count", 0)
    kv_heads = per_layer("attention.head_count_kv", kv.get(f"{arch}.attention.head_count", 0))
    if heads is None or kv_heads is None:
        return
    for i, (h, hkv) in enumerate(zip(heads, kv_heads, strict=True)):
        if isinstance(h, int) and isinstance(hkv, int) and h > 0 and hkv > 0 and h % hkv:
            where = f" (block {i})" if any(isinstance(v, list) for v in (kv.get(f"{arch}.attention.head_count"),
                                                                         kv.get(f"{arch}.attention.head_count_kv"))) else ""
            raise r.error(f"{arch}.attention.head_count_kv={hkv} does not divide {arch}.attention.head_count={h}"
                          f"{where}: llama.cpp broadcasts each KV head over a whole group of query heads "
                          f"(ggml_can_mul_mat); {_FIX}")


# ---- recurrent and hybrid architectures: llama.cpp's load_hparams ----
#: What follows reads the GGUF keys as ggml-org/llama.cpp src/llama-model.cpp ``llama_model::load_hparams``
#: does at commit 00342301d01a (the per-architecture cases; n_embd_r()/n_embd_s() in src/llama-hparams.cpp at
#: 01b77b579398); gguf-py 0.19's constants.py names the keys. Architectures whose every block is recurrent
#: (``llm_arch_is_recurrent``: llama_memory_recurrent, no KV cache):
RECURRENT_ONLY = frozenset({"mamba", "mamba2", "rwkv6", "rwkv6qwen2", "rwkv7", "arwkv7"})
#: the architectures laid out here -> their mixer (vramlens.models.hybrid.HybridLayout.mixer)
GGUF_MIXERS = {
    "mamba": "mamba1", "jamba": "mamba1", "mamba2": "mamba2", "granitehybrid": "mamba2", "nemotron_h": "mamba2",
    "nemotron_h_moe": "mamba2", "falcon-h1": "mamba2", "qwen3next": "gated_deltanet", "qwen35": "gated_deltanet",
    "qwen35moe": "gated_deltanet", "lfm2": "short_conv", "lfm2moe": "short_conv", "rwkv6": "rwkv", "rwkv6qwen2": "rwkv",
    "rwkv7": "rwkv", "arwkv7": "rwkv",
}


def _hybrid(r: _Reader, arch: str, kv: dict[str, Any], n_layers: int, n_embd: int) -> HybridLayout | None:
    """The layer kinds and state sizes of a recurrent or hybrid ``arch`` (None for any other architecture).

    Keys, as load_hparams reads them (a missing required key: llama.cpp's "key not found in model"):

    - Mamba, Jamba (mamba1): ``ssm.conv_kernel``, ``ssm.inner_size``, ``ssm.state_size`` (n_group 0);
      Mamba2, Granite 4.0-H (granitehybrid), Nemotron-H, Falcon-H1 (mamba2) and Qwen3-Next (Gated DeltaNet:
      inner_size = value heads x value dim, group_count = key heads, state_size = key dim, time_step_rank =
      value heads) also ``ssm.group_count`` and ``ssm.time_step_rank`` (the heads).
    - LFM2: ``shortconv.l_cache``: the conv state is n_embd x (l_cache - 1), no ssm state.
    - RWKV 6/7: ``wkv.head_size``, ``token_shift_count`` (default 2).
    - Block kinds: every block recurrent for Mamba, Mamba2 and RWKV; recurrent where the per-layer
      ``attention.head_count_kv`` is 0 for Jamba, granitehybrid and LFM2; for Nemotron-H recurrent where
      head_count_kv and ``feed_forward_length`` are both 0, attention where only feed_forward_length is
      (``create_memory``'s filter_attn: not recurrent and n_ff 0), neither (MLP/MoE) else; nemotron_h_moe the
      same (later llama.cpp shares load_hparams' case and src/models/nemotron-h.cpp's builder, 0aebd861, between
      the two: MoE blocks have n_ff != 0; the exact commit that added it was not pinned); Qwen3-Next
      attention every ``full_attention_interval``-th block (llama.cpp 00342301 hard-codes 4, the key's value
      in every Qwen3-Next GGUF; later releases read the key); Qwen3.5 (qwen35, qwen35moe: src/models/qwen35.cpp
      at 06e514f6) the same keys and rule over the trunk, its ``nextn_predict_layers`` MTP blocks after it neither
      recurrent nor cached (``n_layer_kv_from_start`` = the trunk; an ``attention.recurrent_layers`` array, which
      that code would prefer, is not read: gguf-py 0.19 writes none); Falcon-H1 both in every block
      (``filter_attn`` and ``filter_recr`` true).
    """
    mixer = GGUF_MIXERS.get(arch)
    if mixer is None:
        return None

    def need(key: str, limit: int, *, minimum: int = 1, default: int | None = None) -> int:
        full = f"{arch}.{key}"
        if full not in kv and default is None:
            raise ModelSourceError(f"{r.name}: the header lacks {full}, which llama.cpp's load_hparams requires for "
                                   f"architecture {arch!r}: {_FIX}")
        return r.check(full, kv.get(full, default), limit, minimum=minimum)

    def per_layer(key: str, default: Any) -> list[int]:
        full = f"{arch}.{key}"
        value = kv.get(full, default)
        if isinstance(value, list):
            if len(value) != n_layers:  # llama_model_loader::get_key_or_arr: "has wrong array length"
                raise r.error(f"{full} has {len(value)} entries but {arch}.block_count={n_layers}: {_FIX}")
            return [r.check(f"{full}[{i}]", v, MAX_INTERMEDIATE) for i, v in enumerate(value)]
        return [r.check(full, value, MAX_INTERMEDIATE)] * n_layers

    kinds: tuple[str, ...]
    if arch in RECURRENT_ONLY:
        kinds = (STATE,) * n_layers
    elif arch == "falcon-h1":
        kinds = (BOTH,) * n_layers
    elif arch in ("qwen3next", "qwen35", "qwen35moe"):
        every = need("full_attention_interval", MAX_LAYERS, default=4)
        # Qwen3.5's NextN/MTP blocks follow the trunk: neither recurrent nor in the main KV cache
        mtp = need("nextn_predict_layers", n_layers - 1, minimum=0, default=0) if arch != "qwen3next" else 0
        kinds = tuple(NONE if i >= n_layers - mtp else ATTENTION if (i + 1) % every == 0 else STATE
                      for i in range(n_layers))
    else:
        hkv = per_layer("attention.head_count_kv", kv.get(f"{arch}.attention.head_count", 0))
        if arch in ("nemotron_h", "nemotron_h_moe"):
            ff = per_layer("feed_forward_length", 0)
            kinds = tuple(NONE if f else STATE if h == 0 else ATTENTION for h, f in zip(hkv, ff, strict=True))
        else:
            kinds = tuple(STATE if h == 0 else ATTENTION for h in hkv)
    if all(k == NONE for k in kinds):  # every Nemotron-H block an MLP: no block mixes tokens, nothing to cache
        raise r.error(f"none of the {n_layers} blocks of {arch} is attention or recurrent (a block is attention where "
                      f"head_count_kv > 0, recurrent where head_count_kv and feed_forward_length are 0): {_FIX}")
    if mixer == "short_conv":
        return HybridLayout(kinds=kinds, mixer=mixer, conv_kernel=need("shortconv.l_cache", MAX_HIDDEN, minimum=2),
                            intermediate=n_embd)
    if mixer == "rwkv":
        return HybridLayout(kinds=kinds, mixer=mixer, conv_kernel=1, intermediate=n_embd,
                            head_dim=need("wkv.head_size", MAX_HIDDEN),
                            token_shift=need("token_shift_count", MAX_HIDDEN, default=2))
    conv = need("ssm.conv_kernel", MAX_HIDDEN, minimum=2)  # the conv state keeps kernel - 1 columns: 1 is none
    inner = need("ssm.inner_size", MAX_INTERMEDIATE)
    state = need("ssm.state_size", MAX_HIDDEN)
    if mixer == "mamba1":
        return HybridLayout(kinds=kinds, mixer=mixer, conv_kernel=conv, intermediate=inner, state_size=state)
    groups = need("ssm.group_count", MAX_HEADS, minimum=0)
    heads = need("ssm.time_step_rank", MAX_INTERMEDIATE, minimum=0)
    heads = heads if heads and inner % heads == 0 else 1  # only inner x state enters llama.cpp's n_embd_s
    if mixer == "gated_deltanet":
        return HybridLayout(kinds=kinds, mixer=mixer, conv_kernel=conv, k_heads=groups, k_dim=state, v_heads=heads,
                            v_dim=inner // heads)
    return HybridLayout(kinds=kinds, mixer=mixer, conv_kernel=conv, intermediate=inner, n_groups=groups,
                        n_heads=heads, head_dim=inner // heads, state_size=state)


def _info(r: _Reader, kv: dict[str, Any], tensors: list[_Tensor]) -> GGUFInfo:
    arch = kv.get("general.architecture", "llama")
    if not isinstance(arch, str) or not arch or len(arch) > 64:
        raise r.error(f"general.architecture={show(arch)} is not an architecture name: {_FIX}")
    recurrent_only = arch in RECURRENT_ONLY
    needed = ("block_count", "embedding_length") + (() if recurrent_only else ("attention.head_count",))
    missing = [k for k in needed if f"{arch}.{k}" not in kv]
    if missing:
        raise ModelSourceError(f"{r.name}: the header lacks {', '.join(f'{arch}.{k}' for k in missing)}: "
                               "not a transformer GGUF vramlens can place")
    n_layers = r.check(f"{arch}.block_count", kv[f"{arch}.block_count"], MAX_LAYERS, minimum=1)
    n_embd = r.check(f"{arch}.embedding_length", kv[f"{arch}.embedding_length"], MAX_HIDDEN, minimum=1)
    # Mamba and RWKV GGUFs write attention.head_count 0 ("non-transformer models do not have attention heads")
    n_head = _head_count(r, f"{arch}.attention.head_count", kv.get(f"{arch}.attention.head_count", 0),
                         minimum=0 if recurrent_only else 1)
    n_head_kv = _head_count(r, f"{arch}.attention.head_count_kv",
                            kv.get(f"{arch}.attention.head_count_kv", n_head), minimum=0 if recurrent_only else 1)
    _check_gqa(r, arch, kv, n_layers)
    key_length = r.check(f"{arch}.attention.key_length", kv.get(f"{arch}.attention.key_length", 0), MAX_HIDDEN)
    hybrid = _hybrid(r, arch, kv, n_layers, n_embd)
    n_ctx = r.check(f"{arch}.context_length", kv.get(f"{arch}.context_length", 2048), MAX_POSITIONS, minimum=1)
    layer = [0] * n_layers
    input_b = output_b = vocab = 0
    types: Counter[str] = Counter()
    for t in tensors:
        types[t.ggml_type.name] += 1
        if t.name.startswith("blk."):
            part = t.name.split(".")[1]
            if not (part.isascii() and part.isdigit() and len(part) <= 9 and int(part) < n_layers):
                raise r.error(f"tensor {show(t.name)} names block {show(part)} but {arch}.block_count={n_layers} "
                              f"(blocks 0-{n_layers - 1}): {_FIX}")
            layer[int(part)] += t.n_bytes
        elif t.name.startswith("output"):
            output_b += t.n_bytes
        else:
            input_b += t.n_bytes
            if t.name == "token_embd.weight":
                vocab = max(t.shape)
    return GGUFInfo(name=r.name, arch=arch, n_layers=n_layers, n_ctx_train=n_ctx, n_embd=n_embd, n_head=n_head,
                    n_head_kv=n_head_kv, layer_bytes=tuple(layer), input_bytes=input_b, output_bytes=output_b,
                    quant_types=dict(types), vocab=vocab, key_length=0 if recurrent_only else key_length,
                    hybrid=hybrid)
