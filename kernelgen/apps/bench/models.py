"""Model presets of ``kernelgen bench`` and the work counts (FLOPs, bytes) of its shapes.

A preset is the attention shape of one layer of a model as a serving engine runs it: query and
KV heads (after tensor parallelism), head dims, logit soft-capping, a sliding window, attention
sinks, and for models whose layers alternate between full attention and a sliding window (gpt-oss)
the window of the windowed layers (``alt_window``: :meth:`ModelPreset.layer_flavours`).  Pure
Python: the CLI imports this module to build its parser without importing torch.

Counting conventions (also in docs/dev/perf-log.md):

* FLOPs: ``2 * heads_q * (head_dim + head_dim_v)`` per visible (query row, key) pair, i.e.
  ``4 * heads * d * pairs`` when both head dims are equal (QK^T and PV; softmax not counted).
* Visible pairs: causal is bottom-right aligned (row ``r`` of a request with ``lq`` query and
  ``lk`` key tokens sees key ``j`` iff ``j <= r + lk - lq``); a left window ``w`` also requires
  ``r + lk - lq - j <= w``.
* Prefill bytes: Q, K, V read once and O written once (the compulsory traffic).
* Decode bytes: K and V of the keys each request actually reads (a window caps them); the query
  and output rows are negligible and not counted (as in tools/bench.py).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

#: Bytes per element of the benchmarked dtype (bf16).
ELEM_BYTES = 2


@dataclass(frozen=True)
class ModelPreset:
    """Attention shape of one model layer.

    name: preset name on the command line; num_heads_q / num_heads_kv: heads per GPU;
    head_dim / head_dim_v: QK and V head dims; softcap: logit cap (0 = off); window: sliding
    window in tokens including the query's own position (0 = none), passed to kernels as
    ``window_size=(window - 1, 0)`` with the causal mask; sinks: the model has attention sinks (one
    learned float32 logit per query head in every row's softmax denominator: gpt-oss), passed to
    kernelgen as ``sinks=`` and to FlashAttention-4 as ``learnable_sink=`` by the per-model
    prefill and decode entries; alt_window: the sliding window of the model's windowed layers
    when its layers alternate between full attention (this preset) and a window (0 = no such
    layers; :meth:`layer_flavours`).
    """

    name: str
    num_heads_q: int
    num_heads_kv: int
    head_dim: int
    head_dim_v: int
    softcap: float = 0.0
    window: int = 0
    note: str = ""
    sinks: bool = False
    alt_window: int = 0

    def __post_init__(self):
        if self.num_heads_kv < 1 or self.num_heads_q % self.num_heads_kv:
            raise ValueError(f"{self.name}: num_heads_q {self.num_heads_q} is not a multiple of "
                             f"num_heads_kv {self.num_heads_kv}")

    @property
    def window_left(self) -> int:
        """Left window in keys before the diagonal (-1 = unbounded)."""
        return self.window - 1 if self.window > 0 else -1

    @property
    def window_size(self) -> tuple[int, int]:
        """``window_size`` argument of kernelgen.varlen_attention (with causal=True)."""
        return (self.window_left, 0) if self.window > 0 else (-1, -1)

    @property
    def kv_bytes_per_token(self) -> int:
        """K and V bytes of one cached token (all KV heads)."""
        return self.num_heads_kv * (self.head_dim + self.head_dim_v) * ELEM_BYTES

    def describe(self) -> str:
        d = f"d {self.head_dim}" if self.head_dim == self.head_dim_v else f"d {self.head_dim}/{self.head_dim_v}"
        extra = "".join([f", softcap {self.softcap:g}" if self.softcap else "",
                         f", window {self.window}" if self.window else "",
                         ", sinks" if self.sinks else "",
                         f", window {self.alt_window} on alternate layers" if self.alt_window else ""])
        return f"{self.name}: {self.num_heads_q}/{self.num_heads_kv} heads, {d}{extra}"

    def windowed_layer(self) -> "ModelPreset":
        """The preset of the model's sliding-window layers (``alt_window``), named
        ``<name>-w<window>`` (its entries' suffix); raises ValueError for a preset without them."""
        if not self.alt_window:
            raise ValueError(f"{self.name} has no alternate sliding-window layers")
        return replace(self, name=f"{self.name}-w{self.alt_window}", window=self.alt_window, alt_window=0,
                       note=f"{self.name}'s sliding-window layers")

    def layer_flavours(self) -> list:
        """The layer kinds the per-model entries run: this preset (its full-attention layers) and,
        for a model whose layers alternate, its windowed layers (:meth:`windowed_layer`)."""
        return [self] + ([self.windowed_layer()] if self.alt_window else [])


PRESETS: dict[str, ModelPreset] = {p.name: p for p in (
    ModelPreset("llama3-8b", 32, 8, 128, 128),
    ModelPreset("llama3-70b-tp8", 8, 1, 128, 128, note="64/8 heads split over 8 GPUs"),
    ModelPreset("qwen2.5-7b", 28, 4, 128, 128),
    ModelPreset("gemma2-9b", 16, 8, 256, 256, softcap=50.0),
    ModelPreset("mistral-7b", 32, 8, 128, 128, window=4096),
    ModelPreset("mla", 128, 128, 192, 128, note="MLA-style prefill: 128 heads, QK dim 192 (128 + 64 rope), V dim 128"),
    ModelPreset("gpt-oss", 64, 8, 64, 64, sinks=True, alt_window=128,
                note="gpt-oss (120b: 64 query / 8 KV heads, d 64): per-head attention sinks on every layer, a "
                     "128-token sliding window on every other layer"),
)}
#: The preset of the single-shape entries (scheduler, mixed, overhead) and of the unsuffixed
#: entry names, as tools/bench.py measured them.
DEFAULT_MODEL = "llama3-8b"
MODEL_NAMES = tuple(PRESETS)


def resolve_models(names) -> list[ModelPreset]:
    """Presets for a list of names ("all" = every preset), in the given order, duplicates dropped.

    Raises ValueError for an unknown name.
    """
    out: list[ModelPreset] = []
    for n in names or [DEFAULT_MODEL]:
        batch = list(PRESETS.values()) if n == "all" else [PRESETS.get(n)]
        if batch[0] is None:
            raise ValueError(f"unknown model preset {n!r} (choose from {', '.join(MODEL_NAMES)}, all)")
        for p in batch:
            if p not in out:
                out.append(p)
    return out


def entry_name(base: str, model: ModelPreset | str | None) -> str:
    """Entry name of a per-model shape: the base name for the default preset (the names
    tools/bench.py used), ``base_<preset>`` for the others."""
    name = getattr(model, "name", model)
    return base if name in (None, DEFAULT_MODEL) else f"{base}_{name}"


# ----------------------------------------------------------------------------------- counting
def visible_pairs(lq: int, lk: int, causal: bool = True, window_left: int = -1) -> int:
    """(query row, key) pairs one request computes; exact integer count in O(1).

    Causal and window as in the module doc; ``window_left`` < 0 means no window.  Without the
    causal mask a window is ignored (the suites only use windows with causal).
    """
    lq, lk = int(lq), int(lk)
    if lq <= 0 or lk <= 0:
        return 0
    if not causal:
        return lq * lk
    off = lk - lq

    def seen_upto(rows: int) -> int:  # sum over r < rows of clamp(r + off + 1, 0, lk)
        return _sum_clamped(off + 1, rows, lk)

    total = seen_upto(lq)
    if window_left >= 0:
        # keys before r + off - window_left are cut: clamp(r + off - window_left, 0, lk) per row
        total -= _sum_clamped(off - window_left, lq, lk)
    return total


def _sum_clamped(a: int, n: int, cap: int) -> int:
    """sum_{r=0}^{n-1} clamp(a + r, 0, cap)."""
    if n <= 0:
        return 0
    lo = max(0, -a)                 # first r with a + r >= 0 ... (values below 0 count 0)
    full = max(0, cap - a)          # first r with a + r >= cap
    total = 0
    # rows lo .. min(n, full) - 1 contribute a + r
    hi = min(n, full)
    if hi > lo:
        first, last = a + lo, a + hi - 1
        total += (first + last) * (hi - lo) // 2
    # rows max(lo, full) .. n-1 contribute cap
    start = max(lo, full)
    if n > start:
        total += (n - start) * cap
    return total


def attention_flops(lengths_q, lengths_k, model: ModelPreset, causal: bool = True) -> int:
    """Forward FLOPs of a varlen batch for a preset (its window included)."""
    pairs = sum(visible_pairs(a, b, causal, model.window_left) for a, b in zip(lengths_q, lengths_k))
    return 2 * model.num_heads_q * (model.head_dim + model.head_dim_v) * pairs


def keys_read(lengths_q, lengths_k, model: ModelPreset, causal: bool = True) -> int:
    """Keys a prefill batch must read: per request, the keys some query row sees.  With causal and a
    window (bottom-right aligned, as in :func:`visible_pairs`) the first row sees keys from
    ``seqlen_k - seqlen_q - window_left`` on, so a chunk at the end of a long context reads only the
    window before it; otherwise every key."""
    wl = model.window_left if causal else -1
    return sum(int(k) - max(0, int(k) - int(q) - wl) if wl >= 0 else int(k)
               for q, k in zip(lengths_q, lengths_k) if int(q) > 0)


def prefill_bytes(lengths_q, lengths_k, model: ModelPreset, causal: bool = True) -> int:
    """Compulsory bytes of a prefill batch: Q, K, V read and O written once (K and V: the keys
    :func:`keys_read` counts, so a window caps them)."""
    tq, tk = sum(lengths_q), keys_read(lengths_q, lengths_k, model, causal)
    m = model
    elems = tq * m.num_heads_q * (m.head_dim + m.head_dim_v) + tk * m.num_heads_kv * (m.head_dim + m.head_dim_v)
    return elems * ELEM_BYTES


def decode_keys_read(contexts, model: ModelPreset) -> int:
    """Keys a decode step reads: each request's context, capped by the window."""
    w = model.window if model.window > 0 else None
    return sum(min(int(c), w) if w else int(c) for c in contexts)


def decode_bytes(contexts, model: ModelPreset) -> int:
    """K+V bytes a decode step reads (one query token per request)."""
    return decode_keys_read(contexts, model) * model.kv_bytes_per_token
