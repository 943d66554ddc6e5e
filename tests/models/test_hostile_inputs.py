"""Bad or hostile model inputs: one clear error naming the field, the value and the limit.

Never a traceback, a hang or unbounded memory (vramlens.limits holds the bounds). Files are
written by hand (struct + json), so these tests need neither torch nor safetensors.
"""

from __future__ import annotations

import json
import os
import struct

import pytest

from tiny_configs import TINY_LLAMA
from vramlens.errors import InputError, ModelSourceError, OfflineError
from vramlens.limits import MAX_MODEL_ARG
from vramlens.models import hub, load_model, read_safetensors_header
from vramlens.models import safetensors_header as sth
from vramlens.safe_io import json_depth
from vramlens.units import parse_count, parse_size


@pytest.fixture(autouse=True)
def _offline(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-hub-cache"))


def write_text(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def config_with(tmp_path, name="config.json", **fields):
    return write_text(tmp_path / name, json.dumps({**TINY_LLAMA, **fields}))


def safetensors_bytes(header: dict, data: bytes = b"") -> bytes:
    raw = json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw + data


def folder_with_weights(tmp_path, header: dict, data: bytes = b"", name="model.safetensors"):
    folder = tmp_path / "m"
    write_text(folder / "config.json", json.dumps(TINY_LLAMA))
    (folder / name).write_bytes(safetensors_bytes(header, data))
    return folder


def raises(source, cls=ModelSourceError):
    with pytest.raises(cls) as e:
        load_model(source)
    message = str(e.value)
    assert "\n" not in message
    return message


# ---- the model argument ---------------------------------------------------------------------
def test_model_argument_over_the_limit():
    name = "a" * (MAX_MODEL_ARG + 1)
    assert raises(name, InputError) == (
        f"model='{'a' * 59}...({MAX_MODEL_ARG + 3} chars) is 4,097 characters, over the limit of 4,096: "
        f"pass a catalog name, a hub id or a shorter path"
    )


def test_model_argument_too_long_for_a_file_name():
    message = raises("b" * 300)
    assert message.endswith("(302 chars) cannot be looked up as a path (File name too long): pass an existing "
                            "config.json or model folder, a catalog name (vramlens models) or a hub id")


def test_model_argument_with_a_nul_byte():
    assert raises("./x\x00y/config.json").startswith("no such file or folder: './x\\x00y/config.json'")


# ---- config.json: size, nesting, numbers ----------------------------------------------------------
def test_config_over_the_size_limit(tmp_path):
    path = tmp_path / "config.json"
    with open(path, "wb") as f:
        f.truncate(8 * 1024 * 1024 + 1)  # sparse: the reader must stop at the cap + 1
    assert raises(str(path)) == (f"{path}: config.json is over the limit of 8,388,608 bytes: "
                                 f"this is not a config.json (real ones are a few KiB)")


def test_config_nested_100_000_deep(tmp_path):
    path = write_text(tmp_path / "config.json", '{"a": ' + "[" * 100_000 + "]" * 100_000 + "}")
    assert raises(str(path)) == (f"{path}: config.json nests 100,001 levels deep, over the limit of 64: "
                                 f"this is not a model file")


def test_json_depth_ignores_brackets_in_strings():
    assert json_depth(b'{"a": "[[[[{{{{", "b": [1, [2]]}') == 3
    assert json_depth(b'{"a": "\\"[[[", "b": 1}') == 1
    assert json_depth(b"7") == 0


@pytest.mark.parametrize(("text", "expected"), [
    ('"hidden_size": ' + "9" * 5000, "an integer of 5,000 digits is over the limit of 30 digits: fix the config.json"),
    ('"rms_norm_eps": 1e400', "the number 1e400 is too large for a float (it reads as infinity): fix the config.json"),
    ('"rms_norm_eps": NaN', "NaN is not JSON (no NaN or Infinity): fix the config.json"),
    ('"rms_norm_eps": -Infinity', "-Infinity is not JSON (no NaN or Infinity): fix the config.json"),
])
def test_config_numbers_nobody_can_use(tmp_path, text, expected):
    body = json.dumps(TINY_LLAMA)[:-1] + ", " + text + "}"
    path = write_text(tmp_path / "config.json", body)
    assert raises(str(path)) == f"{path}: {expected}"


@pytest.mark.parametrize(("field", "value", "limit"), [
    ("num_hidden_layers", 10**9, "4,096"),
    ("hidden_size", 10**7, "262,144"),
    ("intermediate_size", 10**8, "2,097,152"),
    ("num_attention_heads", 10**6, "16,384"),
    ("num_key_value_heads", 10**6, "16,384"),
    ("vocab_size", 10**9, "16,777,216"),
    ("max_position_embeddings", 10**12, "1,073,741,824"),
    ("head_dim", 10**6, "262,144"),
])
def test_dimension_over_its_bound(tmp_path, field, value, limit):
    path = config_with(tmp_path, **{field: value})
    assert f"{field}={value} is over the limit of {limit}: no real model comes close; fix the config" in raises(str(path))


def test_a_billion_layers_is_refused_from_a_dict_too():
    with pytest.raises(ModelSourceError) as e:
        load_model({**TINY_LLAMA, "num_hidden_layers": 10**9})
    assert str(e.value) == ("config: num_hidden_layers=1000000000 is over the limit of 4,096: no real model "
                            "comes close; fix the config")


def test_a_400_digit_dimension_from_a_dict():
    with pytest.raises(ModelSourceError) as e:
        load_model({**TINY_LLAMA, "hidden_size": 10**400})
    assert str(e.value) == ("config: hidden_size=a 401-digit number is over the limit of 262,144: no real model "
                            "comes close; fix the config")


def test_moe_experts_over_the_bound():
    config = {**TINY_LLAMA, "model_type": "mixtral", "architectures": ["MixtralForCausalLM"],
              "num_local_experts": 10**6, "num_experts_per_tok": 2}
    with pytest.raises(ModelSourceError) as e:
        load_model(config)
    assert "num_local_experts=1000000 is over the limit of 65,536" in str(e.value)


def test_products_over_the_parameter_bound():
    config = {**TINY_LLAMA, "hidden_size": 262_144, "intermediate_size": 2_097_152, "num_hidden_layers": 4096,
              "num_attention_heads": 2048, "num_key_value_heads": 2048}
    with pytest.raises(ModelSourceError) as e:
        load_model(config)
    assert str(e.value).startswith("config: the config describes ")
    assert str(e.value).endswith("parameters, over the limit of 100,000,000,000,000 (100T): "
                                 "fix the config's dimensions")


@pytest.mark.parametrize("value", [float("nan"), float("inf"), "half", 0, 2.5, [1], 10**400])
@pytest.mark.parametrize("where", ["top", "rope_scaling"])
def test_rotary_fraction_must_be_in_0_1(value, where):
    config = {**TINY_LLAMA, "model_type": "phi", "architectures": ["PhiForCausalLM"]}
    if where == "top":
        config["partial_rotary_factor"] = value
    else:
        config["rope_scaling"] = {"partial_rotary_factor": value}
    with pytest.raises(ModelSourceError) as e:
        load_model(config)
    assert "partial_rotary_factor=" in str(e.value) and "must be" in str(e.value)


def test_a_classifier_head_of_10_pow_400_labels():
    config = {**TINY_LLAMA, "architectures": ["LlamaForSequenceClassification"], "num_labels": 10**400}
    with pytest.raises(ModelSourceError) as e:
        load_model(config)
    assert str(e.value).startswith("config: tensor score.weight of shape (")
    assert str(e.value).endswith("is over the limit of 35,184,372,088,832 elements: fix the config's dimensions")


# ---- --params -------------------------------------------------------------------------------
@pytest.mark.parametrize(("text", "expected"), [
    ("100000T", "params='100000T' is over the limit of 100.00T (100,000,000,000,000): no model is that large"),
    ("nan", "params='nan' is not a count: write e.g. 7B, 350M or 124000000"),
    ("9" * 400, "params='" + "9" * 59 + "...(402 chars) is 400 characters, over the limit of 64: "
                "write e.g. 7B, 350M or 124000000"),
])
def test_params_refused(text, expected):
    with pytest.raises(InputError) as e:
        load_model(params=text)
    assert str(e.value) == expected


def test_params_at_the_bound_builds_inside_every_dimension_bound():
    spec = load_model(params="100T")
    assert spec.n_decoder_layers <= 4096 and spec.hidden_size <= 262_144
    assert abs(spec.params - 100e12) / 100e12 < 0.01


def test_counts_and_sizes_never_overflow():
    with pytest.raises(InputError):
        parse_count(10**400, limit=10**14)
    with pytest.raises(InputError, match="is 403 characters, over the limit of 64"):
        parse_size("9" * 400 + "TiB")  # float() of it is infinity
    with pytest.raises(InputError):
        parse_size(float("inf"))


# ---- safetensors headers --------------------------------------------------------------------------
OK_ENTRY = {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]}


@pytest.mark.parametrize(("entry", "expected"), [
    ({"dtype": {"nested": 1}, "shape": [1]}, "has dtype {'nested': 1}, which vramlens does not know"),
    ({"dtype": ["F32"], "shape": [1]}, "has dtype ['F32'], which vramlens does not know"),
    ({"dtype": "F32", "shape": [True]}, "has shape [True]: must be a list of non-negative integers"),
    ({"dtype": "F32", "shape": [-1]}, "has shape [-1]: must be a list of non-negative integers"),
    ({"dtype": "F32", "shape": "2x3"}, "has shape '2x3': must be a list of non-negative integers"),
    ({"dtype": "F32", "shape": [[2]]}, "has shape [[2]]: must be a list of non-negative integers"),
    ({"dtype": "F32", "shape": [10**12, 10**12]}, "over the limit of 35,184,372,088,832 elements"),
    ({"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 10]}, "[0, 10], 10 bytes, but its dtype and shape need 24"),
    ({"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24, 48]}, "must be [begin, end], two non-negative"),
    ({"dtype": "F32", "shape": [2, 3]}, "has data_offsets None: must be [begin, end]"),
    ({"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]}, "past the end of the file's 0 data bytes"),
    ([1, 2, 3], "maps to [1, 2, 3]: it must map to an object"),
])
def test_bad_tensor_entry(tmp_path, entry, expected):
    folder = folder_with_weights(tmp_path, {"model.embed_tokens.weight": entry})
    message = raises(str(folder))
    assert message.startswith(f"{folder / 'model.safetensors'}: tensor 'model.embed_tokens.weight' ")
    assert expected in message


def test_header_longer_than_the_file(tmp_path):
    path = tmp_path / "x.safetensors"
    path.write_bytes(struct.pack("<Q", 1000) + b"{}")
    with pytest.raises(ModelSourceError, match="header length 1000 exceeds the file"):
        read_safetensors_header(path)


def test_header_numbers_and_nesting_are_bounded(tmp_path):
    path = tmp_path / "x.safetensors"
    raw = b'{"a": ' + b"[" * 1000 + b"]" * 1000 + b"}"
    path.write_bytes(struct.pack("<Q", len(raw)) + raw)
    with pytest.raises(ModelSourceError, match="safetensors header nests 1,001 levels deep, over the limit of 64"):
        read_safetensors_header(path)


def test_too_many_tensors(tmp_path, monkeypatch):
    monkeypatch.setattr(sth, "MAX_TENSORS", 3)
    header = {f"t{i}": {"dtype": "U8", "shape": [1], "data_offsets": [i, i + 1]} for i in range(5)}
    path = tmp_path / "x.safetensors"
    path.write_bytes(safetensors_bytes(header, b"\0" * 5))
    with pytest.raises(ModelSourceError, match="lists 5 tensors, over the limit of 3: this is not a model"):
        read_safetensors_header(path)


def test_a_consistent_hand_written_header_loads(tmp_path):
    header = {"__metadata__": {"format": "pt"}, "lm_head.weight": OK_ENTRY}
    folder = folder_with_weights(tmp_path, header, b"\0" * 24)
    spec = load_model(folder)
    assert spec.source == "folder+safetensors"


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes are POSIX")
@pytest.mark.parametrize("name", ["model.safetensors", "config.json"])
def test_a_named_pipe_does_not_hang(tmp_path, name):
    folder = tmp_path / "m"
    folder.mkdir()
    if name != "config.json":
        write_text(folder / "config.json", json.dumps(TINY_LLAMA))
    os.mkfifo(folder / name)
    message = raises(str(folder / name) if name == "config.json" else str(folder))
    assert message in (f"{folder / name}: not a regular file (a pipe, device or socket): pass the model's "
                       f"config.json or its folder",
                       f"{folder}: no config.json in this folder: pass the folder of a transformers model "
                       f"(save_pretrained writes config.json) or a config.json file")
    with pytest.raises(ModelSourceError, match="not a regular file"):
        read_safetensors_header(folder / name)


# ---- sharded indexes --------------------------------------------------------------------------
def index_folder(tmp_path, shard: str):
    folder = tmp_path / "m"
    write_text(folder / "config.json", json.dumps(TINY_LLAMA))
    write_text(folder / "model.safetensors.index.json",
               json.dumps({"weight_map": {"lm_head.weight": shard}}))
    return folder


@pytest.mark.parametrize("shard", ["../outside.safetensors", "/etc/passwd", "link.safetensors"])
def test_shards_outside_the_folder(tmp_path, shard):
    (tmp_path / "outside.safetensors").write_bytes(safetensors_bytes({"lm_head.weight": OK_ENTRY}, b"\0" * 24))
    folder = index_folder(tmp_path, shard)
    (folder / "link.safetensors").symlink_to(tmp_path / "outside.safetensors")
    assert raises(str(folder)) == (
        f"{folder / 'model.safetensors.index.json'}: shard {shard!r} is outside the model folder {folder}: "
        f"an index may only name files in its own folder"
    )


def test_too_many_shards(tmp_path, monkeypatch):
    monkeypatch.setattr(sth, "MAX_SHARDS", 2)
    folder = tmp_path / "m"
    write_text(folder / "config.json", json.dumps(TINY_LLAMA))
    write_text(folder / "model.safetensors.index.json",
               json.dumps({"weight_map": {f"t{i}": f"s{i}.safetensors" for i in range(3)}}))
    assert "weight_map names 3 shard files, over the limit of 2" in raises(str(folder))


# ---- the hub, offline ---------------------------------------------------------------------------
@pytest.fixture
def closed_hub(monkeypatch, tmp_path):
    """HF_HUB_OFFLINE unset, the endpoint a closed local port, an empty HF_HOME."""
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.delenv("HF_HUB_CACHE")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    hub.forget_probe()
    yield
    hub.forget_probe()


def _download_must_not_run(monkeypatch):
    huggingface_hub = pytest.importorskip("huggingface_hub")

    def called(*args, **kwargs):
        raise AssertionError("hf_hub_download was called while the hub is unreachable")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", called)


def test_unreachable_endpoint_fails_without_calling_the_hub(closed_hub, monkeypatch):
    _download_must_not_run(monkeypatch)
    assert hub.hub_reachable() is False
    assert raises("acme/not-here", OfflineError) == (
        "cannot reach the Hugging Face hub for 'acme/not-here' and it is not in the local cache: use a catalog "
        "name (vramlens models), a local config.json / model folder, or go online "
        "(http://127.0.0.1:9 does not answer within 1 s)"
    )


def test_probe_says_offline_so_download_is_not_called(monkeypatch):
    _download_must_not_run(monkeypatch)
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setattr(hub, "hub_reachable", lambda: False)
    with pytest.raises(OfflineError, match="does not answer within 1 s"):
        load_model("acme/probe-offline")


def test_local_entry_not_found_is_offline_not_a_missing_config(monkeypatch):
    huggingface_hub = pytest.importorskip("huggingface_hub")
    from huggingface_hub.errors import LocalEntryNotFoundError

    def fail(*args, **kwargs):
        raise LocalEntryNotFoundError("Cannot find the requested files in the disk cache\nand outgoing traffic "
                                      "has been disabled.")

    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setattr(hub, "hub_reachable", lambda: True)
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", fail)
    assert raises("acme/local-miss", OfflineError).endswith(
        "or go online (LocalEntryNotFoundError: Cannot find the requested files in the disk cache and outgoing "
        "traffic has been disabled.)"
    )


def test_cached_snapshot_resolves_with_the_hub_unreachable(closed_hub, monkeypatch, tmp_path):
    _download_must_not_run(monkeypatch)
    repo = tmp_path / "hf-home" / "hub" / "models--acme--cached"
    write_text(repo / "refs" / "main", "0123abcd\n")
    write_text(repo / "snapshots" / "0123abcd" / "config.json", json.dumps(TINY_LLAMA))
    spec = load_model("acme/cached")
    assert (spec.name, spec.source, spec.params) == ("acme/cached", "hub-cache", load_model(TINY_LLAMA).params)


def test_a_hostile_ref_is_ignored(closed_hub, monkeypatch, tmp_path):
    _download_must_not_run(monkeypatch)
    repo = tmp_path / "hf-home" / "hub" / "models--acme--evil"
    write_text(repo / "refs" / "main", "../../../elsewhere\n")
    write_text(tmp_path / "hf-home" / "elsewhere" / "config.json", json.dumps(TINY_LLAMA))
    with pytest.raises(OfflineError):
        load_model("acme/evil")
