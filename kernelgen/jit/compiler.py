"""NVRTC through CuPy: CUDA source + options -> cubin for one exact arch, plus a resource report.

NVRTC needs no GPU and no CUDA toolkit: CuPy loads it from the ``nvidia-cuda-nvrtc`` wheel.  We
always ask for a cubin (SASS) for the exact target (``sm_80``, ``sm_90a``, ...), never PTX, because
PTX made by a newer NVRTC is refused by an older driver while its cubins load.
"""
from __future__ import annotations

import os
import re
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..kernels.variant_code import code_only, is_body

#: Number of NVRTC compilations done by this process (tests and the CLI read it).
COMPILE_COUNT = 0
_count_lock = threading.Lock()


class CompileError(RuntimeError):
    """NVRTC rejected a kernel.  ``log`` is NVRTC's log, ``source_path`` the saved rendered source."""

    def __init__(self, name: str, log: str, source_path: str | None):
        self.name = name
        self.log = log
        self.source_path = source_path
        super().__init__(f"NVRTC failed to compile {name} (rendered source saved at {source_path}):\n{log}")

    def __reduce__(self):   # picklable, so that a warm-up worker's compile error reaches the caller whole
        return (type(self), (self.name, self.log, self.source_path))


#: Extra NVRTC options of user-variant kernels: a snippet body that can end without returning
#: (NVRTC's warning 940, "missing return statement") is an error, not a kernel that returns garbage.
#: No faster-compile option is among them (docs/dev/perf-log.md, "First call of a user variant:
#: where the compile time goes (CPU)"): on the Hopper variant kernel, the options that keep its
#: SASS (``-lineinfo`` off, ``-Xptxas -O2``, ``--minimal``, ``--split-compile``) save at most 1.7 %
#: of NVRTC's work, and ``--Ofast-compile=mid|max`` (-54 / -65 %) give up the unrolled wgmma loop
#: and ``setmaxnreg``.  They also leave NVRTC 13.0 changed: after one ``--Ofast-compile=max``
#: compile, later compiles in the process, with unchanged options and cache keys, give other SASS.
VARIANT_OPTIONS = ("--diag-error=940",)

_SNIPPET_DIAG = re.compile(r"^(score_mod|mask_mod|kv_range)\((\d+)\)")
_ANY_DIAG = re.compile(r"^\S+\(\d+\): ")
_IS_ERROR = re.compile(r"\): (?:catastrophic )?error\b")
_SUMMARY = re.compile(r"^\d+ (?:errors?|catastrophic errors?) detected")
#: An error in kernelgen's code reached from a snippet (a template the snippet instantiated, e.g. a
#: mask_mod's return type): NVRTC names the snippet's line in the block after the error.
_FROM_SNIPPET = re.compile(r"\bat line (\d+) of (score_mod|mask_mod|kv_range)\b")
_CU_DIAG = re.compile(r"^(\S+)\((\d+)\): ((?:catastrophic )?error\b.*)$")
#: Most snippet diagnostics a VariantCompileError's message shows (errors first).
MAX_SHOWN_DIAGNOSTICS = 12
#: A snippet longer than this is shown by the lines near its diagnostics only.
MAX_SHOWN_SNIPPET_LINES = 60


def _snippet_of(lines: list, i: int, source_path: str | None, code) -> tuple | None:
    """(``what(n)``, a hint or "") for NVRTC's error at ``lines[i]`` in kernelgen's own code when a
    snippet caused it: an instantiation "at line n of what" in the error's block, or a ';' NVRTC
    expected at the '}' kernelgen puts after a body snippet.  For the latter the saved source tells
    which snippet ends there: the '}' follows the directive that restores the file's numbering (``#line
    N`` on line N - 1, one a snippet, in the template's order score_mod, mask_mod, kv_range), and the
    snippet's last line holding code (not a comment) is where the ';' is missing.  None otherwise."""
    block = []
    for f in lines[i + 1:i + 8]:
        if _ANY_DIAG.match(f) or _SUMMARY.match(f):
            break
        block.append(f)
    for f in block:
        m = _FROM_SNIPPET.search(f)
        if m:
            return f"{m.group(2)}({m.group(1)})", ""
    m = _CU_DIAG.match(lines[i])
    if 'expected a ";"' not in m.group(3) or not block or block[0].strip() != "}" or not source_path or code is None:
        return None
    try:   # (bytes: NVRTC counts lines at '\n' only, text mode would also split at a lone '\r')
        src = Path(source_path).read_bytes().decode("utf-8", "replace").split("\n")
    except OSError:
        return None
    at = int(m.group(2)) - 1                  # the '}' (0-based)
    restores = [j for j, t in enumerate(src) if t.startswith(f"#line {j + 2} ")]
    present = [w for w in ("score_mod", "mask_mod", "kv_range") if getattr(code, w, None) is not None]
    if not (0 < at < len(src)) or src[at].strip() != "}" or at - 1 not in restores or len(restores) != len(present):
        return None
    what = present[restores.index(at - 1)]
    filled = [n for n, t in enumerate(code_only(getattr(code, what)).split("\n"), 1) if t.strip()]
    return f"{what}({filled[-1] if filled else 1})", " (at the snippet's end: a ';' missing after its last statement?)"


