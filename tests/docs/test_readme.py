"""README.md cannot drift from the code (STYLE rule 12).

Every `vramlens ...` line in its code blocks runs; every flag of estimate, fit, trace, place and
snapshot is in the README and every flag of their synopses is in the parser; the JSON table names
the keys `estimate --json` prints; the accuracy table is what `validate published --json` says, the capacity tables what
`validate capacity` does.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import shlex
import sys
import textwrap
from pathlib import Path

import pytest

from cli_run import run_cli
from script_module import load_script
from vramlens.cli.main import build_parser

#: `vramlens trace` runs the model under torch: without the trace extra, its examples skip.
needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                                 reason="vramlens trace needs the trace extra (torch)")

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")


def code_blocks(text: str) -> list[tuple[str, str]]:
    """(language, body) of every fenced block."""
    return re.findall(r"^```(\w*)\n(.*?)^```", text, re.S | re.M)


def readme_commands() -> list[str]:
    """The `vramlens ...` command lines of the code blocks: after any `&&`, without a trailing comment.
    Synopses (with [optional] parts or MODEL/FILE placeholders) are not commands: test_synopsis checks them."""
    commands = []
    for _lang, body in code_blocks(README):
        for line in body.splitlines():
            if "vramlens " not in line or line.startswith(" "):
                continue
            cmd = line.split("&&")[-1].strip()
            cmd = re.split(r"\s{2,}#", cmd)[0].strip()
            if not cmd.startswith("vramlens ") or "[" in cmd or re.search(r"\b[A-Z]{3,}\b", cmd):
                continue
            commands.append(cmd)
    return commands


def test_readme_has_the_commands_this_file_knows():
    """A new example in the README must be run here (or skipped with a reason) before it is trusted."""
    assert sorted(readme_commands()) == sorted(RUN)


def subparser(name: str) -> argparse.ArgumentParser:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[name]


def flags_of(name: str) -> set[str]:
    return {o for a in subparser(name)._actions for o in a.option_strings if o.startswith("--") and o != "--help"}


# --- (a) the examples run ---------------------------------------------------------------------

FACTORY = '''
import torch.nn as nn


def build():
    """A bare module; vramlens trace feeds it the --input-shape tensor."""
    return nn.Sequential(nn.Linear(512, 256), nn.GELU(), nn.Linear(256, 512))
'''

MEMORY_STATS = {  # json.dump(torch.cuda.memory_stats()), the keys the report reads
    "allocated_bytes.all.current": 3 * 2**20, "allocated_bytes.all.peak": 5 * 2**20,
    "reserved_bytes.all.current": 20 * 2**20, "reserved_bytes.all.peak": 20 * 2**20,
    "active_bytes.all.current": 3 * 2**20, "segment.all.current": 1, "num_alloc_retries": 0, "num_ooms": 0,
}

#: README command -> (extra arguments, expected exit code, why the extras); None: not run, with the reason.
RUN: dict[str, tuple[list[str], int, str] | str] = {
    "vramlens estimate llama-2-7b --mode train --method lora --gpu A100-80GB": ([], 0, ""),
    "vramlens trace mypkg.models:build --input-shape 8x512": ([], 0, "mypkg is written to tmp_path"),
    "vramlens snapshot memory_stats.json": ([], 0, "memory_stats.json is written to tmp_path"),
    "vramlens trace llama-2-7b --mode train --alloc-conf expandable_segments:True":
        (["--layers", "3"], 0, "3 of 32 blocks keep it to seconds; the flags are the README's"),
    "vramlens capacity llama-2-7b --engine vllm --gpu A100-80GB --context 4096": ([], 0, ""),
    "vramlens estimate llama-3-8b --mode train --dtype fp32 --amp bf16 --fsdp --gpus 8 --batch 2 --seq 8192 "
    "--checkpointing every:2": ([], 0, ""),
    "vramlens estimate llama-3-8b --mode train --dtype fp32 --amp bf16 --fsdp --gpus 8 --batch 2 --seq 8192 "
    "--checkpointing selective-op": ([], 0, ""),
    "vramlens serve": "starts a server that runs until stopped (tests/web covers the app in-process)",
    "vramlens estimate whisper-large-v3 --mode inference --dtype fp16 --audio-seconds 75 --seq 4 --new-tokens 128 "
    "--gpu T4": ([], 0, ""),
}


@pytest.mark.parametrize("command", sorted(c for c, how in RUN.items() if not isinstance(how, str)))
def test_readme_command_runs(command, tmp_path, monkeypatch, capsys):
    extra, expected, _why = RUN[command]
    if " trace " in f" {command} " and importlib.util.find_spec("torch") is None:
        pytest.skip("vramlens trace needs the trace extra (torch)")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "memory_stats.json").write_text(json.dumps(MEMORY_STATS))
    (tmp_path / "mypkg").mkdir()
    (tmp_path / "mypkg" / "__init__.py").write_text("")
    (tmp_path / "mypkg" / "models.py").write_text(textwrap.dedent(FACTORY))
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("mypkg", "mypkg.models"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    code, out, err = run_cli(capsys, shlex.split(command)[1:] + extra + (["--quiet"] if " trace " in f" {command} " else []))
    assert code == expected, err
    assert "Traceback" not in out + err
    assert out.strip()


def test_readme_python_example(capsys):
    """The Python API block runs and its commented value is what it returns."""
    (body,) = [b for lang, b in code_blocks(README) if lang == "python"]
    scope: dict = {}
    exec(compile(body, "README.md", "exec"), scope)  # noqa: S102 - the README's own example
    stated = re.search(r"spec\.params\s+#\s*([\d_]+)", body)
    assert stated and scope["spec"].params == int(stated.group(1))
    assert scope["est"].fits in (True, False)


# --- (b) flags: the README and the parser agree -------------------------------------------------

def synopsis(command: str) -> str:
    """The README's synopsis of `vramlens COMMAND`: its first line and the indented lines under it."""
    for _lang, body in code_blocks(README):
        lines = body.splitlines()
        for i, line in enumerate(lines):
            if line.startswith(f"vramlens {command} ") and "[" in line:
                out = [line]
                for more in lines[i + 1:]:
                    if not more.startswith(" "):
                        break
                    out.append(more)
                return "\n".join(out)
    raise AssertionError(f"README.md has no synopsis of vramlens {command}")


