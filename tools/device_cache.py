"""Build on this machine (no GPU) every sm_90a kernel a device call will compile, as one compressed
archive that travels with the call; unpack it there into the kernel cache.

A GPU session's device time is short (30 minutes), and about 200 s of a GPU suite plus a fuzz went
to compiling: ``gpu_check.sh``'s warm-up (``kernelgen warmup --serving`` and
``tools/warm_gpu_tests.py``, about 90 s on the device's 16 cores) and the fuzz's prewarm (about
1400 kernels, 112 s).  NVRTC needs no GPU and this machine has the device's NVRTC (the cache key
holds its version, so a kernel compiled here is the kernel the device would compile), and cubins
compress about 15x with xz, so the whole set (about 250 MB) travels as about 17 MB.

    python tools/device_cache.py build [--dir .devcache] [--fuzz-seed 41] [--fuzz-batches 2000]
                                       [--env KERNELGEN_SM90_PACK_GQA=1] [--jobs N] [--no-bench]
                                       [--steps serving,gpu_tests,fuzz,bench] [--work DIR]
    python tools/device_cache.py unpack [--dir .devcache] [--cache-dir DIR]     # on the device
    python tools/device_cache.py status [--dir .devcache]

``build`` compiles, into a fresh cache folder, the kernels of ``kernelgen warmup --serving
--arch sm_90a``, of ``tools/warm_gpu_tests.py`` (every group), of ``tools/fuzz.py --prewarm-only``
for the given seed and batch count, and of the bench's entries (every suite, preset and dtype, as
``kernelgen bench`` prewarms them), once for the current environment and once more for each
``--env`` setting (a switch that changes the dispatcher's choices, e.g. pack-GQA on); then writes
``DIR/cache.tar.xz`` (cubins and sidecars only) and ``DIR/manifest.json`` (the archive's sha256 and
size, the entry count, the commit, the steps and their outcomes).  ``.devcache/`` is git-ignored:
name it in the device call's ``carry``.

``unpack`` checks the archive against the manifest and writes each entry the cache does not hold
complete yet (its sidecar marks an entry complete; names ``<kernel>-<16 hex>.cubin`` / ``.json``
only, the cubin first, each through a temporary file and a rename, mode 0600: the cache's own trust
rules, ``kernelgen/jit/cache.py``); a bad entry would only be rebuilt by the cache's verified load.
Exit status 0 when unpacked (or nothing to do), 3 when there is no manifest, 4 when the archive
does not match it, 5 when this machine's NVRTC is not the one the kernels were built with (their
keys could never match), 6 when the cache would not read the directory (owner or mode).  A
different ``KERNELGEN_DEFINES`` only warns.  ``tools/gpu_check.sh`` runs it first when
``.devcache/manifest.json`` came along, and its fuzz takes the manifest's seed.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
from peer_wheels import sha256  # noqa: E402  (the archive check the peers' parts use)
DEFAULT_DIR = ROOT / ".devcache"
ARCHIVE, MANIFEST = "cache.tar.xz", "manifest.json"
ARCH, NUM_SMS = "sm_90a", 132
#: the cache's entry files (kernelgen/jit/cache.py: ``<name>-<key[:16]>.cubin`` and its sidecar)
ENTRY = re.compile(r"^[A-Za-z0-9_]+-[0-9a-f]{16}\.(cubin|json)$")
#: The compile settings every archived kernel's cache key depends on besides its spec (the NVRTC
#: version is in the key; defines change the options): a mismatch on the device means none is found.
DEFINES_ENV = "KERNELGEN_DEFINES"
TMP_PREFIX = ".unpack-"


def nvrtc() -> list | None:
    """This process's NVRTC (major, minor), or None where it cannot be loaded."""
    try:
        sys.path.insert(0, str(ROOT))
        from kernelgen.jit.compiler import nvrtc_version
        return list(nvrtc_version())
    except Exception:  # noqa: BLE001 - no CuPy / NVRTC here: the manifest says so
        return None


def _bench_specs() -> list:
    """The kernels ``kernelgen bench`` prewarms for every suite, preset and dtype on an H200: with every
    preset at once, and with each one first (``--model PRESET``: the single-shape entries, sinks_*,
    alibi_*, variant_*, fp8_*, mixed_*, take the first preset's heads)."""
    sys.path.insert(0, str(ROOT))
    from kernelgen.apps.bench import SUITES
    from kernelgen.apps.bench import suites as S
    from kernelgen.apps.bench.models import resolve_models

    specs = []
    every = resolve_models(["all"])
    defs = [d for models in [every] + [[m] for m in every] for d in S.registry(list(SUITES), models, S.DTYPES)]
    for d in defs:
        if d.specs is not None:
            try:
                specs += d.specs(S.Settings(), ARCH, NUM_SMS)
            except Exception as e:  # noqa: BLE001 - as the bench's prewarm: that entry compiles on the device
                print(f"device_cache: no specs for {d.name}: {type(e).__name__}: {e}", file=sys.stderr)
    return list(dict.fromkeys(specs))


