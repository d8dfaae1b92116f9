"""The scheduler's Python reference and the metadata ABI (CPU, property-based)."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernelgen import metadata as md


def _cu(lengths):
    return np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)


batches = st.lists(st.integers(min_value=0, max_value=700), min_size=0, max_size=40)


@settings(max_examples=200, deadline=None)
@given(qlens=batches, extra=st.integers(0, 9), heads=st.integers(1, 6), block_m=st.sampled_from([16, 64, 128]),
       layout=st.sampled_from(["soa", "aos"]), causal=st.booleans())
def test_every_tile_exactly_once(qlens, extra, heads, block_m, layout, causal):
    batch = len(qlens)
    capacity = max(1, batch + extra)
    cu = _cu(qlens)
    buf = md.reference_schedule(cu, cu, batch, capacity, heads, block_m, 64, layout)
    tiles = md.enumerate_tiles(buf, layout, capacity, heads, causal)
    expected = {(b, h, m) for b, L in enumerate(qlens) for h in range(heads) for m in range(-(-L // block_m))}
    assert len(tiles) == len(expected)          # no duplicates
    assert set(tiles) == expected               # nothing missing, nothing extra
    d = md.decode(buf, layout, capacity)
    assert d["total_tiles"] == len(expected) and d["batch"] == batch
    assert d["tile_semaphore"] == 0 and d["exit_count"] == 0
    # tile_start is non-decreasing and entries past the batch are neutral
    assert np.all(np.diff(d["tile_start"]) >= 0)
    assert np.all(d["tile_start"][batch:] == d["total_tiles"])
    assert np.all(d["m_blocks"][batch:] == 0)
    assert np.all(d["batch_idx"] == np.arange(capacity))
    assert np.all(d["splits_nheads"] == md.NEUTRAL_SPLITS_NHEADS)


@given(cap=st.integers(1, 5000))
def test_size_depends_on_capacity_only(cap):
    n = md.buffer_ints(cap)
    assert n == 4 + md.NVEC * md.round_up(cap, 4)
    # both layouts fit the same buffer and put every field of every entry at a distinct offset
    for layout in ("soa", "aos"):
        offs = {md.field_offset(layout, cap, f, vb) for f in range(md.NVEC) for vb in range(md.round_up(cap, 4))}
        assert len(offs) == md.NVEC * md.round_up(cap, 4)
        assert min(offs) == md.HEADER_INTS and max(offs) == n - 1


def test_padded_batch_reads_same_layout():
    """Planned for 5 requests at capacity 16, the same buffer read with a padded batch of 16 is consistent."""
    qlens = [3, 130, 0, 1, 257]
    cu5 = _cu(qlens)
    cu16 = _cu(qlens + [0] * 11)
    for layout in ("soa", "aos"):
        a = md.reference_schedule(cu5, cu5, 5, 16, 4, 128, 64, layout)
        b = md.reference_schedule(cu16, cu16, 16, 16, 4, 128, 64, layout)
        ta = md.enumerate_tiles(a, layout, 16, 4, True)
        tb = md.enumerate_tiles(b, layout, 16, 4, True)
        assert ta == tb  # zero-length padding adds no work and moves nothing


def test_worked_example_offsets():
    # capacity 5 -> rows of 8 ints in SoA; AoS is one int4 per request
    assert md.field_offset("soa", 5, 0, 0) == 4
    assert md.field_offset("soa", 5, 2, 3) == 4 + 2 * 8 + 3
    assert md.field_offset("aos", 5, 2, 3) == 4 + 4 * 3 + 2
    buf = md.reference_schedule([0, 1, 1001, 1001, 1002, 1202], None, 5, 5, 8, 128, 128, "soa")
    d = md.decode(buf, "soa", 5)
    assert list(d["m_blocks"]) == [1, 8, 0, 1, 2]
    assert list(d["tile_start"]) == [0, 8, 72, 72, 80]
    assert d["total_tiles"] == 8 * 12
    # causal decode reverses m-blocks within a request: the first tile of request 1 is its last block
    assert md.tile_to_work(buf, "soa", 5, 8, True, 8) == (1, 0, 7)
    assert md.tile_to_work(buf, "soa", 5, 8, False, 8) == (1, 0, 0)


def test_bad_arguments():
    with pytest.raises(ValueError, match="capacity"):
        md.buffer_ints(0)
    with pytest.raises(ValueError, match="exceeds capacity"):
        md.reference_schedule([0, 1, 2], [0, 1, 2], 2, 1, 1, 64, 64, "soa")
    with pytest.raises(ValueError, match="metadata_layout"):
        md.field_offset("csr", 4, 0, 0)
