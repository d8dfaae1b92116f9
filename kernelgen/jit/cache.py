"""On-disk cache of compiled kernels (cubins), shared safely between processes.

Layout: every entry lives directly in the cache root as three files with one stem
``<spec.name>-<key[:16]>``:

* ``<stem>.cubin`` - the binary;
* ``<stem>.json``  - the sidecar: key, spec (``spec.to_json()``), arch, options, NVRTC and package
  versions, the compiler's resource report, the cubin's sha256 and size, creation time.  It is the
  commit marker: an entry exists only once its sidecar does.  JSON only; nothing is ever unpickled;
* ``<stem>.lock``  - an OS file lock (``filelock``: flock, released by the OS if the holder dies).

Lookup order in :meth:`KernelCache.get`: in-process dict -> valid disk entry (read without taking
the lock, so a pre-warmed read-only cache costs zero writes) -> take the entry's lock, look again
(another process may have just published it), compile, publish.  Publishing writes each file to a
``mkstemp`` temp file in the same directory, fsyncs it and ``os.replace``s it into place, cubin
first and sidecar last, so a reader sees either nothing or a complete entry.  A process killed
mid-compile or mid-publish leaves at most temp files or a cubin without a sidecar (never
loadable); its lock dies with it, and the next builder of that entry removes the entry's leftover
temp files under the lock (``verify(repair=True)`` and ``clear()`` remove them too).  Every load
checks the sidecar's key and the cubin's size and sha256; a bad entry is rebuilt with a warning.

Errors and degradations:

* ``compiler.CompileError`` propagates from NVRTC unchanged.
* :class:`KernelNotCachedError` when ``KERNELGEN_DISABLE_JIT=1`` and the entry is missing or bad.
* :class:`CacheLockTimeoutError` when an entry's lock is not obtained within ``LOCK_TIMEOUT``.
* A read-only, full or uncreatable cache directory never raises: the kernel is compiled in memory
  (``CacheEntry.path is None``) and one :class:`KernelCacheWarning` is issued per process and root.
  A read-only directory whose entries exist is simply read (a pre-warmed ``chmod -R a-w`` cache
  costs zero compiles and zero writes).

Trust (a cubin from the cache is machine code this process will run, so who could have written it
matters):

* The cache directory must be owned by this user (or root) and must not be writable by group or
  other users (``mode & 0o022 == 0``).  Otherwise another user could plant a cubin there, with a
  matching sidecar (the sha256 only catches corruption), and we would run it (the runtime loads
  the bytes that were checked, so there is no swap-after-check window).  Such a directory is
  neither read nor written: every kernel is compiled in memory and one :class:`KernelCacheWarning` per
  process and root says why and how to fix it (``chmod 700 DIR`` or another ``KERNELGEN_CACHE_DIR``).
  With ``KERNELGEN_DISABLE_JIT=1`` the call raises :class:`KernelNotCachedError` instead.  Only the
  directory itself is checked (after following a symlink to it), not its parents.
* Each entry file (cubin and sidecar) is checked on the open file (``fstat``, so there is no
  check-then-open race): a file owned by another user, or writable by group or other users, makes
  the entry bad: it is not loaded, and it is rebuilt (atomically replaced by our own file) or,
  with JIT disabled, reported by :class:`KernelNotCachedError`.  ``verify`` reports it as bad.
* We create the directory ``0o700`` and every file ``0o600`` (owner only), whatever the umask.
* "This user" is the effective uid; root (uid 0) is trusted too, since it can replace any binary
  on the machine anyway.  The check is :func:`_owner_ok`, one place to change (tests patch it).

Design sources (ideas, not code): Triton's file cache manager (content-hash keys that include the
compiler and package versions, temp-file + atomic rename publish, a per-entry metadata file that
marks completion) and CuPy's compiler cache (key from the source plus NVRTC version and options,
never from the nondeterministic compiler output; a hash of the binary stored and checked on load).
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import shutil
import stat
import tempfile
import threading
import time
import warnings
import weakref
from dataclasses import dataclass
from pathlib import Path

import filelock

from .. import _version
from ..kernels.spec import spec_from_json
from . import compiler, render

#: ABI tag of the on-disk format; bump it to orphan every existing entry.
CACHE_FORMAT = 1
#: The sidecar field holding the sha256 of its other fields (canonical JSON), so that a changed key,
#: spec or resource count (the launch reads the registers and the static shared memory from it) is
#: a bad entry as a changed cubin is.  Sidecars written before it existed (same CACHE_FORMAT) have
#: none and are checked as before; the next CACHE_FORMAT bump should make it required.
_SIDECAR_SHA = "sidecar_sha256"


def _sidecar_digest(meta: dict) -> str:
    """sha256 of the sidecar's fields but ``_SIDECAR_SHA`` (sorted keys, no spaces: the parsed
    values, so the file's own layout does not matter)."""
    body = {k: v for k, v in meta.items() if k != _SIDECAR_SHA}
    return _sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode())
