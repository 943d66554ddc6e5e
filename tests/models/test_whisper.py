"""Whisper: the audio facts, --audio-seconds (windows, bounds, refusals) and the figures it changes."""

from __future__ import annotations

import pytest

import vramlens
from vramlens.errors import ConfigError
from vramlens.models import load_model
from vramlens.models.spec import Audio
from vramlens.workload import make_workload


def test_whisper_facts():
    s = load_model("whisper-tiny")
    assert s.audio == Audio(mel_bins=80, source_positions=1500, target_positions=448)
    assert s.audio.frames == 3000  # 1,500 positions x the stride-2 conv
    assert load_model("whisper-large-v3").audio.mel_bins == 128
    assert (s.kind, s.n_encoder_layers, s.n_decoder_layers, s.tied_embeddings) == ("encoder-decoder", 4, 4, True)
    # the sinusoidal table is a parameter with requires_grad_(False): counted, never trained
    assert s.outside_loss == ("model.encoder.embed_positions.weight",)
    assert load_model("whisper-large-v3-turbo").n_decoder_layers == 4


@pytest.mark.parametrize(("seconds", "windows"), [(0.5, 1), (12, 1), (30, 1), (30.01, 2), (75, 3), (3600, 120)])
def test_windows_are_ceil_of_30_second_chunks(seconds, windows):
    assert load_model("whisper-tiny").audio.windows(seconds) == windows


def test_twelve_seconds_are_padded_to_one_window():
    e = vramlens.estimate("whisper-tiny", mode="inference", dtype="fp16", audio_seconds=12, seq=16)
    assert e.breakdown.notes[0] == ("12 s of audio is padded to 30 s: 1,500 encoder positions per sample (1 x 3,000 "
                                    "mel frames of 80 bins, halved by the stride-2 conv)")
    assert (e.workload.batch, e.workload.seq) == (1, 16)


def test_long_audio_is_cut_into_windows_that_are_batch_rows():
    e = vramlens.estimate("whisper-tiny", mode="inference", dtype="fp16", batch=2, audio_seconds=75, seq=4)
    assert e.breakdown.notes[:2] == (
        "75 s of audio is padded to 90 s: 4,500 encoder positions per sample (3 x 3,000 mel frames of 80 bins, "
        "halved by the stride-2 conv)",
        "75 s is cut into 3 windows of 30 s (the ASR pipeline's chunk_length_s=30), each a batch row of the encoder "
        "and the decoder: batch 2 x 3 = 6 rows")
    assert (e.workload.batch, e.workload.seq) == (6, 4)
    # 6 rows, 4 decoder blocks, 2 x 6 heads x 64 x 2 B = 1,536 B per token and block:
    # self-attention 4 x 1,536 x 4 tokens x 6 = 147,456; cross-attention 4 x 1,536 x 1,500 x 6 = 55,296,000
    assert e.breakdown["kv_cache"] == 55_443_456


def test_default_seq_is_the_whole_decoder_table():
    e = vramlens.estimate("whisper-tiny", mode="inference", dtype="fp16")
    assert e.workload.seq == 448
    assert "seq: 448 decoder tokens (max_target_positions; --seq sets the transcript's length)" in e.breakdown.notes
    # 4 blocks x 1,536 B x (448 self + 1,500 cross) tokens = 2,752,512 + 9,216,000
    assert e.breakdown["kv_cache"] == 11_968_512


def test_encoder_positions_get_no_gradient():
    e = vramlens.estimate("whisper-tiny", mode="train", method="full", dtype="bf16")
    assert e.trainable_params == 37_760_640 - 1500 * 384  # 37,184,640


def test_transcript_longer_than_the_decoder_positions_is_refused():
    with pytest.raises(ConfigError) as e:
        vramlens.estimate("whisper-tiny", mode="train", seq=500)
    assert str(e.value) == ("seq=500 decoder tokens exceed openai/whisper-tiny's max_target_positions=448 (its learned "
                            "decoder positions): give --seq (and --new-tokens) totalling 448 or less")
    with pytest.raises(ConfigError) as e:
        vramlens.estimate("whisper-tiny", mode="inference", seq=400, new_tokens=100)
    assert str(e.value).startswith("seq + new_tokens=500 decoder tokens exceed")


def test_audio_seconds_on_a_text_model_names_the_speech_models():
    with pytest.raises(ConfigError) as e:
        vramlens.estimate("gpt2", audio_seconds=12)
    assert str(e.value) == ("audio_seconds=12 applies to speech encoder-decoders (Whisper: whisper-tiny, -base, "
                            "-small, -medium, -large-v2, -large-v3, -large-v3-turbo, or any model_type whisper); "
                            "openai-community/gpt2 takes no audio: drop --audio-seconds")


@pytest.mark.parametrize(("value", "message"), [
    (0, "audio_seconds=0 must be a number of seconds > 0, such as 30 or 12.5"),
    (-3.0, "audio_seconds=-3.0 must be a number of seconds > 0, such as 30 or 12.5"),
    (True, "audio_seconds=True must be a number of seconds > 0, such as 30 or 12.5"),
    (float("nan"), "audio_seconds=nan must be a number of seconds > 0, such as 30 or 12.5"),
    ("abc", "audio_seconds='abc' must be a number of seconds > 0, such as 30 or 12.5"),
    (360_001, "audio_seconds=360001 is over the limit of 360,000 seconds: give one sample's audio, and the samples "
              "as --batch"),
    (10**400, "audio_seconds=a 401-digit number is over the limit of 360,000 seconds: give one sample's audio, and "
              "the samples as --batch"),
])
def test_audio_seconds_bounds(value, message):
    with pytest.raises(ConfigError) as e:
        make_workload(audio_seconds=value)
    assert str(e.value) == message


def test_audio_seconds_from_text_and_json():
    w = make_workload(audio_seconds="12.5")
    assert w.audio_seconds == 12.5 and w.to_dict()["audio_seconds"] == 12.5
    assert make_workload(audio_seconds="").audio_seconds is None  # the web form's empty field


def test_fit_plans_count_window_rows():
    # 2 clips of 45 s are 2 x ceil(45 / 30) = 4 rows of 1,500 encoder positions; seq: the 448 decoder positions
    r = vramlens.fit("whisper-tiny", gpu="24GB", mode="train", method="full", batch=2, audio_seconds=45)
    w = r.plans[0].workload
    assert (w.batch, w.seq, w.audio_seconds) == (4, 448, None)
