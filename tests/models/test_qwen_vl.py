"""Qwen2.5-VL (models/families/qwen_vl.py): exact counts of the catalog entries, the inventory against transformers on
a tiny config and the real ones (meta device), smart_resize's image tokens and the windows, the estimate's notes and
the tracer's one-line refusal."""

from __future__ import annotations

from collections import Counter

import pytest

from vramlens.errors import ConfigError
from vramlens.estimator import estimate
from vramlens.estimator.core import vision_figures
from vramlens.models import load_model, spec_from_config
from vramlens.models.spec import smart_resize
from vramlens.workload import make_workload

TINY = {"model_type": "qwen2_5_vl", "architectures": ["Qwen2_5_VLForConditionalGeneration"],
        "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "vocab_size": 128, "rope_scaling": {"type": "mrope", "mrope_section": [2, 3, 3]},
        "vision_config": {"model_type": "qwen2_5_vl", "depth": 3, "hidden_size": 32, "intermediate_size": 40,
                          "num_heads": 4, "out_hidden_size": 64, "fullatt_block_indexes": [1]}}


@pytest.mark.parametrize(("name", "params", "tower"), [
    # tower: Conv3d 1280*3*2*14*14 = 1,505,280; a block 2*1280 + (1280*3840 + 3840) + (1280*1280 + 1280)
    # + 2*(1280*3420 + 3420) + (3420*1280 + 1280) = 19,702,200, x32 = 630,470,400; merger ln_q 1,280,
    # mlp.0 5120*5120 + 5120 = 26,219,520, mlp.2 5120*2048 + 2048 = 10,487,808: 668,684,288
    ("qwen2.5-vl-3b", 3_754_622_976, 668_684_288),
    # the same tower but mlp.2 5120*3584 + 3584 = 18,353,664: 631,976,960 + 26,219,520 + 18,353,664 = 676,550,144
    ("qwen2.5-vl-7b-instruct", 8_292_166_656, 676_550_144),
])
def test_catalog_counts(name, params, tower):
    s = load_model(name)
    assert s.params == params
    assert sum(t.numel for t in s.tensors if t.name.startswith("model.visual.") and t.role != "buffer") == tower
    assert s.architecture == "Qwen2_5_VLForConditionalGeneration" and s.vlm is not None
    assert s.vlm.projector == "patch_merger" and s.vlm.tower.n_layers == 32


def test_facts_on_the_spec():
    v = load_model("qwen2.5-vl-7b").vlm
    assert v is not None and v.dynamic is not None
    # window_size 112 / (patch 14 * merge 2) = 4 merged tokens a side; 448x448 by default: 32x32 patches, 256 tokens
    assert (v.dynamic.patch, v.dynamic.merge, v.dynamic.window, v.dynamic.full_blocks) == (14, 2, 4, (7, 15, 23, 31))
    assert (v.image_size, v.image_tokens, v.feature_tokens, v.image_token_id) == (448, 256, 1024, 151_655)
    # the tower: RMSNorm, gated SiLU MLP, fp32 pixels of 3 channels x temporal_patch_size 2 per pixel
    tower = v.tower
    assert (tower.norm, tower.gated_mlp, tower.activation, tower.vision.channels) == ("rmsnorm", True, "silu", 6)
    assert load_model("qwen2.5-vl-3b").tied_embeddings


@pytest.mark.parametrize(("size", "resized", "tokens"), [
    ((448, 448), (448, 448), 256),      # 16 x 16 merged tokens
    ((1024, 768), (1036, 756), 999),    # round(1024/28) = 37, round(768/28) = 27: 37 * 27
    ((20, 20), (56, 56), 4),            # under min_pixels 56*56: scaled up to 56x56, 2 x 2
    ((4000, 3000), (1148, 840), 1230),  # over max_pixels 28*28*1280: beta = sqrt(12e6 / 1,003,520); 41 * 30
])
def test_smart_resize_and_tokens(size, resized, tokens):
    v = load_model("qwen2.5-vl-3b").vlm
    assert v is not None and v.dynamic is not None
    assert v.dynamic.resized(*size) == resized
    assert v.dynamic.tokens(*size) == tokens


def test_smart_resize_equals_transformers():
    pytest.importorskip("torch", reason="transformers' image processor needs torch")
    tr = pytest.importorskip("transformers.models.qwen2_vl.image_processing_qwen2_vl",
                             reason="transformers' Qwen2VLImageProcessor needs torchvision")
    for h, w in [(448, 448), (1024, 768), (20, 20), (4000, 3000), (333, 777), (100, 5000), (1080, 1920)]:
        assert smart_resize(h, w, 28) == tuple(tr.smart_resize(h, w, factor=28))


