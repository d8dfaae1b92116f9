"""The benchmark's FlashAttention-3 and FlashAttention-4 peers, carried to a GPU machine with no package
registry.

The GPU machine cannot download anything, and a device call carries at most 64 MiB of files.  The
peers' wheels come to about 130 MB (92 MB of it the CuTe DSL's CUDA 13 libraries), so this tool
installs them here into a staging folder, packs that folder as one xz-compressed tar (about 78 MB)
and splits it into parts small enough to travel one per call; on the device, ``install`` joins
the parts, checks them and unpacks the packages into a temporary site directory.

Steps (the folder ``.peers/`` is git-ignored)::

    python tools/peer_wheels.py download      # pip download the pinned wheels into .peers/wheels
    python tools/peer_wheels.py pack          # stage, compress, split: .peers/part1, .peers/part2, manifest
    python tools/peer_wheels.py status        # what is here

The two-call recipe on one lease of the device (carried paths stay on the machine between the
calls of one lease, so the second call finds the first call's part):

1. ``run(carry=[".peers/manifest.json", ".peers/part1"], command="... bash tools/gpu_check.sh tests")``
   (the GPU tests need no peers; the peers step copies part 1 aside and says part 2 is missing);
2. right after it (the machine stays warm for about 30 s after a call),
   ``run(carry=[".peers/manifest.json", ".peers/part2"], command="... bash tools/gpu_check.sh full-bench")``:
   the peers step joins both parts, checks their sha256, unpacks into ``/tmp/kernelgen-peers/site``
   and the benchmark measures FA3 and FA4.  Later calls on the same machine find the unpacked
   site and carry nothing.

FlashAttention-3 alone (the FP8 rows' only peer: FA4 takes no FP8) packs to one part of about 9 MB, so
one call carries it beside the tree and a devcache::

    mkdir -p .peers_fa3/wheels && cp .peers/wheels/fa3_fwd-*.whl .peers_fa3/wheels/
    python tools/peer_wheels.py pack --dir .peers_fa3          # .peers_fa3/part1 and its manifest
    # on the device: python3 tools/peer_wheels.py install --dir .peers_fa3 --dest /tmp/kernelgen-peers-fa3

``install`` (run by ``tools/gpu_check.sh``) prints the ``PYTHONPATH`` entries on its last line and
exits 0 when the peers are ready, 3 when a part is still missing (the run goes on without the
peers; the benchmark reports them unavailable with the import error).  A ``pip install --target``
does not read the CuTe DSL's ``.pth`` file, so its ``dsl_packages`` folder is one of the printed
entries; fa3-fwd imports ``flash_attn_config`` but ships ``fa3_fwd_config``, so ``install`` writes a
one-line shim module.

Needs only the standard library on the device (tarfile, lzma, hashlib).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import lzma
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

#: The wheels the two peers need beyond what the device image has (torch, einops, protobuf,
#: cuda-bindings, typing-extensions are there).  Versions as tried on the H200 (torch 2.11, CUDA 13).
PINS = (
    "fa3-fwd==0.0.3",
    "flash-attn-4==4.0.0b36",
    "nvidia-cutlass-dsl==4.8.1",
    "nvidia-cutlass-dsl-libs-base==4.8.1",
    "nvidia-cutlass-dsl-libs-core==4.8.1",
    "nvidia-cutlass-dsl-libs-cu13==4.8.1",
    "quack-kernels==0.6.5",
    "apache-tvm-ffi==0.1.15.post2",
    "torch-c-dlpack-ext==0.1.5",
)
#: The device's interpreter and platform (pip matches manylinux tags exactly, so several are listed).
PYTHON_VERSION = "3.12"
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_24_x86_64",
             "manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux1_x86_64")
#: Largest part: a call carries 64 MiB in all, the working tree (about 4 MB) included.
MAX_PART_BYTES = 56 * 1024 * 1024
ARCHIVE = "peers.tar.xz"
MANIFEST = "manifest.json"
#: The shim fa3-fwd's interface needs (it imports ``flash_attn_config``).
FA3_SHIM = ("flash_attn_config.py", "from fa3_fwd_config import CONFIG  # noqa: F401  (fa3-fwd ships the module "
                                    "under this name)\n")
DEFAULT_DIR = Path(__file__).resolve().parents[1] / ".peers"
DEFAULT_DEST = Path("/tmp/kernelgen-peers")


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _platform_args() -> list:
    out = ["--only-binary=:all:", "--python-version", PYTHON_VERSION, "--implementation", "cp"]
    for p in PLATFORMS:
        out += ["--platform", p]
    return out


def download(root: Path) -> int:
    """pip download the pinned wheels (no dependencies) into ``root/wheels``."""
    wheels = root / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", *_platform_args(), "-d", str(wheels), *PINS]
    return subprocess.call(cmd)


def split_sizes(total: int, max_part: int) -> list:
    """Sizes of the fewest near-equal parts of ``total`` bytes, each at most ``max_part``.

    Raises ValueError for a non-positive ``max_part``.
    """
    if max_part <= 0:
        raise ValueError(f"max_part must be positive, got {max_part}")
    n = max(1, -(-total // max_part))
    base, extra = divmod(total, n)
    return [base + (1 if i < extra else 0) for i in range(n)]


def pack(root: Path, max_part: int = MAX_PART_BYTES) -> dict:
    """Install the wheels of ``root/wheels`` into a staging folder (pip --target, the device's
    platform), compress it as one xz tar and split that into ``root/part1`` ... ``partN`` (one file
    each); writes and returns the manifest."""
    wheels = sorted((root / "wheels").glob("*.whl"))
    if not wheels:
        raise SystemExit(f"no wheels in {root / 'wheels'}: run `python {Path(__file__).name} download` first")
    with tempfile.TemporaryDirectory(prefix="kernelgen-peers-") as tmp:
        site = Path(tmp) / "site"
        subprocess.check_call([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-compile",
                               "--target", str(site), *_platform_args(), *map(str, wheels)])
        archive = Path(tmp) / ARCHIVE
        if shutil.which("xz"):  # multi-threaded; the same .xz format tarfile reads
            with open(archive, "wb") as f:
                tar = subprocess.Popen(["tar", "-C", str(site), "-cf", "-", "."], stdout=subprocess.PIPE)
                subprocess.check_call(["xz", "-9", "-T0", "-c"], stdin=tar.stdout, stdout=f)
                if tar.wait() != 0:
                    raise SystemExit("tar failed")
        else:
            with tarfile.open(archive, "w:xz", preset=9) as t:
                t.add(site, arcname=".")
        for old in root.glob("part*"):
            shutil.rmtree(old) if old.is_dir() else old.unlink()
        total = archive.stat().st_size
        parts = []
        with open(archive, "rb") as src:
            for i, size in enumerate(split_sizes(total, max_part), 1):
                d = root / f"part{i}"
                d.mkdir(parents=True)
                p = d / f"{ARCHIVE}.{i}"
                p.write_bytes(src.read(size))
                parts.append({"file": f"part{i}/{p.name}", "bytes": size, "sha256": sha256(p)})
        manifest = {"pins": list(PINS), "wheels": [w.name for w in wheels], "archive_sha256": sha256(archive),
                    "archive_bytes": total, "parts": parts}
    (root / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def status(root: Path) -> int:
    """Print what is in ``root`` (wheels, manifest, parts) and whether every part is present."""
    wheels = sorted((root / "wheels").glob("*.whl"))
    print(f"{len(wheels)} wheels in {root / 'wheels'} ({sum(w.stat().st_size for w in wheels) / 1e6:.0f} MB)")
    man = root / MANIFEST
    if not man.exists():
        print("no manifest: run `pack`")
        return 1
    m = json.loads(man.read_text())
    ok = True
    for p in m["parts"]:
        f = root / p["file"]
        have = f.exists() and f.stat().st_size == p["bytes"]
        ok &= have
        print(f"{p['file']}: {p['bytes'] / 1e6:.1f} MB {'present' if have else 'MISSING'}")
    return 0 if ok else 1


def site_paths(dest: Path) -> list:
    """The PYTHONPATH entries of an unpacked site: the site and the CuTe DSL's dsl_packages."""
    site = dest / "site"
    return [str(site), str(site / "nvidia_cutlass_dsl" / "dsl_packages")]


