"""CPU parts of compare-layouts: the batch it builds, its table and JSON, and its command line."""
import json

import pytest

from kernelgen.apps import cli, compare_layouts
from kernelgen.apps.compare_layouts import ATTENTION_TIMING, SCHEDULER_TIMING, format_table, result_row, trace_batch
from kernelgen.apps.traces import load_trace


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


def _rows():
    r = result_row("aos", 3.25, 120.0, 80, 1e-3, True, batch=5, pad_to=16, graph=True, causal=True, sort=True,
                   head_swizzle=True, tokens_q=40, tokens_k=900)
    return [r, result_row("soa", 4.5, 119.5, 96, 2e-3, False, **{k: r[k] for k in CONTEXT})]


CONTEXT = ("batch", "pad_to", "graph", "causal", "sort", "head_swizzle", "tokens_q", "tokens_k")


def test_table_format():
    """The scheduler column is the graph-replayed GPU time per launch, and says so."""
    lines = format_table(_rows()).splitlines()
    assert lines[0].split() == ["layout", "sched", "GPU", "us/launch", "attention", "us", "metadata", "B", "max",
                                "err", "padded", "replay"]
    assert lines[1].split() == ["aos", "3.25", "120.0", "80", "1.00e-03", "correct"]
    assert lines[2].split() == ["soa", "4.50", "119.5", "96", "2.00e-03", "WRONG"]
    assert lines[3] == ("sched GPU us/launch: scheduler GPU time per launch: 20 launches captured in one CUDA graph, "
                        "the replay timed with CUDA events (median, L2 flushed before each) and divided by 20; host "
                        "launch time excluded")
    assert lines[4] == "attention us: attention: median CUDA-event time of one eager plan.attend call"
    assert len(lines) == 5


def test_json_names_the_timing_method():
    r = json.loads(json.dumps(_rows()))[0]
    assert "scheduler_us" not in r
    assert r["scheduler_graph_us"] == 3.25 and r["attention_us"] == 120.0
    assert r["scheduler_timing"] == SCHEDULER_TIMING and "20 launches captured in one CUDA graph" in SCHEDULER_TIMING
    assert "host launch time excluded" in SCHEDULER_TIMING
    assert r["attention_timing"] == ATTENTION_TIMING
    assert (r["layout"], r["metadata_bytes"], r["max_error"], r["padded_replay_ok"]) == ("aos", 80, 1e-3, True)
    assert [r[k] for k in CONTEXT] == [5, 16, True, True, True, True, 40, 900]


def test_an_unwritable_json_path_keeps_the_printed_table(monkeypatch, capsys, tmp_path):
    """A review: the JSON was written before the table was printed, so a bad --json path lost a finished
    measurement (exit 2, nothing printed).  Now the table comes first, then the error, exit 1."""
    monkeypatch.setattr(compare_layouts, "compare", lambda **kw: _rows())
    from kernelgen.jit import cache
    monkeypatch.setattr(cache, "_default", cache._default)
    blocker = tmp_path / "file"
    blocker.write_text("")
    argv = ["compare-layouts", "--json", str(blocker / "x.json"), "--cache-dir", str(tmp_path / "c")]
    assert compare_layouts.main_args(cli.build_parser().parse_args(argv)) == 1
    cap = capsys.readouterr()
    assert "\n".join(cap.out.splitlines()[1:]) == format_table(_rows())
    assert cap.err.startswith(f"kernelgen compare-layouts: error: --json {blocker / 'x.json'}: not written (")
    deep = tmp_path / "new" / "dir" / "compare.json"    # (parents made, as bench does)
    argv = ["compare-layouts", "--json", str(deep), "--cache-dir", str(tmp_path / "c")]
    assert compare_layouts.main_args(cli.build_parser().parse_args(argv)) == 1   # (soa's replay is WRONG)
    assert [r["scheduler_graph_us"] for r in json.loads(deep.read_text())] == [3.25, 4.5]