#: The names each snippet sees besides the variant's tensors (templates/common/user_mod.cuh): the
#: element-wise snippets one (query, key) pair, ``kv_range`` a block of query rows and a KV head.
SNIPPET_SCOPES = {
    "score_mod": ("score", "batch", "head", "kv_head", "q_idx", "kv_idx", "q_len", "kv_len", "q_offset"),
    "mask_mod": ("batch", "head", "kv_head", "q_idx", "kv_idx", "q_len", "kv_len", "q_offset"),
    "kv_range": ("kv_lo", "kv_hi", "batch", "kv_head", "q_lo", "q_hi", "q_len", "kv_len", "q_offset"),
}
_UNDEFINED = re.compile(r'^(score_mod|mask_mod|kv_range)\(\d+\): error: identifier "(\w+)" is undefined')


def _scope_hints(lines) -> list:
    """A line under the diagnostics for each snippet that names another snippet's variable
    (``head`` in a kv_range, ``q_lo`` in a mask_mod): the names it does see."""
    out, seen = [], set()
    every = {n for names in SNIPPET_SCOPES.values() for n in names}
    for line in lines:
        m = _UNDEFINED.match(line)
        if m and m.group(2) in every and m.group(2) not in SNIPPET_SCOPES[m.group(1)] and m.group(1) not in seen:
            seen.add(m.group(1))
            where = ("runs once per block of query rows [q_lo, q_hi) and KV head" if m.group(1) == "kv_range"
                     else "runs once per (query, key) pair")
            out.append(f"  ({m.group(1)} sees {', '.join(SNIPPET_SCOPES[m.group(1)])} and the variant's tensors: "
                       f"it {where}; {m.group(2)} is another snippet's)")
    return out


def _missing_return_hint(code, lines) -> str:
    """The hint under NVRTC's "missing return statement" (which names the snippet's function,
    ``kg_user_score_mod`` / ``kg_user_mask_mod``): a body snippet that returns on no path at all is
    most often an expression given a ';' (``score * 2.f;`` is a statement, so the snippet is compiled
    as a body), which the hint names."""
    for line in lines:
        m = re.search(r'missing return statement.*"kg_user_(score_mod|mask_mod)"', line)
        if m:
            src = getattr(code, m.group(1), None)
            bare = code_only(src) if src is not None else ""
            if src is not None and is_body(bare) and not re.search(r"\breturn\b", bare):
                return (f"  ({m.group(1)} has no 'return': an expression takes no ';' at its end (write it without "
                        f"one), a body returns its value on every path ('return ...;'))")
            if src is not None:
                return f"  ({m.group(1)} is written as a function body: it must return a value on every path)"
    return "  (a snippet written as a function body must return a value on every path)"