#: Seconds to wait for another process's compile of the same entry (read at call time).
LOCK_TIMEOUT = 600.0
#: How long ``clear`` waits for an entry that another process holds (publishing it) before leaving it.
CLEAR_LOCK_TIMEOUT = 30.0
_FILE_MODE = 0o600
_DIR_MODE = 0o700
_STEM_RE = re.compile(r"^(?P<name>[A-Za-z0-9_]+)-(?P<k>[0-9a-f]{16})")
#: What follows the stem in an entry's file names: its cubin, sidecar and lock, or a temp file of
#: ``_write_atomic`` (``tempfile.mkstemp``'s random part); other files are not the cache's.
_ENTRY_FILE_RE = re.compile(r"^(?:\.cubin|\.json|\.lock|\.[A-Za-z0-9_]+\.tmp)$")


class KernelNotCachedError(RuntimeError):
    """JIT is disabled (``KERNELGEN_DISABLE_JIT=1``) and the requested kernel is not in the cache.
    ``spec``: that kernel's spec (None when not known); the message's ``kernelgen warmup --arch ARCH ...``
    is completed into the command that builds it by the public entry points (``front.jit_hint``)."""

    def __init__(self, message: str, spec=None):
        super().__init__(message)
        self.spec = spec

    def __reduce__(self):   # (pickles with its spec, e.g. across a process pool)
        return type(self), (str(self), self.spec)


class CacheLockTimeoutError(RuntimeError):
    """An entry's file lock was not obtained within ``LOCK_TIMEOUT`` seconds."""


class KernelCacheWarning(UserWarning):
    """A cache entry was bad and rebuilt, or the cache directory is unusable (compiling in memory)."""


@dataclass(frozen=True)
class CacheEntry:
    key: str  # hex sha256
    name: str  # spec.name
    cubin: bytes
    resources: dict  # registers, stack_frame, spill_stores, spill_loads, shared_static
    path: Path | None  # the .cubin file; None when compiled in memory only
    compiled: bool  # True if this call ran NVRTC


