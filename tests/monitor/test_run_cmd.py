"""`vramlens run`: real scripts in a child Python, watched through the generated sitecustomize."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="the scripts `vramlens run` runs here train with torch (the trace extra)")

from vramlens.cli.main import main  # noqa: E402
from vramlens.monitor.launch import SITECUSTOMIZE, child_environment  # noqa: E402
from vramlens.monitor.ranks import RankReport, merge  # noqa: E402
from vramlens.monitor.records import StepRecord, WatchReport  # noqa: E402

LOOP = """
import os, signal, sys
import torch, torch.nn as nn
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
steps, batch = int(sys.argv[1]), int(sys.argv[2])
for i in range(steps):
    loss = model(torch.randn(batch, 64)).pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
end = sys.argv[3] if len(sys.argv) > 3 else ""
if end == "fail":
    raise ValueError("the script's own error")
if end in ("TERM", "KILL", "INT"):
    os.kill(os.getpid(), getattr(signal, "SIG" + end))
print("script done")
"""


@pytest.fixture()
def script(tmp_path) -> Path:
    path = tmp_path / "train.py"
    path.write_text(LOOP)
    return path


def vramlens_run(capfd, *argv: str) -> tuple[int, str, str]:
    code = main(["run", *argv])
    out, err = capfd.readouterr()
    return code, out, err


def test_plain_loop_report_and_exit(script, tmp_path, capfd):
    out_json, out_html = tmp_path / "run.json", tmp_path / "run.html"
    code, out, err = vramlens_run(capfd, "--json", str(out_json), "--report", str(out_html), "--label", "plain",
                                  "--", sys.executable, str(script), "5", "32")
    assert code == 0
    assert "script done" in out
    d = json.loads(out_json.read_text())
    assert (d["exit_code"], d["signal"], len(d["ranks"])) == (0, None, 1)
    report = d["ranks"][0]["report"]
    assert [s["step"] for s in report["steps"]] == [1, 2, 3, 4, 5]
    # from the second step the parameters found in the optimizer's param_groups are their own category:
    # (64*128 + 128 + 128 + 1) float32 = 8,449 * 4 B
    assert report["steps"][1]["categories"]["parameters"] == 8_449 * 4
    assert "vramlens run:" in err and "5 step record(s)" in err
    assert "<h1>vramlens run:" in out_html.read_text()


def test_the_scripts_error_keeps_its_code_and_traceback(script, capfd):
    code, _out, err = vramlens_run(capfd, "--", sys.executable, str(script), "2", "8", "fail")
    assert code == 1
    assert "Traceback (most recent call last)" in err and "ValueError: the script's own error" in err
    # the report comes after the traceback, never instead of it
    assert err.index("ValueError: the script's own error") < err.index("2 step record(s)")


def test_cpu_cap_oom_post_mortem_is_added_to_the_traceback(script, tmp_path, capfd):
    out_json = tmp_path / "oom.json"
    # the model, its gradients and a batch of 4 fit in 200 KB; a batch of 4,096 (1 MiB of input) does not
    code, _out, err = vramlens_run(capfd, "--cpu-limit", "200KB", "--json", str(out_json), "--",
                                   sys.executable, str(script), "1", "4096")
    assert code == 1
    assert "CpuOutOfMemoryError" in err and "vramlens post-mortem: out of memory (the CPU cap" in err
    oom = json.loads(out_json.read_text())["ranks"][0]["report"]["oom"]
    assert (oom["kind"], oom["limit_bytes"]) == ("cpu_limit", 200_000)


def test_sigterm_writes_the_report_then_dies_by_the_signal(script, tmp_path, capfd):
    out_json = tmp_path / "term.json"
    code, _out, err = vramlens_run(capfd, "--json", str(out_json), "--", sys.executable, str(script), "3", "8", "TERM")
    assert code == 128 + signal.SIGTERM
    assert "ended by signal 15 (SIGTERM)" in err
    d = json.loads(out_json.read_text())
    rank = d["ranks"][0]
    assert (len(rank["report"]["steps"]), rank["final"]) == (3, False)


def test_sigint_reports_and_keeps_python_behaviour(script, tmp_path, capfd):
    out_json = tmp_path / "int.json"
    # A job started in the background of a non-interactive shell (CI's, often) inherits SIGINT ignored, and
    # so would the script, as it would without vramlens. Give this test's children the usual disposition: a
    # handler here becomes SIG_DFL across exec, and Python then raises KeyboardInterrupt.
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        code, _out, err = vramlens_run(capfd, "--json", str(out_json), "--", sys.executable, str(script), "2", "8",
                                       "INT")
    finally:
        signal.signal(signal.SIGINT, old)
    assert "KeyboardInterrupt" in err
    assert code == 128 + signal.SIGINT  # Python ends by SIGINT after an uncaught KeyboardInterrupt
    assert len(json.loads(out_json.read_text())["ranks"][0]["report"]["steps"]) == 2


def test_killed_by_signal_9_has_its_own_message(script, tmp_path, capfd):
    out_json = tmp_path / "kill.json"
    code, _out, err = vramlens_run(capfd, "--json", str(out_json), "--", sys.executable, str(script), "2", "8", "KILL")
    assert code == 137
    assert "killed by signal 9 (SIGKILL): host OOM or killed" in err
    d = json.loads(out_json.read_text())
    assert d["ranks"] == [] and d["notes"][0].startswith("no process wrote a report")


def test_an_existing_sitecustomize_still_runs_first(script, tmp_path, monkeypatch):
    user = tmp_path / "user-site"
    user.mkdir()
    (user / "sitecustomize.py").write_text("import os\nos.environ['USER_SITECUSTOMIZE'] = 'ran'\nMARK = 1\n")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "sitecustomize.py").write_text(SITECUSTOMIZE)
    env = child_environment(run_dir, {"store": False}, base={**os.environ, "PYTHONPATH": str(user)})
    probe = ("import os, sitecustomize, torch\nfrom vramlens.monitor import autorun\n"
             "print(os.environ.get('USER_SITECUSTOMIZE'), sitecustomize.MARK, autorun.start() is not None)")
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["ran", "1", "True"]


def test_a_command_that_is_missing_is_one_line(capfd):
    code, _out, err = vramlens_run(capfd, "--", "no-such-program-vramlens")
    assert code == 2
    assert err.strip() == "error: cannot run 'no-such-program-vramlens': No such file or directory"


def test_no_command_is_refused(capfd):
    code, _out, err = vramlens_run(capfd, "--json", "x.json")
    assert (code, err.strip()) == (2, "error: give the command after --: vramlens run -- python train.py")


# ---- merging (pure) -------------------------------------------------------------------------

def report(peaks: list[int]) -> WatchReport:
    cats = dict.fromkeys(("parameters",), 0)
    return WatchReport("cpu", "cpu", tuple(StepRecord(i + 1, p, None, p, 0, None, None, cats) for i, p in enumerate(peaks)))


def test_merge_puts_ranks_in_columns_and_drops_the_launcher():
    ranks = [RankReport(1, 11, report([10, 30])), RankReport(None, 9, report([])), RankReport(0, 10, report([10, 20]))]
    r = merge(("torchrun", "t.py"), 0, ranks)
    assert [x.name for x in r.ranks] == ["rank 0", "rank 1"]
    assert r.steps_table() == [{"step": 1, "peak_allocated_bytes": {"rank 0": 10, "rank 1": 10}},
                               {"step": 2, "peak_allocated_bytes": {"rank 0": 20, "rank 1": 30}}]
    assert (r.peak_allocated_bytes, r.notes) == (30, ("the ranks' peaks differ by 10 B",))
    assert 'id="ranks"' in r.to_html()


def test_exit_codes_of_signals():
    assert merge(("x",), -9, []).exit_code == 137
    assert merge(("x",), 3, []).exit_code == 3
    assert merge(("x",), -15, []).exit_text() == "vramlens run: the command was ended by signal 15 (SIGTERM)"


# ---- torchrun ---------------------------------------------------------------------------------

DDP = """
import torch, torch.distributed as dist, torch.nn as nn
dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = nn.parallel.DistributedDataParallel(nn.Linear(32, 16))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for i in range(3):
    model(torch.randn(8 * (1 + rank), 32)).pow(2).mean().backward()
    opt.step()
    opt.zero_grad()
dist.destroy_process_group()
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_two_cpu_ranks_under_torchrun_are_merged(tmp_path, capfd):
    path = tmp_path / "ddp.py"
    path.write_text(DDP)
    out_json = tmp_path / "ddp.json"
    code, _out, err = vramlens_run(capfd, "--json", str(out_json), "--", sys.executable, "-m", "torch.distributed.run",
                                   "--nproc_per_node", "2", "--master_port", str(free_port()), str(path))
    assert code == 0, err
    d = json.loads(out_json.read_text())
    assert [r["rank"] for r in d["ranks"]] == [0, 1]
    assert [row["step"] for row in d["steps"]] == [1, 2, 3]
    row = d["steps"][2]["peak_allocated_bytes"]
    assert set(row) == {"rank 0", "rank 1"}
    assert row["rank 1"] > row["rank 0"]  # rank 1's batch is twice rank 0's
