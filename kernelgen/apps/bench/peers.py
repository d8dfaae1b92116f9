"""Peers of ``kernelgen bench``: other attention implementations run in the same process on the same
inputs, and kernelgen's own switches.

A peer builder sets its inputs up (layout changes, gathering a paged cache, block masks: all
outside the timing) and returns a :class:`Peer`, or raises :class:`Unavailable` with the reason
it cannot run the shape.  :func:`measure` runs one call of each peer (errors there make it
unavailable too, with the exception's text), times it, and compares its output with kernelgen's.
Nothing a peer does can stop the suite: every failure ends up in ``entry["unavailable"]``.

Peers (names as they appear in the reports):

* ``torch_fa2``, ``cudnn_sdpa``, ``mem_efficient_sdpa``: ``torch.nn.functional.scaled_dot_product_attention``
  pinned to one backend (flash, cuDNN, memory-efficient) with ``sdpa_kernel``; uniform-length
  (dense ``(B, H, S, D)``) shapes only, no window or soft-cap.
* ``torch_fa2_varlen``: ``torch.ops.aten._flash_attention_forward`` with ``cu_seqlens`` (FA2's
  varlen entry in torch), unpaged: a paged cache is gathered into packed K/V first.
* ``flex_attention``: ``torch.nn.attention.flex_attention`` compiled with ``torch.compile``, with a
  document mask (bottom-right causal per request, plus the window) and a tanh soft-cap
  ``score_mod``; on decode shapes it reads the gathered (unpaged) cache.
* ``fa3``: FlashAttention-3 (the PyPI build ``fa3-fwd``, module ``fa3_fwd_interface``; Hopper only),
  ``flash_attn_func`` on dense shapes and ``flash_attn_varlen_func`` on varlen ones, with its own
  split and pack-GQA heuristics (``num_splits=0``, ``pack_gqa=None``).  That build has no paged
  K/V, no local window and no fp16 (its ``fa3_fwd_config`` says so; the reasons name the flag).
  ``fa3_unpaged``: the same on a paged entry's cache gathered into packed K/V outside the timing
  (what an engine on this build would have to keep).
* ``fa4``: FlashAttention-4 (``flash-attn-4``, CuTe DSL, ``flash_attn.cute.interface``), varlen
  entry (dense shapes through ``flash_attn_func``), paged K/V through ``page_table`` +
  ``seqused_k``; ``num_splits=1`` (FA4 has no split-KV on sm_90), ``pack_gqa=None``.  It compiles
  each new kernel configuration with its own JIT on the first call, so ``first_call_s`` shows
  that cost beside kernelgen's cold compile.  Attention sinks go in as ``learnable_sink`` (float32
  (Hq,), natural-unit logits as kernelgen's ``sinks=``); it has no ALiBi argument, so ALiBi and
  the user-variant entries give it a CuTe DSL ``score_mod`` (``fa4_alibi_score_mod``,
  ``fa4_softcap_score_mod``; its sm_90 path applies user score_mods, only sm_8x refuses them).
  FA3 (this build) has neither sinks nor ALiBi nor score_mods, torch's FA2 entry neither sinks
  nor ALiBi, FlexAttention no sinks (its ALiBi is a score_mod): the reasons are stated.
  Both are imported from wherever Python finds them (``tools/peer_wheels.py`` carries them to a
  GPU machine without a package registry); missing, they are unavailable with the import error.
* ``kernelgen_aos``, ``kernelgen_nosort``: kernelgen with the AoS metadata layout / with the
  scheduler's longest-first sort off.
* ``kernelgen_sm90a``, ``kernelgen_sm80``: kernelgen forced onto the Hopper mainloop (wgmma, TMA;
  ``arch="sm_90a"``, unavailable where that path does not support the call or the device) or the
  sm_80 mainloop (mma.sync; ``arch="sm_80"``).  kernelgen's own entry is the automatic choice.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

SDPA_PEERS = ("torch_fa2", "cudnn_sdpa", "mem_efficient_sdpa")
FA2_VARLEN = "torch_fa2_varlen"
FLEX = "flex_attention"
FA3, FA3_UNPAGED, FA4 = "fa3", "fa3_unpaged", "fa4"
#: The other implementations (not kernelgen's own switches, not its serial/two-stream splits): the
#: candidates of an entry's best peer (report.best_peer).
EXTERNAL = SDPA_PEERS + (FA2_VARLEN, FLEX, FA3, FA3_UNPAGED, FA4)
KG_AOS, KG_NOSORT, KG_SM90A, KG_SM80 = "kernelgen_aos", "kernelgen_nosort", "kernelgen_sm90a", "kernelgen_sm80"
#: kernelgen forced to one split (no split-KV) and to one query head a tile (no pack-GQA).
KG_SPLITS1, KG_NOPACK = "kernelgen_splits1", "kernelgen_nopack"
VARLEN_SDPA_REASON = "varlen batch: SDPA takes uniform-length (B, H, S, D) batches only"
FA2_NO_SINKS = ("aten._flash_attention_forward (torch's FA2) has no attention sinks (no learnable_sink / s_aux "
                "argument)")
FA2_NO_ALIBI = ("aten._flash_attention_forward (torch's FA2) takes no ALiBi slopes (FlashAttention-2's alibi_slopes "
                "is not exposed by torch)")
FA3_NO_SINKS = "this fa3-fwd build has no attention sinks (its flash_attn_varlen_func has no learnable_sink / s_aux)"
FA3_NO_ALIBI = ("this fa3-fwd build has no ALiBi (FlashAttention-3 dropped alibi_slopes: its docstring still lists "
                "them, its signature has no such argument)")
FLEX_NO_SINKS = ("FlexAttention has no attention sinks (a value-less logit in the softmax denominator is not a "
                 "score_mod or a mask)")
SDPA_NO_SINKS = ("SDPA has no attention sinks (a value-less logit in the softmax denominator is not an attention "
                 "mask)")
SDPA_NO_ALIBI = "SDPA takes no ALiBi slopes (only an explicit float mask, which forces another kernel)"
FLEX_SKIPPED_REASON = "not measured at --flex {policy} (each new shape recompiles; use --flex all)"


class Unavailable(Exception):
    """A peer cannot run this shape; the message says why."""


@dataclass
class Peer:
    """A ready-to-time peer: ``fn()`` enqueues one call; ``output(result)`` turns what ``fn``
    returned into kernelgen's (total_q, heads, head_dim_v) layout for the comparison (None: no
    comparison)."""

    fn: Callable
    output: Callable | None = None


def clip(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters at a word boundary, with "…" where it was cut."""
    text = str(text)
    if len(text) <= limit:
        return text
    head = text[:max(1, limit - 1)]
    cut = head.rstrip().rfind(" ")
    if cut > limit // 2:
        head = head[:cut]
    return head.rstrip(" ,;:([") + "…"