def default_cache_dir() -> Path:
    """``$KERNELGEN_CACHE_DIR``, else ``$XDG_CACHE_HOME/kernelgen``, else ``~/.cache/kernelgen``."""
    env = os.environ.get("KERNELGEN_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg and os.path.isabs(xdg):
        return Path(xdg) / "kernelgen"
    return Path.home() / ".cache" / "kernelgen"


def jit_disabled() -> bool:
    """True when ``KERNELGEN_DISABLE_JIT`` is set to a true value (checked on every call)."""
    return os.environ.get("KERNELGEN_DISABLE_JIT", "").strip().lower() in ("1", "true", "yes", "on")


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _owner_ok(st: os.stat_result) -> bool:
    """True if a cache directory or file with this stat may be trusted by owner: ours, or root's."""
    geteuid = getattr(os, "geteuid", None)
    if geteuid is None:  # not POSIX: no uid to compare
        return True
    return st.st_uid in (geteuid(), 0)


def _untrusted(st: os.stat_result, what: str) -> str | None:
    """Why a directory or file with this stat must not be loaded from, or None if it may."""
    if not _owner_ok(st):
        me = os.geteuid() if hasattr(os, "geteuid") else "?"
        return f"{what} is owned by another user (uid {st.st_uid}, this process runs as uid {me})"
    if st.st_mode & 0o022:
        return f"{what} is writable by group/other users (mode {oct(st.st_mode & 0o7777)})"
    return None


def _size(p: Path) -> int:
    """``p``'s size; 0 when it is gone."""
    try:
        return p.stat().st_size
    except FileNotFoundError:
        return 0


def _mtime(sidecar: Path, cubin: Path) -> float | None:
    """An entry's time: its sidecar's, else its cubin's (an orphan); None when neither exists."""
    for p in (sidecar, cubin):
        try:
            return p.stat().st_mtime
        except FileNotFoundError:
            pass
    return None


class _UntrustedFile(OSError):
    """An entry file failed the owner/mode check (see :func:`_untrusted`)."""


def _remove_entry_file(path: Path) -> None:
    """Delete an entry's file; a directory standing in its place (no cache file is one) is removed
    with what it holds, a symbolic link as a link (its target is not followed)."""
    try:
        path.unlink(missing_ok=True)
    except (IsADirectoryError, PermissionError):   # (unlink of a directory: EISDIR on Linux, EPERM on macOS)
        if not path.is_dir() or path.is_symlink():
            raise
        shutil.rmtree(path)


def _drop_directories(files: list) -> list:
    """``files`` (an entry's group) less the directories among them, which are removed (no cache file
    is a directory: one named like a cubin, temp or lock file would make the unlinks, or filelock,
    raise IsADirectoryError), and less lock files that are symbolic links, removed as links (filelock
    opens its file with O_NOFOLLOW: a link, to a loop or outside the cache, fails every lock)."""
    kept = []
    for p in files:
        if (p.is_dir() and not p.is_symlink()) or (p.suffix == ".lock" and p.is_symlink()):
            _remove_entry_file(p)
        else:
            kept.append(p)
    return kept


def _read_trusted(path: Path, what: str) -> bytes:
    """The bytes of ``path``, checked (fstat of the open file) before they are read: a regular file
    (opened without blocking, so a FIFO planted in its place cannot hang the reader) of a trusted
    owner and mode."""
    return _read_regular(path, what, trusted=True)


def _read_regular(path: Path, what: str, trusted: bool = False) -> bytes:
    """The bytes of ``path`` if it is a regular file (``trusted``: of a trusted owner and mode), else
    _UntrustedFile; opened without blocking, so a FIFO planted in its place cannot hang the reader."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    try:
        st = os.fstat(fd)
    except OSError:
        os.close(fd)
        raise
    if not stat.S_ISREG(st.st_mode):   # (before fdopen, which refuses a directory naming only the fd)
        os.close(fd)
        raise _UntrustedFile(f"{what} is not a regular file")
    with os.fdopen(fd, "rb") as f:
        why = _untrusted(st, what) if trusted else None
        if why:
            raise _UntrustedFile(why)
        return f.read()


_warned_roots: set[str] = set()
_warned_lock = threading.Lock()


def _warn_once(root: Path, message: str, stacklevel: int) -> None:
    """One warning per process and cache root, however many kernels fall back to memory."""
    with _warned_lock:
        if str(root) in _warned_roots:
            return
        _warned_roots.add(str(root))
    warnings.warn(message, KernelCacheWarning, stacklevel=stacklevel + 1)


# _read's reason when the cache directory itself cannot be entered (no search permission, a symbolic-link
# loop): not an entry's fault, so ``get`` does not warn per entry (its publish fails too and
# ``_warn_unwritable`` warns once per root)
_ROOT_DENIED = "cache directory not readable"


def root_unsearchable(root) -> bool:
    """Whether no file in ``root`` can be opened because of ``root`` itself: it cannot be stat'ed (a
    symbolic-link loop, a component without search permission), or this process (its effective ids
    where the platform can tell) may not search it.  Reading an entry needs search (x), not list (r)."""
    try:   # (also ``kernelgen cache``'s check of its directory: apps/cli.py cache_dir_problem)
        if not stat.S_ISDIR(os.stat(root).st_mode):
            return True
    except OSError:
        return True
    eff = os.access in os.supports_effective_ids
    return not os.access(root, os.X_OK, effective_ids=eff)


def _warn_unwritable(root: Path, err: BaseException) -> None:
    _warn_once(
        root,
        f"kernelgen cache directory {root} is not usable ({err}); compiling kernels in memory "
        f"only (set KERNELGEN_CACHE_DIR to a writable directory to keep them)",
        stacklevel=5,  # _warn_once <- _warn_unwritable <- _build <- _get <- get <- caller
    )


def _unsafe_advice(root: Path, why: str) -> str:
    return (f"kernelgen cache directory {root} is not safe to load kernels from: {why}, so another "
            f"user could plant a cubin there that this process would run.  Not reading or writing "
            f"it; compiling kernels in memory only (fix: `chmod 700 {root}` if it is yours, or set "
            f"KERNELGEN_CACHE_DIR to a private directory)")


def _write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` via a same-directory temp file, fsync and ``os.replace``."""
    fd, tmp = tempfile.mkstemp(prefix=path.stem + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), _FILE_MODE)
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


