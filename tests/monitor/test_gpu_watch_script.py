"""scripts/gpu_watch_validate.py: its comparisons on CPU; without CUDA it refuses cleanly."""


import pytest

from script_module import load_script


@pytest.fixture(scope="module")
def script():
    return load_script("gpu_watch_validate")


def test_peak_agreement_is_exact(script):
    assert script.peak_agreement([10, 20], [10, 20])["ok"]
    r = script.peak_agreement([10, 21], [10, 20])
    assert (r["ok"], r["max_abs_difference"]) == (False, 1)
    assert not script.peak_agreement([10], [10, 20])["ok"]  # a step the watch missed
    assert not script.peak_agreement([], [])["ok"]


def test_calibrate_agreement_within_five_percent(script):
    assert script.calibrate_agreement(105, 100) == {"predicted_bytes": 105, "measured_bytes": 100, "error": 0.05,
                                                   "tolerance": 0.05, "ok": True}
    assert not script.calibrate_agreement(94, 100)["ok"]
    assert script.summarize({"a": {"ok": True}, "b": {"ok": False}}) == {"checks": 2, "passed": 1, "all_ok": False}


def test_without_cuda_it_skips_and_writes_nothing(script, tmp_path, capsys):
    reason = script.cuda_unavailable_reason()
    if reason is None:
        pytest.skip("CUDA is available here: run the script itself")
    out = tmp_path / "watch-gpu.json"
    assert script.main(["--out", str(out)]) == 0
    assert capsys.readouterr().out == f"skipped: {reason}\n"
    assert not out.exists()
