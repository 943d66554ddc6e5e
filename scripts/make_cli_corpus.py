"""Write tests/corpus/cli_bad_args.json: bad command lines for every value-taking flag of every command.

Each case is a command line (a list of arguments) that must end with exit code 2, one error line on
stderr naming the flag, and nothing on stdout (tests/cli/test_cli_corpus.py runs them all). The
cases come from the parser itself (every flag that takes a value, crossed with values of the wrong
kind, out of range or absurd), so a new flag gets its bad inputs without anyone writing them.

Run: python scripts/make_cli_corpus.py   (deterministic: the same parser gives the same file)
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from vramlens.cli.main import build_parser

OUT = Path(__file__).resolve().parents[1] / "tests" / "corpus" / "cli_bad_args.json"

#: A model each command accepts, so that the flag under test is the only bad value.
BASE = {
    "estimate": ["llama-2-7b"],
    "fit": ["llama-2-7b", "--gpu", "24GB"],
    "place": ["llama-2-7b", "--gpu", "24GB"],
    "trace": ["gpt2"],
    "snapshot": ["/nonexistent.pickle"],
    "capacity": ["llama-2-7b", "--gpu", "A100-80GB"],
}

HUGE = "1" + "0" * 30
DIGITS_5000 = "9" * 5000
BAD_INTS = ["0", "-1", "-10", HUGE, "-" + HUGE, DIGITS_5000, "1e400", "nan", "inf", "-inf", "abc", "", " ",
            "1.5", "0x10", "1,000", "2**10", "10;rm", "\u0661\u0662x"]
#: Flags that accept 0 (the value is a count that may be empty, or 0 means "off").
ZERO_OK = {"--new-tokens", "--kv-block", "--zero", "--max-cache-len", "trace --top", "snapshot --top",
           "trace --timeline-points", "capacity --ctx-size", "capacity --n-gpu-layers", "--images",
           "--num-virtual-tokens", "--quant-group-size"}  # 0: prompt tuning off; the format's own group
#: -1 is a value of their own: LoKr's decompose_factor -1 (peft's default, split near the square root)
MINUS_ONE_OK = {"--decompose-factor"}
BAD_FLOATS = ["-0.1", "1", "1.5", "nan", "inf", "-inf", "1e400", "abc", "", DIGITS_5000]
BAD_SIZES = ["0", "0GB", "-5GB", "-1", "1e400GB", "nanGB", "infGB", "abc", "", "GB", "1e30TB", HUGE,
             DIGITS_5000, "5 XB", "24 G B"]
BAD_COUNTS = ["0", "-7B", "nan", "inf", "1e400", "100000T", "7Q", "", "B", HUGE, DIGITS_5000, "1e30B"]
BAD_CHOICES = ["bogus", "", "nan", "-1", "ADAMW;rm", "x" * 300]
BAD_PATHS = ["/nonexistent-folder/x.html", "/", "/proc/version/x"]
BAD_GBPS = ["0", "-1", "nan", "inf", "1e400", "abc", "", HUGE]
BAD_SHAPES = ["0", "-1", "1x0", "1x1e400", "abc", "", "x", "9" * 40, "1x" * 100 + "1", HUGE]
BAD_ALLOC_CONF = ["garbage", "max_split_size_mb:-1", "max_split_size_mb:1e400", "roundup_power2_divisions:0",
                  "expandable_segments:maybe", "garbage_collection_threshold:2", "max_split_size_mb:" + HUGE,
                  ":", ",,,", "max_split_size_mb"]
BAD_MODELS = ["x" * 300, "a/" * 200 + "b", "../../etc/passwd", "/dev/null", "/dev/zero", "/proc/self/mem",
              "~nonexistentuser/config.json", "org/", "/org", "org//name", "\U0001f600", "-", " ", "org/name/extra",
              "http://evil.example/x", "lama-2-7b", "C:\\model", "%s%s%s", "{{7*7}}", "x" * 5000]

BAD_CHECKPOINTING = ["every:0", "every:1", "every:-1", "every:abc", "every:", "every:1e3", "every: 2", "every:+2",
                     "every:2_0", "every:\uff11", "every:4097", "every:" + HUGE, "every:" + DIGITS_5000, "every",
                     "bogus", "x" * 300]
#: vLLM releases vramlens does not follow, and values that are no release (a later one, 1.5, is taken as it is)
BAD_VLLM_VERSIONS = ["0.3", "0", "-1", "abc", "", " ", "0.0.0.0.0", "nan", "x" * 65, DIGITS_5000]
#: SGLang releases before 0.3.3, and values that are no release
BAD_SGLANG_VERSIONS = ["0.3.2", "0.2", "0", "-1", "abc", "", " ", "nan", "x" * 65, DIGITS_5000]
BAD_RATIOS = ["0", "-1", "2", "nan", "inf", "-inf", "1e309", "abc", "", DIGITS_5000]
BAD_IMAGE_SIZES = ["0", "-1", "0x224", "224x0", "16385", "224x16385", "224x224x224", "x", "224x", "abc", "", " ",
                   "224.5", "1e3", "-224x224", HUGE, DIGITS_5000, "\u0661\u0662"]

#: --audio-seconds: not numbers, not positive, not finite, or over MAX_AUDIO_SECONDS (a valid number such as 1.5
#: is accepted by the commands that take no model-specific check, such as place)
BAD_AUDIO_SECONDS = ["0", "-1", "-0.5", "nan", "inf", "-inf", "1e400", "360001", "abc", "", " ", "0x10", "1,000",
                     "10;rm", "2**10", HUGE, DIGITS_5000]

#: --transformers-version: values that are no X.Y or X.Y.Z version (any such, 1.5 included, is taken as it is)
BAD_TRANSFORMERS_VERSIONS = ["abc", "", " ", "4", "4.", ".35", "4.35.", "4.35.0.0", "4.35.0.dev0", "v4.35", "4.x",
                             "nan", "-1", "4.35;rm", "\u0664.\u0663\u0665", "x" * 65, DIGITS_5000]

#: Values a flag takes that are sizes, counts, rates, shapes or allocator settings (by flag).
KIND = {
    "--gpu": BAD_SIZES, "--host-ram": BAD_SIZES, "--params": BAD_COUNTS, "--network": BAD_GBPS,
    "--interconnect": BAD_GBPS, "--input-shape": BAD_SHAPES, "--alloc-conf": BAD_ALLOC_CONF,
    "--html": BAD_PATHS, "--svg": BAD_PATHS, "--png": BAD_PATHS, "--timeline": BAD_PATHS,
    "--lora-targets": ["", ",", " , ", "x" * 300, ",".join(["q"] * 300)],
    "--keep": ["bogus", "batch=abc", "x" * 300], "--forbid": ["bogus", "x" * 300],
    "--headroom": BAD_FLOATS, "--lora-dropout": BAD_FLOATS[:1] + BAD_FLOATS[2:], "--checkpointing": BAD_CHECKPOINTING, "--swa-full-tokens-ratio": BAD_RATIOS,
    "--vllm-version": BAD_VLLM_VERSIONS, "--sglang-version": BAD_SGLANG_VERSIONS, "--image-size": BAD_IMAGE_SIZES,
    "--audio-seconds": BAD_AUDIO_SECONDS, "--transformers-version": BAD_TRANSFORMERS_VERSIONS,
}
#: Flags not crossed with bad values: they start a server, or only pick a mode.
SKIP = {"--host", "--port", "--version"}


def subparsers() -> dict[str, argparse.ArgumentParser]:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def engine_of(command: str, flag: str) -> list[str]:
    """``--engine E`` for a `vramlens capacity` flag that only engine E takes (so its value is what is judged)."""
    if command != "capacity":
        return []
    from vramlens.cli.capacity import FLAGS

    engines = next((e for f, _dest, e, _opts in FLAGS if f == flag), ("vllm",))
    return [] if "vllm" in engines else ["--engine", engines[0]]


def cases() -> list[list[str]]:
    out: list[list[str]] = []
    for command, parser in subparsers().items():
        # run and calibrate take the command after --; their bad values are in tests/cli/test_bad_input_everywhere.py
        if command in ("validate", "serve", "models", "gpus", "run", "calibrate", "runs"):
            continue
        base = BASE.get(command, [])
        for action in parser._actions:
            flag = next((o for o in action.option_strings if o.startswith("--")), None)
            if flag is None or flag in SKIP or action.nargs == 0 or flag == "--help":
                continue
            if flag in KIND:
                values = KIND[flag]
            elif action.choices:
                values = BAD_CHOICES
            else:
                values = [v for v in BAD_INTS if not (v == "0" and ({flag, f"{command} {flag}"} & ZERO_OK))
                          and not (v == "-1" and flag in MINUS_ONE_OK)]
            if flag == "--params":  # --params replaces the model
                out.extend([command, *base[1:], flag, v] for v in values)
                continue
            out.extend([command, *base, *engine_of(command, flag), flag, v] for v in values)
        if command in BASE:
            out.extend([command, m] for m in BAD_MODELS)
    # snapshot: a file that is not a snapshot, and its flags
    for f in ("/nonexistent.pickle", "/", "/dev/null", "/dev/zero", "/proc/self/mem", "x" * 5000):
        out.append(["snapshot", f])
    for v in BAD_INTS:
        if v != "0":
            out.append(["snapshot", "/nonexistent.pickle", "--top", v])
    # serve: ports and hosts that cannot be bound, refused before any server starts
    for v in ["-1", "65536", HUGE, "abc", "", "nan"]:
        out.append(["serve", "--port", v])
    out.extend([["validate", "bogus"], ["validate"], ["models", "--bogus"], ["gpus", "extra-arg"]])
    return out


def main() -> None:
    data = cases()
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(data, indent=0, ensure_ascii=True) + "\n", encoding="utf-8")
    print(f"wrote {len(data)} cases to {OUT}")


if __name__ == "__main__":
    main()