def test_aspect_ratio_refused():
    with pytest.raises(ConfigError) as e:
        smart_resize(10, 2100, 28)
    assert str(e.value) == ("image_size=10x2100: the aspect ratio must be at most 200 (Qwen2VLImageProcessor refuses "
                            "it): give a less elongated --image-size")


def test_windows():
    v = load_model("qwen2.5-vl-3b").vlm
    assert v is not None and v.dynamic is not None
    # 448x448: 16x16 merged tokens in 4x4 windows of 4x4 merged = 64 patches each
    assert v.dynamic.windows(448, 448) == ((64, 16),)
    # 1036x756: 37x27 merged tokens; rows 9 x 4 + 1, columns 6 x 4 + 3: 54 windows of 64 patches, 9 of 48,
    # 6 of 16, 1 of 12 (3,456 + 432 + 96 + 12 = 3,996 = 74 * 54 patches)
    assert v.dynamic.windows(1024, 768) == ((64, 54), (48, 9), (16, 6), (12, 1))


def test_windows_equal_transformers():
    torch = pytest.importorskip("torch", reason="transformers' window index needs torch")
    vu = pytest.importorskip("transformers.vision_utils", reason="needs transformers")
    v = load_model("qwen2.5-vl-3b").vlm
    assert v is not None and v.dynamic is not None
    for size in [(448, 448), (1024, 768), (20, 20), (333, 777)]:
        gh, gw = v.dynamic.grid(*size)
        _, cu = vu.get_vision_window_index(torch.tensor([[1, gh, gw]]), 2, 112, 14)
        lengths = Counter((cu[1:] - cu[:-1]).tolist())
        assert dict(lengths) == dict(v.dynamic.windows(*size))


def test_vs_transformers_tiny():
    pytest.importorskip("torch", reason="the meta-device build needs torch")
    pytest.importorskip("transformers", reason="the meta-device build needs transformers")
    from _hf_meta import hf_tensors, ours

    for cfg in (TINY, {**TINY, "tie_word_embeddings": True}):
        assert ours(spec_from_config(cfg)) == hf_tensors(cfg)


@pytest.mark.parametrize("name", ["qwen2.5-vl-3b", "qwen2.5-vl-7b"])
def test_vs_transformers_real(name):
    pytest.importorskip("torch", reason="the meta-device build needs torch")
    pytest.importorskip("transformers", reason="the meta-device build needs transformers")
    from _hf_meta import hf_tensors, ours

    s = load_model(name)
    assert ours(s) == hf_tensors(s.config)


def test_out_hidden_size_must_match_the_text_model():
    bad = {**TINY, "vision_config": {**TINY["vision_config"], "out_hidden_size": 48}}
    with pytest.raises(Exception) as e:
        spec_from_config(bad, where="cfg")
    assert str(e.value) == ("cfg: vision_config.out_hidden_size=48 must equal the text model's hidden_size=64 (the "
                            "merged image tokens replace text embeddings)")


def test_estimate_adds_image_tokens_and_notes():
    s = load_model("qwen2.5-vl-7b")
    e = estimate(s, make_workload(mode="inference", batch=1, seq=512, images=2, image_size=(1024, 768)))
    assert e.breakdown.notes[:3] == (
        "1024x768 images resized by the processor (smart_resize, multiples of 28) to 1036x756: 3,996 patches in the "
        "tower, 999 image tokens per image",
        "2 image(s) per sample: 1,998 image tokens added to seq=512, 2,510 tokens in the decoder",
        "Qwen2_5_VLForConditionalGeneration's tower and merger figures are analytic (window blocks as per-window "
        "sequences, full blocks over each image) and not cross-checked: the tracer cannot run this model under fake "
        "tensors",
    )
    # the KV cache holds seq + image tokens: 28 layers x 2 x 4 kv heads x 128 x 2 B x 2,510 tokens = 143,933,440
    kv = next(c.bytes for c in e.breakdown.components if c.name == "kv_cache")
    assert kv == 143_933_440
    assert e.workload.seq == 512  # reported as given


def test_inference_held_image_outputs():
    s = load_model("qwen2.5-vl-7b")
    vis = vision_figures(s, make_workload(mode="inference", batch=1, seq=512, images=2))
    # the fp32 pixel_values, 2 images x 1,024 patches x (3 x 2 x 14 x 14) x 4 B = 9,633,792, and the merged tokens
    # 2 x 256 x 3584 x 2 B = 3,670,016 held through the decoder: both multiples of 512
    assert vis.tokens == 512
    assert vis.held == 9_633_792 + 3_670_016


