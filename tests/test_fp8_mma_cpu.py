"""CPU: the FP8 tensor-core building blocks of the Hopper kernel (templates/common/fp8_mma.cuh,
design variant B of docs/dev/fp8_hopper_design.md; not wired into the attention kernel yet).

An emulation of the fragments shows that P packed by ``pack_p8`` (from S's fp32 accumulator
layout) as the k32 A operand, times V^T written by ``transpose_v8`` (keys relabelled by
``vt_key``) as the K-major B operand, is exactly P V: the PTX ISA's register layouts of
wgmma m64nNk32 with 8-bit operands (A: thread (g, t) holds rows g / g + 8, k 4t..4t+3 and
16+4t..16+4t+3, byte i = k + i) and of the fp32 accumulators (rows g / g + 8, columns 8j + 2t,
8j + 2t + 1).  NVRTC then compiles the pieces, with the k32 wgmma forms, for sm_90a."""
import numpy as np
import pytest

from kernelgen.jit import compiler, render


def vt_key(p: int) -> int:
    """fp8_mma.cuh's vt_key."""
    h, t, e = p >> 4, (p >> 2) & 3, p & 3
    return 16 * h + 8 * (e >> 1) + 2 * t + (e & 1)


def swz128(addr: int) -> int:
    return addr ^ ((addr >> 3) & 0x70)


def swz64(addr: int) -> int:
    return addr ^ ((addr >> 3) & 0x30)


def test_vt_key_is_a_permutation_matching_the_accumulators():
    assert sorted(vt_key(p) for p in range(32)) == list(range(32))
    for t in range(4):          # a thread's keys in the group: its accumulator columns
        held = {8 * j + 2 * t + e for j in range(4) for e in range(2)}
        assert {vt_key(p) for p in list(range(4 * t, 4 * t + 4)) + list(range(16 + 4 * t, 16 + 4 * t + 4))} == held


