"""Llama 4 whole (models/families/llama4_vision.py): exact counts of llama-4-scout-vision and llama-4-maverick-vision,
the inventory against transformers on a tiny config and the real ones (meta device), the processor's tiling and
prompt tokens, and the estimate's notes."""

from __future__ import annotations

import pytest

from vramlens.errors import ModelSourceError
from vramlens.estimator import estimate
from vramlens.estimator.core import vision_figures
from vramlens.models import load_model, spec_from_config
from vramlens.models.spec import TiledImages
from vramlens.workload import make_workload

TINY = {"model_type": "llama4", "architectures": ["Llama4ForConditionalGeneration"],
        "text_config": {"hidden_size": 64, "intermediate_size": 32, "intermediate_size_mlp": 96,
                        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
                        "vocab_size": 300, "num_local_experts": 2},
        "vision_config": {"hidden_size": 48, "intermediate_size": 192, "num_hidden_layers": 2,
                          "num_attention_heads": 4, "image_size": 56, "patch_size": 14, "vision_output_dim": 80,
                          "projector_input_dim": 80, "projector_output_dim": 80}}

#: the vision part of both checkpoints (the same vision_config): class 1,408; positions 577*1408 = 812,416; patch
#: linear 1408*588 = 827,904; layernorm_pre/post 2*2*1408 = 5,632; a block 4*(1408*1408 + 1408) + (1408*5632 + 5632)
#: + (5632*1408 + 1408) + 4*1408 = 23,807,872, x34 = 809,467,648; adapter fc1 4096*5632 = 23,068,672, fc2
#: 4096*4096 = 16,777,216: tower 850,960,896; projector linear_1 5120*4096 = 20,971,520: 871,932,416
VISION_PART = 871_932_416


@pytest.mark.parametrize(("name", "text"), [
    ("llama-4-scout-vision", 107_769_861_120),
    ("llama-4-maverick-vision", 400_711_848_960),
])
def test_catalog_counts(name, text):
    s = load_model(name)
    assert s.params == text + VISION_PART  # Scout 108,641,793,536; Maverick 401,583,781,376
    tower = sum(t.numel for t in s.tensors if t.name.startswith("vision_model.") and t.role != "buffer")
    assert tower == 850_960_896
    assert s.architecture == "Llama4ForConditionalGeneration" and s.vlm is not None and s.vlm.tiled is not None
    assert load_model(name.removesuffix("-vision")).params == text  # the plain name stays the text model


def test_facts_on_the_spec():
    v = load_model("llama-4-scout-vision").vlm
    assert v is not None and v.tiled is not None
    # one 336x336 tile by default: (336/14)**2 = 576 patches, x 0.5**2 = 144 image tokens; 577 tower tokens
    assert (v.image_size, v.image_tokens, v.feature_tokens, v.image_token_id) == (336, 144, 144, 200_092)
    assert v.tower.vision.tokens(336, 336) == 577 and v.tower.n_layers == 34 and v.tower_prefix == "vision_model."
    assert (v.tower.norm, v.tower.gated_mlp, v.tower.activation) == ("layernorm", False, "gelu")


@pytest.mark.parametrize(("size", "canvas", "tiles", "image", "prompt"), [
    ((336, 336), (1, 1), 1, 144, 147),       # one tile, no global tile: start, <|image|>, end
    ((672, 672), (2, 2), 5, 720, 727),       # 4 tiles + global = 5 x 144; 3 + 2*1 x-seps + 2 y-seps
    ((1000, 600), (3, 2), 7, 1008, 1017),    # 3x2 canvas: scale min(1008/1000, 672/600) = 1.008; 3 + 3*1 + 3
    ((1080, 1920), (3, 5), 16, 2304, 2322),  # 15 tiles + global; 3 + 3*4 + 3
    ((100, 100), (1, 1), 1, 144, 147),       # upscaled onto one tile
])
def test_tiles_and_tokens(size, canvas, tiles, image, prompt):
    t = TiledImages()
    assert t.canvas(*size) == canvas
    assert t.tiles(*size) == tiles
    assert t.image_tokens(*size) == image
    assert t.prompt_tokens(*size) == prompt


