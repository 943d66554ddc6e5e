"""LLaVA-NeXT (models/families/vlm.py llava_next_parts, models/spec.py AnyRes): the inventory against transformers
on the meta device, the anyres image tokens and crops against transformers' own processor arithmetic, the catalog
entry's exact counts, the estimate's notes and the bad-config lines."""

from __future__ import annotations

import pytest

from vramlens.errors import ModelSourceError
from vramlens.estimator import estimate
from vramlens.models import load_model, spec_from_config
from vramlens.models.spec import AnyRes, select_best_resolution
from vramlens.workload import make_workload

PINPOINTS = ((336, 672), (672, 336), (672, 672), (1008, 336), (336, 1008))  # LlavaNextConfig's default

TINY_NEXT = {"model_type": "llava_next", "architectures": ["LlavaNextForConditionalGeneration"],
             "text_config": {"model_type": "mistral", "hidden_size": 64, "intermediate_size": 96,
                             "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                             "vocab_size": 100},
             "vision_config": {"model_type": "clip_vision_model", "hidden_size": 16, "intermediate_size": 24,
                               "num_hidden_layers": 2, "num_attention_heads": 2, "image_size": 32, "patch_size": 8},
             "image_grid_pinpoints": [[32, 64], [64, 32], [64, 64]], "image_token_index": 99}


def test_catalog_counts():
    s = load_model("llava-v1.6-mistral-7b")
    # CLIP ViT-L/14-336 303,507,456 + projector 1024*4096 + 4096 + 4096*4096 + 4096 = 20,979,712 + image_newline
    # 4,096 + Mistral-7B at vocab 32,064: 7,241,732,096 + 2 * 64 * 4,096 = 7,242,256,384
    assert s.params == 7_566_747_648  # 303,507,456 + 20,979,712 + 4,096 + 7,242,256,384
    assert s.architecture == "LlavaNextForConditionalGeneration"
    assert [t.shape for t in s.tensors if t.name == "model.image_newline"] == [(4096,)]
    v = s.vlm
    assert v is not None and v.anyres is not None
    assert v.anyres.pinpoints == PINPOINTS and (v.anyres.crop, v.anyres.patch) == (336, 14)
    # the default 672x672 image: 2x2 tiles, 48x48 patches, no padding: 2,304 + 48 newlines + 576 base = 2,928
    assert v.image_tokens == 2928
    assert s.n_layers == 32 and s.n_kv_heads == 8 and v.tower.n_layers == 24


@pytest.mark.parametrize(("size", "grid", "crops", "tokens"), [
    ((672, 672), (2, 2), 5, 2928),  # 48*48 + 48 + 576
    ((560, 560), (2, 2), 5, 2928),  # upscaled to the same 672x672 grid
    ((336, 336), (1, 2), 3, 1176),  # 336x672 wastes least: 24x48 grid unpadded to 24x24: 576 + 24 + 576
    ((480, 640), (2, 2), 5, 2340),  # 48x48 unpadded to 36 rows: 36*48 + 36 + 576
    ((1000, 300), (3, 1), 4, 2232),  # 1008x336: 72x24 unpadded to 72x20 (new width 21, padding 1 a side)
    ((1080, 1920), (2, 2), 5, 1948),  # 48x48 unpadded to 28 rows: 28*48 + 28 + 576
])
def test_anyres_grid_and_tokens(size, grid, crops, tokens):
    a = AnyRes(pinpoints=PINPOINTS, crop=336, patch=14)
    assert (a.grid(*size), a.crops(*size), a.tokens(*size)) == (grid, crops, tokens)


def test_tokens_and_crops_equal_transformers_processor():
    """LlavaNextProcessor._get_number_of_features (less the class token, as the "default" strategy does) and
    image_size_to_num_patches, over sizes of every aspect."""
    pytest.importorskip("transformers", reason="the reference arithmetic is transformers' processor")
    from types import MethodType, SimpleNamespace

    from transformers.image_processing_utils import select_best_resolution as hf_best
    from transformers.models.llava_next.modeling_llava_next import image_size_to_num_patches
    from transformers.models.llava_next.processing_llava_next import LlavaNextProcessor

    stub = SimpleNamespace(image_processor=SimpleNamespace(image_grid_pinpoints=[list(p) for p in PINPOINTS]),
                           patch_size=14, num_additional_image_tokens=1)
    stub._get_unpadded_features = MethodType(LlavaNextProcessor._get_unpadded_features, stub)
    a = AnyRes(pinpoints=PINPOINTS, crop=336, patch=14)
    sizes = [(h, w) for h in (1, 100, 336, 500, 672, 777, 1008, 2000) for w in (1, 90, 336, 640, 672, 1024, 3000)]
    for h, w in sizes:
        assert select_best_resolution(h, w, PINPOINTS) == hf_best((h, w), [list(p) for p in PINPOINTS])
        assert a.tokens(h, w) == LlavaNextProcessor._get_number_of_features(stub, h, w, 336, 336) - 1, (h, w)
        assert a.crops(h, w) == image_size_to_num_patches((h, w), [list(p) for p in PINPOINTS], 336), (h, w)


def test_inventory_matches_transformers():
    pytest.importorskip("torch", reason="the reference model is built with torch on the meta device")
    pytest.importorskip("transformers", reason="the reference inventory comes from transformers")
    from _hf_meta import hf_tensors, ours

    for cfg in (TINY_NEXT, load_model("llava-v1.6-mistral-7b").config):
        spec = spec_from_config(cfg, multimodal=True)
        ref_params, ref_buffers = hf_tensors(cfg)
        got_params, got_buffers = ours(spec)
        assert got_params == ref_params
        assert got_buffers == ref_buffers


def test_image_size_picks_the_grid_and_the_tower_rows():
    spec = load_model("llava-v1.6-mistral-7b")
    e = estimate(spec, make_workload(mode="inference", seq=100, images=2))
    assert ("672x672 images (the default: --image-size sets it) on the 2x2 anyres grid (672x672): 5 crops of "
            "336x336 per image in the tower, 2,928 image tokens per image (base crop, unpadded tiles, one newline a "
            "row)") in e.breakdown.notes
    assert "2 image(s) per sample: 5,856 image tokens added to seq=100, 5,956 tokens in the decoder" \
        in e.breakdown.notes
    e2 = estimate(spec, make_workload(mode="inference", seq=100, images=2, image_size=(336, 336)))
    assert ("336x336 images on the 1x2 anyres grid (336x672): 3 crops of 336x336 per image in the tower, 1,176 "
            "image tokens per image (base crop, unpadded tiles, one newline a row)") in e2.breakdown.notes
    # 2 images x (2,928 - 1,176) tokens fewer in the KV cache: 32 layers x (k, v) x 8 x 128 x 2 B x 3,504
    assert e.breakdown["kv_cache"] - e2.breakdown["kv_cache"] == 459_276_288
    assert e.breakdown["activations"] > e2.breakdown["activations"]


def test_advisor_fast_memory_equals_the_estimate():
    from vramlens.advise.fastmem import FastMemory
    from vramlens.estimator.core import estimate_spec
    from vramlens.hardware import get_gpu

    spec, gpu = load_model("llava-v1.6-mistral-7b"), get_gpu("H100-80GB")
    for mode in ("train", "inference"):
        for size in (None, (336, 336), (1000, 300)):
            w = make_workload(mode=mode, batch=2, seq=256, images=1, image_size=size)
            b = estimate_spec(spec, w, gpu).breakdown
            assert FastMemory(spec, gpu).totals(w) == (b.device_total, b.host_bytes)


def test_bad_pinpoints():
    with pytest.raises(ModelSourceError) as ei:
        spec_from_config({**TINY_NEXT, "image_grid_pinpoints": [[32, 48]]}, multimodal=True)
    assert str(ei.value) == ("config: image_grid_pinpoints entry [32, 48] must be multiples of the tower's "
                             "image_size=32")
    with pytest.raises(ModelSourceError) as ei:
        spec_from_config({**TINY_NEXT, "image_grid_pinpoints": [[32]]}, multimodal=True)
    assert str(ei.value) == "config: image_grid_pinpoints entry [32] must be a [height, width] pair of positive " \
                            "whole numbers"


def test_seq_is_not_ignored_beside_an_image_size_on_a_vlm():
    e = estimate(load_model("llava-v1.6-mistral-7b"),
                 make_workload(mode="inference", seq=64, images=1, image_size=(1080, 1920)))
    assert not [n for n in e.breakdown.notes if n.startswith("ignored: seq=")]
    # 28 rows of 48 unpadded patches + 28 newlines + 576 = 1,948 image tokens after the 64 text tokens
    assert "1 image(s) per sample: 1,948 image tokens added to seq=64, 2,012 tokens in the decoder" \
        in e.breakdown.notes