@pytest.mark.parametrize("command", ["estimate", "fit", "trace", "place", "snapshot", "capacity"])
def test_every_flag_is_in_the_readme(command):
    missing = sorted(f for f in flags_of(command) if not re.search(re.escape(f) + r"(?![\w-])", README))
    assert missing == [], f"vramlens {command} has flags README.md does not mention"


def test_every_remedy_is_named_in_the_readme_and_fit_help():
    """--keep / --forbid take vramlens.advise.REMEDIES: each is in the fit section and in fit's help."""
    from vramlens.advise import REMEDIES
    from vramlens.cli.fit import EXAMPLES

    section = README.split("## `vramlens fit`", 1)[1].split("\n## ", 1)[0]
    assert sorted(r for r in REMEDIES if f"`{r}`" not in section) == []
    helped = {r.strip(" .\n") for r in EXAMPLES.split("--keep / --forbid:", 1)[1].split(". An explicit")[0].split(",")}
    assert helped == set(REMEDIES)


@pytest.mark.parametrize("command", ["estimate", "fit", "trace", "place", "snapshot", "capacity"])
def test_every_synopsis_flag_exists(command):
    listed = set(FLAG.findall(synopsis(command)))
    assert listed, command
    assert sorted(listed - flags_of(command)) == []


def test_estimate_synopsis_lists_every_estimate_flag():
    """estimate's synopsis is the reference the others point to ("workload flags as for estimate")."""
    assert sorted(flags_of("estimate") - set(FLAG.findall(synopsis("estimate")))) == []


def test_every_command_but_serve_takes_json():
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    without = []
    for name, p in sub.choices.items():
        nested = [a for a in p._actions if isinstance(a, argparse._SubParsersAction)]
        parsers = list(nested[0].choices.values()) if nested else [p]
        if not all("--json" in {o for a in q._actions for o in a.option_strings} for q in parsers):
            without.append(name)
    assert without == ["serve"]
    assert "Every command but `serve` takes `--json`" in README


# --- (c) the JSON table -----------------------------------------------------------------------

def json_table_keys() -> list[str]:
    section = README.split("### The JSON", 1)[1].split("\n#", 1)[0]
    keys = []
    for row in re.findall(r"^\| (`.*?) \|", section, re.M):
        keys += re.findall(r"`([^`]+)`", row)
    return keys


def test_json_table_is_what_estimate_prints(capsys):
    code, out, err = run_cli(capsys, ["estimate", "llama-2-7b", "--mode", "train", "--gpu", "A100-80GB", "--json"])
    assert code == 0, err
    d = json.loads(out)
    keys = json_table_keys()
    assert sorted({k.split(".")[0] for k in keys}) == sorted(d)
    for k in keys:
        node = d
        for part in k.split("."):
            assert isinstance(node, dict) and part in node, k
            node = node[part]
    components_row = re.search(r"^\| `components` \|(.*)$", README, re.M).group(1)
    assert re.findall(r"`(\w+)`", components_row) == list(d["components"])


