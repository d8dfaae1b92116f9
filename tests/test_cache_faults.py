"""The kernel cache under faults (issue 7, item 1; edge cases E7, E8, E9).  CPU only.

Concurrency (many processes released together by a file barrier), processes killed with SIGKILL
while they hold an entry's lock, corrupt and untrusted entries, cache directories writable by
other users or owned by another user, a pre-warmed read-only cache with JIT disabled, and
``kernelgen cache verify``.  Every test uses its own temporary cache root.

The suite runs as root in CI, where file permissions are not enforced: "owned by another user" is
simulated by patching ``cache._owner_ok``; group/world-writable modes are set for real (the check
reads the mode bits, which root does not bypass).
"""
from __future__ import annotations

import hashlib
import itertools
import json
import os
import re
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import filelock
import pytest
import sampling

from kernelgen.apps import cli
from kernelgen.jit import cache, compiler, render
from kernelgen.selection import heuristics
from kernelgen.kernels.spec import CombineSpec

REPO = Path(__file__).resolve().parents[1]
# The kernels these tests cache: combine kernels, the cheapest to compile (~0.1 s, a scheduler ~2 s);
# the child processes below compile for real.
SPEC_A = CombineSpec("sm_90a", "bf16", 128)
SPEC_B = CombineSpec("sm_90a", "fp16", 256)


@pytest.fixture(autouse=True)
def _isolated_env(tmp_path, monkeypatch):
    monkeypatch.delenv("KERNELGEN_DISABLE_JIT", raising=False)
    monkeypatch.setenv("KERNELGEN_CACHE_DIR", str(tmp_path / "default-cache"))
    monkeypatch.setattr(cache, "_warned_roots", set())  # "one warning per process and root"


def sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


def files(root: Path) -> list[str]:
    return sorted(os.listdir(root)) if root.exists() else []


def snapshot(root: Path) -> dict:
    """Listing, size, mtime, mode and inode of every file, plus the directory's own mtime."""
    snap = {n: (os.stat(root / n).st_mtime_ns, os.stat(root / n).st_size, os.stat(root / n).st_mode,
                os.stat(root / n).st_ino) for n in files(root)}
    snap["<dir mtime>"] = os.stat(root).st_mtime_ns
    return snap


def stem_of(root: Path, spec) -> Path:
    src = render.render(spec)
    key = cache.KernelCache(root).key_for(src, spec.arch, compiler.default_options(spec.arch))
    return root / f"{spec.name}-{key[:16]}"


def cache_warnings(record) -> list:
    return [w for w in record if issubclass(w.category, cache.KernelCacheWarning)]


def child_env() -> dict:
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("KERNELGEN_DISABLE_JIT", None)
    return env


#: Hang guard (seconds) of the waits on child processes: far longer than any run that is only slow
#: (a loaded machine), it only ends a hang.  No test here asserts how long something took.
HANG = 600


def wait_for(paths, procs, timeout=HANG) -> None:
    """Wait until every path exists; fail early if a child died."""
    deadline = time.time() + timeout
    while not all(Path(p).exists() for p in paths):
        for p in procs:
            if p.poll() is not None:
                out, err = p.communicate()
                pytest.fail(f"child exited early (rc {p.returncode}):\n{out}\n{err}")
        assert time.time() < deadline, "hang: children did not reach the barrier"
        time.sleep(0.005)


# 1 --- eight processes, same and different variants -------------------------------------------
MIXED_CHILD = r"""
import hashlib, json, os, sys, time
from kernelgen.jit import cache, compiler, render
from kernelgen.kernels.spec import spec_from_json
root, go, ready = sys.argv[1:4]
specs = [spec_from_json(d) for d in json.loads(sys.argv[4])]
for s in specs:
    render.render(s)
compiler.nvrtc_version()                              # warm imports before the barrier
open(ready, "w").close()
deadline = time.time() + 600
while not os.path.exists(go):
    if time.time() > deadline:
        sys.exit("barrier timeout")
    time.sleep(0.005)
c = cache.KernelCache(root)
out = []
for s in specs:
    e = c.get(s)
    out.append({"name": e.name, "key": e.key, "sha": hashlib.sha256(e.cubin).hexdigest(),
                "compiled": e.compiled, "path": str(e.path)})
print(json.dumps({"count": compiler.COMPILE_COUNT, "out": out}))
"""


def test_eight_processes_same_and_different_variants(tmp_path):
    """8 processes at once: one variant all want, 4 variants wanted by 2 each, 8 wanted by one
    each (each process asks in a different order).  Every process succeeds; exactly one compile
    and one valid entry per variant across all processes; identical binaries everywhere."""
    common = heuristics.specs_for("sm_90a", "bf16", 64, 64, True, "soa")[1]
    pairs = [CombineSpec(arch, "bf16", 256) for arch in ("sm_80", "sm_86", "sm_89", "sm_90a")]
    own = [CombineSpec("sm_80", dt, dv) for dt in ("bf16", "fp16") for dv in (64, 96, 128, 192)]
    wanted = []
    for p in range(8):
        mine = [common, pairs[p // 2], own[p]]
        wanted.append(mine[p % 3:] + mine[: p % 3])
    variants = {s.name: s for s in [common, *pairs, *own]}
    assert len(variants) == 13

    root = tmp_path / "c"  # does not exist yet: the racers create it
    script = tmp_path / "child.py"
    script.write_text(MIXED_CHILD)
    go = tmp_path / "go"
    procs, readies = [], []
    for p in range(8):
        ready = tmp_path / f"ready{p}"
        readies.append(ready)
        arg = json.dumps([s.to_json() for s in wanted[p]])
        procs.append(subprocess.Popen([sys.executable, str(script), str(root), str(go), str(ready), arg],
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=child_env()))
    wait_for(readies, procs)
    go.touch()
    results = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))

    assert sum(r["count"] for r in results) == len(variants)  # exactly one compile per variant
    rows = [o for r in results for o in r["out"]]
    for name, spec in variants.items():
        mine = [o for o in rows if o["name"] == name]
        assert len(mine) == sum(spec in w for w in wanted)
        assert sum(o["compiled"] for o in mine) == 1, name
        assert len({o["sha"] for o in mine}) == 1 and len({o["key"] for o in mine}) == 1, name
        assert sha(Path(mine[0]["path"]).read_bytes()) == mine[0]["sha"]
        assert Path(mine[0]["path"]) == Path(str(stem_of(root, spec)) + ".cubin")  # same key here

    names = files(root)
    assert len([n for n in names if n.endswith(".cubin")]) == len(variants)
    assert len([n for n in names if n.endswith(".json")]) == len(variants)
    assert not [n for n in names if n.endswith(".tmp")]
    c = cache.KernelCache(root)
    assert c.verify() == {"ok": len(variants), "bad": [], "repaired": 0, "orphans_removed": 0, "orphans": [], "temps": []}
    for spec in variants.values():
        assert c.lookup(spec) is not None


