"""A longer fuzzing run of every reader than the suite's bounded Hypothesis budget.

Each target takes arbitrary bytes and must end in a result or a vramlens error (VramlensError, or a
clean ``SystemExit(2)`` for the command line): anything else (a traceback, a RecursionError, a
MemoryError) is a crash, saved under ``tests/corpus/fuzz-crashes/`` so that it becomes a test case.

Coverage-guided with atheris when it is installed (``pip install atheris``); otherwise random and
mutated inputs from a seed corpus (the committed files under tests/corpus/). Figures (executions,
crashes, seconds per target) go to ``benchmarks/results/fuzz_long.json``.

Run:  python scripts/fuzz_long.py --seconds 60            (every target, 60 s each)
      python scripts/fuzz_long.py --target gguf --seconds 600
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import random
import resource
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CRASHES = ROOT / "tests" / "corpus" / "fuzz-crashes"
RESULTS = ROOT / "benchmarks" / "results" / "fuzz_long.json"
TMP = Path(tempfile.mkdtemp(prefix="vramlens-fuzz-"))

LLAMA = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
         "num_hidden_layers": 2, "num_key_value_heads": 4, "vocab_size": 256}


def t_config(data: bytes) -> None:
    from vramlens.models.loaders import load_path

    path = TMP / "config.json"
    path.write_bytes(data)
    load_path(path)


def t_safetensors(data: bytes) -> None:
    from vramlens.models.loaders import load_path

    folder = TMP / "st"
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps(LLAMA))
    (folder / "model.safetensors").write_bytes(data)
    load_path(folder)


def t_gguf(data: bytes) -> None:
    from vramlens.advise.gguf_header import read_gguf

    read_gguf(io.BytesIO(data), len(data), "fuzz.gguf")


def t_snapshot(data: bytes) -> None:
    from vramlens.allocator.snapshot import load_report

    load_report(data)


def t_cli(data: bytes) -> None:
    """Bytes as a command line: the first byte picks the command, the rest split on NUL into arguments."""
    from vramlens.cli.main import main

    if not data:
        return
    command = ("estimate", "fit", "place", "trace")[data[0] % 4]
    words = [w.decode("utf-8", "replace") for w in data[1:].split(b"\0")][:8]
    argv = [command, "llama-2-7b", *words] if command != "trace" else [command, "gpt2", "--layers", "1", *words]
    if command in ("fit", "place"):
        argv += ["--gpu", "24GB"]
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        try:
            code = main(argv)
        except SystemExit as e:
            code = e.code
    if code not in (0, 1, 2):
        raise AssertionError(f"exit code {code!r}")


TARGETS: dict[str, tuple[Callable[[bytes], None], str]] = {
    "config": (t_config, "models"),
    "safetensors": (t_safetensors, "models"),
    "gguf": (t_gguf, "gguf"),
    "snapshot": (t_snapshot, "snapshot"),
    "cli": (t_cli, ""),
}


def seeds(folder: str) -> list[bytes]:
    """The committed corpus files of a target (bad inputs are good seeds: they sit at the edges)."""
    base = ROOT / "tests" / "corpus" / folder if folder else None
    out: list[bytes] = []
    if base and base.is_dir():
        for p in sorted(base.rglob("*")):
            if p.is_file() and p.stat().st_size < 1 << 20:
                out.append(p.read_bytes())
    return out or [b"{}", b"GGUF", b"\x80\x04}\x94."]


class Runner:
    def __init__(self, name: str, fn: Callable[[bytes], None]):
        self.name, self.fn = name, fn
        self.execs = 0
        self.crashes: dict[str, str] = {}

    def __call__(self, data: bytes) -> None:
        from vramlens.errors import VramlensError

        self.execs += 1
        try:
            self.fn(data)
        except VramlensError:
            pass
        except Exception as e:  # a crash: keep the input
            key = f"{type(e).__name__}: {str(e)[:120]}"
            if key not in self.crashes:
                CRASHES.mkdir(parents=True, exist_ok=True)
                digest = hashlib.sha256(data).hexdigest()[:16]
                (CRASHES / f"{self.name}-{digest}.bin").write_bytes(data)
                self.crashes[key] = digest
                print(f"  crash in {self.name}: {key}", file=sys.stderr)


def mutate(rng: random.Random, data: bytes) -> bytes:
    b = bytearray(data or b"\0")
    for _ in range(rng.randint(1, 8)):
        op = rng.randrange(5)
        i = rng.randrange(len(b) + 1)
        if op == 0 and b:
            b[min(i, len(b) - 1)] = rng.randrange(256)
        elif op == 1:
            b[i:i] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
        elif op == 2 and b:
            del b[i:i + rng.randint(1, 16)]
        elif op == 3:
            b[i:i] = rng.choice([b"9" * 40, b"1e400", b"NaN", b"[" * 200, b"\xff\xff\xff\xff\xff\xff\xff\x7f", b"-1"])
        else:
            b = b[: rng.randrange(len(b) + 1)]
    return bytes(b)


def run_random(runner: Runner, corpus: list[bytes], seconds: float, seed: int) -> None:
    rng = random.Random(seed)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        runner(mutate(rng, rng.choice(corpus)))


def run_atheris(runner: Runner, corpus: list[bytes], seconds: float) -> None:
    import atheris

    seed_dir = TMP / f"seeds-{runner.name}"
    seed_dir.mkdir(exist_ok=True)
    for i, data in enumerate(corpus[:2000]):
        (seed_dir / f"{i}").write_bytes(data)
    argv = [sys.argv[0], f"-max_total_time={int(seconds)}", "-rss_limit_mb=4096", "-max_len=65536", str(seed_dir)]
    atheris.Setup(argv, runner)
    with contextlib.suppress(SystemExit):
        atheris.Fuzz()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", choices=sorted(TARGETS), action="append")
    ap.add_argument("--seconds", type=float, default=60.0, help="per target (default 60)")
    ap.add_argument("--engine", choices=("auto", "atheris", "random"), default="auto")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    resource.setrlimit(resource.RLIMIT_AS, (8 << 30, 8 << 30))  # a reader that balloons fails, not the machine
    engine = args.engine
    if engine == "auto":
        try:
            import atheris  # noqa: F401

            engine = "atheris"
        except ImportError:
            engine = "random"
    results = {}
    for name in args.target or sorted(TARGETS):
        fn, folder = TARGETS[name]
        runner = Runner(name, fn)
        corpus = seeds(folder)
        t0 = time.monotonic()
        if engine == "atheris" and len(args.target or []) == 1:  # atheris runs one target per process
            run_atheris(runner, corpus, args.seconds)
        else:
            run_random(runner, corpus, args.seconds, args.seed)
        dt = time.monotonic() - t0
        results[name] = {"engine": engine if len(args.target or []) == 1 else "random", "seconds": round(dt, 1),
                         "executions": runner.execs, "crashes": runner.crashes}
        print(f"{name}: {runner.execs:,} executions in {dt:.0f} s, {len(runner.crashes)} distinct crashes")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    previous = json.loads(RESULTS.read_text()) if RESULTS.is_file() else {}
    previous.update(results)
    RESULTS.write_text(json.dumps(previous, indent=2, sort_keys=True) + "\n")
    return 1 if any(r["crashes"] for r in results.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