def _bench_step(cache_dir: str, jobs: int) -> str:
    from kernelgen.jit.warmup import warmup

    compiled, cached = warmup(_bench_specs(), Path(cache_dir), jobs=jobs, progress=False, desc="bench prewarm")
    return f"bench: {compiled} compiled, {cached} cached"


def steps(cache_dir: str, jobs: int, fuzz_seed: int, fuzz_batches: int, bench: bool = True,
          groups: str | None = None) -> list:
    """(name, command) of each compile step into ``cache_dir`` (``bench``: with the bench's; ``groups``:
    the gpu_tests step compiles only these groups of ``warm_gpu_tests.py``, e.g. "variant,variant_pack")."""
    py = sys.executable
    return [
        ("serving", [py, "-m", "kernelgen", "warmup", "--serving", "--arch", ARCH, "--jobs", str(jobs),
                     "--cache-dir", cache_dir]),
        ("gpu_tests", [py, str(ROOT / "tools" / "warm_gpu_tests.py"), "--jobs", str(jobs), "--cache-dir", cache_dir]
         + (["--only", groups] if groups else [])),
        ("fuzz", [py, str(ROOT / "tools" / "fuzz.py"), "--prewarm-only", "--arch", ARCH, "--num-sms", str(NUM_SMS),
                  "--seed", str(fuzz_seed), "--batches", str(fuzz_batches), "--jobs", str(jobs)]),
    ] + ([("bench", [py, str(Path(__file__).resolve()), "_bench", cache_dir, str(jobs)])] if bench else [])


def _env_sets(pairs: list) -> list:
    """[{}] plus one environment a ``--env NAME=VALUE`` (several NAME=VALUE joined by commas)."""
    out = [{}]
    for p in pairs or ():
        env = {}
        for kv in p.split(","):
            name, sep, value = kv.partition("=")
            if not sep or not name:
                raise SystemExit(f"--env: expected NAME=VALUE, got {kv!r}")
            env[name] = value
        out.append(env)
    return out


def write_archive(cache_dir: Path, root: Path) -> tuple:
    """``root/ARCHIVE``: the cache's entry files (cubins and sidecars, no locks or temp files) as one
    xz tar; returns (their names, their total bytes)."""
    names = sorted(p.name for p in cache_dir.iterdir() if p.is_file() and ENTRY.match(p.name)) \
        if cache_dir.is_dir() else []
    archive, part = root / ARCHIVE, root / (ARCHIVE + ".part")
    if names and shutil.which("xz") and shutil.which("tar"):   # multi-threaded; the same format tarfile reads
        with open(part, "wb") as f:
            tar = subprocess.Popen(["tar", "-C", str(cache_dir), "-cf", "-", "--", *names], stdout=subprocess.PIPE)
            subprocess.check_call(["xz", "-6", "-T0", "-c"], stdin=tar.stdout, stdout=f)
            if tar.wait() != 0:
                raise SystemExit("device_cache: tar failed")
    else:
        with tarfile.open(part, "w:xz", preset=6) as t:
            for n in names:
                t.add(cache_dir / n, arcname=n)
    os.replace(part, archive)
    return names, sum((cache_dir / n).stat().st_size for n in names)


