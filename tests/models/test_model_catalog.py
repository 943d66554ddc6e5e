"""The catalog's data: coverage, unique names, lookup and listing."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib import resources

import pytest

from vramlens.models import CatalogEntry, list_catalog, load_model
from vramlens.models.catalog import catalog_names, closest_names, find_config

RAW = json.loads(resources.files("vramlens.models").joinpath("data", "catalog.json").read_text())["models"]

REQUIRED = [
    "google-bert/bert-base-uncased", "google-bert/bert-large-uncased", "FacebookAI/roberta-base",
    "FacebookAI/roberta-large", "openai-community/gpt2", "openai-community/gpt2-medium",
    "openai-community/gpt2-large", "openai-community/gpt2-xl", "facebook/opt-125m", "facebook/opt-350m",
    "facebook/opt-1.3b", "facebook/opt-6.7b", "bigscience/bloom-560m", "bigscience/bloom-7b1",
    "microsoft/phi-1_5", "microsoft/phi-2", "microsoft/Phi-3-mini-4k-instruct", "meta-llama/Llama-2-7b-hf",
    "meta-llama/Llama-2-13b-hf", "meta-llama/Llama-2-70b-hf", "meta-llama/Meta-Llama-3-8B",
    "meta-llama/Meta-Llama-3-70B", "meta-llama/Llama-3.1-8B", "meta-llama/Llama-3.1-70B",
    "meta-llama/Llama-3.1-405B", "meta-llama/Llama-3.2-1B", "meta-llama/Llama-3.2-3B",
    "mistralai/Mistral-7B-v0.1", "mistralai/Mixtral-8x7B-v0.1", "Qwen/Qwen2.5-0.5B", "Qwen/Qwen2.5-1.5B",
    "Qwen/Qwen2.5-3B", "Qwen/Qwen2.5-7B", "Qwen/Qwen2.5-14B", "Qwen/Qwen2.5-32B", "Qwen/Qwen2.5-72B",
    "google/gemma-2-2b", "google/gemma-2-9b", "google/gemma-2-27b", "bigcode/starcoder",
    "bigcode/starcoderbase-1b", "tiiuae/falcon-7b", "tiiuae/falcon-40b", "google-t5/t5-small",
    "google-t5/t5-base", "google-t5/t5-large", "google/mt5-base", "bigscience/T0_3B",
]


def test_coverage():
    ids = [e["id"] for e in RAW]
    assert set(REQUIRED) <= set(ids)
    assert len([i for i in ids if not i.startswith("vramlens/")]) >= 116


def test_every_name_is_unique():
    seen: dict[str, str] = {}
    for e in RAW:
        names = {e["id"].lower(), e["id"].rsplit("/", 1)[-1].lower(), *(a.lower() for a in e["aliases"])}
        for n in names:
            assert n not in seen, f"{n!r} names both {seen[n]} and {e['id']}"
            seen[n] = e["id"]


@pytest.mark.parametrize("entry", RAW, ids=[e["id"] for e in RAW])
def test_entry_shape(entry):
    assert set(entry) <= {"id", "aliases", "family", "note", "source", "config", "multimodal_aliases"}
    assert entry["aliases"] and all(a == a.lower() for a in (*entry["aliases"], *entry.get("multimodal_aliases", ())))
    cfg = entry["config"]
    # DeBERTa-v3's config.json names no architectures (transformers' Auto classes pick the class)
    assert isinstance(cfg["model_type"], str) and len(cfg.get("architectures", ["the default"])) == 1
    if "source" in entry:
        assert entry["source"].startswith("https://huggingface.co/" + entry["id"] + "/")


#: The encoder families of issue 11: at least these, each with its source.
ENCODERS = [
    "distilbert/distilbert-base-uncased", "FacebookAI/xlm-roberta-base", "FacebookAI/xlm-roberta-large",
    "google/electra-small-discriminator", "google/electra-base-discriminator", "microsoft/deberta-v3-base",
    "microsoft/deberta-v3-large", "answerdotai/ModernBERT-base", "answerdotai/ModernBERT-large",
]


def test_encoder_entries_have_their_source():
    by_id = {e["id"]: e for e in RAW}
    assert all("source" in by_id[i] for i in ENCODERS)
    families = {by_id[i]["config"]["model_type"] for i in ENCODERS}
    assert families == {"distilbert", "xlm-roberta", "electra", "deberta-v2", "modernbert"}


def test_config_without_architectures_builds_the_family_default():
    spec = load_model("deberta-v3-base")
    assert spec.architecture == "DebertaV2ForMaskedLM"
    assert spec.assumed == ("architecture=DebertaV2ForMaskedLM (config.json has no 'architectures')",)


def test_lookup_is_case_insensitive_on_id_basename_and_alias():
    assert find_config("META-LLAMA/LLAMA-2-7B-HF")[0] == "meta-llama/Llama-2-7b-hf"
    assert find_config("Llama-2-7b-hf")[0] == "meta-llama/Llama-2-7b-hf"
    assert find_config(" llama2-7b ")[0] == "meta-llama/Llama-2-7b-hf"
    assert find_config("llama-2-8b") is None
    assert load_model("GPT2").name == "openai-community/gpt2"


def test_list_catalog():
    entries = list_catalog()
    assert len(entries) == len(RAW)
    first = entries[0]
    assert first == CatalogEntry(id="google-bert/bert-base-uncased", aliases=("bert-base-uncased", "bert-base"),
                                 family="bert", params=109_514_298, kind="encoder")
    kinds = {e.id: e.kind for e in entries}
    assert kinds["google-t5/t5-small"] == "encoder-decoder"
    assert kinds["mistralai/Mixtral-8x7B-v0.1"] == "decoder"
    tiny = [e for e in entries if e.id.startswith("vramlens/")]
    assert tiny and all(e.note for e in tiny)


@pytest.mark.parametrize("name,hub_id", [
    # chat/instruct variants whose config.json equals the base's: aliases of the base entry
    ("Meta-Llama-3-8B-Instruct", "meta-llama/Meta-Llama-3-8B"),
    ("meta-llama/Meta-Llama-3-8B-Instruct", "meta-llama/Meta-Llama-3-8B"),
    ("Llama-2-7b-chat-hf", "meta-llama/Llama-2-7b-hf"),
    ("meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Llama-3.1-8B"),
    ("Mixtral-8x7B-Instruct-v0.1", "mistralai/Mixtral-8x7B-v0.1"),
    ("Qwen2.5-0.5B-Instruct", "Qwen/Qwen2.5-0.5B"),
    ("gemma-2-9b-it", "google/gemma-2-9b"),
    # variants whose config differs: entries of their own
    ("Mistral-7B-Instruct-v0.2", "mistralai/Mistral-7B-Instruct-v0.2"),
    ("Qwen2.5-7B-Instruct", "Qwen/Qwen2.5-7B-Instruct"),
    ("mistralai/Mixtral-8x22B-Instruct-v0.1", "mistralai/Mixtral-8x22B-Instruct-v0.1"),
])
def test_instruct_names_resolve_offline(name, hub_id):
    assert find_config(name)[0] == hub_id
    assert load_model(name).name == hub_id


def test_instruct_variants_with_their_own_config():
    # Mistral v0.2 dropped v0.1's 4,096-token window (an explicit null, not the class default)
    assert load_model("mistral-7b-v0.1").sliding_window == 4096
    assert load_model("mistral-7b-instruct-v0.2").sliding_window is None
    assert find_config("mistral-7b-instruct-v0.2")[1]["rope_theta"] == 1_000_000.0
    # Qwen2.5 7B+ Instruct ship 32,768 positions (YaRN to go further); the base 131,072
    assert load_model("qwen2.5-7b").max_position == 131_072
    assert load_model("qwen2.5-7b-instruct").max_position == 32_768
    # Mistral Nemo: head_dim 128 is not hidden 5120 / 32 heads
    nemo = load_model("mistral-nemo")
    assert (nemo.hidden_size, nemo.n_heads, nemo.head_dim) == (5120, 32, 128)


def test_closest_names():
    assert closest_names("mistral-7b-v0.2")[0] == "mistral-7b-v0.3"
    assert closest_names("completely-different-name") == []
    assert "gpt2" in catalog_names() and "openai-community/gpt2" in catalog_names()


def test_core_modules_import_neither_torch_nor_transformers():
    code = (
        "import sys\n"
        "from vramlens.models import load_model, list_catalog\n"
        "list_catalog(); load_model('mixtral-8x7b'); load_model(params='7B')\n"
        "load_model({'model_type': 'gpt2', 'n_embd': 64, 'n_layer': 1, 'n_head': 4, 'vocab_size': 10})\n"
        "bad = [m for m in ('torch', 'transformers', 'huggingface_hub', 'safetensors', 'peft') if m in sys.modules]\n"
        "print(bad); sys.exit(1 if bad else 0)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