class VariantCompileError(CompileError, ValueError):
    """NVRTC rejected a kernel of a user variant (``kernelgen.Variant``): the message shows NVRTC's
    diagnostics at the snippets' own line numbers (``score_mod(2): error: ...``) and the snippets
    with their line numbers; ``log`` is the whole NVRTC log, ``source_path`` the saved rendered
    source, ``code`` the ``VariantCode``.  A ValueError too: the snippet is an argument."""

    def __init__(self, name: str, log: str, source_path: str | None, code, message: str | None = None):
        self.code = code
        if message is not None:   # (unpickled: the message as it was made, whatever became of the saved source)
            RuntimeError.__init__(self, message)
            self.name, self.log, self.source_path = name, log, source_path
            return
        lines = log.split("\n")   # (NVRTC counts lines at '\n' only, not at '\f', a lone '\r', U+2028, ...)
        errors, warnings = [], []
        for i, line in enumerate(lines):
            if _SNIPPET_DIAG.match(line):
                # NVRTC follows a diagnostic with the offending line and a caret
                entry = ["  " + line] + ["  " + f for f in lines[i + 1:i + 3]
                                         if f.strip() and not _ANY_DIAG.match(f) and not _SUMMARY.match(f)]
                (errors if _IS_ERROR.search(line) else warnings).append(entry)
            elif _CU_DIAG.match(line):
                try:
                    at = _snippet_of(lines, i, source_path, code)
                except Exception:  # noqa: BLE001 - a hint's failure must not hide NVRTC's error
                    at = None
                if at is not None:
                    errors.append([f"  {at[0]}: {_CU_DIAG.match(line).group(3)}{at[1]}"])
        diags = (errors + warnings)[:MAX_SHOWN_DIAGNOSTICS]
        picked = [x for entry in diags for x in entry] + _scope_hints(lines)
        left = len(errors) + len(warnings) - len(diags)
        if left:
            picked.append(f"  ... and {left} more diagnostic(s) in the snippets (the .log has them all)")
        if not errors:   # the failure shows outside the snippets (e.g. a type they produce), or the
            # snippets only drew warnings: the errors too
            outside = [x for x in lines if _IS_ERROR.search(x) and not _SUMMARY.match(x)]
            picked += ["  " + x for x in outside[:8]] or ["  " + x for x in lines[:8]]
            if any("missing return statement" in x for x in outside):
                picked.append(_missing_return_hint(code, outside))
        shown = []
        for what in ("score_mod", "mask_mod", "kv_range"):
            src = getattr(code, what, None)
            if src is not None:
                shown.append(f"{what}:")
                src_lines = src.rstrip().split("\n")
                if what != "kv_range" and not is_body(code_only(src)):
                    src_lines.append(");   <- kernelgen's: an expression is compiled as 'return (' expression ');'")
                keep = range(1, len(src_lines) + 1)
                if len(src_lines) > MAX_SHOWN_SNIPPET_LINES:   # a long snippet: the lines near the diagnostics
                    near = {int(m.group(2)) for entry in diags for m in [_SNIPPET_DIAG.match(entry[0].strip())]
                            if m and m.group(1) == what}
                    keep = sorted({k for c in near for k in range(c - 2, c + 3) if 1 <= k <= len(src_lines)})
                last = 0
                for n in keep:
                    if n != last + 1:
                        shown.append("      ...")
                    shown.append(f"  {n:3d} | {src_lines[n - 1]}")
                    last = n
                if last != len(src_lines):
                    shown.append(f"      ... ({len(src_lines)} lines)")
        RuntimeError.__init__(
            self, f"NVRTC rejected the user variant's code in {name}:\n" + "\n".join(picked) +
            "\nthe snippets (line numbers as NVRTC counts them):\n" + "\n".join(shown) +
            "\n" + _saved_note(source_path))
        self.name, self.log, self.source_path = name, log, source_path

    def __reduce__(self):  # (warmup's worker processes send it back pickled)
        return (type(self), (self.name, self.log, self.source_path, self.code, str(self)))

    @classmethod
    def from_error(cls, err: CompileError, code) -> "VariantCompileError":
        return cls(err.name, err.log, err.source_path, code)


@dataclass(frozen=True)
class CompileResult:
    cubin: bytes
    log: str
    resources: dict = field(default_factory=dict)
    seconds: float = 0.0


_lib = None


def _nvrtc_ctypes():
    """The NVRTC shared library CuPy uses, opened with ctypes (same handle, same instance)."""
    global _lib
    if _lib is None:
        import ctypes

        from cuda.pathfinder import load_nvidia_dynamic_lib

        _lib = ctypes.CDLL(load_nvidia_dynamic_lib("nvrtc").abs_path)
    return _lib


def _get_cubin(prog: int) -> bytes:
    """The whole cubin of a compiled program.

    CuPy 14.2's ``nvrtc.getCUBIN`` returns one byte short of nvrtcGetCUBINSize (the ELF's last
    program-header byte is cut off), so we read it through NVRTC's C API on CuPy's program handle.
    If that library cannot be opened we fall back to CuPy and restore the size the ELF header
    states (the missing tail byte is the zero high byte of the last header's p_align).
    """
    import ctypes

    try:
        lib = _nvrtc_ctypes()
        size = ctypes.c_size_t()
        if lib.nvrtcGetCUBINSize(ctypes.c_void_p(prog), ctypes.byref(size)) == 0 and size.value:
            buf = ctypes.create_string_buffer(size.value)
            if lib.nvrtcGetCUBIN(ctypes.c_void_p(prog), buf) == 0:
                return buf.raw
    except Exception:  # noqa: BLE001 - any failure here falls back to CuPy's getter
        pass
    from cupy.cuda import nvrtc

    data = bytes(nvrtc.getCUBIN(prog))
    return data + b"\0" * max(0, elf_size(data) - len(data))


