"""Vision-language models against the tracer (crosscheck.VLM_ROWS): LLaVA and Gemma 3 multimodal on tiny configs
(a CLIP or SigLIP tower, the projector, a Llama or Gemma 3 text model), full fine-tuning and inference, 2 images
per sample."""

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
        ("llava-next-tiny", "train", "full"), ("llava-next-tiny", "train", "lora"), ("llava-next-tiny", "inference", None)}


#: A known gap, checked to still be there so that it is not forgotten once fixed: Gemma 3's VLM training peaks in
#: forward at the loss in the trace and in backward in the estimate (their peaks agree within 1.2%), so the
#: temporaries compared are those of different phases: the logits and their fp32 copies against the loss
#: backward's or the optimizer step's.
KNOWN_GAPS = {("gemma3-vlm-tiny", "train", "temporaries")}  # full fine-tuning and LoRA alike


@pytest.mark.parametrize("row", VLM_ROWS, ids=lambda r: f"{r[0]}-{r[1]['mode']}-{r[1].get('method', '')}"
                         + ("-all-linear" if r[1].get("lora_targets") else ""))
def test_vlm_row_within_5_percent_of_trace(row):
    """Peak within 5% of the trace and each component within 10% (today: peaks within 3.7%, LLaVA's within 3.1%;
    weights, gradients and optimizer states exact: LLaVA's last tower block, its post_layernorm and their
    adapters get no gradient)."""
    name, wl = row
    r = run_vlm_row(name, wl)
    assert abs(r.peak_error) <= 0.05, render([r])
    for c in ALLOCATOR_COMPONENTS:
        err = r.component_error(c)
        if (name, wl["mode"], c) in KNOWN_GAPS:
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
    """LLaVA-1.5-7B and Gemma 3 4B whole, 1 or 2 images of 336 / 896 pixels: today within 0.5% at the peak."""
    r = run_vlm_catalog_row(*row)
    assert abs(r.peak_error) <= 0.02, render([r])
