"""tools/device_cache.py: the archive of kernels compiled ahead of a device call, and its unpacking
into the kernel cache (what a device call relies on to skip its compiles)."""
import importlib.util
import io
import json
import os
import stat
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _tool():
    spec = importlib.util.spec_from_file_location("device_cache", ROOT / "tools" / "device_cache.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


dc = _tool()

ENTRIES = {
    "attn_sm_90a_bf16_d128_causal_soa_m128n128w8s2b1-0123456789abcdef.cubin": b"\x7fELF" + bytes(range(256)) * 40,
    "attn_sm_90a_bf16_d128_causal_soa_m128n128w8s2b1-0123456789abcdef.json": b'{"key": "0123"}',
    "sched_sm_90a_soa_t1024-fedcba9876543210.cubin": b"\x7fELF" + b"sched" * 300,
    "sched_sm_90a_soa_t1024-fedcba9876543210.json": b'{"key": "fedc"}',
}


@pytest.fixture
def archive(tmp_path):
    """A cache folder with four entry files plus a lock and a temp file, archived into tmp_path/dc."""
    cache = tmp_path / "cache"
    cache.mkdir()
    for n, data in ENTRIES.items():
        (cache / n).write_bytes(data)
    (cache / "sched_sm_90a_soa_t1024-fedcba9876543210.lock").write_bytes(b"")
    (cache / ".tmp-123.cubin").write_bytes(b"partial")
    root = tmp_path / "dc"
    root.mkdir()
    names, raw = dc.write_archive(cache, root)
    m = dc.write_manifest(root, names, raw, fuzz_seed=41)
    return root, names, m


def test_archive_holds_the_entries_only_and_the_manifest_describes_it(archive):
    root, names, m = archive
    assert names == sorted(ENTRIES)
    assert m["entries"] == 2 and m["raw_bytes"] == sum(map(len, ENTRIES.values())) and m["fuzz_seed"] == 41
    assert m["archive_sha256"] == dc.sha256(root / dc.ARCHIVE)
    assert json.loads((root / dc.MANIFEST).read_text()) == m
    with tarfile.open(root / dc.ARCHIVE, "r:xz") as t:
        assert sorted(x.name for x in t) == sorted(ENTRIES)


def test_unpack_writes_missing_entries_owner_only_and_keeps_existing_ones(archive, tmp_path, capsys):
    root, _, _ = archive
    dest = tmp_path / "device_cache"
    kept = "sched_sm_90a_soa_t1024-fedcba9876543210.json"
    dest.mkdir(mode=0o700)
    (dest / kept).write_bytes(b"the device's own")
    # a complete entry (its sidecar is there) is the device's own and stays; a cubin without its sidecar
    # (a compile killed half-way) is replaced together with the sidecar
    orphan = "attn_sm_90a_bf16_d128_causal_soa_m128n128w8s2b1-0123456789abcdef.cubin"
    (dest / orphan).write_bytes(b"half")
    (dest / ".unpack-leftover").write_bytes(b"from a killed unpack")
    assert dc.unpack(root, dest) == 0
    assert "1 entries added, 1 already there, 0 members refused" in capsys.readouterr().out
    for n, data in ENTRIES.items():
        want = data if n.startswith("attn") else b"the device's own" if n == kept else None
        if want is None:
            assert not (dest / n).exists()
            continue
        assert (dest / n).read_bytes() == want
        if n != kept:
            assert stat.S_IMODE(os.stat(dest / n).st_mode) == 0o600
    assert sorted(p.name for p in dest.iterdir()) == sorted(n for n in ENTRIES if n != kept[:-4] + "cubin")
    assert dc.unpack(root, dest) == 0
    assert "0 entries added, 2 already there" in capsys.readouterr().out


def test_unpack_refuses_a_missing_or_altered_archive(archive, tmp_path):
    root, _, _ = archive
    assert dc.unpack(tmp_path / "nowhere", tmp_path / "c1") == 3
    data = bytearray((root / dc.ARCHIVE).read_bytes())
    data[len(data) // 2] ^= 0xFF
    (root / dc.ARCHIVE).write_bytes(bytes(data))
    assert dc.unpack(root, tmp_path / "c2") == 4
    assert not (tmp_path / "c2").exists() or not any((tmp_path / "c2").iterdir())


@pytest.mark.parametrize("text", ["not json", '{"archive": "cache.tar.xz"}', "[1, 2]", "null"])
def test_unpack_refuses_a_manifest_that_is_not_one_with_exit_4(tmp_path, capsys, text):
    """A review: a manifest that is not JSON, or lacks its fields, raised instead of returning a code."""
    (tmp_path / dc.MANIFEST).write_text(text)
    assert dc.unpack(tmp_path, tmp_path / "c") == 4
    assert "is not a device-cache manifest" in capsys.readouterr().out and not (tmp_path / "c").exists()


@pytest.mark.parametrize("groups", ["", "bogus", "variant,bogus"])
def test_build_refuses_unknown_or_empty_groups_before_any_step(tmp_path, monkeypatch, capsys, groups):
    """A review: --groups "" built every group, and a bad name failed only at the gpu_tests step, after the
    serving step had run (and the archive was still written)."""
    monkeypatch.setattr(dc.subprocess, "run", lambda *a, **k: pytest.fail("a step ran"))
    with pytest.raises(SystemExit) as e:
        dc.main(["build", "--dir", str(tmp_path / "x"), "--groups", groups])
    assert e.value.code == 2 and "--groups: comma-separated names of" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_unpack_refuses_members_that_are_not_plain_cache_entries(tmp_path, capsys):
    root = tmp_path / "dc"
    root.mkdir()
    good = "combine_sm_90a_bf16_dv128-00112233445566aa.cubin"
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:xz") as t:
        def add(name, data=b"x", kind=tarfile.REGTYPE, link=""):
            info = tarfile.TarInfo(name)
            info.type, info.linkname, info.size = kind, link, len(data) if kind == tarfile.REGTYPE else 0
            t.addfile(info, io.BytesIO(data) if kind == tarfile.REGTYPE else None)
        add(good, b"\x7fELF")
        add("../evil-0123456789abcdef.cubin")                       # outside the cache
        add("sub/attn-0123456789abcdef.cubin")                      # a folder
        add("attn-0123456789abcdef.cubin", kind=tarfile.SYMTYPE, link="/etc/passwd")
        add("notes.txt")                                            # not an entry
        add("attn-0123456789abcdef.lock")                           # a lock
    (root / dc.ARCHIVE).write_bytes(buf.getvalue())
    dc.write_manifest(root, [good], 4)
    dest = tmp_path / "cache"
    assert dc.unpack(root, dest) == 0
    assert "1 entries added, 0 already there, 5 members refused" in capsys.readouterr().out
    assert [p.name for p in dest.iterdir()] == [good]
    assert not (tmp_path / "evil-0123456789abcdef.cubin").exists()


def test_build_steps_compile_what_the_device_call_will_ask_for(tmp_path):
    steps = dict(dc.steps(str(tmp_path), 3, 41, 2000))
    assert list(steps) == ["serving", "gpu_tests", "fuzz", "bench"]
    assert steps["serving"][2:] == ["kernelgen", "warmup", "--serving", "--arch", "sm_90a", "--jobs", "3",
                                    "--cache-dir", str(tmp_path)]
    fz = steps["fuzz"]
    assert fz[fz.index("--seed") + 1] == "41" and fz[fz.index("--batches") + 1] == "2000"
    assert "--prewarm-only" in fz and fz[fz.index("--arch") + 1] == "sm_90a"
    assert [n for n, _ in dc.steps(str(tmp_path), 3, 41, 2000, bench=False)] == ["serving", "gpu_tests", "fuzz"]


def test_env_sets_parse_and_reject_malformed_settings():
    assert dc._env_sets([]) == [{}]
    assert dc._env_sets(["KERNELGEN_SM90_PACK_GQA=1", "A=1,B=x"]) == [
        {}, {"KERNELGEN_SM90_PACK_GQA": "1"}, {"A": "1", "B": "x"}]
    with pytest.raises(SystemExit, match="NAME=VALUE"):
        dc._env_sets(["KERNELGEN_SM90_PACK_GQA"])


def test_bench_specs_derive_without_a_gpu():
    specs = dc._bench_specs()
    assert specs and all(s.arch == "sm_90a" for s in specs)
    assert any(s.kind == "attention" for s in specs) and any(s.kind == "scheduler" for s in specs)
    # each preset's single-shape entries too (the bench run with --model PRESET): gpt-oss's and gemma2's FP8 prefill
    fp8 = {(s.head_dim, s.fp8_mma) for s in specs if s.kind == "attention" and s.kv_dtype and s.mainloop == "sm90a"}
    assert {(64, True), (128, True), (256, True)} <= fp8


def test_gpu_check_unpacks_a_carried_archive_before_warming():
    text = (ROOT / "tools" / "gpu_check.sh").read_text()
    assert "tools/device_cache.py unpack --dir .devcache" in text
    assert text.index("device_cache.py unpack") < text.index("kernelgen warmup")
    assert "/.devcache*/" in (ROOT / ".gitignore").read_text().splitlines()   # .devcache, .devcache_bench, ...


def test_archive_without_the_xz_tool_is_the_same_format(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    cache.mkdir()
    for n, data in ENTRIES.items():
        (cache / n).write_bytes(data)
    root = tmp_path / "dc"
    root.mkdir()
    monkeypatch.setattr(dc.shutil, "which", lambda name: None)
    names, raw = dc.write_archive(cache, root)
    dc.write_manifest(root, names, raw)
    assert dc.unpack(root, tmp_path / "out") == 0
    assert {p.name: p.read_bytes() for p in (tmp_path / "out").iterdir()} == ENTRIES


def test_build_runs_only_the_steps_asked_for(tmp_path, monkeypatch):
    """``--steps bench``: a small archive of one step's kernels (to fit beside a peers part in a call)."""
    ran = []

    class R:
        returncode, stdout, stderr = 0, "ok\n", ""

    def fake_run(cmd, env=None, cwd=None, capture_output=True, text=True):
        ran.append((cmd, env.get("KERNELGEN_SM90_PACK_GQA")))
        cache = Path(env["KERNELGEN_CACHE_DIR"])
        cache.mkdir(parents=True, exist_ok=True)
        (cache / f"sched_sm_90a_soa_t1024-{len(ran):016x}.cubin").write_bytes(b"x" * 10)
        return R()
    monkeypatch.setattr(dc.subprocess, "run", fake_run)
    m = dc.build(tmp_path / "dc", 2, 41, 10, [{}, {"KERNELGEN_SM90_PACK_GQA": "1"}], only=("bench",))
    assert [c[0][2] for c in ran] == ["_bench", "_bench"] and [c[1] for c in ran] == [None, "1"]
    assert m["entries"] == 2 and m["fuzz_seed"] is None and [s["step"] for s in m["steps"]] == ["bench", "bench"]
    with pytest.raises(SystemExit):
        dc.main(["build", "--dir", str(tmp_path / "x"), "--steps", "nope"])


def test_unpack_refuses_another_nvrtc_or_a_directory_the_cache_will_not_read(archive, tmp_path, capsys, monkeypatch):
    """Kernels built with another NVRTC could never be found (the version is in their key): nothing is
    unpacked (5).  A directory the cache refuses (group-writable) would never be read: 6.  Other
    KERNELGEN_DEFINES only warn."""
    root, _, m = archive
    assert m["nvrtc"] == dc.nvrtc()
    monkeypatch.setattr(dc, "nvrtc", lambda: [99, 9])
    assert dc.unpack(root, tmp_path / "c1") == 5 and not (tmp_path / "c1").exists()
    assert "NVRTC" in capsys.readouterr().out
    monkeypatch.setattr(dc, "nvrtc", lambda: m["nvrtc"])
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    assert dc.unpack(root, shared) == 6 and not any(shared.iterdir())
    monkeypatch.setenv(dc.DEFINES_ENV, "KG_X=1")
    assert dc.unpack(root, tmp_path / "c2") == 0
    assert "warning: built with KERNELGEN_DEFINES=''" in capsys.readouterr().out


def test_build_archives_an_empty_cache_and_names_its_steps(tmp_path, monkeypatch):
    class R:
        returncode, stdout, stderr = 1, "", "boom\n"
    monkeypatch.setattr(dc.subprocess, "run", lambda *a, **k: R())
    m = dc.build(tmp_path / "dc", 1, 41, 5, [{}], only=("serving",))
    assert m["entries"] == 0 and m["steps"][0]["rc"] == 1 and m["steps"][0]["last_line"] == "boom"
    assert dc.unpack(tmp_path / "dc", tmp_path / "c") == 0


def test_build_into_a_kept_folder(tmp_path, monkeypatch):
    """--work: the compile folder is kept (a rebuild compiles only what changed) and archived whole."""
    class R:
        returncode, stdout, stderr = 0, "ok", ""
    monkeypatch.setattr(dc.subprocess, "run", lambda *a, **k: R())
    work = tmp_path / "work"
    work.mkdir()
    (work / "sched_sm_90a_soa_t1024-00000000000000aa.cubin").write_bytes(b"x")
    m = dc.build(tmp_path / "dc", 1, 41, 5, [{}], only=("serving",), work=work)
    assert m["entries"] == 1 and (work / "sched_sm_90a_soa_t1024-00000000000000aa.cubin").exists()


@pytest.mark.parametrize("only, message", [("", "--only: name at least one group"),
                                           ("variant,", "--only: unknown group(s) ['']"),
                                           ("nope", "--only: unknown group(s) ['nope']")])
def test_warm_gpu_tests_refuses_an_empty_or_unknown_group_list(capsys, only, message):
    """A review: --only "" selected every group (a device call would compile them all)."""
    spec = importlib.util.spec_from_file_location("warm_gpu_tests", ROOT / "tools" / "warm_gpu_tests.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    with pytest.raises(SystemExit) as e:
        mod.main(["--only", only, "--list"])
    assert e.value.code == 2 and message in capsys.readouterr().err
