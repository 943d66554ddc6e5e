"""Factories, bad input, and the `vramlens trace` command."""

import json

import pytest
from tests.trace.conftest import tiny_llama

from vramlens.cli.main import main
from vramlens.errors import TraceError
from vramlens.trace import trace


def test_factory_with_inputs():
    r = trace("tests.trace.factories:mlp", mode="train", dtype="fp32", batch=4)
    # parameters: 64*256 + 256 + 256*8 + 8 floats, each storage rounded to 512 B
    assert r.breakdown["weights"] == 65536 + 1024 + 8192 + 512
    assert r.breakdown["gradients"] == r.breakdown["weights"]


def test_factory_with_input_shape():
    r = trace("tests.trace.factories:bare", mode="inference", dtype="fp32", input_shape=(3, 16))
    assert r.breakdown["weights"] == 512 + 512


def test_factory_without_input_spec():
    with pytest.raises(TraceError, match="give --input-shape"):
        trace("tests.trace.factories:bare", mode="inference", dtype="fp32")


def test_failing_factory():
    with pytest.raises(TraceError, match="factory 'tests.trace.factories:broken' failed: RuntimeError: weights not found"):
        trace("tests.trace.factories:broken", mode="inference")


def test_missing_factory_module():
    with pytest.raises(TraceError, match="cannot import 'tests.trace.nowhere'"):
        trace("tests.trace.nowhere:build", mode="inference")


def test_data_dependent_model_names_module_and_op():
    with pytest.raises(TraceError) as e:
        trace("tests.trace.factories:data_dependent", mode="train", dtype="fp32")
    msg = str(e.value)
    assert msg.startswith("cannot trace module '<DataDependent>' at op 'index.Tensor' (data-dependent shape: ")
    assert "--real-cpu" in msg and "vramlens estimate" in msg


def test_cli_json(capsys, tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(tiny_llama()))
    timeline = tmp_path / "events.csv"
    rc = main(["trace", str(cfg), "--mode", "train", "--seq", "32", "--json", "--quiet", "--timeline", str(timeline),
               "--top", "3"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out["components"]) >= {"weights", "gradients", "optimizer_states", "activations", "runtime"}
    assert out["peak_allocated_bytes"] > 0 and out["peak_reserved_bytes"] >= out["peak_allocated_bytes"]
    assert [s["step"] for s in out["trace"]["step_peaks"]] == [1, 2]
    assert len(out["trace"]["top_modules_at_peak"]) == 3
    assert out["model"]["params"] > 0
    assert timeline.read_text().splitlines()[0] == "seq,action,storage,nbytes,tag,module,phase,step,op"


@pytest.mark.slow  # > 5 s on 2 cores (--durations)
def test_cli_table(capsys, tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(tiny_llama()))
    assert main(["trace", str(cfg), "--mode", "train", "--seq", "32", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "peak by step: step 1" in out and "alive at the peak" in out


def test_cli_bad_input_is_one_line(capsys):
    rc = main(["trace", "tests.trace.factories:broken"])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.strip().count("\n") == 0 and "failed: RuntimeError" in err