def reason(e: BaseException, warned=(), limit: int = 400) -> str:
    """One-line reason from an exception, with the warnings the failed call issued (SDPA says
    there why each backend refused the inputs)."""
    msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
    text = msg if isinstance(e, Unavailable) else (f"{type(e).__name__}: {msg}" if msg else type(e).__name__)
    notes = []
    for w in warned:
        line = " ".join(str(getattr(w, "message", w)).split())
        if line and line not in notes:
            notes.append(line)
    if notes:
        text += " [" + clip("; ".join(notes), limit) + "]"
    return clip(text, limit)


def _sync() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _settle() -> None:
    """After a peer: wait for the device and return cached blocks (never raises: after a sticky
    CUDA error later entries report it themselves)."""
    try:
        import torch

        if torch.cuda.is_available():
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
    except Exception:  # noqa: BLE001
        pass


#: How a peer is timed when the entry passes kernelgen's call as ``base`` (``measure``): recorded as
#: the entry's ``peer_method``.
ALTERNATING_METHOD = ("each peer timed in {rounds} rounds alternating with kernelgen's call (the order flipped "
                      "every round; each timing as every peer's), the ratio the median of the peer's times over "
                      "the median of kernelgen's of the same rounds")


class _BaseFailed(Exception):
    """kernelgen's own call (``measure``'s ``base``) raised while alternating with a peer."""


def _time_base(timer, base) -> float:
    """``timer(base)``, a failure raised as ``_BaseFailed`` (kernelgen's own, not the peer's)."""
    try:
        return timer(base)
    except Exception as err:
        raise _BaseFailed(err) from err


