"""A prepared call's kernels enqueued as one CUDA graph launch.

Why: on the H200's host a ``cuLaunchKernel`` call costs about 4 us of host time, so the three
launches of a decode step (scheduler, attention, combine) cost 12-17 us, while ``cuGraphLaunch``
of a graph holding the three kernels costs about as much as one kernel launch
(docs/dev/perf-log.md, "host overhead").  Re-pointing a node of an instantiated graph
(``cuGraphExecKernelNodeSetParams``) costs about 2.8 us, so a graph is kept per set of pointers:
outside stream capture, a prepared call keeps per thread and stream a ``GraphCache`` of executable
graphs (built once with the driver's graph API) keyed by the call's pointer parameters.  A
serving loop repeats each layer's pointers (its KV cache, its activation buffers, the step's
metadata) every step, so its calls launch a graph unchanged; a call with new pointers gets a new
graph, or, past ``GRAPHS_PER_STREAM``, re-points the least recently used one.

The launches keep the semantics of separate kernel launches:

* ``cuGraphLaunch`` is stream-ordered like a kernel launch: the graph's kernels run, in order, after
  the work enqueued on the stream before it and before the work enqueued after it.
* The driver copies a node's parameters when they are set; launches already enqueued keep the
  values they were launched with (CUDA driver API, ``cuGraphExecKernelNodeSetParams``), so a
  graph may be re-pointed while an earlier launch of it is pending.
* Launches of one executable graph are ordered after each other even on different streams, so
  each stream gets its own graphs (streams stay independent), and each thread its own (a thread's
  re-pointing and launch are not interleaved with another's).
* Inside stream capture the call launches its kernels directly (they become nodes of the graph
  being captured); ``prepared.PreparedCall`` checks the capture state on every call.

The driver is called through ``ctypes`` on ``libcuda.so.1`` (the library PyTorch and CuPy use).
The graph path is off when the driver lacks the CUDA 12 ``_v2`` entry points, and while
``KERNELGEN_GRAPH_LAUNCH=0`` is set (read on every call).  Launch failures raise
``launch.LaunchError`` naming the kernels.
"""
from __future__ import annotations

import ctypes
import os
import weakref

from .launch import LaunchError

#: Environment variable: ``0`` turns the graph path off (read on every call).
ENV = "KERNELGEN_GRAPH_LAUNCH"
# os.environ's encoded entries (CPython), as validation.host_checks_enabled reads them: a dict
# lookup that sees every change made through os.environ.
_ENV_DATA = getattr(os.environ, "_data", None)
_ENV_KEY = os.environ.encodekey(ENV) if _ENV_DATA is not None else None
_ENV_OFF = os.environ.encodevalue("0") if _ENV_DATA is not None else None


def enabled() -> bool:
    """Whether the graph path may be used now: ``KERNELGEN_GRAPH_LAUNCH`` is not ``0``."""
    if _ENV_DATA is not None:
        return _ENV_DATA.get(_ENV_KEY) != _ENV_OFF
    return os.environ.get(ENV) != "0"

#: Streams with graphs per prepared call and thread (the least recently added dropped first).
MAX_STREAMS = 8
#: Graphs per prepared call, thread and stream, one per set of pointers (``GraphCache``).  Few:
#: launching a graph other than the one launched last costs about what re-pointing one does.
GRAPHS_PER_STREAM = 8


class DriverError(RuntimeError):
    """A CUDA driver call returned ``status`` (a CUresult) other than CUDA_SUCCESS."""

    def __init__(self, status: int, function: str):
        self.status, self.function = status, function
        super().__init__(f"{function} returned CUresult {status}")


class KernelNodeParams(ctypes.Structure):
    """CUDA_KERNEL_NODE_PARAMS_v2 of the CUDA driver API (cuda.h, CUDA 12 and later)."""

    _fields_ = [("func", ctypes.c_void_p),
                ("grid_x", ctypes.c_uint), ("grid_y", ctypes.c_uint), ("grid_z", ctypes.c_uint),
                ("block_x", ctypes.c_uint), ("block_y", ctypes.c_uint), ("block_z", ctypes.c_uint),
                ("shared_mem_bytes", ctypes.c_uint),
                ("kernel_params", ctypes.c_void_p), ("extra", ctypes.c_void_p),
                ("kern", ctypes.c_void_p), ("ctx", ctypes.c_void_p)]


