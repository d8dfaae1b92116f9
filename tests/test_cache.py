"""Tests of the on-disk kernel cache (kernelgen/jit/cache.py).  CPU only: NVRTC needs no GPU.

Every test uses a temporary cache root; KERNELGEN_CACHE_DIR is pointed into tmp_path so the
user's real cache is never touched.  Edge cases from shared/research/edge_cases.md: E7
(concurrent cold builds), E8 (key derivation), E9 (JIT disabled / read-only cache).
"""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
import warnings
from pathlib import Path

import filelock
import pytest

from kernelgen import _version
from kernelgen.jit import cache, compiler, render
from kernelgen.kernels.spec import CombineSpec

REPO = Path(__file__).resolve().parents[1]
# The kernels these tests cache: combine kernels, the cheapest to compile (~0.1 s, a scheduler ~2 s);
# the child processes below compile for real.
SPEC_A = CombineSpec("sm_90a", "bf16", 128)
SPEC_B = CombineSpec("sm_90a", "fp16", 256)
SPEC_C = CombineSpec("sm_80", "bf16", 64)


@pytest.fixture(autouse=True)
def _isolated_env(tmp_path, monkeypatch):
    monkeypatch.delenv("KERNELGEN_DISABLE_JIT", raising=False)
    monkeypatch.setenv("KERNELGEN_CACHE_DIR", str(tmp_path / "default-cache"))


def sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


def files(root: Path) -> list[str]:
    return sorted(os.listdir(root)) if root.exists() else []


def snapshot(root: Path) -> dict[str, tuple[int, int]]:
    return {n: (os.stat(root / n).st_mtime_ns, os.stat(root / n).st_size) for n in files(root)}


def stem_of(c: cache.KernelCache, spec) -> Path:
    src = render.render(spec)
    key = c.key_for(src, spec.arch, compiler.default_options(spec.arch))
    return c.root / f"{spec.name}-{key[:16]}"


def cache_warnings(record) -> list[warnings.WarningMessage]:
    return [w for w in record if issubclass(w.category, cache.KernelCacheWarning)]


# 1 ------------------------------------------------------------------------------------------
def test_compile_once_then_memory_then_disk(tmp_path):
    root = tmp_path / "c"
    c = cache.KernelCache(root)
    n0 = compiler.COMPILE_COUNT
    e = c.get(SPEC_A)
    assert compiler.COMPILE_COUNT == n0 + 1
    assert e.compiled is True and e.name == SPEC_A.name and len(e.key) == 64
    assert e.cubin[:4] == b"\x7fELF" and e.resources["registers"] > 0
    stem = stem_of(c, SPEC_A)
    assert e.path == Path(str(stem) + ".cubin")
    for suffix in (".cubin", ".json", ".lock"):
        p = Path(str(stem) + suffix)
        assert p.exists(), suffix
        assert os.stat(p).st_mode & 0o777 == 0o600, suffix
    assert os.stat(root).st_mode & 0o777 == 0o700
    assert Path(str(stem) + ".cubin").read_bytes() == e.cubin
    meta = json.loads(Path(str(stem) + ".json").read_text())
    assert meta["key"] == e.key and meta["spec"] == SPEC_A.to_json()
    assert meta["cubin_sha256"] == sha(e.cubin) and meta["cubin_size"] == len(e.cubin)
    assert meta["nvrtc_version"] == list(compiler.nvrtc_version())
    assert meta["kernelgen_version"] == _version.__version__
    assert meta["resources"] == e.resources

    e2 = c.get(SPEC_A)  # same process, same instance: memory hit
    assert compiler.COMPILE_COUNT == n0 + 1 and e2.compiled is False and e2.cubin == e.cubin

    before = snapshot(root)
    e3 = cache.KernelCache(root).get(SPEC_A)  # new instance: disk hit
    assert compiler.COMPILE_COUNT == n0 + 1
    assert e3.compiled is False and e3.cubin == e.cubin and e3.path == e.path
    assert e3.resources == e.resources
    assert snapshot(root) == before
    assert cache.KernelCache(root).lookup(SPEC_B) is None
    assert cache.KernelCache(root).lookup(SPEC_A).cubin == e.cubin


