"""--padded on the command line: the JSON workload carries it, the estimate counts the mask, the web page has the knob,
and a refused combination is one line with exit code 2."""

import json

from cli_run import run_cli
from vramlens.web.page import KNOBS


def test_flag_reaches_the_workload_and_the_figure(capsys):
    base = ["estimate", "llama-3.2-3b", "--mode", "train", "--dtype", "bf16", "--batch", "4", "--seq", "768", "--json"]
    code, out, _ = run_cli(capsys, [*base, "--padded"])
    assert code == 0
    padded = json.loads(out)
    assert padded["workload"]["padded"] is True
    _, out, _ = run_cli(capsys, base)
    plain = json.loads(out)
    assert plain["workload"]["padded"] is False
    # 28 blocks x (repeat_kv's 25,165,824 B + the additive mask's 4,718,592 B) + the int64 mask input (24,576 B)
    assert padded["peak_allocated_bytes"] - plain["peak_allocated_bytes"] == 28 * 29_884_416 + 24_576
    assert "padded" in {k[0] for k in KNOBS}


def test_flash_is_refused_in_one_line(capsys):
    code, out, err = run_cli(capsys, ["estimate", "llama-3.2-3b", "--mode", "train", "--padded", "--attention", "flash"])
    assert code == 2
    assert err.strip().splitlines() == ["error: padded with attention=flash: flash-attention-2 unpads q, k and v and "
                                        "pads its output back (copies not modelled): use --attention sdpa or eager"]
