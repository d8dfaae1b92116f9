"""CPU parts of compare-layouts: the batch it builds and its command line."""
import pytest

from kernelgen import cli
from kernelgen.compare_layouts import format_table, trace_batch
from kernelgen.traces import load_trace


def test_trace_batch_is_skewed_and_deterministic():
    rows = load_trace()
    lq, lk = trace_batch(rows, 64)
    assert len(lq) == len(lk) == 64
    assert trace_batch(rows, 64) == (lq, lk)
    prefills = [i for i, x in enumerate(lq) if x > 1]
    assert all(i % 8 == 7 for i in prefills) and len(prefills) == 8
    assert all(lq[i] == lk[i] for i in prefills)
    assert all(1 <= x <= 4096 for x in lk)
    with pytest.raises(ValueError, match="batch"):
        trace_batch(rows, 0)


def test_table_format():
    r = {"layout": "aos", "scheduler_us": 3.25, "attention_us": 120.0, "metadata_bytes": 80, "max_error": 1e-3,
         "padded_replay_ok": True}
    t = format_table([r, dict(r, layout="soa", padded_replay_ok=False)])
    assert "aos" in t and "correct" in t and "WRONG" in t and "80" in t


def test_cli_parses_compare_layouts():
    args = cli.build_parser().parse_args(["compare-layouts", "--layout", "aos", "--batch", "5", "--pad-to", "16",
                                          "--graph", "--no-causal", "--heads", "16/4", "--no-sort", "--json"])
    assert args.layout == ["aos"] and args.batch == 5 and args.pad_to == 16 and args.graph and not args.causal
    assert args.heads == "16/4" and args.no_sort and args.json
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["compare-layouts", "--layout", "csr"])
