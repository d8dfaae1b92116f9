"""Choosing what a call launches (above ``jit``, ``launch`` and ``kernels``; pure, no CUDA).

``validation`` (argument checks), ``arguments`` (a public call's arguments checked into the
decider's input), ``signature`` (call keys and the prepared-call cache), ``settings`` (the
environment's overrides, read once per signature), ``heuristics`` (tiles, splits, variants),
``decide`` (the one decider: a call signature and a ``Device`` to a launch ``Recipe``) and
``catalog`` (the specs ``kernelgen warmup`` pre-builds).
"""