def measure(entry: dict, builders: dict, timer, reference=None, base=None, rounds: int = 1) -> None:
    """Build, run once, compare and time each peer; fills ``entry["peers"]`` (µs),
    ``entry["unavailable"]`` (reason), ``entry["max_diff"]`` (largest |peer - kernelgen|) and
    ``entry["ref_max"]`` (largest |peer|, for the tolerance) and ``entry["first_call_s"]`` (seconds
    from building the peer through its first call's completion: a JIT peer's compile shows here;
    the runner imports the peers' modules before the entries, :func:`preload`, so the first entry
    does not carry the import).

    ``builders``: {peer name: zero-argument callable returning a Peer, or a str = the reason it is
    unavailable}.  ``timer(fn)`` times a call in µs.  ``reference``: kernelgen's output (or None).
    ``base``: kernelgen's call; with ``rounds`` > 1 each peer and ``base`` are timed in ``rounds``
    alternating rounds (the order flipped every round), ``entry["peers"][name]`` the median of the
    peer's times and ``entry["peer_base_by_peer"][name]`` that of kernelgen's (``report.peer_base_for``
    divides by it), both lists in ``entry["peer_rounds_us"][name]``: one timing each, taken minutes
    apart, put a kernel on whichever clock level the GPU held then (levels 1 % apart on the H200:
    docs/dev/perf-log.md, "The gpt-oss snippet's 0.993x read again").
    Never raises for a peer's failure (KeyboardInterrupt aside); a failure of ``base`` is raised
    as it is (the entry's, not the peer's).
    """
    import statistics
    import time
    import warnings

    entry.setdefault("peers", {})
    entry.setdefault("unavailable", {})
    for name, build in builders.items():
        if isinstance(build, str):
            entry["unavailable"][name] = build
            continue
        peer = res = None
        warned: list = []
        try:
            with warnings.catch_warnings(record=True) as warned:
                warnings.simplefilter("always")
                t0 = time.perf_counter()
                peer = build()
                res = peer.fn()
                _sync()
                entry.setdefault("first_call_s", {})[name] = time.perf_counter() - t0
            if reference is not None and peer.output is not None:
                out = peer.output(res)
                diff = (out.float() - reference.float()).abs()
                entry.setdefault("max_diff", {})[name] = float(diff.max()) if diff.numel() else 0.0
                entry.setdefault("ref_max", {})[name] = float(out.float().abs().max()) if out.numel() else 0.0
                del out, diff
            res = None
            if base is not None and rounds > 1:
                tk, tp = [], []
                for r in range(rounds):
                    for own, acc in (((True, tk), (False, tp)) if r % 2 == 0 else ((False, tp), (True, tk))):
                        acc.append(_time_base(timer, base) if own else timer(peer.fn))
                entry["peers"][name] = statistics.median(tp)
                entry.setdefault("peer_base_by_peer", {})[name] = statistics.median(tk)
                entry.setdefault("peer_rounds_us", {})[name] = {"peer": tp, "kernelgen": tk}
                entry["peer_method"] = ALTERNATING_METHOD.format(rounds=rounds)
            else:
                entry["peers"][name] = timer(peer.fn)
        except _BaseFailed as e:   # kernelgen's call failed between a peer's rounds: the entry's error
            raise e.__cause__
        except Exception as e:  # noqa: BLE001 - a peer that cannot run is reported, not dropped
            entry["unavailable"][name] = reason(e, warned or ())
            entry["peers"].pop(name, None)
            for key in ("max_diff", "ref_max", "first_call_s", "peer_base_by_peer", "peer_rounds_us"):
                (entry.get(key) or {}).pop(name, None)
        finally:
            peer = res = None
            _settle()


# -------------------------------------------------------------------------------------- SDPA
def sdpa(backend_name: str, q4, k4, v4, causal: bool, *, gqa: bool = False, softcap: float = 0.0,
         window_left: int = -1, to_packed=None) -> Callable[[], Peer]:
    """Builder for an SDPA backend on dense (B, H, S, D) tensors (``causal`` is SDPA's top-left
    ``is_causal``; pass False for single-row decode)."""

    def build():
        import torch
        from torch.nn.attention import SDPBackend, sdpa_kernel

        if softcap:
            raise Unavailable("SDPA has no logit soft-cap")
        if window_left >= 0:
            raise Unavailable("SDPA has no sliding window (only an explicit mask, which forces another kernel)")
        backend = {"torch_fa2": SDPBackend.FLASH_ATTENTION, "cudnn_sdpa": SDPBackend.CUDNN_ATTENTION,
                   "mem_efficient_sdpa": SDPBackend.EFFICIENT_ATTENTION}[backend_name]
        kw = {"enable_gqa": True} if gqa else {}

        def fn():
            with sdpa_kernel(backend):
                return torch.nn.functional.scaled_dot_product_attention(q4, k4, v4, is_causal=causal, **kw)
        return Peer(fn, to_packed)
    return build


