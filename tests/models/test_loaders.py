"""load_model from config.json files, folders, safetensors headers, the HF cache and sizes."""

from __future__ import annotations

import json
import struct
import sys

import pytest

from vramlens.errors import InputError, ModelSourceError, OfflineError, UnknownModelError
from vramlens.models import ModelSpec, load_model, read_safetensors_header
from vramlens.models.catalog import find_config

torch = pytest.importorskip("torch", reason="tiny checkpoints are written with safetensors.torch")
st = pytest.importorskip("safetensors.torch", reason="tiny checkpoints are written with safetensors")


@pytest.fixture(autouse=True)
def _no_network(monkeypatch, tmp_path):
    """Every test runs offline, against an empty hub cache of its own."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-hub-cache"))


def tiny_llama_config() -> dict:
    return find_config("tiny-llama")[1]


def write_config(folder, config):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    return folder / "config.json"


def state_dict_of(spec: ModelSpec, dtype=torch.bfloat16) -> dict:
    """Zero tensors named and shaped like the spec's parameters (what save_pretrained writes)."""
    return {t.name: torch.zeros(t.shape, dtype=dtype) for t in spec.parameters()}


# ---- config.json and folders ------------------------------------------------------------------
def test_config_json_file(tmp_path):
    path = write_config(tmp_path / "my-model", tiny_llama_config())
    spec = load_model(str(path))
    assert (spec.name, spec.source, spec.params) == ("my-model", "config.json", load_model("tiny-llama").params)


def test_folder_without_weights(tmp_path):
    write_config(tmp_path / "m", tiny_llama_config())
    spec = load_model(tmp_path / "m")
    assert (spec.source, spec.params) == ("folder", 220_480)


def test_folder_with_safetensors(tmp_path):
    folder = tmp_path / "m"
    write_config(folder, tiny_llama_config())
    st.save_file(state_dict_of(load_model("tiny-llama")), str(folder / "model.safetensors"))
    spec = load_model(folder)
    ref = load_model("tiny-llama")
    assert spec.source == "folder+safetensors"
    assert [(t.name, t.shape, t.role, t.module, t.layer) for t in spec.tensors] == [
        (t.name, t.shape, t.role, t.module, t.layer) for t in ref.tensors]
    assert {t.dtype for t in spec.parameters()} == {None}  # bf16 weights follow the run's dtype
    assert spec.assumed == ()


def test_sharded_checkpoint(tmp_path):
    folder = tmp_path / "sharded"
    write_config(folder, tiny_llama_config())
    sd = state_dict_of(load_model("tiny-llama"))
    names = list(sd)
    shards = {"model-00001-of-00002.safetensors": names[:7], "model-00002-of-00002.safetensors": names[7:]}
    for file, keys in shards.items():
        st.save_file({k: sd[k] for k in keys}, str(folder / file))
    index = {"metadata": {"total_size": 0}, "weight_map": {k: f for f, ks in shards.items() for k in ks}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    spec = load_model(folder)
    assert spec.params == load_model("tiny-llama").params
    assert spec.source == "folder+safetensors"


def test_missing_shard_is_named(tmp_path):
    folder = tmp_path / "broken"
    write_config(folder, tiny_llama_config())
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"a": "shard-1.safetensors"}}))
    with pytest.raises(ModelSourceError) as e:
        load_model(folder)
    assert str(e.value) == (f"{folder / 'model.safetensors.index.json'}: shard 'shard-1.safetensors' listed in "
                            f"weight_map is not in {folder}")


def test_gpt2_checkpoint_without_prefix_and_with_old_buffers(tmp_path):
    # openai-community/gpt2 stores GPT2Model names (h.0..., wte) plus old attn.bias buffers
    folder = tmp_path / "gpt2"
    config = find_config("tiny-gpt2")[1]
    write_config(folder, config)
    ref = load_model("tiny-gpt2")
    sd = {t.name.removeprefix("transformer."): torch.zeros(t.shape) for t in ref.parameters()}
    sd["h.0.attn.bias"] = torch.zeros(1, 1, 128, 128)
    sd["lm_head.weight"] = torch.zeros(1000, 64)  # a stored copy of the tied head
    st.save_file(sd, str(folder / "model.safetensors"))
    spec = load_model(folder)
    assert [t.name for t in spec.tensors] == [t.name for t in ref.tensors]
    assert spec.params == ref.params
    assert spec.assumed == (
        "lm_head.weight in the checkpoint is tied to the input embedding: counted once",
        "1 checkpoint tensors are not part of the GPT2LMHeadModel layout and are not loaded by transformers "
        "(e.g. h.0.attn.bias): ignored",
    )


