import hashlib
import os
import pickle
import tempfile
from pathlib import Path

import pytest

if os.environ.get("PYTEST_XDIST_WORKER"):
    # One torch (OpenMP) thread per pytest-xdist worker: the workers already use every CPU, and
    # OpenMP threads spin while they wait, which only costs CPU time on a busy machine.  Set before
    # torch is imported; inherited by the child processes tests start.
    os.environ.setdefault("OMP_NUM_THREADS", "1")


try:  # no wall-clock limits in property tests either: Hypothesis's per-example deadline (200 ms by
    # default) and its too-slow data generation check fail on a busy machine, not on a bug
    from hypothesis import HealthCheck
    from hypothesis import settings as _hypothesis_settings

    _hypothesis_settings.register_profile("kernelgen", deadline=None, suppress_health_check=[HealthCheck.too_slow])
    _hypothesis_settings.load_profile("kernelgen")
except ImportError:
    pass


def _has_gpu() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:  # noqa: BLE001
        return False


HAS_GPU = _has_gpu()


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist
def pytest_xdist_auto_num_workers(config):
    """``-n auto`` (pyproject.toml's addopts): one worker per CPU this process may run on, but no
    workers (tests in this process, as before) where a GPU is present, where the GPU tests share one
    device.  ``-n N`` on the command line overrides both: ``-n 6`` on an H100 (80 GB) ran every GPU test
    green in about 2 minutes instead of about 15, the workers compiling side by side
    (docs/dev/benchmarks/s68/tests.sh; perf log "Sixty-eighth session")."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None  # xdist's own handling
    if HAS_GPU:
        return 0
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def pytest_addoption(parser, pluginmanager):
    if not pluginmanager.has_plugin("xdist"):
        # pyproject.toml's addopts say "-n auto --dist worksteal"; without pytest-xdist (not installed,
        # or -p no:xdist) they are accepted and ignored, and the tests run in this process
        stand_in = parser.getgroup("xdist", "pytest-xdist not loaded: these are ignored")
        stand_in._addoption("-n", "--numprocesses", dest="numprocesses", default=None, help="(needs pytest-xdist)")
        stand_in.addoption("--dist", dest="dist", default="no", help="(needs pytest-xdist)")
    group = parser.getgroup("kernelgen")
    group.addoption("--full-matrix", action="store_true",
                    help="run every case of the sampled compile matrices (tests/sampling.py; "
                         "same as KERNELGEN_FULL_MATRIX=1)")
    group.addoption("--no-nvrtc-memo", action="store_true",
                    help="let every compile_cubin call in this process run NVRTC (no session-wide memo)")


def pytest_configure(config):
    if config.getoption("full_matrix"):
        os.environ["KERNELGEN_FULL_MATRIX"] = "1"  # read by tests/sampling.py at collection, in every worker


def pytest_collection_modifyitems(config, items):
    import sampling

    if not sampling.full_matrix():
        keep, out = [], []
        for item in items:
            (out if item.get_closest_marker("full_matrix") else keep).append(item)
        if out:
            config.hook.pytest_deselected(items=out)
            items[:] = keep
    if HAS_GPU:
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def session_dir(tmp_path_factory) -> Path:
    """A directory of this test session, the same for all its xdist workers (each worker's
    basetemp is ``<session>/popen-gwN``); pytest removes it with the session's other old ones."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@pytest.fixture(scope="session", autouse=True)