# ---------------------------------------------------------------------------- FA2 varlen (aten)
def fa2_varlen(q, k, v, cu_q, cu_k, max_q: int, max_k: int, causal: bool, *, softcap: float = 0.0,
               window_left: int = -1, sinks: bool = False, alibi: bool = False) -> Callable[[], Peer]:
    """Builder for torch's FA2 varlen entry on packed q (total_q, Hq, d), k/v (total_k, Hkv, d).
    ``sinks`` / ``alibi``: the entry's call has attention sinks / ALiBi slopes, which torch's FA2
    entry cannot take (unavailable, with the reason)."""

    def build():
        import torch

        if softcap:
            raise Unavailable("aten._flash_attention_forward has no soft-cap argument")
        if sinks:
            raise Unavailable(FA2_NO_SINKS)
        if alibi:
            raise Unavailable(FA2_NO_ALIBI)
        kw = {}
        if window_left >= 0:
            kw = {"window_size_left": int(window_left), "window_size_right": 0}
        if q.shape[-1] != v.shape[-1]:
            raise Unavailable(f"FA2 needs head_dim == head_dim_v (got {q.shape[-1]}/{v.shape[-1]})")

        def fn():
            return torch.ops.aten._flash_attention_forward(q, k, v, cu_q, cu_k, max_q, max_k, 0.0, causal, False,
                                                           scale=None, **kw)
        return Peer(fn, lambda res: res[0])
    return build


# --------------------------------------------------------------------------------- FlexAttention
_flex_compiled = None


def _flex():
    """flex_attention compiled once per process (raises Unavailable if torch lacks it)."""
    global _flex_compiled
    if _flex_compiled is None:
        import torch

        try:
            from torch.nn.attention.flex_attention import flex_attention
        except ImportError as e:
            raise Unavailable(f"torch {torch.__version__} has no FlexAttention ({e})") from None
        # many shapes and masks in one process: keep every compiled graph instead of falling back
        # to the eager (materialised-scores) implementation after the default 8 recompiles
        cfg = torch._dynamo.config
        for attr in ("cache_size_limit", "recompile_limit"):
            if hasattr(cfg, attr):
                setattr(cfg, attr, max(getattr(cfg, attr), 256))
        if hasattr(cfg, "accumulated_cache_size_limit"):
            cfg.accumulated_cache_size_limit = max(cfg.accumulated_cache_size_limit, 1024)
        if hasattr(cfg, "accumulated_recompile_limit"):
            cfg.accumulated_recompile_limit = max(cfg.accumulated_recompile_limit, 1024)
        _flex_compiled = torch.compile(flex_attention, dynamic=False)  # one static kernel per shape
    return _flex_compiled


def softcap_score_mod(softcap: float):
    """FlexAttention score_mod capping the scaled logits: ``cap * tanh(score / cap)`` (kernelgen's
    and Gemma 2's soft-cap)."""
    import torch

    cap = float(softcap)

    def score_mod(score, b, h, q_idx, kv_idx):
        return cap * torch.tanh(score / cap)
    return score_mod


