"""Variant choice: one function derives the kernel specs for a call.

``specs_for`` is used by the dispatcher at run time *and* by ``kernelgen warmup``, so a pre-warmed
cache is always hit (the failure mode of FlashInfer issue #4737, where the pre-compile step and
the launch path each had their own rule).

Tile configs: FlashAttention-2 style shapes (Dao, 2023) picked per head dim so that the kernel
compiles with no register spills (checked by tests/test_compile_matrix.py) and fits the arch's
shared memory.  Benchmarks on the H200 choose among the candidates in ``CANDIDATE_TILES``.
"""
from __future__ import annotations

from .spec import ARCHS, AttentionSpec, SchedulerSpec, TileConfig

#: Largest dynamic shared memory one CTA may opt into, bytes (CUDA programming guide, per arch).
SMEM_LIMIT = {"sm_80": 166912, "sm_86": 101376, "sm_89": 101376, "sm_90a": 232448}

#: Default tile per head dim for archs with >= 160 KB of shared memory per CTA (sm_80, sm_90a).
_TILES_BIG_SMEM = {
    64: TileConfig(128, 64, 4, 2, 2),
    96: TileConfig(128, 32, 4, 2, 2),
    128: TileConfig(128, 32, 4, 3, 2),  # H200 sweep (docs/perf-notes.md): 3 stages +3% over 2
    192: TileConfig(64, 64, 4, 2, 1),
    256: TileConfig(64, 32, 4, 2, 1),
}
#: sm_90a has 227 KB: a larger K/V block for head dim 256.
_TILES_SM90 = {**_TILES_BIG_SMEM, 256: TileConfig(128, 64, 8, 2, 1)}
#: Consumer Ampere/Ada (sm_86, sm_89): about 99 KB per CTA.
_TILES_SMALL_SMEM = {
    64: TileConfig(128, 64, 4, 2, 2),
    96: TileConfig(128, 32, 4, 2, 2),
    128: TileConfig(128, 32, 4, 2, 2),
    192: TileConfig(64, 32, 4, 2, 1),
    256: TileConfig(64, 16, 4, 2, 1),
}

#: Alternatives measured by the benchmark's tile sweep (tools/bench_tiles.py).
CANDIDATE_TILES = {
    128: [
        TileConfig(128, 32, 4, 2, 2),
        TileConfig(128, 32, 4, 3, 2),
        TileConfig(128, 64, 8, 2, 1),
        TileConfig(128, 128, 8, 2, 1),
        TileConfig(64, 64, 4, 2, 2),
        TileConfig(64, 64, 4, 3, 2),
    ],
}


def tile_config(arch: str, head_dim: int, head_dim_v: int) -> TileConfig:
    """The tile shape for a head dim on an arch (head_dim_v uses the larger of the two)."""
    d = max(head_dim, head_dim_v)
    table = _TILES_SM90 if arch == "sm_90a" else _TILES_SMALL_SMEM if arch in ("sm_86", "sm_89") else _TILES_BIG_SMEM
    if d not in table:
        raise ValueError(f"head_dim {head_dim}/{head_dim_v} has no tile config (supported: {sorted(table)})")
    return table[d]


def attention_spec(arch, dtype, head_dim, head_dim_v, causal, layout, tile: TileConfig | None = None) -> AttentionSpec:
    spec = AttentionSpec(
        arch=arch,
        dtype=dtype,
        head_dim=head_dim,
        head_dim_v=head_dim_v,
        mask="causal" if causal else "none",
        layout=layout,
        tile=tile or tile_config(arch, head_dim, head_dim_v),
    )
    limit = SMEM_LIMIT.get(arch, 101376)
    if spec.smem_bytes() > limit:
        raise ValueError(f"{spec.name} needs {spec.smem_bytes()} bytes of shared memory; {arch} allows {limit}")
    return spec


def scheduler_spec(arch: str, layout: str) -> SchedulerSpec:
    return SchedulerSpec(arch=arch, layout=layout)


def specs_for(arch, dtype, head_dim, head_dim_v, causal, layout, tile: TileConfig | None = None):
    """(scheduler spec, attention spec) for a call.  The single source of truth for variant choice."""
    return scheduler_spec(arch, layout), attention_spec(arch, dtype, head_dim, head_dim_v, causal, layout, tile)


def arch_for_capability(major: int, minor: int) -> str:
    """Compile target for a device's compute capability: the exact arch, with 'a' on Hopper."""
    cc = major * 10 + minor
    if cc == 90:
        return "sm_90a"
    if cc in (80, 86, 89):
        return f"sm_{cc}"
    if cc == 87:
        return "sm_86"  # an sm_86 cubin runs on 8.7 (same major, higher minor)
    raise RuntimeError(
        f"compute capability {major}.{minor} is not supported by kernelgen's kernels "
        f"(supported: {', '.join(ARCHS)})"
    )

