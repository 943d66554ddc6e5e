"""The fake trace keeps for backward what a real CUDA run keeps, block by block.

validation/events/cuda-h200-*.json.gz hold the allocation events of one training step on an
H200 (torch 2.11, CUDA 13, transformers 5.17), the model cut to one block
(scripts/gpu_events_diff.py --backend cuda). The same script runs here on fake tensors; every
tensor the forward keeps for backward (tag ``activation``) must match the H200's: op, block
and bytes. The one known difference is the SDPA kernel's name (the H200 picks cuDNN attention,
the fake trace flash; both keep the same tensors).
"""

import gzip
import json
import re
from collections import Counter
from pathlib import Path

import pytest

from script_module import load_script

pytest.importorskip("torch", reason="tracing needs the trace extra (torch)")
pytest.importorskip("transformers", reason="tracing needs the trace extra (transformers)")

ROOT = Path(__file__).resolve().parents[2]
EVENTS = ROOT / "validation" / "events"

#: dumps whose forward runs under autocast (fp32 weights, bf16 amp): CUDA's op policy decides dtypes
CASES = ("cuda-h200-gpt2.json.gz", "cuda-h200-bert.json.gz")

_SDPA = re.compile(r"^_scaled_dot_product_(cudnn|flash|efficient)_attention\.default$")
_BLOCK = re.compile(r"^(.*?\.(?:h|layer|layers|block)\.\d+)(\.|$)")


def _script():
    return load_script("gpu_events_diff")


def block_of(module: str) -> str:
    """The block a module belongs to (``transformer.h.0``), or the module itself outside the blocks."""
    m = _BLOCK.match(module)
    return m.group(1) if m else (module or "<loss>")


def saved_per_block(dump: dict) -> dict[str, Counter]:
    """Per block: a count of (op, bytes) of every tensor the forward keeps for backward."""
    out: dict[str, Counter] = {}
    for e in dump["events"]:
        if e["phase"] == "forward" and e["tag"] == "activation":
            op = "sdpa" if _SDPA.match(e["op"]) else e["op"]
            out.setdefault(block_of(e["module"]), Counter())[(op, e["bytes"])] += 1
    return out


def test_blocks_are_found():
    assert block_of("transformer.h.0.mlp.act") == "transformer.h.0"
    assert block_of("bert.encoder.layer.0.attention.self") == "bert.encoder.layer.0"
    assert block_of("cls.predictions.decoder") == "cls.predictions.decoder"
    assert block_of("") == "<loss>"


@pytest.mark.slow  # two one-block traces: seconds each on 2 cores
@pytest.mark.parametrize("name", CASES)
def test_saved_for_backward_matches_the_h200(name):
    (h200,) = json.loads(gzip.decompress((EVENTS / name).read_bytes()))
    fake = _script().dump(h200["model"], "fake", h200["workload"])
    want, got = saved_per_block(h200), saved_per_block(fake)
    assert sorted(got) == sorted(want)
    for block in want:
        assert got[block] == want[block], (block, sorted((got[block] - want[block]).items()),
                                           sorted((want[block] - got[block]).items()))
    assert sum(sum(b * n for (_, b), n in c.items()) for c in got.values()) == \
        sum(sum(b * n for (_, b), n in c.items()) for c in want.values())