def alibi_score_mod(slopes, qpos=None, kpos=None, factor: float | None = None):
    """FlexAttention score_mod adding ALiBi (kernelgen's and FlashAttention-2's convention): the
    scaled logit minus ``slopes[h] * |i + seqlen_k - seqlen_q - j|``.  ``qpos`` / ``kpos``: callables
    mapping FlexAttention's (packed) q_idx / kv_idx to the row's bottom-right aligned position
    ``i + seqlen_k - seqlen_q`` and the key's position ``j`` within its request (None: the indices
    themselves, one request with as many queries as keys).

    ``factor``: the bias times this literal, in a function compiled from its own source text, so
    torch.compile has never seen it (a new code object fails its guards and recompiles; a float
    closure would not, torch passes unspecialised floats as inputs): the first-call entry's fresh
    score_mod.  None: the plain ALiBi closure."""
    import torch

    ident = lambda x: x  # noqa: E731
    qp, kp = qpos or ident, kpos or ident
    if factor is None:
        def score_mod(score, b, h, q_idx, kv_idx):
            return score - slopes[h] * torch.abs(qp(q_idx) - kp(kv_idx))
        return score_mod
    ns = {"torch": torch, "slopes": slopes, "qp": qp, "kp": kp}
    exec(compile(f"def score_mod(score, b, h, q_idx, kv_idx):\n"
                 f"    return score - {float(factor)!r} * slopes[h] * torch.abs(qp(q_idx) - kp(kv_idx))\n",
                 f"<alibi score_mod x{float(factor)!r}>", "exec"), ns)
    return ns["score_mod"]


def flex_document(q, k, v, lens_q, lens_k, causal: bool, *, softcap: float = 0.0, window_left: int = -1,
                  scale: float | None = None, alibi_slopes=None, alibi_factor: float | None = None,
                  sinks: bool = False) -> Callable[[], Peer]:
    """Builder for compiled FlexAttention over a packed varlen batch with a document mask.

    q (total_q, Hq, d), k/v (total_k, Hkv, d/dv) packed (a paged cache gathered first); viewed as
    (1, H, tokens, d) without a copy.  Request ``i``'s rows only see its own keys; with ``causal``
    bottom-right aligned, with ``window_left`` >= 0 a window.  The block mask is built once here.
    ``alibi_slopes`` (float32 (Hq,)): ALiBi as a score_mod (:func:`alibi_score_mod`, positions
    within each request; ``alibi_factor``: its never-seen variant).  ``sinks``: the entry has attention sinks, which FlexAttention cannot
    express (unavailable).
    """

    def build():
        import torch
        from torch.nn.attention.flex_attention import create_block_mask

        if sinks:
            raise Unavailable(FLEX_NO_SINKS)
        if softcap and alibi_slopes is not None:
            raise Unavailable("soft-cap and ALiBi together are not built by the suite for FlexAttention")
        flex = _flex()
        dev = q.device
        lq = torch.tensor(list(lens_q), dtype=torch.int64, device=dev)
        lk = torch.tensor(list(lens_k), dtype=torch.int64, device=dev)
        b = torch.arange(len(lens_q), device=dev)
        doc_q = torch.repeat_interleave(b, lq)
        doc_k = torch.repeat_interleave(b, lk)
        start_q = torch.cumsum(lq, 0) - lq
        start_k = torch.cumsum(lk, 0) - lk
        shift = lk - lq  # bottom-right alignment of request i's causal diagonal
        tq, tk = int(lq.sum()), int(lk.sum())
        use_causal, wl = bool(causal), int(window_left)

        def mask_mod(bi, h, q_idx, kv_idx):
            dq, dk = doc_q[q_idx], doc_k[kv_idx]
            m = dq == dk
            if use_causal or wl >= 0:
                qpos = q_idx - start_q[dq] + shift[dq]
                kpos = kv_idx - start_k[dk]
                if use_causal:
                    m = m & (kpos <= qpos)
                if wl >= 0:
                    m = m & (qpos - kpos <= wl)
            return m

        block_mask = create_block_mask(mask_mod, None, None, tq, tk, device=dev)
        score_mod = softcap_score_mod(softcap) if softcap else None
        if alibi_slopes is not None:
            score_mod = alibi_score_mod(alibi_slopes, qpos=lambda qi: qi - start_q[doc_q[qi]] + shift[doc_q[qi]],
                                        kpos=lambda ki: ki - start_k[doc_k[ki]], factor=alibi_factor)
        q4 = q.unsqueeze(0).transpose(1, 2)
        k4 = k.unsqueeze(0).transpose(1, 2)
        v4 = v.unsqueeze(0).transpose(1, 2)
        gqa = q.shape[1] != k.shape[1]

        def fn():
            return flex(q4, k4, v4, score_mod=score_mod, block_mask=block_mask, scale=scale, enable_gqa=gqa)
        return Peer(fn, lambda res: res[0].transpose(0, 1))
    return build