THREADS_CHILD = r"""
import json, sys, threading
from kernelgen.jit import cache, compiler
from kernelgen.kernels.spec import CombineSpec
c = cache.KernelCache(sys.argv[1])
specs = [CombineSpec("sm_90a", "bf16", 128), CombineSpec("sm_90a", "fp16", 256)] * 4  # SPEC_A, SPEC_B
barrier, out, errors = threading.Barrier(len(specs)), [], []
def work(spec):
    barrier.wait()
    try:
        e = c.get(spec)
        out.append([e.name, e.key, e.cubin.hex(), e.compiled])
    except Exception as exc:
        errors.append(repr(exc))
threads = [threading.Thread(target=work, args=(s,)) for s in specs]
for t in threads: t.start()
for t in threads: t.join()
print(json.dumps({"count": compiler.COMPILE_COUNT, "out": out, "errors": errors}))
"""


def test_threads_compile_once_per_spec(tmp_path):
    """8 threads of a cold process (NVRTC not loaded yet), 2 specs: one compile each, no errors."""
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, "-c", THREADS_CHILD, str(tmp_path / "c")],
                       capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 0, p.stderr
    r = json.loads(p.stdout.strip().splitlines()[-1])
    assert r["errors"] == []
    assert r["count"] == 2 and len(r["out"]) == 8
    for name in (SPEC_A.name, SPEC_B.name):
        mine = [o for o in r["out"] if o[0] == name]
        assert len(mine) == 4 and len({o[2] for o in mine}) == 1 and sum(o[3] for o in mine) == 1


# 2 ------------------------------------------------------------------------------------------
CHILD = r"""
import json, os, sys, time, hashlib
from kernelgen.jit import cache, compiler, render
from kernelgen.kernels.spec import spec_from_json
root, go, ready = sys.argv[1:4]
spec = spec_from_json(json.loads(sys.argv[4]))
c = cache.KernelCache(root)
render.render(spec); compiler.nvrtc_version()          # warm imports before the barrier
open(ready, "w").close()
deadline = time.time() + 600                            # hang guard only
while not os.path.exists(go):
    if time.time() > deadline:
        sys.exit("barrier timeout")
    time.sleep(0.0005)
e = c.get(spec)
print(json.dumps({"name": e.name, "key": e.key, "sha": hashlib.sha256(e.cubin).hexdigest(),
                  "compiled": e.compiled, "count": compiler.COMPILE_COUNT, "path": str(e.path)}))
"""


def run_racers(tmp_path: Path, root: Path, specs: list) -> list[dict]:
    """Start one process per spec, release them together with a file barrier, collect results."""
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    go = tmp_path / "go"
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("KERNELGEN_DISABLE_JIT", None)
    procs, readies = [], []
    for i, s in enumerate(specs):
        ready = tmp_path / f"ready{i}"
        readies.append(ready)
        procs.append(subprocess.Popen(
            [sys.executable, str(script), str(root), str(go), str(ready), json.dumps(s.to_json())],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env))
    deadline = time.time() + 600  # hang guard only: no test here asserts how long something took
    while not all(r.exists() for r in readies):
        assert time.time() < deadline, "hang: children did not start"
        assert all(p.poll() is None for p in procs), [p.communicate() for p in procs if p.poll() is not None]
        time.sleep(0.01)
    go.touch()
    results = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))
    return results


def test_two_processes_same_spec(tmp_path):
    root = tmp_path / "c"  # does not exist yet: the racers create it
    res = run_racers(tmp_path, root, [SPEC_A, SPEC_A])
    assert len({r["sha"] for r in res}) == 1
    assert len({r["key"] for r in res}) == 1
    assert sum(r["count"] for r in res) == 1  # the loser waited on the lock and re-checked
    assert sorted(r["compiled"] for r in res) == [False, True]
    key = res[0]["key"]
    # the key derived in this process equals the children's (no per-process randomness, E8)
    assert stem_of(cache.KernelCache(root), SPEC_A).name.endswith(key[:16])
    names = files(root)
    assert [n for n in names if n.endswith(".cubin")] == [f"{SPEC_A.name}-{key[:16]}.cubin"]
    assert [n for n in names if n.endswith(".json")] == [f"{SPEC_A.name}-{key[:16]}.json"]
    assert not [n for n in names if n.endswith(".tmp")]
    assert cache.KernelCache(root).verify() == {"ok": 1, "bad": [], "repaired": 0, "orphans_removed": 0, "orphans": [], "temps": []}
    assert sha(Path(res[0]["path"]).read_bytes()) == res[0]["sha"]


