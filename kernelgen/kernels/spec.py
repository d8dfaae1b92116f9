"""Frozen descriptions of kernel variants.

A spec names one compiled kernel completely: everything that changes the rendered source is a
field here, and nothing else is.  Run-time quantities (lengths, batch, scale, strides, capacity)
are kernel arguments and never appear in a spec.  ``spec.name`` is the readable name used in logs,
file names and the CLI; the cache key is derived from the rendered source (see ``cache.py``), which
is a pure function of the spec.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

from .metadata import MIN_SHARE_WAVE_PARTS
from .variant_code import VariantCode

ARCHS = ("sm_80", "sm_86", "sm_89", "sm_90a")
#: Compile targets of the sm_80 path that NVRTC builds and the CPU tests compile, but that no
#: kernelgen test has run on a GPU: Blackwell data-centre (sm_100: B200/GB200, B300) and
#: consumer/workstation (sm_120: RTX 50, RTX PRO 6000; DGX Spark's 12.1) GPUs.  A device of such a
#: compute capability runs them only with KERNELGEN_ALLOW_UNTESTED_ARCH=1 (``device.arch_for_capability``).
UNTESTED_ARCHS = ("sm_100", "sm_120")
#: Every compile target a spec may name.
ALL_ARCHS = ARCHS + UNTESTED_ARCHS
DTYPES = ("fp16", "bf16")
#: FP8 K/V cache dtypes (``AttentionSpec.kv_dtype``): OCP e4m3 (torch's
#: float8_e4m3fn) and e5m2, converted to the 16-bit ``dtype`` as they are loaded.
KV_DTYPES = ("e4m3", "e5m2")
HEAD_DIMS = (64, 96, 128, 192, 256)
MASKS = ("none", "causal", "local")
LAYOUTS = ("soa", "aos")
#: Attention mainloops: "sm80" (mma.sync, ldmatrix, cp.async; every arch from sm_80 on) and
#: "sm90a" (wgmma, TMA, warp specialisation; sm_90a only, a subset of the variants).
MAINLOOPS = ("sm80", "sm90a")
#: Option letters of the Hopper mainloop (``AttentionSpec.sm90_opts``): "s" serial (no overlap of
#: the softmax with the next block's Q K^T inside a warpgroup), "h" P V issued as 64-column halves,
#: "p" ping-pong of the consumer warpgroups' GEMM issue (round robin over two or three; not with
#: "s"), "r" rescale O only when a row's max grew, "g" paged K/V gathered row by row by the four
#: producer warps (cp.async; any page size) instead of TMA boxes inside one page (page_size a
#: multiple of block_n), "e" the consumers take the next tile's index and scheduler entry before the
#: current tile's epilogue (an experiment: not in the dispatcher's options), "t" the producer hands
#: each tile's coordinates (TileInfo) to the consumers in shared memory beside its index, so a
#: consumer's tile start and epilogue read no scheduler metadata from global memory (the dispatcher's
#: default where it builds without spills, 1-5 % on causal prefill: docs/dev/issue22_account.md; not with
#: "e", "g", above head dim 192 or in a fused kernel), "x" a fixed share of the softmax's exponentials
#: computed on the FMA pipe by a polynomial instead of the MUFU (common/softmax.cuh, ``ex2_fma``;
#: the kernels whose logits take a second MUFU instruction, a soft-cap's tanh, or whose GEMMs outrun
#: the MUFU: head dim 64, FP8), "m" the overlapped loop's key block in a masked and an unmasked copy
#: chosen once a block (FA3 / FA4 run a masked and an unmasked loop), so no branch separates a
#: block's soft-cap or score_mod from its row max and exponentials (not in the default letters,
#: ``heuristics.SM90_OPTS``: the dispatcher adds it to soft-capped and transcendental-snippet kernels and
#: to the FP8 tensor-core kernels of causal calls at head dim 256, ``heuristics.with_mask_split``).
SM90_OPTS = "eghmprstx"
_SM90_OPT_NAMES = {"e": "earlytile", "g": "gather", "h": "pvhalves", "m": "masksplit", "p": "pingpong", "r": "lazyrescale",
                   "s": "serial", "t": "tileinfo", "x": "ex2fma"}
#: Largest finite sliding-window side (tokens): the kernels add it to positions in 32-bit ints
#: (``selection.validation`` checks calls against it, ``selection.catalog`` warm-up windows).
MAX_WINDOW = 1 << 30
#: Head dims of the Hopper path (head_dim == head_dim_v).
SM90_HEAD_DIMS = (64, 96, 128, 192, 256)
#: (head_dim, head_dim_v) pairs of the Hopper path: the equal ones and DeepSeek's 192 x 128.
SM90_HEAD_DIM_PAIRS = tuple((d, d) for d in SM90_HEAD_DIMS) + ((192, 128),)
#: Head dims (= head_dim_v) of the Hopper mainloop with a paged K/V cache (TMA boxes or gathered
#: rows at every one; 192 and 256 on the lighter tiles of ``heuristics.SM90_PAGED_TILES``).
SM90_PAGED_HEAD_DIMS = (64, 96, 128, 192, 256)


def sm90_bar_bytes(num_stages: int, land_stages: int) -> int:
    """The Hopper kernel's barrier area (bytes; ``BAR_BYTES`` in variant_sm90.cuh): the mbarriers of
    the Q, K/V ring, tile slots and landing stages, and the 64 bytes of the P V wait's pin words
    (mainloop_sm90.cuh ``pin_pv_wait``); 256, or 320 where deep rings with landing stages need
    more."""
    return 256 if 8 * (6 + 4 * num_stages) + 8 + 16 * land_stages + 64 <= 256 else 320


def sm90_padded(d: int) -> int:
    """Columns a Hopper shared-memory row holds for head dim ``d``: whole 128-byte (64-element)
    swizzle column blocks; head dim 96 is stored as 128 (TMA fills columns 96..127 with zeros)."""
    return -(-d // 64) * 64


def _check(value, allowed, what):
    if value not in allowed:
        raise ValueError(f"{what} must be one of {allowed}, got {value!r}")


@dataclass(frozen=True)
class TileConfig:
    """Tile shape of the attention mainloop.

    block_m: query rows per CTA tile; block_n: keys per inner step; num_warps: warps per CTA
    (each warp owns block_m / num_warps query rows, a multiple of 16, except the keys-as-rows
    decode tile: block_m 8, block_n 16, one warp, ``keys_as_rows``); num_stages: depth of the
    cp.async K/V pipeline (>= 2); min_blocks: CTAs per SM promised to the register allocator
    (``__launch_bounds__``), which caps registers at 65536 / (min_blocks * 32 * num_warps).
    """

    block_m: int
    block_n: int
    num_warps: int
    num_stages: int
    min_blocks: int = 1

    def __post_init__(self):
        if self.block_m == 8:
            if self.num_warps != 1 or self.block_n != 16:
                raise ValueError(f"block_m=8 is the keys-as-rows decode tile: one warp, block_n=16 "
                                 f"(got {self.num_warps} warps, block_n={self.block_n})")
        elif self.block_m % (16 * self.num_warps):
            raise ValueError(f"block_m={self.block_m} must be a multiple of 16*num_warps={16 * self.num_warps}")
        if self.block_n % 16 or self.block_n <= 0:
            raise ValueError(f"block_n={self.block_n} must be a positive multiple of 16")
        if self.num_stages < 2:
            raise ValueError(f"num_stages={self.num_stages} must be >= 2")

    @property
    def keys_as_rows(self) -> bool:
        """The transposed one-warp decode tile (templates/attention/tile_kt_sm80.cuh): keys as the
        MMA's M dimension, the tile's 8 query rows as N."""
        return self.block_m == 8

    @property
    def tag(self) -> str:
        return f"m{self.block_m}n{self.block_n}w{self.num_warps}s{self.num_stages}b{self.min_blocks}"


@dataclass(frozen=True)
class AttentionSpec:
    """The varlen attention forward kernel.

    ``mainloop="sm80"``: the tensor-core path of every arch from sm_80 on, sm_90a included
    (mma.sync, ldmatrix, cp.async; templates/attention/fwd_sm80.cu.j2).  ``mainloop="sm90a"``: the
    Hopper path (wgmma, TMA, mbarriers, a producer warpgroup and ``tile.num_warps / 4`` consumer
    warpgroups; templates/attention/fwd_sm90.cu.j2) for packed K/V with (head_dim, head_dim_v) in
    ``SM90_HEAD_DIM_PAIRS`` (64, 96, 128, 192 and 256 equal, and 192 x 128) or paged K/V with
    head_dim == head_dim_v in ``SM90_PAGED_HEAD_DIMS``, any mask ("none", "causal", "local"), with
    or without soft-cap and split-KV, no pack-GQA; its tile has
    block_m = 16 * num_warps (64 rows per consumer warpgroup).  ``sm90_opts``: letters of
    ``SM90_OPTS`` (tuning variants of the Hopper mainloop, "" = the default).
    Both are compiled for the exact arch (``arch``).
    """

    arch: str
    dtype: str
    head_dim: int
    head_dim_v: int
    mask: str
    layout: str
    tile: TileConfig
    pack_gqa: bool = False
    split: bool = False
    paged: bool = False
    softcap: bool = False
    #: record one partial per token in row_splits although the variant does not split (the
    #: prefill variant of a fused launch whose decode variant splits: the combine kernel reads it)
    row_splits: bool = False
    mainloop: str = "sm80"
    sm90_opts: str = ""
    #: ALiBi (Press et al. 2022, FlashAttention-2's ``alibi_slopes``): the scaled (and soft-capped)
    #: logit of query row i and key j gets ``-slope[b, h] * |i + seqlen_k - seqlen_q - j|``, the
    #: slope read from ``AttnParams.alibi_slopes`` (``params.ATTENTION_PARAMS_ALIBI``).  Off, the
    #: field is absent from the template variables, the name and ``to_json``: the source and the
    #: cache key of every other spec are unchanged.
    alibi: bool = False
    #: Attention sinks fused in the kernel (gpt-oss, ``launch.sinks``' semantics): at the final
    #: normalisation of a row written directly (not a split-KV partial: the combine kernel adds the
    #: sink once, ``CombineSpec.sinks``) the row's LSE becomes logaddexp(lse, sinks[h]) and O is
    #: scaled by exp(lse - new lse), h the row's query head (``AttnParams.sinks``,
    #: ``params.ATTENTION_PARAMS_SINKS``).  Off, absent from the name, template variables and
    #: ``to_json`` (other specs' sources and cache keys unchanged).
    sinks: bool = False
    #: A user attention variant (``kernelgen.Variant``; ``variant_code.VariantCode``: score_mod,
    #: mask_mod, kv_range snippets and the user tensors' names and dtypes), rendered in place by
    #: common/user_mod.cuh; the tensors' addresses are ``AttnParams.user0..`` fields
    #: (``params.attention_params_for``).  None: absent from the name, template variables and
    #: ``to_json`` (every other spec's source and cache key unchanged).
    variant: VariantCode | None = None
    #: FP8 K/V cache ("e4m3" or "e5m2"; "" = K/V in ``dtype``): the sm_80 mainloop copies each
    #: block's FP8 bytes into shared-memory staging stages (cp.async, the same pipeline depth) and
    #: converts the block it is about to use into one 16-bit K and V tile (exact: every FP8 value
    #: is a ``dtype`` value); the Hopper mainloop TMA-loads them into ``land_stages`` landing
    #: stages, which producer warps 1-3 convert into its 16-bit K/V ring; ``k_descale[b, kv head]`` multiplies the softmax scale of a tile, and
    #: ``v_descale[b, kv head]`` its O in the epilogue (``params.ATTENTION_PARAMS_FP8``' fields;
    #: null addresses read as 1).  "": absent from the name, template variables and ``to_json``
    #: (every other spec's source and cache key unchanged).
    kv_dtype: str = ""
    #: FP8 tensor-core GEMMs on the Hopper kernel (design variant B; ``heuristics.choose`` with
    #: ``q_dtype``): q in e4m3 too (``q_descale`` read beside ``k_descale``), S and P V on FP8 wgmma,
    #: K read from the landing stages, V transposed into an FP8 V^T ring; ``dtype`` is the output's.
    fp8_mma: bool = False

    kind: ClassVar[str] = "attention"
    entry: ClassVar[str] = "kg_attention_fwd"
    #: Registers per thread of the Hopper kernel's producer and consumer warpgroups after
    #: ``setmaxnreg``, by consumer warps: one producer and two (8 warps) or three (12 warps, the
    #: 192-row tile: FlashAttention-3's at head dim 64) consumer warpgroups share 64 K registers.
    SM90_REGS: ClassVar[dict] = {8: (24, 240), 12: (24, 160)}
    #: The same for a paged cache: TMA boxes page by page (the producer looks pages up) and, with
    #: option "g", rows gathered by the whole producer warpgroup.  A CTA starts with 65536 / threads
    #: registers a thread (__launch_bounds__(threads, 1): 168 x 384 with 8 consumer warps, 128 x 512
    #: with 12): 128 * producer + 32 * warps * consumer must not exceed that (multiples of 8).
    SM90_REGS_PAGED: ClassVar[dict] = {8: (40, 232), 12: (40, 152)}
    #: Pack-GQA (``pack_gqa``) on packed K/V at head dims up to 192: the producer's per-tile positions
    #: of packed rows spilled 8-12 bytes at 24 registers (two warpgroups: soft-capped head dim 64 and
    #: 192 x 128 with a window, split-KV, NVRTC 13.0); the three-warpgroup tile keeps its budget (no
    #: spill there), and so does head dim 256, whose 128 O accumulators need the consumers' 240 (at
    #: 232 it spilled 8-172 bytes; at 24 / 240 none).
    SM90_REGS_PACK: ClassVar[dict] = {8: (40, 232), 12: (24, 160)}
    #: The largest head dim a packed Hopper spec may have (``heuristics.SM90_PACK_MAX_HEAD_DIM``).
    SM90_PACK_MAX_HEAD_DIM: ClassVar[int] = 192
    #: The largest head dim a packed FP8 wgmma spec (``fp8_mma``: FP8 q, K and V) may have: head dim 64's
    #: 192-row tile builds packed without spills (NVRTC 13.0, sm_90a; tests/test_hopper_pack_gqa_cpu.py); d 128's
    #: 128 x 224 tile builds packed with the unpacked kernel's spills (non-causal: 4 / 12 bytes either way)
    #: and packs as the 16-bit 128-row tiles do (heuristics.sm90_pack_auto; H100, fifty-first session:
    #: packed / unpacked 0.940 on the varlen trace at 8 / 1 heads, 1.013-1.020 on one 4k request).
    SM90_FP8_PACK_MAX_HEAD_DIM: ClassVar[int] = 128
    SM90_REGS_GATHER: ClassVar[dict] = {8: (56, 224), 12: (56, 152)}
    #: An FP8 K/V cache (``kv_dtype``): producer warps 1-3 convert the landing stages.
    SM90_REGS_FP8: ClassVar[dict] = {8: (40, 232), 12: (40, 152)}
    #: ... at head dims up to 128 (not the FP8 tensor-core variant, which converts nothing): 56
    #: producer registers, so that the converters keep two 16-byte chunks
    #: in flight without spilling (mainloop_sm90.cuh's CONV_UNROLL 2; 224 are enough for the
    #: consumers there).  H200, bf16 q on an e4m3 cache, 32 / 8 heads, time against (40, 232) with
    #: one chunk: d 128 0.931-0.932 causal 1 x 16k and non-causal 4 x 4k alike (twenty-third
    #: session); d 64 0.920 / 0.904, d 96 0.928 / 0.926 (twenty-fifth; docs/dev/perf-log.md).
    SM90_REGS_FP8_D128: ClassVar[dict] = {8: (56, 224), 12: (40, 152)}
    #: The FP8 tensor-core variant (``fp8_mma``) at head dims up to 64: its consumers hold half the
    #: O accumulators, and its producer spilled a loop bound at 40 (d 64, one 4-byte value).
    SM90_REGS_FP8_MMA_SMALL: ClassVar[dict] = {8: (56, 224), 12: (56, 152)}
    #: ... and above 128: 128 fp32 O accumulators a consumer thread (d 256) need FlashAttention-3's
    #: 240 (the producer warps then have 24; the transposing warps spill their block-loop state: 44
    #: bytes with two V^T units in flight, NVRTC 13.0; with a window, soft-cap or split-KV the
    #: consumers spill too, so those calls keep their usual tile,
    #: ``heuristics.SM90_FP8_MMA_TILE_LIMITS``).
    SM90_REGS_FP8_MMA_LARGE: ClassVar[dict] = {8: (24, 240)}
    #: Shared memory of one Hopper CTA at most (bytes; the landing stages of an FP8 cache fill it up).
    SM90_SMEM_LIMIT: ClassVar[int] = 232448
    #: Option "t": four slots of 16 ints after the barrier area (variant_sm90.cuh: OFF_TINFO).
    SM90_TINFO_BYTES: ClassVar[int] = 256

    def __post_init__(self):
        _check(self.arch, ALL_ARCHS, "arch")
        _check(self.dtype, DTYPES, "dtype")
        _check(self.head_dim, HEAD_DIMS, "head_dim")
        _check(self.head_dim_v, HEAD_DIMS, "head_dim_v")
        _check(self.mask, MASKS, "mask")
        _check(self.layout, LAYOUTS, "layout")
        _check(self.mainloop, MAINLOOPS, "mainloop")
        if self.kv_dtype:
            _check(self.kv_dtype, KV_DTYPES, "kv_dtype")
        if self.mainloop == "sm90a":
            why = self.sm90_unsupported()
            if why:
                raise ValueError(f"the sm90a mainloop does not support this variant: {why}")
        elif self.sm90_opts:
            raise ValueError("sm90_opts applies to mainloop='sm90a' only")
        elif self.fp8_mma:
            raise ValueError("fp8_mma (FP8 tensor-core GEMMs) applies to mainloop='sm90a' only")
        if self.variant is not None and not isinstance(self.variant, VariantCode):
            raise TypeError(f"variant must be a VariantCode or None, got {type(self.variant).__name__}")
        if self.tile.keys_as_rows and (self.mainloop != "sm80" or max(self.head_dim, self.head_dim_v) > 128):
            raise ValueError(f"the keys-as-rows tile (block_m=8) is an sm80-mainloop tile of head dims <= 128, "
                             f"got {self.head_dim}/{self.head_dim_v} on {self.mainloop}")

    def sm90_unsupported(self) -> str:
        """Why the Hopper mainloop cannot build this spec ("" when it can)."""
        t = self.tile
        if self.arch != "sm_90a":
            return f"arch {self.arch} (wgmma and setmaxnreg need sm_90a)"
        if (self.head_dim, self.head_dim_v) not in SM90_HEAD_DIM_PAIRS:
            return f"head dims {self.head_dim}/{self.head_dim_v} (supported: {SM90_HEAD_DIM_PAIRS})"
        if self.paged and (self.head_dim != self.head_dim_v or self.head_dim not in SM90_PAGED_HEAD_DIMS):
            return f"paged at head dims {self.head_dim}/{self.head_dim_v} (paged: equal, in {SM90_PAGED_HEAD_DIMS})"
        if self.pack_gqa and self.kv_dtype and not self.fp8_mma:
            return ("pack_gqa with an FP8 cache and a 16-bit q (the Hopper kernel packs 16-bit calls, with ALiBi "
                    "or a user variant too, and FP8 q / K / V on FP8 wgmma)")
        if self.pack_gqa and self.fp8_mma and max(self.head_dim, self.head_dim_v) > self.SM90_FP8_PACK_MAX_HEAD_DIM:
            return (f"pack_gqa on FP8 wgmma above head dim {self.SM90_FP8_PACK_MAX_HEAD_DIM} "
                    f"(heuristics.SM90_FP8_PACK_MAX_HEAD_DIM)")
        if self.pack_gqa and max(self.head_dim, self.head_dim_v) > self.SM90_PACK_MAX_HEAD_DIM:
            return (f"pack_gqa above head dim {self.SM90_PACK_MAX_HEAD_DIM} (head dim 256 packed spills with sinks; "
                    f"heuristics.SM90_PACK_MAX_HEAD_DIM)")
        if self.fp8_mma and (not self.kv_dtype or self.head_dim != self.head_dim_v or self.head_dim % 64
                             or t.block_n % 32 or t.block_n < 128):
            return ("fp8_mma needs kv_dtype, head_dim == head_dim_v a multiple of 64 and key blocks of 128 or more, "
                    "a multiple of 32")
        if self.kv_dtype and (self.alibi or self.variant is not None or "g" in self.sm90_opts):
            return (f"kv_dtype {self.kv_dtype!r} with ALiBi, a user variant or gathered rows (option 'g'): "
                    f"those FP8 calls run on the sm_80 mainloop")
        if t.num_warps not in self._sm90_regs_table() or t.block_m != 16 * t.num_warps:
            return (f"tile {t.tag} (needs consumer warps in {sorted(self._sm90_regs_table())} and block_m = 16 x "
                    f"warps)")
        if t.block_n % 16 or t.block_n > 256 or not 2 <= t.num_stages <= 4 or t.min_blocks != 1:
            return f"tile {t.tag} (block_n a multiple of 16 up to 256, 2-4 stages, one CTA per SM)"
        if set(self.sm90_opts) - set(SM90_OPTS) or "".join(sorted(set(self.sm90_opts))) != self.sm90_opts:
            return f"sm90_opts {self.sm90_opts!r} (sorted distinct letters of {SM90_OPTS!r})"
        if "p" in self.sm90_opts and "s" in self.sm90_opts:
            return "sm90_opts 'p' (ping-pong) needs the overlapped mainloop (no 's')"
        if self.row_splits and self.split:
            return "row_splits with split (a split variant records them already)"
        if "t" in self.sm90_opts and ("e" in self.sm90_opts or "g" in self.sm90_opts):
            return "sm90_opts 't' (tile coordinates through shared memory) with 'e' or 'g'"
        if "t" in self.sm90_opts and max(self.head_dim, self.head_dim_v) > 192:
            return ("sm90_opts 't' above head dim 192 (the 24-register producer spills 12-28 bytes there with "
                    "NVRTC 13.0)")
        if "g" in self.sm90_opts and not self.paged:
            return "sm90_opts 'g' (gathered K/V rows) needs a paged cache"
        if "g" in self.sm90_opts and t.block_n > 128:
            return f"tile {t.tag} with sm90_opts 'g' (block_n up to 128: the consumers keep fewer registers)"
        return ""

    @property
    def template(self) -> str:
        return "attention/fwd_sm90.cu.j2" if self.mainloop == "sm90a" else "attention/fwd_sm80.cu.j2"

    @property
    def num_threads(self) -> int:
        """Threads per CTA: the tile's warps, plus the producer warpgroup on the Hopper path."""
        return (self.tile.num_warps + (4 if self.mainloop == "sm90a" else 0)) * 32

    @property
    def causal(self) -> bool:
        return self.mask == "causal"

    @property
    def q_in_registers(self) -> bool:
        """sm80 one-warp decode tiles (16 rows, or the keys-as-rows tile's 8) with head_dim <= 128
        keep Q in registers and have no Q/O tile in shared memory (Q_REGS and KT in
        variant_sm80.cuh; docs/dev/perf-log.md, "The decode tile's own ceiling")."""
        t = self.tile
        return self.mainloop == "sm80" and t.num_warps == 1 and t.block_m in (8, 16) and self.head_dim <= 128

    @property
    def fp16_gemms(self) -> bool:
        """The GEMMs run on fp16 operands although q and out are bf16: an FP8 K/V cache on sm_89+
        (e4m3 -> fp16 is one ``cvt`` a pair of codes, -> bf16 four instructions) in the FP8_REGS
        decode tile and in the Hopper kernel's FP8-cache path (not the FP8 tensor-core one).  The
        kernel moves each q row into fp16 by a power of two and packs P to fp16 (docs/api.md, "FP8
        K/V caches"; templates: ``q_frags_to_f16``, ``MMA_F16``)."""
        if self.dtype != "bf16" or not self.kv_dtype or self.fp8_mma or self.arch in ("sm_80", "sm_86", "sm_87"):
            return False
        return self.mainloop == "sm90a" or self.fp8_in_registers

    @property
    def fp8_in_registers(self) -> bool:
        """FP8 K/V converted in registers, straight from the FP8 stages into the MMA fragments (no
        16-bit K/V tile; FP8_REGS in variant_sm80.cuh): the 16-row one-warp decode tile with 16-key
        blocks, without ALiBi or a user variant (its key order inside a block is permuted, which
        only the built-in mask follows).  Up to head dim 128 (head_dim_v a multiple of 32) with Q in
        registers; above it (head_dim a multiple of 64, head_dim_v of 32, both up to 256) with Q's
        fragments in shared memory (Q_FRAGS): 16 x head_dim 16-bit words beside the FP8 stages
        instead of a padded Q tile, a 16-bit K/V tile and the stages, so that more of these CTAs fit
        an SM (d 256: 24,576 bytes against 41,728).  The keys-as-rows tile (8 rows, head dims up to 128)
        takes it too, with the same permutations (templates/attention/tile_kt_sm80.cuh)."""
        t = self.tile
        if not (self.kv_dtype and self.mainloop == "sm80" and t.num_warps == 1 and t.block_m in (8, 16)
                and t.block_n == 16 and self.head_dim_v % 32 == 0 and not self.alibi and self.variant is None):
            return False
        if t.keys_as_rows:   # (head dims <= 128: __post_init__)
            return self.head_dim % 32 == 0
        if self.q_in_registers:
            return self.head_dim_v <= 128
        return self.head_dim % 64 == 0 and self.head_dim <= 256 and self.head_dim_v <= 256

    def smem_bytes(self) -> int:
        """Dynamic shared memory of one CTA (bytes): Q/O tile (none if ``q_in_registers``) plus
        num_stages K and V tiles.

        sm80: rows are padded by 8 elements (16 bytes); must match SMEM_BYTES in variant_sm80.cuh.
        sm90a: 128-byte-swizzled tiles whose rows hold ``sm90_padded(head_dim)`` (Q, K) and
        ``sm90_padded(head_dim_v)`` (V) columns, the barrier area (``sm90_bar_bytes``: 256 bytes, 320
        with deep rings) and 1024 bytes of slack to align the base (variant_sm90.cuh).
        """
        t = self.tile
        if self.mainloop == "sm90a":
            dp, dvp = sm90_padded(self.head_dim), sm90_padded(self.head_dim_v)
            if self.fp8_mma:   # Q8, V^T slots (whole 128-key column blocks), landing stages (K read there)
                vt_keys = -(-t.block_n // 128) * 128
                return dp * t.block_m + t.num_stages * dvp * vt_keys + self.land_stages * t.block_n * (dp + dvp) \
                    + sm90_bar_bytes(t.num_stages, self.land_stages) + 1024 \
                    + (self.SM90_TINFO_BYTES if "t" in self.sm90_opts else 0)
            ring = 2 * (dp * (t.block_m + t.num_stages * t.block_n) + dvp * t.num_stages * t.block_n) \
                + sm90_bar_bytes(t.num_stages, self.land_stages) + 1024
            tinfo = self.SM90_TINFO_BYTES if "t" in self.sm90_opts else 0   # option "t": four TileInfo slots
            return ring + self.land_stages * t.block_n * (dp + dvp) + tinfo
        sq, sv = self.head_dim + 8, self.head_dim_v + 8
        q = 0 if self.q_in_registers else t.block_m * max(sq, sv)
        if self.fp8_in_registers:   # num_stages FP8 stages (and Q's fragments above head dim 128)
            frags = 0 if self.q_in_registers else 2 * t.block_m * self.head_dim
            return frags + t.num_stages * t.block_n * (self.head_dim + self.head_dim_v)
        if self.kv_dtype:   # one 16-bit K and V tile, num_stages FP8 stages of unpadded rows
            return 2 * (q + t.block_n * (sq + sv)) + t.num_stages * t.block_n * (self.head_dim + self.head_dim_v)
        return 2 * (q + t.num_stages * t.block_n * (sq + sv))

    @property
    def land_stages(self) -> int:
        """FP8 K/V on the Hopper mainloop: landing stages of the FP8 bytes (TMA writes them, producer
        warps 1-3 convert them into the 16-bit ring; variant_sm90.cuh): 2 where they fit in
        ``SM90_SMEM_LIMIT`` beside the ring, else 1; 0 for every other spec."""
        if self.mainloop != "sm90a" or not self.kv_dtype:
            return 0
        t = self.tile
        if self.fp8_mma:
            return t.num_stages
        dp, dvp = sm90_padded(self.head_dim), sm90_padded(self.head_dim_v)
        ring = 2 * (dp * (t.block_m + t.num_stages * t.block_n) + dvp * t.num_stages * t.block_n) + 1024 \
            + (self.SM90_TINFO_BYTES if "t" in self.sm90_opts else 0)
        return 2 if ring + sm90_bar_bytes(t.num_stages, 2) + 2 * t.block_n * (dp + dvp) <= self.SM90_SMEM_LIMIT else 1

    @property
    def name(self) -> str:
        hd = f"d{self.head_dim}" if self.head_dim == self.head_dim_v else f"d{self.head_dim}x{self.head_dim_v}"
        extra = "".join(f"_{flag}" for flag in ("pack", "split", "paged", "softcap", "alibi", "sinks", "rowsplits")
                        if getattr(self, {"pack": "pack_gqa", "rowsplits": "row_splits"}.get(flag, flag)))
        if self.variant is not None:
            extra += f"_var{self.variant.digest}"
        if self.kv_dtype:
            extra += f"_kv{self.kv_dtype}" + ("_fp8mma" if self.fp8_mma else "")
        path = "" if self.mainloop == "sm80" else "_wgmma" + "".join(f"_{_SM90_OPT_NAMES[o]}" for o in self.sm90_opts)
        return f"attn_{self.arch}{path}_{self.dtype}_{hd}_{self.mask}{extra}_{self.layout}_{self.tile.tag}"

    def template_vars(self) -> dict:
        return {
            "arch": self.arch,
            "dtype": self.dtype,
            "head_dim": self.head_dim,
            "head_dim_v": self.head_dim_v,
            "mask": self.mask,
            "pack_gqa": self.pack_gqa,
            "split": self.split,
            "paged": self.paged,
            "softcap": self.softcap,
            "row_splits": self.row_splits,
            "layout": self.layout,
            "block_m": self.tile.block_m,
            "block_n": self.tile.block_n,
            "num_warps": self.tile.num_warps,
            "num_stages": self.tile.num_stages,
            "min_blocks": self.tile.min_blocks,
            "smem_bytes": self.smem_bytes(),
            "mainloop": self.mainloop,
            "sm90_opts": self.sm90_opts,
            **self._sm90_regs(),
            **({"alibi": True} if self.alibi else {}),
            **({"sinks": True} if self.sinks else {}),
            **({"user": self.variant.template_vars()} if self.variant is not None else {}),
            **({"kv_dtype": self.kv_dtype} if self.kv_dtype else {}),
            **({"fp8_regs": True} if self.fp8_in_registers else {}),
            **({"fp16_gemms": True} if self.fp16_gemms else {}),
            **({"land_stages": self.land_stages} if self.land_stages else {}),
            **({"fp8_mma": True} if self.fp8_mma else {}),
        }

    def _sm90_regs_table(self) -> dict:
        """The Hopper kernel's (producer, consumer) registers by consumer warps for this variant."""
        return (self.SM90_REGS_GATHER if "g" in self.sm90_opts
                else self.SM90_REGS_FP8_MMA_SMALL if self.fp8_mma and self.head_dim <= 64
                else self.SM90_REGS_FP8_MMA_LARGE if self.fp8_mma and self.head_dim > 128
                else self.SM90_REGS_FP8_D128 if self.kv_dtype and not self.fp8_mma and self.head_dim <= 128
                else self.SM90_REGS_FP8 if self.kv_dtype
                else self.SM90_REGS_PAGED if self.paged
                else self.SM90_REGS_PACK if self.pack_gqa and max(self.head_dim, self.head_dim_v) <= 192
                else self.SM90_REGS)

    def _sm90_regs(self) -> dict:
        if self.mainloop != "sm90a":
            return {}
        producer, consumer = self._sm90_regs_table()[self.tile.num_warps]
        return {"producer_regs": producer, "consumer_regs": consumer}

    def variant_contexts(self) -> list:
        """Template variables of each attention variant in the kernel, with its C++ namespace."""
        return [{"ns": "kv0", **self.template_vars()}]

    def to_json(self) -> dict:
        d = dataclasses.asdict(self)
        if not self.alibi:
            del d["alibi"]       # the records (and cache keys) of specs without ALiBi stay as before
        if not self.sinks:
            del d["sinks"]
        if self.variant is None:
            del d["variant"]
        else:
            d["variant"] = self.variant.to_json()
        if not self.kv_dtype:
            del d["kv_dtype"]
        if not self.fp8_mma:
            del d["fp8_mma"]
        d["kind"] = self.kind
        return d


@dataclass(frozen=True)
class SchedulerSpec:
    """The GPU scheduler kernel that writes the metadata buffer (see ``metadata.py``)."""

    arch: str
    layout: str
    num_threads: int = 1024

    kind: ClassVar[str] = "scheduler"
    template: ClassVar[str] = "scheduler/scheduler.cu.j2"
    entry: ClassVar[str] = "kg_scheduler"

    def __post_init__(self):
        _check(self.arch, ALL_ARCHS, "arch")
        _check(self.layout, LAYOUTS, "layout")
        if self.num_threads % 32 or not 32 <= self.num_threads <= 1024:
            raise ValueError(f"num_threads must be a multiple of 32 in [32, 1024], got {self.num_threads}")

    @property
    def name(self) -> str:
        return f"sched_{self.arch}_{self.layout}_t{self.num_threads}"

    def template_vars(self) -> dict:
        return {"arch": self.arch, "layout": self.layout, "num_threads": self.num_threads,
                "min_share_wave_parts": MIN_SHARE_WAVE_PARTS}

    def to_json(self) -> dict:
        d = dataclasses.asdict(self)
        d["kind"] = self.kind
        return d


@dataclass(frozen=True)
class CombineSpec:
    """The split-KV combine kernel: ``row_warps`` warps per output row (1, 2, 4 or 8; 4 unless the
    selection says otherwise, ``heuristics.combine_row_warps``), 256 threads a CTA, so
    ``rows_per_cta`` = 8 / ``row_warps`` rows a CTA."""

    arch: str
    dtype: str
    head_dim_v: int
    #: add each row's attention sink once when merging (``CombineParams.sinks``); off: absent from
    #: the name, template variables and ``to_json`` (the plain combine kernel is unchanged)
    sinks: bool = False
    #: warps merging one (token, head) row; 4 (the default) is absent from the name
    row_warps: int = 4

    kind: ClassVar[str] = "combine"
    template: ClassVar[str] = "combine/combine.cu.j2"
    entry: ClassVar[str] = "kg_combine"
    num_threads: ClassVar[int] = 256
    ROW_WARPS: ClassVar[tuple] = (1, 2, 4, 8)

    def __post_init__(self):
        _check(self.arch, ALL_ARCHS, "arch")
        _check(self.dtype, DTYPES, "dtype")
        _check(self.head_dim_v, HEAD_DIMS, "head_dim_v")
        _check(self.row_warps, self.ROW_WARPS, "row_warps")

    @property
    def rows_per_cta(self) -> int:
        """(token, head) rows a CTA: 256 threads / (32 x ``row_warps``)."""
        return self.num_threads // (32 * self.row_warps)

    @property
    def name(self) -> str:
        return (f"combine_{self.arch}_{self.dtype}_dv{self.head_dim_v}" + ("_sinks" if self.sinks else "")
                + (f"_rw{self.row_warps}" if self.row_warps != 4 else ""))

    def template_vars(self) -> dict:
        # the metadata header is layout-independent; "soa" only satisfies the shared include
        return {"arch": self.arch, "dtype": self.dtype, "head_dim_v": self.head_dim_v, "layout": "soa",
                "row_warps": self.row_warps, **({"sinks": True} if self.sinks else {})}

    def to_json(self) -> dict:
        d = dataclasses.asdict(self)
        if not self.sinks:
            del d["sinks"]
        if self.row_warps == 4:
            del d["row_warps"]
        d["kind"] = self.kind
        return d


#: Compile targets with the fp32 -> e4m3 conversion (``cvt.rn.satfinite.e4m3x2.f32``, sm_89+).
FP8_CVT_ARCHS = ("sm_89", "sm_90a", "sm_100", "sm_120")


@dataclass(frozen=True)
class QuantSpec:
    """The kernel that quantises a 16-bit q to e4m3 per (request, KV head) with power-of-two
    factors (``launch.quant_q``; templates/quant/quant_q.cu.j2): ``dtype`` is q's.  Two phases
    of one kernel (a parameter): the largest |q| per request and KV head, then the cast and the
    descales.  ``num_threads`` threads a CTA, ``rows_per_cta`` rows of one KV head each."""

    arch: str
    dtype: str

    kind: ClassVar[str] = "quant"
    template: ClassVar[str] = "quant/quant_q.cu.j2"
    entry: ClassVar[str] = "kg_quant_q"
    num_threads: ClassVar[int] = 256
    rows_per_cta: ClassVar[int] = 64

    def __post_init__(self):
        _check(self.arch, FP8_CVT_ARCHS, "arch")
        _check(self.dtype, DTYPES, "dtype")

    @property
    def name(self) -> str:
        return f"quantq_{self.arch}_{self.dtype}"

    def template_vars(self) -> dict:
        return {"arch": self.arch, "dtype": self.dtype, "num_threads": self.num_threads,
                "rows_per_cta": self.rows_per_cta}

    def to_json(self) -> dict:
        d = dataclasses.asdict(self)
        d["kind"] = self.kind
        return d


@dataclass(frozen=True)
class FusedAttentionSpec:
    """One persistent attention kernel with two variants (horizontal fusion): ``long`` runs the
    tiles of long-query requests (prefill, chunked prefill), ``short`` runs one-warp tiles of
    short-query requests (decode, speculative decode), one per warp at a time, each in its own
    shared-memory slice.  Each variant has its own scheduler metadata (its request class) and the
    CTAs take tiles from the two queues.

    Two kernels: with an sm_80-path ``long`` (templates/attention/fwd_fused_sm80.cu.j2) every CTA
    alternates between the queues tile by tile, ``long`` on the whole CTA and ``short`` tiles side
    by side; with a Hopper ``long`` (mainloop "sm90a", fwd_fused_sm90.cu.j2, whose CTA holds the
    whole SM) ``short_ctas`` CTAs of the launch (a run-time parameter; those on SMs spread evenly
    over the SM ids, ``fused.short_first_sms``) start on the short queue with every warp, the
    others on the long queue, and each CTA takes the other queue's tiles once its own is empty.

    The two variants share arch, dtype, head dims, mask, layout, paging and softcap; ``short`` is
    an sm_80-path one-warp tile (it syncs only its warp).  When ``short`` splits KV, ``long``
    records row_splits for its tokens (the combine kernel reads every token's count).
    """

    long: AttentionSpec
    short: AttentionSpec

    kind: ClassVar[str] = "fused"
    entry: ClassVar[str] = "kg_attention_fused"
    #: Dynamic shared memory a Hopper fused kernel may ask for (bytes): the sm_90a opt-in limit.
    SM90_SMEM_LIMIT: ClassVar[int] = 232448

    def __post_init__(self):
        a, b = self.long, self.short
        for f in ("arch", "dtype", "head_dim", "head_dim_v", "mask", "layout", "paged", "softcap", "kv_dtype"):
            if getattr(a, f) != getattr(b, f):
                raise ValueError(f"fused variants differ in {f}: {getattr(a, f)!r} vs {getattr(b, f)!r}")
        if a.sinks or b.sinks:
            raise ValueError("the fused kernels take no sinks variant (launch.sinks.apply rescales after them)")
        if a.alibi or b.alibi:
            raise ValueError("the fused kernels take no ALiBi variant (an ALiBi mixed batch runs the classes in turn)")
        if a.fp8_mma and a.mainloop != "sm90a":
            raise ValueError("the sm_80 fused kernel takes no FP8-q variant (fp8_mma)")
        if a.variant is not None or b.variant is not None:
            raise ValueError("the fused kernels take no user variant (a mixed batch with a kernelgen.Variant runs "
                             "the classes in turn)")
        if b.tile.num_warps != 1 or b.mainloop != "sm80":
            raise ValueError(f"the short variant must be an sm80 one-warp tile, got {b.tile.num_warps} warps "
                             f"({b.mainloop})")
        if b.split and not (a.split or a.row_splits):
            raise ValueError("a splitting short variant needs a long variant that records row_splits")
        if self.hopper and a.split:
            raise ValueError("the Hopper fused kernel's long variant does not split KV")
        if self.hopper and a.pack_gqa:
            raise ValueError("the Hopper fused kernel's long variant does not pack GQA")
        if self.hopper and "t" in a.sm90_opts:
            raise ValueError("the Hopper fused kernel's long variant takes no sm90_opts 't'")
        if self.hopper and a.tile.num_warps != 8:
            raise ValueError(f"the Hopper fused kernel's long variant has 8 consumer warps (got {a.tile.num_warps}: "
                             f"its named barriers and register split are the two-warpgroup ones)")
        if self.hopper and a.head_dim_v > self.SM90_FUSED_MAX_DV:
            raise ValueError(f"the Hopper fused kernel takes head_dim_v <= {self.SM90_FUSED_MAX_DV} "
                             f"(got {a.head_dim_v}): wider O accumulators spill")

    @property
    def hopper(self) -> bool:
        """Whether the long variant is the Hopper one (fwd_fused_sm90.cu.j2)."""
        return self.long.mainloop == "sm90a"

    @property
    def mainloop(self) -> str:
        return self.long.mainloop

    @property
    def template(self) -> str:
        return "attention/fwd_fused_sm90.cu.j2" if self.hopper else "attention/fwd_fused_sm80.cu.j2"

    @property
    def tiles_per_step(self) -> int:
        """Short tiles a CTA runs side by side (one per warp): on the Hopper kernel, in a CTA that
        starts on the short queue (``short_tiles_first``)."""
        return self.short_tiles_first if self.hopper else self.long.tile.num_warps

    @property
    def short_tiles_first(self) -> int:
        """Hopper kernel: short tiles side by side in a CTA that starts on the short queue (one
        per warp, slices over the whole shared memory but its 1024-byte alignment slack)."""
        dec = self.short.smem_bytes()
        return max(0, min(self.num_threads // 32, (self._hopper_smem_budget() - 1024) // dec))

    @property
    def short_tiles_after(self) -> int:
        """Hopper kernel: short tiles side by side in the consumer warps of a CTA whose long queue
        ran out (slices below the long variant's mbarriers)."""
        dec = self.short.smem_bytes()
        off_bar = self.long.smem_bytes() - sm90_bar_bytes(self.long.tile.num_stages, self.long.land_stages) - 1024
        return max(0, min(self.long.tile.num_warps, off_bar // dec))

    def _hopper_smem_budget(self) -> int:
        dec = self.short.smem_bytes()
        want = (self.num_threads // 32) * dec + 1024
        return max(self.long.smem_bytes(), min(want, self.SM90_SMEM_LIMIT))

    @property
    def num_threads(self) -> int:
        return self.long.num_threads

    def smem_bytes(self) -> int:
        """Dynamic shared memory of one CTA (bytes): the larger of the long tile's and the short
        tiles' (one slice per short tile; on the Hopper kernel as many as fit the opt-in limit, up
        to one per warp)."""
        if self.hopper:
            return self._hopper_smem_budget()
        return max(self.long.smem_bytes(), self.tiles_per_step * self.short.smem_bytes())

    @property
    def arch(self) -> str:
        return self.long.arch

    @property
    def dtype(self) -> str:
        return self.long.dtype

    @property
    def layout(self) -> str:
        return self.long.layout

    @property
    def split(self) -> bool:
        return self.long.split or self.short.split

    @property
    def name(self) -> str:
        b = self.short
        extra = "".join(f"_{f}" for f, on in (("pack", b.pack_gqa), ("split", b.split)) if on)
        return f"fused_{self.long.name}__{b.tile.tag}{extra}"

    #: Registers per thread of the Hopper fused kernel's producer and consumer warpgroups after
    #: ``setmaxnreg`` (packed K/V, paged by TMA, paged gathered): the producer keeps 8-16 more than
    #: in the standalone kernel (``AttentionSpec.SM90_REGS*``), which ptxas otherwise meets by
    #: spilling a value live across the reallocation (the decode-first branch before it); 128 x
    #: producer + 256 x consumer stays within the CTA's 168 x 384.
    #: head_dim_v above 128 (wide O accumulators) spills at these budgets (and at the standalone
    #: 24/240 too): ``SM90_FUSED_MAX_DV``; such mixed batches run the classes in turn.
    #: Gathering at head dim 64 spills a value across the reallocation below 72 producer registers;
    #: the lean gather (one row address a copy step) at head dim 128 below 64.
    #: An FP8 cache (``kv_dtype``; producer warps 1-3 convert the landing stages): 56 / 224, so
    #: that the converters keep two chunks in flight (the standalone FP8 kernel's
    #: ``AttentionSpec.SM90_REGS_FP8_D128``, ``CONV_UNROLL`` 2); H200, ``mixed_trace_fp8``
    #: (llama3-8b, e4m3 cache, bf16 q), time against 40 / 232: 0.945 (3350 / 3545 us, 44
    #: short-first CTAs), 0.934 on 4 chunks of 4096 + 256 decodes (7699 / 8238 us;
    #: ``benchmarks/experiments/mixed_sweep.py --kv-dtype e4m3 --fused-regs``, thirty-third session).
    #: With a soft-cap 40 / 232 ("fp8_softcap"): at 224 the consumers' key-block loop spills.
    #: With the 16-row FP8 decode tile (``KERNELGEN_SM90_SHORT_ROWS=16``) the FP8 fused kernels at head
    #: dims 96 and 128 spill 8-88 bytes, none inside a key-block loop: that tile alone takes 166 of the
    #: 168 registers a thread has before ``setmaxnreg``, so the CTA-level values live across the
    #: short-first branch, and the tile cursor, go to local memory once a tile; with the default
    #: keys-as-rows tile (``heuristics.SM90_FUSED_SHORT_ROWS_FP8``) nothing spills
    #: (tests/test_fused_hopper_cpu.py).
    SM90_FUSED_REGS: ClassVar[dict] = {"packed": (32, 232), "paged": (48, 224), "gather": (64, 216),
                                       "gather_d64": (72, 216), "fp8": (56, 224), "fp8_softcap": (40, 232),
                                       "fp8_mma": (40, 232)}
    # ("fp8_mma": the long class on the FP8 tensor cores, quantize_q; at 48 / 224 and 56 / 224 ptxas spilled
    # 96 bytes; at 40 / 232 no spill on 224-key blocks with a mask and on 128-key blocks, a few words once a
    # tile, outside the key-block loops, on 192-key blocks and on 224 without a mask: the standalone variant's)
    SM90_FUSED_MAX_DV: ClassVar[int] = 128

    def hopper_regs(self) -> tuple:
        """(producer, consumer) registers of the Hopper fused kernel (``SM90_FUSED_REGS``)."""
        a = self.long
        if "g" in a.sm90_opts:
            return self.SM90_FUSED_REGS["gather_d64" if max(a.head_dim, a.head_dim_v) <= 64 else "gather"]
        if a.fp8_mma:
            return self.SM90_FUSED_REGS["fp8_mma"]
        if a.kv_dtype:
            return self.SM90_FUSED_REGS["fp8_softcap" if a.softcap else "fp8"]
        return self.SM90_FUSED_REGS["paged" if a.paged else "packed"]

    def template_vars(self) -> dict:
        d = {"arch": self.arch, "dtype": self.dtype, "layout": self.layout,
             "min_blocks": self.long.tile.min_blocks, "num_threads": self.num_threads,
             "smem_bytes": self.smem_bytes(), "tiles_per_step": self.tiles_per_step}
        if self.hopper:
            d["producer_regs"], d["consumer_regs"] = self.hopper_regs()
            d.update(short_tiles_first=self.short_tiles_first, short_tiles_after=self.short_tiles_after)
        return d

    def variant_contexts(self) -> list:
        long = {"ns": "kpre", **self.long.template_vars()}
        if self.hopper:
            long["queue_only"] = True
        return [long, {"ns": "kdec", "fused": True, **self.short.template_vars()}]

    def to_json(self) -> dict:
        return {"kind": self.kind, "long": self.long.to_json(), "short": self.short.to_json()}


def spec_from_json(d: dict):
    """Rebuild a spec from ``to_json()`` output (used by ``kernelgen cache`` to describe entries)."""
    d = dict(d)
    kind = d.pop("kind")
    if kind == "attention":
        d["tile"] = TileConfig(**d["tile"])
        if d.get("variant") is not None:
            d["variant"] = VariantCode.from_json(d["variant"])
        return AttentionSpec(**d)
    if kind == "fused":
        return FusedAttentionSpec(spec_from_json(d["long"]), spec_from_json(d["short"]))
    if kind == "scheduler":
        return SchedulerSpec(**d)
    if kind == "combine":
        return CombineSpec(**d)
    if kind == "quant":
        return QuantSpec(**d)
    raise ValueError(f"unknown spec kind {kind!r}")
