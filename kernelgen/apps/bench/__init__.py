"""``kernelgen bench``: kernelgen against its peers, side by side, on the same inputs in one process.

Suites (``--suite``, comma list or ``all``): ``prefill``, ``decode``, ``mixed``, ``scheduler``,
``compile``, ``overhead``; entries are listed in :mod:`kernelgen.apps.bench.suites`, peers in
:mod:`kernelgen.apps.bench.peers`, model presets in :mod:`kernelgen.apps.bench.models`, the timing method in
:mod:`kernelgen.apps.bench.measure`.  Outputs (:mod:`kernelgen.apps.bench.report`,
:mod:`kernelgen.apps.bench.plots`): a markdown table per suite on stdout, ``--json`` in the report shape
of ``docs/benchmarks/h200.json`` and ``--plots DIR`` (PNG bars per suite and a roofline chart).

This module stays light (no torch import) so the CLI can build its parser from it; the command
itself is ``runner.main_args``.
"""
from __future__ import annotations

#: Suite names, in the order the report lists them.
SUITES = ("prefill", "decode", "mixed", "scheduler", "compile", "overhead")

__all__ = ["SUITES"]