def install(root: Path, dest: Path) -> int:
    """On the device: join the parts (from ``root`` or from earlier calls' copies under
    ``dest/parts``), verify each part's and the archive's sha256, unpack into ``dest/site`` and write
    the fa3 shim.  Prints the PYTHONPATH entries last.  Returns 0 when ready, 3 when a part is
    missing, 4 when a part or the archive does not match the manifest or cannot be unpacked (a
    member outside the site, a broken archive: nothing is left unpacked then)."""
    man_path = root / MANIFEST
    if not man_path.exists():
        print(f"peers: no {man_path} (carry .peers/{MANIFEST} with a part)")
        return 3
    m = json.loads(man_path.read_text())
    site, stamp = dest / "site", dest / "site" / ".archive_sha256"
    if stamp.exists() and stamp.read_text().strip() == m["archive_sha256"]:
        print("peers: already unpacked")
        print(os.pathsep.join(site_paths(dest)))
        return 0
    saved = dest / "parts"
    saved.mkdir(parents=True, exist_ok=True)
    have = []
    for p in m["parts"]:
        src, keep = root / p["file"], saved / Path(p["file"]).name
        if src.exists() and not (keep.exists() and sha256(keep) == p["sha256"]):
            shutil.copyfile(src, keep)  # outlives the working tree of this call (replaces a stale copy)
        if keep.exists():
            if sha256(keep) != p["sha256"]:
                print(f"peers: {p['file']} does not match the manifest's sha256")
                keep.unlink()
                return 4
            have.append(keep)
        else:
            print(f"peers: {p['file']} missing (carry .peers/{Path(p['file']).parent} in a call of this lease)")
    if len(have) < len(m["parts"]):
        return 3
    archive = dest / ARCHIVE
    h = hashlib.sha256()
    with open(archive, "wb") as out:
        for f in have:
            with open(f, "rb") as src:
                for block in iter(lambda: src.read(1 << 20), b""):
                    h.update(block)
                    out.write(block)
    if h.hexdigest() != m["archive_sha256"]:
        print("peers: the joined archive does not match the manifest's sha256")
        archive.unlink()
        return 4
    # unpacked beside the site and moved into place whole: a member the data filter rejects (or a
    # broken archive) leaves no half-filled site behind
    staging = dest / "site.partial"
    shutil.rmtree(staging, ignore_errors=True)
    try:
        with tarfile.open(archive, "r:xz") as t:
            t.extractall(staging, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
    except (tarfile.TarError, OSError, EOFError, lzma.LZMAError) as err:   # (FilterError is a TarError)
        print(f"peers: the archive could not be unpacked: {err}")
        shutil.rmtree(staging, ignore_errors=True)
        archive.unlink()
        return 4
    archive.unlink()
    if site.exists():
        shutil.rmtree(site)
    staging.rename(site)
    (site / FA3_SHIM[0]).write_text(FA3_SHIM[1])
    stamp.write_text(m["archive_sha256"] + "\n")
    print(f"peers: unpacked {len(m['wheels'])} wheels into {site}")
    print(os.pathsep.join(site_paths(dest)))
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("command", choices=("download", "pack", "status", "install", "paths"))
    ap.add_argument("--dir", type=Path, default=DEFAULT_DIR, help="the wheels/parts folder (default: .peers)")
    ap.add_argument("--dest", type=Path, default=DEFAULT_DEST, help="install: where to unpack (device side)")
    ap.add_argument("--max-part-mb", type=float, default=MAX_PART_BYTES / 2 ** 20,
                    help="pack: largest part in MiB (default %(default).0f)")
    args = ap.parse_args(argv)
    if args.command == "download":
        return download(args.dir)
    if args.command == "pack":
        m = pack(args.dir, int(args.max_part_mb * 2 ** 20))
        print(f"{m['archive_bytes'] / 1e6:.1f} MB in {len(m['parts'])} parts: "
              + ", ".join(f"{p['file']} {p['bytes'] / 1e6:.1f} MB" for p in m["parts"]))
        return 0
    if args.command == "status":
        return status(args.dir)
    if args.command == "paths":
        print(os.pathsep.join(site_paths(args.dest)))
        return 0
    return install(args.dir, args.dest)


if __name__ == "__main__":
    sys.exit(main())
