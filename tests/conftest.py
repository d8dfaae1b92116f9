import os

import pytest


def _has_gpu() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:  # noqa: BLE001
        return False


HAS_GPU = _has_gpu()


def pytest_collection_modifyitems(config, items):
    if HAS_GPU:
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory, monkeypatch):
    """CPU tests never touch the user's cache: each session gets a temporary cache dir.

    GPU runs (tools/gpu_check.sh) set KERNELGEN_TEST_CACHE_DIR to share a pre-warmed cache.
    """
    root = os.environ.get("KERNELGEN_TEST_CACHE_DIR") or str(tmp_path_factory.getbasetemp() / "kernel-cache")
    monkeypatch.setenv("KERNELGEN_CACHE_DIR", root)
    try:
        from kernelgen.jit import cache

        cache.set_cache_dir(root)
    except ImportError:
        pass
    yield


@pytest.fixture
def fake_cuda(monkeypatch):
    """kernelgen's public calls on CPU tensors with the CUDA pieces stubbed; returns the launch
    recorder (tests/fake_cuda.py)."""
    import fake_cuda

    return fake_cuda.install(monkeypatch)