class Driver:
    """The graph entry points of a CUDA driver library (``ctypes.CDLL``): each attribute is a
    foreign function returning the CUresult as an int."""

    _SIGNATURES = {
        "cuGraphCreate": (ctypes.c_void_p, ctypes.c_uint),
        "cuGraphAddKernelNode_v2": (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                                    ctypes.c_void_p),
        "cuGraphInstantiateWithFlags": (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_ulonglong),
        "cuGraphExecKernelNodeSetParams_v2": (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p),
        "cuGraphLaunch": (ctypes.c_void_p, ctypes.c_void_p),
        "cuGraphExecDestroy": (ctypes.c_void_p,),
        "cuGraphDestroy": (ctypes.c_void_p,),
    }

    def __init__(self, lib):
        for name, argtypes in self._SIGNATURES.items():
            fn = getattr(lib, name)          # AttributeError: the driver predates the entry point
            fn.argtypes, fn.restype = argtypes, ctypes.c_int
            setattr(self, name, fn)


_driver: Driver | None = None
_driver_failed = False


def driver() -> Driver | None:
    """The driver's graph API, loaded on first use; None when it is unavailable."""
    global _driver, _driver_failed
    if _driver is None and not _driver_failed:
        try:
            _driver = Driver(ctypes.CDLL("libcuda.so.1"))
        except (OSError, AttributeError):
            _driver_failed = True
    return _driver


class GraphBuildError(LaunchError):
    """The driver refused to create or instantiate a graph (the caller may launch directly)."""


def _check(rc: int, function: str, kernel: str, error=LaunchError) -> None:
    if rc:
        cause = DriverError(rc, function)
        raise error(kernel, cause, function) from cause      # chained, as LaunchError documents


def _destroy(drv: Driver, exec_handle: int, graph_handle: int) -> None:
    # An executable graph still in flight is freed by the driver when it completes.
    drv.cuGraphExecDestroy(exec_handle)
    drv.cuGraphDestroy(graph_handle)


class _Node:
    __slots__ = ("name", "pack", "buf", "argv", "params", "params_addr", "handle")