# E7 --- sixteen processes, one key, many rounds ------------------------------------------------
E7_ROUNDS = 20 if sampling.full_matrix() else 5  # --full-matrix: the 20 rounds of E7
E7_PROCS = 16
E7_CHILD = r"""
import hashlib, json, os, sys, time
from kernelgen.jit import cache, compiler, render
from kernelgen.kernels.spec import spec_from_json
base, ctl, me, rounds = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
spec = spec_from_json(json.loads(sys.argv[5]))
render.render(spec); compiler.nvrtc_version()          # warm imports before the first barrier
out = []
for r in range(rounds):
    open(os.path.join(ctl, f"ready{r}.{me}"), "w").close()
    go, deadline = os.path.join(ctl, f"go{r}"), time.time() + 600
    while not os.path.exists(go):
        if time.time() > deadline:
            sys.exit(f"barrier timeout in round {r}")
        time.sleep(0.005)
    n0 = compiler.COMPILE_COUNT
    e = cache.KernelCache(os.path.join(base, f"round{r}")).get(spec)
    out.append([r, hashlib.sha256(e.cubin).hexdigest(), e.compiled, compiler.COMPILE_COUNT - n0, str(e.path)])
print(json.dumps(out))
"""


def test_e7_sixteen_processes_one_key_twenty_rounds(tmp_path):
    """E7: 16 processes released by a file barrier against an empty cache directory all request
    the identical kernel key (bf16, d=128, causal, sm_90a), for 5 rounds (20 with --full-matrix;
    each round a fresh empty directory; the processes live across rounds, so the import of
    kernelgen is paid once).  Each round: exactly 1 compile, 16 identical sha256s equal to the
    file on disk, one complete entry, no temp files; 0 failures."""
    spec = heuristics.specs_for("sm_90a", "bf16", 128, 128, True, "soa")[1]
    base, ctl = tmp_path / "cache", tmp_path / "ctl"
    base.mkdir(mode=0o700)
    ctl.mkdir()
    script = tmp_path / "e7.py"
    script.write_text(E7_CHILD)
    procs = [subprocess.Popen([sys.executable, str(script), str(base), str(ctl), str(i), str(E7_ROUNDS),
                               json.dumps(spec.to_json())],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=child_env())
             for i in range(E7_PROCS)]
    try:
        for r in range(E7_ROUNDS):  # ready{r} from everyone also means everyone finished round r-1
            wait_for([ctl / f"ready{r}.{i}" for i in range(E7_PROCS)], procs)
            (ctl / f"go{r}").touch()
        outs = []
        for p in procs:
            out, err = p.communicate(timeout=300)
            assert p.returncode == 0, err
            outs.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()

    shas = set()
    for r in range(E7_ROUNDS):
        rows = [o[r] for o in outs]
        assert all(row[0] == r for row in rows)
        assert sum(row[3] for row in rows) == 1, f"round {r}: {sum(row[3] for row in rows)} compiles"
        assert sum(row[2] for row in rows) == 1, f"round {r}"
        assert len({row[1] for row in rows}) == 1, f"round {r}: different binaries"
        assert len({row[4] for row in rows}) == 1 and "None" not in rows[0][4]
        root = base / f"round{r}"
        assert sha(Path(rows[0][4]).read_bytes()) == rows[0][1]
        names = files(root)
        assert [n.rsplit(".", 1)[1] for n in names] == ["cubin", "json", "lock"], names  # no .tmp
        assert cache.KernelCache(root).verify() == {"ok": 1, "bad": [], "repaired": 0, "orphans_removed": 0, "orphans": [], "temps": []}
        shas.add(rows[0][1])
    assert len(shas) == 1  # NVRTC output is deterministic: the same binary in every round


# 2 --- a compiler process killed (SIGKILL) while it holds the entry lock -----------------------
HOLDER_CHILD = r"""
import os, sys, tempfile, time
from kernelgen.jit import cache, compiler
from kernelgen.kernels.spec import CombineSpec
root, stage, signal_path = sys.argv[1:4]
spec = CombineSpec("sm_90a", "bf16", 128)            # SPEC_A

def hang(*_):
    open(signal_path, "w").close()
    time.sleep(600)

if stage == "compile":                      # inside NVRTC
    compiler.compile_cubin = hang
elif stage == "cubin_tmp":                  # cubin temp file written and fsynced, not renamed
    real_replace = os.replace
    os.replace = lambda src, dst: hang() if str(dst).endswith(".cubin") else real_replace(src, dst)
elif stage == "cubin_published":            # cubin renamed into place, sidecar not started
    real_write = cache._write_atomic
    cache._write_atomic = lambda path, data: hang() if path.suffix == ".json" else real_write(path, data)
elif stage == "sidecar_tmp":                # half of the sidecar written to its temp file
    real_write = cache._write_atomic
    def write(path, data):
        if path.suffix != ".json":
            return real_write(path, data)
        fd, tmp = tempfile.mkstemp(prefix=path.stem + ".", suffix=".tmp", dir=path.parent)
        os.write(fd, data[: len(data) // 2]); os.fsync(fd)
        hang()
    cache._write_atomic = write
cache.KernelCache(root).get(spec)
sys.exit("the holder was not stopped")
"""

GETTER_CHILD = r"""
import json, sys
import filelock
from kernelgen.jit import cache, compiler
from kernelgen.kernels.spec import CombineSpec
cache.LOCK_TIMEOUT = float(sys.argv[2])   # 0: one try, a held lock raises CacheLockTimeoutError at once
if len(sys.argv) > 3:                     # touch argv[3] when get() finds the entry lock held (it then waits)
    real_lock = cache.KernelCache._lock
    def observed_lock(self, stem, timeout=None):
        try:
            with filelock.FileLock(str(stem) + ".lock", timeout=0):
                pass
        except filelock.Timeout:
            open(sys.argv[3], "w").close()
        return real_lock(self, stem, timeout)
    cache.KernelCache._lock = observed_lock
e = cache.KernelCache(sys.argv[1]).get(CombineSpec("sm_90a", "bf16", 128))  # SPEC_A
print(json.dumps({"compiled": e.compiled, "count": compiler.COMPILE_COUNT, "path": str(e.path)}))
"""

# files (by suffix) present after the holder is killed at each stage
KILL_STAGES = {
    "compile": ["lock"],
    "cubin_tmp": ["lock", "tmp"],
    "cubin_published": ["cubin", "lock"],
    "sidecar_tmp": ["cubin", "lock", "tmp"],
}


