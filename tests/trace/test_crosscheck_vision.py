"""Vision encoders against the tracer (crosscheck.VISION_ROWS): ViT, CLIP's and SigLIP's vision towers on tiny
configs (2 blocks, hidden 256, 32x32 images in patches of 8), inference and ViT's image-classification fine-tune."""

import pytest

pytest.importorskip("torch", reason="the tracer runs the model under torch's fake tensors")
pytest.importorskip("transformers", reason="the tracer builds the transformers model")

from vramlens.estimator.breakdown import ALLOCATOR_COMPONENTS  # noqa: E402
from vramlens.trace.crosscheck import VISION_ROWS, render, run_vision_row  # noqa: E402


def test_vision_rows_cover_the_families_and_modes():
    names = {n for n, _ in VISION_ROWS}
    assert names == {"vit-tiny", "clip-vision-tiny", "siglip-vision-tiny"}
    assert {(n, r["mode"]) for n, r in VISION_ROWS} >= {("vit-tiny", "train"), ("vit-tiny", "inference")}


@pytest.mark.parametrize("row", VISION_ROWS, ids=lambda r: f"{r[0]}-{r[1]['mode']}-{r[1]['dtype']}"
                         + ("-" + "x".join(map(str, r[1]["image_size"])) if "image_size" in r[1] else ""))
def test_vision_row_within_5_percent_of_trace(row):
    """Peak within 5% of the trace and each component within 10% (every row agrees to within 0.2% today)."""
    name, wl = row
    r = run_vision_row(name, wl)
    assert abs(r.peak_error) <= 0.05, render([r])
    for c in ALLOCATOR_COMPONENTS:
        err = r.component_error(c)
        assert err is None or abs(err) <= 0.10, (name, wl, c, err, render([r]))