class KernelGraph:
    """The launches of one prepared call as an executable CUDA graph, a chain of kernel nodes.

    Args:
        drv: the driver's graph API (``driver()``).
        launches: the call's prepared launches in order, each with ``name``, ``head`` (function,
            grid, block, shared memory: cuLaunchKernel's arguments before the stream) and
            ``new_slot()`` (a parameter buffer and its ``pack(buffer, 0, *pointers)``).

    Raises GraphBuildError (a LaunchError naming the kernels) when the driver refuses to build the
    graph.  Used by one thread for one stream, ``stream`` (a raw CUstream handle; see the module
    doc).
    """

    def __init__(self, drv: Driver, launches, stream: int):
        self._drv = drv
        self._nodes = []
        self.stream = stream
        graph = ctypes.c_void_p()
        names = "+".join(x.name for x in launches)
        _check(drv.cuGraphCreate(ctypes.byref(graph), 0), "cuGraphCreate", names, GraphBuildError)
        self._graph = graph.value
        prev = None
        try:
            for x in launches:
                n = _Node()
                n.name = x.name
                n.pack, n.buf, head, _, n.argv = x.new_slot()
                n.params = KernelNodeParams(head[0], *head[1:8], ctypes.addressof(n.argv), None, None, None)
                n.params_addr = ctypes.byref(n.params)
                handle = ctypes.c_void_p()
                deps = None if prev is None else (ctypes.c_void_p * 1)(prev)
                _check(drv.cuGraphAddKernelNode_v2(ctypes.byref(handle), self._graph, deps, 0 if prev is None else 1,
                                                   n.params_addr), "cuGraphAddKernelNode", x.name, GraphBuildError)
                prev = handle.value
                n.handle = ctypes.c_void_p(prev)
                self._nodes.append(n)
            exe = ctypes.c_void_p()
            _check(drv.cuGraphInstantiateWithFlags(ctypes.byref(exe), self._graph, 0), "cuGraphInstantiate", names,
                   GraphBuildError)
        except BaseException:
            drv.cuGraphDestroy(self._graph)
            raise
        # the foreign calls' arguments as ctypes objects, converted once
        self._exec, self._stream = ctypes.c_void_p(exe.value), ctypes.c_void_p(stream)
        self.name = names
        #: the pointers each node was last set to (None: the template's zeros)
        self._last = [None] * len(self._nodes)
        self._finalizer = weakref.finalize(self, _destroy, drv, exe.value, self._graph)
        self._finalizer.atexit = False   # at interpreter exit the process frees it

    def point(self, pointer_sets: tuple) -> None:
        """Set the nodes' pointer parameters (one tuple per node, in the parameter structs' pointer
        order) where they differ from the last ones set.  Raises LaunchError."""
        last, exe = self._last, self._exec
        i = 0
        for ptrs in pointer_sets:
            if ptrs != last[i]:
                n = self._nodes[i]
                n.pack(n.buf, 0, *ptrs)
                last[i] = None          # unknown until the driver took them
                rc = self._drv.cuGraphExecKernelNodeSetParams_v2(exe, n.handle, n.params_addr)
                if rc:
                    _check(rc, "cuGraphExecKernelNodeSetParams", n.name)
                last[i] = ptrs
            i += 1

    def launch(self) -> None:
        """Enqueue the graph on its stream.  Raises LaunchError."""
        rc = self._drv.cuGraphLaunch(self._exec, self._stream)
        if rc:
            _check(rc, "cuGraphLaunch", self.name)


class GraphCache:
    """The graphs of one prepared call for one thread and stream, keyed by the call's pointers.

    Re-pointing a graph node costs about 2.8 us of host time on the H200 (the driver updates the
    executable graph), a launch of an unchanged graph about as much as one kernel launch, so the
    cache keeps one graph per set of pointers seen (a serving loop repeats each layer's pointers
    every step), up to ``capacity``; past it, the least recently used graph is re-pointed to the
    new set.  ``launches``: as ``KernelGraph``'s.
    """

    def __init__(self, drv: Driver, launches, stream: int, capacity: int | None = None):
        self._drv, self._launches, self.stream = drv, launches, stream
        self.capacity = max(1, GRAPHS_PER_STREAM if capacity is None else capacity)
        self._by_pointers: dict = {}
        self._last = None          # (pointer sets, graph) of the last launch

    def run(self, pointer_sets: tuple) -> None:
        """Launch the graph of these pointer sets (one tuple per kernel), making or re-pointing
        one first if none has them.  Raises LaunchError (GraphBuildError if a new graph could not
        be made)."""
        last = self._last
        if last is not None and last[0] == pointer_sets:     # the same pointers as the last call
            last[1].launch()
            return
        # Forget the last launch before any graph is re-pointed: with one graph per stream the
        # least recently used graph is the last launched one, and a re-pointing the driver refuses
        # midway leaves some of its nodes with the new pointers (the fast path above must not
        # launch it for the old ones).
        self._last = None
        graphs = self._by_pointers
        g = graphs.get(pointer_sets)
        if g is None:
            if len(graphs) < self.capacity:
                g = KernelGraph(self._drv, self._launches, self.stream)
            else:
                g = graphs.pop(next(iter(graphs)))
            g.point(pointer_sets)
            graphs[pointer_sets] = g
        elif len(graphs) > 1:
            graphs[pointer_sets] = graphs.pop(pointer_sets)     # most recently used last
        g.launch()
        self._last = (pointer_sets, g)

    def __len__(self) -> int:
        return len(self._by_pointers)