def elf_size(data: bytes) -> int:
    """Size an ELF64 image claims (end of its section or program header table, whichever is last)."""
    import struct

    if len(data) < 64 or data[:4] != b"\x7fELF":
        return len(data)
    phoff, shoff = struct.unpack_from("<QQ", data, 0x20)
    _, phentsize, phnum, shentsize, shnum, _ = struct.unpack_from("<HHHHHH", data, 0x34)
    return max(phoff + phnum * phentsize, shoff + shnum * shentsize)


_init_lock = threading.Lock()
_nvrtc_ready = False


def _ensure_nvrtc() -> None:
    """Load NVRTC through CuPy once, under a lock.

    A cold ``nvrtc.getVersion()`` in one thread racing ``compileProgram`` in another makes NVRTC
    fail with "failed to open libnvrtc-builtins.so"; once loaded, concurrent calls are fine.
    """
    global _nvrtc_ready
    if _nvrtc_ready:
        return
    with _init_lock:
        if not _nvrtc_ready:
            from cupy.cuda import nvrtc

            nvrtc.getVersion()
            _nvrtc_ready = True


def nvrtc_version() -> tuple[int, int]:
    """(major, minor) of the NVRTC library CuPy loads.  Part of every cache key."""
    _ensure_nvrtc()
    from cupy.cuda import nvrtc

    return tuple(int(x) for x in nvrtc.getVersion())


def arch_flag(arch: str) -> str:
    if not re.fullmatch(r"sm_\d+a?", arch):
        raise ValueError(f"arch must look like 'sm_80' or 'sm_90a', got {arch!r}")
    return f"--gpu-architecture={arch}"


#: Environment variable of extra preprocessor defines (diagnostic builds): comma-separated NAME or
#: NAME=VALUE, e.g. ``KG_HANG_CHECK`` (the Hopper kernel's mbarrier waits then report a wait that
#: never ends and trap).  Part of the options, so of the cache key.
DEFINES_ENV = "KERNELGEN_DEFINES"


def default_options(arch: str) -> tuple[str, ...]:
    """Options every kernel is compiled with (they are part of the cache key), plus one ``-D``
    per entry of ``KERNELGEN_DEFINES`` (read on every call)."""
    base = (arch_flag(arch), "--std=c++17", "-default-device", "--use_fast_math", "-lineinfo", "-Xptxas=-v")
    extra = os.environ.get(DEFINES_ENV, "")
    defines = tuple(f"-D{d.strip()}" for d in extra.split(",") if d.strip())
    for d in defines:
        if not re.fullmatch(r"-D[A-Za-z_]\w*(=[\w.+-]*)?", d):
            raise ValueError(f"{DEFINES_ENV} entries must be NAME or NAME=VALUE, got {d[2:]!r}")
    return base + defines


_RES = {
    "registers": re.compile(r"Used (\d+) registers"),
    "stack_frame": re.compile(r"(\d+) bytes stack frame"),
    "spill_stores": re.compile(r"(\d+) bytes spill stores"),
    "spill_loads": re.compile(r"(\d+) bytes spill loads"),
    "shared_static": re.compile(r"(\d+) bytes smem"),
}


def parse_resources(log: str) -> dict:
    """Pull the ptxas report (registers, stack frame, spill bytes, static smem) out of an NVRTC log.

    With several kernels in one program the largest value of each field is kept.  A field the
    log does not mention is 0 (ptxas leaves out a zero static smem), except ``registers``: a log
    without ptxas's "Used N registers" line (no report at all) gives None, "unknown", so no check
    takes a missing report for a kernel that uses no registers (``runtime.check_register_pool``
    skips it; ``kernelgen cache list`` prints "?").
    """
    res = {}
    for key, rx in _RES.items():
        vals = [int(m) for m in rx.findall(log)]
        res[key] = max(vals) if vals else (None if key == "registers" else 0)
    return res


