"""Devices read once, and kernels loaded per device.

``device(ordinal)`` reads a CUDA device's properties once (CuPy's ``getDeviceProperties``) into a
``kernels.device.Device``, kept for the process: the decider, the loader and the reports all take
that one object.  A kernel is loaded once per (device, spec) from the cubin the cache hands back
(CuPy's ``Module.load`` -> cuModuleLoadData in the device's primary context, the one PyTorch
uses) into a ``Kernel``: its function handle, CTA size, shared memory and persistent grid, which
the launch layer (``launch``) launches.  Nothing here launches, synchronises the host or
allocates device memory.
"""
from __future__ import annotations

import contextlib
import dataclasses
import threading
from dataclasses import dataclass, field

from ..kernels.device import Device
from ..kernels.params import (QUANT_PARAMS, ParamStruct, SCHEDULER_PARAMS, attention_params_for,
                              combine_params_for, fused_params_for)

_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8
_CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT = 9
#: Environment variable (an experiment, unset by default): the preferred shared-memory carveout, in
#: percent of the most shared memory an SM can have (0-100, CUDA's
#: ``cudaFuncAttributePreferredSharedMemoryCarveout``; the rest of the unified L1 / shared memory is
#: L1), set on every kernel kernelgen loads, so that
#: the scheduler, attention and combine kernels of one call ask for the same split and an SM need not
#: reconfigure between them (docs/dev/perf-log.md, "Thirty-fourth session").
SMEM_CARVEOUT_ENV = "KERNELGEN_SMEM_CARVEOUT"
#: The scheduler keeps up to four 4-byte values per request slot in dynamic shared memory (two
#: sort-key buffers and the plans staged by request), metadata.MAX_CAPACITY slots at most.
_SCHEDULER_MAX_SMEM = 4 * 4 * 8192


@dataclass
class Kernel:
    """One loaded kernel on one device: ``spec``, the device ordinal, the CUfunction handle, threads
    per CTA, dynamic shared memory in bytes (the scheduler's: the most a launch may ask for), the
    persistent grid (SMs x resident CTAs per SM, from the occupancy calculator) and the parameter
    struct (``params``) its launches pack."""

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


_loaded: dict = {}
_lock = threading.Lock()
_devices: dict = {}


@contextlib.contextmanager
def separate_modules(store: dict):
    """For benchmarks: inside the ``with`` block kernels are looked up in and loaded into ``store``
    (a dict the caller keeps, initially empty) instead of the process's set, so a kernel the process
    has loaded already is loaded again as another CUmodule (its code at another address) and kept
    in ``store`` for the next block.  The swap is process-wide (every thread's lookups see
    ``store`` until the block ends), so it belongs in single-threaded measurement code only.
    Used by ``apps.bench.twins``: the same kernel loaded twice measured up to 6-9 % apart at causal
    16k (docs/dev/perf-log.md, "Forty-seventh session")."""
    global _loaded
    with _lock:
        saved, _loaded = _loaded, store
    try:
        yield store
    finally:
        with _lock:
            _loaded = saved


def device(ordinal: int) -> Device:
    """The ``Device`` description of CUDA device ``ordinal``, read from the driver on first use."""
    d = _devices.get(ordinal)
    if d is None:
        from cupy.cuda import runtime

        d = _devices[ordinal] = Device.from_properties(runtime.getDeviceProperties(ordinal))
    return d


def device_arch(ordinal: int, allow_untested: bool = False) -> str:
    """Compile target of CUDA device ``ordinal`` (e.g. 'sm_90a' on an H100/H200); RuntimeError for
    a compute capability kernelgen has no kernels for, or an untested one (Blackwell) unless
    ``allow_untested`` (``selection.settings.allow_untested_arch()``)."""
    return device(ordinal).compile_arch(allow_untested)


def device_properties(ordinal: int) -> dict:
    """``device(ordinal)``'s fields as a dict (name, cc, num_sms, l2_bytes, smem_optin), for reports."""
    return dataclasses.asdict(device(ordinal))


def get_kernel(spec, ordinal: int) -> Kernel:
    """The kernel for ``spec`` loaded on device ``ordinal`` (compiling or loading from the disk cache once)."""
    k = _loaded.get((ordinal, spec))
    if k is not None:
        return k
    with _lock:
        k = _loaded.get((ordinal, spec))
        if k is None:
            k = _load(spec, ordinal)
            _loaded[(ordinal, spec)] = k
    return k


def is_loaded(spec, ordinal: int) -> bool:
    """Whether the kernel for ``spec`` is loaded on device ``ordinal`` already (nothing to build)."""
    return (ordinal, spec) in _loaded