def pack_p8(s_frag):
    """pack_p8 on one thread's accumulators s_frag[j][e] (NB/8 slices): [group][register][byte]."""
    nb = len(s_frag) * 8
    out = []
    for i in range(nb // 32):
        regs = []
        for r in range(2):
            a, b = s_frag[4 * i + 2 * r], s_frag[4 * i + 2 * r + 1]
            regs.append([a[0], a[1], b[0], b[1]])
            regs.append([a[2], a[3], b[2], b[3]])
        out.append(regs)
    return out


@pytest.mark.parametrize("nb,dv", [(128, 128), (256, 128), (128, 64), (128, 256)])
def test_packed_p_times_transposed_v_is_p_v(nb, dv):
    rng = np.random.default_rng(nb)
    P = rng.integers(-4, 5, size=(16, nb)).astype(np.float64)      # one warp's 16 rows (exact values)
    V = rng.integers(-4, 5, size=(nb, dv)).astype(np.float64)
    # the accumulator layout of S (= P here): thread 4g + t, slice j, element e
    acc = {(g, t): [[P[g, 8 * j + 2 * t], P[g, 8 * j + 2 * t + 1], P[g + 8, 8 * j + 2 * t], P[g + 8, 8 * j + 2 * t + 1]]
                    for j in range(nb // 8)] for g in range(8) for t in range(4)}
    # A operand as the hardware reads it: row, k -> value
    A = np.full((16, nb), np.nan)
    for (g, t), frag in acc.items():
        for i, regs in enumerate(pack_p8(frag)):
            for r, (row, k0) in enumerate(((g, 4 * t), (g + 8, 4 * t), (g, 16 + 4 * t), (g + 8, 16 + 4 * t))):
                for byte in range(4):
                    A[row, 32 * i + k0 + byte] = regs[r][byte]
    assert not np.isnan(A).any()
    # V^T as transpose_v8 writes it (position p of the block <- key (p & ~31) + vt_key(p & 31))
    land = np.zeros(nb * dv, dtype=np.int64)      # variant A's landing stage: 64-dim blocks, 64-byte swizzle
    for key in range(nb):
        for d in range(dv):
            land[(d >> 6) * nb * 64 + swz64(key * 64 + (d & 63))] = V[key, d]
    vt = np.full(nb // 128 * dv * 128, 99, dtype=np.int64)
    load_banks, store_banks = {}, {}
    for u in range((nb // 4) * (dv // 4)):
        lane, step = u & 31, u >> 5
        pq, dq = (step % (nb // 16)) * 4 + (lane & 3), (step // (nb // 16)) * 8 + (lane >> 2)
        p0, d0 = 4 * pq, 4 * dq
        w = []
        for e in range(4):
            key = (p0 & ~31) + vt_key((p0 & 31) + e)
            c = (d0 & 63) >> 4
            a = (d0 >> 6) * (nb * 64) + key * 64 + (((c ^ ((key >> 1) & 3)) << 4) | (d0 & 15))
            assert a == (d0 >> 6) * nb * 64 + swz64(key * 64 + (d0 & 63))
            w.append(land[a:a + 4])
            load_banks.setdefault((step, e), []).append((a // 4) % 32)
        for i in range(4):
            row = d0 + i
            cb, b = p0 >> 7, p0 & 127
            a = cb * (dv * 128) + row * 128 + ((((b >> 4) ^ (row & 7)) << 4) | (b & 15))
            assert a == cb * dv * 128 + swz128(row * 128 + b)
            vt[a:a + 4] = [w[e][i] for e in range(4)]
            store_banks.setdefault((step, i), []).append((a // 4) % 32)
    # every unit written once; bank conflicts of a warp's loads and stores (ways: the most threads
    # on one bank)
    assert (vt != 99).all()
    ways_ld = max(max(np.bincount(b)) for b in load_banks.values())
    ways_st = max(max(np.bincount(b)) for b in store_banks.values())
    print(f"transpose_v8 nb {nb} dv {dv}: loads {ways_ld}-way, stores {ways_st}-way")
    assert ways_ld <= 2 and ways_st <= 4
    # B operand (K-major, k = position): B[p][n] read back through the 128-byte swizzle
    B = np.array([[vt[(p >> 7) * dv * 128 + swz128(n * 128 + (p & 127))] for n in range(dv)] for p in range(nb)])
    np.testing.assert_array_equal(A @ B, P @ V)


def _source():
    body = """
{% include "common/ptx.cuh" %}
{% set wgmma_ss_shapes = [] %}{% set wgmma_rs_shapes = [] %}
{% set wgmma8_ss_shapes = [(128, "e4m3", "e4m3"), (128, "e4m3", "e5m2")] %}
{% set wgmma8_rs_shapes = [(128, "e4m3", "e4m3")] %}
{% include "common/wgmma.cuh" %}
{% include "common/fp8_mma.cuh" %}
extern "C" __global__ void __launch_bounds__(128, 1) kg_fp8_mma_probe(const float* in, float* out, int valid) {
  extern __shared__ __align__(1024) unsigned char smem[];
  const u32 sb = smem_addr(smem);
  float s[1][16][4];
  float o[1][16][4];
  for (int j = 0; j < 16; ++j) for (int e = 0; e < 4; ++e) o[0][j][e] = 0.f;
  wgmma_fence();
  for (int kk = 0; kk < 4; ++kk)
    wgmma_ss8_n128_e4m3_e4m3(&s[0][0][0], wgmma_desc(sb + kk * 32, 16, 1024), wgmma_desc(sb + 16384 + kk * 32, 16, 1024), kk);
  wgmma_commit();
  wgmma_wait<0>();
  u32 pa[4][4];
  pack_p8<128>(s, pa);
  transpose_v8<128, 128>(sb + 32768, sb + 49152, threadIdx.x, 128, valid);
  asm volatile("fence.proxy.async.shared::cta;\\n" ::: "memory");
  __syncthreads();
  wgmma_fence();
  for (int i = 0; i < 4; ++i) wgmma_rs8_n128_e4m3_e4m3(&o[0][0][0], pa[i], wgmma_desc(sb + 32768 + i * 32, 16, 1024));
  wgmma_commit();
  wgmma_wait<0>();
  for (int j = 0; j < 16; ++j) for (int e = 0; e < 4; ++e) out[(threadIdx.x * 16 + j) * 4 + e] = o[0][j][e];
}
"""
    return render.environment().from_string(body).render(mma_type="bf16")


def test_the_fp8_pieces_compile_for_sm_90a():
    """The k32 wgmma forms (e4m3 x e4m3 and x e5m2), pack_p8 and transpose_v8 in one probe kernel:
    NVRTC accepts them for sm_90a, no spills, and the SASS has the FP8 tensor-core instruction
    (QGMMA 64x128x32 e4m3) and the packed e4m3 conversion (F2FP ... E4M3)."""
    from kernelgen.jit import sass
    res = compiler.compile_cubin(_source(), "sm_90a", compiler.default_options("sm_90a"), "kg_fp8_mma_probe")
    r = res.resources
    assert r["spill_stores"] == 0 and r["spill_loads"] == 0, r
    nvd = sass.find_nvdisasm()
    assert nvd is not None, "nvdisasm is needed: pip install nvidia-cuda-nvdisasm (the test extra)"
    text = sass.disassemble(res.cubin, nvd)
    assert "QGMMA.64x128x32.F32.E4M3.E4M3" in text
    assert "F2FP.SATFINITE.E4M3.F32" in text