#: Where a rejected kernel's rendered source is saved (None: ``kernelgen-failed-<uid>`` in the temp
#: dir; the test suite points it at its own temporary folder).
FAILED_DIR: Path | None = None
#: Rejected sources kept in that folder (the oldest beyond this are removed when one is saved).
FAILED_KEEP = 64


def _private_dir(d: Path) -> bool:
    """Whether ``d`` (made 0700 when missing) is a real directory of this user that no other user can
    write: the temp dir is shared, so a folder another user made there, or a link they planted,
    must not receive the sources (a review's find: a planted link was followed and its target
    overwritten)."""
    try:
        d.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = os.lstat(d)
    except OSError:
        return False
    import stat

    owner_ok = not hasattr(os, "geteuid") or st.st_uid == os.geteuid()
    return stat.S_ISDIR(st.st_mode) and owner_ok and not st.st_mode & 0o022


def _saved_note(source_path: str | None) -> str:
    """Where the full NVRTC log and the rendered source are, as far as they were saved."""
    log = log_path_of(source_path)
    if not source_path:
        return "(the full NVRTC log is the exception's .log; the rendered source could not be saved)"
    where = f"saved at {log} and is" if log and os.path.isfile(log) else "not saved; it is"
    return f"(the full NVRTC log is {where} the exception's .log; the rendered source is saved at {source_path})"


def log_path_of(source_path: str | None) -> str | None:
    """Where ``_save_failed_source`` put the NVRTC log beside a saved source (``<source>.log`` for
    ``<source>.cu``), or None."""
    return None if not source_path else str(source_path)[:-3] + ".log"


def _save_failed_source(name: str, source: str, log: str = "") -> str | None:
    """Save a rejected kernel's source and NVRTC log for the user to read (``CompileError.source_path``;
    the log at ``log_path_of`` it, for a command-line user who cannot read the exception): new files
    (created exclusively, mode 0600, never through a link) in a private folder; None where none can
    be made.  Keeps the newest ``FAILED_KEEP`` sources (and their logs) there."""
    uid = os.geteuid() if hasattr(os, "geteuid") else "user"
    d = FAILED_DIR if FAILED_DIR is not None else Path(tempfile.gettempdir()) / f"kernelgen-failed-{uid}"
    if not _private_dir(d):
        return None
    try:
        fd, path = tempfile.mkstemp(prefix=f"{name}.{os.getpid()}.", suffix=".cu", dir=d)   # O_EXCL, 0600
        with os.fdopen(fd, "w", encoding="utf-8", errors="backslashreplace") as f:
            f.write(source)
    except OSError:
        return None
    try:   # (O_EXCL | O_NOFOLLOW: never through a link planted at the name)
        lfd = os.open(log_path_of(path), os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
        with os.fdopen(lfd, "w", encoding="utf-8", errors="backslashreplace") as f:
            f.write(log)
    except OSError:
        pass
    try:
        old = sorted(d.glob("*.cu"), key=lambda p: p.stat().st_mtime)[:-FAILED_KEEP]
        for p in old:
            p.unlink(missing_ok=True)
            Path(log_path_of(str(p))).unlink(missing_ok=True)
    except OSError:
        pass
    return path


def compile_cubin(source: str, arch: str, options: tuple[str, ...], name: str = "kernel") -> CompileResult:
    """Compile ``source`` to a cubin for ``arch``.

    Raises CompileError (with the NVRTC log and the path of the saved source) on failure.
    """
    global COMPILE_COUNT
    _ensure_nvrtc()
    from cupy.cuda import nvrtc

    t0 = time.perf_counter()
    prog = nvrtc.createProgram(source, f"{name}.cu", [], [])
    try:
        try:
            nvrtc.compileProgram(prog, list(options))
        except nvrtc.NVRTCError:
            log = nvrtc.getProgramLog(prog)
            raise CompileError(name, log, _save_failed_source(name, source, log)) from None
        log = nvrtc.getProgramLog(prog)
        cubin = _get_cubin(prog)
    finally:
        nvrtc.destroyProgram(prog)
    with _count_lock:
        COMPILE_COUNT += 1
    if not cubin:
        log += "\n(no cubin produced: is the arch a real sm_XX target?)"
        raise CompileError(name, log, _save_failed_source(name, source, log))
    return CompileResult(cubin=bytes(cubin), log=log, resources=parse_resources(log), seconds=time.perf_counter() - t0)
