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

ARCHS = ("sm_80", "sm_86", "sm_89", "sm_90a")
DTYPES = ("fp16", "bf16")
HEAD_DIMS = (64, 96, 128, 192, 256)
MASKS = ("none", "causal", "local")
LAYOUTS = ("soa", "aos")


def _check(value, allowed, what):
    if value not in allowed:
        raise ValueError(f"{what} must be one of {allowed}, got {value!r}")


@dataclass(frozen=True)
class TileConfig:
    """Tile shape of the attention mainloop.

    block_m: query rows per CTA tile; block_n: keys per inner step; num_warps: warps per CTA
    (each warp owns block_m / num_warps query rows, a multiple of 16); num_stages: depth of the
    cp.async K/V pipeline (>= 2); min_blocks: CTAs per SM promised to the register allocator
    (``__launch_bounds__``), which caps registers at 65536 / (min_blocks * 32 * num_warps).
    """

    block_m: int
    block_n: int
    num_warps: int
    num_stages: int
    min_blocks: int = 1

    def __post_init__(self):
        if self.block_m % (16 * self.num_warps):
            raise ValueError(f"block_m={self.block_m} must be a multiple of 16*num_warps={16 * self.num_warps}")
        if self.block_n % 16 or self.block_n <= 0:
            raise ValueError(f"block_n={self.block_n} must be a positive multiple of 16")
        if self.num_stages < 2:
            raise ValueError(f"num_stages={self.num_stages} must be >= 2")

    @property
    def tag(self) -> str:
        return f"m{self.block_m}n{self.block_n}w{self.num_warps}s{self.num_stages}b{self.min_blocks}"


@dataclass(frozen=True)
class AttentionSpec:
    """The varlen attention forward kernel (sm_80 tensor-core path: mma.sync, ldmatrix, cp.async).

    It runs on every arch from sm_80 on, sm_90a included (compiled for the exact arch).
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

    kind: ClassVar[str] = "attention"
    template: ClassVar[str] = "attention/fwd_sm80.cu.j2"
    entry: ClassVar[str] = "kg_attention_fwd"

    def __post_init__(self):
        _check(self.arch, ARCHS, "arch")
        _check(self.dtype, DTYPES, "dtype")
        _check(self.head_dim, HEAD_DIMS, "head_dim")
        _check(self.head_dim_v, HEAD_DIMS, "head_dim_v")
        _check(self.mask, MASKS, "mask")
        _check(self.layout, LAYOUTS, "layout")

    @property
    def causal(self) -> bool:
        return self.mask == "causal"

    def smem_bytes(self) -> int:
        """Dynamic shared memory of one CTA (bytes): Q/O tile plus num_stages K and V tiles.

        Rows are padded by 8 elements (16 bytes); must match SMEM_BYTES in fwd_sm80.cu.j2.
        """
        t = self.tile
        sq, sv = self.head_dim + 8, self.head_dim_v + 8
        q = t.block_m * max(sq, sv)
        return 2 * (q + t.num_stages * t.block_n * (sq + sv))

    @property
    def name(self) -> str:
        hd = f"d{self.head_dim}" if self.head_dim == self.head_dim_v else f"d{self.head_dim}x{self.head_dim_v}"
        extra = "".join(f"_{flag}" for flag in ("pack", "split", "paged", "softcap")
                        if getattr(self, "pack_gqa" if flag == "pack" else flag))
        return f"attn_{self.arch}_{self.dtype}_{hd}_{self.mask}{extra}_{self.layout}_{self.tile.tag}"

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
            "layout": self.layout,
            "block_m": self.tile.block_m,
            "block_n": self.tile.block_n,
            "num_warps": self.tile.num_warps,
            "num_stages": self.tile.num_stages,
            "min_blocks": self.tile.min_blocks,
            "smem_bytes": self.smem_bytes(),
        }

    def to_json(self) -> dict:
        d = dataclasses.asdict(self)
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
        _check(self.arch, ARCHS, "arch")
        _check(self.layout, LAYOUTS, "layout")
        if self.num_threads % 32 or not 32 <= self.num_threads <= 1024:
            raise ValueError(f"num_threads must be a multiple of 32 in [32, 1024], got {self.num_threads}")

    @property
    def name(self) -> str:
        return f"sched_{self.arch}_{self.layout}_t{self.num_threads}"

    def template_vars(self) -> dict:
        return {"arch": self.arch, "layout": self.layout, "num_threads": self.num_threads}

    def to_json(self) -> dict:
        d = dataclasses.asdict(self)
        d["kind"] = self.kind
        return d


@dataclass(frozen=True)
class CombineSpec:
    """The split-KV combine kernel (one warp per output row)."""

    arch: str
    dtype: str
    head_dim_v: int

    kind: ClassVar[str] = "combine"
    template: ClassVar[str] = "combine/combine.cu.j2"
    entry: ClassVar[str] = "kg_combine"
    num_threads: ClassVar[int] = 256
    rows_per_cta: ClassVar[int] = 8

    def __post_init__(self):
        _check(self.arch, ARCHS, "arch")
        _check(self.dtype, DTYPES, "dtype")
        _check(self.head_dim_v, HEAD_DIMS, "head_dim_v")

    @property
    def name(self) -> str:
        return f"combine_{self.arch}_{self.dtype}_dv{self.head_dim_v}"

    def template_vars(self) -> dict:
        # the metadata header is layout-independent; "soa" only satisfies the shared include
        return {"arch": self.arch, "dtype": self.dtype, "head_dim_v": self.head_dim_v, "layout": "soa"}

    def to_json(self) -> dict:
        d = dataclasses.asdict(self)
        d["kind"] = self.kind
        return d


def spec_from_json(d: dict):
    """Rebuild a spec from ``to_json()`` output (used by ``kernelgen cache`` to describe entries)."""
    d = dict(d)
    kind = d.pop("kind")
    if kind == "attention":
        d["tile"] = TileConfig(**d["tile"])
        return AttentionSpec(**d)
    if kind == "scheduler":
        return SchedulerSpec(**d)
    if kind == "combine":
        return CombineSpec(**d)
    raise ValueError(f"unknown spec kind {kind!r}")
