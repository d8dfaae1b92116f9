"""Split-KV bound, pack-GQA and tile choice against hand-worked examples (CPU)."""
import pytest

from kernelgen.selection import heuristics as H


def test_fa3_worked_example_b_static_split():
    """shared/research/fa3_scheduler.md 3.8: 8 packed heads, 1 m-block, N = 47 blocks, 132 SMs -> S = 15."""
    assert H.num_splits_heuristic(total_mblocks=8, n_blocks=47, num_ctas=132, max_splits=128) == 15


def test_split_rules():
    # enough tiles to fill 80 % of the CTAs: no split
    assert H.num_splits_heuristic(total_mblocks=256, n_blocks=1000, num_ctas=264) == 1
    # too few key blocks to split
    assert H.num_splits_heuristic(total_mblocks=1, n_blocks=4, num_ctas=264) == 1
    # one tile, long context: efficiency rises until s tiles fill the CTAs; capped by max_splits
    assert H.num_splits_heuristic(total_mblocks=1, n_blocks=10000, num_ctas=64, max_splits=128) == 55
    assert H.num_splits_heuristic(total_mblocks=1, n_blocks=10000, num_ctas=660, max_splits=64) == 55
    # the bound never exceeds the key blocks
    assert H.num_splits_heuristic(total_mblocks=1, n_blocks=6, num_ctas=660) <= 6


def test_pack_gqa_choice_hand_worked():
    """FA3's rule of thumb (7.2): decode with 4 query heads per KV head packs, long prefill does not."""
    assert H.default_pack_gqa(qpk=4, max_seqlen_q=1) is True
    assert H.default_pack_gqa(qpk=4, max_seqlen_q=1000) is False
    assert H.default_pack_gqa(qpk=1, max_seqlen_q=1) is False     # nothing to pack
    assert H.default_pack_gqa(qpk=8, max_seqlen_q=8) is True      # speculative decode: 64 rows
    assert H.default_pack_gqa(qpk=8, max_seqlen_q=9) is False


def test_tile_classes_and_split_variants():
    dec = H.choose("sm_90a", "bf16", 128, 128, num_heads_q=32, num_heads_kv=8, mask="causal", max_seqlen_q=1,
                   max_seqlen_k=32768, paged=True)
    assert dec.attention.pack_gqa and dec.attention.tile.block_m == 16 and dec.attention.split
    assert dec.combine is not None and 1 < dec.max_splits <= H.MAX_AUTO_SPLITS and not dec.forced_splits
    pre = H.choose("sm_90a", "bf16", 128, 128, num_heads_q=32, num_heads_kv=8, mask="causal", max_seqlen_q=4096,
                   max_seqlen_k=4096, mainloop="sm80")
    assert not pre.attention.pack_gqa and pre.attention.tile.block_m == 128 and pre.combine is None
    assert pre.attention.tile.num_stages == 3          # the faster 3-stage tile when nothing else is live
    hop = H.choose("sm_90a", "bf16", 128, 128, num_heads_q=32, num_heads_kv=8, mask="causal", max_seqlen_q=4096,
                   max_seqlen_k=4096)                  # automatic: the Hopper path for prefill on sm_90a
    assert hop.attention.mainloop == "sm90a" and hop.attention.tile == H.SM90_TILE and hop.combine is None
    forced = H.choose("sm_90a", "bf16", 128, 128, num_heads_q=32, num_heads_kv=8, mask="causal", max_seqlen_q=4096,
                      max_seqlen_k=4096, num_splits=4, mainloop="sm80")
    assert forced.forced_splits and forced.max_splits == 4 and forced.attention.tile.num_stages == 2
    forced = H.choose("sm_90a", "bf16", 128, 128, num_heads_q=32, num_heads_kv=8, mask="causal", max_seqlen_q=4096,
                      max_seqlen_k=4096, num_splits=4)   # automatic mainloop: the Hopper kernel splits too
    assert forced.forced_splits and forced.max_splits == 4 and forced.attention.mainloop == "sm90a"
    assert forced.attention.split and forced.attention.tile == H.SM90_TILE and forced.combine is not None
    mid = H.choose("sm_90a", "bf16", 128, 128, num_heads_q=32, num_heads_kv=8, max_seqlen_q=8, max_seqlen_k=4096)
    assert mid.attention.pack_gqa and mid.attention.tile.block_m == 64
    with pytest.raises(ValueError, match="num_splits"):
        H.choose("sm_90a", "bf16", 128, 128, num_heads_q=8, num_heads_kv=8, max_seqlen_q=1, max_seqlen_k=1, num_splits=200)
    with pytest.raises(ValueError, match="num_heads_q"):
        H.choose("sm_90a", "bf16", 128, 128, num_heads_q=6, num_heads_kv=4, max_seqlen_q=1, max_seqlen_k=1)


def test_forced_splits_bounded_by_key_blocks():
    """A forced split count larger than the keys' blocks only sizes the partials for what can run."""
    v = H.choose("sm_90a", "bf16", 128, 128, num_heads_q=32, num_heads_kv=8, max_seqlen_q=32768, max_seqlen_k=100,
                 num_splits=128)
    assert v.forced_splits and v.max_splits == -(-100 // v.attention.tile.block_n)


def test_decode_split_bound_one_kv_head():
    """One KV head of 8 query heads a GPU (llama3-70b over 8 GPUs): the FA3 rule's 55 splits are
    raised to 255 for 8 x 128 K and 32 requests (the partials: 4 x 8 x rows x 129 bytes a split),
    to 127 for 128 requests (64 MiB of partials); llama3-8b's 32 query heads at 128 requests keep
    55 (a split's partials of 128 rows take 2.1 MB); no split stays no split; unknown rows: as is."""
    def bound(hq, hkv, rows, maxk=131072):
        return H.choose("sm_90a", "bf16", 128, 128, num_heads_q=hq, num_heads_kv=hkv, mask="causal", max_seqlen_q=1,
                        max_seqlen_k=maxk, paged=True, total_q=rows).max_splits

    assert bound(8, 1, 0) == 55                          # the FA3 rule alone
    assert bound(8, 1, 8) == bound(8, 1, 32) == H.MAX_DECODE_SPLITS == 255
    assert bound(8, 1, 128) == (64 << 20) // (4 * 8 * 128 * 129) == 127
    assert bound(32, 8, 128) == 55
    assert bound(8, 1, 8, maxk=1600) == 100              # never more than the key blocks
    assert bound(8, 1, 8, maxk=64) == 1                  # 4 key blocks: no split, no combine
    assert H.decode_split_bound(1, 1000, total_q=8, num_heads_q=8, head_dim_v=128) == 1
    assert H.MAX_DECODE_SPLITS < 256                     # row_splits keeps the count in 8 bits
    # other tiles keep the FA3 rule: a 64-query-row call (mid tile, 4 warps) splits 29 ways
    # (it would take 254 under the decode bound)
    mid = H.choose("sm_90a", "bf16", 128, 128, num_heads_q=8, num_heads_kv=1, mask="causal", max_seqlen_q=64,
                   max_seqlen_k=131072, mainloop="sm80", total_q=64)
    assert mid.attention.tile.num_warps > 1 and 1 < mid.max_splits <= H.MAX_AUTO_SPLITS