def write_manifest(root: Path, names: list, raw: int, **fields) -> dict:
    """``root/MANIFEST`` for the archive just written (its sha256 and size, the entry count, the
    commit and whether templates/ or kernelgen/ differ from it, plus ``fields``); returns it."""
    archive = root / ARCHIVE
    try:
        commit = subprocess.check_output(["git", "rev-parse", "HEAD"], cwd=ROOT, text=True).strip()
        dirty = bool(subprocess.check_output(["git", "status", "--porcelain", "--", "templates", "kernelgen"],
                                             cwd=ROOT, text=True).strip())
    except Exception:  # noqa: BLE001
        commit, dirty = "unknown", None
    m = {"archive": ARCHIVE, "archive_sha256": sha256(archive), "archive_bytes": archive.stat().st_size,
         "raw_bytes": raw, "entries": sum(n.endswith(".cubin") for n in names), "arch": ARCH,
         "commit": commit, "templates_or_package_modified": dirty, "nvrtc": nvrtc(),
         "defines": os.environ.get(DEFINES_ENV, ""),
         "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **fields}
    (root / MANIFEST).write_text(json.dumps(m, indent=1) + "\n")
    return m


STEPS = ("serving", "gpu_tests", "fuzz", "bench")


def build(root: Path, jobs: int, fuzz_seed: int, fuzz_batches: int, envs: list, bench: bool = True,
          only: tuple = STEPS, work: Path | None = None, groups: str | None = None) -> dict:
    """Compile every step (of ``only``) for every environment into a fresh cache (``work``: into that
    cache folder instead, kept, so a rebuild after a change compiles only what changed), archive it
    into ``root``; returns the manifest (also written)."""
    root.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    log = []
    with tempfile.TemporaryDirectory(prefix="kernelgen-devcache-") as tmp:
        cache_dir = str(work if work is not None else Path(tmp) / "cache")
        Path(cache_dir).mkdir(mode=0o700, parents=True, exist_ok=True)
        for extra in envs:
            env = dict(os.environ, KERNELGEN_CACHE_DIR=cache_dir, PYTHONPATH=str(ROOT))
            env.update(extra)
            for name, cmd in steps(cache_dir, jobs, fuzz_seed, fuzz_batches, bench, groups):
                if name not in only:
                    continue
                t = time.time()
                r = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True)
                tail = (r.stdout + r.stderr).replace("\r", "\n").strip().splitlines()[-1:] or [""]
                log.append({"step": name + (f" ({groups})" if groups and name == "gpu_tests" else ""),
                            "env": extra, "rc": r.returncode, "seconds": round(time.time() - t, 1),
                            "last_line": tail[0][-300:]})
                print(f"device_cache: {name} {extra or ''} rc {r.returncode} in {time.time() - t:.0f} s: {tail[0][-200:]}",
                      flush=True)
        names, raw = write_archive(Path(cache_dir), root)
    return write_manifest(root, names, raw, fuzz_seed=fuzz_seed if "fuzz" in only else None,
                          fuzz_batches=fuzz_batches if "fuzz" in only else None, envs=envs, steps=log,
                          seconds=round(time.time() - t0, 1))