def load(specs, ordinal: int) -> tuple:
    """The kernels of ``specs`` (e.g. a recipe's, ``kernels.recipe.Recipe.specs``) loaded on device
    ``ordinal``, in order (``get_kernel`` each)."""
    return tuple(get_kernel(s, ordinal) for s in specs)


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
    these kernels 65536 / threads a thread (``__launch_bounds__(threads, 1)``: 168 with two consumer
    warpgroups, 128 with three); the check guards against a compiler that gives fewer."""
    budget = register_budget(spec)
    regs = resources.get("registers")
    if budget is None or regs is None:
        return
    producer, consumer = budget
    need = 128 * producer + (spec.num_threads - 128) * consumer
    if int(regs) * spec.num_threads < need:
        raise RuntimeError(f"{spec.name}: {regs} registers a thread x {spec.num_threads} threads cannot cover "
                           f"setmaxnreg's {producer}/{consumer} ({need} registers); the consumers would wait forever")


def smem_carveout(environ=None) -> int | None:
    """The carveout ``KERNELGEN_SMEM_CARVEOUT`` asks for (an int 0-100), or None when unset or empty.

    Raises ValueError naming the variable for anything else."""
    import os

    raw = (os.environ if environ is None else environ).get(SMEM_CARVEOUT_ENV, "").strip()
    if not raw:
        return None
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if not 0 <= value <= 100:
        raise ValueError(f"{SMEM_CARVEOUT_ENV} must be an int from 0 to 100 (percent), got {raw!r}")
    return value


def _load(spec, ordinal: int) -> Kernel:
    import cupy
    from cupy.cuda import driver, function

    from .cache import get_cache

    entry = get_cache().get(spec)
    check_register_pool(spec, entry.resources)
    if spec.kind == "attention":
        threads, smem = spec.num_threads, spec.smem_bytes()
        params = attention_params_for(spec)
    elif spec.kind == "scheduler":
        # dynamic smem is set per launch (kernel_args.scheduler_launch_shape), up to the opt-in below
        threads, smem, params = spec.num_threads, 0, SCHEDULER_PARAMS
    elif spec.kind == "fused":  # two attention variants, one AttnParams each (Hopper: after the maps)
        threads, smem = spec.num_threads, spec.smem_bytes()
        params = fused_params_for(spec)
    elif spec.kind == "combine":
        threads, smem, params = spec.num_threads, 0, combine_params_for(spec)
    elif spec.kind == "quant":
        threads, smem, params = spec.num_threads, 0, QUANT_PARAMS
    else:
        raise ValueError(f"unknown kernel kind {spec.kind!r}")
    dev = device(ordinal)
    with cupy.cuda.Device(ordinal):
        module = function.Module()
        module.load(entry.cubin)
        fn = module.get_function(spec.entry)
        opt_in = smem
        if spec.kind == "scheduler":  # what the device allows next to the kernel's static shared memory
            limit = dev.smem_optin or 48 * 1024
            opt_in = min(_SCHEDULER_MAX_SMEM, limit - int(entry.resources.get("shared_static") or 0))
        if opt_in > 48 * 1024:
            driver.funcSetAttribute(fn.ptr, _CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, opt_in)
        carveout = smem_carveout()
        if carveout is not None:
            driver.funcSetAttribute(fn.ptr, _CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, carveout)
        per_sm = driver.occupancyMaxActiveBlocksPerMultiprocessor(fn.ptr, threads, smem)
        if per_sm < 1:
            raise RuntimeError(f"{spec.name} cannot run on device {ordinal}: occupancy 0 with {smem} B of shared "
                               f"memory")
        grid = per_sm * dev.num_sms
    if spec.kind == "scheduler":
        smem = opt_in  # the most dynamic shared memory a launch may ask for (set per launch)
    return Kernel(spec=spec, device=ordinal, func_ptr=fn.ptr, num_threads=threads, smem_bytes=smem,
                  persistent_grid=grid, params=params, module=module, resources=dict(entry.resources))


def quant_kernel(device, dtype, allow_untested: bool = False) -> Kernel | None:
    """The kernel that quantises a 16-bit q to e4m3 (``launch.quant_q.quantize``'s ``kernel``;
    ``spec.QuantSpec`` of q's ``dtype``, torch.float16 or torch.bfloat16) loaded on the torch
    ``device`` (compiled or read from the cache once), or None where ``quantize`` takes its torch
    ops: a device that is not CUDA, or one without the fp32 -> e4m3 conversion (``FP8_CVT_ARCHS``)
    or without kernelgen kernels.  Callers load it before a CUDA graph capture (a plan at
    construction, a call when it decides), so that no module loads while one is captured."""
    from ..kernels.spec import FP8_CVT_ARCHS, QuantSpec

    if getattr(device, "type", None) != "cuda":
        return None
    index = device.index
    if index is None:   # torch.device("cuda"): the current device
        import torch

        index = torch.cuda.current_device()
    try:
        arch = device_arch(index, allow_untested)
    except RuntimeError:
        return None
    if arch not in FP8_CVT_ARCHS:
        return None
    return get_kernel(QuantSpec(arch, "bf16" if str(dtype) == "torch.bfloat16" else "fp16"), index)


def loaded_kernels() -> list:
    """Kernels loaded in this process (for ``kernelgen doctor`` and tests)."""
    return list(_loaded.values())
