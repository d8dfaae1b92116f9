"""The scheduler's Python reference and the metadata ABI (CPU, property-based)."""
import dataclasses

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from kernelgen.kernels import metadata as md
from kernelgen.kernels.metadata import SchedulerConfig


def _cu(lengths):
    return np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)


batches = st.lists(st.integers(min_value=0, max_value=1500), min_size=0, max_size=40)
configs = st.builds(
    SchedulerConfig,
    num_heads=st.integers(1, 6), block_m=st.sampled_from([16, 64, 128]), block_n=st.sampled_from([32, 64]),
    pack_factor=st.sampled_from([1, 3, 4]), max_splits=st.sampled_from([1, 2, 7, 64]), forced_splits=st.booleans(),
    num_ctas=st.integers(1, 300), max_kvblocks_l2=st.sampled_from([0, 1, 40, 5000]), swizzle_mult=st.sampled_from([1, 2]),
    sort=st.booleans(), window_left=st.sampled_from([-1, -1, 0, 7, 100, 1000]),
    wave_ctas=st.sampled_from([0, 0, 1, 37, 300]), min_share=st.sampled_from([1, 1, 3, 16]))


@settings(max_examples=300, deadline=None)
@given(qlens=batches, klens=batches, extra=st.integers(0, 9), cfg=configs, layout=st.sampled_from(["soa", "aos"]),
       causal=st.booleans())
