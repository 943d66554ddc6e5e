"""Speech encoder-decoders (Whisper): the run as the blocks see it, and the conv front end.

transformers' WhisperFeatureExtractor pads or truncates each clip to 30 s (3,000 log-mel frames at
hop 160 and 16 kHz) and WhisperEncoder.forward refuses any other length, so the encoder always runs
1,500 positions per 30-second window (its stride-2 ``conv2`` halves the frames). Longer audio is cut
into 30-second chunks by the ASR pipeline (``chunk_length_s=30``): ceil(S / 30) windows per sample,
each a batch row of the encoder and of the decoder (each chunk gets its own transcript). The decoder
runs ``--seq`` tokens (the transcript), at most ``max_target_positions`` (448) learned positions.
"""

from __future__ import annotations

from dataclasses import replace

from vramlens.models.spec import ModelSpec
from vramlens.units import DTYPE_BYTES
from vramlens.units import block_bytes as _r  # one allocation's bytes, in 512-byte blocks
from vramlens.workload import Workload

#: Workload.seq's default: when it is left alone, a speech decoder runs its whole position table
DEFAULT_SEQ = 512


def encoder_tokens(spec: ModelSpec, w: Workload) -> int:
    """Tokens per row of an encoder-decoder's encoder: Whisper's 1,500 positions, else the run's seq (T5)."""
    return spec.audio.source_positions if spec.audio is not None else w.seq


def decoder_tokens(spec: ModelSpec, w: Workload) -> int:
    """The transcript's tokens a speech decoder runs: --seq, or when left at its default the whole
    position table (max_target_positions)."""
    if spec.audio is not None and w.seq == DEFAULT_SEQ:
        return spec.audio.target_positions
    return w.seq


def windows(spec: ModelSpec, w: Workload) -> int:
    """30-second windows per sample (1 without --audio-seconds)."""
    assert spec.audio is not None
    return spec.audio.windows(w.audio_seconds if w.audio_seconds is not None else spec.audio.window_seconds)


def audio_problems(spec: ModelSpec, w: Workload, speech_models: str) -> list[str]:
    """--audio-seconds on a text model, and a transcript longer than the decoder's positions."""
    a = spec.audio
    if a is None:
        if w.audio_seconds is None:
            return []
        return [f"audio_seconds={w.audio_seconds:g} applies to speech encoder-decoders ({speech_models}); "
                f"{spec.name} takes no audio: drop --audio-seconds"]
    dec = decoder_tokens(spec, w) + (0 if w.training else w.new_tokens)
    if dec > a.target_positions:
        what = "seq" if w.training or not w.new_tokens else "seq + new_tokens"
        return [f"{what}={dec} decoder tokens exceed {spec.name}'s max_target_positions={a.target_positions} (its "
                f"learned decoder positions): give --seq (and --new-tokens) totalling {a.target_positions} or less"]
    return []


def audio_workload(spec: ModelSpec, w: Workload) -> tuple[Workload, list[str]]:
    """The run as Whisper's blocks see it: batch rows = samples x windows, seq = the decoder's tokens;
    and the notes that say so."""
    a = spec.audio
    assert a is not None
    n = windows(spec, w)
    dec = decoder_tokens(spec, w)
    seconds = w.audio_seconds if w.audio_seconds is not None else float(a.window_seconds)
    padded = n * a.window_seconds
    notes = []
    if seconds < padded:
        notes.append(f"{seconds:g} s of audio is padded to {padded} s: {n * a.source_positions:,} encoder positions "
                     f"per sample ({n} x {a.frames:,} mel frames of {a.mel_bins} bins, halved by the stride-2 conv)")
    else:
        notes.append(f"{seconds:g} s of audio: {n * a.source_positions:,} encoder positions per sample ({n} x "
                     f"{a.frames:,} mel frames of {a.mel_bins} bins, halved by the stride-2 conv)")
    if n > 1:
        notes.append(f"{seconds:g} s is cut into {n} windows of {a.window_seconds} s (the ASR pipeline's "
                     f"chunk_length_s={a.window_seconds}), each a batch row of the encoder and the decoder: "
                     f"batch {w.batch} x {n} = {w.batch * n} rows")
    if w.seq == DEFAULT_SEQ:
        notes.append(f"seq: {dec} decoder tokens (max_target_positions; --seq sets the transcript's length)")
    return replace(w, batch=w.batch * n, seq=dec), notes


def features_bytes(spec: ModelSpec, w: Workload, b: int) -> int:
    """The log-mel ``input_features`` (b, n_mels, 3000) in the weights' dtype, alive through the step."""
    a = spec.audio
    assert a is not None
    r = 4 if w.run_dtype == "fp32" else DTYPE_BYTES[w.compute_dtype]
    return _r(r * b * a.mel_bins * a.frames)


def front_end_saved(spec: ModelSpec, w: Workload, b: int) -> int:
    """Whisper's encoder input and conv front end as kept through a training step (b rows).

    The log-mel ``input_features`` (b, n_mels, 3000) come in the weights' dtype (the model card's
    ``input_features.to(device, dtype=torch_dtype)``; a bf16 Conv1d refuses fp32 input). In full
    fine-tuning ``conv1`` keeps them (its autocast cast under --amp), ``gelu`` keeps ``conv1``'s output
    (b, d, 3000), ``conv2`` keeps that GELU's output and the second ``gelu`` keeps ``conv2``'s output
    (b, d, 1500) (WhisperEncoder.forward, modeling_whisper.py:617-623). Frozen convs (LoRA) record
    nothing: only the input stays. The sinusoidal positions are frozen: their lookup is a temporary.
    """
    a = spec.audio
    assert a is not None
    c = DTYPE_BYTES[w.compute_dtype]
    d = spec.hidden_size
    total = features_bytes(spec, w, b)
    if w.training and w.method == "full":
        if w.autocast:
            total += _r(c * b * a.mel_bins * a.frames)  # conv1's cast of them
        total += 2 * _r(c * b * d * a.frames) + _r(c * b * d * a.source_positions)
    return total


def front_end_inference(spec: ModelSpec, w: Workload, b: int) -> int:
    """A no-grad forward's front end at its peak: the input, ``conv1``'s output and its GELU (b, d, 3000)."""
    a = spec.audio
    if a is None:
        return 0
    return features_bytes(spec, w, b) + 2 * _r(DTYPE_BYTES[w.compute_dtype] * b * spec.hidden_size * a.frames)
