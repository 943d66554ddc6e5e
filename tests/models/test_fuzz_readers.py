"""Fuzzing the model readers: any config dict or safetensors header gives a spec or a VramlensError.

Nothing else: no TypeError, OverflowError, RecursionError or MemoryError, whatever the input.
Bounded examples and no deadline, so CI stays fast and steady on a busy machine. A crash found
here belongs in scripts/make_model_corpus.py as a case, so it stays tested by the CLI.
"""

from __future__ import annotations

import json
import struct

import pytest

pytest.importorskip("hypothesis", reason="property tests need hypothesis (the dev extra)")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from vramlens.errors import VramlensError
from vramlens.models import load_model
from vramlens.models._reader import FIELD_LIMITS
from vramlens.models.catalog import find_config
from vramlens.models.safetensors_header import SAFETENSORS_DTYPES, read_safetensors_header
from vramlens.models.spec import ModelSpec

FUZZ = settings(max_examples=200, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

BASES = [find_config(name)[1] for name in ("tiny-llama", "tiny-gpt2", "tiny-mixtral", "tiny-t5",
                                           "bert-base-uncased", "opt-125m", "qwen1.5-moe", "falcon-7b")]
KEYS = sorted({*FIELD_LIMITS, *(k for base in BASES for k in base), "partial_rotary_factor", "rotary_pct",
               "rope_scaling", "rope_parameters", "num_labels", "id2label", "mlp_only_layers", "torch_dtype",
               "quantization_config", "tie_word_embeddings"})

# Numbers that break naive readers: huge, negative, zero, non-finite, fractional.
numbers = st.one_of(
    st.integers(min_value=-(10**6), max_value=10**6),
    st.integers(min_value=-(10**400), max_value=10**400),
    st.sampled_from([0, -1, 2**31, 2**63, 10**9, 10**400]),
    st.floats(allow_nan=True, allow_infinity=True),
)
scalars = st.one_of(numbers, st.booleans(), st.none(), st.text(max_size=20))
json_values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=12,
)


@st.composite
def configs(draw) -> dict:
    """A real config with a few of its (or other real) keys replaced by random JSON values."""
    config = dict(draw(st.sampled_from(BASES)))
    for key in draw(st.lists(st.sampled_from(KEYS), max_size=4)):
        config[key] = draw(json_values)
    return config


@FUZZ
@given(configs())
def test_any_config_dict_gives_a_spec_or_a_vramlens_error(config):
    try:
        spec = load_model(config)
    except VramlensError as e:
        assert "\n" not in str(e)
        return
    assert isinstance(spec, ModelSpec)


@FUZZ
@given(configs())
def test_any_config_file_gives_a_spec_or_a_vramlens_error(tmp_path_factory, config):
    path = tmp_path_factory.mktemp("cfg") / "config.json"
    path.write_text(json.dumps(config))  # NaN, Infinity and 400-digit integers as json.dumps writes them
    try:
        spec = load_model(str(path))
    except VramlensError as e:
        assert "\n" not in str(e)
        return
    assert isinstance(spec, ModelSpec)


entries = st.one_of(
    json_values,
    st.fixed_dictionaries(
        {"dtype": st.one_of(st.sampled_from(sorted(SAFETENSORS_DTYPES)), json_values),
         "shape": st.one_of(st.lists(numbers, max_size=4), json_values)},
        optional={"data_offsets": st.one_of(st.lists(numbers, max_size=3), json_values)},
    ),
)
headers = st.one_of(
    st.binary(max_size=64),
    st.dictionaries(st.text(max_size=30), entries, max_size=5).map(lambda h: json.dumps(h).encode()),
    json_values.map(lambda v: json.dumps(v).encode()),
)


@FUZZ
@given(headers, st.one_of(st.none(), st.integers(min_value=0, max_value=2**64 - 1)), st.binary(max_size=32))
def test_any_safetensors_header_gives_tensors_or_a_vramlens_error(tmp_path_factory, raw, length, data):
    folder = tmp_path_factory.mktemp("st")
    (folder / "config.json").write_text(json.dumps(BASES[0]))
    size = len(raw) if length is None else length
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", size) + raw + data)
    try:
        read_safetensors_header(folder / "model.safetensors")
        spec = load_model(str(folder))
    except VramlensError as e:
        assert "\n" not in str(e)
        return
    assert isinstance(spec, ModelSpec)


@pytest.mark.parametrize("config", BASES, ids=lambda c: c.get("model_type", "?"))
def test_the_fuzz_bases_are_valid(config):
    """So that a refusal in the fuzz tests comes from the mutation, not the base."""
    assert isinstance(load_model(config), ModelSpec)
