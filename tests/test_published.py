"""The published figures, reproduced (src/vramlens/data/published-cases.json)."""

import json

import pytest

from vramlens.cli.main import main
from vramlens.cli.validate import bundled_cases_path
from vramlens.published import CASES, UNSUPPORTED, run_all


@pytest.fixture(scope="module")
def rows():
    return {r.id: r for r in run_all(json.loads(bundled_cases_path().read_text()))}


def test_every_case_is_mapped_or_explained(rows):
    assert set(rows) == set(CASES) | set(UNSUPPORTED)


@pytest.mark.parametrize("case_id", [
    "zero-paper-7.5b-baseline-dp", "zero-paper-7.5b-pos", "zero-paper-7.5b-pos-g", "zero-paper-7.5b-pos-g-p",
    "korthikanti-gpt3-175b-act-per-layer-noparallel", "hf-llmopt-octocoder-kvcache-16k-mha-derived",
    "accelerate-estimator-bert-base-cased-adam-derived", "accelerate-bert-base-cased-load-measured",
])
def test_formula_cases_agree_closely(rows, case_id):
    assert abs(rows[case_id].error) < 0.01, rows[case_id]


def test_measured_cases_median_error(rows):
    errs = sorted(abs(r.error) for r in rows.values() if r.error is not None)
    assert len(errs) >= 25
    assert errs[len(errs) // 2] < 0.10


def test_reserve_model_improves_nvidia_smi_cases(rows):
    nvml = [r for r in rows.values() if r.figure == "device_total"]
    assert nvml
    better = sum(abs(r.error) <= abs(r.first_order_error) for r in nvml)
    assert better >= len(nvml) * 0.7, [(r.id, r.error, r.first_order_error) for r in nvml]


def test_validate_published_cli(capsys):
    assert main(["validate", "published"]) == 0
    out = capsys.readouterr().out
    assert "zero-paper-7.5b-pos-g-p" in out and "median |error|" in out


def test_peft_readme_rows(rows):
    # PEFT's README table in GB read as GiB (the scripts print MiB): 32 x 2**30 = 34,359,738,368 B
    bloomz = rows["peft-readme-bloomz-7b1-lora-pytorch"]
    assert bloomz.figure == "peak_allocated" and bloomz.published_bytes == 34_359_738_368
    assert bloomz.estimated_bytes is not None
    # the seq2seq rows stay unexpressed: the encoder sees each batch's longest tweet, the decoder a few label tokens
    for case_id in ("peft-readme-t0-3b-full", "peft-readme-t0-3b-lora-pytorch", "peft-readme-mt0-xxl-lora-pytorch"):
        assert rows[case_id].estimated_bytes is None
        assert rows[case_id].reason == (
            "encoder and decoder lengths differ and neither is stated: the encoder sees each batch's longest tweet, "
            "the decoder the labels padded to the longest class label (a few tokens); --seq sets both")
