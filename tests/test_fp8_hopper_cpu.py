"""CPU: FP8 K/V on the Hopper kernel (templates/attention/mainloop_sm90.cuh, producer_loop_convert):
the dispatcher's FP8 tiles compile for sm_90a without spills, and an emulation of the landing
stage's layout (TMA's 64-byte swizzle) and of ``convert_block``'s chunk walk shows that every 16-bit
chunk of the ring slot (128-byte swizzle, what the wgmma descriptors read) receives exactly the
right 16 bytes, and that the eight threads of each 16-byte shared-memory phase touch eight distinct
bank groups on both sides."""
import itertools

import numpy as np
import pytest

from kernelgen.jit import compiler, render
from kernelgen.selection import heuristics

NCONV = 96   # variant_sm90.cuh: producer warps 1-3


def swz64(addr: int) -> int:
    """TMA's / CUTLASS's 64-byte swizzle (Swizzle<2,4,3>): address bits 7-8 into bits 4-5."""
    return addr ^ ((addr >> 3) & 0x30)


def swz128(addr: int) -> int:
    """The 128-byte swizzle (Swizzle<3,4,3>): address bits 7-9 into bits 4-6."""
    return addr ^ ((addr >> 3) & 0x70)


def convert_walk(bn: int, nh: int, unroll: int = 1):
    """convert_block's (thread, h, cc, r) per 16-byte FP8 chunk, in issue order per thread, with
    CONV_UNROLL = ``unroll`` chunks a loop trip (c0 += NCONV * unroll, chunk c0 + u * NCONV, the
    trip's chunks past the end skipped)."""
    chunks = nh * bn * 4
    for tid in range(NCONV):
        it = 0
        for c0 in range(tid, chunks, NCONV * unroll):
            for u in range(unroll):
                c = c0 + u * NCONV
                if c >= chunks:
                    break
                h, rem = divmod(c, bn * 4)
                cc, r = divmod(rem, bn)
                yield tid, it, h, cc, r
                it += 1


@pytest.mark.parametrize("unroll,valid", [(1, None), (2, None), (2, 37), (1, 37), (2, 1)])
@pytest.mark.parametrize("bn,d", [(128, 128), (128, 64), (64, 256), (64, 192), (128, 96)])
def test_the_conversion_walk_fills_the_ring_slot_exactly(bn, d, unroll, valid):
    """... with one or two chunks a trip (CONV_UNROLL: 2 at head dim 128) and a last block whose
    rows >= valid (keys past the request's end) are written as zeros, not read."""
    valid = bn if valid is None else valid
    dp = -(-d // 64) * 64
    nh = dp // 64
    rng = np.random.default_rng(bn + d)
    logical = rng.integers(0, 256, size=(bn, dp), dtype=np.uint8)   # the block's FP8 bytes (key, head dim)
    logical[:, d:] = 0                                                # columns past the head dim: TMA zero fill
    land = np.zeros(nh * bn * 64, dtype=np.uint8)                     # TMA: column blocks of bn rows x 64 bytes
    for h, r, c in itertools.product(range(nh), range(bn), range(4)):
        addr = h * bn * 64 + r * 64 + 16 * c
        land[swz64(addr):swz64(addr) + 16] = logical[r, 64 * h + 16 * c: 64 * h + 16 * c + 16]
    ring = np.full(nh * bn * 128 // 2, -1, dtype=np.int32)            # 16-bit elements, as their FP8 code
    writes = np.zeros_like(ring)
    phases = {}
    for tid, it, h, cc, r in convert_walk(bn, nh, unroll):
        src = h * bn * 64 + r * 64 + ((cc ^ ((r >> 1) & 3)) << 4)     # the template's read address
        assert src == swz64(h * bn * 64 + r * 64 + 16 * cc)
        vals = land[src:src + 16] if r < valid else np.zeros(16, dtype=np.uint8)   # (x = 0: FP8 +0)
        row = h * bn * 128 + r * 128
        for half in range(2):
            dst = row + (((2 * cc + half) ^ (r & 7)) << 4)             # the template's write address
            assert dst == swz128(row + 16 * (2 * cc + half))
            ring[dst // 2: dst // 2 + 8] = vals[8 * half: 8 * half + 8]
            writes[dst // 2: dst // 2 + 8] += 1
            phases.setdefault((it, tid // 8, half), []).append((src // 16 % 8, dst // 16 % 8))
    assert (writes == 1).all(), "every 16-bit element written exactly once"
    for h, r, j in itertools.product(range(nh), range(bn), range(8)):  # read back through the 128-byte swizzle
        a = swz128(h * bn * 128 + r * 128 + 16 * j) // 2
        want = logical[r, 64 * h + 8 * j: 64 * h + 8 * j + 8] if r < valid else 0
        assert (ring[a:a + 8] == want).all()
    for key, groups in phases.items():                                 # 8 threads a phase: distinct bank groups
        if len(groups) == 8:
            assert len({g[0] for g in groups}) == 8 and len({g[1] for g in groups}) == 8, key


@pytest.mark.parametrize("d,dv", [(64, 64), (96, 96), (128, 128), (192, 192), (192, 128), (256, 256)])
def test_the_hopper_fp8_tiles_compile_without_spills(d, dv):
    """The dispatcher's Hopper FP8 spec of each head-dim pair, with a window, soft-cap and split-KV
    (the heaviest state), e4m3 into bf16; paged at the head dims that take pages."""
    v = heuristics.choose("sm_90a", "bf16", d, dv, num_heads_q=32, num_heads_kv=8, mask="local", softcap=True,
                          max_seqlen_q=4096, max_seqlen_k=4096, num_splits=3, mainloop="sm90a", kv_dtype="e4m3",
                          paged=d == dv, page_size=64)
    spec = v.attention
    assert spec.kv_dtype == "e4m3" and spec.split and spec.land_stages >= 1
    assert spec.smem_bytes() <= spec.SM90_SMEM_LIMIT
    src = render.render(spec)
    assert "producer_loop_convert(p, md" in src and "constexpr bool FP8 = true" in src
    r = compiler.compile_cubin(src, spec.arch, compiler.default_options(spec.arch), spec.name).resources
    assert r["spill_stores"] == 0 and r["spill_loads"] == 0 and r["stack_frame"] == 0, (spec.name, r)