def test_gptq_like_checkpoint(tmp_path):
    # AutoGPTQ QuantLinear, 4 bits, group 32: qweight (in/8, out) int32, qzeros (in/32, out/8) int32,
    # scales (in/32, out) fp16, g_idx (in,) int32, and a bias the QuantLinear always has.
    folder = tmp_path / "gptq"
    config = {**tiny_llama_config(), "quantization_config": {"quant_method": "gptq", "bits": 4, "group_size": 32}}
    write_config(folder, config)
    ref = load_model("tiny-llama")
    sd = {}
    for t in ref.parameters():
        if t.role == "linear":
            out, k = t.shape
            base = t.name.removesuffix(".weight")
            sd[base + ".qweight"] = torch.zeros(k // 8, out, dtype=torch.int32)
            sd[base + ".qzeros"] = torch.zeros(k // 32, out // 8, dtype=torch.int32)
            sd[base + ".scales"] = torch.zeros(k // 32, out, dtype=torch.float16)
            sd[base + ".g_idx"] = torch.zeros(k, dtype=torch.int32)
            sd[base + ".bias"] = torch.zeros(out, dtype=torch.float16)
        else:
            sd[t.name] = torch.zeros(t.shape, dtype=torch.float16)
    st.save_file(sd, str(folder / "model.safetensors"))
    spec = load_model(folder)
    by = {t.name: t for t in spec.tensors}
    qw = by["model.layers.0.self_attn.q_proj.qweight"]
    assert (qw.role, qw.dtype, qw.shape, qw.logical_shape, qw.module, qw.layer) == (
        "linear", "int32", (8, 64), (64, 64), "q_proj", 0)
    assert (qw.in_features, qw.out_features) == (64, 64)
    up = by["model.layers.1.mlp.up_proj.qweight"]
    assert (up.shape, up.in_features, up.out_features) == ((8, 176), 64, 176)
    sc = by["model.layers.0.self_attn.q_proj.scales"]
    assert (sc.role, sc.dtype, sc.shape, sc.module) == ("other", "fp16", (2, 64), "q_proj")
    assert by["model.layers.0.self_attn.q_proj.bias"].role == "bias"
    assert "model.layers.0.self_attn.q_proj.weight" not in by
    assert by["lm_head.weight"].dtype is None  # not quantized: follows the run's dtype
    assert spec.quantization == {"quant_method": "gptq", "bits": 4, "group_size": 32}
    # stored int32 elements: 4 bits per weight -> 1/8 of the weight count
    n_linear = sum(t.numel for t in ref.parameters() if t.role == "linear")
    assert sum(t.numel for t in spec.tensors if t.name.endswith(".qweight")) == n_linear // 8


def test_bitsandbytes_4bit_like_checkpoint(tmp_path):
    folder = tmp_path / "bnb"
    config = {**tiny_llama_config(), "quantization_config": {"quant_method": "bitsandbytes", "load_in_4bit": True}}
    write_config(folder, config)
    sd = {}
    for t in load_model("tiny-llama").parameters():
        if t.role == "linear":
            sd[t.name] = torch.zeros(t.numel // 2, 1, dtype=torch.uint8)
            sd[t.name + ".absmax"] = torch.zeros(t.numel // 64, dtype=torch.float32)
            sd[t.name + ".quant_map"] = torch.zeros(16, dtype=torch.float32)
            sd[t.name + ".quant_state.bitsandbytes__nf4"] = torch.zeros(100, dtype=torch.uint8)
        else:
            sd[t.name] = torch.zeros(t.shape, dtype=torch.bfloat16)
    st.save_file(sd, str(folder / "model.safetensors"))
    by = {t.name: t for t in load_model(folder).tensors}
    w = by["model.layers.0.mlp.down_proj.weight"]
    assert (w.role, w.dtype, w.shape, w.in_features, w.out_features) == ("linear", "uint8", (5632, 1), 176, 64)
    am = by["model.layers.0.mlp.down_proj.weight.absmax"]
    assert (am.role, am.dtype, am.module, am.layer) == ("other", "fp32", "down_proj", 0)


def test_checkpoint_of_another_model(tmp_path):
    folder = tmp_path / "mixup"
    write_config(folder, tiny_llama_config())
    st.save_file({"encoder.weight": torch.zeros(2, 2)}, str(folder / "model.safetensors"))
    with pytest.raises(ModelSourceError) as e:
        load_model(folder)
    assert str(e.value) == (f"{folder}: no checkpoint tensor matches the LlamaForCausalLM layout of config.json "
                            f"(e.g. 'encoder.weight'): the config and the weights describe different models")


# ---- safetensors headers ------------------------------------------------------------------------
def test_read_safetensors_header_reads_only_the_header(tmp_path):
    path = tmp_path / "x.safetensors"
    st.save_file({"a": torch.zeros(3, 4, dtype=torch.int32), "b": torch.zeros(2, dtype=torch.bfloat16)}, str(path),
                 metadata={"format": "pt"})
    header = read_safetensors_header(path)
    assert header["__metadata__"] == {"format": "pt"}
    assert (header["a"]["dtype"], header["a"]["shape"]) == ("I32", [3, 4])
    assert (header["b"]["dtype"], header["b"]["shape"]) == ("BF16", [2])


def test_bad_safetensors_files(tmp_path):
    short = tmp_path / "short.safetensors"
    short.write_bytes(b"abc")
    with pytest.raises(ModelSourceError) as e:
        read_safetensors_header(short)
    assert str(e.value) == f"{short}: not a safetensors file (shorter than its 8-byte header length)"
    huge = tmp_path / "huge.safetensors"
    huge.write_bytes(struct.pack("<Q", 10**12) + b"{}")
    with pytest.raises(ModelSourceError) as e:
        read_safetensors_header(huge)
    assert str(e.value) == (f"{huge}: not a safetensors file (header length 1000000000000 exceeds the file or "
                            f"the 100 MB limit)")
    garbled = tmp_path / "garbled.safetensors"
    garbled.write_bytes(struct.pack("<Q", 5) + b"{nope")
    with pytest.raises(ModelSourceError) as e:
        read_safetensors_header(garbled)
    assert str(e.value).startswith(f"{garbled}: safetensors header is not valid JSON: ")


def test_unknown_tensor_dtype_is_named(tmp_path):
    folder = tmp_path / "odd"
    write_config(folder, tiny_llama_config())
    header = json.dumps({"model.norm.weight": {"dtype": "C64", "shape": [64], "data_offsets": [0, 512]}}).encode()
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header + bytes(512))
    with pytest.raises(ModelSourceError) as e:
        load_model(folder)
    assert str(e.value).startswith(f"{folder / 'model.safetensors'}: tensor 'model.norm.weight' has dtype 'C64', "
                                   f"which vramlens does not know: known are F64, F32, F16, BF16")


# ---- malformed config.json ------------------------------------------------------------------------
def test_malformed_config_json(tmp_path):
    path = tmp_path / "config.json"
    path.write_text('{"model_type": "llama",}')
    with pytest.raises(ModelSourceError) as e:
        load_model(str(path))
    assert str(e.value) == f"{path}: not valid JSON (line 1, column 24: Expecting property name enclosed in double quotes)"
    path.write_text("[1, 2]")
    with pytest.raises(ModelSourceError) as e:
        load_model(str(path))
    assert str(e.value) == f"{path}: must hold a JSON object, not list"


def test_config_field_errors_name_the_file(tmp_path):
    cfg = {**tiny_llama_config(), "num_key_value_heads": 3}
    path = write_config(tmp_path / "m", cfg)
    with pytest.raises(ModelSourceError) as e:
        load_model(tmp_path / "m")
    assert str(e.value) == f"{path}: num_attention_heads=4 is not divisible by num_key_value_heads=3: fix the config"


def test_a_local_folder_named_like_a_catalog_model_without_config(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "gpt2").mkdir()
    assert load_model("gpt2").name == "openai-community/gpt2"
    write_config(tmp_path / "gpt2", tiny_llama_config())
    assert load_model("gpt2").source == "folder"


def test_folder_without_config(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelSourceError) as e:
        load_model(tmp_path / "empty")
    assert str(e.value) == (f"{tmp_path / 'empty'}: no config.json in this folder: pass the folder of a transformers "
                            f"model (save_pretrained writes config.json) or a config.json file")


# ---- Hugging Face cache and hub ------------------------------------------------------------------
def _fake_cache(root, repo_id, config, commit="0123abcd", with_ref=True):
    repo = root / ("models--" + repo_id.replace("/", "--"))
    snap = repo / "snapshots" / commit
    write_config(snap, config)
    if with_ref:
        (repo / "refs").mkdir(parents=True)
        (repo / "refs" / "main").write_text(commit)
    return snap


def test_hub_id_from_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    _fake_cache(tmp_path / "hub", "acme/tiny-model", tiny_llama_config())
    spec = load_model("acme/tiny-model")
    assert (spec.name, spec.source, spec.params) == ("acme/tiny-model", "hub-cache", 220_480)


def test_hub_cache_under_hf_home_without_refs(tmp_path, monkeypatch):
    monkeypatch.delenv("HF_HUB_CACHE")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
    snap = _fake_cache(tmp_path / "home" / "hub", "acme/other-model", tiny_llama_config(), with_ref=False)
    st.save_file(state_dict_of(load_model("tiny-llama")), str(snap / "model.safetensors"))
    spec = load_model("acme/other-model")
    assert (spec.source, spec.params) == ("hub-cache+safetensors", 220_480)


def test_offline_and_not_cached():
    with pytest.raises(OfflineError) as e:
        load_model("acme/not-cached")
    assert str(e.value) == (
        "cannot reach the Hugging Face hub for 'acme/not-cached' and it is not in the local cache: use a catalog "
        "name (vramlens models), a local config.json / model folder, or go online (HF_HUB_OFFLINE is set)"
    )


def test_huggingface_hub_missing(monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)
    with pytest.raises(OfflineError) as e:
        load_model("acme/needs-hub")
    assert str(e.value) == (
        "cannot reach the Hugging Face hub for 'acme/needs-hub' and it is not in the local cache: use a catalog "
        "name (vramlens models), a local config.json / model folder, or go online (huggingface_hub is not "
        "installed: pip install 'vramlens[trace]')"
    )


def _online(monkeypatch):
    """Online as far as vramlens can tell: HF_HUB_OFFLINE unset and the reachability probe says yes."""
    from vramlens.models import hub

    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setattr(hub, "hub_reachable", lambda: True)


def _hub_raising(monkeypatch, exc):
    huggingface_hub = pytest.importorskip("huggingface_hub")
    _online(monkeypatch)

    def fail(*args, **kwargs):
        raise exc

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", fail)


def test_hub_unreachable(monkeypatch):
    _hub_raising(monkeypatch, ConnectionError("Name or service not known"))
    with pytest.raises(OfflineError) as e:
        load_model("acme/unreachable")
    assert str(e.value).endswith("or go online (ConnectionError: Name or service not known)")


def test_hub_has_no_such_repo(monkeypatch):
    class RepositoryNotFoundError(Exception):
        pass

    _hub_raising(monkeypatch, RepositoryNotFoundError("404"))
    with pytest.raises(UnknownModelError) as e:
        load_model("acme/llama-2-7b")
    assert str(e.value) == (
        "unknown model 'acme/llama-2-7b': the hub has no such repository (or it is private: log in with hf auth "
        "login); closest catalog names: llama-2-7b, llama-2-70b, llama2-7b, codellama-7b, llama2-70b"
    )


def test_gated_repo(monkeypatch):
    class GatedRepoError(Exception):
        pass

    _hub_raising(monkeypatch, GatedRepoError("401"))
    with pytest.raises(ModelSourceError) as e:
        load_model("meta-llama/Llama-9-1B")
    assert str(e.value) == (
        "meta-llama/Llama-9-1B: the hub repository is gated: accept its license on huggingface.co and log in "
        "(hf auth login), or use a catalog name or a local config.json"
    )


def test_hub_download_is_used_when_online(monkeypatch, tmp_path):
    huggingface_hub = pytest.importorskip("huggingface_hub")
    _online(monkeypatch)
    path = write_config(tmp_path / "dl", tiny_llama_config())
    calls = []
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", lambda repo, file, **kw: calls.append((repo, file)) or str(path))
    monkeypatch.setattr(huggingface_hub, "get_safetensors_metadata", lambda repo: (_ for _ in ()).throw(OSError()))
    spec = load_model("acme/online-model")
    assert calls == [("acme/online-model", "config.json")]
    assert (spec.name, spec.source, spec.params) == ("acme/online-model", "hub", 220_480)


def test_hub_headers_by_range_requests(monkeypatch, tmp_path):
    from types import SimpleNamespace

    huggingface_hub = pytest.importorskip("huggingface_hub")
    _online(monkeypatch)
    config = {k: v for k, v in tiny_llama_config().items() if k != "torch_dtype"}
    path = write_config(tmp_path / "dl", config)
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", lambda repo, file, **kw: str(path))
    tensors = {t.name: SimpleNamespace(dtype="BF16", shape=list(t.shape)) for t in load_model("tiny-llama").parameters()}
    meta = SimpleNamespace(files_metadata={"model.safetensors": SimpleNamespace(tensors=tensors)})
    monkeypatch.setattr(huggingface_hub, "get_safetensors_metadata", lambda repo: meta)
    spec = load_model("acme/online-with-weights")
    assert (spec.source, spec.params, spec.torch_dtype) == ("hub+safetensors", 220_480, "bf16")


# ---- names, caching, dicts and sizes ----------------------------------------------------------
def test_unknown_name_message():
    with pytest.raises(UnknownModelError) as e:
        load_model("lama-2-7b")
    assert str(e.value) == (
        "unknown model 'lama-2-7b': closest catalog names: llama-2-7b, llama-2-70b, llama2-7b, llama2-70b, "
        "llama-3-70b; or pass a local config.json / model folder, or a hub id when online"
    )


def test_catalog_names_are_cached():
    """Every spelling of a catalog name answers the one cached spec (benchmarks/bench_allocator.py times it)."""
    a = load_model("Llama-3.1-405B")
    assert load_model("meta-llama/llama-3.1-405b") is a
    assert load_model("llama-3.1-405b") is a


def test_dict_and_spec_sources():
    spec = load_model(tiny_llama_config())
    assert (spec.source, spec.params) == ("config", 220_480)
    assert load_model(spec) is spec


def test_generic_params():
    spec = load_model(params="7B")
    assert spec.source == "generic"
    assert spec.name == "generic-7B"
    assert abs(spec.params - 7e9) / 7e9 < 0.01
    assert "hidden_size=4096" in spec.assumed
    assert spec.architecture == "LlamaForCausalLM"
    for size in ("125M", "1.5B", "13B", "70B", "405B"):
        n = load_model(params=size).params
        from vramlens.units import parse_count

        assert abs(n - parse_count(size)) / parse_count(size) < 0.01, size


def test_generic_params_errors():
    with pytest.raises(InputError) as e:
        load_model(params="1M")
    assert str(e.value) == ("params='1M' is below 50.00M, the smallest generic decoder: use a catalog name or a "
                            "config.json for tiny models")
    with pytest.raises(InputError) as e:
        load_model("gpt2", params="7B")
    assert str(e.value) == ("give a model or params, not both (model='gpt2', params='7B'): params builds a "
                            "generic decoder when no model is known")
    with pytest.raises(InputError) as e:
        load_model()
    assert str(e.value) == ("no model given: pass a catalog name, a config.json or model folder, a hub id, or "
                            "params such as '7B'")
