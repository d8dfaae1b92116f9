"""Deterministic samples of the slow compile matrices (issue 21).

An NVRTC build of one variant costs 0.4-2 s of CPU; the full matrices hold several hundred.  By
default a test parametrized with :func:`matrix` runs a *pairwise covering* sample of its cases:
every value of every axis, and every pair of values of two axes that occurs together anywhere in
the matrix, occurs together in at least one sampled case.  The sample is a pure function of the
case list (a greedy cover in list order), so every run and every xdist worker picks the same cases.

The other cases are still collected, marked ``full_matrix``, and deselected (``tests/conftest.py``);
``python -m pytest --full-matrix`` (or ``KERNELGEN_FULL_MATRIX=1``) runs every case.  Each sampled
matrix also has a cheap test that renders (and checks) every case of the full list.
"""
from __future__ import annotations

import itertools
import os

import pytest

#: Set to 1 (or pass ``--full-matrix``, which sets it) to run every case of the sampled matrices.
FULL_ENV = "KERNELGEN_FULL_MATRIX"


def full_matrix() -> bool:
    return os.environ.get(FULL_ENV, "").strip() not in ("", "0")


def _axes(case) -> tuple:
    """The (axis, value) features of one case: positions of a tuple, keys of a dict (a key a case
    leaves out has the value ``"<default>"``, filled in by :func:`covering`)."""
    if isinstance(case, dict):
        return tuple(sorted(case.items(), key=lambda kv: kv[0]))
    if isinstance(case, tuple):
        return tuple(enumerate(case))
    return ((0, case),)


def _key(value):
    return repr(value)  # values may be unhashable (dicts, lists) or of mixed types


def covering(cases, strength: int = 2, axes=None) -> list[int]:
    """Indices (ascending) of a subset of ``cases`` that covers every combination of ``strength``
    axis values occurring in ``cases`` (``strength=1``: every value of every axis).  ``axes`` maps
    a case to the values of its axes (default: the case itself), e.g. to take a row of features
    as one axis."""
    feats = [dict(_axes(c if axes is None else axes(c))) for c in cases]
    names = sorted({a for f in feats for a in f}, key=repr)
    rows = [tuple((a, _key(f.get(a, "<default>"))) for a in names) for f in feats]

    def combos(row):
        return set(itertools.combinations(row, min(strength, len(row))))

    need = [combos(r) for r in rows]
    todo = set().union(*need) if need else set()
    chosen: list[int] = []
    used: dict = {}  # how often each axis value occurs in the cases chosen so far
    while todo:
        # most new combinations first; among those, the case whose values were chosen least often
        # (a sample spread evenly over each axis), then the earliest
        best = max(range(len(rows)), key=lambda i: (len(need[i] & todo), -sum(used.get(v, 0) for v in rows[i]), -i))
        chosen.append(best)
        todo -= need[best]
        for v in rows[best]:
            used[v] = used.get(v, 0) + 1
    return sorted(chosen)


def matrix(cases, strength: int = 2, axes=None) -> list:
    """``cases`` for ``pytest.mark.parametrize``: the covering sample as they are, the rest marked
    ``full_matrix`` (deselected unless the full matrix is asked for)."""
    cases = list(cases)
    keep = set(covering(cases, strength, axes))
    out = []
    for i, c in enumerate(cases):
        values = c if isinstance(c, tuple) else (c,)
        out.append(c if i in keep else pytest.param(*values, marks=pytest.mark.full_matrix))
    return out
