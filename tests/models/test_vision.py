"""Vision encoders (ViT, CLIP and SigLIP vision towers): counts, tokens, --image-size and its refusals."""

from __future__ import annotations

import pytest

from vramlens.errors import ConfigError, InputError
from vramlens.estimator import estimate
from vramlens.models import load_model, spec_from_config
from vramlens.workload import make_workload, parse_image_size

_TINY = dict(hidden_size=16, intermediate_size=24, num_hidden_layers=2, num_attention_heads=2, image_size=32,
             patch_size=8)


def test_vit_base_count_with_imagenet_head():
    # checked against transformers 5.24 on the meta device: ViTForImageClassification(ViTConfig(num_labels=1000))
    # embeddings: cls 768 + positions 197*768 = 151,296 + conv 768*3*16*16 + 768 = 590,592 -> 742,656
    # block: 4*(768*768 + 768) + 2*2*768 + 768*3072 + 3072 + 3072*768 + 768 = 7,087,872; x12 = 85,054,464
    # final norm 1,536; classifier 1000*768 + 1000 = 769,000
    assert 742_656 + 85_054_464 + 1_536 + 769_000 == 86_567_656
    assert load_model("vit-base").params == 86_567_656


def test_clip_and_siglip_towers_counts():
    # transformers 5.24 on the meta device: CLIPVisionModel(hidden 1024, 24 layers, 16 heads, 4096, 224/14)
    # and SiglipVisionModel(hidden 1152, 27 layers, 16 heads, 4304, 384/14, with its pooling head)
    assert load_model("clip-vit-large-patch14").params == 303_179_776
    assert load_model("siglip-so400m").params == 428_225_600


@pytest.mark.parametrize(("model_type", "arch", "tokens"), [
    ("vit", "ViTForImageClassification", 17),       # (32/8)^2 + the class token
    ("clip_vision_model", "CLIPVisionModel", 17),   # class_embedding
    ("siglip_vision_model", "SiglipVisionModel", 16),  # no class token
])
def test_tokens_from_patches(model_type, arch, tokens):
    spec = spec_from_config({"model_type": model_type, "architectures": [arch], **_TINY})
    assert spec.vision is not None and spec.vision.tokens(32, 32) == tokens
    e = estimate(spec, mode="inference")
    assert e.workload.seq == tokens


def test_image_size_changes_tokens_and_notes():
    e = estimate("vit-base", mode="train", image_size="384")
    assert e.workload.seq == 24 * 24 + 1
    notes = e.to_dict()["notes"]
    assert "384x384 images in patches of 16: 577 tokens per image (with the class token)" in notes
    assert ("the model was built for 224x224: transformers needs interpolate_pos_encoding=True for 384x384 "
            "(the interpolated position table, one per forward, is not counted)") in notes


def test_seq_is_ignored_for_vision_with_a_note():
    notes = estimate("vit-base", seq=1024).to_dict()["notes"]
    assert "ignored: seq=1024: a vision encoder's tokens are its image patches (--image-size)" in notes


def test_parse_image_size():
    assert parse_image_size("224") == (224, 224)
    assert parse_image_size("224x336") == (224, 336)
    assert parse_image_size(384) == (384, 384)
    assert parse_image_size([16, 32]) == (16, 32)
    assert parse_image_size("") is None
    with pytest.raises(ConfigError, match=r"^image_size='abc' must be 224 or HxW such as 224x224$"):
        parse_image_size("abc")


def test_image_size_bounds():
    with pytest.raises(ConfigError, match=r"^image_size=16385x16385 is over the limit of 16,384 pixels a side$"):
        make_workload(image_size=16385)
    with pytest.raises(ConfigError, match=r"^image_size=224x0 must be two whole numbers of pixels >= 1 "):
        make_workload(image_size="224x0")
    assert make_workload(image_size="224").to_dict()["image_size"] == [224, 224]


def test_image_size_refused_for_text_models():
    with pytest.raises(InputError) as e:
        estimate("gpt2", image_size=224)
    assert str(e.value) == ("image_size=224x224 applies to vision encoders (ViT, CLIP and SigLIP vision towers); "
                            "openai-community/gpt2 is a text model: drop --image-size and give --seq")


def test_training_an_image_embedding_is_refused():
    with pytest.raises(InputError) as e:
        estimate("clip-vit-large-patch14", mode="train")
    assert "needs a contrastive loss over a text tower, which is not modelled" in str(e.value)


def test_image_classification_task_applies_to_vit_only():
    assert estimate("vit-base", task="image-classification", mode="train").peak_allocated > 0
    with pytest.raises(InputError, match="task=image-classification does not apply to clip_vision_model"):
        estimate("clip-vit-large-patch14", task="image-classification")
    with pytest.raises(InputError, match="task=image-classification does not apply to llama"):
        estimate("llama-2-7b", task="image-classification")
