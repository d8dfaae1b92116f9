"""tests/sampling.py: the samples of the compile matrices cover what their docstrings promise."""
import itertools

import pytest
import sampling


def _pairs(rows):
    return {((i, a), (j, b)) for r in rows for (i, a), (j, b) in itertools.combinations(enumerate(r), 2)}


@pytest.mark.parametrize("sizes", [(2, 2, 5, 2), (5, 2, 2, 5), (3, 3, 3, 3), (7,), (1, 4)])
def test_pairwise_sample_covers_every_pair_of_a_product(sizes):
    cases = list(itertools.product(*(range(n) for n in sizes)))
    idx = sampling.covering(cases)
    assert idx == sorted(set(idx)) and sampling.covering(cases) == idx  # deterministic
    chosen = [cases[i] for i in idx]
    assert _pairs(chosen) == _pairs(cases)
    for axis, n in enumerate(sizes):
        assert {c[axis] for c in chosen} == set(range(n))
    assert len(chosen) < len(cases) or len(sizes) < 3


def test_one_wise_sample_of_dicts_with_defaults():
    cases = [dict(d=64), dict(d=128, mask="local"), dict(mask="local", opts="p"), dict(opts="g"), dict(d=64)]
    idx = sampling.covering(cases, 1)
    chosen = [cases[i] for i in idx]
    # every value of every key, "left out" (the default) included, occurs in a chosen case
    for key in ("d", "mask", "opts"):
        assert {c.get(key) for c in chosen} == {c.get(key) for c in cases}, key
    assert len(chosen) < len(cases)


def test_axes_function_groups_a_row_into_one_axis():
    rows = [(1, "a"), (2, "b"), (3, "c")]
    cases = [r + (x,) for r in rows for x in ("p", "q")]
    idx = sampling.covering(cases, 2, lambda c: (c[:2], c[2]))
    assert {(cases[i][:2], cases[i][2]) for i in idx} == {(r, x) for r in rows for x in ("p", "q")}


def test_matrix_marks_the_rest_full_matrix():
    cases = list(itertools.product((0, 1, 2), (0, 1, 2), (0, 1)))
    out = sampling.matrix(cases)
    keep = set(sampling.covering(cases))
    assert len(out) == len(cases)
    for i, (c, o) in enumerate(zip(cases, out)):
        if i in keep:
            assert o == c
        else:
            assert tuple(o.values) == c and [m.name for m in o.marks] == ["full_matrix"]
    single = sampling.matrix([dict(a=1), dict(a=2), dict(a=1)], 1)
    assert single[:2] == [dict(a=1), dict(a=2)] and single[2].values == (dict(a=1),)


def test_full_matrix_switch(monkeypatch):
    monkeypatch.delenv(sampling.FULL_ENV, raising=False)
    assert not sampling.full_matrix()
    for on, value in ((True, "1"), (False, "0"), (False, "")):
        monkeypatch.setenv(sampling.FULL_ENV, value)
        assert sampling.full_matrix() is on
