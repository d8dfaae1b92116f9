"""CPU: FP8 converted in registers (``AttentionSpec.fp8_in_registers``, FP8_REGS in
templates/attention/mainloop_sm80.cuh): which tiles take it, their shared memory and source, and
an emulation of the lanes' fragments (mma.m16n8k16's layouts, PTX ISA "Matrix fragments for
mma.m16n8k16") showing that the permuted head-dim order of Q and K, the permuted key order inside a
block (``fp8_key``) and the permuted O columns of the epilogue give exactly Q K^T and P V."""
import dataclasses
import re

import numpy as np
import pytest

from kernelgen.jit import compiler, render, sass
from kernelgen.kernels.spec import AttentionSpec, TileConfig
from sass_loops import shortest_loop

DECODE = AttentionSpec("sm_90a", "bf16", 128, 128, "causal", "soa", TileConfig(16, 16, 1, 2, 8), True, True, True,
                       kv_dtype="e4m3")


def fp8_key(c: int) -> int:
    """templates/attention/mainloop_sm80.cuh's fp8_key: the key (inside a 16-key block) of S's column c."""
    return 4 * ((c & 7) >> 1) + 2 * (c >> 3) + (c & 1)


def test_which_tiles_convert_in_registers():
    assert DECODE.fp8_in_registers
    assert not dataclasses.replace(DECODE, kv_dtype="").fp8_in_registers
    assert not dataclasses.replace(DECODE, alibi=True).fp8_in_registers            # ALiBi reads key indices
    kt = dataclasses.replace(DECODE, tile=TileConfig(8, 16, 1, 4, 1))   # keys-as-rows: the same, up to head dim 128
    assert kt.fp8_in_registers and not dataclasses.replace(kt, alibi=True).fp8_in_registers
    assert kt.smem_bytes() == 4 * 16 * (128 + 128)
    assert not dataclasses.replace(DECODE, tile=TileConfig(128, 32, 4, 2, 2)).fp8_in_registers   # prefill
    for d in (64, 96, 128):
        assert dataclasses.replace(DECODE, head_dim=d, head_dim_v=d).fp8_in_registers
    # above head dim 128 with Q's fragments in shared memory (Q_FRAGS): head_dim a multiple of 64
    for d, dv in ((192, 128), (192, 192), (256, 256)):
        assert dataclasses.replace(DECODE, head_dim=d, head_dim_v=dv).fp8_in_registers
    assert not dataclasses.replace(DECODE, head_dim=256, head_dim_v=256, alibi=True).fp8_in_registers


def test_q_fragments_in_shared_memory_above_head_dim_128():
    """Above head dim 128 (Q_FRAGS) the tile's shared memory is Q's fragments (16 x head_dim 16-bit
    words, unpadded) and the FP8 stages: at d 256 24,576 bytes, against 41,728 for the 16-bit K/V
    tile's path, so shared memory allows 9 CTAs an SM instead of 5 (registers then cap them at 8)."""
    spec = dataclasses.replace(DECODE, head_dim=256, head_dim_v=256)
    assert spec.smem_bytes() == 2 * 16 * 256 + 2 * 16 * (256 + 256) == 24576
    old = dataclasses.replace(spec, alibi=True)     # the 16-bit tile's path, as every d 256 FP8 decode before
    assert old.smem_bytes() == 41728 and 232448 // (spec.smem_bytes() + 1024) == 9
    src = render.render(spec)
    body = src.split("run_tile")[1]
    assert "store_q_frags(sQ_base, qa, lane)" in body and "gemm_qk_fp8_smem(s, sQ_base" in body
    assert "gemm_qk_fp8(s, qa" not in body and "convert_kv8<D, SQ>(" not in body
    assert "constexpr int Q_ELEMS = BM * D;" in src
    # the fragment words' address expression the emulation below takes (store and load alike)
    assert src.count("sQf + 16 * (32 * ks + lane)") == 2
    # the tiles up to head dim 128 render as before (no Q_FRAGS text at all)
    assert "Q_FRAGS" not in render.render(DECODE) and "gemm_qk_fp8_smem" not in render.render(DECODE)


