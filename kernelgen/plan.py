"""Fixed-capacity attention state for repeated calls and CUDA graphs.

An ``AttentionPlan`` is made once for a head configuration and a *capacity* (the largest batch it
will see).  It owns the metadata buffer (sized by the capacity, never by the runtime batch) and
the loaded kernels.  ``run`` launches the GPU scheduler and the persistent attention kernel on the
current stream with no host synchronisation and no allocation besides the outputs you do not pass
in, so a step can be captured with ``torch.cuda.graph`` and replayed with new lengths and any batch
up to the capacity (a batch padded with zero-length requests does no work for the padding).
"""
from __future__ import annotations

import torch

from . import api, heuristics, metadata, runtime, validation


class AttentionPlan:
    """State for varlen attention calls with at most ``max_batch`` requests.

    Args:
        max_batch: capacity in requests (1 .. metadata.MAX_CAPACITY).
        num_heads_q, num_heads_kv: query and KV heads (num_heads_q a multiple of num_heads_kv).
        head_dim, head_dim_v: 64, 96, 128, 192 or 256 (head_dim_v defaults to head_dim).
        dtype: torch.float16 or torch.bfloat16.
        causal: bottom-right aligned causal mask.
        metadata_layout: "soa" or "aos".
        sort, head_swizzle: scheduler switches (see ``varlen_attention``).
        device: CUDA device (default: the current one).

    Raises:
        ValueError / TypeError: bad capacities, head counts, head dims, dtype or layout.
    """

    def __init__(self, *, max_batch: int, num_heads_q: int, num_heads_kv: int, head_dim: int,
                 head_dim_v: int | None = None, dtype=torch.bfloat16, causal: bool = False,
                 metadata_layout: str = "soa", sort: bool = True, head_swizzle: bool = True, device=None):
        validation.nonneg_int("max_batch", max_batch)
        if not 1 <= max_batch <= metadata.MAX_CAPACITY:
            raise ValueError(f"max_batch must be in [1, {metadata.MAX_CAPACITY}], got {max_batch}")
        if dtype not in validation.DTYPES:
            raise TypeError(f"dtype must be torch.float16 or torch.bfloat16, got {dtype}")
        if num_heads_kv < 1 or num_heads_q % num_heads_kv:
            raise ValueError(f"num_heads_q ({num_heads_q}) must be a multiple of num_heads_kv ({num_heads_kv})")
        head_dim_v = head_dim if head_dim_v is None else head_dim_v
        self.device = torch.device("cuda", torch.cuda.current_device() if device is None else torch.device(device).index)
        self.capacity = int(max_batch)
        self.num_heads_q, self.num_heads_kv = num_heads_q, num_heads_kv
        self.head_dim, self.head_dim_v, self.dtype, self.causal = head_dim, head_dim_v, dtype, bool(causal)
        self.layout = validation.layout(metadata_layout)
        dev = self.device.index
        arch = api.device_arch(dev)
        variants = heuristics.choose(arch, validation.DTYPES[dtype], head_dim, head_dim_v, num_heads_q=num_heads_q,
                                     num_heads_kv=num_heads_kv, mask="causal" if self.causal else "none",
                                     layout=self.layout, max_seqlen_q=4096, max_seqlen_k=4096, pack_gqa=False,
                                     num_splits=1)
        self.sched_spec, self.attn_spec = variants.scheduler, variants.attention
        self.sched = runtime.get_kernel(self.sched_spec, dev)
        self.attn = runtime.get_kernel(self.attn_spec, dev)
        self.config = api.scheduler_config(self.attn_spec, self.attn, num_heads_q, num_heads_kv, sort=sort,
                                           head_swizzle=head_swizzle)
        #: int32 scheduler metadata (metadata.py), sized by the capacity only.
        self.metadata = torch.zeros(metadata.buffer_ints(self.capacity), dtype=torch.int32, device=self.device)

    @property
    def metadata_bytes(self) -> int:
        return self.metadata.numel() * 4

    def schedule(self, cu_seqlens_q, cu_seqlens_k) -> None:
        """Launch the scheduler for the batch of these cu_seqlens (batch = len - 1 <= capacity)."""
        batch = validation.cu_seqlens("cu_seqlens_q", cu_seqlens_q, self.device)
        if validation.cu_seqlens("cu_seqlens_k", cu_seqlens_k, self.device) != batch:
            raise ValueError("cu_seqlens_k must have as many entries as cu_seqlens_q")
        if batch > self.capacity:
            raise ValueError(f"batch {batch} exceeds the plan's capacity {self.capacity}")
        api.launch_scheduler(self.sched, api._current_stream(self.device.index), cu_seqlens_q, cu_seqlens_k, None,
                             self.metadata, batch, self.capacity, self.config)

    def attend(self, q, k, v, cu_seqlens_q, cu_seqlens_k, *, out=None, lse=None, softmax_scale=None):
        """Launch the attention kernel on the metadata the last ``schedule`` wrote; returns out."""
        sizes = validation.varlen_inputs(q, k, v, cu_seqlens_q, cu_seqlens_k, 0, 0, out)
        self._check_shapes(sizes, q)
        scale = validation.softmax_scale(softmax_scale, self.head_dim)
        if out is None:
            out = torch.empty((sizes["total_q"], self.num_heads_q, self.head_dim_v), dtype=q.dtype, device=q.device)
        self.attn.launch(self.attn.persistent_grid, api._current_stream(self.device.index),
                         api.attention_params(q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, self.metadata,
                                              self.capacity, scale))
        return out

    def run(self, q, k, v, cu_seqlens_q, cu_seqlens_k, *, out=None, return_lse=False, softmax_scale=None):
        """Scheduler then attention; same arguments and results as ``varlen_attention``."""
        lse = None
        if return_lse:
            lse = torch.empty((self.num_heads_q, q.shape[0]), dtype=torch.float32, device=q.device)
        self.schedule(cu_seqlens_q, cu_seqlens_k)
        out = self.attend(q, k, v, cu_seqlens_q, cu_seqlens_k, out=out, lse=lse, softmax_scale=softmax_scale)
        return (out, lse) if return_lse else out

    def _check_shapes(self, sizes, q):
        want = (self.num_heads_q, self.num_heads_kv, self.head_dim, self.head_dim_v)
        got = (sizes["num_heads_q"], sizes["num_heads_kv"], sizes["head_dim"], sizes["head_dim_v"])
        if got != want:
            raise ValueError(f"q/k/v heads and head dims {got} differ from the plan's {want}")
        if q.dtype != self.dtype:
            raise TypeError(f"q must have the plan's dtype {self.dtype}, got {q.dtype}")
        if q.device != self.device:
            raise ValueError(f"q must be on the plan's device {self.device}, got {q.device}")
        if sizes["batch"] > self.capacity:
            raise ValueError(f"batch {sizes['batch']} exceeds the plan's capacity {self.capacity}")