def test_eight_processes_two_specs(tmp_path):
    root = tmp_path / "c"
    res = run_racers(tmp_path, root, [SPEC_A, SPEC_B] * 4)
    for spec in (SPEC_A, SPEC_B):
        mine = [r for r in res if r["name"] == spec.name]
        assert len(mine) == 4
        assert len({r["sha"] for r in mine}) == 1
        assert sum(r["count"] for r in mine) == 1  # exactly one compile per spec (E7)
        assert sum(r["compiled"] for r in mine) == 1
    names = files(root)
    assert len([n for n in names if n.endswith(".cubin")]) == 2
    assert len([n for n in names if n.endswith(".json")]) == 2
    assert not [n for n in names if n.endswith(".tmp")]
    c = cache.KernelCache(root)
    assert c.verify()["ok"] == 2 and c.verify()["bad"] == []
    assert sorted(e["name"] for e in c.entries()) == sorted([SPEC_A.name, SPEC_B.name])
    assert all(e["valid"] for e in c.entries())


# 3 ------------------------------------------------------------------------------------------
def _corrupt(stem: Path, how: str) -> None:
    cub, side = Path(str(stem) + ".cubin"), Path(str(stem) + ".json")
    data = cub.read_bytes()
    if how == "truncated":
        cub.write_bytes(data[: len(data) // 2])
    elif how == "garbage":
        cub.write_bytes(os.urandom(len(data)))  # same size: only the hash can tell
    elif how == "sidecar_hash":
        meta = json.loads(side.read_text())
        meta["cubin_sha256"] = "0" * 64
        meta["sidecar_sha256"] = cache._sidecar_digest(meta)   # (consistent: the cubin's hash check tells)
        side.write_text(json.dumps(meta))
    elif how == "sidecar_garbage":
        side.write_bytes(b"\x00not json{")
    elif how == "cubin_missing":
        cub.unlink()


@pytest.mark.parametrize(
    "how, reason",
    [("truncated", "size"), ("garbage", "sha256"), ("sidecar_hash", "sha256"),
     ("sidecar_garbage", "sidecar"), ("cubin_missing", "cubin unreadable")],
)
def test_corrupt_entry_is_rebuilt(tmp_path, how, reason):
    root = tmp_path / "c"
    good = cache.KernelCache(root).get(SPEC_A)
    stem = stem_of(cache.KernelCache(root), SPEC_A)
    _corrupt(stem, how)
    c = cache.KernelCache(root)
    assert c.lookup(SPEC_A) is None  # lookup never loads a bad entry
    assert c.verify()["bad"] == [stem.name]
    n0 = compiler.COMPILE_COUNT
    with pytest.warns(cache.KernelCacheWarning, match=reason) as rec:
        e = c.get(SPEC_A)
    assert len(cache_warnings(rec)) == 1 and stem.name in str(rec[0].message)
    assert compiler.COMPILE_COUNT == n0 + 1 and e.compiled is True
    assert e.cubin == good.cubin and e.path == good.path
    assert c.verify() == {"ok": 1, "bad": [], "repaired": 0, "orphans_removed": 0, "orphans": [], "temps": []}
    e2 = cache.KernelCache(root).get(SPEC_A)
    assert e2.compiled is False and sha(e2.cubin) == sha(good.cubin)
    assert not [n for n in files(root) if n.endswith(".tmp")]


# 4 ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("what", ["nvrtc", "package"])
def test_toolchain_or_version_change_gives_new_key(tmp_path, monkeypatch, what):
    root = tmp_path / "c"
    old = cache.KernelCache(root).get(SPEC_A)
    old_files = snapshot(root)
    if what == "nvrtc":
        assert compiler.nvrtc_version() != (12, 4)
        monkeypatch.setattr(compiler, "nvrtc_version", lambda: (12, 4))
    else:
        monkeypatch.setattr(_version, "__version__", _version.__version__ + ".post1")
    c = cache.KernelCache(root)
    n0 = compiler.COMPILE_COUNT
    new = c.get(SPEC_A)
    assert new.key != old.key
    assert new.compiled is True and compiler.COMPILE_COUNT == n0 + 1  # the old entry was not loaded
    after = snapshot(root)
    for name, st in old_files.items():  # the old entry is neither deleted nor touched
        assert after[name] == st, name
    assert len([n for n in after if n.endswith(".json")]) == 2
    meta = json.loads(Path(str(new.path)[: -len(".cubin")] + ".json").read_text())
    if what == "nvrtc":
        assert meta["nvrtc_version"] == [12, 4]
    else:
        assert meta["kernelgen_version"] == _version.__version__
    monkeypatch.undo()
    again = cache.KernelCache(root).get(SPEC_A)  # back to the real toolchain: old entry hits
    assert again.key == old.key and again.compiled is False


# 5 ------------------------------------------------------------------------------------------
def _two_specs_in_memory(root: Path) -> None:
    c = cache.KernelCache(root)
    n0 = compiler.COMPILE_COUNT
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        a, b = c.get(SPEC_A), c.get(SPEC_B)
        a2 = c.get(SPEC_A)
    assert len(cache_warnings(rec)) == 1, [str(w.message) for w in rec]
    assert str(root) in str(cache_warnings(rec)[0].message)
    assert a.path is None and b.path is None and a.compiled and b.compiled
    assert a.cubin[:4] == b"\x7fELF" and a.resources["registers"] > 0
    assert a2.compiled is False and a2.cubin == a.cubin  # kept in memory, not recompiled
    assert compiler.COMPILE_COUNT == n0 + 2


def test_uncreatable_root_compiles_in_memory(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    _two_specs_in_memory(blocker / "kernelgen")
    assert blocker.read_text() == "not a directory"


def _permissions_enforced(tmp_path: Path) -> bool:
    """False as root (or with CAP_DAC_OVERRIDE), where a 0o500 directory is still writable."""
    probe = tmp_path / "probe"
    probe.mkdir()
    os.chmod(probe, 0o500)
    try:
        (probe / "x").touch()
    except PermissionError:
        return True
    finally:
        os.chmod(probe, 0o700)
    return False


def test_read_only_root_compiles_in_memory(tmp_path):
    if not _permissions_enforced(tmp_path):
        pytest.skip("running as root: permissions are not enforced (see the uncreatable-root test)")
    root = tmp_path / "ro"
    root.mkdir()
    cache.KernelCache(root).get(SPEC_C)  # a pre-existing entry stays readable
    os.chmod(root, 0o500)
    try:
        before = snapshot(root)
        _two_specs_in_memory(root)
        e = cache.KernelCache(root).get(SPEC_C)
        assert e.compiled is False and e.path is not None
        # E9: `chmod a-w` + JIT disabled: pre-warmed loads, missing fails fast (no PermissionError)
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("KERNELGEN_DISABLE_JIT", "1")
            assert cache.KernelCache(root).get(SPEC_C).cubin == e.cubin
            with pytest.raises(cache.KernelNotCachedError, match="kernelgen warmup"):
                cache.KernelCache(root).get(SPEC_A)
        assert snapshot(root) == before
    finally:
        os.chmod(root, 0o700)


def test_full_disk_during_publish_compiles_once(tmp_path, monkeypatch):
    """ENOSPC while writing: the already-compiled cubin is used, no second compile, no temp left."""
    root = tmp_path / "c"

    def no_space(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(cache.os, "fsync", no_space)
    c = cache.KernelCache(root)
    n0 = compiler.COMPILE_COUNT
    with pytest.warns(cache.KernelCacheWarning, match="No space left"):
        e = c.get(SPEC_A)
    assert e.path is None and e.compiled and compiler.COMPILE_COUNT == n0 + 1
    assert not [n for n in files(root) if n.endswith((".tmp", ".cubin", ".json"))]


def test_lock_timeout_is_a_clear_error(tmp_path, monkeypatch):
    root = tmp_path / "c"
    root.mkdir()
    c = cache.KernelCache(root)
    monkeypatch.setattr(cache, "LOCK_TIMEOUT", 0.2)
    holder = filelock.FileLock(str(stem_of(c, SPEC_A)) + ".lock")
    with holder:
        with pytest.raises(cache.CacheLockTimeoutError, match=SPEC_A.name):
            c.get(SPEC_A)
    assert c.get(SPEC_A).compiled is True


# 6 ------------------------------------------------------------------------------------------
def test_disable_jit_missing_entry_raises(tmp_path, monkeypatch):
    root = tmp_path / "c"
    monkeypatch.setenv("KERNELGEN_DISABLE_JIT", "1")
    c = cache.KernelCache(root)
    n0 = compiler.COMPILE_COUNT
    with pytest.raises(cache.KernelNotCachedError) as ei:
        c.get(SPEC_A)
    msg = str(ei.value)
    key = c.key_for(render.render(SPEC_A), SPEC_A.arch, compiler.default_options(SPEC_A.arch))
    assert SPEC_A.name in msg and key in msg and "kernelgen warmup --arch sm_90a" in msg
    assert compiler.COMPILE_COUNT == n0
    assert not root.exists()  # nothing was created


def test_disable_jit_prewarmed_entry_loads_without_writes(tmp_path, monkeypatch):
    root = tmp_path / "c"
    warm = cache.KernelCache(root)
    ea, eb = warm.get(SPEC_A), warm.get(SPEC_B)
    for lock in root.glob("*.lock"):  # prove that the fast path creates no lock file
        lock.unlink()
    before = snapshot(root)
    dir_mtime = os.stat(root).st_mtime_ns
    monkeypatch.setenv("KERNELGEN_DISABLE_JIT", "1")
    c = cache.KernelCache(root)
    n0 = compiler.COMPILE_COUNT
    a, b = c.get(SPEC_A), c.get(SPEC_B)
    assert compiler.COMPILE_COUNT == n0
    assert (a.cubin, b.cubin) == (ea.cubin, eb.cubin) and not a.compiled and not b.compiled
    assert snapshot(root) == before and os.stat(root).st_mtime_ns == dir_mtime
    # a corrupt entry is not rebuilt while JIT is off: it fails fast and names the problem
    Path(str(stem_of(c, SPEC_B)) + ".cubin").write_bytes(b"junk")
    with pytest.raises(cache.KernelNotCachedError, match="size"):
        cache.KernelCache(root).get(SPEC_B)


# 7 ------------------------------------------------------------------------------------------
def test_verify_repair_entries_clear(tmp_path):
    root = tmp_path / "c"
    c = cache.KernelCache(root)
    good_a, good_b = c.get(SPEC_A), c.get(SPEC_B)
    (root / "README.md").write_text("not ours")
    stem_b = stem_of(c, SPEC_B)
    _corrupt(stem_b, "garbage")
    (root / f"{stem_b.name}.abcd1234.tmp").write_bytes(b"partial")  # stale temp from a crash
    orphan = root / f"{SPEC_C.name}-{'0' * 16}.cubin"  # cubin without sidecar
    orphan.write_bytes(b"\x7fELF")

    ents = {e["name"]: e for e in c.entries()}
    assert ents[SPEC_A.name]["valid"] is True and ents[SPEC_B.name]["valid"] is False
    assert ents[SPEC_A.name]["key"] == good_a.key and ents[SPEC_A.name]["arch"] == "sm_90a"
    assert ents[SPEC_A.name]["kind"] == "combine"
    assert ents[SPEC_A.name]["registers"] == good_a.resources["registers"]
    assert ents[SPEC_A.name]["spill_bytes"] == 0 and ents[SPEC_A.name]["size"] > len(good_a.cubin)
    assert ents[SPEC_C.name]["valid"] is False   # (its reason said "missing": the sidecar, a new user read the cubin)
    assert ents[SPEC_C.name]["reason"] == "orphan: a cubin without its sidecar (cache verify --repair removes it)"

    rep = c.verify()
    assert rep == {"ok": 1, "bad": [stem_b.name], "repaired": 0, "orphans_removed": 0, "orphans": [orphan.stem],
                   "temps": [stem_b.name]}   # (the crash's temp file, named: never loaded)
    assert orphan.exists()  # verify without repair changes nothing, but names the orphan `cache list` shows

    n0 = compiler.COMPILE_COUNT
    rep = c.verify(repair=True)
    assert rep["ok"] == 1 and rep["bad"] == [stem_b.name] and rep["repaired"] == 1
    assert rep["orphans_removed"] == 2 and rep["orphans"] == []  # the temp file and the orphan cubin
    assert compiler.COMPILE_COUNT == n0 + 1
    assert c.verify() == {"ok": 2, "bad": [], "repaired": 0, "orphans_removed": 0, "orphans": [], "temps": []}
    assert cache.KernelCache(root).get(SPEC_B).cubin == good_b.cubin
    assert not orphan.exists() and not list(root.glob("*.tmp"))

    assert c.size_bytes() > len(good_a.cubin) + len(good_b.cubin)
    assert c.clear() == 2
    assert files(root) == ["README.md"]
    assert c.size_bytes() == 0 and c.entries() == []
    assert c.lookup(SPEC_A) is None  # the in-memory copy went too
    assert c.get(SPEC_A).compiled is True


# 8 ------------------------------------------------------------------------------------------
def test_key_is_deterministic_and_path_independent(tmp_path):
    real = tmp_path / "real"
    link = tmp_path / "link"
    c1 = cache.KernelCache(real)
    c1.get(SPEC_A)
    link.symlink_to(real, target_is_directory=True)
    c2 = cache.KernelCache(link)
    c3 = cache.KernelCache(tmp_path / "elsewhere" / ".." / "other")
    src, opts = render.render(SPEC_A), compiler.default_options(SPEC_A.arch)
    k = c1.key_for(src, SPEC_A.arch, opts)
    assert k == c2.key_for(src, SPEC_A.arch, opts) == c3.key_for(src, SPEC_A.arch, opts)
    assert len(k) == 64 and int(k, 16) >= 0
    assert render.render(SPEC_A) == src  # rendering is pure
    # every input changes it
    assert c1.key_for(src + " ", SPEC_A.arch, opts) != k
    assert c1.key_for(src, "sm_80", opts) != k
    assert c1.key_for(src, SPEC_A.arch, opts[:-1]) != k
    # the symlinked root hits the same entry: 0 compilations (E8c)
    n0 = compiler.COMPILE_COUNT
    e = c2.get(SPEC_A)
    assert e.compiled is False and compiler.COMPILE_COUNT == n0 and e.key == k


def test_default_cache_dir_and_get_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELGEN_CACHE_DIR", str(tmp_path / "kc"))
    assert cache.default_cache_dir() == tmp_path / "kc"
    monkeypatch.delenv("KERNELGEN_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache.default_cache_dir() == tmp_path / "xdg" / "kernelgen"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache.default_cache_dir() == tmp_path / "home" / ".cache" / "kernelgen"
    monkeypatch.setattr(cache, "_default", None)
    monkeypatch.setenv("KERNELGEN_CACHE_DIR", str(tmp_path / "kc"))
    assert cache.get_cache().root == tmp_path / "kc" and cache.get_cache() is cache.get_cache()
    c = cache.set_cache_dir(tmp_path / "other")
    assert cache.get_cache() is c and c.root == tmp_path / "other"


def test_compile_error_propagates_and_publishes_nothing(tmp_path, monkeypatch):
    root = tmp_path / "c"

    def fail(source, arch, options, name="kernel"):
        raise compiler.CompileError(name, "error: boom", "/tmp/x.cu")

    monkeypatch.setattr(compiler, "compile_cubin", fail)
    c = cache.KernelCache(root)
    with pytest.raises(compiler.CompileError, match="boom") as ei:
        c.get(SPEC_A)
    assert ei.value.log == "error: boom" and ei.value.source_path == "/tmp/x.cu"
    assert not [n for n in files(root) if not n.endswith(".lock")]
    monkeypatch.undo()
    assert c.get(SPEC_A).compiled is True  # nothing bad was remembered


def test_compile_error_survives_pickling():
    """A warm-up worker's CompileError crosses the process pool whole (it was unpicklable: the pool
    broke with BrokenProcessPool instead of naming the kernel and NVRTC's log)."""
    import pickle

    e = pickle.loads(pickle.dumps(compiler.CompileError("attn_x", "error: boom", "/tmp/x.cu")))
    assert (e.name, e.log, e.source_path) == ("attn_x", "error: boom", "/tmp/x.cu") and "boom" in str(e)


COLD_NVRTC_CHILD = r"""
import json, threading
from kernelgen.jit import compiler, render
from kernelgen.kernels.spec import CombineSpec
spec = CombineSpec("sm_90a", "bf16", 128)
src, opts = render.render(spec), compiler.default_options(spec.arch)
barrier, lock, errors = threading.Barrier(8), threading.Lock(), []
def work():
    barrier.wait()
    compiler.nvrtc_version()          # what key_for does, racing another thread's compile
    with lock:                        # what the per-entry lock does
        try:
            compiler.compile_cubin(src, spec.arch, opts, spec.name)
        except compiler.CompileError as e:
            errors.append(e.log[:200])
threads = [threading.Thread(target=work) for _ in range(8)]
for t in threads: t.start()
for t in threads: t.join()
print(json.dumps({"count": compiler.COMPILE_COUNT, "errors": errors}))
"""


def test_cold_nvrtc_version_racing_compile(tmp_path):
    """Cold CuPy NVRTC: getVersion in one thread racing compileProgram in another used to fail
    with "failed to open libnvrtc-builtins" (compiler._ensure_nvrtc serializes the first load)."""
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, "-c", COLD_NVRTC_CHILD], capture_output=True, text=True,
                       env=env, timeout=300)
    assert p.returncode == 0, p.stderr
    r = json.loads(p.stdout.strip().splitlines()[-1])
    assert r == {"count": 8, "errors": []}
