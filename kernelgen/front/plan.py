"""Fixed-capacity attention state for serving loops and CUDA graphs (plan once, run every step).

An ``AttentionPlan`` is made once for a head configuration and capacities: the largest batch
(requests) and the most query tokens a step will have.  It chooses its kernels then (from the
length hints, exactly as ``varlen_attention`` would) and owns every device buffer a step needs:
the scheduler metadata (sized by the capacity, never by the runtime batch) and, with split-KV,
the fp32 partial outputs.  ``run`` launches the GPU scheduler, the persistent attention kernel and
(with split-KV) the combine kernel on the current stream, with no host synchronisation and no
allocation when ``out`` (and ``lse``) are passed, so a step can be captured with
``torch.cuda.graph`` and replayed with new lengths, new page tables and any batch up to the
capacity.  A batch padded with zero-length requests does no work for the padding.
"""
from __future__ import annotations

import torch

from . import api
from ..launch import fused, prepared
from ..selection import heuristics, signature, validation
from ..kernels import metadata, tma
from ..jit import runtime
from ..kernels.workspace import WorkspaceLayout


class AttentionPlan:
    """State for varlen attention steps with at most ``max_batch`` requests and ``max_total_q``
    query tokens.

    Args:
        max_batch: capacity in requests (1 .. 8192).
        num_heads_q, num_heads_kv: query and KV heads (num_heads_q a multiple of num_heads_kv).
        head_dim, head_dim_v: 64, 96, 128, 192 or 256 (head_dim_v defaults to head_dim).
        dtype: torch.float16 or torch.bfloat16.
        max_total_q: capacity in query tokens per step (sizes the split-KV partials); default
            ``max_batch * max_seqlen_q``.
        max_seqlen_q, max_seqlen_k: length hints in tokens that choose the tile shape, pack-GQA and
            the split bound (decode: max_seqlen_q = 1).  Steps may have any lengths: the kernels
            read them on the GPU.
        paged: steps pass a paged K/V cache with page_table and seqused_k.
        page_size: with ``paged``, the cache's page size in tokens when every step uses the same
            (then the Hopper kernel loads whole pages or key blocks by TMA where they fit;
            steps with another page size raise ValueError); None: any page size (the Hopper
            kernel gathers K/V rows through the page table).
        causal, window_size, softcap: the mask and logit capping (see ``varlen_attention``).
        num_splits: 0 = the GPU scheduler decides per request (up to the plan's bound), n > 0 forces n.
        pack_gqa: None = heuristic.
        metadata_layout: "soa" or "aos".  sort, head_swizzle: scheduler switches.
        device: CUDA device (default: the current one).
        short_query_tokens: the fused mixed-batch launch's request-class threshold, as in
            ``varlen_attention`` (None: automatic, fused for a paged plan whose max_seqlen_q
            exceeds the default threshold; 0: off).  A fused plan owns two metadata buffers
            (``metadata`` for the long class, ``metadata_short``) and runs four launches a step.

        arch: the attention mainloop, as in ``varlen_attention``: None (or "auto") reads
            ``KERNELGEN_ARCH`` and otherwise lets the dispatcher choose (``heuristics.choose``:
            the Hopper wgmma/TMA kernel on an sm_90a device for the variants it supports, from
            the plan's length hints; the sm_80 mma.sync kernel elsewhere); "sm_80" or "sm_90a"
            forces one.  A plan on the Hopper path needs q/k/v whose token and head strides TMA
            can address (contiguous heads: any dense layout); a step with other strides raises
            ValueError naming the tensor.  A mixed-batch plan (``short_query_tokens``) on sm_90a
            runs one launch whose long class takes the Hopper kernel and whose short class the
            one-warp decode tiles, SM by SM (``heuristics.choose_fused_hopper``; the two classes
            in turn, ``heuristics.choose_pair``, where it does not apply); elsewhere, or with
            arch="sm_80", the fused sm_80 launch.

    Raises:
        ValueError / TypeError: bad capacities, head counts, head dims, dtype, window, softcap,
            num_splits, layout or arch (a forced "sm_90a" the plan's variant or device cannot
            run, or with the fused launch).
        RuntimeError: ``device`` None and no CUDA device (or a torch without CUDA).
    """

    def __init__(self, *, max_batch: int, num_heads_q: int, num_heads_kv: int, head_dim: int,
                 head_dim_v: int | None = None, dtype=torch.bfloat16, max_total_q: int | None = None,
                 max_seqlen_q: int = 4096, max_seqlen_k: int = 4096, paged: bool = False, causal: bool = False,
                 window_size=(-1, -1), softcap: float = 0.0, num_splits: int = 0, pack_gqa: bool | None = None,
                 metadata_layout: str = "soa", sort: bool = True, head_swizzle: bool = True, device=None,
                 short_query_tokens: int | None = None, arch: str | None = None, page_size: int | None = None):
        validation.nonneg_int("max_batch", max_batch)
        if not 1 <= max_batch <= metadata.MAX_CAPACITY:
            raise ValueError(f"max_batch must be in [1, {metadata.MAX_CAPACITY}], got {max_batch}")
        if dtype not in validation.DTYPES:
            raise TypeError(f"dtype must be torch.float16 or torch.bfloat16, got {dtype}")
        if num_heads_kv < 1 or num_heads_q % num_heads_kv:
            raise ValueError(f"num_heads_q ({num_heads_q}) must be a multiple of num_heads_kv ({num_heads_kv})")
        validation.nonneg_int("max_seqlen_q", max_seqlen_q)
        validation.nonneg_int("max_seqlen_k", max_seqlen_k)
        head_dim_v = head_dim if head_dim_v is None else head_dim_v
        if device is None:
            try:
                device = torch.cuda.current_device()
            except (AssertionError, RuntimeError) as e:  # torch without CUDA, or no device
                raise RuntimeError(f"AttentionPlan needs a CUDA device: {e}") from e
        else:
            device = torch.device(device).index
        self.device = torch.device("cuda", device)
        self.capacity = int(max_batch)
        self.max_total_q = int(max_total_q) if max_total_q is not None else self.capacity * max(1, max_seqlen_q)
        self.num_heads_q, self.num_heads_kv = num_heads_q, num_heads_kv
        self.head_dim, self.head_dim_v, self.dtype = head_dim, head_dim_v, dtype
        self.paged = bool(paged)
        if page_size is not None:
            validation.nonneg_int("page_size", page_size)
            if not self.paged or page_size < 1:
                raise ValueError(f"page_size ({page_size}) needs paged=True and at least 1 token")
        self.page_size = page_size
        self.mask, self.window_left, self.window_right = validation.window(window_size, bool(causal))
        self.softcap = validation.softcap(softcap)
        self.layout = validation.layout(metadata_layout)
        dev = self.device.index
        splits = validation.num_splits(num_splits)
        validation.short_query_tokens(short_query_tokens, pack_gqa, splits)
        dev_arch = api.device_arch(dev)
        mainloop = validation.arch(arch, dev_arch)
        if mainloop == "sm90a" and short_query_tokens:
            raise ValueError("arch='sm_90a' runs no fused mixed-batch launch: leave short_query_tokens None or 0")
        #: The fused mixed-batch launch (``fused.FusedKernels``), or None for the single-class one.
        self.fused = None if mainloop == "sm90a" else self._fused_kernels(
            short_query_tokens, pack_gqa, splits, max_seqlen_q, max_seqlen_k, sort, head_swizzle, mainloop)
        if self.fused is not None:
            f = self.fused
            if isinstance(f, fused.PairKernels):   # sm_90a: the long class's Hopper kernel is self.attn
                self.variants, self.sched_spec, self.attn_spec = f.variants, f.variants.long.scheduler, \
                    f.variants.long.attention
                self.sched, self.attn, self.combine, self.config = f.sched, f.attn_long, f.combine, f.cfg_long
            else:
                self.variants, self.sched_spec, self.attn_spec = f.variants, f.variants.scheduler, f.variants.fused
                self.sched, self.attn, self.combine, self.config = f.sched, f.fused, f.combine, f.cfg_long
            #: Placement of both classes' metadata and the split-KV partials in one workspace.
            self.workspace_layout = f.workspace(self.capacity, self.max_total_q, num_heads_q, head_dim_v)
            self._workspace = torch.zeros(self.workspace_layout.nbytes, dtype=torch.uint8, device=self.device)
            #: long-query and short-query metadata (capacity-sized), the short class's partials
            self.metadata, self.metadata_short, self.split = self.workspace_layout.views(self._workspace)
            self._steps = signature.SignatureCache(64)
            return
        self.metadata_short = None
        self.variants = heuristics.choose(
            dev_arch, validation.DTYPES[dtype], head_dim, head_dim_v, num_heads_q=num_heads_q,
            num_heads_kv=num_heads_kv, mask=self.mask, layout=self.layout, max_seqlen_q=max_seqlen_q,
            max_seqlen_k=max_seqlen_k, paged=self.paged, softcap=self.softcap > 0, pack_gqa=pack_gqa,
            num_splits=splits, num_sms=runtime.device_properties(dev)["num_sms"], mainloop=mainloop,
            page_size=self.page_size or 0)
        self.sched_spec, self.attn_spec = self.variants.scheduler, self.variants.attention
        self.sched = runtime.get_kernel(self.sched_spec, dev)
        self.attn = runtime.get_kernel(self.attn_spec, dev)
        self.combine = runtime.get_kernel(self.variants.combine, dev) if self.variants.combine is not None else None
        self.config = api.scheduler_config(self.attn_spec, self.attn, num_heads_q, num_heads_kv, sort=sort,
                                           head_swizzle=head_swizzle, max_splits=self.variants.max_splits,
                                           forced_splits=self.variants.forced_splits,
                                           window_left=self.window_left)
        #: Placement of the metadata and the split-KV partials in the plan's one workspace.
        self.workspace_layout = WorkspaceLayout(self.capacity, self.combine is not None, self.variants.max_splits,
                                                num_heads_q, self.max_total_q, head_dim_v)
        self._workspace = torch.zeros(self.workspace_layout.nbytes, dtype=torch.uint8, device=self.device)
        #: int32 scheduler metadata (metadata.py), sized by the capacity only, and the split-KV
        #: partials (None without split-KV), sized by max_total_q: views of the workspace.
        self.metadata, self.split = self.workspace_layout.views(self._workspace)
        #: Prepared steps by signature (``signature.key`` of run's arguments).
        self._steps = signature.SignatureCache(64)

    def _fused_kernels(self, short_query_tokens, pack_gqa, splits, max_seqlen_q, max_seqlen_k, sort, head_swizzle,
                       mainloop=None):
        thr = fused.use_fused(short_query_tokens, paged=self.paged, batch=self.capacity, max_seqlen_q=max_seqlen_q,
                              num_heads_q=self.num_heads_q, num_heads_kv=self.num_heads_kv, pack_gqa=pack_gqa,
                              num_splits=splits)
        if not thr:
            return None
        dev = self.device.index
        if mainloop is None:
            kw = dict(num_heads_q=self.num_heads_q, num_heads_kv=self.num_heads_kv, mask=self.mask,
                      layout=self.layout, max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k, paged=self.paged,
                      softcap=self.softcap > 0, short_max_q=thr, num_sms=runtime.device_properties(dev)["num_sms"],
                      page_size=self.page_size or 0)
            args = (api.device_arch(dev), validation.DTYPES[self.dtype], self.head_dim, self.head_dim_v)
            fv = heuristics.choose_fused_hopper(*args, **kw)
            if fv is not None:
                return fused.load(fv, dev, self.num_heads_q, self.num_heads_kv, sort=sort, head_swizzle=head_swizzle,
                                  window_left=self.window_left)
            pv = heuristics.choose_pair(*args, **kw)
            if pv is not None:
                return fused.load_pair(pv, dev, self.num_heads_q, self.num_heads_kv, sort=sort,
                                       head_swizzle=head_swizzle, window_left=self.window_left)
        fv = heuristics.choose_fused(api.device_arch(dev), validation.DTYPES[self.dtype], self.head_dim,
                                     self.head_dim_v, num_heads_q=self.num_heads_q, num_heads_kv=self.num_heads_kv,
                                     mask=self.mask, layout=self.layout, max_seqlen_k=max_seqlen_k, paged=self.paged,
                                     softcap=self.softcap > 0, short_max_q=thr,
                                     num_sms=runtime.device_properties(dev)["num_sms"])
        if fv is None:
            return None
        return fused.load(fv, dev, self.num_heads_q, self.num_heads_kv, sort=sort, head_swizzle=head_swizzle,
                          window_left=self.window_left)

    @property
    def hopper(self) -> bool:
        """Whether the plan runs the Hopper (sm_90a wgmma/TMA) attention kernel."""
        return getattr(self.attn_spec, "mainloop", "sm80") == "sm90a"

    @property
    def metadata_bytes(self) -> int:
        """Size of the metadata buffer in bytes (depends on the capacity only)."""
        return self.metadata.numel() * 4

    def schedule(self, cu_seqlens_q, cu_seqlens_k=None, seqused_k=None) -> None:
        """Launch the scheduler for one batch: it writes the plan's metadata on the current stream.

        Args:
            cu_seqlens_q: int32 (batch + 1,), cumulative query lengths in tokens (batch <= capacity).
            cu_seqlens_k: int32 (batch + 1,), cumulative key lengths in tokens (packed k/v), or None.
            seqused_k: int32 (batch,), keys used per request in tokens (required when cu_seqlens_k is None).

        Raises:
            ValueError: the batch exceeds the capacity, or neither key-length tensor is given, or
                the two cu_seqlens differ in length.
            TypeError: a length tensor is not int32.
        """
        batch = self._check_lengths(cu_seqlens_q, cu_seqlens_k, seqused_k)
        with torch.cuda.device(self.device):
            stream = api._current_stream(self.device.index)
            api.launch_scheduler(self.sched, stream, cu_seqlens_q, cu_seqlens_k, seqused_k, self.metadata, batch,
                                 self.capacity, self.config)
            if self.fused is not None:
                api.launch_scheduler(self.sched, stream, cu_seqlens_q, cu_seqlens_k, seqused_k, self.metadata_short,
                                     batch, self.capacity, self.fused.cfg_short)

    def attend(self, q, k, v, cu_seqlens_q, cu_seqlens_k=None, *, seqused_k=None, page_table=None, out=None, lse=None,
               softmax_scale=None):
        """Launch attention (and the combine kernel) on the metadata the last ``schedule`` wrote.

        Shapes as in ``varlen_attention``; ``lse`` is an optional (num_heads_q, total_q) float32
        tensor to fill.  Returns out.  Raises ValueError / TypeError for inputs that do not match
        the plan (heads, head dims, dtype, device, paging, capacities).
        """
        sizes = self._validate(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, page_table, out, lse)
        scale = validation.softmax_scale(softmax_scale, self.head_dim)
        if out is None:
            out = torch.empty((sizes["total_q"], self.num_heads_q, self.head_dim_v), dtype=q.dtype, device=q.device)
        with torch.cuda.device(self.device):
            self._launch_attention(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, page_table, out, lse, scale)
        return out

    def _check_lengths(self, cu_seqlens_q, cu_seqlens_k, seqused_k) -> int:
        """The schedule's checks of the length tensors; returns the batch."""
        batch = validation.cu_seqlens("cu_seqlens_q", cu_seqlens_q, self.device)
        if cu_seqlens_k is not None and validation.cu_seqlens("cu_seqlens_k", cu_seqlens_k, self.device) != batch:
            raise ValueError("cu_seqlens_k must have as many entries as cu_seqlens_q")
        if cu_seqlens_k is None and seqused_k is None:
            raise ValueError("give cu_seqlens_k or seqused_k")
        if seqused_k is not None:
            validation.tensor("seqused_k", seqused_k, ndim=1, dtypes=(torch.int32,), device=self.device)
            if seqused_k.shape[0] != batch or not seqused_k.is_contiguous():
                raise ValueError(f"seqused_k must be a contiguous ({batch},) tensor, got shape {tuple(seqused_k.shape)}")
        if batch > self.capacity:
            raise ValueError(f"batch {batch} exceeds the plan's capacity {self.capacity}")
        return batch

    def _validate(self, q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, page_table, out, lse) -> dict:
        sizes = validation.varlen_inputs(q, k, v, cu_seqlens_q, cu_seqlens_k, None, None, out, seqused_k=seqused_k,
                                         page_table=page_table)
        self._check_shapes(sizes, q)
        if self.hopper:
            for name, t in (("q", q), ("k", k), ("v", v)):
                if not tma.tma_compatible(t):
                    raise ValueError(f"{name}: the plan runs the Hopper (TMA) kernel, whose loads need token and head "
                                     f"strides that are multiples of 16 bytes, got strides {tuple(t.stride())}; make "
                                     f"the plan with arch='sm_80' for such tensors")
        if lse is not None:
            validation.lse_buffer(lse, self.num_heads_q, sizes["total_q"], self.device)
        return sizes

    def _launch_attention(self, q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, page_table, out, lse, scale):
        stream = api._current_stream(self.device.index)
        kw = dict(seqused_k=seqused_k, page_table=page_table, window=(self.window_left, self.window_right),
                  softcap=self.softcap)
        md = self.metadata if self.fused is None else self.metadata_short
        if isinstance(self.fused, fused.PairKernels):  # the long class on Hopper, then the short one
            rs = None if self.split is None else self.split.row_splits
            self.attn.launch(self.attn.persistent_grid, stream, api.attention_params(
                q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, self.metadata, self.capacity, scale, row_splits=rs,
                maps=self._maps(q, k, v), **kw))
            short = self.fused.attn_short
            short.launch(short.persistent_grid, stream, api.attention_params(
                q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, md, self.capacity, scale, split=self.split, **kw))
            if self.combine is not None:
                api.launch_combine(self.combine, stream, self.split, cu_seqlens_q, md, out, lse, self.num_heads_q)
            return
        if self.fused is not None and self.fused.variants.fused.hopper:  # maps + long struct, short struct
            rs = None if self.split is None else self.split.row_splits
            packed = fused.hopper_params(
                api.attention_params(q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, self.metadata, self.capacity,
                                     scale, row_splits=rs, maps=self._maps(q, k, v), **kw),
                api.attention_params(q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, md, self.capacity, scale,
                                     split=self.split, **kw), self.fused.short_ctas)
            self.attn.launch(self.attn.persistent_grid, stream, packed)
            if self.combine is not None:
                api.launch_combine(self.combine, stream, self.split, cu_seqlens_q, md, out, lse, self.num_heads_q)
            return
        packed = api.attention_params(q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, md, self.capacity, scale,
                                      split=self.split, maps=self._maps(q, k, v), **kw)
        if self.fused is not None:  # the long class's struct first; it records row_splits only
            rs = None if self.split is None else self.split.row_splits
            packed = api.attention_params(q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, self.metadata, self.capacity,
                                          scale, row_splits=rs, **kw) + packed
        self.attn.launch(self.attn.persistent_grid, stream, packed)
        if self.combine is not None:
            api.launch_combine(self.combine, stream, self.split, cu_seqlens_q, md, out, lse, self.num_heads_q)

    def run(self, q, k, v, cu_seqlens_q, cu_seqlens_k=None, *, seqused_k=None, page_table=None, out=None, lse=None,
            return_lse=False, softmax_scale=None):
        """Scheduler, attention and combine for one step, on the plan's device whatever the current
        device is.

        Args: as ``varlen_attention`` — q (total_q, num_heads_q, head_dim), packed k/v
        (total_k, num_heads_kv, head_dim[_v]) with cu_seqlens_k (batch + 1,), or a paged cache
        (num_pages, page_size, num_heads_kv, head_dim[_v]) with page_table (batch, max_pages) and
        seqused_k (batch,) int32 (lengths in tokens); pass ``out`` (total_q, num_heads_q,
        head_dim_v) and ``lse`` (num_heads_q, total_q) float32 to avoid allocating (e.g. inside a
        CUDA graph).

        Returns:
            out, or (out, lse) when ``return_lse`` or ``lse`` is given.

        Raises:
            ValueError / TypeError: inputs that do not match the plan (heads, head dims, dtype,
                device, paging) or exceed its capacities (batch, max_total_q), and every error
                ``varlen_attention`` raises for bad shapes; all before anything is launched.
            kernelgen.launch.launch.LaunchError: the driver refused a launch (names the kernel).

        Host cost: the first step of a signature (the tensors' types, dtypes, devices, shapes and
        strides, ``return_lse``, ``softmax_scale``) is validated and prepared; later steps of it
        read the data pointers, check their alignment and enqueue the kernels (three; four for a
        mixed-batch plan, five where it runs the two classes in turn; as one CUDA graph launch
        outside capture, ``graph_launch.py``), with no allocation when ``out`` (and
        ``lse``, if returned) are given (``docs/perf-notes.md``, "host overhead").
        """
        try:
            key = signature.key((q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, page_table, out, lse), (),
                                (return_lse, softmax_scale))
            step = self._steps.get(key)
        except Exception:  # noqa: BLE001 - an argument that cannot be keyed: the validating path names it
            key = step = None
        if step is not None:
            res = step.run(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, page_table, out, lse)
            if res is not None:
                return res if res[1] is not None else res[0]
        if torch.cuda.current_device() != self.device.index:
            with torch.cuda.device(self.device):
                return self._validated_run(key, q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, page_table, out, lse,
                                           return_lse, softmax_scale)
        return self._validated_run(key, q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, page_table, out, lse,
                                   return_lse, softmax_scale)

    def _validated_run(self, key, q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, page_table, out, lse, return_lse,
                       softmax_scale):
        """run for a signature not prepared yet: every check before anything is launched, then the
        step is prepared, stored under ``key`` (None: not keyable) and run."""
        if return_lse and lse is None:
            lse = torch.empty((self.num_heads_q, q.shape[0]), dtype=torch.float32, device=q.device)
        sizes = self._validate(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, page_table, out, lse)
        batch = self._check_lengths(cu_seqlens_q, cu_seqlens_k, seqused_k)
        scale = validation.softmax_scale(softmax_scale, self.head_dim)
        if out is None:
            out = torch.empty((sizes["total_q"], self.num_heads_q, self.head_dim_v), dtype=q.dtype, device=q.device)
        if isinstance(self.fused, fused.PairKernels):
            step = fused.build_pair(self.fused, layout=self.workspace_layout, batch=batch, q=q, k=k, v=v, out=out,
                                    lse=lse, page_table=page_table, scale=scale,
                                    window=(self.window_left, self.window_right), softcap=self.softcap,
                                    return_lse=bool(return_lse), fixed_base=self._workspace.data_ptr(), sizes=sizes)
        elif self.fused is not None:
            step = fused.build(self.fused, layout=self.workspace_layout, batch=batch, q=q, k=k, v=v, out=out, lse=lse,
                               page_table=page_table, scale=scale, window=(self.window_left, self.window_right),
                               softcap=self.softcap, return_lse=bool(return_lse),
                               fixed_base=self._workspace.data_ptr(), sizes=sizes)
        else:
            step = prepared.build(sched=self.sched, attn=self.attn, combine=self.combine, cfg=self.config,
                                  layout=self.workspace_layout, batch=batch, q=q, k=k, v=v, out=out, lse=lse,
                                  page_table=page_table, scale=scale, window=(self.window_left, self.window_right),
                                  softcap=self.softcap, return_lse=bool(return_lse),
                                  fixed_base=self._workspace.data_ptr(), sizes=sizes, maps=self._map_set(q, k, v))
        if key is not None and signature.cacheable(key):
            self._steps.put(key, step)
        out, lse = step.run(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, page_table, out, lse)
        return (out, lse) if (return_lse or lse is not None) else out

    def _map_set(self, q, k, v):
        """The TMA tensor maps of a step's signature (``tma.AttentionMaps``) on the Hopper path, else None."""
        if not self.hopper:
            return None
        spec = self.attn_spec.long if self.attn_spec.kind == "fused" else self.attn_spec
        return api.hopper_maps(spec, q, k, v, self.paged)

    def _maps(self, q, k, v) -> bytes | None:
        """The encoded tensor maps of these tensors (384 bytes) on the Hopper path, else None."""
        m = self._map_set(q, k, v)
        return None if m is None else m.encode(q.data_ptr(), k.data_ptr(), v.data_ptr())

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
        if self.page_size is not None and sizes["page_size"] != self.page_size:
            raise ValueError(f"the K/V cache has pages of {sizes['page_size']} tokens; the plan was made with "
                             f"page_size={self.page_size}")
        if sizes["paged"] != self.paged:
            raise ValueError(f"the plan was made with paged={self.paged}; page_table must "
                             f"{'be given' if self.paged else 'be None'}")
        if self.split is not None and sizes["total_q"] > self.max_total_q:
            raise ValueError(f"q has {sizes['total_q']} tokens; the plan's max_total_q is {self.max_total_q}")