def test_every_tile_exactly_once(qlens, klens, extra, cfg, layout, causal):
    batch = min(len(qlens), len(klens))
    qlens, klens = qlens[:batch], klens[:batch]
    capacity = max(1, batch + extra)
    buf = md.reference_schedule(_cu(qlens), _cu(klens), batch, capacity, cfg, layout)
    d = md.decode(buf, layout, capacity)
    tiles = md.enumerate_tiles(buf, layout, capacity, cfg.num_heads, causal)
    splits = {int(d["batch_idx"][vb]): int(d["splits_nheads"][vb]) & 0xFFFF for vb in range(batch)}
    expected = {(b, h, m, s) for b, L in enumerate(qlens) for h in range(cfg.num_heads)
                for m in range(-(-L * cfg.pack_factor // cfg.block_m)) for s in range(splits[b])}
    assert len(tiles) == len(expected)          # no duplicates
    assert set(tiles) == expected               # nothing missing, nothing extra
    assert d["total_tiles"] == len(expected) and d["batch"] == batch
    assert d["tile_semaphore"] == 0 and d["exit_count"] == 0
    # vb -> request is a permutation of the batch; entries past it are neutral
    assert sorted(d["batch_idx"][:batch].tolist()) == list(range(batch))
    assert np.all(np.diff(d["tile_start"]) >= 0)
    assert np.all(d["tile_start"][batch:] == d["total_tiles"])
    assert np.all(d["m_blocks"][batch:] == 0)
    assert np.all(d["batch_idx"][batch:] == np.arange(batch, capacity))
    assert np.all(d["splits_nheads"][batch:] == md.NEUTRAL_SPLITS_NHEADS)
    for vb in range(batch):
        s, nh = int(d["splits_nheads"][vb]) & 0xFFFF, int(d["splits_nheads"][vb]) >> 16
        i = int(d["batch_idx"][vb])
        n = md.request_blocks(qlens[i], klens[i], cfg)[1]
        assert n <= -(-klens[i] // cfg.block_n)
        assert 1 <= s <= max(1, cfg.max_splits) and (s == 1 or s <= n)
        assert 1 <= nh <= cfg.num_heads and (cfg.max_kvblocks_l2 > 0 or nh == 1)
    if cfg.sort:
        keys = [md.sort_key(int(d["m_blocks"][vb]), md.request_blocks(qlens[int(d["batch_idx"][vb])],
                                                                      klens[int(d["batch_idx"][vb])], cfg)[1],
                            int(d["splits_nheads"][vb]) & 0xFFFF) for vb in range(batch)]
        order = [(-k, int(d["batch_idx"][vb])) for vb, k in enumerate(keys)]
        with_rows = [k for k in keys if k >= 0]   # requests without rows do not count (scheduler v13)
        if batch > 1 and with_rows and md.sort_needed(min(with_rows) + 2, max(with_rows) + 2):
            assert order == sorted(order), "longest first, ties by request index"
        else:                                    # an even batch stays in request order
            assert d["batch_idx"][:batch].tolist() == list(range(batch))
    else:
        assert d["batch_idx"][:batch].tolist() == list(range(batch))


@given(cap=st.integers(1, 5000))
def test_size_depends_on_capacity_only(cap):
    n = md.buffer_ints(cap)
    assert n == 4 + md.NVEC * md.round_up(cap, 4)
    for layout in ("soa", "aos"):
        offs = {md.field_offset(layout, cap, f, vb) for f in range(md.NVEC) for vb in range(md.round_up(cap, 4))}
        assert len(offs) == md.NVEC * md.round_up(cap, 4)
        assert min(offs) == md.HEADER_INTS and max(offs) == n - 1


@settings(max_examples=50, deadline=None)
@given(qlens=st.lists(st.integers(0, 900), min_size=1, max_size=12), pad=st.integers(0, 20),
       sort=st.booleans(), layout=st.sampled_from(["soa", "aos"]))
@example(qlens=[257, 513, 577, 577], pad=1, sort=True, layout="soa")   # even classes; padding must not start a sort
def test_padded_batch_reads_same_work(qlens, pad, sort, layout):
    """Planned for B requests, the same batch padded with zero-length requests has the same tiles."""
    cfg = SchedulerConfig(num_heads=4, block_m=128, block_n=32, max_splits=8, num_ctas=264, max_kvblocks_l2=80,
                          sort=sort)
    b = len(qlens)
    cap = b + pad + 3
    a = md.reference_schedule(_cu(qlens), _cu(qlens), b, cap, cfg, layout)
    p = md.reference_schedule(_cu(qlens + [0] * pad), _cu(qlens + [0] * pad), b + pad, cap, cfg, layout)
    assert md.enumerate_tiles(a, layout, cap, 4, True) == md.enumerate_tiles(p, layout, cap, 4, True)


def test_worked_example_a_from_fa3_note():
    """shared/research/fa3_scheduler.md Example A: causal, 32/8 heads packed, BM = BN = 128."""
    lq, lk = [1, 1000, 0, 1, 200], [4000, 1000, 0, 300, 5000]
    cfg = SchedulerConfig(num_heads=8, block_m=128, block_n=128, pack_factor=4, max_kvblocks_l2=128, swizzle_mult=1,
                          sort=True)
    buf = md.reference_schedule(_cu(lq), _cu(lk), 5, 5, cfg, "soa")
    d = md.decode(buf, "soa", 5)
    # Our key is the KV blocks of a request's longest tile (its first, with m-blocks reversed):
    # [40, 32, 8, 3, -] -> order 4, 0, 1, 3, 2.  (FA3's key n*BN - m*BM puts the 1000-token
    # prefill last, behind a decode whose only tile is 3 blocks long; the note's order is 4, 0, 3, 2, 1.)
    assert list(d["batch_idx"]) == [4, 0, 1, 3, 2]
    assert list(d["m_blocks"]) == [7, 1, 32, 1, 0]   # m = ceil(4 * Lq / 128), in sorted order
    assert [int(x) >> 16 for x in d["splits_nheads"]] == [2, 4, 8, 8, 8]   # the note's num_nheads_in_l2
    assert d["total_tiles"] == 8 * 41
    # first tiles (note section 5.5): request 4, heads {0, 1} at m-block 6, then 5, ...
    assert [md.tile_to_work(buf, "soa", 5, 8, True, t)[:3] for t in range(4)] == [(4, 0, 6), (4, 1, 6), (4, 0, 5), (4, 1, 5)]
    assert md.tile_to_work(buf, "soa", 5, 8, True, 14)[:3] == (4, 2, 6)
    assert md.tile_to_work(buf, "soa", 5, 8, True, 64)[:3] == (1, 0, 31)   # all 8 heads of the last m-block
    assert md.tile_to_work(buf, "soa", 5, 8, True, 72)[:3] == (1, 0, 30)


def test_worked_example_b_dynamic_splits():
    """shared/research/fa3_scheduler.md Example B: decode batch, 8 packed heads, BN 176, S <= 15."""
    lk = [8192, 512, 100, 3000, 0]
    cfg = SchedulerConfig(num_heads=8, block_m=128, block_n=176, pack_factor=4, max_splits=15, num_ctas=132, sort=True)
    buf = md.reference_schedule(_cu([1] * 5), _cu(lk), 5, 5, cfg, "soa")
    d = md.decode(buf, "soa", 5)
    assert [int(x) & 0xFFFF for x in d["splits_nheads"]] == [10, 4, 1, 1, 1]
    assert list(d["batch_idx"]) == [0, 3, 1, 2, 4]
    assert d["total_tiles"] == 8 * (10 + 4 + 1 + 1 + 1)


def test_wave_split_cap_rounds_the_most_split_requests_to_whole_waves():
    """decode_long_b8_128k on an H200: 8 requests x 8192 key blocks, 8 packed KV heads, 1584
    one-warp CTAs (granularity 4): the quantum asks for 90 splits.  Cap 55 gives 3520 tiles (2.22
    waves), 64 gives 4096 (2.59), 255 gives 90 splits, 5760 tiles (3.64): rounded down to the last
    full wave, 49, 49 and 74 splits (1.98, 1.98 and 2.99 waves; measured on the H200: 49 and 74
    ran 8 % faster than 55, 64 and 90)."""
    cfg = SchedulerConfig(num_heads=8, block_m=16, block_n=16, pack_factor=4, max_splits=55, num_ctas=4 * 1584,
                          wave_ctas=1584)
    ms, ns = [1] * 8, [8192] * 8
    share = md.split_share(ms, ns, cfg)
    assert share == 92 and md.wave_split_cap(ms, ns, cfg, share) == 49
    assert md.wave_split_cap(ms, ns, dataclasses.replace(cfg, max_splits=64), share) == 49
    assert md.wave_split_cap(ms, ns, dataclasses.replace(cfg, max_splits=255), share) == 74
    buf = md.reference_schedule(_cu([1] * 8), _cu([131072] * 8), 8, 8, cfg, "soa")
    d = md.decode(buf, "soa", 8)
    assert [int(x) & 0xFFFF for x in d["splits_nheads"]] == [49] * 8 and d["total_tiles"] == 8 * 8 * 49
    # off (wave_ctas 0) or forced splits: the cap stays
    for c in (dataclasses.replace(cfg, wave_ctas=0), dataclasses.replace(cfg, forced_splits=True)):
        assert md.wave_split_cap(ms, ns, c, share) == 55
    assert md.wave_split_cap([1] * 8, [2000] * 8, cfg, share) == 55          # 22 splits: 1408 tiles, under a wave
    # a whole number of waves, or one wave, is never cut
    assert md.wave_split_cap(ms, ns, dataclasses.replace(cfg, wave_ctas=8 * 8 * 55), share) == 55
    assert md.wave_split_cap(ms, ns, dataclasses.replace(cfg, wave_ctas=8 * 8 * 55 // 2), share) == 55
    # the other requests' tiles count: 2 of 10 splits each beside the 8 top ones
    ms2, ns2 = [1] * 10, [8192] * 8 + [920] * 2
    share2 = md.split_share(ms2, ns2, cfg)
    free = 2 * -(-920 // share2)
    assert md.wave_split_cap(ms2, ns2, cfg, share2) == (2 * 1584 // 8 - free) // 8


def test_wave_split_cap_one_kv_head():
    """llama3-70b over 8 GPUs (one KV head of 8 query heads a GPU), 8 x 128 K keys: with the cap
    at 255 every request wants 683 splits; 8 x 255 = 2040 tiles (1.29 waves) round to 198, one
    full wave of 1584 tiles."""
    cfg = SchedulerConfig(num_heads=1, block_m=16, block_n=16, pack_factor=8, max_splits=255, num_ctas=4 * 1584,
                          wave_ctas=1584)
    ms, ns = [1] * 8, [8192] * 8
    share = md.split_share(ms, ns, cfg)
    assert share == 12 and md.wave_split_cap(ms, ns, cfg, share) == 198


def test_min_share_keeps_decode_tiles_of_a_small_batch_whole_enough():
    """llama3-70b over 8 GPUs (one KV head) on 128 decodes of 980 keys (62 key blocks of 16): the
    fair share over 4 x 1584 CTAs is 2 blocks (31 splits a request, rounded to 24 for whole waves:
    3072 tiles of 2-3 blocks); the standalone decode kernel's minimum of 256 keys (16 blocks) gives
    4 splits (512 tiles)."""
    cfg = SchedulerConfig(num_heads=1, block_m=16, block_n=16, pack_factor=8, max_splits=255, num_ctas=4 * 1584,
                          wave_ctas=1584)
    ms, ns = [1] * 128, [62] * 128
    assert md.split_share(ms, ns, cfg) == 2
    cfg16 = dataclasses.replace(cfg, min_share=16)
    assert md.split_share(ms, ns, cfg16) == 16
    for c, splits in ((cfg, 24), (cfg16, 4)):
        d = md.decode(md.reference_schedule(_cu([1] * 128), _cu([980] * 128), 128, 128, c, "soa"), "soa", 128)
        assert [int(x) & 0xFFFF for x in d["splits_nheads"]] == [splits] * 128 and d["total_tiles"] == 128 * splits
    # a small batch keeps the fair share: 8 decodes of 1 K keys (64 blocks) make 32 tiles of 16 blocks,
    # under a quarter of the 1584-CTA wave (4 x 512 < 1584 x 16); at 13 x 8 K keys (4 x 6656 >= 1584 x 16) it applies
    assert md.split_share([1] * 8, [64] * 8, cfg16) == md.split_share([1] * 8, [64] * 8, cfg) == 1
    assert md.split_share([1] * 13, [512] * 13, cfg) == 2 and md.split_share([1] * 13, [512] * 13, cfg16) == 16
    assert md.split_share([1] * 12, [512] * 12, cfg16) == md.split_share([1] * 12, [512] * 12, cfg) == 2  # 4 x 6144 < 25344
    # a share above the minimum is the fair share (the llama3-70b-tp8 8 x 128 K batch: 12 blocks, cap 198)
    assert md.split_share([1] * 8, [8192] * 8, dataclasses.replace(cfg, min_share=4)) == 12
    # forced splits ignore the quantum
    forced = dataclasses.replace(cfg16, forced_splits=True, max_splits=40)
    d = md.decode(md.reference_schedule(_cu([1] * 4), _cu([980] * 4), 4, 4, forced, "soa"), "soa", 4)
    assert [int(x) & 0xFFFF for x in d["splits_nheads"]] == [40] * 4


def test_wave_split_cap_leaves_a_ragged_batch_alone():
    """The rounding needs the most-split requests to hold at least half the tiles, and never more
    than halves their splits: one long request among many short ones keeps its splits (cutting it
    to end a wave would make its tiles outlast everything else)."""
    cfg = SchedulerConfig(num_heads=1, block_m=16, block_n=16, pack_factor=8, max_splits=55, num_ctas=4 * 1584,
                          wave_ctas=1584)
    ms = [1] * 128
    ns = [7540] + [900] * 127               # one 120 K request, 127 of 14 K: 2762 tiles at P = 21
    share = md.split_share(ms, ns, cfg)
    tiles = 55 + 127 * -(-900 // share)
    assert tiles > 1584 and 2 * 55 < tiles  # the top request holds far under half
    assert md.wave_split_cap(ms, ns, cfg, share) == 55
    # equal requests at a cap of 20: rounded down to whole waves as long as that keeps at least
    # half the splits (requests -> cap): 100 x 20 = 2000 tiles -> 15; 150 x 20 = 3000 -> 10 (half);
    # 160 x 20 = 3200 -> 19 (2 waves); 170 x 20 = 3400 -> 18
    cfg2 = dataclasses.replace(cfg, max_splits=20)
    for b, cap in ((100, 15), (150, 10), (160, 19), (170, 18)):
        msb, nsb = [1] * b, [8192] * b
        assert md.wave_split_cap(msb, nsb, cfg2, md.split_share(msb, nsb, cfg2)) == cap, b
    # 60 top requests (1200 tiles) beside 200 of 5 splits (1000): one wave would leave them 9
    # splits, under half: unchanged
    ms7, ns7 = [1] * 260, [8192] * 60 + [450] * 200
    share7 = md.split_share(ms7, ns7, cfg2)
    assert -(-8192 // share7) >= 20 and -(-450 // share7) == 5
    assert md.wave_split_cap(ms7, ns7, cfg2, share7) == 20
    # 80 top requests (1600 tiles) beside 340 of 5 splits (1700): one wave would leave them 18
    # splits (over half) but they hold under half the tiles: unchanged (review of the nineteenth
    # session: no case above is decided by this guard alone)
    ms8, ns8 = [1] * 420, [8192] * 80 + [610] * 340
    share8 = md.split_share(ms8, ns8, cfg2)
    assert share8 == 150 and -(-610 // share8) == 5
    c8 = ((80 * 20 + 340 * 5) // 1584 * 1584 - 340 * 5) // 80
    assert 20 <= 2 * c8 and c8 < 20                       # the other guards would let it through
    assert md.wave_split_cap(ms8, ns8, cfg2, share8) == 20


def test_worked_example_offsets():
    assert md.field_offset("soa", 5, 0, 0) == 4
    assert md.field_offset("soa", 5, 2, 3) == 4 + 2 * 8 + 3
    assert md.field_offset("aos", 5, 2, 3) == 4 + 4 * 3 + 2
    cfg = SchedulerConfig(num_heads=8, block_m=128, block_n=128, sort=False)
    buf = md.reference_schedule([0, 1, 1001, 1001, 1002, 1202], [0, 1, 2, 3, 4, 5], 5, 5, cfg, "soa")
    d = md.decode(buf, "soa", 5)
    assert list(d["m_blocks"]) == [1, 8, 0, 1, 2]
    assert list(d["tile_start"]) == [0, 8, 72, 72, 80]
    assert md.tile_to_work(buf, "soa", 5, 8, True, 8) == (1, 0, 7, 0)
    assert md.tile_to_work(buf, "soa", 5, 8, False, 8) == (1, 0, 0, 0)


def _last_block_keys_brute(lq, lk, pf, bm, bn, left, right):
    """Key blocks the attention kernel reads for a request's last query block, from the mask itself:
    the blocks between the first and the last key any of its rows may see (bottom-right aligned
    positions, visible iff pos - left <= j <= pos + right; right = -1: unbounded)."""
    m = -(-lq * pf // bm)
    off = lk - lq
    seen = [j for r in range((m - 1) * bm, lq * pf) for j in range(lk)
            if j >= r // pf + off - left and (right < 0 or j <= r // pf + off + right)]
    return (max(seen) // bn - min(seen) // bn + 1) if seen else 0


@settings(max_examples=300, deadline=None)
@given(lq=st.integers(1, 300), lk=st.integers(0, 700), pf=st.sampled_from([1, 4]), bm=st.sampled_from([16, 64]),
       bn=st.sampled_from([16, 32]), left=st.integers(0, 400), right=st.sampled_from([-1, 0, 5]))
def test_request_blocks_match_the_window_mask(lq, lk, pf, bm, bn, left, right):
    """With a left window, n_blocks is exactly the key blocks of the last query block under the mask
    (checked by enumerating the mask); without one it is every key block."""
    cfg = SchedulerConfig(num_heads=1, block_m=bm, block_n=bn, pack_factor=pf, window_left=left)
    assert md.request_blocks(lq, lk, cfg) == (-(-lq * pf // bm), _last_block_keys_brute(lq, lk, pf, bm, bn, left, right))
    assert md.request_blocks(lq, lk, SchedulerConfig(1, bm, bn, pack_factor=pf)) == (-(-lq * pf // bm), -(-lk // bn))
    assert md.request_blocks(0, lk, cfg) == (0, -(-lk // bn))   # no query rows: no window to apply


def test_sliding_window_decode_sorts_by_windowed_work():
    """Decode under a 4096-token window (mistral-7b): a context past the window reads 257 key blocks
    of 16 whatever its length, so splits, the split share and the sort key count those.  Keyed by
    the unwindowed length, the 50k-token request took 55 splits of 5 real blocks each and went
    first, and a 6k-token request (257 real blocks) got 9 splits and went after a 41k-token one."""
    ctx = [49948, 2014, 41053, 5939, 300]
    cfg = SchedulerConfig(num_heads=8, block_m=16, block_n=16, pack_factor=4, max_splits=55, num_ctas=1320,
                          window_left=4095)
    real = [md.request_blocks(1, c, cfg)[1] for c in ctx]
    assert real == [257, 126, 257, 257, 19]

    def schedule(c):
        d = md.decode(md.reference_schedule(np.arange(6), None, 5, 5, c, "soa", seqused_k=ctx), "soa", 5)
        order = [int(i) for i in d["batch_idx"]]
        splits = [int(x) & 0xFFFF for x in d["splits_nheads"]]
        return order, splits, [-(-real[i] // s) for i, s in zip(order, splits)]
    assert md.split_share([1] * 5, real, cfg) == -(-11 * sum(real) * 8 // (10 * 1320)) == 7
    assert schedule(cfg) == ([0, 1, 2, 3, 4], [37, 18, 37, 37, 3], [7, 7, 7, 7, 7])
    # the old keys: real blocks per split in walk order 5, 5, 42, 29, 19 (not longest first)
    assert schedule(dataclasses.replace(cfg, window_left=-1)) == ([0, 2, 1, 3, 4], [55, 55, 3, 9, 1],
                                                                   [5, 5, 42, 29, 19])


def test_seqused_k_wins_and_all_empty_guard():
    cfg = SchedulerConfig(num_heads=2, block_m=64, block_n=64, max_splits=8, num_ctas=100)
    a = md.reference_schedule([0, 1, 2], [0, 0, 0], 2, 2, cfg, "aos", seqused_k=[640, 64])
    assert [int(x) & 0xFFFF for x in md.decode(a, "aos", 2)["splits_nheads"]] == [8, 1]
    # all keys empty: no division by zero, one split each, tiles still exist (they write 0 / -inf)
    z = md.reference_schedule([0, 3, 4], [0, 0, 0], 2, 2, cfg, "soa")
    assert md.decode(z, "soa", 2)["total_tiles"] == 2 * 2


def test_bad_arguments():
    with pytest.raises(ValueError, match="capacity"):
        md.buffer_ints(0)
    with pytest.raises(ValueError, match="exceeds capacity"):
        md.reference_schedule([0, 1, 2], [0, 1, 2], 2, 1, SchedulerConfig(1, 64, 64), "soa")
    with pytest.raises(ValueError, match="metadata_layout"):
        md.field_offset("csr", 4, 0, 0)


def test_scheduler_launch_shape():
    """One thread per slot up to 512 slots (at least a warp), one per two above, at most 1024 (8
    slots a thread at the largest capacity); four 4-byte values per slot when the kernel may use
    that much shared memory (sort keys x2 and the staged plans), else only the two key buffers."""
    from kernelgen.kernels.kernel_args import scheduler_launch_shape

    assert scheduler_launch_shape(5, 48 * 1024) == (32, 16 * 8)
    assert scheduler_launch_shape(128, 48 * 1024) == (128, 16 * 128)
    assert scheduler_launch_shape(512, 48 * 1024) == (512, 16 * 512)
    assert scheduler_launch_shape(513, 48 * 1024) == (512, 16 * 516)
    assert scheduler_launch_shape(1000, 48 * 1024) == (512, 16 * 1000)
    assert scheduler_launch_shape(2048, 48 * 1024) == (1024, 16 * 2048)
    assert scheduler_launch_shape(4096, 64 * 1024) == (1024, 16 * 4096)
    assert scheduler_launch_shape(8192, 99 * 1024 - 33424) == (1024, 8 * 8192)
    assert scheduler_launch_shape(8192, 227 * 1024 - 33424) == (1024, 16 * 8192)
    for cap in range(1, 8193, 37):
        threads, _ = scheduler_launch_shape(cap)
        assert threads & (threads - 1) == 0 and 32 <= threads <= 1024 and 8 * threads >= cap


@settings(max_examples=200, deadline=None)
@given(qlens=batches, klens=batches, cfg=configs, thr=st.integers(0, 40), layout=st.sampled_from(["soa", "aos"]))
def test_request_classes_partition_the_tiles(qlens, klens, cfg, thr, layout):
    """A fused launch schedules short-query (<= thr tokens) and long-query requests separately: each
    class gets exactly the tiles its requests would get alone, requests of the other class none."""
    import dataclasses

    batch = min(len(qlens), len(klens))
    qlens, klens = qlens[:batch], klens[:batch]
    capacity = max(1, batch)
    cfg = dataclasses.replace(cfg, sort=True)
    short = dataclasses.replace(cfg, class_min_q=0, class_max_q=thr)
    long_ = dataclasses.replace(cfg, class_min_q=thr + 1)
    for part, keep in ((short, lambda L: L <= thr), (long_, lambda L: L > thr)):
        buf = md.reference_schedule(_cu(qlens), _cu(klens), batch, capacity, part, layout)
        tiles = md.enumerate_tiles(buf, layout, capacity, cfg.num_heads, False)
        assert {b for b, *_ in tiles} == {b for b, L in enumerate(qlens) if keep(L) and L > 0}
        # the kept requests' tiles are those of a batch where the others have no query rows
        alone = md.reference_schedule(_cu([L if keep(L) else 0 for L in qlens]), _cu(klens), batch, capacity,
                                      cfg, layout)
        assert np.array_equal(buf, alone)


def test_even_batch_keeps_request_order_skewed_batch_is_sorted():
    """The sort only runs when the work classes (sort_key + 2) spread past 1/SORT_MIN_SPREAD of the
    largest: 13 or 14 KV blocks a request (classes 15, 16) stay in request order, 1 and 32 blocks
    are ordered longest first."""
    cfg = SchedulerConfig(num_heads=8, block_m=16, block_n=128, pack_factor=4, max_splits=1, num_ctas=132,
                          sort=True)
    even = [1600, 1700, 1650, 1690, 1601]                      # 13 or 14 blocks of 128
    cu_q = np.arange(len(even) + 1, dtype=np.int32)
    d = md.decode(md.reference_schedule(cu_q, None, len(even), 8, cfg, "soa", seqused_k=np.array(even)), "soa", 8)
    keys = [md.sort_key(1, -(-k // 128), 1) for k in even]
    assert sorted(set(keys)) == [13, 14] and not md.sort_needed(min(keys) + 2, max(keys) + 2)
    assert d["batch_idx"][:5].tolist() == [0, 1, 2, 3, 4]
    skewed = [128, 4096, 1600, 1700]
    cu_q = np.arange(len(skewed) + 1, dtype=np.int32)
    d = md.decode(md.reference_schedule(cu_q, None, len(skewed), 8, cfg, "soa", seqused_k=np.array(skewed)), "soa", 8)
    assert d["batch_idx"][:4].tolist() == [1, 3, 2, 0]
    assert md.sort_needed(3, 34) and not md.sort_needed(16, 16) and md.sort_needed(14, 16) is False
    assert md.sort_needed(1, 16)                                # an empty request among equal ones