@pytest.mark.parametrize("as_json", [False, "-", "file"])
def test_main_prints_the_labelled_results(monkeypatch, capsys, tmp_path, as_json):
    """main_args with compare() stubbed (it needs a GPU): the table or the JSON, exit 1 on a WRONG replay."""
    seen = {}

    def fake_compare(**kw):
        seen.update(kw)
        return _rows()

    monkeypatch.setattr(compare_layouts, "compare", fake_compare)
    from kernelgen.jit import cache
    monkeypatch.setattr(cache, "_default", cache._default)  # --cache-dir replaces the process-wide cache
    argv = ["compare-layouts", "--batch", "5", "--pad-to", "16", "--graph", "--repeat", "7"]
    path = tmp_path / "compare.json"
    argv += ["--json", "-"] if as_json == "-" else ["--json", str(path)] if as_json else []
    argv += ["--cache-dir", str(tmp_path / "c")]
    assert compare_layouts.main_args(cli.build_parser().parse_args(argv)) == 1  # soa's replay is WRONG
    assert (seen["batch"], seen["pad_to"], seen["graph"], seen["repeat"]) == (5, 16, True, 7)
    out = capsys.readouterr().out
    assert cache.get_cache().root == tmp_path / "c"  # --cache-dir, as demo and bench have it
    if as_json == "file":
        assert [r["scheduler_graph_us"] for r in json.loads(path.read_text())] == [3.25, 4.5]
    if as_json == "-":
        assert [r["scheduler_graph_us"] for r in json.loads(out)] == [3.25, 4.5]
    else:
        assert out.splitlines()[0].startswith("batch 5 padded to 16 (CUDA graph replays), 40 query / 900 key tokens")
        assert "\n".join(out.splitlines()[1:]) == format_table(_rows())


def test_time_graph_launches_divides_one_replay_by_the_launches(monkeypatch):
    """The composition of bench.measure.time_graph_launches, with the CUDA parts stubbed."""
    from types import SimpleNamespace

    from kernelgen.apps.bench import measure

    calls, captured, timed = [], [], []

    def fake_capture(fn):
        captured.append(fn)
        fn()  # as capture_graph: the captured function runs (here once)
        return SimpleNamespace(replay="the graph's replay")

    def fake_time_gpu(fn, repeat, warmup, flush, warmup_ms):
        timed.append((fn, repeat, warmup, flush, warmup_ms))
        return 50.0

    monkeypatch.setattr(measure, "capture_graph", fake_capture)
    monkeypatch.setattr(measure, "time_gpu", fake_time_gpu)
    assert measure.time_graph_launches(lambda: calls.append(1), repeat=9, warmup=2) == 50.0 / 20
    assert len(captured) == 1 and len(calls) == 20  # one graph holding 20 launches
    assert timed == [("the graph's replay", 9, 2, True, measure.WARMUP_MS)]
    assert measure.time_graph_launches(lambda: None, launches=5) == 10.0
    with pytest.raises(ValueError, match="launches must be >= 1"):
        measure.time_graph_launches(lambda: None, launches=0)


def test_cli_parses_compare_layouts():
    args = cli.build_parser().parse_args(["compare-layouts", "--layout", "aos", "--batch", "5", "--pad-to", "16",
                                          "--graph", "--no-causal", "--heads", "16/4", "--no-sort", "--json", "out.json",
                                          "--cache-dir", "/tmp/kc"])
    assert args.layout == ["aos"] and args.batch == 5 and args.pad_to == 16 and args.graph and not args.causal
    assert args.heads == "16/4" and args.no_sort and args.json == "out.json" and args.cache_dir == "/tmp/kc"
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["compare-layouts", "--layout", "csr"])


def test_cli_without_a_gpu_is_a_usage_error(monkeypatch, capsys):
    from kernelgen.apps import demo
    monkeypatch.setattr(demo, "has_cuda_gpu", lambda: False)
    assert cli.main(["compare-layouts", "--batch", "4"]) == 2
    assert "needs a CUDA GPU" in capsys.readouterr().err
