"""Loaded kernels per device, and launching them on a raw CUDA stream.

A kernel is loaded once per (device, spec) from the cubin the cache hands back (CuPy's
``Module.load`` -> cuModuleLoadData in the device's primary context, the one PyTorch uses), and
launched with ``cuLaunchKernel`` (through ctypes, ``launch.py``) on the caller's stream.  Every
kernel takes one parameter struct by value; the launcher packs it with the same field list the
template was rendered from (``params.py``).  Nothing here synchronises the host or allocates device memory.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field

from ..launch import launch
from ..kernels.params import ATTENTION_PARAMS, COMBINE_PARAMS, FUSED_TMA_PARAMS, SCHEDULER_PARAMS, TMA_ATTENTION_PARAMS, ParamStruct

_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8
#: The scheduler keeps up to four 4-byte values per request slot in dynamic shared memory (two
#: sort-key buffers and the plans staged by request), metadata.MAX_CAPACITY slots at most.
_SCHEDULER_MAX_SMEM = 4 * 4 * 8192


@dataclass
class Kernel:
    """One loaded kernel on one device."""

    spec: object
    device: int
    func_ptr: int
    num_threads: int
    smem_bytes: int
    #: CTAs of a persistent launch: SMs x resident CTAs per SM (occupancy calculator).
    persistent_grid: int
    params: ParamStruct
    module: object = field(repr=False, default=None)  # keeps the CUmodule alive
    resources: dict = field(default_factory=dict)

    def launch(self, grid: int, stream: int, packed: bytes, smem: int | None = None, threads: int | None = None) -> None:
        """Launch with ``grid`` CTAs on the raw CUstream handle ``stream`` (0 = legacy default).

        ``packed`` is the parameter struct from ``self.params.pack``; ``smem`` and ``threads``
        override the kernel's dynamic shared memory (bytes) and CTA size.  Raises
        ``launch.LaunchError`` (naming the kernel) if the driver rejects the launch.  The hot
        paths use ``prepare`` instead.
        """
        launch.launch_packed(self.spec.name, self.func_ptr, grid, self.num_threads if threads is None else threads,
                             self.smem_bytes if smem is None else smem, stream, packed)

    def prepare(self, grid: int, static: dict, smem: int | None = None,
                threads: int | None = None) -> launch.PreparedLaunch:
        """A launch of this kernel with ``grid`` CTAs and the non-pointer parameters ``static``
        fixed (``smem``/``threads`` as in ``launch``); see ``launch.PreparedLaunch``."""
        return launch.PreparedLaunch(self.spec.name, self.func_ptr, grid,
                                     self.num_threads if threads is None else threads,
                                     self.smem_bytes if smem is None else smem, self.params, static)


_loaded: dict = {}
_lock = threading.Lock()
_device_props: dict = {}


def device_properties(device: int) -> dict:
    """Cached CUDA device properties: name, cc (major, minor), num_sms, l2_bytes, smem_optin."""
    p = _device_props.get(device)
    if p is None:
        from cupy.cuda import runtime

        raw = runtime.getDeviceProperties(device)
        name = raw["name"]
        p = {
            "name": name.decode() if isinstance(name, bytes) else str(name),
            "cc": (int(raw["major"]), int(raw["minor"])),
            "num_sms": int(raw["multiProcessorCount"]),
            "l2_bytes": int(raw["l2CacheSize"]),
            "smem_optin": int(raw.get("sharedMemPerBlockOptin", 0)),
        }
        _device_props[device] = p
    return p


def get_kernel(spec, device: int) -> Kernel:
    """The kernel for ``spec`` loaded on ``device`` (compiling or loading from the disk cache once)."""
    k = _loaded.get((device, spec))
    if k is not None:
        return k
    with _lock:
        k = _loaded.get((device, spec))
        if k is None:
            k = _load(spec, device)
            _loaded[(device, spec)] = k
    return k


def register_budget(spec) -> tuple | None:
    """(producer, consumer) registers a thread that a Hopper kernel's warpgroups ask for with
    ``setmaxnreg`` (one producer warpgroup of 128 threads, the rest consumers), or None for a
    kernel without register reallocation."""
    if spec.kind == "fused" and spec.hopper:
        return spec.hopper_regs()
    if spec.kind == "attention" and spec.mainloop == "sm90a":
        r = spec._sm90_regs()
        return r["producer_regs"], r["consumer_regs"]
    return None


def check_register_pool(spec, resources: dict) -> None:
    """Raise RuntimeError when a Hopper kernel's registers at launch (ptxas's count x threads)
    cannot cover what its warpgroups ask for after ``setmaxnreg`` (128 x producer + the other
    threads x consumer): ``setmaxnreg.inc`` would then wait for registers forever.  ptxas gives
    these kernels 168 a thread (``__launch_bounds__(384, 1)``); the check guards against a
    compiler that gives fewer."""
    budget = register_budget(spec)
    regs = resources.get("registers")
    if budget is None or regs is None:
        return
    producer, consumer = budget
    need = 128 * producer + (spec.num_threads - 128) * consumer
    if int(regs) * spec.num_threads < need:
        raise RuntimeError(f"{spec.name}: {regs} registers a thread x {spec.num_threads} threads cannot cover "
                           f"setmaxnreg's {producer}/{consumer} ({need} registers); the consumers would wait forever")


def _load(spec, device: int) -> Kernel:
    import cupy
    from cupy.cuda import driver, function

    from .cache import get_cache

    entry = get_cache().get(spec)
    check_register_pool(spec, entry.resources)
    if spec.kind == "attention":
        threads, smem = spec.num_threads, spec.smem_bytes()
        params = TMA_ATTENTION_PARAMS if spec.mainloop == "sm90a" else ATTENTION_PARAMS
    elif spec.kind == "scheduler":
        # dynamic smem is set per launch (api.scheduler_launch_shape), up to the opt-in below
        threads, smem, params = spec.num_threads, 0, SCHEDULER_PARAMS
    elif spec.kind == "fused":  # two attention variants, one AttnParams each (Hopper: after the maps)
        threads, smem = spec.num_threads, spec.smem_bytes()
        params = FUSED_TMA_PARAMS if spec.hopper else ATTENTION_PARAMS
    elif spec.kind == "combine":
        threads, smem, params = spec.num_threads, 0, COMBINE_PARAMS
    else:
        raise ValueError(f"unknown kernel kind {spec.kind!r}")
    with cupy.cuda.Device(device):
        module = function.Module()
        module.load(entry.cubin)
        fn = module.get_function(spec.entry)
        opt_in = smem
        if spec.kind == "scheduler":  # what the device allows next to the kernel's static shared memory
            limit = device_properties(device)["smem_optin"] or 48 * 1024
            opt_in = min(_SCHEDULER_MAX_SMEM, limit - int(entry.resources.get("shared_static") or 0))
        if opt_in > 48 * 1024:
            driver.funcSetAttribute(fn.ptr, _CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, opt_in)
        per_sm = driver.occupancyMaxActiveBlocksPerMultiprocessor(fn.ptr, threads, smem)
        if per_sm < 1:
            raise RuntimeError(f"{spec.name} cannot run on device {device}: occupancy 0 with {smem} B of shared memory")
        grid = per_sm * device_properties(device)["num_sms"]
    if spec.kind == "scheduler":
        smem = opt_in  # the most dynamic shared memory a launch may ask for (set per launch)
    return Kernel(spec=spec, device=device, func_ptr=fn.ptr, num_threads=threads, smem_bytes=smem,
                  persistent_grid=grid, params=params, module=module, resources=dict(entry.resources))


def loaded_kernels() -> list:
    """Kernels loaded in this process (for ``kernelgen doctor`` and tests)."""
    return list(_loaded.values())