# --- (d) the accuracy table -------------------------------------------------------------------

def accuracy_table_script():
    return load_script("readme_accuracy_table")


def test_accuracy_table_is_what_validate_published_says(capsys):
    script = accuracy_table_script()
    code, out, err = run_cli(capsys, ["validate", "published", "--json"])
    assert code == 0, err
    rows = json.loads(out)
    table = script.readme_table(README)
    assert [r["id"] for r in rows] == re.findall(r"^\| ([a-z0-9.-]+) \|", table, re.M)[1:]  # after the header
    assert table == script.accuracy_table(rows), "run python scripts/readme_accuracy_table.py and commit README.md"


def test_capacity_tables_are_what_validate_capacity_says():
    script = load_script("readme_capacity_table")
    start = README.index(script.SUMMARY_HEAD)
    end = README.index("\n\n", README.index(script.CASE_HEAD, start))
    assert README[start:end] == script.tables(), "run python scripts/readme_capacity_table.py and commit README.md"


@needs_torch
def test_readme_factory_trace_is_in_the_default_dtype(tmp_path, monkeypatch, capsys):
    """The README's factory example runs in bf16 (the default) with exact weights."""
    (tmp_path / "mypkg").mkdir()
    (tmp_path / "mypkg" / "__init__.py").write_text("")
    (tmp_path / "mypkg" / "models.py").write_text(textwrap.dedent(FACTORY))
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("mypkg", "mypkg.models"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    code, out, err = run_cli(capsys, ["trace", "mypkg.models:build", "--input-shape", "8x512", "--quiet", "--json"])
    assert code == 0, err
    # bf16, each tensor rounded up to 512 B: 512*256*2 + 256*2->512 + 256*512*2 + 512*2 = 525_824
    assert json.loads(out)["components"]["weights"] == 525_824


def readme_inline_commands() -> set[str]:
    """`vramlens ...` written inline in the prose and tables (not in code blocks), without placeholders."""
    found = set(re.findall(r"`(vramlens [^`]*)`", re.sub(r"^```.*?^```", "", README, flags=re.S | re.M)))
    return {c for c in found if "[" not in c and "..." not in c and not re.search(r"\b[A-Z]{3,}\b", c)}


#: Inline README commands -> the exit code they end with, or why they are not run here.
INLINE: dict[str, int | str] = {
    "vramlens models": 0, "vramlens gpus": 0, "vramlens validate published": 0, "vramlens validate capacity": 0,
    "vramlens estimate distilbert-base-uncased --gpu A100-80GB --mode train --task sequence-classification": 0,
    "vramlens estimate llava-1.5-7b --mode train --images 1 --seq 512 --gpu H100-80GB": 0,
    "vramlens estimate llava-v1.6-mistral-7b --mode inference --images 1 --image-size 1080x1920 --gpu L4": 0,
    # the bare command names of the "what it answers" table need a MODEL or FILE: one line, exit 2
    "vramlens estimate": 2, "vramlens fit": 2, "vramlens place": 2, "vramlens snapshot": 2, "vramlens trace": 2,
    "vramlens capacity": 2, "vramlens runs": 2, "vramlens capacity --engine vllm": 2,
    "vramlens capacity --engine llama.cpp": 2,
    # the watch section names them bare: without a command after -- each is one line, exit 2
    "vramlens run": 2, "vramlens calibrate": 2,
    "vramlens serve": "starts a server that runs until stopped (tests/web runs it live)",
    "vramlens validate trace": "the whole trace matrix takes minutes (tests/trace/test_crosscheck.py runs it)",
}


def test_readme_inline_commands_are_known():
    assert readme_inline_commands() == set(INLINE)


@pytest.mark.parametrize("command", sorted(c for c, how in INLINE.items() if isinstance(how, int)))
def test_readme_inline_command_runs(command, capsys):
    code, out, err = run_cli(capsys, shlex.split(command)[1:])
    assert code == INLINE[command], err
    assert "Traceback" not in out + err
    if code == 0:
        assert out.strip()
    else:
        assert len(err.strip().splitlines()) == 1 and err.startswith("error: ")


def test_real_gpu_table_is_todays_estimate_of_the_measured_cases():
    script = load_script("gpu_report")
    data = script.rows()
    assert len(data) >= 19 and all(r["measured"] > 2**30 for r in data)  # real sizes: gigabytes each
    block = script._BLOCK.search(README)
    assert block, "README.md lost its real-GPU table"
    assert block.group(0) == script.gpu_table(data), "run python scripts/gpu_report.py and commit README.md"