def _nvrtc_memo(request, tmp_path_factory):
    """One session-wide compile cache below kernelgen's: ``compiler.compile_cubin`` of a
    (source, arch, options) this session compiled before, in any xdist worker, returns that
    compile's result (cubin, log, resources) instead of running NVRTC again.

    Many tests compile the same kernel: the kernel cache's tests build the same few kernels into
    fresh directories again and again, the CLI's warmups and E9 build schedulers and attention
    variants the compile matrices build too, the serving variants share combines.  NVRTC
    is deterministic for a given input (test_e7_sixteen_processes_one_key_twenty_rounds checks
    it), so each kernel is compiled once a session and the rest is replay.  The layers above see
    the same calls: the kernel cache still calls ``compile_cubin`` (and ``COMPILE_COUNT`` still
    counts every call), so the cache's tests still test when and how often it compiles.  Failed
    compiles are not remembered.  Child processes the tests start compile for real.  Off with
    ``--no-nvrtc-memo`` (or KERNELGEN_TEST_NO_NVRTC_MEMO=1).
    """
    if request.config.getoption("no_nvrtc_memo") or os.environ.get("KERNELGEN_TEST_NO_NVRTC_MEMO"):
        yield
        return
    import filelock

    from kernelgen.jit import compiler

    real = compiler.compile_cubin
    root = session_dir(tmp_path_factory) / "nvrtc-memo"
    root.mkdir(parents=True, exist_ok=True)

    def compile_cubin(source, arch, options, name="kernel"):
        h = hashlib.sha256(repr((compiler.nvrtc_version(), source, arch, tuple(options))).encode()).hexdigest()
        path = root / f"{h}.pickle"

        def replay():
            try:
                res = pickle.loads(path.read_bytes())
            except (OSError, EOFError, pickle.UnpicklingError):
                return None
            with compiler._count_lock:
                compiler.COMPILE_COUNT += 1
            return res

        res = replay()
        if res is not None:
            return res
        with filelock.FileLock(str(root / f"{h}.lock")):  # another worker compiling it: wait for it
            res = replay()
            if res is None:
                res = real(source, arch, options, name)
                fd, tmp = tempfile.mkstemp(dir=root, suffix=".tmp")
                with os.fdopen(fd, "wb") as f:
                    pickle.dump(res, f)
                os.replace(tmp, path)
        return res

    compile_cubin.__wrapped__ = real
    compile_cubin.__doc__ = real.__doc__
    compiler.compile_cubin = compile_cubin
    yield
    compiler.compile_cubin = real


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory, monkeypatch):
    """CPU tests never touch the user's cache: each session (each xdist worker) gets a temporary
    cache dir.

    GPU runs (tools/gpu_check.sh) set KERNELGEN_TEST_CACHE_DIR to share a pre-warmed cache.
    """
    root = os.environ.get("KERNELGEN_TEST_CACHE_DIR") or str(tmp_path_factory.getbasetemp() / "kernel-cache")
    monkeypatch.setenv("KERNELGEN_CACHE_DIR", root)
    try:
        from kernelgen.jit import cache, compiler

        cache.set_cache_dir(root)
        # the sources of the kernels tests make NVRTC reject: in the session's temporary folder (pytest
        # keeps the last three), not piling up in the shared temp dir's kernelgen-failed
        monkeypatch.setattr(compiler, "FAILED_DIR", tmp_path_factory.getbasetemp() / "kernelgen-failed")
    except ImportError:
        pass
    yield


#: Variables that change what kernelgen chooses, compiles or checks (docs/environment.md): a CPU
#: test starts without them, whatever the developer's shell has set (a test that needs one sets it).
#: GPU tests keep them: a tuning run sets e.g. KERNELGEN_SM90_OPTS for the GPU tests on purpose.
CHOICE_ENV = ("KERNELGEN_ARCH", "KERNELGEN_SM90_OPTS", "KERNELGEN_SM90_SHORT_ROWS", "KERNELGEN_MIXED_SHORT_CTAS",
              "KERNELGEN_CHECK_INPUTS", "KERNELGEN_GRAPH_LAUNCH", "KERNELGEN_DEFINES", "KERNELGEN_DISABLE_JIT",
              "KERNELGEN_ALLOW_UNTESTED_ARCH", "KERNELGEN_TIERED_COMPILE", "KERNELGEN_SMEM_CARVEOUT")


@pytest.fixture(autouse=True)
def _no_choice_env(request, monkeypatch):
    if request.node.get_closest_marker("gpu") is None:
        for name in CHOICE_ENV:
            monkeypatch.delenv(name, raising=False)
    yield


@pytest.fixture
def fake_cuda(monkeypatch):
    """kernelgen's public calls on CPU tensors with the CUDA pieces stubbed; returns the launch
    recorder (tests/fake_cuda.py)."""
    import fake_cuda

    return fake_cuda.install(monkeypatch)


@pytest.fixture(autouse=True)
def _background_builds(monkeypatch):
    """Each test starts with no background builds (kernelgen.jit.background: a new user variant's
    Hopper kernels built off the caller's thread) and ends once the builds it started are done, so
    none compiles into the next test's cache or changes its compile counts."""
    try:
        from kernelgen.jit import background
    except ImportError:
        yield
        return
    monkeypatch.setattr(background, "_futures", {})
    monkeypatch.setattr(background, "_unreported", [])
    yield
    background.wait_for_compiles(timeout=600)
