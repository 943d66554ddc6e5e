"""Every input the long fuzzing run (scripts/fuzz_long.py) ever found to crash a reader stays a test case:
run through the same target, it must now end in a result or a vramlens error."""

from __future__ import annotations

from pathlib import Path

import pytest

from script_module import load_script

ROOT = Path(__file__).resolve().parents[1]
CRASHES = sorted((ROOT / "tests" / "corpus" / "fuzz-crashes").glob("*.bin"))


def _fuzz_module():
    return load_script("fuzz_long")


@pytest.mark.parametrize("path", CRASHES, ids=[p.name for p in CRASHES])
def test_a_former_crash_is_now_a_clean_answer(path):
    from vramlens.errors import VramlensError

    target = path.name.split("-", 1)[0]
    fn, _folder = _fuzz_module().TARGETS[target]
    if target in ("safetensors", "cli"):
        pytest.importorskip("torch", reason="the target may build a traced model")
    try:
        fn(path.read_bytes())
    except VramlensError:
        pass


def test_every_fuzz_target_runs_on_a_seed():
    """The harness itself works (a broken target would make the long run find nothing)."""
    from vramlens.errors import VramlensError

    module = _fuzz_module()
    for name, (fn, folder) in module.TARGETS.items():
        if name == "cli":
            continue
        for data in module.seeds(folder)[:3]:
            with pytest.raises(VramlensError):
                fn(data)