def test_tiling_equals_transformers():
    torch = pytest.importorskip("torch")
    ip = pytest.importorskip("transformers.models.llama4.image_processing_llama4",
                             reason="Llama4ImageProcessorFast needs torchvision")
    from transformers.image_utils import SizeDict

    res = torch.tensor(ip.find_supported_resolutions(16, SizeDict(height=336, width=336)))
    t = TiledImages()
    for h, w in [(336, 336), (672, 672), (1000, 600), (1080, 1920), (100, 100), (4000, 100), (333, 777), (50, 3000),
                 (2000, 2000), (700, 336)]:
        assert t.canvas(h, w) == tuple(int(x) // 336 for x in ip.get_best_fit((h, w), res)), (h, w)


@pytest.mark.parametrize(("size", "canvas"), [((336, 336), (1, 1)), ((672, 672), (2, 2)), ((1000, 600), (3, 2)),
                                              ((1080, 1920), (3, 5)), ((4000, 100), (12, 1))])
def test_prompt_tokens_equal_transformers(size, canvas):
    pytest.importorskip("torch")
    proc = pytest.importorskip("transformers.models.llama4.processing_llama4")
    t = TiledImages()
    assert t.canvas(*size) == canvas
    text = proc.Llama4Processor._prompt_split_image(None, canvas, 144)
    assert text.count("<|patch|>") == t.image_tokens(*size)
    assert text.count("<|") == t.prompt_tokens(*size)


def test_inventory_equals_transformers_on_meta():
    torch = pytest.importorskip("torch")
    tf = pytest.importorskip("transformers")
    from vramlens.models.catalog import find_config

    def check(cfg):
        spec = spec_from_config(cfg, multimodal=True)
        with torch.device("meta"):
            m = tf.Llama4ForConditionalGeneration(tf.Llama4Config(
                **{k: v for k, v in cfg.items() if k not in ("model_type", "architectures", "transformers_version")}))
        got = {n: tuple(p.shape) for n, p in m.named_parameters()}
        # freqs_ci is complex64: the spec holds its fp32 view_as_real (..., 2), the same bytes
        got.update({n: tuple(b.shape) + ((2,) if b.is_complex() else ()) for n, b in m.named_buffers()})
        assert {t.name: tuple(t.shape) for t in spec.tensors} == got
        return sum(p.numel() for p in m.parameters())

    assert check(TINY) == spec_from_config(TINY, multimodal=True).params == 213_120
    for name in ("llama-4-scout", "llama-4-maverick"):
        found = find_config(name)
        assert found is not None
        assert check(found[1]) == load_model(f"{name}-vision").params


def test_bad_vision_config_one_line():
    bad = {**TINY, "vision_config": {**TINY["vision_config"], "intermediate_size": 100}}
    with pytest.raises(ModelSourceError) as e:
        spec_from_config(bad, multimodal=True)
    assert "intermediate_size=100 must be 4 * hidden_size=192" in str(e.value)
    assert "\n" not in str(e.value)


def test_estimate_counts_tiles_and_notes():
    s = load_model("llama-4-scout-vision")
    w = make_workload(mode="inference", batch=1, seq=512, images=2, image_size=(672, 672))
    assert vision_figures(s, w).tokens == 2 * 727  # 720 image tokens and 7 special ones an image
    notes = estimate(s, mode="inference", batch=1, seq=512, images=2, image_size=(672, 672)).breakdown.notes
    assert any("2x2 canvas of 336x336 tiles" in n and "5 tower row(s) of 577 tokens" in n for n in notes), notes
    assert any("1,454 tokens added to seq=512, 1,966 tokens in the decoder" in n for n in notes), notes
    default = estimate(s, mode="inference", batch=1, seq=512, images=1).breakdown.notes
    assert any("336x336 images (the default: --image-size sets it)" in n for n in default), default
    # training: more tiles keep more of the tower (5 rows an image against 1)
    big = vision_figures(s, make_workload(mode="train", method="lora", batch=1, seq=64, images=1,
                                          image_size=(672, 672))).saved
    one = vision_figures(s, make_workload(mode="train", method="lora", batch=1, seq=64, images=1)).saved
    assert big > 4 * one


def test_fastmem_folds_the_tiles_in_as_estimate_spec():
    from vramlens.advise.fastmem import FastMemory
    from vramlens.estimator.core import estimate_spec
    from vramlens.hardware import get_gpu

    spec, gpu = load_model("llama-4-scout-vision"), get_gpu("H100-80GB")
    for mode, size in (("train", None), ("inference", (1000, 600))):
        w = make_workload(mode=mode, batch=1, seq=256, images=2, image_size=size)
        e = estimate_spec(spec, w, gpu).breakdown
        assert FastMemory(spec, gpu).totals(w) == (e.device_total, e.host_bytes)


def test_training_notes_name_the_adapted_linears():
    s = load_model("llama-4-scout-vision")
    lora = estimate(s, make_workload(mode="train", method="lora", batch=1, seq=64, images=1,
                                     lora_targets=("fc1", "linear_1"))).breakdown.notes
    assert any(n.endswith("the adapter (fc1, fc2) and the projector (linear_1) that is fc1, linear_1") for n in lora), lora
    full = estimate(s, make_workload(mode="train", batch=1, seq=64, images=1)).breakdown.notes
    assert any(n.startswith("full fine-tuning trains the vision tower, its pixel-shuffle adapter") for n in full), full
