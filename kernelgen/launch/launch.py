"""Kernel launches prepared once and repeated with new pointers.

Launches go to the driver's ``cuLaunchKernel`` through CuPy's Cython binding
(``cupy.cuda.driver.launchKernel``, looked up once, on the first launch; CuPy loads the same
``libcuda.so.1`` PyTorch uses, so the same primary contexts).  The binding costs about 0.1 us of
host time a call besides the driver's own work, against 0.6 us for a ctypes foreign call with
every argument prebuilt (both measured against a no-op ``cuLaunchKernel`` in a stub driver
library, docs/dev/perf-log.md "host overhead"); it releases the GIL during the driver call.

Every kernel takes one parameter struct by value: ``kernelParams`` is a one-element array holding
the struct's address, and the driver copies the struct before ``cuLaunchKernel`` returns, so a
buffer can be rewritten for the next launch right away (also while a CUDA graph is captured).

``PreparedLaunch`` fixes a kernel's grid, CTA size, dynamic shared memory and non-pointer
parameters; a launch then only packs the pointer fields (``ParamStruct.pointer_struct``) into a
per-thread copy of the packed template and calls the driver: no allocation and no ctypes object
made per launch.  A failed launch raises ``LaunchError`` naming the kernel.
(``prepared.PreparedCall`` unrolls three such launches with the same slots, ``new_slot``.)
"""
from __future__ import annotations

import ctypes
import threading

from ..kernels.params import ParamStruct

#: ``launchKernel(f, gridX, gridY, gridZ, blockX, blockY, blockZ, smem, stream, kernelParams,
#: extra)`` with int arguments: CuPy's binding of cuLaunchKernel (None until the first launch).
#: Tests replace it with a stub.
_driver_launch = None


def driver_launch():
    """The cuLaunchKernel binding, looked up on first use."""
    global _driver_launch
    if _driver_launch is None:
        from cupy.cuda import driver

        _driver_launch = driver.launchKernel
    return _driver_launch


class LaunchError(RuntimeError):
    """The driver refused a launch.  ``kernel`` is the kernel's name (``a+b+c`` for a graph of
    kernels), ``code`` the CUresult (None if the error carried none); the driver's error is
    chained as ``__cause__``; ``call`` names the driver function in the message."""

    def __init__(self, kernel: str, cause: BaseException, call: str = "cuLaunchKernel"):
        self.kernel, self.code = kernel, getattr(cause, "status", None)
        super().__init__(f"{call} failed for kernel {kernel}: {cause}")


class PreparedLaunch:
    """One kernel launch with everything but the pointer parameters fixed.

    Args:
        name: the kernel's name (in errors).
        func_ptr: its CUfunction handle.
        grid, threads: CTAs and threads per CTA (1-D).
        smem: dynamic shared memory in bytes.
        params: the kernel's ParamStruct; ``static`` holds its non-pointer field values.

    ``launch(stream, *pointers)`` packs the pointers (in ``params.pointer_names`` order, 0 for
    none) and enqueues the kernel on the raw CUstream ``stream``.  Thread-safe: each thread packs
    into its own buffer (``new_slot``).
    """

    def __init__(self, name: str, func_ptr: int, grid: int, threads: int, smem: int, params: ParamStruct,
                 static: dict):
        self.name = name
        self.params = params
        self.template = params.pack_static(static)
        self.grid, self.threads, self.smem = int(grid), int(threads), int(smem)
        #: cuLaunchKernel's arguments before hStream: function, grid, block, shared memory
        self.head = (int(func_ptr), self.grid, 1, 1, self.threads, 1, 1, self.smem)
        self._tls = threading.local()

    def new_slot(self) -> tuple:
        """A parameter buffer for one thread: (pack, buffer, head, kernelParams address, keep-alive).

        ``pack(buffer, 0, *pointers)`` writes the pointers over the template the buffer starts
        with; then ``driver_launch()(*head, stream, address, 0)`` launches.
        """
        buf = ctypes.create_string_buffer(self.template, len(self.template))
        argv = (ctypes.c_void_p * 1)(ctypes.addressof(buf))
        return (self.params.pointer_struct.pack_into, buf, self.head, ctypes.addressof(argv), argv)

    def launch(self, stream: int, *pointers: int) -> None:
        """Enqueue the kernel on ``stream`` with these pointer parameters.  Raises LaunchError."""
        try:
            pack, buf, head, argv, _ = self._tls.slot
        except AttributeError:
            pack, buf, head, argv, _ = self._tls.slot = self.new_slot()
        pack(buf, 0, *pointers)
        try:
            (_driver_launch or driver_launch())(*head, stream, argv, 0)
        except Exception as e:  # noqa: BLE001 - whatever the binding raises, name the kernel
            raise LaunchError(self.name, e) from e

    def packed(self) -> bytes:
        """The calling thread's parameter bytes as its last ``launch`` left them (the template before)."""
        try:
            return bytes(self._tls.slot[1].raw)
        except AttributeError:
            return self.template


def launch_packed(name: str, func_ptr: int, grid: int, threads: int, smem: int, stream: int, packed: bytes) -> None:
    """One launch with a parameter struct packed by the caller (the unprepared path).  Raises
    LaunchError."""
    buf = ctypes.create_string_buffer(packed, len(packed))
    argv = (ctypes.c_void_p * 1)(ctypes.addressof(buf))
    try:
        (_driver_launch or driver_launch())(func_ptr, grid, 1, 1, threads, 1, 1, smem, stream,
                                            ctypes.addressof(argv), 0)
    except Exception as e:  # noqa: BLE001 - whatever the binding raises, name the kernel
        raise LaunchError(name, e) from e


def prepare(kernel, grid: int, static: dict, smem: int | None = None, threads: int | None = None) -> PreparedLaunch:
    """A ``PreparedLaunch`` of a loaded kernel (``jit.runtime.Kernel``) with ``grid`` CTAs and the
    non-pointer parameters ``static`` fixed; ``smem`` / ``threads`` override the kernel's dynamic
    shared memory (bytes) and CTA size."""
    return PreparedLaunch(kernel.spec.name, kernel.func_ptr, grid, kernel.num_threads if threads is None else threads,
                          kernel.smem_bytes if smem is None else smem, kernel.params, static)


def launch_kernel(kernel, grid: int, stream: int, packed: bytes, smem: int | None = None,
                  threads: int | None = None) -> None:
    """Launch a loaded kernel (``jit.runtime.Kernel``) with ``grid`` CTAs on the raw CUstream handle
    ``stream`` (0 = legacy default) and its parameter struct ``packed`` (``kernel.params.pack``);
    ``smem`` / ``threads`` as in ``prepare``.  Raises LaunchError (naming the kernel) if the driver
    rejects the launch, ValueError if ``packed`` is not the size of the kernel's parameter (the
    sm_80 fused kernel's: two ``kernel.params``, one a class).  The hot paths use ``prepare``
    instead."""
    params = getattr(kernel, "params", None)
    if params is not None:
        want = params.size * (2 if kernel.spec.kind == "fused" and not kernel.spec.hopper else 1)
        if len(packed) != want:
            raise ValueError(f"{kernel.spec.name}: a parameter buffer of {len(packed)} bytes, the kernel takes {want}")
    launch_packed(kernel.spec.name, kernel.func_ptr, grid, kernel.num_threads if threads is None else threads,
                  kernel.smem_bytes if smem is None else smem, stream, packed)
