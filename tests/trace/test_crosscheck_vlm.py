"""Vision-language models against the tracer (crosscheck.VLM_ROWS): LLaVA, Gemma 3 multimodal and Llama 4 whole on
tiny configs (a CLIP, SigLIP or Llama 4 tower, the projector, a Llama, Gemma 3 or Llama 4 text model), full
fine-tuning, LoRA and inference, 2 images per sample (Llama 4's as 1, 3 or 5 tiles each)."""

import pytest

pytest.importorskip("torch", reason="the tracer runs the model under torch's fake tensors")
pytest.importorskip("transformers", reason="the tracer builds the transformers model")

from vramlens.estimator.breakdown import ALLOCATOR_COMPONENTS  # noqa: E402
from vramlens.trace.crosscheck import (  # noqa: E402
    VLM_CATALOG_ROWS,
    VLM_ROWS,
    render,
    run_vlm_catalog_row,
    run_vlm_row,
)


def test_vlm_rows_cover_both_families_and_modes():
    assert {(n, r["mode"], r.get("method")) for n, r in VLM_ROWS} == {
        ("llava-tiny", "train", "full"), ("llava-tiny", "inference", None), ("gemma3-vlm-tiny", "train", "full"),
        ("gemma3-vlm-tiny", "inference", None), ("llava-tiny", "train", "lora"), ("gemma3-vlm-tiny", "train", "lora"),
        ("llava-next-tiny", "train", "full"), ("llava-next-tiny", "train", "lora"), ("llava-next-tiny", "inference", None),
        ("llama4-vlm-tiny", "train", "full"), ("llama4-vlm-tiny", "inference", None),
        ("llama4-vlm-tiny", "train", "lora")}
    # Llama 4 at one tile an image (the default) and tiled: 112x112 a 2x2 canvas + the global tile, 112x56 2x1 + 1
    assert {r.get("image_size") for n, r in VLM_ROWS if n == "llama4-vlm-tiny"} == {None, (112, 112), (112, 56)}


#: A known gap, checked to still be there so that it is not forgotten once fixed: Gemma 3's VLM training peaks in
#: forward at the loss in the trace and in backward in the estimate (their peaks agree within 1.2%), so the
#: temporaries compared are those of different phases: the logits and their fp32 copies against the loss
#: backward's or the optimizer step's.
KNOWN_GAPS = {("gemma3-vlm-tiny", "train", "full", "temporaries"), ("gemma3-vlm-tiny", "train", "lora", "temporaries"),
              # Llama 4's text model under LoRA at these 64 + 2 x 147 (or more) tokens: its backward peak holds 13-16% more
              # temporaries than the loss backward the estimate counts, and the text model alone shows it too (the
              # same text_config without images at seq 358: 11,456,512 B estimated, 13,197,824 B traced); the
              # rows' peaks are within 0.4%
              ("llama4-vlm-tiny", "train", "lora", "temporaries")}

#: A row whose peak is known to be more than 5% under, checked to stay between 5% and 10% under (so that a fix
#: shows): LLaVA-NeXT under LoRA at 128x96 (anyres: 5 tiles an image). Its text side is under the trace while
#: its tower is over (tower and projector estimated 42.4 MB, traced 34.6 MB); until the frozen output layer
#: stopped counting the final norm's output as kept (a frozen linear keeps no input), that wrong term hid the gap
#: (-4.6%). peft's default targets adapt the CLIP tower's q_proj and v_proj too, so the merged embeddings need
#: a gradient: the candidate is what the text blocks keep then; not explained yet.
PEAK_GAPS = {("llava-next-tiny", "train", "lora", (128, 96))}


@pytest.mark.parametrize("row", VLM_ROWS, ids=lambda r: f"{r[0]}-{r[1]['mode']}-{r[1].get('method', '')}"
                         + ("-all-linear" if r[1].get("lora_targets") == ("all-linear",) else
                            "-targets" if r[1].get("lora_targets") else "")
                         + ("-{}x{}".format(*r[1]["image_size"]) if r[1].get("image_size") else ""))
def test_vlm_row_within_5_percent_of_trace(row):
    """Peak within 5% of the trace and each component within 10% (today: peaks within 3.7%, LLaVA's within 3.1%;
    weights, gradients and optimizer states exact: LLaVA's last tower block, its post_layernorm and their
    adapters get no gradient)."""
    name, wl = row
    r = run_vlm_row(name, wl)
    if (name, wl["mode"], wl.get("method"), wl.get("image_size")) in PEAK_GAPS:
        assert -0.10 < r.peak_error < -0.05, ("the known peak gap moved: update PEAK_GAPS", render([r]))
    else:
        assert abs(r.peak_error) <= 0.05, render([r])
    for c in ALLOCATOR_COMPONENTS:
        err = r.component_error(c)
        if (name, wl["mode"], wl.get("method"), c) in KNOWN_GAPS:
            assert err is not None and err < -0.10, ("the known gap closed: drop it from KNOWN_GAPS", c, err)
            continue
        assert err is None or abs(err) <= 0.10, (name, wl, c, err, render([r]))


def test_layers_cut_the_text_model_and_keep_the_tower():
    """--layers k on a VLM traces the text model's first k blocks under the whole tower (the same in both
    truncated models, so the linear extrapolation over blocks keeps it once)."""
    from vramlens.trace.build import config_layers, truncate_config
    from vramlens.trace.crosscheck import VLM_CONFIGS

    cfg = VLM_CONFIGS["gemma3-vlm-tiny"]
    assert config_layers(cfg) == 2  # text_config's num_hidden_layers
    cut = truncate_config(cfg, 1)
    assert cut["text_config"]["num_hidden_layers"] == 1
    assert cut["text_config"]["layer_types"] == ["sliding_attention"]
    assert cut["vision_config"] == cfg["vision_config"]


@pytest.mark.slow
@pytest.mark.parametrize("row", VLM_CATALOG_ROWS, ids=lambda r: f"{r[0]}-{r[1]['mode']}")
def test_catalog_vlm_within_2_percent_of_its_extrapolated_trace(row):
    """LLaVA-1.5-7B, Gemma 3 4B and Llama 4 Scout whole, 1 or 2 images of 336 / 896 pixels (Scout's also as 5 tiles
    of a 672x672 image): today within 0.5% at the peak (Scout's: +0.00% and -0.01%)."""
    r = run_vlm_catalog_row(*row)
    assert abs(r.peak_error) <= 0.02, render([r])