def test_smem_is_the_fp8_stages_only_and_the_source_has_no_16_bit_tile():
    assert DECODE.smem_bytes() == 2 * 16 * (128 + 128)
    src = render.render(DECODE)
    assert "gemm_qk_fp8(s, qa" in src and "gemm_pv_fp8(o, s" in src and "load_q_frags_fp8(qa" in src
    assert "convert_kv8<D, SQ>(" not in src.split("run_tile")[1]
    assert "4 * tq + 2 * nt + e" in src and "32 * q + 8 * tq" in src
    other = render.render(dataclasses.replace(DECODE, alibi=True))
    assert "gemm_qk_fp8(s, qa" not in other and "convert_kv8<D, SQ>(" in other


@pytest.mark.parametrize("d,dv", [(64, 64), (96, 96), (128, 128), (192, 128), (256, 256)])
def test_fp8_register_tiles_compile_without_spills(d, dv):
    spec = dataclasses.replace(DECODE, head_dim=d, head_dim_v=dv, softcap=True, mask="local")
    res = compiler.compile_cubin(render.render(spec), spec.arch, compiler.default_options(spec.arch), spec.name)
    r = res.resources
    assert r["spill_stores"] == 0 and r["spill_loads"] == 0 and r["stack_frame"] == 0, r
    assert r["registers"] * 32 <= 65536 // spec.tile.min_blocks


def test_the_mask_column_is_fp8_key_of_the_score_column():
    for nt in range(2):
        for tq in range(4):
            for e in range(2):
                assert 4 * tq + 2 * nt + e == fp8_key(nt * 8 + 2 * tq + e)
    assert sorted(fp8_key(c) for c in range(16)) == list(range(16))


def _mma(c, a_frags, b_frags):
    """C (16 x 8) += A (16 x 16) B (16 x 8) from the 32 lanes' fragments: a_frags[lane] = 4 pairs
    (a0..a3), b_frags[lane] = 2 pairs (b0, b1), each pair (low, high) half."""
    a = np.zeros((16, 16))
    b = np.zeros((16, 8))
    for lane in range(32):
        g, t = lane >> 2, lane & 3
        a0, a1, a2, a3 = a_frags[lane]
        a[g, 2 * t:2 * t + 2], a[g + 8, 2 * t:2 * t + 2] = a0, a1
        a[g, 2 * t + 8:2 * t + 10], a[g + 8, 2 * t + 8:2 * t + 10] = a2, a3
        b0, b1 = b_frags[lane]
        b[2 * t:2 * t + 2, g], b[2 * t + 8:2 * t + 10, g] = b0, b1
    return c + a @ b


def _c_frag(cmat, lane):
    g, t = lane >> 2, lane & 3
    return [cmat[g, 2 * t], cmat[g, 2 * t + 1], cmat[g + 8, 2 * t], cmat[g + 8, 2 * t + 1]]