def test_window_blocks_keep_less_than_full_ones_under_eager():
    s = load_model("qwen2.5-vl-3b")
    base = dict(mode="train", batch=1, seq=256, images=1, image_size=(896, 896), attention="eager")
    full_everywhere = {**s.config, "vision_config": {**s.config["vision_config"],
                                                     "fullatt_block_indexes": list(range(32))}}
    windowed = vision_figures(s, make_workload(**base)).saved
    dense = vision_figures(spec_from_config(full_everywhere), make_workload(**base)).saved
    # 896x896: 64x64 patches, eager attention's (heads, s, s) probabilities over 4,096 patches in a full block
    # but 64 in a window block
    assert windowed < dense


def test_trace_refuses_in_one_line():
    pytest.importorskip("torch", reason="the tracer needs torch")
    from vramlens.errors import TraceError
    from vramlens.trace.build import build_hf

    with pytest.raises(TraceError) as e:
        build_hf(TINY, make_workload(mode="inference", batch=1, seq=16, images=1))
    assert str(e.value) == (
        "Qwen2_5_VLForConditionalGeneration cannot be traced under fake tensors: its forward reads values back from "
        "tensors (the grid_thw loops of get_rope_index and the vision window index, the tower's cu_seqlens split "
        "sizes); use vramlens estimate (analytic, not cross-checked) or a real run")


@pytest.mark.parametrize(("images", "size"), [(0, None), (1, None), (2, (1024, 768))])
def test_advisor_fast_memory_equals_the_estimate(images, size):
    # FastMemory keys on images and image_size and folds the image path in as estimate_spec does
    from vramlens.advise.fastmem import FastMemory
    from vramlens.estimator.core import estimate_spec
    from vramlens.hardware import get_gpu

    spec, gpu = load_model("qwen2.5-vl-3b"), get_gpu("H100-80GB")
    for mode in ("train", "inference"):
        w = make_workload(mode=mode, batch=2, seq=256, images=images, image_size=size)
        assert FastMemory(spec, gpu).totals(w) == (estimate_spec(spec, w, gpu).breakdown.device_total,
                                                   estimate_spec(spec, w, gpu).breakdown.host_bytes)


def test_place_counts_the_image_size():
    from vramlens.advise.place import place
    from vramlens.hardware import get_gpu

    spec, gpu = load_model("qwen2.5-vl-3b"), get_gpu("A100-40GB")

    def kv(size: tuple[int, int]) -> int:
        p = place(spec, gpu, workload=make_workload(mode="inference", seq=512, new_tokens=128, images=1,
                                                     image_size=size))
        return next(o for o in p.options if o.kind == "gpu").device_bytes[0]

    # 999 image tokens at 1024x768 against 256 at 448x448: 743 more tokens x 36 layers x 2 x 2 kv heads x 128 x 2 B
    # = 27,389,952 more KV cache bytes (the tower's working set stays under the decoder's here)
    assert kv((1024, 768)) - kv((448, 448)) == 27_389_952


def test_fit_with_an_image_size():
    # the search's workloads (ZeRO offload among them) reach the image path in training
    from vramlens.advise import fit

    r = fit("qwen2.5-vl-3b", gpu="A100-40GB", mode="train", images=1, image_size=(896, 896), seq=512)
    assert r.plans
    assert all(p.workload.image_size == (896, 896) and p.workload.images == 1 for p in r.plans)


def test_training_notes_and_adapted_linears():
    from vramlens.estimator.inventory import lora_shape

    s = load_model("qwen2.5-vl-3b")
    # all-linear: 36 text blocks x 7 + 32 tower blocks x 5 (qkv, proj, gate/up/down_proj) + the merger's 2 = 414
    assert lora_shape(s, ("all-linear",)).count == 414
    assert lora_shape(s, ("q_proj", "v_proj")).count == 72  # the text model's only: 36 x 2

    def note(**kw) -> str:
        return estimate(s, make_workload(mode="train", batch=1, seq=512, images=1, **kw)).breakdown.notes[3]

    assert note(method="full") == ("full fine-tuning trains the vision tower and its merger too (transformers leaves "
                                   "every parameter trainable)")
    tower = ("in the vision tower (fused attn.qkv, attn.proj, the MLP's gate/up/down_proj, the merger's mlp.0 and "
             "mlp.2) that is")
    assert note(method="lora") == f"lora: peft adapts every linear named q_proj, v_proj; {tower} none"
    assert note(method="lora", lora_targets=("gate_proj", "qkv")) == (
        f"lora: peft adapts every linear named gate_proj, qkv; {tower} qkv, gate_proj")
