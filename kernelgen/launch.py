"""``cuLaunchKernel`` through ctypes, and launches prepared once and repeated with new pointers.

The CUDA driver library (``libcuda.so.1``, ``nvcuda.dll`` on Windows: the library CuPy and
PyTorch use, so the same primary contexts) is opened once, on the first launch, and its
``cuLaunchKernel`` bound with the ``CU_LAUNCH_KERNEL`` prototype (argument and result types set
once).  Every kernel takes one parameter struct by value: ``kernelParams`` is a one-element array
holding the struct's address, and the driver copies the struct when the call returns, so a
buffer can be rewritten for the next launch right away (also while a CUDA graph is captured).

``PreparedLaunch`` fixes a kernel's grid, CTA size, dynamic shared memory and non-pointer
parameters; a launch then only packs the pointer fields (``ParamStruct.pointer_struct``) into a
per-thread copy of the packed template and calls the driver: no allocation and no ctypes object
made per launch.  A non-zero ``CUresult`` raises ``LaunchError`` naming the kernel.
(``prepared.PreparedCall`` unrolls three such launches with the same slots, ``new_slot``.)
"""
from __future__ import annotations

import ctypes
import sys
import threading

from .params import ParamStruct

_U32 = ctypes.c_uint
#: CUresult cuLaunchKernel(CUfunction f, unsigned gridDimX, gridDimY, gridDimZ, blockDimX,
#: blockDimY, blockDimZ, unsigned sharedMemBytes, CUstream hStream, void** kernelParams, void** extra).
#: A PYFUNCTYPE: the GIL stays held during the call, as in PyTorch's own kernel launches; releasing
#: it would let another Python thread take the interpreter between our launches (for up to a
#: switch interval, 5 ms) and costs more than the enqueue itself.
CU_LAUNCH_KERNEL = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, _U32, _U32, _U32, _U32, _U32, _U32, _U32,
                                    ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)
_ONE = _U32(1)

_lock = threading.Lock()
_driver = None
#: The driver's cuLaunchKernel as a CU_LAUNCH_KERNEL foreign function (None until the first launch).
#: Tests and tools/host_overhead_probe.py replace it with a stub of the same prototype.
_cu_launch = None


class LaunchError(RuntimeError):
    """The driver refused a launch.  ``kernel`` is the kernel's name, ``code`` the CUresult."""

    def __init__(self, kernel: str, code: int):
        self.kernel, self.code = kernel, code
        super().__init__(f"cuLaunchKernel failed for kernel {kernel}: {error_name(code)} ({code})")


def driver_library() -> ctypes.CDLL:
    """The CUDA driver library, opened once (OSError with the library name if it cannot be)."""
    global _driver
    if _driver is None:
        with _lock:
            if _driver is None:
                name = "nvcuda.dll" if sys.platform == "win32" else "libcuda.so.1"
                try:
                    _driver = ctypes.CDLL(name)
                except OSError as e:
                    raise OSError(f"cannot load the CUDA driver library {name}: {e}") from e
    return _driver


def cu_launch_kernel():
    """The driver's ``cuLaunchKernel`` (a ``CU_LAUNCH_KERNEL``), bound on first use."""
    global _cu_launch
    if _cu_launch is None:
        fn = CU_LAUNCH_KERNEL(("cuLaunchKernel", driver_library()))
        with _lock:
            if _cu_launch is None:
                _cu_launch = fn
    return _cu_launch


def error_name(code: int) -> str:
    """CUDA_ERROR_* name of a CUresult (``cuGetErrorName``), or "CUresult <code>" without a driver."""
    try:
        lib = driver_library()
        name = ctypes.c_char_p()
        if lib.cuGetErrorName(ctypes.c_int(code), ctypes.byref(name)) == 0 and name.value:
            return name.value.decode()
    except (OSError, AttributeError):
        pass
    return f"CUresult {code}"


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
        self.head = (ctypes.c_void_p(func_ptr), _U32(self.grid), _ONE, _ONE, _U32(self.threads), _ONE, _ONE,
                     _U32(self.smem))
        self._tls = threading.local()

    def new_slot(self, stream: ctypes.c_void_p) -> tuple:
        """A parameter buffer for one thread: (pack, buffer, args, keep-alive).

        ``pack(buffer, 0, *pointers)`` writes the pointers over the template the buffer starts
        with; then ``cuLaunchKernel(*args)`` launches on the CUstream held by ``stream`` (the
        caller sets ``stream.value``; one such object can serve several slots).
        """
        buf = ctypes.create_string_buffer(self.template, len(self.template))
        argv = (ctypes.c_void_p * 1)(ctypes.addressof(buf))
        args = self.head + (stream, ctypes.c_void_p(ctypes.addressof(argv)), None)
        return (self.params.pointer_struct.pack_into, buf, args, argv)

    def launch(self, stream: int, *pointers: int) -> None:
        """Enqueue the kernel on ``stream`` with these pointer parameters.  Raises LaunchError."""
        try:
            stream_arg, (pack, buf, args, _) = self._tls.slot
        except AttributeError:
            stream_arg = ctypes.c_void_p()
            self._tls.slot = (stream_arg, self.new_slot(stream_arg))
            pack, buf, args, _ = self._tls.slot[1]
        stream_arg.value = stream
        pack(buf, 0, *pointers)
        rc = (_cu_launch or cu_launch_kernel())(*args)
        if rc:
            raise LaunchError(self.name, rc)

    def packed(self) -> bytes:
        """The calling thread's parameter bytes as its last ``launch`` left them (the template before)."""
        try:
            return bytes(self._tls.slot[1][1].raw)
        except AttributeError:
            return self.template


def launch_packed(name: str, func_ptr: int, grid: int, threads: int, smem: int, stream: int, packed: bytes) -> None:
    """One launch with a parameter struct packed by the caller (the unprepared path).  Raises
    LaunchError."""
    buf = ctypes.create_string_buffer(packed, len(packed))
    argv = (ctypes.c_void_p * 1)(ctypes.addressof(buf))
    rc = (_cu_launch or cu_launch_kernel())(func_ptr, grid, 1, 1, threads, 1, 1, smem, stream, argv, None)
    if rc:
        raise LaunchError(name, rc)
