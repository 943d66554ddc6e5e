"""The defaults vramlens writes down as data equal transformers' own."""

from __future__ import annotations

import dataclasses
import warnings

import pytest

from vramlens.models.defaults import ATTRIBUTE_MAPS, DEFAULTS, LEGACY_ALIASES, POST_INIT_DEFAULTS
from vramlens.models.families import BUILDERS, DEFAULT_ARCHITECTURES

transformers = pytest.importorskip("transformers", reason="the defaults are checked against transformers")


def _config_class(model_type: str):
    from transformers import CONFIG_MAPPING

    return CONFIG_MAPPING[model_type]


def _field_defaults(cls) -> dict:
    return {f.name: f.default for f in dataclasses.fields(cls)}


@pytest.mark.parametrize("model_type", sorted(DEFAULTS))
def test_defaults_equal_transformers_field_defaults(model_type):
    fields = _field_defaults(_config_class(model_type))
    for key, value in DEFAULTS[model_type].items():
        assert key in fields, f"{model_type}: {key} is not a field of the config class"
        assert fields[key] == value, f"{model_type}.{key}: vramlens {value!r}, transformers {fields[key]!r}"


@pytest.mark.parametrize("model_type", sorted(BUILDERS))
def test_every_supported_type_has_defaults_and_a_default_class(model_type):
    assert model_type in DEFAULTS
    assert hasattr(transformers, DEFAULT_ARCHITECTURES[model_type])


@pytest.mark.parametrize("model_type", sorted(BUILDERS))
def test_attribute_maps_equal_transformers(model_type):
    assert ATTRIBUTE_MAPS.get(model_type, {}) == dict(_config_class(model_type).attribute_map)


def test_post_init_defaults_equal_transformers():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        neox = _config_class("gpt_neox")()
        phi = _config_class("phi")()
        phi3 = _config_class("phi3")()
    assert neox.rope_parameters["partial_rotary_factor"] == POST_INIT_DEFAULTS[("gpt_neox", "rotary_pct")]
    assert phi.rope_parameters["partial_rotary_factor"] == POST_INIT_DEFAULTS[("phi", "partial_rotary_factor")]
    assert phi3.rope_parameters["partial_rotary_factor"] == POST_INIT_DEFAULTS[("phi3", "partial_rotary_factor")]


@pytest.mark.parametrize("model_type", sorted(LEGACY_ALIASES))
def test_legacy_aliases_are_accepted_by_transformers(model_type):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for old, new in LEGACY_ALIASES[model_type].items():
            cfg = _config_class(model_type)(**{old: 96})
            assert getattr(cfg, new) == 96


def test_t5_always_ties_lm_head():
    # families/t5.py relies on this: transformers >= 5 forces tie_word_embeddings=True
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert _config_class("t5")(tie_word_embeddings=False).tie_word_embeddings is True
        assert _config_class("mt5")(tie_word_embeddings=False).tie_word_embeddings is True