def unpack(root: Path, cache_dir: Path) -> int:
    """Write the archive's entries that ``cache_dir`` lacks; see the module docstring."""
    man = root / MANIFEST
    if not man.exists():
        print(f"device_cache: no {man}")
        return 3
    try:
        m = json.loads(man.read_text())
        archive, want = root / str(m["archive"]), m["archive_sha256"]
    except (ValueError, KeyError, TypeError) as e:   # (not JSON, or not this tool's manifest)
        print(f"device_cache: {man} is not a device-cache manifest ({type(e).__name__}: {e})")
        return 4
    if not archive.exists() or sha256(archive) != want:
        print(f"device_cache: {archive} is missing or does not match the manifest's sha256")
        return 4
    here = nvrtc()
    if m.get("nvrtc") and here and list(m["nvrtc"]) != here:
        print(f"device_cache: the archive's kernels were compiled with NVRTC {m['nvrtc']}, this machine has {here}: "
              f"their cache keys can never match here; nothing unpacked")
        return 5
    if m.get("defines", "") != os.environ.get(DEFINES_ENV, ""):
        print(f"device_cache: warning: built with {DEFINES_ENV}={m.get('defines', '')!r}, this process has "
              f"{os.environ.get(DEFINES_ENV, '')!r}: the kernels compiled with other defines will not be found")
    cache_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    sys.path.insert(0, str(ROOT))
    from kernelgen.jit.cache import KernelCache
    why = KernelCache(cache_dir).unsafe_reason()
    if why:
        print(f"device_cache: the kernel cache will not read {cache_dir} ({why}); nothing unpacked")
        return 6
    for old in cache_dir.glob(TMP_PREFIX + "*"):   # left by an unpack that was killed
        old.unlink(missing_ok=True)
    with tarfile.open(archive, "r:xz") as t:
        members = {}
        refused = 0
        for member in t.getmembers():
            name = Path(member.name).name
            if not member.isfile() or member.name.removeprefix("./") != name or not ENTRY.match(name):
                refused += 1
                continue
            members[name] = member
        # an entry is complete once its sidecar is written (kernelgen/jit/cache.py): skip those; write
        # the others' cubin first and the sidecar last, over whatever a killed compile left
        stems = sorted({n.rsplit(".", 1)[0] for n in members})
        added = skipped = 0
        for stem in stems:
            if (cache_dir / f"{stem}.json").exists():
                skipped += 1
                continue
            for ext in ("cubin", "json"):
                member = members.get(f"{stem}.{ext}")
                if member is None:
                    continue
                fd, tmp = tempfile.mkstemp(dir=cache_dir, prefix=TMP_PREFIX)
                try:
                    with os.fdopen(fd, "wb") as f:
                        f.write(t.extractfile(member).read())
                    os.chmod(tmp, 0o600)
                    os.replace(tmp, cache_dir / f"{stem}.{ext}")
                except BaseException:
                    Path(tmp).unlink(missing_ok=True)
                    raise
            added += 1
    print(f"device_cache: {added} entries added, {skipped} already there, {refused} members refused, into "
          f"{cache_dir} (built at {str(m.get('commit', '?'))[:10]}, {m.get('entries')} kernels)")
    return 0


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["_bench"]:   # build's bench step, in its own process (the dispatcher reads the environment)
        print(_bench_step(argv[1], int(argv[2])))
        return 0
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("command", choices=("build", "unpack", "status"))
    ap.add_argument("--dir", type=Path, default=DEFAULT_DIR, help="archive folder (default: .devcache)")
    ap.add_argument("--cache-dir", type=Path, default=None,
                    help="unpack: the kernel cache (default: $KERNELGEN_CACHE_DIR, else kernelgen's default)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="build: compile processes")
    ap.add_argument("--fuzz-seed", type=int, default=41, help="build: the seed the device's fuzz will run")
    ap.add_argument("--fuzz-batches", type=int, default=2000, help="build: its batch count")
    ap.add_argument("--env", action="append", default=[], metavar="NAME=VALUE[,...]",
                    help="build: compile everything once more with these variables set (repeatable)")
    ap.add_argument("--no-bench", action="store_true", help="build: skip the bench's kernels")
    ap.add_argument("--work", type=Path, default=None, metavar="DIR",
                    help="build: compile into this cache folder and keep it (default: a temporary one); a "
                         "rebuild then compiles only what changed, but archives every kernel the folder holds")
    ap.add_argument("--steps", default=",".join(STEPS), metavar="S[,S...]",
                    help=f"build: only these steps ({', '.join(STEPS)}; default all), e.g. a small archive "
                         f"that fits beside a peers part in one call")
    ap.add_argument("--groups", default=None, metavar="G[,G...]",
                    help="build: the gpu_tests step compiles only these groups of tools/warm_gpu_tests.py (e.g. "
                         "variant,variant_pack: an archive of a few MB for one test file)")
    a = ap.parse_args(argv)
    if a.command == "build":
        only = tuple(x for x in a.steps.split(",") if x)
        if not only or set(only) - set(STEPS):
            ap.error(f"--steps: choose from {', '.join(STEPS)}")
        if a.no_bench and only == ("bench",):
            ap.error("--no-bench with --steps bench leaves nothing to build")
        if a.groups is not None:   # (checked before any step runs: a bad name failed only at gpu_tests)
            sys.path.insert(0, str(ROOT / "tools"))
            from warm_gpu_tests import GROUPS

            names = [g for g in a.groups.split(",")]
            if not a.groups.strip() or set(names) - set(GROUPS):
                ap.error(f"--groups: comma-separated names of {', '.join(GROUPS)}, got {a.groups!r}")
        m = build(a.dir, a.jobs, a.fuzz_seed, a.fuzz_batches, _env_sets(a.env), bench=not a.no_bench, only=only,
                  work=a.work, groups=a.groups)
        bad = [s for s in m["steps"] if s["rc"] != 0]
        print(f"device_cache: {m['entries']} kernels, {m['raw_bytes'] / 1e6:.0f} MB -> {m['archive_bytes'] / 1e6:.1f} MB "
              f"in {m['seconds']:.0f} s; {len(bad)} step(s) failed")
        return 1 if bad else 0
    if a.command == "status":
        man = a.dir / MANIFEST
        if not man.exists():
            print(f"device_cache: no {man}")
            return 3
        m = json.loads(man.read_text())
        print(json.dumps({k: m[k] for k in ("entries", "archive_bytes", "commit", "templates_or_package_modified",
                                            "created", "fuzz_seed", "fuzz_batches", "envs")}, indent=1))
        return 0
    if a.cache_dir is not None or os.environ.get("KERNELGEN_CACHE_DIR"):
        cache_dir = Path(a.cache_dir or os.environ["KERNELGEN_CACHE_DIR"]).expanduser()
    else:   # kernelgen's own default
        sys.path.insert(0, str(ROOT))
        from kernelgen.jit.cache import default_cache_dir
        cache_dir = default_cache_dir()
    return unpack(a.dir, cache_dir)


if __name__ == "__main__":
    sys.exit(main())
