"""Whisper against the tracer (crosscheck.AUDIO_ROWS): a shrunk whisper-tiny layout (2 + 2 blocks, hidden 256)
fed log-mel input_features, in full (bf16, fp32, autocast, checkpointed) and LoRA fine-tuning, a plain forward,
generate() and clips of 12 and 45 s."""

import pytest

pytest.importorskip("torch", reason="the tracer runs the model under torch's fake tensors")
pytest.importorskip("transformers", reason="the tracer builds the transformers model")

from vramlens.estimator.breakdown import ALLOCATOR_COMPONENTS  # noqa: E402
from vramlens.trace.crosscheck import AUDIO_ROWS, render, run_audio_row  # noqa: E402


def _id(r) -> str:
    w = r[1]
    return "-".join([r[0], w["mode"], w.get("method", ""), w["dtype"]] + ([f"amp-{w['amp']}"] if "amp" in w else [])
                    + ([w["checkpointing"]] if "checkpointing" in w else [])
                    + ([f"{w['audio_seconds']}s"] if "audio_seconds" in w else [])
                    + (["generate"] if w.get("new_tokens") else []))


def test_audio_rows_cover_training_inference_and_windows():
    modes = {(r["mode"], r.get("method")) for _, r in AUDIO_ROWS}
    assert modes >= {("train", "full"), ("train", "lora"), ("inference", None)}
    assert {r.get("audio_seconds") for _, r in AUDIO_ROWS} >= {None, 12, 45}  # one window padded, two windows


@pytest.mark.slow  # each row traces a 2+2-block model over 1,500 encoder positions: several seconds
@pytest.mark.parametrize("row", AUDIO_ROWS, ids=_id)
def test_audio_row_within_5_percent_of_trace(row):
    """Peak within 5% of the trace and each component within 10% (every row agrees to within 0.1% on the peak
    and 2.3% on a component today)."""
    name, wl = row
    r = run_audio_row(name, wl)
    assert abs(r.peak_error) <= 0.05, render([r])
    for c in ALLOCATOR_COMPONENTS:
        err = r.component_error(c)
        assert err is None or abs(err) <= 0.10, (name, wl, c, err, render([r]))