#: Every KernelCache of the process, for the fork handler below.
_instances: "weakref.WeakSet[KernelCache]" = weakref.WeakSet()


def _free_locks_in_child() -> None:
    """After ``os.fork`` in the child: every cache's thread locks start free.  A lock another thread
    held at the fork (a background build's key lock, ``jit.background``) would never be released
    in the child, where that thread does not exist (its file lock is released when the parent's
    build ends)."""
    for c in list(_instances):
        c._mutex = threading.Lock()
        c._key_locks = {}


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_free_locks_in_child)


class KernelCache:
    """A directory of compiled kernels.  Thread-safe and multi-process safe."""

    def __init__(self, root=None):
        root = default_cache_dir() if root is None else root
        self.root = Path(os.path.abspath(os.path.expanduser(str(root))))  # not resolved: no I/O
        self._memory: dict[str, CacheEntry] = {}
        self._mutex = threading.Lock()
        self._key_locks: dict[str, threading.Lock] = {}
        _instances.add(self)

    # ----------------------------------------------------------------- keys and paths
    def key_for(self, source: str, arch: str, options: tuple[str, ...]) -> str:
        """Hex sha256 of the source hash, options, arch, NVRTC version, package version and format.

        Deterministic: no paths, times or compiler output go into it (E8).
        """
        payload = {
            "format": CACHE_FORMAT,
            "source_sha256": _sha256(source.encode("utf-8")),
            "options": list(options),
            "arch": arch,
            "nvrtc": list(compiler.nvrtc_version()),
            "kernelgen": _version.__version__,
        }
        return _sha256(json.dumps(payload, sort_keys=True, separators=(",", ":")).encode())

    def _stem(self, name: str, key: str) -> Path:
        return self.root / f"{name}-{key[:16]}"

    def _lock(self, stem: Path, timeout: float | None = None) -> filelock.FileLock:
        t = LOCK_TIMEOUT if timeout is None else timeout
        return filelock.FileLock(str(stem) + ".lock", timeout=t, mode=_FILE_MODE)

    def _key_lock(self, key: str) -> threading.Lock:
        with self._mutex:
            return self._key_locks.setdefault(key, threading.Lock())

    def _derive(self, spec) -> tuple[str, tuple[str, ...], str]:
        source = render.render(spec)
        options = compiler.default_options(spec.arch)
        if getattr(spec, "variant", None) is not None:
            options += compiler.VARIANT_OPTIONS
        return source, options, self.key_for(source, spec.arch, options)

    def unsafe_reason(self) -> str | None:
        """Why the cache directory must not be loaded from (owner or mode), or None.

        None too when the directory does not exist yet (we create it ``0o700``) or cannot be
        stat'ed (the normal error paths handle that).
        """
        try:
            st = os.stat(self.root)
        except OSError:
            return None
        return _untrusted(st, "it")

    # ----------------------------------------------------------------- reading
    def _read(self, stem: Path, key: str | None) -> tuple[CacheEntry | None, dict | None, str]:
        """Load the entry at ``stem`` without locking or writing.

        Returns (entry, sidecar, reason): entry is None when missing ("missing") or bad (reason
        says why); sidecar is the parsed sidecar when it could be read.
        """
        distrust = None
        try:
            raw = _read_trusted(Path(str(stem) + ".json"), "the sidecar")
        except (FileNotFoundError, NotADirectoryError):
            return None, None, "missing"
        except _UntrustedFile as e:  # parse it anyway: verify --repair rebuilds from its spec
            distrust = str(e)
            try:
                raw = _read_regular(Path(str(stem) + ".json"), "the sidecar")
            except OSError:
                return None, None, distrust
        except OSError as e:
            if root_unsearchable(stem.parent):
                return None, None, f"{_ROOT_DENIED} ({e})"   # every entry's read fails: one warning, not one each
            return None, None, f"sidecar unreadable ({e})"
        try:
            meta = json.loads(raw)
            if not isinstance(meta, dict):
                raise ValueError("not an object")
            want_sha, want_size, meta_key = meta["cubin_sha256"], int(meta["cubin_size"]), meta["key"]
            res = meta.get("resources", {})
            if not isinstance(res, dict):
                raise TypeError("resources is not an object")
            if not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in res.values()):
                raise TypeError("resources holds a value that is not a number")
        except (ValueError, KeyError, TypeError, OverflowError, RecursionError) as e:
            # (RecursionError: a sidecar nested deeper than json's recursion limit; OverflowError: a size of 1e999)
            return None, None, f"sidecar is not valid ({type(e).__name__}: {e})"
        if distrust:
            return None, meta, distrust
        if _SIDECAR_SHA in meta and meta[_SIDECAR_SHA] != _sidecar_digest(meta):
            return None, meta, "sidecar checksum mismatch (its content changed after it was written)"
        if (key is not None and meta_key != key) or not str(meta_key).startswith(stem.name[-16:]):
            return None, meta, "sidecar key does not match the entry"
        try:
            cubin = _read_trusted(Path(str(stem) + ".cubin"), "the cubin")
        except _UntrustedFile as e:
            return None, meta, str(e)
        except FileNotFoundError as e:
            # (a removal, ``clear`` or a repair, deletes the sidecar first: gone too, it raced this read)
            if not Path(str(stem) + ".json").exists():
                return None, None, "missing"
            return None, meta, f"cubin unreadable ({e})"
        except OSError as e:
            return None, meta, f"cubin unreadable ({e})"
        if len(cubin) != want_size:
            return None, meta, f"cubin size {len(cubin)} != {want_size} recorded"
        if _sha256(cubin) != want_sha:
            return None, meta, "cubin sha256 does not match the sidecar"
        entry = CacheEntry(meta_key, meta.get("name", ""), cubin, dict(meta.get("resources", {})),
                           Path(str(stem) + ".cubin"), False)
        return entry, meta, "ok"

    def lookup(self, spec) -> CacheEntry | None:
        """The cached entry for ``spec``, or None.  Never compiles, never writes, never warns."""
        _, _, key = self._derive(spec)
        with self._mutex:
            hit = self._memory.get(key)
        if hit is not None:
            return dataclasses.replace(hit, compiled=False)
        if self.unsafe_reason():
            return None
        entry, _, _ = self._read(self._stem(spec.name, key), key)
        return entry

    # ----------------------------------------------------------------- get / build
    def get(self, spec) -> CacheEntry:
        """The compiled kernel for ``spec``: from memory, from disk, or compiled and published.

        Raises compiler.CompileError (NVRTC failure; ``compiler.VariantCompileError`` for a user
        variant's kernel: the snippets' diagnostics at their own line numbers), KernelNotCachedError (JIT disabled and entry
        missing or bad), CacheLockTimeoutError.  An unusable cache directory only warns.
        """
        try:
            return self._get(spec, allow_jit=not jit_disabled())
        except compiler.CompileError as e:
            code = getattr(spec, "variant", None)
            if code is None or isinstance(e, compiler.VariantCompileError):
                raise
            raise compiler.VariantCompileError.from_error(e, code) from None

    def _get(self, spec, allow_jit: bool) -> CacheEntry:
        source, options, key = self._derive(spec)
        with self._mutex:
            hit = self._memory.get(key)
        if hit is not None:
            return dataclasses.replace(hit, compiled=False)
        with self._key_lock(key):
            with self._mutex:
                hit = self._memory.get(key)
            if hit is not None:
                return dataclasses.replace(hit, compiled=False)
            stem = self._stem(spec.name, key)
            unsafe = self.unsafe_reason()
            if unsafe:  # never read (nor write) a directory someone else can write to
                entry, reason = None, f"cache directory not trusted: {unsafe}; fix with `chmod 700 {self.root}`"
            else:
                entry, _, reason = self._read(stem, key)  # lock-free fast path
            if entry is None:
                if not allow_jit and reason.startswith(_ROOT_DENIED):
                    raise KernelNotCachedError(
                        f"kernel {spec.name} (key {key}) cannot be read from the kernel cache at {self.root} "
                        f"({reason}) and KERNELGEN_DISABLE_JIT is set; give this user search permission on it "
                        f"(`chmod u+rwx {self.root}`), point KERNELGEN_CACHE_DIR at a readable cache, or unset "
                        f"KERNELGEN_DISABLE_JIT"
                    )
                if not allow_jit:
                    raise KernelNotCachedError(
                        f"kernel {spec.name} (key {key}) is not in the kernel cache at {self.root} "
                        f"({reason}) and KERNELGEN_DISABLE_JIT is set; pre-build it with "
                        f"`kernelgen warmup --arch {spec.arch} ...` (with --cache-dir {self.root} "
                        f"or KERNELGEN_CACHE_DIR pointing here), or unset KERNELGEN_DISABLE_JIT", spec=spec
                    )
                if unsafe:
                    _warn_once(self.root, _unsafe_advice(self.root, unsafe), stacklevel=3)  # <- _get <- get <- caller
                    entry = self._compile_in_memory(spec, source, options, key)
                else:
                    if reason != "missing" and not reason.startswith(_ROOT_DENIED):
                        warnings.warn(f"kernelgen cache entry {stem.name} is bad: {reason}; rebuilding it",
                                      KernelCacheWarning, stacklevel=3)
                    entry = self._build(spec, source, options, key, stem)
            with self._mutex:
                self._memory[key] = entry
            return entry

    def _build(self, spec, source: str, options: tuple[str, ...], key: str, stem: Path) -> CacheEntry:
        """Lock, re-check, compile, publish.  OSErrors degrade to an in-memory compile."""
        res = None
        try:
            self.root.mkdir(parents=True, exist_ok=True, mode=_DIR_MODE)
            unsafe = self.unsafe_reason()  # another user may have created it since _get looked
            if unsafe:
                _warn_once(self.root, _unsafe_advice(self.root, unsafe), stacklevel=4)  # <- _build <- _get <- get
                return self._compile_in_memory(spec, source, options, key)
            # (a lock file that is a symbolic link fails every lock: no writer makes one, so it goes)
            _drop_directories([Path(str(stem) + ".lock")])
            with self._lock(stem):
                entry, _, _ = self._read(stem, key)  # someone may have published it meanwhile
                if entry is not None:
                    return entry
                self._remove_stale_temps(stem)
                # a directory in place of the cubin or sidecar would fail the publish every time
                _drop_directories([Path(str(stem) + s) for s in (".cubin", ".json")])
                res = compiler.compile_cubin(source, spec.arch, options, spec.name)
                self._publish(stem, key, spec, options, res)
        except filelock.Timeout:  # a subclass of OSError: test it first
            raise CacheLockTimeoutError(
                f"timed out after {LOCK_TIMEOUT} s waiting for the cache lock {stem}.lock: another "
                f"live process has held it (compiling {spec.name}) for that long; it is an OS lock, "
                f"so a dead holder cannot cause this"
            ) from None
        except OSError as e:
            _warn_unwritable(self.root, e)
            if res is None:
                res = compiler.compile_cubin(source, spec.arch, options, spec.name)
            return CacheEntry(key, spec.name, res.cubin, dict(res.resources), None, True)
        return CacheEntry(key, spec.name, res.cubin, dict(res.resources), Path(str(stem) + ".cubin"), True)

    def _compile_in_memory(self, spec, source: str, options: tuple[str, ...], key: str) -> CacheEntry:
        res = compiler.compile_cubin(source, spec.arch, options, spec.name)
        return CacheEntry(key, spec.name, res.cubin, dict(res.resources), None, True)

    def _remove_stale_temps(self, stem: Path) -> None:
        """Delete this entry's temp files; call with its lock held (every writer holds it, so
        any temp file found then was left by a process that died mid-publish).  Best effort."""
        try:
            names = os.listdir(self.root)
        except OSError:
            return
        prefix = stem.name + "."
        for n in names:
            if n.startswith(prefix) and n.endswith(".tmp"):
                try:
                    os.unlink(self.root / n)
                except OSError:
                    pass

    def _publish(self, stem: Path, key: str, spec, options, res) -> None:
        meta = {
            "key": key,
            "name": spec.name,
            "kind": spec.kind,
            "arch": spec.arch,
            "spec": spec.to_json(),
            "options": list(options),
            "nvrtc_version": list(compiler.nvrtc_version()),
            "kernelgen_version": _version.__version__,
            "cache_format": CACHE_FORMAT,
            "resources": dict(res.resources),
            "cubin_sha256": _sha256(res.cubin),
            "cubin_size": len(res.cubin),
            "compile_seconds": round(res.seconds, 4),
            "created": time.time(),
        }
        meta[_SIDECAR_SHA] = _sidecar_digest(meta)
        _write_atomic(Path(str(stem) + ".cubin"), res.cubin)
        _write_atomic(Path(str(stem) + ".json"), json.dumps(meta, indent=1, sort_keys=True).encode())

    # ----------------------------------------------------------------- maintenance
    def _groups(self) -> dict[str, list[Path]]:
        """Cache files grouped by entry stem; files that are not ours (README.md...) are skipped."""
        groups: dict[str, list[Path]] = {}
        try:
            names = sorted(os.listdir(self.root))
        except (FileNotFoundError, NotADirectoryError):
            return groups
        for n in names:
            m = _STEM_RE.match(n)
            if m and _ENTRY_FILE_RE.match(n[m.end():]):
                groups.setdefault(m.group(0), []).append(self.root / n)
        return groups

    def entries(self) -> list[dict]:
        """One dict per entry (a sidecar or a cubin on disk), valid or not, sorted by name."""
        out = []
        unsafe = self.unsafe_reason()
        for stem, files in self._groups().items():
            suffixes = {p.suffix for p in files}
            if not suffixes & {".cubin", ".json"}:
                continue
            if unsafe:  # do not even open files someone else may have planted (a FIFO would hang)
                entry, meta, reason = None, None, f"cache directory not trusted: {unsafe}"
            else:
                entry, meta, reason = self._read(self.root / stem, None)
                if reason == "missing":   # a cubin without its sidecar: never committed
                    reason = "orphan: a cubin without its sidecar (cache verify --repair removes it)"
            meta = meta or {}
            res = meta.get("resources", {}) if isinstance(meta.get("resources"), dict) else {}
            mtime = _mtime(self.root / f"{stem}.json", self.root / f"{stem}.cubin")
            if mtime is None:   # removed meanwhile by another process (clear, repair): gone
                continue
            size = sum(_size(p) for p in files if p.suffix in (".cubin", ".json"))
            out.append({
                "stem": stem,
                "key": meta.get("key", stem[-16:]),
                "name": meta.get("name", _STEM_RE.match(stem).group("name")),
                "arch": meta.get("arch"),
                "kind": meta.get("kind", (meta.get("spec") or {}).get("kind")),
                "size": size,
                "valid": entry is not None,
                "reason": reason,
                "registers": res.get("registers"),
                "spill_bytes": (res.get("spill_stores") or 0) + (res.get("spill_loads") or 0) if res else None,
                "nvrtc": ".".join(str(x) for x in meta["nvrtc_version"])
                         if isinstance(meta.get("nvrtc_version"), (list, tuple)) else None,
                "mtime": mtime,
            })
        return out

    def verify(self, repair: bool = False, outcomes: dict | None = None) -> dict:
        """Check every entry's sidecar and hash.

        Returns {"ok", "bad", "repaired", "orphans_removed", "orphans", "temps"} and, where a rebuild raised (NVRTC
        rejected the spec under today's ``KERNELGEN_DEFINES``, a lock timed out), "errors": {stem:
        the error's first line} (the other entries are still checked and repaired); "bad" lists entry stems
        (``<name>-<key16>``); "orphans" the stems of cubins without a sidecar still on disk (never loaded: a
        compile that died before publishing, or one publishing now); "temps" (without ``repair``) the
        stems with temp files of a write that died or is in progress (never loaded).  With ``repair=True`` bad entries are deleted and recompiled from
        the spec in their sidecar (even with KERNELGEN_DISABLE_JIT set: repair is explicit), and
        stale temp files, cubins without a sidecar and unused lock files are removed (only for
        entries whose lock is free, so a compile in progress is left alone).  Entry files owned by
        another user or writable by group/other are bad (and repaired by replacement).  In an
        untrusted directory (see :meth:`unsafe_reason`) every entry is reported bad and nothing is
        repaired: kernelgen neither loads from nor writes into it.  ``outcomes`` (a dict, filled in
        place): each bad stem's fate, "repaired" (rebuilt from its sidecar's
        spec, possibly under a new key), "removed" (deleted: no usable spec to rebuild it from) or
        "bad" (left as it was).
        """
        report = {"ok": 0, "bad": [], "repaired": 0, "orphans_removed": 0, "orphans": [], "temps": []}
        if self.unsafe_reason():  # nothing in it would be loaded, and we do not write into it
            report["bad"] = [s for s, f in self._groups().items() if {p.suffix for p in f} & {".json", ".cubin"}]
            return report
        for stem, files in self._groups().items():
            path = self.root / stem
            if repair:
                files = _drop_directories(files)
            have = {p.suffix for p in files}
            temps = [p for p in files if p.suffix == ".tmp" and p.exists()]
            if temps and not repair:   # a write that died or is in progress: never loaded
                report["temps"].append(stem)
            if ".json" not in have:  # never committed: orphan cubin, temp files, stale lock
                if repair:
                    report["orphans_removed"] += self._remove_orphans(path, files)
                if Path(str(path) + ".cubin").exists() and not Path(str(path) + ".json").exists():
                    report["orphans"].append(stem)
                continue
            if repair and ".tmp" in have:
                report["orphans_removed"] += self._remove_orphans(path, [p for p in files if p.suffix == ".tmp"])
            entry, meta, _ = self._read(path, None)
            if entry is not None:
                report["ok"] += 1
                continue
            report["bad"].append(stem)
            fate = "bad"
            try:
                repaired = repair and self._repair(path, meta)
            except Exception as e:  # noqa: BLE001 - one entry's rebuild failing (NVRTC, a lock) stops no other
                repaired = False
                report.setdefault("errors", {})[stem] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
            if repaired:
                report["repaired"] += 1
                fate = "repaired"
            elif repair and not any(Path(str(path) + s).exists() for s in (".json", ".cubin")):
                fate = "removed"
            if outcomes is not None:
                outcomes[stem] = fate
        return report

    def _remove_orphans(self, stem: Path, files: list[Path]) -> int:
        """Delete ``files`` (listed before the lock was taken) of an entry that had no sidecar, under
        its lock (skipped while another process holds it).  If a sidecar exists by then, a publish
        completed since the listing: only its leftover temp files go, never its cubin."""
        n = 0
        try:
            with self._lock(stem, timeout=0):
                committed = Path(str(stem) + ".json").exists()
                for p in files:
                    if p.suffix != ".lock" and (p.suffix == ".tmp" or not committed) and p.exists():
                        try:
                            p.unlink()
                        except OSError:   # (removed meanwhile, or not ours to remove: left, not counted)
                            continue
                        n += 1
                lock = Path(str(stem) + ".lock")
                if not any(Path(str(stem) + s).exists() for s in (".json", ".cubin")):
                    lock.unlink(missing_ok=True)
        except filelock.Timeout:
            pass
        return n

    def _repair(self, stem: Path, meta: dict | None) -> bool:
        """Delete a bad entry (under its lock) and rebuild it from its sidecar's spec if possible."""
        with self._lock(stem):
            if self._read(stem, None)[0] is not None:  # repaired by someone else meanwhile
                return True
            for suffix in (".json", ".cubin"):
                _remove_entry_file(Path(str(stem) + suffix))
        try:
            spec = spec_from_json(meta["spec"])
        except Exception:  # noqa: BLE001 - no usable spec: the entry is only deleted
            return False
        _, _, key = self._derive(spec)
        with self._mutex:
            self._memory.pop(key, None)
            self._memory.pop(meta.get("key"), None)
        return self._get(spec, allow_jit=True).path is not None

    def clear(self) -> int:
        """Remove every entry (and temp and lock files, where no process holds the lock), each under
        its lock (an entry another process holds for ``CLEAR_LOCK_TIMEOUT`` s, compiling it, stays).

        Returns the number of entries removed.  Files in the root that are not cache files are kept.
        """
        n = 0
        for stem, files in self._groups().items():
            path = self.root / stem
            files = _drop_directories(files)
            if any(p.suffix in (".json", ".cubin") for p in files):
                try:   # under the entry's lock: a process publishing it now finishes first
                    with self._lock(path, timeout=CLEAR_LOCK_TIMEOUT):
                        for suffix in (".json", ".cubin"):
                            _remove_entry_file(Path(str(path) + suffix))
                except filelock.Timeout:   # held that long: a compile in progress; its entry stays
                    continue
                except OSError:   # (its lock or files could not be handled: the entry stays, the rest go)
                    continue
                n += 1
            self._remove_orphans(path, [p for p in files if p.suffix == ".tmp"])
        with self._mutex:
            self._memory.clear()
        return n

    def size_bytes(self) -> int:
        """Total size of the cache's own files under the root (0 when it does not exist)."""
        total = 0
        for files in self._groups().values():
            for p in files:
                try:
                    total += p.stat().st_size
                except OSError:
                    pass
        return total


_default: KernelCache | None = None
_default_lock = threading.Lock()


def get_cache() -> KernelCache:
    """The process-wide cache, created on first use at :func:`default_cache_dir`."""
    global _default
    with _default_lock:
        if _default is None:
            _default = KernelCache()
        return _default


def set_cache_dir(root) -> KernelCache:
    """Replace the process-wide cache with one rooted at ``root`` (tests, CLI ``--cache-dir``)."""
    global _default
    with _default_lock:
        _default = KernelCache(root)
        return _default
