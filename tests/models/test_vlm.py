"""Vision-language models (models/families/vlm.py): exact counts of the catalog VLMs, the inventory against
transformers on tiny configs, the image facts, and --images' checks and notes."""

from __future__ import annotations

import pytest

from vramlens.errors import ConfigError
from vramlens.estimator import estimate
from vramlens.models import load_model, spec_from_config
from vramlens.workload import make_workload

TINY_LLAVA = {"model_type": "llava", "architectures": ["LlavaForConditionalGeneration"],
              "text_config": {"model_type": "llama", "hidden_size": 64, "intermediate_size": 96,
                              "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 100},
              "vision_config": {"model_type": "clip_vision_model", "hidden_size": 16, "intermediate_size": 24,
                                "num_hidden_layers": 2, "num_attention_heads": 2, "image_size": 32, "patch_size": 8},
              "image_token_index": 99}
TINY_GEMMA3 = {"model_type": "gemma3", "architectures": ["Gemma3ForConditionalGeneration"],
               "text_config": {"model_type": "gemma3_text", "hidden_size": 64, "intermediate_size": 96,
                               "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                               "head_dim": 16, "vocab_size": 100},
               "vision_config": {"model_type": "siglip_vision_model", "hidden_size": 16, "intermediate_size": 24,
                                 "num_hidden_layers": 2, "num_attention_heads": 2, "image_size": 32, "patch_size": 4,
                                 "vision_use_head": False},
               "mm_tokens_per_image": 16, "image_token_index": 99}


@pytest.mark.parametrize(("name", "params", "tower", "projector"), [
    # tower: CLIP ViT-L/14-336 303,507,456; projector 1024*4096 + 4096 + 4096*4096 + 4096 = 20,979,712
    ("llava-1.5-7b", 7_063_427_072, 303_507_456, 20_979_712),
    # SigLIP 896/14 (27 blocks of 1152); projector 1152 * 2560 + 1152 = 2,950,272
    ("gemma-3-4b-it-vision", 4_300_079_472, 416_866_032, 2_950_272),
    ("gemma-3-12b-it-vision", 12_187_325_040, 416_866_032, 4_424_832),  # 1152 * 3840 + 1152
    ("gemma-3-27b-it-vision", 27_432_406_640, 416_866_032, 6_194_304),  # 1152 * 5376 + 1152
])
def test_catalog_vlm_counts(name, params, tower, projector):
    s = load_model(name)
    assert s.params == params
    assert sum(t.numel for t in s.tensors if t.name.startswith("model.vision_tower.") and t.role != "buffer") == tower
    assert sum(t.numel for t in s.tensors if t.name.startswith("model.multi_modal_projector.")) == projector


def test_text_names_stay_text_only():
    # gemma-3-4b-it is the text model alone (Gemma3ForCausalLM over text_config), as test_param_counts pins it
    assert load_model("gemma-3-4b-it").params == 3_880_263_168
    assert load_model("gemma-3-4b-it").vlm is None


def test_image_facts():
    llava = load_model("llava-1.5-7b").vlm
    assert llava is not None
    # (336 / 14)^2 = 576 patches; the "default" strategy drops CLIP's class token: 576 features, 576 tokens
    assert (llava.image_tokens, llava.feature_tokens, llava.image_token_id, llava.image_size) == (576, 576, 32000, 336)
    assert llava.projector == "mlp2" and llava.tower.n_layers == 24
    gemma = load_model("gemma-3-4b-it-vision").vlm
    assert gemma is not None
    # (896 / 14)^2 = 4,096 patches avg-pooled 4x4 to mm_tokens_per_image = 256
    assert (gemma.image_tokens, gemma.feature_tokens, gemma.image_size) == (256, 4096, 896)


def test_llava_last_tower_block_is_outside_the_loss():
    # vision_feature_layer=-2: hidden_states[23] of 25 is the 23rd block's output; block 23 (8 tensors x 2) and
    # post_layernorm (weight, bias) get no gradient
    s = load_model("llava-1.5-7b")
    assert len(s.outside_loss) == 18
    assert all(n.startswith(("model.vision_tower.encoder.layers.23.", "model.vision_tower.post_layernorm."))
               for n in s.outside_loss)


def test_images_add_the_processors_tokens():
    e = estimate(load_model("llava-1.5-7b"), make_workload(mode="inference", seq=100, images=2))
    assert "2 image(s) per sample at 336x336: 1,152 image tokens (576 per image) added to seq=100, 1,252 tokens in " \
           "the decoder" in e.breakdown.notes
    assert e.workload.seq == 100  # the workload as given: seq + image tokens = 1,252 in the decoder


def test_images_on_a_text_model_is_refused():
    with pytest.raises(ConfigError) as ei:
        estimate(load_model("gemma-3-4b-it"), make_workload(images=1))
    assert str(ei.value) == (
        "images=1 applies to vision-language models (gemma-3-4b-it-vision, gemma-3-12b-it-vision, "
        "gemma-3-27b-it-vision, llama-4-scout-vision, llama-4-maverick-vision, llava-1.5-7b, qwen2.5-vl-3b, "
        "qwen2.5-vl-7b, llava-v1.6-mistral-7b, llama-4-scout-instruct-vision); "
        "google/gemma-3-4b-it has no vision tower: drop --images")


def test_the_refusal_names_every_catalog_entry_that_takes_images():
    from vramlens.models.catalog import catalog_names, vlm_names

    takes_images = set()
    for name in catalog_names():
        spec = load_model(name)
        if spec.vlm is not None:
            takes_images.add(spec.name)
    named = {load_model(n).name for n in vlm_names()}
    assert named == takes_images
    assert len(vlm_names()) == len(named)  # one name per checkpoint


def test_images_bounds():
    with pytest.raises(ConfigError) as ei:
        make_workload(images=1025)
    assert str(ei.value) == "images=1,025 is over the limit of 1,024 images per sample"
    with pytest.raises(ConfigError) as ei:
        make_workload(images=-1)
    assert str(ei.value) == "images=-1 must be a whole number >= 0 (images per sample)"


def test_vlm_inventory_matches_transformers():
    pytest.importorskip("torch", reason="the reference model is built with torch on the meta device")
    pytest.importorskip("transformers", reason="the reference inventory comes from transformers")
    from _hf_meta import hf_tensors, ours

    for cfg in (TINY_LLAVA, TINY_GEMMA3, load_model("llava-1.5-7b").config,
                load_model("gemma-3-4b-it-vision").config):
        spec = spec_from_config(cfg, multimodal=True)
        ref_params, ref_buffers = hf_tensors(cfg)
        got_params, got_buffers = ours(spec)
        assert got_params == ref_params
        assert got_buffers == ref_buffers


@pytest.mark.parametrize("name", ["llava-1.5-7b", "gemma-3-4b-it-vision"])
@pytest.mark.parametrize("images", [0, 1, 3])
def test_advisor_fast_memory_equals_the_estimate(name, images):
    # the advisor's memoized figures (advise.FastMemory) fold the image path in as estimate_spec does
    from vramlens.advise.fastmem import FastMemory
    from vramlens.estimator.core import estimate_spec
    from vramlens.hardware import get_gpu

    spec, gpu = load_model(name), get_gpu("H100-80GB")
    for mode in ("train", "inference"):
        w = make_workload(mode=mode, batch=2, seq=256, images=images)
        assert FastMemory(spec, gpu).totals(w) == (estimate_spec(spec, w, gpu).breakdown.device_total,
                                                   estimate_spec(spec, w, gpu).breakdown.host_bytes)


def test_fit_on_a_vlm_with_images():
    from vramlens.advise import fit

    r = fit("llava-1.5-7b", gpu="A100-40GB", mode="train", images=1, seq=512)
    assert r.plans or r.closest


def test_place_counts_the_image_tokens_in_the_kv_cache():
    from vramlens.advise.place import place
    from vramlens.hardware import get_gpu

    spec, gpu = load_model("llava-1.5-7b"), get_gpu("A100-40GB")

    def on_gpu(images: int) -> int:
        p = place(spec, gpu, workload=make_workload(mode="inference", seq=512, new_tokens=128, images=images))
        return next(o for o in p.options if o.kind == "gpu").device_bytes[0]

    # 4 images x 576 tokens more in the cache: 32 layers x (k, v) x 4,096 x 2 B x 2,304 tokens = 1,207,959,552 B
    assert on_gpu(4) - on_gpu(0) == 1_207_959_552


def test_web_api_takes_images_as_the_cli(capsys):
    pytest.importorskip("fastapi", reason="the web app needs the [web] extra (fastapi)")
    import json

    from fastapi.testclient import TestClient

    from vramlens.cli.main import main
    from vramlens.web import create_app

    with TestClient(create_app(offline=True), base_url="http://127.0.0.1") as client:
        r = client.get("/api/estimate", params={"model": "llava-1.5-7b", "mode": "inference", "images": 2})
    assert r.status_code == 200, r.text
    capsys.readouterr()
    assert main(["estimate", "llava-1.5-7b", "--mode", "inference", "--images", "2", "--json"]) == 0
    assert r.json() == json.loads(capsys.readouterr().out)
    assert r.json()["workload"]["images"] == 2
