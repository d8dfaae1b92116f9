"""Values of the kernels' non-pointer parameter fields and launch shapes, from tensors and the
call's configuration.

One function per kernel, used both by the one-off packers of ``launch.oneoff``
(``scheduler_params``, ``attention_params``, ``launch_combine``) and by the prepared launches of
``launch.prepared`` and ``launch.fused``, so the two paths pack the same bytes.  Strides are in
elements; pointer fields are packed per launch in ``params.ParamStruct.pointer_names`` order.
"""
from __future__ import annotations

import math

from . import metadata

_LOG2E = 1.4426950408889634
_SPLIT_STRIDES = ("accum_split_stride", "accum_head_stride", "lse_accum_split_stride", "lse_accum_head_stride",
                  "split_request_rows")


def split_strides(split) -> dict:
    """The four partials strides of a ``SplitBuffers`` and its ``request_rows`` (all 0 for None)."""
    if split is None:
        return dict.fromkeys(_SPLIT_STRIDES, 0)
    return {"accum_split_stride": split.out_accum.stride(0), "accum_head_stride": split.out_accum.stride(1),
            "lse_accum_split_stride": split.lse_accum.stride(0), "lse_accum_head_stride": split.lse_accum.stride(1),
            "split_request_rows": split.request_rows}


def scheduler_fields(batch: int, capacity: int, cfg) -> dict:
    """SchedParams' integers for ``batch`` requests in a metadata buffer of ``capacity``."""
    return {"batch": batch, "capacity": capacity, "num_heads": cfg.num_heads, "block_m": cfg.block_m,
            "block_n": cfg.block_n, "pack_factor": cfg.pack_factor, "max_splits": cfg.max_splits,
            "forced_splits": int(cfg.forced_splits), "num_ctas": cfg.num_ctas, "max_kvblocks_l2": cfg.max_kvblocks_l2,
            "swizzle_mult": cfg.swizzle_mult, "sort": int(cfg.sort), "class_min_q": cfg.class_min_q,
            "class_max_q": cfg.class_max_q, "window_left": cfg.window_left, "wave_ctas": cfg.wave_ctas,
            "min_share": cfg.min_share}


def attention_fields(q, k, v, out, lse, page_table, capacity: int, scale: float, window=(-1, -1),
                     softcap: float = 0.0, strides: dict | None = None, alibi: tuple | None = None,
                     sinks: int | None = None, user: tuple | None = None, descale: dict | None = None) -> dict:
    """AttnParams' strides, sizes and scales (``scale`` is softmax_scale, folded with log2(e));
    ``strides`` are the partials' (``split_strides``), None without split-KV.  ``alibi``: (address,
    batch stride) of the ALiBi slopes (``params.ATTENTION_PARAMS_ALIBI``), None without ALiBi (the
    plain AttnParams has no such fields).  ``sinks``: the address of the float32 sinks of a sink
    kernel (``params.ATTENTION_PARAMS_SINKS``), None otherwise.  ``user``: the addresses of a user
    variant's tensors (``AttnParams.user0`` .., ``params.user_params``), None without a variant.
    ``descale``: an FP8 kernel's descale fields (``descale_fields``), None for a 16-bit cache."""
    paged = page_table is not None
    total_q, hq, _ = out.shape
    extra = {} if alibi is None else {"alibi_slopes": int(alibi[0]), "alibi_batch_stride": int(alibi[1])}
    if sinks is not None:
        extra["sinks"] = int(sinks)
    if user is not None:
        extra.update((f"user{i}", int(a)) for i, a in enumerate(user))
    if descale is not None:
        extra.update(descale)
    return {
        **extra,
        "q_row_stride": q.stride(0), "q_head_stride": q.stride(1),
        "k_row_stride": k.stride(1 if paged else 0), "k_head_stride": k.stride(-2), "k_page_stride": k.stride(0) if paged else 0,
        "v_row_stride": v.stride(1 if paged else 0), "v_head_stride": v.stride(-2), "v_page_stride": v.stride(0) if paged else 0,
        "o_row_stride": out.stride(0), "o_head_stride": out.stride(1),
        "lse_head_stride": lse.stride(0) if lse is not None else 0,
        "page_table_stride": page_table.stride(0) if paged else 0,
        **(strides if strides is not None else split_strides(None)),
        "num_heads_q": hq, "num_heads_kv": k.shape[-2], "capacity": capacity, "total_q": total_q,
        "page_size": k.shape[1] if paged else 0, "window_left": window[0], "window_right": window[1],
        "scale_log2": scale * _LOG2E,
        "softcap_scale": scale / softcap if softcap > 0 else 0.0,
        "softcap_log2": softcap * _LOG2E,
    }


