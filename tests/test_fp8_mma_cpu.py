"""CPU: the FP8 tensor-core building blocks of the Hopper kernel (templates/common/fp8_mma.cuh,
design variant B of docs/dev/fp8_hopper_design.md; the attention kernel's ``AttentionSpec.fp8_mma``).

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


def byte_perm(x, y, sel):
    """__byte_perm on byte lists: result byte i = (x + y)[nibble i of sel]."""
    src = list(x) + list(y)
    return [src[(sel >> (4 * i)) & 7] for i in range(4)]


def ways(addrs):
    """The bank-conflict ways of one 8-row matrix phase (16 bytes a row): the most rows on one bank."""
    banks = [((a // 4) + w) % 32 for a in addrs for w in range(4)]
    return max(np.bincount(banks))


def vt_split(nb, dv, nw=3):
    """fp8_mma.cuh's split of a block's units (32-key group G x 16-dim chunk C, numbered u = NG C + G)
    over the nw transposing warps: warp w's units, in its order, as (C, G): u in [w NU / nw,
    (w + 1) NU / nw)."""
    ng = nb // 32
    nu = dv // 16 * ng
    return [[(u // ng, u % ng) for u in range(w * nu // nw, (w + 1) * nu // nw)] for w in range(nw)]


def transpose_v8(land, nb, dv, valid, nw=3):
    """fp8_mma.cuh's transpose_v8, lane by lane: ldmatrix.x4.trans (lane l: row address of matrix
    l >> 3; receives, per matrix, b16 column l >> 2 of rows 2 (l & 3) and 2 (l & 3) + 1), the byte
    permutes and stmatrix.x4 (lane l: row address of matrix l >> 3; register m to row l >> 2 of
    matrix m, bytes 4 (l & 3)..), warp w doing vt_split's units: with every key valid through the
    in-place XOR chain of its unrolled share (transpose_v8_full), else the tail loop's direct XOR
    (transpose_v8_tail); both checked against the swizzle computed from scratch.  Returns V^T (99
    where nothing was written) and the worst bank-conflict ways of the ldmatrix and stmatrix
    phases."""
    vt = np.full(-(-nb // 128) * dv * 128, 99, dtype=np.int64)    # whole 128-key column blocks
    worst_ld = worst_st = 0
    for units in vt_split(nb, dv, nw):
        ld_cur, st_cur = [None] * 32, [None] * 32    # the chain's registers, per lane
        prev = None
        for C, G in units:
            ld_addr, st_addr = [], []
            for lane in range(32):
                m, i = lane >> 3, lane & 7
                ld0 = (8 * m + i) * 64 + (((i >> 1) & 3) << 4)
                dl = 2 * i + ((m & 1) ^ (1 if i >= 4 else 0))
                st0 = dl * 128 + (((m >> 1) ^ (dl & 7)) << 4)
                ld_off, st_off = (C >> 2) * (nb * 64) + G * 2048, C * 16 * 128 + (G >> 2) * (dv * 128)
                if valid >= nb:   # xor_in_place from the previous unit's pattern (none before the first)
                    pc, pg = prev if prev else (0, 0)
                    ld_cur[lane] = (ld_cur[lane] if prev else ld0) ^ ((((pc & 3) ^ (C & 3)) << 4) if prev else (C & 3) << 4)
                    st_cur[lane] = (st_cur[lane] if prev else st0) ^ ((((pg & 3) ^ (G & 3)) << 5) if prev else (G & 3) << 5)
                    ld_addr.append(ld_cur[lane] + ld_off)
                    st_addr.append(st_cur[lane] + st_off)
                else:
                    ld_addr.append((ld0 ^ ((C & 3) << 4)) + ld_off)
                    st_addr.append((st0 ^ ((G & 3) << 5)) + st_off)
                # the same as the landing stage's 64-byte swizzle and V^T's 128-byte one, from scratch:
                # key 8m + i of group G, 16-byte column C & 3 of 64-dim block C >> 2; V^T row C 16 + dl
                # of column block G >> 2, 16-byte chunk b = 2 (G & 3) + (m >> 1)
                assert ld_addr[-1] == (C >> 2) * (nb * 64) + (32 * G + 8 * m + i) * 64 + (((C & 3) ^ ((i >> 1) & 3)) << 4)
                b = 2 * (G & 3) + (m >> 1)
                assert st_addr[-1] == (G >> 2) * (dv * 128) + C * 16 * 128 + dl * 128 + ((b ^ (dl & 7)) << 4)
            prev = (C, G)
            for m in range(4):
                worst_ld = max(worst_ld, ways(ld_addr[8 * m:8 * m + 8]))
                worst_st = max(worst_st, ways(st_addr[8 * m:8 * m + 8]))
            regs = []
            for lane in range(32):
                j, t = lane >> 2, lane & 3
                r = []
                for m in range(4):
                    rows = [land[ld_addr[8 * m + 2 * t + e]:ld_addr[8 * m + 2 * t + e] + 16] for e in range(2)]
                    word = [rows[0][2 * j], rows[0][2 * j + 1], rows[1][2 * j], rows[1][2 * j + 1]]
                    left = valid - 32 * G - 2 * t       # transpose_store's tail mask (the tail loop)
                    if valid < nb and left < 32:
                        word = [x if 8 * m + (e >> 1) < left else 0 for e, x in enumerate(word)]
                    r.append(word)
                sa, sb = (0x6420, 0x7531) if j < 4 else (0x7531, 0x6420)
                regs.append([byte_perm(r[0], r[1], sa), byte_perm(r[0], r[1], sb),
                             byte_perm(r[2], r[3], sa), byte_perm(r[2], r[3], sb)])
            for m in range(4):
                for lane in range(32):
                    row = lane >> 2
                    a = st_addr[8 * m + row] + 4 * (lane & 3)
                    assert (vt[a:a + 4] == 99).all(), "written twice"
                    vt[a:a + 4] = regs[lane][m]
    return vt, worst_ld, worst_st


#: (keys a block, head dim) of the FP8 tensor-core kernels heuristics.choose gives (SM90_FP8_MMA_TILES:
#: d 64 and 256 on 128-key blocks, d 128 on 224, 192 or 128 for pages TMA cannot box at 224), and
#: blocks the spec accepts besides (192 / 256 keys at d 64, 256 at d 256)
KERNEL_BLOCKS = [(128, 64), (128, 128), (224, 128), (192, 128), (128, 256), (192, 64), (256, 64), (256, 256)]


@pytest.mark.parametrize("nb,dv", KERNEL_BLOCKS)
def test_vt_units_split_evenly_once_each(nb, dv):
    """The three converter warps share a block's units evenly (sizes differ by at most one: d 256
    21 / 21 / 22, d 128 with 192 keys 16 each) and every unit is done exactly once."""
    split = vt_split(nb, dv)
    sizes = [len(x) for x in split]
    assert max(sizes) - min(sizes) <= 1
    assert sorted(u for x in split for u in x) == [(C, G) for C in range(dv // 16) for G in range(nb // 32)]
    assert sizes == {(128, 256): [21, 21, 22], (192, 128): [16, 16, 16], (224, 128): [18, 19, 19], (128, 128): [10, 11, 11],
                     (128, 64): [5, 5, 6], (192, 64): [8, 8, 8], (256, 64): [10, 11, 11],
                     (256, 256): [42, 43, 43]}[(nb, dv)]
    # the probe kernel's four warps (test_the_fp8_pieces_compile_for_sm_90a) as well
    assert [len(x) for x in vt_split(128, 128, 4)] == [8, 8, 8, 8]


def _landing(V, nb, dv):
    land = np.zeros(nb * dv, dtype=np.int64)      # variant A's landing stage: 64-dim blocks, 64-byte swizzle
    for key in range(nb):
        for d in range(dv):
            land[(d >> 6) * nb * 64 + swz64(key * 64 + (d & 63))] = V[key, d]
    return land


@pytest.mark.parametrize("nb,dv", KERNEL_BLOCKS)
def test_transpose_v8_writes_every_key_once_and_zeroes_keys_past_valid(nb, dv):
    """Every (NK, ND) the kernels use, with every key valid (the unrolled shares) and with tails
    (the tail loop): V^T's positions of the block hold V's keys (relabelled by vt_key), those at or
    past valid zero, each byte written once (the emulation asserts it) and every one written."""
    rng = np.random.default_rng(nb + dv)
    V = rng.integers(1, 99, size=(nb, dv))        # 99: not written
    land = _landing(V, nb, dv)
    for valid in (nb, nb - 1, 70, 33, 1):
        vt, _, _ = transpose_v8(land, nb, dv, valid)
        for p in range(nb):
            key = (p & ~31) + vt_key(p & 31)
            got = [vt[(p >> 7) * dv * 128 + swz128(n * 128 + (p & 127))] for n in range(dv)]
            assert got == (list(V[key]) if key < valid else [0] * dv), (valid, p, key)
        assert (vt != 99).sum() == nb * dv      # the positions of the block, nothing else


@pytest.mark.parametrize("nb,dv", [(128, 128), (256, 128), (128, 64), (128, 256), (192, 128), (224, 128)])
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
    land = _landing(V, nb, dv)
    vt, ways_ld, ways_st = transpose_v8(land, nb, dv, nb)
    print(f"transpose_v8 nb {nb} dv {dv}: ldmatrix {ways_ld}-way, stmatrix {ways_st}-way")
    assert ways_ld == 1 and ways_st == 1
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
  transpose_v8<128, 128, 4>(sb + 32768, sb + 49152, threadIdx.x, valid);
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


def _sass_instructions(text: str):
    """nvdisasm text -> (instructions, {label: index of the instruction it marks})."""
    import re
    ins, labels, pending = [], {}, []
    for line in text.splitlines():
        m = re.match(r"\s*\.(L_x_\d+):", line)
        if m:
            pending.append(m.group(1))
            continue
        m = re.match(r"\s+/\*([0-9a-f]{4,})\*/\s+(.*?);", line)
        if m:
            for lab in pending:
                labels[lab] = len(ins)
            pending = []
            ins.append(m.group(2).strip())
    return ins, labels


def transpose_unit_loops(text: str) -> list:
    """The innermost loops of a kernel's SASS (``nvdisasm`` text) that hold an ``LDSM.16.MT88.4``
    (transpose_v8's tail loop), each as its instructions from the branch target to the backward
    branch."""
    import re
    ins, labels = _sass_instructions(text)
    loops = []
    for k, x in enumerate(ins):
        m = re.search(r"BRA\s+`\(\.(L_x_\d+)\)", x)
        if m and labels.get(m.group(1), k + 1) <= k:
            body = ins[labels[m.group(1)]:k + 1]
            if any("LDSM.16.MT88.4" in b for b in body):
                loops.append(body)
    return [b for b in loops if not any(len(o) < len(b) and set(o) <= set(b) for o in loops)]


def transpose_shares(text: str) -> list:
    """The straight-line stretches of a kernel's SASS (cut at branches and branch targets) with more
    than one ``LDSM.16.MT88.4``: transpose_v8's unrolled warp shares.  Each as a dict: ins (its
    instructions), ldsm, trips (shared-memory round trips: an instruction that touches a register of
    an ldmatrix still pending waits for every pending one), local (LDL / STL in it)."""
    import re
    ins, labels = _sass_instructions(text)
    targets = {labels[m.group(1)] for x in ins for m in re.finditer(r"\.(L_x_\d+)", x) if m.group(1) in labels}
    cuts = sorted({0, len(ins)} | targets | {k + 1 for k, x in enumerate(ins) if re.search(r"\b(BRA|BRX|EXIT)\b", x)})
    out = []
    for lo, hi in zip(cuts, cuts[1:]):
        body = ins[lo:hi]
        if sum("LDSM.16.MT88.4" in x for x in body) < 2:
            continue
        pending, trips = set(), 0
        for x in body:
            regs = {int(r) for r in re.findall(r"\bR(\d+)\b", x)}
            if regs & pending:
                trips, pending = trips + 1, set()
            if x.startswith("LDSM"):
                r0 = int(re.search(r"LDSM\S*\s+R(\d+)", x).group(1))
                pending |= set(range(r0, r0 + 4))
        out.append(dict(ins=len(body), ldsm=sum("LDSM" in x for x in body), trips=trips,
                        local=sum(bool(re.search(r"\b(LDL|STL)", x)) for x in body)))
    return out


@pytest.mark.parametrize("d,mask,paged,splits", [(64, "causal", False, 0), (128, "none", True, 3), (128, "causal", False, 0),
                                                  (128, "local", True, 3), (256, "causal", False, 0)])
def test_the_dispatched_tensor_core_variants_compile(d, mask, paged, splits):
    """The FP8 tensor-core variants ``heuristics.choose`` gives an e4m3 q (d 64: 192 x 128 tiles in
    three consumer warpgroups at 56/152 registers; d 128 paged with forced splits; d 256: 128-key
    blocks at 24/240) compile for
    sm_90a with QGMMA for both GEMMs, ldmatrix.trans / stmatrix for V^T and the e4m3 packing of P;
    no spills, except at d 256 the transposing producer warps' block-loop state (at most 44 bytes
    stored, all after the producer's register release: the consumers spill nothing; none in the
    transposer's code) and at d 128 without a mask one word (224 keys with the P V wait pinned).  The V^T transpose: three straight-line warp shares of vt_split's sizes,
    about 8 instructions a unit (ldmatrix, four byte permutes, stmatrix, XORs; the chunk loop of
    before issued ~17 a unit at d 256), two ldmatrix in flight above head dim 128 (KG_VT_BATCH 2: one
    round trip per two units; 1 up to d 128, where it measured faster), and one tail loop."""
    from kernelgen.jit import sass
    from kernelgen.selection import heuristics
    v = heuristics.choose("sm_90a", "bf16", d, d, num_heads_q=16, num_heads_kv=4, mask=mask, max_seqlen_q=4096,
                          max_seqlen_k=4096, paged=paged, page_size=16 if paged else 0, num_splits=splits,
                          kv_dtype="e4m3", q_dtype="e4m3")
    a = v.attention
    # d 128: 224-key blocks
    assert a.fp8_mma and a.tile.block_n == (224 if d == 128 else 128)
    assert a.tile.num_warps == (12 if d == 64 else 8)
    assert (v.combine is not None) == bool(splits)
    res = compiler.compile_cubin(render.render(a), "sm_90a", compiler.default_options("sm_90a"), a.entry)
    r = res.resources
    text = sass.disassemble(res.cubin, sass.find_nvdisasm())
    assert f"QGMMA.64x{a.tile.block_n}x32.F32.E4M3.E4M3" in text and f"QGMMA.64x{d}x32.F32.E4M3.E4M3" in text
    assert "LDSM.16.MT88.4" in text and "STSM.16.M88.4" in text and "F2FP.SATFINITE.E4M3.F32" in text
    shares = transpose_shares(text)
    assert sorted(x["ldsm"] for x in shares) == sorted(len(u) for u in vt_split(a.tile.block_n, d)), shares
    batch = 2 if d > 128 else 1
    assert all(x["ins"] <= 10 * x["ldsm"] and x["trips"] == -(-x["ldsm"] // batch) and not x["local"] for x in shares), shares
    loops = transpose_unit_loops(text)
    assert len(loops) == 1, [len(b) for b in loops]
    assert not any("LDL" in x or "STL" in x for b in loops for x in b)
    if d <= 128 and mask != "none":
        assert r["spill_stores"] == 0 and r["spill_loads"] == 0, r
    elif d <= 128:   # 224 keys without a mask, the P V wait pinned: one word, reloaded outside the block loops
        assert r["spill_stores"] <= 4 and r["spill_loads"] <= 12, r
    else:
        assert r["spill_stores"] <= 44 and r["spill_loads"] <= 64, r
        lines = text.splitlines()
        release = next(i for i, x in enumerate(lines) if "USETMAXREG.DEALLOC" in x)
        assert all(i > release for i, x in enumerate(lines) if "STL" in x or "LDL" in x)


@pytest.mark.parametrize("block_n", [192, 224])
def test_key_blocks_not_a_multiple_of_128_compile(block_n):
    """Key blocks that are not a multiple of 128 (224 at head dim 128, as FlashAttention-3's FP8
    blocks there, and 192): V^T keeps whole 128-key column blocks (the second one partly used: 64 or
    96 keys; the smem formula counts them), Q K^T is one n{block_n} wgmma, P V block_n / 32 k32 steps;
    compiles for sm_90a without spills (causal, 40 / 232 registers), and 96 or 144 keys (not a
    multiple of 32, or fewer than 128) are refused."""
    from kernelgen.jit import sass
    from kernelgen.kernels.spec import AttentionSpec, TileConfig
    a = AttentionSpec("sm_90a", "bf16", 128, 128, "causal", "soa", TileConfig(128, block_n, 8, 2, 1), mainloop="sm90a",
                      sm90_opts="p", kv_dtype="e4m3", fp8_mma=True)
    assert a.smem_bytes() == 128 * 128 + 2 * 128 * 256 + a.land_stages * block_n * 256 + 256 + 1024
    res = compiler.compile_cubin(render.render(a), "sm_90a", compiler.default_options("sm_90a"), a.entry)
    assert res.resources["spill_stores"] == 0 and res.resources["spill_loads"] == 0, res.resources
    text = sass.disassemble(res.cubin, sass.find_nvdisasm())
    assert f"QGMMA.64x{block_n}x32.F32.E4M3.E4M3" in text and "QGMMA.64x128x32.F32.E4M3.E4M3" in text
    for bad in (96, 144):
        with pytest.raises(ValueError, match="key blocks of 128 or more"):
            AttentionSpec("sm_90a", "bf16", 128, 128, "causal", "soa", TileConfig(128, bad, 8, 2, 1), mainloop="sm90a",
                          sm90_opts="p", kv_dtype="e4m3", fp8_mma=True)


def test_fp8_mma_is_refused_outside_the_hopper_mainloop():
    """The FP8 tensor-core GEMMs exist in the sm90a mainloop only: on the sm80 mainloop such a spec
    would render the sm80 FP8 register tile (S columns permuted by fp8_key) with the FP8 tensor-core
    mask and softmax, so it is refused."""
    from kernelgen.kernels.spec import AttentionSpec, TileConfig
    with pytest.raises(ValueError, match="fp8_mma"):
        AttentionSpec("sm_90a", "bf16", 128, 128, "causal", "soa", TileConfig(16, 16, 1, 2, 1), kv_dtype="e4m3",
                      fp8_mma=True)


def test_the_hoisted_transposer_lane_constants_compile(monkeypatch):
    """KG_VT_HOIST (an experiment for the next A/B, KERNELGEN_DEFINES): the transposer's lane constants
    computed once a kernel (``vt_lane``) instead of once a block.  At d 128 (224 keys, 40 producer
    registers) it compiles with the same LDSM / STSM units and at most one spilled word (the TMA
    warp's tile-loop bound, reloaded once a tile), and the transposing warps' path from the block's
    V wait to its first ldmatrix is shorter."""
    import re

    from kernelgen.jit import sass
    from kernelgen.selection import heuristics
    v = heuristics.choose("sm_90a", "bf16", 128, 128, num_heads_q=32, num_heads_kv=8, mask="causal",
                          max_seqlen_q=16384, max_seqlen_k=16384, kv_dtype="e4m3", q_dtype="e4m3")
    a = v.attention
    setup = {}
    for defs in ("", "KG_VT_HOIST"):
        monkeypatch.setenv("KERNELGEN_DEFINES", defs)
        res = compiler.compile_cubin(render.render(a), "sm_90a", compiler.default_options("sm_90a"), a.entry)
        ins = [m.group(1).strip() for m in re.finditer(r'/\*[0-9a-f]+\*/\s+([^;]*);',
                                                       sass.disassemble(res.cubin, sass.find_nvdisasm()))]
        prod = ins[next(i for i, x in enumerate(ins) if "USETMAXREG.DEALLOC" in x):]
        assert sum("LDSM.16.MT88.4" in x for x in prod) == sum("STSM.16.M88.4" in x for x in prod) == 57
        first = next(i for i, x in enumerate(prod) if "LDSM" in x)
        waits = [i for i, x in enumerate(prod[:first]) if "SYNCS.PHASECHK" in x]
        setup[defs] = first - waits[-2]
        assert res.resources["spill_stores"] <= (4 if defs else 0), (defs, res.resources)
    assert setup["KG_VT_HOIST"] < setup[""] - 20, setup


@pytest.mark.parametrize("mask", ["causal", "none"])
def test_d64_on_160_key_blocks_compiles_without_spills_at_32_160_registers(monkeypatch, mask):
    """An experiment for the next A/B (``tile_ab.py ... fp8q:64:192:160:2:p:REGS_FP8_MMA_SMALL=32/160``):
    FlashAttention-3's FP8 tile at head dim 64 is 192 x 160.  Ours at 160 keys spills 96 bytes with
    the 12-warp split of today (56 / 152) and none at 32 / 160, where the 128-key kernels stay free
    of spills too (NVRTC 13.0; docs/dev/perf-log.md, "Thirty-fourth session")."""
    import dataclasses

    from kernelgen.kernels.spec import AttentionSpec
    from kernelgen.selection import heuristics
    monkeypatch.setattr(AttentionSpec, "SM90_REGS_FP8_MMA_SMALL", {8: (56, 224), 12: (32, 160)})
    a = heuristics.choose("sm_90a", "bf16", 64, 64, num_heads_q=32, num_heads_kv=8, mask=mask, max_seqlen_q=2048,
                          max_seqlen_k=2048, kv_dtype="e4m3", q_dtype="e4m3", sm90_opts="p").attention
    a = dataclasses.replace(a, tile=dataclasses.replace(a.tile, block_n=160))
    assert a.fp8_mma and a._sm90_regs() == {"producer_regs": 32, "consumer_regs": 160}
    res = compiler.compile_cubin(render.render(a), "sm_90a", compiler.default_options("sm_90a"), a.entry)
    assert res.resources["spill_stores"] == 0 and res.resources["spill_loads"] == 0, res.resources
