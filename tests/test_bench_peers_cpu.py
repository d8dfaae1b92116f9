"""CPU tests of the FlashAttention-3 / FlashAttention-4 peers of ``kernelgen bench`` and of the tool
that carries them to a GPU machine (tools/peer_wheels.py): module loading (the fa3 config shim, the
CuTe DSL's dsl_packages path), the reasons a peer cannot run a call, the best-peer and first-call
arithmetic of the report, and the parts' split / join / verify / unpack cycle."""
from __future__ import annotations

import importlib.util
import io
import json
import os
import sys
import tarfile
from pathlib import Path

import pytest

from kernelgen.apps.bench import peers, plots, report

REPO = Path(__file__).resolve().parents[1]


def _tool():
    spec = importlib.util.spec_from_file_location("peer_wheels", REPO / "tools" / "peer_wheels.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture
def clean_modules(monkeypatch):
    """Forget the fake peer modules a test imports (sys.path and sys.modules restored)."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    names = ("fa3_fwd_config", "fa3_fwd_interface", "flash_attn_config", "nvidia_cutlass_dsl", "flash_attn",
             "flash_attn.cute", "flash_attn.cute.interface")
    saved = {n: sys.modules.pop(n) for n in names if n in sys.modules}
    yield
    for n in names:
        sys.modules.pop(n, None)
    sys.modules.update(saved)


# ------------------------------------------------------------------------------ module loading
def test_fa3_unavailable_names_the_install_tool(clean_modules):
    if importlib.util.find_spec("fa3_fwd_config") is not None:
        pytest.skip("fa3-fwd is installed here")
    with pytest.raises(peers.Unavailable, match="fa3-fwd is not installed .*tools/peer_wheels.py"):
        peers.load_fa3()


def test_fa3_config_shim_registers_flash_attn_config(clean_modules, tmp_path):
    """fa3-fwd's interface imports ``flash_attn_config``; load_fa3 maps it to ``fa3_fwd_config``."""
    (tmp_path / "fa3_fwd_config.py").write_text(
        "CONFIG = {'build_flags': {'FLASHATTENTION_DISABLE_LOCAL': True, 'FLASHATTENTION_DISABLE_FP16': True}}\n")
    (tmp_path / "fa3_fwd_interface.py").write_text(
        "from flash_attn_config import CONFIG\nLOCAL_OFF = CONFIG['build_flags']['FLASHATTENTION_DISABLE_LOCAL']\n")
    sys.path.insert(0, str(tmp_path))
    mod, flags = peers.load_fa3()
    assert mod.LOCAL_OFF is True
    assert sys.modules["flash_attn_config"] is sys.modules["fa3_fwd_config"]
    assert flags == {"FLASHATTENTION_DISABLE_LOCAL": True, "FLASHATTENTION_DISABLE_FP16": True}


def test_fa3_broken_interface_is_a_reason(clean_modules, tmp_path):
    (tmp_path / "fa3_fwd_config.py").write_text("CONFIG = {}\n")
    (tmp_path / "fa3_fwd_interface.py").write_text("raise OSError('libcuda.so.1: cannot open shared object')\n")
    sys.path.insert(0, str(tmp_path))
    with pytest.raises(peers.Unavailable, match="fa3-fwd does not import: OSError: libcuda"):
        peers.load_fa3()


def test_fa4_adds_the_dsl_packages_folder(clean_modules, tmp_path):
    """With ``pip install --target`` the CuTe DSL's .pth is not read: load_fa4 adds its folder."""
    dsl = tmp_path / "nvidia_cutlass_dsl"
    (dsl / "dsl_packages" / "cutlass").mkdir(parents=True)
    (dsl / "__init__.py").write_text("")
    (dsl / "dsl_packages" / "cutlass" / "__init__.py").write_text("WHERE = 'dsl_packages'\n")
    cute = tmp_path / "flash_attn" / "cute"
    cute.mkdir(parents=True)
    (tmp_path / "flash_attn" / "__init__.py").write_text("")
    (cute / "__init__.py").write_text("")
    (cute / "interface.py").write_text("import cutlass\nWHERE = cutlass.WHERE\n")
    sys.path.insert(0, str(tmp_path))
    iface = peers.load_fa4()
    assert iface.WHERE == "dsl_packages"
    assert str(dsl / "dsl_packages") in sys.path


def test_fa4_unavailable_without_the_package(clean_modules, monkeypatch):
    if importlib.util.find_spec("flash_attn") is not None:
        pytest.skip("a flash_attn package is installed here")
    with pytest.raises(peers.Unavailable, match="flash-attn-4 is not installed"):
        peers.load_fa4()


def test_missing_peer_is_reported_not_raised(clean_modules):
    """Through the harness a peer that is not installed is one line under ``unavailable``."""
    if importlib.util.find_spec("fa3_fwd_config") is not None:
        pytest.skip("fa3-fwd is installed here")
    entry = {"name": "x"}
    peers.measure(entry, {peers.FA3: peers.fa3(None, None, None, True, dense_batch=1)}, timer=lambda fn: 1.0)
    assert entry["peers"] == {} and peers.FA3 not in entry.get("first_call_s", {})
    assert "fa3-fwd is not installed" in entry["unavailable"][peers.FA3]


# ------------------------------------------------------------------------- what fa3 cannot run
FLAGS = {"FLASHATTENTION_DISABLE_LOCAL": True, "FLASHATTENTION_DISABLE_FP16": True,
         "FLASHATTENTION_DISABLE_SOFTCAP": False, "FLASHATTENTION_DISABLE_PAGEDKV": True}


@pytest.mark.parametrize("kw,why", [
    ({}, None),
    ({"window_left": 4095}, "this fa3-fwd build has no local (sliding-window) attention (FLASHATTENTION_DISABLE_LOCAL)"),
    ({"window_left": 0}, "no local"),
    ({"dtype_name": "fp16"}, "this fa3-fwd build has no fp16 (FLASHATTENTION_DISABLE_FP16)"),
    ({"softcap": 50.0}, None),
    ({"head_dim": 192, "head_dim_v": 128}, None),
    ({"head_dim": 128, "head_dim_v": 64}, "no head_dim 128 with head_dim_v 64"),
])
def test_fa3_missing_feature(kw, why):
    got = peers.fa3_missing_feature(FLAGS, **kw)
    assert (got is None) if why is None else (why in got)
    assert peers.fa3_missing_feature({**FLAGS, "FLASHATTENTION_DISABLE_SOFTCAP": True}, softcap=1.0) == (
        "this fa3-fwd build has no soft-cap (FLASHATTENTION_DISABLE_SOFTCAP)")
    assert peers.fa3_missing_feature({}, window_left=10) is None  # a build with local attention


def test_fa3_and_fa4_call_their_entries_with_kernelgen_tensors(clean_modules, tmp_path, monkeypatch):
    """The builders pass kernelgen's packed tensors (or their dense views) and the call's options
    through, and turn the result into kernelgen's (total_q, heads, d) layout."""
    torch = pytest.importorskip("torch")
    (tmp_path / "fa3_fwd_config.py").write_text("CONFIG = {'build_flags': {}}\n")
    (tmp_path / "fa3_fwd_interface.py").write_text(
        "CALLS = []\n"
        "def flash_attn_func(q, k, v, **kw):\n    CALLS.append(('dense', q.shape, kw)); return q * 2\n"
        "def flash_attn_varlen_func(q, k, v, cu_q, cu_k, mq, mk, **kw):\n"
        "    CALLS.append(('varlen', q.shape, mq, mk, kw)); return q * 3\n")
    sys.path.insert(0, str(tmp_path))
    monkeypatch.setattr(peers, "_require_hopper", lambda who: None)
    q = torch.randn(2 * 8, 4, 16)
    k = v = torch.randn(2 * 8, 2, 16)
    peer = peers.fa3(q, k, v, True, dense_batch=2)()
    out = peer.output(peer.fn())
    assert torch.equal(out, q * 2) and out.shape == q.shape
    cu = torch.tensor([0, 8, 16], dtype=torch.int32)
    peer = peers.fa3(q, k, v, False, cu_q=cu, cu_k=cu, max_q=8, max_k=8, softcap=30.0)()
    assert torch.equal(peer.output(peer.fn()), q * 3)
    mod = sys.modules["fa3_fwd_interface"]
    assert mod.CALLS[0] == ("dense", (2, 8, 4, 16), {"causal": True, "softcap": 0.0, "num_splits": 0,
                                                    "pack_gqa": None})
    assert mod.CALLS[1] == ("varlen", (16, 4, 16), 8, 8, {"causal": False, "softcap": 30.0, "num_splits": 0,
                                                         "pack_gqa": None})
    with pytest.raises(peers.Unavailable, match="no head_dim 16 with head_dim_v 8"):
        peers.fa3(q, k, torch.randn(16, 2, 8), True, dense_batch=2)()

    cute = tmp_path / "flash_attn" / "cute"
    cute.mkdir(parents=True)
    (tmp_path / "flash_attn" / "__init__.py").write_text("")
    (cute / "__init__.py").write_text("")
    (cute / "interface.py").write_text(
        "CALLS = []\n"
        "def flash_attn_varlen_func(q, k, v, **kw):\n    CALLS.append(kw); return q + 1, None\n")
    pt, used = torch.zeros(2, 3, dtype=torch.int32), torch.tensor([40, 7], dtype=torch.int32)
    peer = peers.fa4(q, k, v, True, cu_q=cu, max_q=8, max_k=40, window_left=127, page_table=pt, seqused_k=used)()
    assert torch.equal(peer.output(peer.fn()), q + 1)
    kw = sys.modules["flash_attn.cute.interface"].CALLS[0]
    assert kw["page_table"] is pt and kw["seqused_k"] is used and kw["cu_seqlens_k"] is None
    assert (kw["window_size"], kw["num_splits"], kw["causal"], kw["max_seqlen_k"]) == ((127, 0), 1, True, 40)


# ------------------------------------------------------------------------------- report pieces
def _entry(**kw):
    e = {"name": "e", "suite": "prefill", "us": 100.0, "metric": "tflops", "flops": 1e9, "peers": {},
         "unavailable": {}}
    e.update(kw)
    return report.finalize(e, {"copy_tbps": 4.0, "bf16_matmul_tflops": 800.0})


def test_best_peer_is_the_fastest_other_implementation():
    e = _entry(peers={"fa3": 120.0, "fa4": 90.0, "cudnn_sdpa": 95.0, "kernelgen_sm80": 50.0, "kernelgen_aos": 60.0,
                      "serial": 70.0, "two_streams": 65.0})
    assert (e["best_peer"], e["vs_best"]) == ("fa4", pytest.approx(0.9))
    e = _entry(peers={"kernelgen_sm90a": 80.0})
    assert (e["best_peer"], e["vs_best"]) == (None, None)
    assert set(peers.EXTERNAL) >= {"fa3", "fa3_unpaged", "fa4", "cudnn_sdpa", "torch_fa2", "torch_fa2_varlen"}
    assert not {"serial", "two_streams", "kernelgen_sm80", "kernelgen_sm90a", "kernelgen_aos"} & set(peers.EXTERNAL)


def test_first_call_summary():
    es = [_entry(name="a", first_call_s={"fa4": 10.0, "fa3": 0.5}), _entry(name="b", first_call_s={"fa4": 2.0}),
          _entry(name="c", first_call_s={"fa4": 4.0}), {"name": "compile_cold_variant", "us": 3.2e6}]
    s = report.first_call_summary(es)
    assert s["fa4"] == {"entries": 3, "median_s": 4.0, "max_s": 10.0, "max_entry": "a"}
    assert s["fa3"] == {"entries": 1, "median_s": 0.5, "max_s": 0.5, "max_entry": "a"}
    assert s["kernelgen_cold_compile_s"] == pytest.approx(3.2)
    assert report.first_call_summary([_entry()]) == {}
    text = report.first_call_text(s)
    assert "| fa4 | 3 | 4.00 | 10.00 (a) |" in text and "3.20 s" in text
    rep = report.build_report(es[:3], None, "H200", commit="x", date="d")
    assert rep["first_call"]["fa4"]["entries"] == 3


def test_peer_rates_and_plot(tmp_path):
    e = _entry(name="p", peers={"fa3": 80.0, "fa4": 125.0, "cudnn_sdpa": 200.0})
    r = plots.peer_rates(e)
    assert r["kernelgen"] == pytest.approx(10.0)  # 1e9 FLOP in 100 us
    assert (r["FA3"], r["FA4"], r["cuDNN"]) == (pytest.approx(12.5), pytest.approx(8.0), pytest.approx(5.0))
    d = _entry(name="d", suite="decode", metric="tbps", bytes=4e8, peers={"fa3_unpaged": 200.0})
    assert plots.peer_rates(d) == {"kernelgen": pytest.approx(4.0), "FA3": pytest.approx(2.0)}
    assert plots.peer_rates(_entry(name="s", suite="scheduler", metric=None)) == {}
    if importlib.util.find_spec("matplotlib") is None:
        return
    path = tmp_path / "peers.png"
    assert plots.peer_bars([e, d], path, title="NVIDIA H200, commit abc")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not plots.peer_bars([_entry(name="alone")], tmp_path / "none.png")


# ------------------------------------------------------------------------ tools/peer_wheels.py
def test_split_sizes():
    pw = _tool()
    assert pw.split_sizes(10, 4) == [4, 3, 3]
    assert pw.split_sizes(8, 4) == [4, 4]
    assert pw.split_sizes(3, 100) == [3]
    assert sum(pw.split_sizes(78_000_001, pw.MAX_PART_BYTES)) == 78_000_001
    assert max(pw.split_sizes(78_000_001, pw.MAX_PART_BYTES)) <= pw.MAX_PART_BYTES
    with pytest.raises(ValueError, match="max_part"):
        pw.split_sizes(5, 0)


def _make_parts(pw, root: Path, files: dict, max_part: int) -> dict:
    """What ``pack`` writes, from a small folder (pack's pip step needs the real wheels)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:xz") as t:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"./{name}")
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    blob = buf.getvalue()
    parts, at = [], 0
    for i, size in enumerate(pw.split_sizes(len(blob), max_part), 1):
        p = root / f"part{i}" / f"{pw.ARCHIVE}.{i}"
        p.parent.mkdir(parents=True)
        p.write_bytes(blob[at:at + size])
        at += size
        parts.append({"file": f"part{i}/{p.name}", "bytes": size, "sha256": pw.sha256(p)})
    whole = root / "whole"
    whole.write_bytes(blob)
    man = {"pins": list(pw.PINS), "wheels": ["a.whl"], "archive_sha256": pw.sha256(whole),
           "archive_bytes": len(blob), "parts": parts}
    whole.unlink()
    (root / pw.MANIFEST).write_text(json.dumps(man))
    return man


def test_install_over_two_calls(tmp_path, capsys):
    """The first call carries part 1 (kept aside, 'part2 missing', exit 3); the second carries part
    2 only and unpacks everything; a third finds it unpacked."""
    pw = _tool()
    src, dest = tmp_path / "src", tmp_path / "dest"
    files = {"fa3_fwd_config.py": "CONFIG = {}\n", "pkg/mod.py": f"X = '{os.urandom(600).hex()}'\n"}
    man = _make_parts(pw, src, files, max_part=300)
    assert len(man["parts"]) >= 2
    call1 = tmp_path / "call1"
    (call1 / "part1").mkdir(parents=True)
    (call1 / pw.MANIFEST).write_text((src / pw.MANIFEST).read_text())
    (call1 / man["parts"][0]["file"]).write_bytes((src / man["parts"][0]["file"]).read_bytes())
    assert pw.install(call1, dest) == 3
    assert "part2/peers.tar.xz.2 missing" in capsys.readouterr().out
    call2 = tmp_path / "call2"
    call2.mkdir()
    (call2 / pw.MANIFEST).write_text((src / pw.MANIFEST).read_text())
    for p in man["parts"][1:]:
        (call2 / p["file"]).parent.mkdir(parents=True, exist_ok=True)
        (call2 / p["file"]).write_bytes((src / p["file"]).read_bytes())
    assert pw.install(call2, dest) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out[-1].split(":") == pw.site_paths(dest)
    site = dest / "site"
    assert (site / "pkg" / "mod.py").read_text() == files["pkg/mod.py"]
    assert "from fa3_fwd_config import CONFIG" in (site / "flash_attn_config.py").read_text()
    assert pw.install(call2, dest) == 0 and "already unpacked" in capsys.readouterr().out


def test_install_refuses_a_corrupt_part(tmp_path, capsys):
    pw = _tool()
    src = tmp_path / "src"
    man = _make_parts(pw, src, {"a.py": f"A = '{os.urandom(600).hex()}'\n"}, max_part=400)
    f = src / man["parts"][-1]["file"]
    data = bytearray(f.read_bytes())
    data[0] ^= 0xFF
    f.write_bytes(bytes(data))
    assert pw.install(src, tmp_path / "dest") == 4
    assert "does not match the manifest's sha256" in capsys.readouterr().out
    assert not (tmp_path / "dest" / "site").exists()
    assert pw.install(tmp_path / "nothing", tmp_path / "dest") == 3  # no manifest carried


def test_install_leaves_nothing_half_unpacked(tmp_path, capsys):
    """An archive that matches its manifest but cannot be unpacked (a truncated stream; a member the
    data filter refuses, outside the site) is refused with exit 4 and leaves no site, no staging
    folder and no joined archive behind, so no later call takes a half-filled site for the peers."""
    pw = _tool()
    src, dest = tmp_path / "src", tmp_path / "dest"
    man = _make_parts(pw, src, {"a.py": f"A = '{os.urandom(600).hex()}'\n"}, max_part=10 ** 6)
    f = src / man["parts"][0]["file"]
    f.write_bytes(f.read_bytes()[:f.stat().st_size // 2])    # truncated, manifest made to match it
    man["parts"][0].update(bytes=f.stat().st_size, sha256=pw.sha256(f))
    man["archive_sha256"] = pw.sha256(f)
    (src / pw.MANIFEST).write_text(json.dumps(man))
    assert pw.install(src, dest) == 4
    assert "could not be unpacked" in capsys.readouterr().out
    assert sorted(p.name for p in dest.iterdir()) == ["parts"]
    # a corrupt xz stream inside (lzma.LZMAError, neither a TarError nor an OSError), manifest matching it
    src3 = tmp_path / "src3"
    man3 = _make_parts(pw, src3, {f"m{i}.py": f"X = '{os.urandom(3000).hex()}'\n" for i in range(4)}, max_part=10 ** 6)
    f3 = src3 / man3["parts"][0]["file"]
    data = bytearray(f3.read_bytes())
    data[2 * len(data) // 3] ^= 0xFF
    f3.write_bytes(bytes(data))
    man3["parts"][0].update(sha256=pw.sha256(f3))
    man3["archive_sha256"] = pw.sha256(f3)
    (src3 / pw.MANIFEST).write_text(json.dumps(man3))
    assert pw.install(src3, dest) == 4
    assert "could not be unpacked" in capsys.readouterr().out
    assert sorted(p.name for p in dest.iterdir()) == ["parts"]
    assert tarfile.data_filter                               # (Python >= 3.11.4 and 3.12 have it)
    src2 = tmp_path / "src2"
    _make_parts(pw, src2, {"ok.py": "OK = 1\n", "../outside.py": "X = 1\n"}, max_part=10 ** 6)
    assert pw.install(src2, dest) == 4
    assert "could not be unpacked" in capsys.readouterr().out
    assert sorted(p.name for p in dest.iterdir()) == ["parts"] and not (tmp_path / "outside.py").exists()


def test_pins_match_the_issue():
    pw = _tool()
    pins = dict(p.split("==") for p in pw.PINS)
    assert pins["fa3-fwd"] == "0.0.3" and pins["flash-attn-4"] == "4.0.0b36"
    assert pins["nvidia-cutlass-dsl"] == pins["nvidia-cutlass-dsl-libs-cu13"] == "4.8.1"
    assert {"quack-kernels", "apache-tvm-ffi", "torch-c-dlpack-ext", "nvidia-cutlass-dsl-libs-base",
            "nvidia-cutlass-dsl-libs-core"} <= set(pins)
    assert pw.MAX_PART_BYTES + 8 * 2 ** 20 <= 64 * 2 ** 20  # a part plus the working tree fits one call


def test_install_replaces_a_stale_kept_part_with_the_carried_one(tmp_path, capsys):
    """A part kept aside by an earlier call of the lease (an earlier ``pack``: same name, same size,
    other bytes) does not hide the right part this call carries: the carried part is checked and
    kept instead, and the peers unpack."""
    pw = _tool()
    src, dest = tmp_path / "src", tmp_path / "dest"
    files = {"fa3_fwd_config.py": "CONFIG = {}\n", "pkg/mod.py": f"X = '{os.urandom(600).hex()}'\n"}
    man = _make_parts(pw, src, files, max_part=300)
    stale = dest / "parts" / Path(man["parts"][0]["file"]).name
    stale.parent.mkdir(parents=True)
    stale.write_bytes(os.urandom(man["parts"][0]["bytes"]))      # what an earlier pack's part 1 left
    assert pw.install(src, dest) == 0, capsys.readouterr().out
    assert (dest / "site" / "pkg" / "mod.py").read_text() == files["pkg/mod.py"]


def test_a_disagreeing_peer_is_not_the_best_peer():
    """A peer whose output is outside bf16 tolerance computed something else: it cannot be the
    bar kernelgen is measured against, and the entry's agreement check fails."""
    e = _entry(peers={"fa3": 80.0, "fa4": 90.0}, max_diff={"fa3": 0.5, "fa4": 0.001}, ref_max={"fa3": 1.0, "fa4": 1.0})
    assert (e["best_peer"], e["vs_best"]) == ("fa4", pytest.approx(0.9))
    assert report.disagrees(e, "fa3") and not report.disagrees(e, "fa4") and report.agrees(e) is False


def test_preload_reports_what_it_could_not_import(clean_modules):
    if importlib.util.find_spec("fa3_fwd_config") is not None or importlib.util.find_spec("flash_attn") is not None:
        pytest.skip("a peer is installed here")
    got = peers.preload()
    assert set(got) == {"fa3", "fa4"}
    assert "fa3-fwd is not installed" in got["fa3"] and "flash-attn-4 is not installed" in got["fa4"]


def test_first_call_text_names_the_cold_call():
    s = report.first_call_summary([{"name": "compile_cold_variant", "us": 3.5e5},
                                   {"name": "compile_cold_call", "us": 2.4e6},
                                   _entry(name="a", first_call_s={"fa4": 3.0})])
    assert s["kernelgen_cold_call_s"] == pytest.approx(2.4)
    assert "of every kernel of a first call (scheduler and attention): 2.40 s" in report.first_call_text(s)