def flex_dense(q4, k4, v4, causal: bool, to_packed=None, score_mod=None) -> Callable[[], Peer]:
    """Builder for compiled FlexAttention on dense (B, H, S, S) shapes (causal: top-left = bottom-right;
    fewer KV heads than query heads: GQA); ``score_mod``: FlexAttention's (score, b, h, q_idx,
    kv_idx) modification of the scaled logits (None: none)."""

    def build():
        from torch.nn.attention.flex_attention import create_block_mask

        flex = _flex()
        s = q4.shape[2]
        block_mask = None
        if causal:
            def causal_mod(b, h, q_idx, kv_idx):
                return q_idx >= kv_idx
            block_mask = create_block_mask(causal_mod, None, None, s, s, device=q4.device)

        gqa = q4.shape[1] != k4.shape[1]

        def fn():
            return flex(q4, k4, v4, score_mod=score_mod, block_mask=block_mask, enable_gqa=gqa)
        return Peer(fn, to_packed)
    return build


# ------------------------------------------------------------------- FlashAttention-3 and -4
def preload() -> dict:
    """Import FA3's and FA4's modules once, before any entry (so ``first_call_s`` holds the first
    call's own cost, not the import).  Returns {peer: seconds the import took, or the reason it
    is unavailable}; never raises."""
    import time

    out: dict = {}
    for name, load in ((FA3, load_fa3), (FA4, load_fa4)):
        t0 = time.perf_counter()
        try:
            load()
            out[name] = time.perf_counter() - t0
        except Unavailable as e:
            out[name] = str(e)
    return out



def _first(res):
    """The output of a call that returns ``out`` or ``(out, lse, ...)``."""
    return res[0] if isinstance(res, (tuple, list)) else res


def _require_hopper(who: str) -> None:
    import torch

    major, minor = torch.cuda.get_device_capability()
    if (major, minor) != (9, 0):
        raise Unavailable(f"{who} runs on compute capability 9.0 (Hopper) only; this device is {major}.{minor}")


def load_fa3():
    """FlashAttention-3's interface module (``fa3_fwd_interface``) and its build flags.

    Its interface imports ``flash_attn_config``, which the wheel ships as ``fa3_fwd_config``: when
    no such module is importable, the one from fa3-fwd is registered under that name.  Raises
    Unavailable when fa3-fwd is not installed.
    """
    import importlib
    import sys

    try:
        config = importlib.import_module("fa3_fwd_config")
    except ImportError as e:
        raise Unavailable(f"fa3-fwd is not installed ({e}; tools/peer_wheels.py)") from None
    if importlib.util.find_spec("flash_attn_config") is None:
        sys.modules.setdefault("flash_attn_config", config)
    try:
        mod = importlib.import_module("fa3_fwd_interface")
    except Exception as e:  # noqa: BLE001 - a broken install is a reason, not a crash
        raise Unavailable(f"fa3-fwd does not import: {type(e).__name__}: {e}") from None
    return mod, dict(config.CONFIG.get("build_flags", {}))


def fa3_missing_feature(flags: dict, *, dtype_name: str = "bf16", window_left: int = -1, softcap: float = 0.0,
                        head_dim: int = 128, head_dim_v: int = 128) -> str | None:
    """Why this fa3-fwd build cannot run a call (from its build flags), or None."""
    checks = (
        (window_left >= 0, "FLASHATTENTION_DISABLE_LOCAL", "no local (sliding-window) attention"),
        (dtype_name == "fp16", "FLASHATTENTION_DISABLE_FP16", "no fp16"),
        (softcap > 0, "FLASHATTENTION_DISABLE_SOFTCAP", "no soft-cap"),
        (head_dim != head_dim_v and (head_dim, head_dim_v) != (192, 128),
         None, f"no head_dim {head_dim} with head_dim_v {head_dim_v}"),
    )
    for needed, flag, text in checks:
        if needed and (flag is None or flags.get(flag)):
            return f"this fa3-fwd build has {text}" + (f" ({flag})" if flag else "")
    return None