def start_holder(tmp_path: Path, root: Path, stage: str) -> subprocess.Popen:
    script, sig = tmp_path / "holder.py", tmp_path / f"holding-{stage}"
    script.write_text(HOLDER_CHILD)
    p = subprocess.Popen([sys.executable, str(script), str(root), stage, str(sig)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=child_env())
    wait_for([sig], [p])
    return p


def kill(p: subprocess.Popen) -> None:
    os.kill(p.pid, signal.SIGKILL)
    p.communicate(timeout=HANG)
    assert p.returncode == -signal.SIGKILL


def lock_is_held(lock_path: Path) -> bool:
    try:
        with filelock.FileLock(str(lock_path), timeout=0):
            return False
    except filelock.Timeout:
        return True


def run_getter(tmp_path: Path, root: Path, lock_timeout: float = 0.0) -> dict:
    script = tmp_path / "getter.py"
    script.write_text(GETTER_CHILD)
    p = subprocess.run([sys.executable, str(script), str(root), str(lock_timeout)],
                       capture_output=True, text=True, env=child_env(), timeout=HANG)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("stage", list(KILL_STAGES))
def test_killed_holder_leaves_no_stuck_lock_and_nothing_loadable(tmp_path, monkeypatch, stage):
    root = tmp_path / "c"
    stem = stem_of(root, SPEC_A)
    lock = Path(str(stem) + ".lock")
    holder = start_holder(tmp_path, root, stage)
    try:
        assert lock_is_held(lock)  # the holder really is inside the locked section
    finally:
        kill(holder)
    assert sorted(n.rsplit(".", 1)[1] for n in files(root)) == KILL_STAGES[stage]
    assert all(n.startswith(stem.name + ".") for n in files(root))
    assert not lock_is_held(lock)  # the OS released the dead holder's lock

    # nothing loadable: no hit, a JIT-disabled get says "missing", verify sees no entry
    c = cache.KernelCache(root)
    assert c.lookup(SPEC_A) is None
    with monkeypatch.context() as mp:
        mp.setenv("KERNELGEN_DISABLE_JIT", "1")
        with pytest.raises(cache.KernelNotCachedError, match="missing"):
            c.get(SPEC_A)
    orphans = [stem.name] if "cubin" in KILL_STAGES[stage] else []   # named, not bad: never loaded
    temps = [stem.name] if any(n.endswith(".tmp") for n in files(root)) else []   # the dead write's, named
    assert c.verify() == {"ok": 0, "bad": [], "repaired": 0, "orphans_removed": 0, "orphans": orphans, "temps": temps}
    assert not [e for e in c.entries() if e["valid"]]

    # a new process takes the entry lock at its first try (LOCK_TIMEOUT 0: had the dead holder's
    # lock stayed held, get() would raise CacheLockTimeoutError instead of waiting) and compiles once
    r = run_getter(tmp_path, root, lock_timeout=0.0)
    assert r["compiled"] is True and r["count"] == 1
    assert r["path"] == str(stem) + ".cubin"
    names = files(root)
    assert [n.rsplit(".", 1)[1] for n in names] == ["cubin", "json", "lock"], names  # stale temps gone
    assert cache.KernelCache(root).verify() == {"ok": 1, "bad": [], "repaired": 0, "orphans_removed": 0, "orphans": [], "temps": []}


def test_waiter_takes_over_when_the_holder_is_killed(tmp_path):
    """A process already waiting on the lock gets it when the compiling holder dies: the waiter
    found the entry lock held while the holder lived (its probe says so), and after the SIGKILL
    it returns the entry, compiled by itself.  ``get`` can only return after taking the lock (a
    lock wait that ends without it raises CacheLockTimeoutError), and nobody but the OS released
    the dead holder's lock."""
    root = tmp_path / "c"
    holder = start_holder(tmp_path, root, "compile")
    script, blocked = tmp_path / "getter.py", tmp_path / "waiter-found-the-lock-held"
    script.write_text(GETTER_CHILD)
    try:
        waiter = subprocess.Popen([sys.executable, str(script), str(root), str(HANG), str(blocked)],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=child_env())
        wait_for([blocked], [waiter])  # the waiter is at the entry lock, and the holder holds it
        assert holder.poll() is None and waiter.poll() is None
    finally:
        kill(holder)
    try:
        out, err = waiter.communicate(timeout=2 * HANG)
    except subprocess.TimeoutExpired:
        waiter.kill()
        pytest.fail("hang: the waiter still waits for the lock of a killed holder")
    assert waiter.returncode == 0, err
    r = json.loads(out.strip().splitlines()[-1])
    assert r["compiled"] is True and r["count"] == 1
    assert cache.KernelCache(root).verify()["ok"] == 1


@pytest.mark.parametrize("how", ["verify", "clear"])
def test_stale_files_from_a_kill_are_cleaned(tmp_path, how):
    root = tmp_path / "c"
    kill(start_holder(tmp_path, root, "sidecar_tmp"))  # leaves an orphan cubin and a half sidecar temp
    c = cache.KernelCache(root)
    assert len([n for n in files(root) if n.endswith(".tmp")]) == 1
    if how == "verify":
        assert c.verify(repair=True) == {"ok": 0, "bad": [], "repaired": 0, "orphans_removed": 2, "orphans": [], "temps": []}
    else:
        assert c.clear() == 1
    assert files(root) == []
    assert c.get(SPEC_A).compiled is True and c.verify()["ok"] == 1


# 3 --- corrupt entries (gaps not covered by tests/test_cache.py) ------------------------------
@pytest.mark.parametrize("how, reason", [
    ("empty_cubin", "size"),
    ("empty_sidecar", "sidecar is not valid"),
    ("sidecar_of_other_entry", "key does not match"),
    ("cubin_of_other_entry", "size|sha256"),
    ("sidecar_is_a_list", "not an object"),
    # (a review's finds: each raised out of get(), entries() or verify(), so the entry never healed)
    ("size_overflows", "OverflowError"),
    ("sidecar_nested_too_deep", "RecursionError"),
    ("resources_not_numbers", "not a number"),
])
def test_more_corrupt_entries_are_rebuilt(tmp_path, how, reason):
    root = tmp_path / "c"
    warm = cache.KernelCache(root)
    good, _ = warm.get(SPEC_A), warm.get(SPEC_B)
    a, b = stem_of(root, SPEC_A), stem_of(root, SPEC_B)
    target = {"empty_cubin": ".cubin", "cubin_of_other_entry": ".cubin"}.get(how, ".json")
    dst = Path(str(a) + target)
    if how.startswith("empty"):
        dst.write_bytes(b"")
    elif how.endswith("other_entry"):
        dst.write_bytes(Path(str(b) + target).read_bytes())
    elif how == "size_overflows":
        dst.write_text(dst.read_text().replace(f'"cubin_size": {len(good.cubin)}', '"cubin_size": 1e999'))
        assert "1e999" in dst.read_text()
    elif how == "sidecar_nested_too_deep":
        dst.write_text("[" * 100_000 + "]" * 100_000)
    elif how == "resources_not_numbers":
        meta = json.loads(dst.read_text())
        meta["resources"] = {**meta["resources"], "spill_stores": "x"}
        dst.write_text(json.dumps(meta))
    else:
        dst.write_text("[1, 2]")
    c = cache.KernelCache(root)
    assert c.lookup(SPEC_A) is None
    ents = {e["stem"]: e for e in c.entries()}
    assert not ents[a.name]["valid"] and re.search(reason, ents[a.name]["reason"])
    assert c.verify()["bad"] == [a.name]
    n0 = compiler.COMPILE_COUNT
    with pytest.warns(cache.KernelCacheWarning, match=reason):
        e = c.get(SPEC_A)
    assert e.compiled and compiler.COMPILE_COUNT == n0 + 1 and e.cubin == good.cubin
    assert cache.KernelCache(root).verify()["ok"] == 2


@pytest.mark.parametrize("where", [".json", ".cubin"])
@pytest.mark.parametrize("how", ["verify", "clear"])
def test_a_directory_in_place_of_an_entry_file_is_removed(tmp_path, where, how):
    """A directory named like an entry's sidecar or cubin: the entry is bad, and ``verify --repair``
    and ``clear`` remove it (both raised IsADirectoryError before: a review's find)."""
    root = tmp_path / "c"
    cache.KernelCache(root).get(SPEC_A)
    a = stem_of(root, SPEC_A)
    Path(str(a) + where).unlink()
    Path(str(a) + where).mkdir()
    (Path(str(a) + where) / "inner").write_text("x")
    c = cache.KernelCache(root)
    assert c.verify()["bad"] == [a.name]
    if how == "verify":
        outcomes = {}
        report = c.verify(repair=True, outcomes=outcomes)
        assert not Path(str(a) + where).is_dir()
        if where == ".cubin":   # the directory removed, the cubin rebuilt from the sidecar's spec
            assert report["bad"] == [a.name] and outcomes == {a.name: "repaired"}
            assert c.verify() == {"ok": 1, "bad": [], "repaired": 0, "orphans_removed": 0, "orphans": [], "temps": []}
        else:                   # the directory removed, the cubin left without a sidecar: an orphan, removed
            assert report == {"ok": 0, "bad": [], "repaired": 0, "orphans_removed": 1, "orphans": [], "temps": []} and files(root) == []
    else:
        assert c.clear() == 1 and files(root) == []
    assert cache.KernelCache(root).get(SPEC_A).cubin and cache.KernelCache(root).verify()["ok"] == 1


@pytest.mark.parametrize("name", ["{stem}.cubin", "{stem}.abcd1234.tmp", "{stem}.lock"])
@pytest.mark.parametrize("how", ["verify", "clear"])
def test_a_directory_named_like_an_orphan_temp_or_lock_file_is_removed(tmp_path, name, how):
    """A directory named like an orphan cubin (which ``cache list`` says ``verify --repair`` removes),
    a temp file or a lock file next to a good entry: repair and clear remove it (each raised
    IsADirectoryError: a second review's find)."""
    root = tmp_path / "c"
    cache.KernelCache(root).get(SPEC_A)
    good = stem_of(root, SPEC_A)
    odd = root / name.format(stem=f"{SPEC_B.name}-{'0' * 16}" if name.endswith(".cubin") else good.name)
    odd.unlink(missing_ok=True)   # (the entry's own lock file)
    odd.mkdir()
    (odd / "inner").write_text("x")
    c = cache.KernelCache(root)
    if how == "verify":
        assert c.verify(repair=True)["ok"] == 1
        assert c.verify() == {"ok": 1, "bad": [], "repaired": 0, "orphans_removed": 0, "orphans": [], "temps": []}
    else:
        assert c.clear() == 1   # (a directory is no entry: only the good one counts)
    assert not odd.exists()


# 5 --- untrusted directories and files ------------------------------------------------------------
def _assert_not_loaded_from(root: Path, match: str, monkeypatch) -> None:
    """``root`` holds a valid SPEC_A entry but is untrusted: compile in memory, one warning, no I/O."""
    before = snapshot(root)
    stem = stem_of(root, SPEC_A)
    c = cache.KernelCache(root)
    n0 = compiler.COMPILE_COUNT
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        a, b = c.get(SPEC_A), c.get(SPEC_B)
        a2 = cache.KernelCache(root).get(SPEC_A)  # another instance, same root: still one warning
    ws = cache_warnings(rec)
    assert len(ws) == 1, [str(w.message) for w in rec]
    msg = str(ws[0].message)
    assert str(root) in msg and "plant a cubin" in msg and "chmod 700" in msg
    assert re.search(match, msg), msg
    assert ws[0].filename == __file__  # points at the caller of get()
    assert a.path is None and b.path is None and a2.path is None and a.compiled and b.compiled
    assert compiler.COMPILE_COUNT == n0 + 3
    assert snapshot(root) == before  # nothing read into use, nothing written
    assert c.lookup(SPEC_A) is not None  # in memory (compiled), not from disk
    assert cache.KernelCache(root).lookup(SPEC_A) is None
    assert cache.KernelCache(root).verify() == {"ok": 0, "bad": [stem.name], "repaired": 0, "orphans_removed": 0, "orphans": [], "temps": []}
    assert cache.KernelCache(root).verify(repair=True)["repaired"] == 0 and snapshot(root) == before
    ents = cache.KernelCache(root).entries()
    assert [e["valid"] for e in ents] == [False] and "not trusted" in ents[0]["reason"]
    with monkeypatch.context() as mp:
        mp.setenv("KERNELGEN_DISABLE_JIT", "1")
        with pytest.raises(cache.KernelNotCachedError, match="not trusted") as ei:
            cache.KernelCache(root).get(SPEC_A)
        assert re.search(match, str(ei.value))


@pytest.mark.parametrize("mode", [0o777, 0o770, 0o702, 0o1777, 0o720])
def test_group_or_world_writable_dir_is_not_loaded_from(tmp_path, monkeypatch, mode):
    root = tmp_path / "c"
    good = cache.KernelCache(root).get(SPEC_A)
    os.chmod(root, mode)
    try:
        _assert_not_loaded_from(root, rf"writable by group/other users \(mode {oct(mode)}\)", monkeypatch)
    finally:
        os.chmod(root, 0o700)
    e = cache.KernelCache(root).get(SPEC_A)  # once private again, the same entry loads
    assert e.compiled is False and e.cubin == good.cubin


def test_dir_owned_by_another_user_is_not_loaded_from(tmp_path, monkeypatch):
    root = tmp_path / "c"
    good = cache.KernelCache(root).get(SPEC_A)
    ino = os.stat(root).st_ino
    real = cache._owner_ok
    monkeypatch.setattr(cache, "_owner_ok", lambda st: st.st_ino != ino and real(st))
    _assert_not_loaded_from(root, r"owned by another user \(uid \d+", monkeypatch)
    monkeypatch.setattr(cache, "_owner_ok", real)
    assert cache.KernelCache(root).get(SPEC_A).cubin == good.cubin


def test_owner_check_is_by_effective_uid(monkeypatch):
    me = os.geteuid()
    monkeypatch.setattr(cache.os, "geteuid", lambda: me + 12345)
    assert cache._owner_ok(os.stat_result((0,) * 4 + (me + 12345,) + (0,) * 5))
    assert not cache._owner_ok(os.stat_result((0,) * 4 + (me + 1,) + (0,) * 5))
    assert cache._owner_ok(os.stat_result((0,) * 4 + (0,) + (0,) * 5))  # root is trusted


def test_dir_taken_over_between_check_and_build(tmp_path):
    """The root did not exist when get() looked; someone created it world-writable before our
    mkdir: the build re-checks and compiles in memory instead of writing into it."""
    root = tmp_path / "c"
    c = cache.KernelCache(root)
    real_read = c._read

    def read_then_plant(stem, key):
        r = real_read(stem, key)
        if not root.exists():
            root.mkdir()
            os.chmod(root, 0o777)
        return r

    c._read = read_then_plant
    with pytest.warns(cache.KernelCacheWarning, match="writable by group/other"):
        e = c.get(SPEC_A)
    assert e.path is None and e.compiled
    assert files(root) == []


@pytest.mark.parametrize("which", [".cubin", ".json"])
@pytest.mark.parametrize("problem", ["world_writable", "group_writable", "other_owner"])
def test_untrusted_entry_file_is_bad_and_replaced(tmp_path, monkeypatch, which, problem):
    root = tmp_path / "c"
    good = cache.KernelCache(root).get(SPEC_A)
    stem = stem_of(root, SPEC_A)
    path = Path(str(stem) + which)
    what = "cubin" if which == ".cubin" else "sidecar"
    ino = os.stat(path).st_ino
    os.link(path, tmp_path / "keep")  # keeps the inode alive: its number cannot be reused
    if problem == "other_owner":
        real = cache._owner_ok
        monkeypatch.setattr(cache, "_owner_ok", lambda st: st.st_ino != ino and real(st))
        reason = rf"the {what} is owned by another user"
    else:
        os.chmod(path, 0o666 if problem == "world_writable" else 0o620)
        reason = rf"the {what} is writable by group/other users"
    c = cache.KernelCache(root)
    assert c.lookup(SPEC_A) is None
    assert c.verify()["bad"] == [stem.name]
    with monkeypatch.context() as mp:
        mp.setenv("KERNELGEN_DISABLE_JIT", "1")
        with pytest.raises(cache.KernelNotCachedError, match=reason):
            c.get(SPEC_A)
    n0 = compiler.COMPILE_COUNT
    with pytest.warns(cache.KernelCacheWarning, match=reason):
        e = c.get(SPEC_A)
    assert e.compiled and compiler.COMPILE_COUNT == n0 + 1 and e.cubin == good.cubin
    assert e.path == Path(str(stem) + ".cubin")
    st = os.stat(path)
    assert st.st_mode & 0o777 == 0o600 and st.st_ino != ino  # a new file, atomically swapped in
    e2 = cache.KernelCache(root).get(SPEC_A)
    assert e2.compiled is False and e2.cubin == good.cubin


def test_files_are_private_whatever_the_umask(tmp_path):
    root = tmp_path / "a" / "c"
    old = os.umask(0)
    try:
        e = cache.KernelCache(root).get(SPEC_A)
    finally:
        os.umask(old)
    assert e.path is not None
    assert os.stat(root).st_mode & 0o7777 == 0o700
    names = files(root)
    assert sorted(n.rsplit(".", 1)[1] for n in names) == ["cubin", "json", "lock"]
    for n in names:
        assert os.stat(root / n).st_mode & 0o7777 == 0o600, n
    assert cache.KernelCache(root).unsafe_reason() is None


def test_read_only_private_dir_is_trusted(tmp_path):
    root = tmp_path / "c"
    cache.KernelCache(root).get(SPEC_A)
    for mode in (0o500, 0o555, 0o755):
        os.chmod(root, mode)
        assert cache.KernelCache(root).unsafe_reason() is None, oct(mode)
    os.chmod(root, 0o700)


# E9 --- pre-warmed, read-only, JIT disabled ------------------------------------------------------
def _chmod_tree(root: Path, clear: int = 0, add: int = 0) -> None:
    for n in os.listdir(root):
        p = root / n
        os.chmod(p, (os.stat(p).st_mode & ~clear) | add)
    os.chmod(root, (os.stat(root).st_mode & ~clear) | add)


def test_e9_prewarmed_read_only_cache_with_jit_disabled(tmp_path, monkeypatch, capsys):
    arch = "sm_80"
    specs = list(dict.fromkeys(
        s for dt, hd, causal, layout in itertools.product(("bf16",), (64,), (True, False), ("soa", "aos"))
        for s in heuristics.specs_for(arch, dt, hd, hd, causal, layout)))
    assert len(specs) == 6  # 4 attention variants + a scheduler per layout
    root = tmp_path / "c"

    # pre-warm through the run-time path (KernelCache.get on heuristics.specs_for)
    n0 = compiler.COMPILE_COUNT
    warm = cache.KernelCache(root)
    shas = {s.name: sha(warm.get(s).cubin) for s in specs}
    assert compiler.COMPILE_COUNT == n0 + len(specs)

    # pre-warm again, twice: fresh instance, and the CLI (a different code path to the same keys)
    before = snapshot(root)
    n0 = compiler.COMPILE_COUNT
    assert not any(cache.KernelCache(root).get(s).compiled for s in specs)
    warmup_argv = ["warmup", "--arch", arch, "--head-dim", "64", "--dtype", "bf16",
                   "--layout", "soa,aos", "--jobs", "1", "--cache-dir", str(root)]
    assert cli.main(warmup_argv) == 0
    assert f"0 compiled, {len(specs)} already cached ({len(specs)} kernels)" in capsys.readouterr().out
    assert compiler.COMPILE_COUNT == n0 and snapshot(root) == before

    # chmod -R a-w; as root that does not stop writes, so the snapshot is what proves none happen
    _chmod_tree(root, clear=0o222)
    try:
        assert os.stat(root).st_mode & 0o777 == 0o500
        before = snapshot(root)
        monkeypatch.setenv("KERNELGEN_DISABLE_JIT", "1")
        c = cache.KernelCache(root)
        n0 = compiler.COMPILE_COUNT
        with warnings.catch_warnings(record=True) as rec:
            warnings.simplefilter("always")
            for dt, hd, causal, layout in itertools.product(("bf16",), (64,), (True, False), ("soa", "aos")):
                for s in heuristics.specs_for(arch, dt, hd, hd, causal, layout):  # what a call derives
                    e = c.get(s)
                    assert not e.compiled and e.path is not None and sha(e.cubin) == shas[s.name]
        assert rec == [], [str(w.message) for w in rec]  # no in-memory fallback, no bad entries
        assert compiler.COMPILE_COUNT == n0
        assert snapshot(root) == before  # 0 file writes: same listing, sizes, modes, mtimes, inodes

        # not pre-warmed: head dim 96 fails fast (no entry lock taken, so no wait on another
        # process's compile, and nothing compiled), naming the variant, its key and the command
        sched96, attn96 = heuristics.specs_for(arch, "bf16", 96, 96, True, "soa")
        assert c.get(sched96).compiled is False
        key96 = c.key_for(render.render(attn96), arch, compiler.default_options(arch))
        with monkeypatch.context() as mp, pytest.raises(cache.KernelNotCachedError) as ei:
            mp.setattr(cache.KernelCache, "_lock", lambda *a, **k: pytest.fail("an entry lock was taken"))
            cache.KernelCache(root).get(attn96)
        msg = str(ei.value)
        assert attn96.name in msg and key96 in msg and "kernelgen warmup --arch sm_80" in msg
        assert "missing" in msg
        assert compiler.COMPILE_COUNT == n0 and snapshot(root) == before

        # the pre-warm command on the read-only cache is still a no-op
        assert cli.main(warmup_argv) == 0
        assert "0 compiled" in capsys.readouterr().out
        assert compiler.COMPILE_COUNT == n0 and snapshot(root) == before
    finally:
        _chmod_tree(root, add=0o200)


# 7 --- kernelgen cache verify ---------------------------------------------------------------------
def test_cli_cache_verify_reports_and_repairs(tmp_path, capsys):
    root = tmp_path / "c"
    warm = cache.KernelCache(root)
    good_a, good_b = warm.get(SPEC_A), warm.get(SPEC_B)
    a, b = stem_of(root, SPEC_A), stem_of(root, SPEC_B)
    cub_a = Path(str(a) + ".cubin")
    cub_a.write_bytes(bytes(x ^ 0xFF for x in cub_a.read_bytes()))  # same size, wrong hash
    os.chmod(Path(str(b) + ".cubin"), 0o646)  # world-writable: untrusted
    d = str(root)

    assert cli.main(["cache", "verify", "--cache-dir", d]) == 1
    out = capsys.readouterr().out
    assert "0 ok, 2 bad" in out and a.name in out and b.name in out and "--repair" in out
    assert cli.main(["cache", "verify", "--repair", "--cache-dir", d]) == 0
    assert "2 repaired" in capsys.readouterr().out
    assert cli.main(["cache", "verify", "--cache-dir", d]) == 0
    assert "2 ok, 0 bad" in capsys.readouterr().out
    c = cache.KernelCache(root)
    assert c.verify() == {"ok": 2, "bad": [], "repaired": 0, "orphans_removed": 0, "orphans": [], "temps": []}
    ea, eb = c.get(SPEC_A), c.get(SPEC_B)
    assert (ea.compiled, eb.compiled) == (False, False)
    assert ea.cubin == good_a.cubin and eb.cubin == good_b.cubin
    assert os.stat(Path(str(b) + ".cubin")).st_mode & 0o777 == 0o600


# ------------------------------------------------------------------- a review's finds (64th session)
def test_a_fifo_in_place_of_an_entry_file_hangs_nothing(tmp_path):
    """A FIFO standing in for a sidecar (or cubin) is a bad entry: list, verify and get neither block
    on it (a reader's open waited for a writer forever) nor trust it; repair replaces it."""
    root = tmp_path / "c"
    c = cache.KernelCache(root)
    good = c.get(SPEC_A)
    stem = root / f"{SPEC_A.name}-{good.key[:16]}"
    for suffix in (".json", ".cubin"):
        p = Path(str(stem) + suffix)
        p.unlink()
        os.mkfifo(p, 0o600)
        fresh = cache.KernelCache(root)
        e = {x["name"]: x for x in fresh.entries()}[SPEC_A.name]
        assert e["valid"] is False and "is not a regular file" in e["reason"]
        assert fresh.verify()["bad"] == [stem.name]
        with pytest.warns(cache.KernelCacheWarning, match="not a regular file; rebuilding it"):
            assert cache.KernelCache(root).get(SPEC_A).cubin == good.cubin
        assert cache.KernelCache(root).verify() == {"ok": 1, "bad": [], "repaired": 0, "orphans_removed": 0, "orphans": [], "temps": []}


def test_orphan_removal_spares_an_entry_published_since_the_listing(tmp_path, monkeypatch):
    """verify --repair lists the directory, then takes each orphan's lock: if the entry was published
    in between (a cubin without its sidecar is what a publish looks like midway), its cubin stays."""
    root = tmp_path / "c"
    c = cache.KernelCache(root)
    good = c.get(SPEC_A)
    stem = root / f"{SPEC_A.name}-{good.key[:16]}"
    sidecar = Path(str(stem) + ".json")
    saved = sidecar.read_bytes()
    sidecar.unlink()                       # the state a listing sees mid-publish
    stale = root / f"{stem.name}.x1y2z3.tmp"
    stale.write_bytes(b"partial")
    groups = c._groups()
    sidecar.write_bytes(saved)             # the publish completes before the lock is taken
    monkeypatch.setattr(c, "_groups", lambda: groups)
    rep = c.verify(repair=True)
    assert rep["orphans_removed"] == 1 and not stale.exists()   # only the stale temp file went
    assert cache.KernelCache(root).verify() == {"ok": 1, "bad": [], "repaired": 0, "orphans_removed": 0, "orphans": [], "temps": []}


def test_clear_waits_for_an_entry_being_published(tmp_path, monkeypatch):
    """clear removes each entry under its lock: an entry another process holds (publishing it) is
    left after CLEAR_LOCK_TIMEOUT, not half removed under it."""
    root = tmp_path / "c"
    c = cache.KernelCache(root)
    c.get(SPEC_A)
    c.get(SPEC_B)
    held = stem_of(root, SPEC_A)
    monkeypatch.setattr(cache, "CLEAR_LOCK_TIMEOUT", 0.2)
    code = (f"import filelock, sys, time; l = filelock.FileLock({str(held) + '.lock'!r}); l.acquire(); "
            f"print('held', flush=True); time.sleep(30)")
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "held"
        assert c.clear() == 1
        assert Path(str(held) + ".json").exists() and Path(str(held) + ".cubin").exists()
    finally:
        p.kill()
        p.wait()
    assert c.clear() == 1 and not list(root.glob("*.cubin"))


def test_files_that_only_look_like_an_entry_are_not_the_caches(tmp_path):
    """Only <stem>.cubin / .json / .lock and <stem>.<random>.tmp are the cache's: a user's
    <stem>.backup.cubin is neither listed, nor removed by repair or clear."""
    root = tmp_path / "c"
    c = cache.KernelCache(root)
    good = c.get(SPEC_A)
    stem = root / f"{SPEC_A.name}-{good.key[:16]}"
    mine = [root / f"{stem.name}.backup.cubin", root / f"{stem.name}.json.orig", root / f"{SPEC_B.name}-{'0' * 16}.a.b.tmp"]
    for p in mine:
        p.write_bytes(b"mine")
    assert [e["name"] for e in c.entries()] == [SPEC_A.name]
    assert c.verify(repair=True) == {"ok": 1, "bad": [], "repaired": 0, "orphans_removed": 0, "orphans": [], "temps": []}
    assert c.clear() == 1
    assert sorted(files(root)) == sorted(p.name for p in mine)


def test_one_failed_rebuild_does_not_stop_verify_repair(tmp_path, monkeypatch, capsys):
    """A bad entry whose rebuild raises (NVRTC rejects it under today's defines) is reported with the
    error and the other bad entries are still repaired (the first error ended verify, with no summary)."""
    root = tmp_path / "c"
    c = cache.KernelCache(root)
    c.get(SPEC_A)
    c.get(SPEC_B)
    for spec in (SPEC_A, SPEC_B):
        side = Path(str(stem_of(root, spec)) + ".json")
        meta = json.loads(side.read_text())
        meta["cubin_sha256"] = "0" * 64
        side.write_text(json.dumps(meta))
    real = compiler.compile_cubin

    def picky(source, arch, options, name="kernel"):
        if name == SPEC_A.name:
            raise compiler.CompileError(name, "error: rejected today", None)
        return real(source, arch, options, name)

    monkeypatch.setattr(compiler, "compile_cubin", picky)
    fates = {}
    rep = cache.KernelCache(root).verify(repair=True, outcomes=fates)
    a, b = stem_of(root, SPEC_A).name, stem_of(root, SPEC_B).name
    assert sorted(rep["bad"]) == sorted([a, b]) and rep["repaired"] == 1
    assert fates == {a: "removed", b: "repaired"}
    assert list(rep["errors"]) == [a] and rep["errors"][a].startswith("CompileError: NVRTC failed to compile")
    monkeypatch.setattr(compiler, "compile_cubin", real)
    assert cache.KernelCache(root).verify() == {"ok": 1, "bad": [], "repaired": 0, "orphans_removed": 0, "orphans": [], "temps": []}


def test_cache_commands_create_no_directory_and_refuse_an_empty_path(tmp_path, capsys):
    missing = tmp_path / "typo" / "deep"
    for argv in (["cache", "clear", "--cache-dir", str(missing)], ["cache", "verify", "--repair", "--cache-dir", str(missing)]):
        assert cli.main(argv) == 0
        assert not (tmp_path / "typo").exists()
    out = capsys.readouterr().out
    assert f"no cache directory at {missing}: nothing to clear" in out and "nothing to repair" in out
    for argv in (["cache", "clear", "--cache-dir", ""], ["warmup", "--arch", "sm_80", "--cache-dir", " "]):
        with pytest.raises(SystemExit) as ei:
            cli.main(argv)
        assert ei.value.code == 2
        assert "argument --cache-dir: an empty path (it would mean the current directory)" in capsys.readouterr().err


def test_warmup_workers_compile_with_the_callers_kernelgen_variables(tmp_path, monkeypatch):
    """A second warmup in one process after KERNELGEN_DEFINES changed compiles the kernels with the
    new defines (the forkserver kept the first call's environment: it found them "cached")."""
    from kernelgen.jit.warmup import warmup

    root = tmp_path / "c"
    specs = [SPEC_A, SPEC_B]
    assert warmup(specs, root, jobs=2, progress=False) == (2, 0)
    monkeypatch.setenv("KERNELGEN_DEFINES", "KG_REVIEW_PROBE=1")
    assert warmup(specs, root, jobs=2, progress=False) == (2, 0)
    assert all(cache.KernelCache(root).lookup(s) is not None for s in specs)
    assert len(list(root.glob("*.json"))) == 4


@pytest.mark.parametrize("field,change", [("resources", lambda m: m["resources"].update(registers=23)),
                                          ("key", lambda m: m.update(key=m["key"][:16] + ("0" if m["key"][16] != "0" else "1") + m["key"][17:])),
                                          ("arch", lambda m: m.update(arch="sm_80")),
                                          ("spec", lambda m: m["spec"].update(head_dim_v=64))])
def test_a_changed_sidecar_field_is_a_bad_entry(tmp_path, field, change):
    """The sidecar's fields are checksummed as the cubin is: a flipped register count (the launch
    checks the register pool with it), key tail, arch or spec makes the entry bad for verify and for a
    load (verify passed them; a no-JIT load then refused the key, or the launch used wrong numbers)."""
    root = tmp_path / "c"
    good = cache.KernelCache(root).get(SPEC_A)
    side = Path(str(stem_of(root, SPEC_A)) + ".json")
    meta = json.loads(side.read_text())
    assert meta["sidecar_sha256"] == cache._sidecar_digest(meta)
    change(meta)
    side.write_text(json.dumps(meta, indent=3))
    fresh = cache.KernelCache(root)
    assert fresh.verify()["bad"] == [side.stem]
    assert {e["name"]: e for e in fresh.entries()}[SPEC_A.name]["reason"] == \
        "sidecar checksum mismatch (its content changed after it was written)"
    with pytest.warns(cache.KernelCacheWarning, match="sidecar checksum mismatch"):
        assert cache.KernelCache(root).get(SPEC_A).cubin == good.cubin


def test_a_sidecar_without_its_checksum_still_loads(tmp_path):
    """Sidecars written before the checksum existed (same format, e.g. a pre-built archive) load and
    verify as before; a relaid-out sidecar with the checksum too (it covers the values, not the text)."""
    root = tmp_path / "c"
    good = cache.KernelCache(root).get(SPEC_A)
    side = Path(str(stem_of(root, SPEC_A)) + ".json")
    meta = json.loads(side.read_text())
    side.write_text(json.dumps(meta, indent=None, sort_keys=False))
    assert cache.KernelCache(root).verify()["ok"] == 1
    del meta["sidecar_sha256"]
    side.write_text(json.dumps(meta))
    fresh = cache.KernelCache(root)
    assert fresh.verify() == {"ok": 1, "bad": [], "repaired": 0, "orphans_removed": 0, "orphans": [], "temps": []}
    n0 = compiler.COMPILE_COUNT
    assert fresh.get(SPEC_A).cubin == good.cubin and compiler.COMPILE_COUNT == n0


# ------------------------------------------------------------------- a review's finds (66th session)
@pytest.mark.parametrize("target", ["loop", "outside"])
def test_a_lock_file_that_is_a_symbolic_link_heals(tmp_path, target):
    """A lock file that is a symbolic link (to itself, or to a file outside the cache) fails every
    lock (filelock opens with O_NOFOLLOW): ``clear`` raised ELOOP and left every later entry, and a
    bad entry was compiled in memory by every process.  Now the link goes (the target stays), the
    entry heals through ``get``, and ``clear`` removes everything."""
    root = tmp_path / "c"
    cache.KernelCache(root).get(SPEC_A)
    cache.KernelCache(root).get(SPEC_B)
    a = stem_of(root, SPEC_A)
    lock = Path(str(a) + ".lock")
    lock.unlink(missing_ok=True)
    outside = tmp_path / "outside.txt"
    outside.write_text("keep")
    os.symlink(lock if target == "loop" else outside, lock)
    Path(str(a) + ".cubin").write_bytes(b"garbage")                 # a bad entry: get rebuilds it
    c = cache.KernelCache(root)
    with pytest.warns(cache.KernelCacheWarning, match="is bad"):
        e = c.get(SPEC_A)
    assert e.compiled and e.path is not None and not lock.is_symlink()
    assert cache.KernelCache(root).verify()["ok"] == 2 and outside.read_text() == "keep"
    os.symlink(lock if target == "loop" else outside, Path(str(stem_of(root, SPEC_B)) + ".lock.x"))  # not ours
    Path(str(stem_of(root, SPEC_B)) + ".lock.x").unlink()
    lock.unlink(missing_ok=True)
    os.symlink(lock if target == "loop" else outside, lock)
    assert cache.KernelCache(root).clear() == 2 and files(root) == [] and outside.read_text() == "keep"


def test_a_directory_in_place_of_an_entry_file_heals_through_get(tmp_path):
    """A directory where an entry's cubin or sidecar belongs: ``get`` rebuilt the entry in memory in
    every process (and the warning named a file descriptor); now it removes the directory under the
    entry's lock and publishes the rebuilt entry, and the reason says what is wrong."""
    root = tmp_path / "c"
    cache.KernelCache(root).get(SPEC_A)
    a = stem_of(root, SPEC_A)
    for where in (".cubin", ".json"):
        Path(str(a) + where).unlink()
        Path(str(a) + where).mkdir()
        with pytest.warns(cache.KernelCacheWarning) as w:
            e = cache.KernelCache(root).get(SPEC_A)
        assert e.compiled and e.path is not None, where
        if where == ".cubin":
            assert any("is not a regular file" in str(x.message) for x in w), [str(x.message) for x in w]
        assert not Path(str(a) + where).is_dir() and cache.KernelCache(root).verify()["ok"] == 1
        assert cache.KernelCache(root).get(SPEC_A).compiled is False


def test_cache_commands_name_a_directory_they_cannot_list(tmp_path, capsys):
    """A cache directory that cannot be listed (here a symbolic-link loop; also a directory without
    read permission, a path past PATH_MAX): each cache command prints its one error line naming the
    directory and the setting, not an OSError."""
    loop = tmp_path / "loop"
    os.symlink(loop, loop)
    for action in ("list", "verify", "clear"):
        assert cli.main(["cache", action, "--cache-dir", str(loop)]) == 1
        err = capsys.readouterr().err
        assert f"cache directory {loop} cannot be listed: " in err and "(set by --cache-dir)" in err, err
        assert "OSError" not in err


def test_verify_names_the_temp_files_of_an_interrupted_write(tmp_path, capsys):
    """A writer killed mid-write leaves ``<stem>.<random>.tmp``: ``cache verify`` names it (``cache
    list`` said "no cached kernels" and verify "0 ok, 0 bad"), and ``--repair`` removes it."""
    root = tmp_path / "c"
    root.mkdir(mode=0o700)
    stem = cache.KernelCache(root)._stem(SPEC_A.name, "0" * 64)
    Path(str(stem) + ".a1b2c3d4.tmp").write_bytes(b"x" * 100)
    assert cache.KernelCache(root).verify()["temps"] == [stem.name]
    assert cli.main(["cache", "verify", "--cache-dir", str(root)]) == 0
    out = capsys.readouterr().out
    assert f"temp files of an interrupted or running write (never loaded; verify --repair removes them" in out
    assert stem.name in out
    report = cache.KernelCache(root).verify(repair=True)
    assert report["orphans_removed"] == 1 and report["temps"] == [] and files(root) == []


def test_an_entry_removed_between_its_two_reads_is_missing_not_bad(tmp_path, monkeypatch):
    """``clear`` (or a repair) removes the sidecar, then the cubin: a reader that read the sidecar
    just before finds the cubin gone, and the entry is missing (rebuilt without a "bad" warning), not
    bad; a sidecar that is still there beside a missing cubin is a bad entry, as before."""
    root = tmp_path / "c"
    cache.KernelCache(root).get(SPEC_A)
    a = stem_of(root, SPEC_A)
    real = cache._read_trusted

    def racing(path, what):
        if what == "the cubin":      # clear runs between the sidecar's read and the cubin's
            Path(str(a) + ".json").unlink()
            Path(str(a) + ".cubin").unlink()
        return real(path, what)
    monkeypatch.setattr(cache, "_read_trusted", racing)
    entry, meta, reason = cache.KernelCache(root)._read(a, None)
    assert (entry, meta, reason) == (None, None, "missing")
    monkeypatch.setattr(cache, "_read_trusted", real)
    cache.KernelCache(root).get(SPEC_A)
    Path(str(a) + ".cubin").unlink()
    entry, meta, reason = cache.KernelCache(root)._read(a, None)
    assert entry is None and meta is not None and reason.startswith("cubin unreadable")


# ------------------------------------------------------------------- the sixty-seventh session
def test_an_unreadable_cache_directory_warns_once_not_once_per_entry(tmp_path, monkeypatch):
    """A cache directory this process cannot read or search (mode 0o000, or owned by another user
    with 0o700): every entry's read fails with EACCES.  ``get`` warned "cache entry X is bad" for each
    kernel on top of the one "not usable" warning; the entries are not at fault.  Now the read's reason
    names the directory, ``get`` gives the one warning per root, and the kernels still compile in
    memory.  (Simulated: the tests may run as root, whom permissions do not stop.)"""
    root = tmp_path / "c"
    cache.KernelCache(root).get(SPEC_A)
    cache.KernelCache(root).get(SPEC_B)
    denied = PermissionError(13, "Permission denied")
    real_access, real_read = cache.os.access, cache._read_trusted

    def read(path, what):
        if Path(path).parent == root:
            raise PermissionError(13, "Permission denied", str(path))
        return real_read(path, what)

    def lock(self, stem, timeout=None):
        raise denied

    monkeypatch.setattr(cache, "_read_trusted", read)
    monkeypatch.setattr(cache.os, "access", lambda p, m, *a, **k: Path(p) != root and real_access(p, m, *a, **k))
    monkeypatch.setattr(cache.KernelCache, "_lock", lock)
    c = cache.KernelCache(root)
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        a, b = c.get(SPEC_A), c.get(SPEC_B)
    msgs = [str(w.message) for w in got if issubclass(w.category, cache.KernelCacheWarning)]
    assert len(msgs) == 1, msgs
    assert "is not usable" in msgs[0] and str(root) in msgs[0] and "is bad" not in msgs[0]
    assert a.compiled and b.compiled and a.path is None and b.path is None
    # an entry's own unreadable sidecar (the directory searchable, listable or not: opening a file needs
    # search permission only) is still that entry's warning
    monkeypatch.setattr(cache.os, "access", lambda p, m, *a, **k: not (Path(p) == root and m & os.R_OK))
    monkeypatch.setattr(cache, "_warned_roots", set())
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        cache.KernelCache(root).get(SPEC_A)
    assert any("is bad: sidecar unreadable" in str(w.message) for w in got), [str(w.message) for w in got]
    # JIT disabled: the error names the directory, not the entry
    monkeypatch.setattr(cache.os, "access", lambda p, mo, *a, **k: Path(p) != root)
    monkeypatch.setenv("KERNELGEN_DISABLE_JIT", "1")
    with pytest.raises(cache.KernelNotCachedError, match="cache directory not readable") as e:
        cache.KernelCache(root).get(SPEC_B)
    assert f"chmod u+rwx {root}" in str(e.value) and "warmup" not in str(e.value)   # (warmup could not write there)


def test_a_cache_directory_that_is_a_symbolic_link_loop_warns_once(tmp_path):
    """A cache root that is a symbolic-link loop: every entry's open fails with ELOOP.  One "not usable"
    warning (its publish fails too), no "entry is bad" per kernel, and the kernels run from memory."""
    loop = tmp_path / "loop"
    os.symlink(loop, loop)
    c = cache.KernelCache(loop)
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        a, b = c.get(SPEC_A), c.get(SPEC_B)
    msgs = [str(w.message) for w in got if issubclass(w.category, cache.KernelCacheWarning)]
    assert len(msgs) == 1 and "is not usable" in msgs[0] and "is bad" not in msgs[0], msgs
    assert a.compiled and b.compiled and a.path is None and b.path is None


def test_cache_commands_name_a_directory_they_cannot_enter(tmp_path, capsys, monkeypatch):
    """A cache directory that can be listed but not entered (mode 0o600: no search permission): ``cache
    list`` failed with "error: PermissionError" from an entry's stat.  Each cache command now prints its one
    error line naming the directory.  (Simulated: the tests may run as root, whom permissions do not stop.)"""
    root = tmp_path / "c"
    cache.KernelCache(root).get(SPEC_A)
    real_access = os.access
    monkeypatch.setattr(cli.os, "access", lambda p, m, *a, **k: not (Path(p) == root and m & os.X_OK)
                        and real_access(p, m, *a, **k))
    for action in ("list", "verify", "clear"):
        assert cli.main(["cache", action, "--cache-dir", str(root)]) == 1
        err = capsys.readouterr().err
        assert f"cache directory {root} cannot be entered: no search (x) permission" in err, err
        assert "(set by --cache-dir)" in err
    monkeypatch.setattr(cli.os, "access", real_access)
    assert cli.main(["cache", "list", "--cache-dir", str(root)]) == 0