@pytest.mark.parametrize("d", [64, 96, 128])
def test_the_lanes_fragments_compute_q_kt_and_p_v(d):
    rng = np.random.default_rng(d)
    q, k, v = rng.standard_normal((16, d)), rng.standard_normal((16, d)), rng.standard_normal((16, d))
    # S = Q K^T: gemm_qk_fp8 with load_q_frags_fp8's fragments
    s = [np.zeros((16, 8)) for _ in range(2)]
    for nb in range(2):
        for ks in range(d // 16):
            af, bf = [], []
            for lane in range(32):
                g, t = lane >> 2, lane & 3
                c0 = (d // 4) * t + 4 * ks
                af.append((q[g, c0:c0 + 2], q[g + 8, c0:c0 + 2], q[g, c0 + 2:c0 + 4], q[g + 8, c0 + 2:c0 + 4]))
                w = k[fp8_key(8 * nb + g), c0:c0 + 4]          # word ks of the lane's key row
                bf.append((w[0:2], w[2:4]))                     # fp8x4_to_16: lo = bytes 0, 1; hi = 2, 3
            s[nb] = _mma(s[nb], af, bf)
    s_logical = np.concatenate(s, axis=1)
    want = q @ k.T
    assert np.allclose(s_logical, want[:, [fp8_key(c) for c in range(16)]])
    # O = P V: gemm_pv_fp8 (P from the score registers, V words transposed), then the epilogue's columns
    p = rng.standard_normal((16, 16))                           # logical columns, as s_logical
    pa = []
    for lane in range(32):
        f0, f1 = _c_frag(p[:, 0:8], lane), _c_frag(p[:, 8:16], lane)
        pa.append(((f0[0], f0[1]), (f0[2], f0[3]), (f1[0], f1[1]), (f1[2], f1[3])))
    o = [np.zeros((16, 8)) for _ in range(d // 8)]
    for qq in range(d // 32):
        for r in range(4):
            bf = []
            for lane in range(32):
                g, t = lane >> 2, lane & 3
                col = 32 * qq + 4 * g + r                           # byte r of the words at 4 (8 q + g)
                w = [v[4 * t + i, col] for i in range(4)]           # the transposed word: keys 4t .. 4t+3
                bf.append((w[0:2], w[2:4]))
            o[4 * qq + r] = _mma(o[4 * qq + r], pa, bf)
    out = np.full((16, d), np.nan)
    for lane in range(32):
        g, t = lane >> 2, lane & 3
        for h in range(2):
            for qq in range(d // 32):
                for x in range(2):
                    for r in range(4):
                        out[g + 8 * h, 32 * qq + 8 * t + 4 * x + r] = _c_frag(o[4 * qq + r], lane)[2 * h + x]
    p_phys = np.zeros((16, 16))
    p_phys[:, [fp8_key(c) for c in range(16)]] = p
    assert np.allclose(out, p_phys @ v)



def _movm_trans(frags):
    """movmatrix.sync.aligned.m8n8.trans.b16 over the 32 lanes: lane (g, t) holds M[g][2t], M[g][2t+1] and
    gets M[2t][g], M[2t+1][g]."""
    m = np.zeros((8, 8))
    for lane in range(32):
        g, t = lane >> 2, lane & 3
        m[g, 2 * t:2 * t + 2] = frags[lane]
    return [(m[2 * (lane & 3), lane >> 2], m[2 * (lane & 3) + 1, lane >> 2]) for lane in range(32)]


def kt_o_dim(dp: int, g: int, h: int) -> int:
    """templates/attention/tile_kt_sm80.cuh's kt_o_dim: O^T's value dim of m-tile dp, row g + 8 h."""
    return 32 * (dp >> 1) + 4 * g + 2 * (dp & 1) + h


@pytest.mark.parametrize("d", [64, 96, 128])
def test_keys_as_rows_lanes_fragments_compute_k_qt_and_vt_pt(d):
    """The keys-as-rows tile with FP8 in registers (tile_kt_sm80.cuh: kt_qk_fp8, the movmatrix P^T,
    kt_pv_fp8, the staging's kt_o_dim), emulated lane by lane: S^T's row slot r is key fp8_key(r) of
    the block, and the staged O rows are P V in head-dim order."""
    rng = np.random.default_rng(d + 1)
    q, k, v = rng.standard_normal((8, d)), rng.standard_normal((16, d)), rng.standard_normal((16, d))
    st = [np.zeros((16, 8)), np.zeros((16, 8))]          # the even / odd k-step accumulators
    for ks in range(d // 16):
        af, bf = [], []
        for lane in range(32):
            g, t = lane >> 2, lane & 3
            c0 = (d // 4) * t + 4 * ks
            w0, w1 = k[fp8_key(g), c0:c0 + 4], k[fp8_key(g + 8), c0:c0 + 4]
            af.append((w0[0:2], w1[0:2], w0[2:4], w1[2:4]))   # a[0], a[2] from row g; a[1], a[3] from g + 8
            bf.append((q[g, c0:c0 + 2], q[g, c0 + 2:c0 + 4]))  # the uint2 of q row g at (d/4) t + 4 ks
        st[ks % 2] = _mma(st[ks % 2], af, bf)
    s_t = st[0] + st[1]
    assert np.allclose(s_t, (q @ k.T).T[[fp8_key(r) for r in range(16)], :])
    # P^T's B fragments from the S^T accumulator layout (any P: logical slots x query columns)
    p = rng.standard_normal((16, 8))
    pb = [_movm_trans([_c_frag(p, lane)[0:2] for lane in range(32)]),
          _movm_trans([_c_frag(p, lane)[2:4] for lane in range(32)])]
    bf = [(pb[0][lane], pb[1][lane]) for lane in range(32)]
    o = [np.zeros((16, 8)) for _ in range(d // 16)]
    for qq in range(d // 32):
        for j in range(2):
            af = []
            for lane in range(32):
                g, t = lane >> 2, lane & 3
                w = [[v[4 * t + i, 32 * qq + 4 * g + r] for i in range(4)] for r in range(4)]   # transposed words
                af.append((w[2 * j][0:2], w[2 * j + 1][0:2], w[2 * j][2:4], w[2 * j + 1][2:4]))
            o[2 * qq + j] = _mma(o[2 * qq + j], af, bf)
    out = np.full((8, d), np.nan)
    for lane in range(32):
        g, t = lane >> 2, lane & 3
        for dp in range(d // 16):
            for x in range(4):
                out[2 * t + (x & 1), kt_o_dim(dp, g, x >> 1)] = _c_frag(o[dp], lane)[x]
    p_phys = np.zeros((8, 16))
    p_phys[:, [fp8_key(r) for r in range(16)]] = p.T
    assert np.allclose(out, p_phys @ v)


def test_keys_as_rows_source_holds_the_emulated_expressions():
    """The rendered keys-as-rows FP8 tile holds exactly the index expressions the emulation above takes
    (K rows, cvt outputs into the A fragments, q's 8-byte words, V's rows and transpose, the staging's
    kt_o_dim, the mask's key, the per-column scales and the unscale's source lanes), for bf16 and fp16 q."""
    kt = dataclasses.replace(DECODE, tile=TileConfig(8, 16, 1, 2, 12), softcap=True)
    src = render.render(kt)
    body = src.split("__device__ __forceinline__ void run_tile")[1]
    for expr in ("const u8* row = s8K + fp8_key(g + 8 * h) * D + (D / 4) * t;",
                 "fp8x4_to_f16(w[0][ks], a[0], a[2]);", "fp8x4_to_f16(w[1][ks], a[1], a[3]);",
                 "mma_16816_f16(ks % 2 == 0 ? s : s2, a, qb[ks][0], qb[ks][1]);",
                 "const u8* base = s8V + 4 * (lane & 3) * DV + 4 * (lane >> 2) + 32 * q;",
                 "fp8_v_words(w, s8V, q, lane);",
                 "fp8x4_to_f16(w[2 * j], a[0], a[2]);", "fp8x4_to_f16(w[2 * j + 1], a[1], a[3]);",
                 "mma_16816_f16(o[2 * q + j], a, pb0, pb1);",
                 "return 32 * (dp >> 1) + 4 * g + 2 * (dp & 1) + h;"):
        assert expr in src, expr
    for expr in ("(i64)head * p.q_head_stride + (D / 4) * tq;", "*reinterpret_cast<const uint2*>(qr + 4 * ks)",
                 "const int key = n * BN + fp8_key(g + 8 * h);",
                 "unscale[0] = __shfl_sync(0xffffffffu, un, 8 * tq);",
                 "unscale[1] = __shfl_sync(0xffffffffu, un, 8 * tq + 4);",
                 "tanh_approx(s[x] * cap_sc[x & 1])", "fmaf(s[e], sc[e], -m_use)",
                 "KT_SO + kt_o_dim(dp, g, x >> 1)] = o[dp][x];",
                 "movm_trans(pack2_f16(s[0], s[1]))", "kt_qk_fp8(s, s2, qb, smem8 + st8 * K8_BYTES, lane);",
                 "kt_pv_fp8(o, pb0, pb1, smem8 + STAGES * K8_BYTES + st8 * V8_BYTES, lane);"):
        assert expr in body, expr
    assert "convert_kv8<D, SQ>(" not in body and "ldsm_x4" not in body
    # the word loads: 16-byte words where a lane's D / 4 bytes are a multiple of 16, else 8-byte ones
    assert "if ((D / 4) % 16 == 0)" in src
    # fp16 q: no row scaling, the scales per column are the tile's own
    src16 = render.render(dataclasses.replace(kt, dtype="fp16"))
    assert "unscale" not in src16.split("__device__ __forceinline__ void run_tile")[1]
    assert "const float sc[2] = {SOFTCAP ? 1.f : kv_scale_log2, SOFTCAP ? 1.f : kv_scale_log2};" in src16


@pytest.mark.parametrize("d", [192, 256])
def test_q_fragments_through_shared_memory_compute_q_kt(d):
    """Q_FRAGS (head dims above 128): store_q_frags puts lane l's fragment of k-step ks in the 16 bytes
    at 16 (32 ks + l) of the fragment area (2 x 16 x d bytes), and gemm_qk_fp8_smem reads it back with
    its key rows' 16-byte word k4 = ks / 4, 32-bit word j = ks % 4: every slot is the lane's own (no
    barrier needed), inside the area, and the products are Q K^T in fp8_key's column order."""
    rng = np.random.default_rng(d)
    q, k = rng.standard_normal((16, d)), rng.standard_normal((16, d))
    smem = {}
    for lane in range(32):                       # load_q_frags_fp8, then store_q_frags
        g, t = lane >> 2, lane & 3
        for ks in range(d // 16):
            c0 = (d // 4) * t + 4 * ks
            addr = 16 * (32 * ks + lane)
            assert addr not in smem and addr + 16 <= 2 * 16 * d
            smem[addr] = (lane, (q[g, c0:c0 + 2], q[g + 8, c0:c0 + 2], q[g, c0 + 2:c0 + 4], q[g + 8, c0 + 2:c0 + 4]))
    assert len(smem) == 2 * 16 * d // 16                     # the area, exactly
    s = [np.zeros((16, 8)) for _ in range(2)]
    for k4 in range(d // 64):                    # gemm_qk_fp8_smem's loops
        for j in range(4):
            ks = 4 * k4 + j
            af, bfs = [], [[], []]
            for lane in range(32):
                g, t = lane >> 2, lane & 3
                owner, frag = smem[16 * (32 * ks + lane)]
                assert owner == lane
                af.append(frag)
                for nb in range(2):
                    b0 = (d // 4) * t + 16 * k4 + 4 * j  # uint4 k4 of the lane's (d / 4) bytes, word j
                    assert b0 + 4 <= (d // 4) * (t + 1)
                    w = k[fp8_key(8 * nb + g), b0:b0 + 4]
                    bfs[nb].append((w[0:2], w[2:4]))
            for nb in range(2):
                s[nb] = _mma(s[nb], af, bfs[nb])
    assert np.allclose(np.concatenate(s, axis=1), (q @ k.T)[:, [fp8_key(c) for c in range(16)]])


def _block_loop(spec, hmma: int = 32) -> list:
    """Opcodes (with modifiers) of the one-warp decode tile's key-block loop, in order: the shortest
    backward-branch body that holds the block's `hmma` HMMA (16 for S = Q K^T, 16 for P V at d 128)."""
    res = compiler.compile_cubin(render.render(spec), spec.arch, compiler.default_options(spec.arch), spec.name)
    return [ins.split()[0] for ins in shortest_loop(sass.disassemble(res.cubin, sass.find_nvdisasm()), "HMMA", hmma)]


def _block_loop_ops(spec, hmma: int = 32) -> dict:
    """Opcode counts of `_block_loop`."""
    ops = {}
    for op in _block_loop(spec, hmma):
        ops[op] = ops.get(op, 0) + 1
    return ops


@pytest.mark.skipif(sass.find_nvdisasm() is None, reason="nvdisasm is not installed")
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_from_sm89_the_block_loop_converts_e4m3_in_one_cvt_a_pair(dtype):
    """From sm_89 the FP8_REGS tile runs fp16 MMAs whatever the dtype, and an e4m3 pair becomes an
    fp16 pair in one F2FP (cvt.rn.f16x2.e4m3x2): a 16-key block at d 128 converts 32 K and 32 V words,
    64 F2FP ... UNPACK_B, and no longer runs the bit-shift conversion (its packed multiplies by 2^8
    / 2^120, one a pair: 64 a block, still there on sm_80)."""
    spec = dataclasses.replace(DECODE, dtype=dtype)
    ops = _block_loop_ops(spec)
    assert ops.get("F2FP.F16.E4M3.UNPACK_B", 0) == 64, ops
    assert not any(op.startswith(("HMUL2", "HFMA2")) for op in ops), ops
    assert sum(n for op, n in ops.items() if op.startswith("HMMA.16816.F32")) == 32
    assert ops.get("HMMA.16816.F32", 0) == 32, ops          # fp16 operands (a bf16 MMA reads HMMA.16816.F32.BF16)
    a80 = _block_loop_ops(dataclasses.replace(spec, arch="sm_80"))
    assert "F2FP.F16.E4M3.UNPACK_B" not in a80 and sum(n for op, n in a80.items() if op.startswith(("HMUL2", "HFMA2"))) == 64
    src = render.render(spec)
    assert ("q_frags_to_f16(qa, unscale)" in src) == (dtype == "bf16")
    assert "q_frags_to_f16(qa" not in render.render(dataclasses.replace(spec, arch="sm_80"))


def _bf16(x: np.ndarray) -> np.ndarray:
    """float32 -> the nearest bf16 values (round to nearest even), as float32."""
    b = x.astype(np.float32).view(np.uint32)
    b = (b + 0x7FFF + ((b >> 16) & 1)) & 0xFFFF0000
    return b.view(np.float32)


def test_q_to_fp16_scaling_is_exact_for_the_row():
    """mainloop_sm80.cuh's q_frags_to_f16, emulated: k = min(141 - E, 126) from the bf16 exponent field
    E of the row's largest |q| puts it in [2^14, 2^15) (below fp16's 65504), and every element within
    2^24 of the largest converts to fp16 exactly; the scores' factor 2^-k is a normal float."""
    rng = np.random.default_rng(0)
    for mag in (1e-30, 1e-6, 1.0, 3e4, 1e30):
        row = _bf16(rng.standard_normal(128).astype(np.float32) * np.float32(mag)
                    * np.exp2(rng.integers(-20, 4, 128)).astype(np.float32))
        bits = (row.view(np.uint32) >> 16) & 0x7FFF
        e = int(bits.max()) >> 7
        k = min(141 - e, 126)
        up = np.float32(2.0) ** k
        assert np.isfinite(up) and np.float32(2.0) ** -k > 0
        top = np.abs(row).max() * up
        assert 2.0 ** 14 <= top < 2.0 ** 15
        scaled = row * up
        f16 = scaled.astype(np.float16).astype(np.float32)
        big = np.abs(row) >= np.abs(row).max() * 2.0 ** -24
        assert np.array_equal(f16[big], scaled[big])
        assert np.max(np.abs(f16 - scaled)) <= 2.0 ** -25        # fp16's spacing below 2^-14
    zero = 0
    assert min(141 - zero, 126) == 126                            # a zero row: a finite factor


def test_an_fp16_target_converts_e4m3_with_cvt_on_every_sm89_path():
    """fp8x4_to_16 for an fp16 dtype is fp8x4_to_f16 from sm_89 on: the Hopper kernel's producer
    conversion and the sm_80 mainloop's staged conversion as well as FP8_REGS; bf16 targets keep the
    bit shifts (no cheaper exact e4m3 -> bf16), and sm_80 has no FP8 cvt at all."""
    from kernelgen.selection import heuristics

    def hopper(dtype, arch="sm_90a"):
        return heuristics.choose(arch, dtype, 128, 128, num_heads_q=32, num_heads_kv=8, mask="causal",
                                 max_seqlen_q=4096, max_seqlen_k=4096, kv_dtype="e4m3").attention
    h16, h_bf = hopper("fp16"), hopper("bf16")
    assert h16.mainloop == "sm90a" and h_bf.mainloop == "sm90a"
    body = render.render(h16).split("void fp8x4_to_16(")[1].split("\n}\n")[0]
    assert "fp8x4_to_f16(w, lo, hi);" in body and "mul.rn.f16x2" not in body.split("{% else %}")[0]
    assert "fp8x4_to_f16(w, lo, hi);" not in render.render(h_bf).split("void fp8x4_to_16(")[1].split("\n}\n")[0]
    staged = dataclasses.replace(DECODE, dtype="fp16", alibi=True)    # not FP8_REGS: the staged conversion
    assert not staged.fp8_in_registers
    assert "fp8x4_to_f16(w, lo, hi);" in render.render(staged)
    assert "cvt.rn.f16x2.e4m3x2" not in render.render(dataclasses.replace(staged, arch="sm_80"))


def _page_div(d: int):
    """mainloop_sm80.cuh's page_div: (m, l) of x / d = (umulhi(x, m) + x) >> l."""
    l = (d - 1).bit_length() if d > 1 else 0
    m = ((((1 << l) - d) << 32) // d + 1) & 0xFFFFFFFF
    return m, l


def test_page_div_divides_exactly_for_every_int_key():
    """The sm_80 mainloop's key -> (page, slot) without a division (PageDiv): exact for keys in
    [0, 2^31) and every page size, checked on the sizes engines use and odd ones, at both ends of
    the range and around every multiple near them; umulhi(x, m) + x never leaves 32 bits."""
    rng = np.random.default_rng(1)
    sizes = [1, 2, 3, 5, 7, 8, 12, 16, 17, 31, 32, 48, 64, 100, 128, 256, 1000, 1024, 4097, 65535, (1 << 20) + 7]
    for d in sizes:
        m, l = _page_div(d)
        xs = np.concatenate([np.arange(0, 5000), (1 << 31) - 1 - np.arange(0, 5000),
                             rng.integers(0, 1 << 31, 20000)]).astype(np.uint64)
        xs = np.concatenate([xs, (xs // d) * d, (xs // d) * d - 1]).clip(0, (1 << 31) - 1)
        t = (xs * np.uint64(m)) >> np.uint64(32)
        assert int((t + xs).max()) < (1 << 32)
        assert np.array_equal((t + xs) >> np.uint64(l), xs // np.uint64(d)), d


@pytest.mark.skipif(sass.find_nvdisasm() is None, reason="nvdisasm is not installed")
@pytest.mark.parametrize("kv_dtype", ["", "e4m3"])
def test_the_paged_block_loop_has_no_integer_division(kv_dtype):
    """key / page_size in the sm_80 mainloop's block loads is PageDiv's multiply and shift: the loop's
    loads (everything before its first HMMA) hold no I2F / MUFU.RCP / F2I division sequence (they
    held four, one in each K and V load path).  The one division left in the loop is the mask's
    row / qpk, on the masked block only."""
    spec = dataclasses.replace(DECODE, kv_dtype=kv_dtype, tile=TileConfig(16, 16, 1, 2, 12))
    ops = _block_loop(spec)
    loads = ops[:ops.index(next(op for op in ops if op.startswith("HMMA")))]
    assert sum(op.startswith("LDGSTS") for op in loads) >= 4
    assert not any(op.startswith(("I2F", "F2I", "MUFU.RCP")) for op in loads), loads
    assert sum(op.startswith("MUFU.RCP") for op in ops) <= 1


@pytest.mark.skipif(sass.find_nvdisasm() is None, reason="nvdisasm is not installed")
def test_hopper_fp8_cache_with_a_bf16_q_runs_both_gemms_on_fp16():
    """The Hopper kernel on an FP8 cache with a bf16 q (MMA_F16 in mainloop_sm90.cuh): the producers
    convert K and V with the one-instruction cvt into fp16 (no bit-shift multiplies left), each
    consumer warp moves its Q rows to fp16 in shared memory once a tile, each row by its own power of
    two (q_rows_to_f16, then a proxy
    fence and the warpgroup barrier before the first wgmma, its factor in the logits' scale), and both
    GEMMs run on fp16 wgmma; at head dims 64, 128 and 256, causal or not, without spills.  Without
    an FP8 cache both stay bf16."""
    from kernelgen.selection import heuristics

    def hopper(kv, d=128, mask="causal"):
        return heuristics.choose("sm_90a", "bf16", d, d, num_heads_q=32, num_heads_kv=8, mask=mask,
                                 max_seqlen_q=4096, max_seqlen_k=4096, kv_dtype=kv).attention

    def hgmma(spec):
        assert spec.mainloop == "sm90a"
        res = compiler.compile_cubin(render.render(spec), spec.arch, compiler.default_options(spec.arch), spec.name)
        assert res.resources["spill_stores"] == 0 and res.resources["spill_loads"] == 0, res.resources
        text = sass.disassemble(res.cubin, sass.find_nvdisasm())
        return {op.split(".", 2)[2] for op in re.findall(r"HGMMA\.64x\d+x16\.F32(?:\.BF16)?\b", text)}, text

    for d in (64, 128, 256):
        for mask in ("causal", "none"):
            types, text = hgmma(hopper("e4m3", d, mask))
            assert types == {"F32"}, (d, mask, types)                     # fp16 operands only
            assert "F2FP.F16.E4M3.UNPACK_B" in text and "HMUL2" not in text and "HFMA2.BF16" not in text
    plain, _ = hgmma(hopper(None))
    assert plain == {"F32.BF16"}, plain
    src = render.render(hopper("e4m3"))
    assert "constexpr bool MMA_F16 = true;" in src and "wgmma_rs_f16_n128(of, pa[kk]" in src
    tile = src.split("void consumer_loop(")[1]
    conv = tile.index("q_rows_to_f16(sb, cw, lane)")
    assert conv < tile.index("fence_proxy_async_smem();", conv) < tile.index("named_sync(1 + (cw >> 2), 128);", conv)
    assert tile.index("named_sync(1 + (cw >> 2), 128);") < tile.index("consumer_mainloop(")
    assert "* q_unscale;" in tile


def test_which_kernels_run_fp16_gemms():
    """AttentionSpec.fp16_gemms: a bf16 q with an FP8 cache on sm_89+, in the FP8_REGS decode tile and
    the Hopper kernel's FP8-cache path; not an fp16 q (its GEMMs are fp16 anyway), not sm_80, not
    the staged sm_80-mainloop tiles (ALiBi), not the FP8 tensor-core kernels."""
    from kernelgen.selection import heuristics
    assert DECODE.fp16_gemms and dataclasses.replace(DECODE, arch="sm_89").fp16_gemms
    assert not dataclasses.replace(DECODE, dtype="fp16").fp16_gemms
    assert not dataclasses.replace(DECODE, arch="sm_80").fp16_gemms
    assert not dataclasses.replace(DECODE, kv_dtype="").fp16_gemms
    assert not dataclasses.replace(DECODE, alibi=True).fp16_gemms                  # staged conversion to bf16
    hop = heuristics.choose("sm_90a", "bf16", 128, 128, num_heads_q=32, num_heads_kv=8, mask="causal",
                            max_seqlen_q=4096, max_seqlen_k=4096, kv_dtype="e4m3").attention
    assert hop.mainloop == "sm90a" and hop.fp16_gemms and not dataclasses.replace(hop, dtype="fp16").fp16_gemms
    mma = heuristics.choose("sm_90a", "bf16", 128, 128, num_heads_q=32, num_heads_kv=8, mask="causal",
                            max_seqlen_q=4096, max_seqlen_k=4096, kv_dtype="e4m3", q_dtype="e4m3").attention
    assert mma.fp8_mma and not mma.fp16_gemms
