"""Kernels from specs: render, compile, cache, load (above ``launch`` and ``kernels``).

``render`` (Jinja templates -> CUDA source), ``compiler`` (NVRTC -> cubin), ``cache`` (the disk
cache), ``runtime`` (each device read once into a ``kernels.device.Device``; cubins loaded per
device), ``warmup`` (compiling specs into the cache ahead of time), ``sass`` (disassembly for
tests and tools).
"""