def fa3(q, k, v, causal: bool, *, cu_q=None, cu_k=None, max_q: int = 0, max_k: int = 0, softcap: float = 0.0,
        window_left: int = -1, dense_batch: int = 0, sinks: bool = False, alibi: bool = False,
        descales: tuple | None = None) -> Callable[[], Peer]:
    """Builder for FlashAttention-3 on kernelgen's packed tensors: q (total_q, Hq, d), k/v (total_k,
    Hkv, d/dv) with ``cu_q``/``cu_k`` (``flash_attn_varlen_func``), or with ``dense_batch`` > 0 the
    same memory viewed as (batch, seqlen, heads, d) (``flash_attn_func``, no copy).  Causal is
    bottom-right aligned as kernelgen's.  Split-KV and pack-GQA by FA3's own heuristics.
    ``sinks`` / ``alibi``: the entry's call has attention sinks / ALiBi, which this build cannot
    run (unavailable, with the reason; a local window's reason, when the call also has one, comes
    first as the build flag says).  ``descales``: (q_descale, k_descale, v_descale), float32
    (batch, Hkv), for FA3's FP8 path (q, k and v all float8_e4m3fn; output bf16)."""

    def build():
        import torch

        mod, flags = load_fa3()
        kw = {}
        if descales is not None:
            if flags.get("FLASHATTENTION_DISABLE_FP8"):
                raise Unavailable("this fa3-fwd build has no FP8 (FLASHATTENTION_DISABLE_FP8)")
            kw = dict(zip(("q_descale", "k_descale", "v_descale"), descales))
        _require_hopper("fa3-fwd")
        if window_left >= 0 and flags.get("FLASHATTENTION_DISABLE_LOCAL"):
            raise Unavailable(fa3_missing_feature(flags, window_left=window_left))
        if sinks:
            raise Unavailable(FA3_NO_SINKS)
        if alibi:
            raise Unavailable(FA3_NO_ALIBI)
        why = fa3_missing_feature(flags, dtype_name="fp16" if q.dtype == torch.float16 else "bf16",
                                  window_left=window_left, softcap=softcap, head_dim=q.shape[-1],
                                  head_dim_v=v.shape[-1])
        if why:
            raise Unavailable(why)
        if window_left >= 0:   # a build with local attention: the same window as kernelgen's call
            kw["window_size"] = (window_left, 0 if causal else -1)
        if dense_batch:
            b = dense_batch
            q4, k4, v4 = (t.view(b, t.shape[0] // b, *t.shape[1:]) for t in (q, k, v))

            def fn():
                return mod.flash_attn_func(q4, k4, v4, causal=causal, softcap=softcap, num_splits=0, pack_gqa=None,
                                           **kw)
            return Peer(fn, lambda r: _first(r).reshape(-1, *_first(r).shape[2:]))

        def fn():
            return mod.flash_attn_varlen_func(q, k, v, cu_q, cu_k, max_q, max_k, causal=causal, softcap=softcap,
                                              num_splits=0, pack_gqa=None, **kw)
        return Peer(fn, _first)
    return build


def load_fa4():
    """FlashAttention-4's interface (``flash_attn.cute.interface``).

    The CuTe DSL's packages live in ``nvidia_cutlass_dsl/dsl_packages``, which its ``.pth`` file
    puts on the path; installed with ``pip install --target`` that file is not read, so the folder
    is added here when the package is found without it.  Raises Unavailable when flash-attn-4 or
    the CuTe DSL is missing or fails to import.
    """
    import importlib
    import os
    import sys

    try:
        dsl = importlib.import_module("nvidia_cutlass_dsl")
        extra = os.path.join(list(dsl.__path__)[0], "dsl_packages")
        if os.path.isdir(extra) and extra not in sys.path:
            sys.path.insert(0, extra)
    except ImportError:
        pass
    try:
        return importlib.import_module("flash_attn.cute.interface")
    except ImportError as e:
        raise Unavailable(f"flash-attn-4 is not installed or incomplete ({e}; tools/peer_wheels.py)") from None
    except Exception as e:  # noqa: BLE001
        raise Unavailable(f"flash-attn-4 does not import: {type(e).__name__}: {e}") from None


def fa4(q, k, v, causal: bool, *, cu_q=None, cu_k=None, max_q: int = 0, max_k: int = 0, softcap: float = 0.0,
        window_left: int = -1, page_table=None, seqused_k=None, dense_batch: int = 0, learnable_sink=None,
        score_mod=None, aux_tensors=None) -> Callable[[], Peer]:
    """Builder for FlashAttention-4: packed varlen tensors as :func:`fa3`, or a paged cache (k/v
    (pages, page_size, Hkv, d/dv) with ``page_table`` and ``seqused_k``, ``cu_k`` None), or with
    ``dense_batch`` the dense view (``flash_attn_func``).  ``num_splits=1`` (sm_90 has no split-KV
    in FA4), ``pack_gqa`` by its heuristic; a window as ``window_size=(window_left, 0)``.

    ``learnable_sink``: attention sinks, float32 (Hq,) (FA4's argument: one logit per query head in
    the softmax denominator, natural units, as kernelgen's ``sinks=``).  ``score_mod``: a zero-argument
    callable returning FA4's CuTe DSL score_mod (built inside the peer, so a missing CuTe DSL is a
    reason: :func:`fa4_alibi_score_mod`, :func:`fa4_softcap_score_mod`), with ``aux_tensors`` (the
    tensors it reads).  FA4 applies its score_mod to the scaled logits on sm_90 (only sm_8x refuses a
    user score_mod in 4.0.0b36)."""

    def build():
        iface = load_fa4()
        kw = {"causal": causal, "softcap": softcap, "pack_gqa": None}
        if window_left >= 0:
            kw["window_size"] = (int(window_left), 0)
        if learnable_sink is not None:
            kw["learnable_sink"] = learnable_sink
        if score_mod is not None:
            kw["score_mod"] = score_mod()
            if aux_tensors is not None:
                kw["aux_tensors"] = list(aux_tensors)
        if dense_batch:
            b = dense_batch
            q4, k4, v4 = (t.view(b, t.shape[0] // b, *t.shape[1:]) for t in (q, k, v))

            def fn():
                return iface.flash_attn_func(q4, k4, v4, **kw)
            return Peer(fn, lambda r: _first(r).reshape(-1, *_first(r).shape[2:]))
        if page_table is not None:
            kw.update(page_table=page_table, seqused_k=seqused_k)

        def fn():
            return iface.flash_attn_varlen_func(q, k, v, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, max_seqlen_q=max_q,
                                                max_seqlen_k=max_k, num_splits=1, **kw)
        return Peer(fn, _first)
    return build


def fa4_alibi_score_mod(factor: float = 1.0):
    """FA4's CuTe DSL score_mod for ALiBi with the slopes in ``aux_tensors[0]`` (float32 (Hq,)): the
    scaled logit minus ``factor * slopes[h] * |i + seqlen_k - seqlen_q - j|`` (kernelgen's and
    FlashAttention-2's bottom-right convention; FA4's q_idx / kv_idx are positions within the
    request and ``seqlen_info`` holds the request's lengths, ``seqused_k`` on a paged cache).
    ``factor``: 1 for ALiBi; another value is a fresh compile-time constant (FA4 keys its compile
    cache on the callable's source and closure), as the first-call entry needs.  FA4 reads aux
    tensors one score at a time (its vec size 1)."""
    import operator

    import cutlass
    import cutlass.cute as cute

    c = float(factor)

    @cute.jit
    def alibi(score, batch_idx, head_idx, q_idx, kv_idx, seqlen_info, aux_tensors):
        slopes = aux_tensors[0]
        h = cute.make_rmem_tensor(1, cutlass.Int32)
        h.store(head_idx)
        slope = cute.make_rmem_tensor(1, cutlass.Float32)
        slope[0] = slopes[h[0]]
        dist = (q_idx + (seqlen_info.seqlen_k - seqlen_info.seqlen_q) - kv_idx).to(cutlass.Float32)
        zero = cute.full_like(dist, 0.0)
        dist = cute.where(operator.lt(dist, zero), zero - dist, dist)
        return score - slope.load() * dist * c
    return alibi


def fa4_softcap_score_mod(cap: float):
    """FA4's CuTe DSL score_mod ``cap * tanh(score / cap)`` written as a user score_mod (the
    variant entries' peer; FA4's own ``softcap=`` builds the same kind of callable internally)."""
    import cutlass.cute as cute

    c = float(cap)

    @cute.jit
    def softcap(score, batch_idx, head_idx, q_idx, kv_idx, seqlen_info, aux_tensors):
        return cute.math.tanh(score * (1.0 / c), fastmath=True) * c
    return softcap


def kernelgen_switch(fn) -> Callable[[], Peer]:
    """Builder for a kernelgen call with one switch changed (its output is compared too)."""
    return lambda: Peer(fn, lambda res: res)