def descale_fields(k_descale, v_descale, strides: tuple, q_descale=None) -> dict:
    """The FP8 variants' AttnParams fields (``params.FP8_FIELDS``): the addresses of ``k_descale``,
    ``v_descale`` and ``q_descale`` (0 for None: factor 1) and their (batch, head) strides in
    elements (``strides``: ``validation.descale``'s results for k and v, then optionally q's; None
    for None)."""
    d = {}
    qs = strides[2] if len(strides) > 2 else None
    for name, x, st in (("k_descale", k_descale, strides[0]), ("v_descale", v_descale, strides[1]),
                        ("q_descale", q_descale, qs)):
        d[name] = 0 if x is None else int(x.data_ptr())
        d[f"{name}_batch_stride"], d[f"{name}_head_stride"] = (0, 0) if st is None else (int(st[0]), int(st[1]))
    return d


def without_q_descale(descale: dict) -> dict:
    """``descale_fields``' result with ``q_descale`` absent (factor 1): the fields of the short class
    of a fused kernel that reads the 16-bit q whose e4m3 copy its long class reads (``quantize_q``)."""
    return {**descale, "q_descale": 0, "q_descale_batch_stride": 0, "q_descale_head_stride": 0}


def combine_fields(out, lse, num_heads_q: int, strides: dict, sinks: int | None = None) -> dict:
    """CombineParams' strides and sizes (``strides``: the partials', ``split_strides``); ``sinks``:
    the sinks' address of a sink combine kernel (``params.COMBINE_PARAMS_SINKS``)."""
    return {**({} if sinks is None else {"sinks": int(sinks)}), "o_row_stride": out.stride(0), "o_head_stride": out.stride(1),
            "lse_head_stride": lse.stride(0) if lse is not None else 0, **strides,
            "num_heads_q": num_heads_q, "total_q": out.shape[0]}


def combine_grid(total_q: int, num_heads_q: int, rows_per_cta: int) -> int:
    """CTAs of a combine launch: ``rows_per_cta`` (token, head) rows a CTA (``CombineSpec.rows_per_cta``)."""
    return max(1, math.ceil(total_q * num_heads_q / rows_per_cta))


#: Up to this many request slots the scheduler runs one thread per slot; above, two (then up to
#: eight at 1024 threads).  Measured on the H200 (docs/dev/perf-log.md, scheduler v10): below it the
#: kernel is latency-bound and more warps win; above it, issue-bound, and half the threads do the
#: same work in fewer instructions.
SCHEDULER_ONE_SLOT_PER_THREAD = 512


def scheduler_launch_shape(capacity: int, max_smem: int = 48 * 1024) -> tuple[int, int]:
    """(threads, dynamic shared memory bytes) of a scheduler launch for a capacity (request slots):
    a power of two of threads, at least a warp and at most 1024, one per slot up to
    ``SCHEDULER_ONE_SLOT_PER_THREAD`` slots and one per two slots above (so at most 8 slots a
    thread at ``metadata.MAX_CAPACITY``); two 4-byte sort-key buffers per slot, and two more for
    the plans staged by request when ``max_smem`` (bytes, what the loaded kernel may use) allows
    (otherwise the kernel re-reads the lengths of each sorted request from global memory)."""
    cap4 = metadata.round_up(capacity, 4)
    per = 1 if cap4 <= SCHEDULER_ONE_SLOT_PER_THREAD else 2
    n = 32
    while n * per < cap4:
        n <<= 1
    threads = min(n, 1024)
    return threads, 16 * cap4 if 16 * cap4 <= max_smem else 8 * cap4


def check_capacity(capacity: int) -> None:
    """ValueError past metadata.MAX_CAPACITY requests (the scheduler sorts a batch in one CTA)."""
    if capacity > metadata.MAX_CAPACITY:
        raise ValueError(f"capacity {capacity} exceeds {metadata.MAX_CAPACITY} requests (the scheduler sorts the "
                         f"whole batch in one CTA)")
