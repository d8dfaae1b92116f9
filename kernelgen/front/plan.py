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

import operator

import torch

from ..jit import runtime
from ..kernels import kernel_args
from ..launch import bind, oneoff, quant_q, sinks as _sinks
from ..selection import arguments, decide, signature, spills, validation
from ..jit.cache import KernelNotCachedError
from . import jit_hint


def _index_asked(device):
    """The device index ``device`` spells out (an int, or the N of "cuda:N"), or None."""
    if isinstance(device, str):
        _, _, tail = device.partition(":")
        return int(tail) if tail.strip().lstrip("-").isdigit() else None
    if isinstance(device, bool) or isinstance(device, torch.device):
        return None
    try:
        return operator.index(device)
    except TypeError:
        return None


def _device_index(device) -> int:
    """The CUDA device index of ``AttentionPlan``'s ``device`` argument: None (the current device), an
    int, "cuda" / torch.device("cuda") (the current device) or "cuda:N" / torch.device("cuda", N).

    Raises:
        ValueError: ``device`` names no device or a device that is not CUDA (the message names it).
        RuntimeError: no CUDA device is available (torch without CUDA, no driver, no GPU).
    """
    if device is not None:
        try:   # (an int is a CUDA index: torch.device(int) names the current accelerator, and since
            # torch 2.13 raises where there is none)
            as_int = None if isinstance(device, (str, bool, torch.device)) else _index_asked(device)
            dev = torch.device("cuda", as_int) if as_int is not None else torch.device(device)
        except (RuntimeError, TypeError, ValueError) as e:
            raise ValueError(f"device: an int, 'cuda', 'cuda:N' or a torch.device, got {device!r} ({e})") from None
        if dev.type != "cuda":
            raise ValueError(f"device: AttentionPlan runs on a CUDA device, got {device!r}")
        asked = _index_asked(device)
        if asked is not None and asked != dev.index:   # (torch keeps the index in 8 bits: 256 reads as 0)
            raise ValueError(f"device: no CUDA device index {asked}, got {device!r}")
        if dev.index is not None:
            try:
                count = torch.cuda.device_count()
            except (AssertionError, RuntimeError) as e:  # torch without CUDA, or no driver / device
                raise RuntimeError(f"AttentionPlan needs a CUDA device: {e}") from e
            if count == 0:
                raise RuntimeError("AttentionPlan needs a CUDA device: torch.cuda.device_count() is 0")
            if dev.index >= count:
                raise ValueError(f"device: no CUDA device index {dev.index} ({count} visible), got {device!r}")
            return dev.index
    try:   # (None, or "cuda" without an index: the current device, as torch means it)
        return torch.cuda.current_device()
    except (AssertionError, RuntimeError) as e:  # torch without CUDA, or no driver / device
        raise RuntimeError(f"AttentionPlan needs a CUDA device: {e}") from e


class AttentionPlan:
    """State for varlen attention steps with at most ``max_batch`` requests and ``max_total_q``
    query tokens.

    Args:
        max_batch: capacity in requests (1 .. 8192).
        num_heads_q, num_heads_kv: query and KV heads (num_heads_q a multiple of num_heads_kv).
        head_dim, head_dim_v: 64, 96, 128, 192 or 256 (head_dim_v defaults to head_dim).
        dtype: torch.float16 or torch.bfloat16.
        max_total_q: capacity in query tokens per step (sizes the split-KV partials and
            ``quantize_q``'s buffer: on such a plan a longer step raises ValueError; other plans
            take any total_q); default ``max_batch * max_seqlen_q``.
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
        max_num_splits: 0 = no cap; n >= 1 caps the plan's automatic bound at n (its workspace holds
            at most n splits a request; ``varlen_attention``'s ``max_num_splits``).  Not with a forced
            ``num_splits``.
        pack_gqa: None = heuristic.
        metadata_layout: "soa" or "aos".  sort, head_swizzle: scheduler switches.
        device: CUDA device (default: the current one).
        short_query_tokens: the fused mixed-batch launch's request-class threshold, as in
            ``varlen_attention`` (None: automatic, fused for a paged plan whose max_seqlen_q
            exceeds the default threshold; 0: off).  A fused plan owns two metadata buffers
            (``metadata`` for the long class, ``metadata_short``) and runs four launches a step.

        arch: the attention mainloop, as in ``varlen_attention``: None (or "auto") reads
            ``KERNELGEN_ARCH`` and otherwise lets the dispatcher choose (``selection.decide``:
            the Hopper wgmma/TMA kernel on an sm_90a device for the variants it supports, from
            the plan's length hints; the sm_80 mma.sync kernel elsewhere); "sm_80" or "sm_90a"
            forces one.  A plan on the Hopper path needs q/k/v whose token and head strides TMA
            can address (contiguous heads: any dense layout); a step with other strides raises
            ValueError naming the tensor.  A mixed-batch plan (``short_query_tokens``) on sm_90a
            runs one launch whose long class takes the Hopper kernel and whose short class the
            one-warp decode tiles, SM by SM (``heuristics.choose_fused_hopper``; the two classes
            in turn, ``heuristics.choose_pair``, where it does not apply); elsewhere, or with
            arch="sm_80", the fused sm_80 launch.
        sinks: steps will pass ``sinks=`` (attention sinks, see ``run``): the plan preallocates
            the float32 LSE scratch of num_heads_q * max_total_q values that those steps use when
            no ``lse`` is passed, so a captured step allocates nothing for it.  Without it such
            steps allocate their LSE scratch per step (like ``out=None``).  A single-class plan
            (no mixed-batch launch) then runs the sink kernels instead (``AttentionSpec.sinks``,
            ``sinks_fused``: the epilogue and the combine add the sink, no rescale, no scratch);
            its steps without ``sinks`` read a plan-owned -inf tensor (no sink).
        alibi: steps pass ``alibi_slopes=`` (ALiBi, see ``varlen_attention``): the plan runs the
            ALiBi kernels, and every step of it must pass the slopes ((num_heads_q,) or (batch,
            num_heads_q) float32 on the plan's device).  The kernels read the values on the device
            at every launch (a captured step replays with what the tensor holds then); the
            tensor's address and shape are part of the step's signature.  A mixed-batch plan
            with ALiBi runs its classes in turn (sm_90a) or as one class (no fused launch).
        variant: a user attention variant (``kernelgen.Variant``, see ``varlen_attention``): the
            plan runs its kernels (compiled now).  Steps use this Variant's tensors, or those of
            the ``variant=`` a step passes (the same snippets and tensor dtypes; ValueError
            otherwise).  The kernels read the tensors' values at every launch, so a captured step
            replays with what the same tensors hold then; their addresses are part of the step's
            signature (new tensors prepare the step again, and a graph must be captured again).
            A mixed-batch plan with a variant runs its classes in turn (sm_90a) or as one class.
        kv_dtype: steps pass an FP8 K/V cache (k and v ``torch.float8_e4m3fn`` or
            ``torch.float8_e5m2``; ``dtype`` stays q's and out's, fp16 or bf16): "e4m3" or
            ``torch.float8_e4m3fn``, "e5m2" or ``torch.float8_e5m2``; None (default): k/v in
            ``dtype``.  The plan runs FP8 kernels (the cache converted exactly to ``dtype`` in shared
            memory: the Hopper kernel for prefill-shaped plans on an H200 with packed K/V or a
            ``page_size`` TMA can box, else the sm_80 mainloop; a mixed prefill + decode plan runs
            the fused FP8 kernel, as ``docs/api.md``'s table says).  Steps pass ``k_descale`` /
            ``v_descale`` (see ``run``); every step's k must have this dtype (ValueError naming
            ``k`` otherwise), and a plan made without ``kv_dtype`` refuses an FP8 k.
        q_dtype: steps pass an FP8 q (FlashAttention-3's FP8 forward): "e4m3" or
            ``torch.float8_e4m3fn`` (needs ``kv_dtype``); ``dtype`` is then the output's.  None
            (default): q in ``dtype``.  Prefill-shaped plans on an H200 whose head_dim ==
            head_dim_v is 64 or 128, or 256 without split-KV, run the Hopper
            kernel's FP8 tensor-core variant
            (``attn_spec.fp8_mma``); the others convert each step's q exactly to ``dtype`` first
            (``q_convert``: one elementwise pass and a temporary, also inside a captured graph).
            Steps pass ``q_descale`` (see ``run``).
        quantize_q: a plan with ``kv_dtype`` "e4m3" and 16-bit steps' q: True lets a plan that the
            FP8 tensor-core variant can take (as ``q_dtype="e4m3"`` would) quantise each step's q
            on the device (``varlen_attention``'s ``quantize_q``: per request and KV head,
            power-of-two factors) into a buffer the plan owns (max_total_q x num_heads_q x
            head_dim bytes and the factors) and run that variant; ``q_quant`` says whether it does.
            A mixed-batch plan on the Hopper fused kernel (paged, head dims 64 and 128) runs its long
            class on that variant over the quantised q and its short class on each step's 16-bit q
            itself (exact).  Otherwise q stays exact.  TypeError if not a bool.

    Raises:
        ValueError / TypeError: bad capacities, head counts, head dims, dtype, kv_dtype, window,
            softcap, num_splits, max_num_splits, layout or arch (a forced "sm_90a" the plan's variant, FP8 cache
            or device cannot run, or with the fused launch); a ``device`` that is not a CUDA device
            (ValueError naming it).
        RuntimeError: ``device`` None or "cuda" and no CUDA device (or a torch without CUDA).
    """

    def __init__(self, *, max_batch: int, num_heads_q: int, num_heads_kv: int, head_dim: int,
                 head_dim_v: int | None = None, dtype=torch.bfloat16, max_total_q: int | None = None,
                 max_seqlen_q: int = 4096, max_seqlen_k: int = 4096, paged: bool = False, causal: bool = False,
                 window_size=(-1, -1), softcap: float = 0.0, num_splits: int = 0, pack_gqa: bool | None = None,
                 metadata_layout: str = "soa", sort: bool = True, head_swizzle: bool = True, device=None,
                 short_query_tokens: int | None = None, arch: str | None = None, page_size: int | None = None,
                 sinks: bool = False, alibi: bool = False, variant=None, kv_dtype=None, q_dtype=None,
                 quantize_q: bool = False, max_num_splits: int = 0):
        arguments.plan_capacity(max_batch, dtype, num_heads_q, num_heads_kv, max_seqlen_q, max_seqlen_k,
                                head_dim, head_dim_v, max_total_q)
        arguments.plan_scalars(head_dim=head_dim, paged=paged, causal=causal, alibi=alibi, sinks=sinks, sort=sort,
                               head_swizzle=head_swizzle, pack_gqa=pack_gqa, softcap=softcap, quantize_q=quantize_q)
        kv = validation.kv_dtype(kv_dtype)
        qd = validation.q_dtype(q_dtype, kv)
        quantize_q, sinks = bool(quantize_q), bool(sinks)
        head_dim_v = head_dim if head_dim_v is None else head_dim_v
        self.capacity = int(max_batch)
        self.max_total_q = int(max_total_q) if max_total_q is not None else self.capacity * max(1, max_seqlen_q)
        self.num_heads_q, self.num_heads_kv = num_heads_q, num_heads_kv
        self.head_dim, self.head_dim_v, self.dtype = head_dim, head_dim_v, dtype
        self.paged = bool(paged)   # (a bool or a NumPy bool: plan_scalars)
        code = validation.variant(variant, None)   # (its tensors' device: below, once the plan's is known)
        #: The plan's user variant (``kernelgen.Variant``), or None.
        self.variant = variant
        opts = dict(
            capacity=self.capacity, max_total_q=self.max_total_q, num_heads_q=num_heads_q, num_heads_kv=num_heads_kv,
            head_dim=head_dim, head_dim_v=head_dim_v, dtype=dtype, max_seqlen_q=max_seqlen_q,
            max_seqlen_k=max_seqlen_k, paged=self.paged, page_size=page_size, causal=causal, window_size=window_size,
            softcap=softcap, num_splits=num_splits, pack_gqa=pack_gqa, metadata_layout=metadata_layout, sort=sort,
            head_swizzle=head_swizzle, short_query_tokens=short_query_tokens, arch=arch, alibi=alibi,
            max_num_splits=max_num_splits,
            **({"sinks": True} if sinks else {}), **({"variant": code} if code is not None else {}),
            **({"kv_dtype": kv} if kv else {}), **({"q_dtype": qd} if qd else {}))
        checked = arguments.plan_options(**opts)
        # the device last: a bad argument raises its ValueError also where no CUDA device is
        device = _device_index(device)
        self.device = torch.device("cuda", device)
        validation.variant(variant, self.device)
        #: The FP8 K/V cache dtype of the plan's steps ("e4m3" or "e5m2"), None for k/v in ``dtype``.
        self.kv_dtype = kv or None
        #: The FP8 q dtype of the plan's steps ("e4m3"), None for q in ``dtype``.
        self.q_dtype = qd or None
        #: Whether the plan's kernels add ALiBi biases (steps then pass ``alibi_slopes``).
        self.alibi = bool(alibi)
        self.page_size = checked.page_size
        (self.window_left, self.window_right), self.softcap = checked.window, checked.softcap
        self.mask, self.layout = checked.signature.mask, checked.signature.layout
        dev = runtime.device(device)
        #: Whether each step's 16-bit q is quantised for the FP8 tensor-core variant (``quantize_q``).
        self.q_quant = False
        recipe = None
        #: ... and the short class of its fused kernel reads the 16-bit q itself (a mixed-batch plan whose
        #: long class runs the FP8 tensor-core variant: ``launch.fused.build``'s ``q_short``).
        self._q_short = False
        if quantize_q and kv == "e4m3" and not qd and not alibi and code is None:
            checked8 = arguments.plan_options(**{**opts, "q_dtype": "e4m3", "quantized_q": True})
            recipe = decide.decide(checked8.signature, dev, checked8.settings)
            attn = getattr(recipe.variants, "attention", None)
            fused_long = getattr(getattr(recipe.variants, "fused", None), "long", None)
            if recipe.kind == "single" and attn is not None and attn.fp8_mma:
                checked, self.q_quant = checked8, True
            elif recipe.kind == "fused" and fused_long.fp8_mma:
                checked, self.q_quant, self._q_short = checked8, True, True
            else:
                recipe = None
        #: What the plan launches (``kernels.recipe.Recipe``): kernels, scheduler configs, workspace layout
        #: (a user variant's three-warpgroup / option-"m" kernel that spills: its twin, ``selection.spills``).
        try:
            self.recipe = spills.checked(recipe or decide.decide(checked.signature, dev, checked.settings),
                                         checked.signature, dev, checked.settings, build=True)
            self._kernels = bind.bind(self.recipe, runtime.load(self.recipe.specs, device))
        except KernelNotCachedError as e:   # JIT disabled: name the command that builds the plan's kernels
            jit_hint.raise_with_command(e, getattr(getattr(self, "recipe", None), "specs", ()))
            raise
        k = self._kernels
        #: The two-class launch (``launch.fused.FusedKernels`` or ``PairKernels``), or None.
        self.fused = None if self.recipe.kind == "single" else k
        self.variants, self.sched_spec, self.attn_spec = k.variants, k.sched_spec, k.attn_spec
        self.sched, self.attn, self.combine, self.config = k.sched, k.attn, k.combine, k.config
        #: The dtype each step's FP8 q is converted to before the kernels (``decide.kernel_q_dtype``:
        #: ``dtype`` unless the plan runs the FP8 tensor-core variant), None when q goes in as it is.
        self.q_convert = decide.kernel_q_dtype(self.recipe, qd, dtype)
        #: Whether the plan runs the Hopper (sm_90a wgmma/TMA) attention kernel.
        self.hopper = k.hopper
        #: Placement of the metadata (both classes' for a two-class plan) and the split-KV
        #: partials in the plan's one workspace.
        self.workspace_layout = self.recipe.workspace
        self._workspace = torch.zeros(self.workspace_layout.nbytes, dtype=torch.uint8, device=self.device)
        #: the quantised q and its factors (``q_quant``): one buffer, the factors past max_total_q's rows
        self._q8_off, n = quant_q.buffer_bytes(self.max_total_q, num_heads_q, head_dim, self.capacity, num_heads_kv)
        self._q8 = torch.empty(n, dtype=torch.uint8, device=self.device) if self.q_quant else None
        #: the loaded q quantisation kernel (``runtime.quant_kernel``; None: torch ops), or None
        try:
            self._q_kernel = runtime.quant_kernel(self.device, dtype, checked.settings.allow_untested_arch) \
                if self.q_quant else None
        except KernelNotCachedError as e:   # (the command that builds it and the plan's kernels)
            jit_hint.raise_with_command(e, self.recipe.specs)
            raise
        #: int32 scheduler metadata (``kernels.metadata``; the long class's in a two-class plan), sized by
        #: the capacity only, the short class's (None for a single-class plan) and the split-KV
        #: partials (None without split-KV), sized by max_total_q: views of the workspace.
        if self.fused is None:
            self.metadata, self.split = self.workspace_layout.views(self._workspace)
            self.metadata_short = None
        else:
            self.metadata, self.metadata_short, self.split = self.workspace_layout.views(self._workspace)
        #: Prepared steps by signature (``signature.key`` of run's arguments).
        self._steps = signature.SignatureCache(64)
        #: The batch (requests) of the metadata the last ``schedule`` or ``run`` wrote; None before either.
        #: ``attend`` checks its batch against it (the lengths themselves stay on the device).
        self._scheduled_batch: int | None = None
        #: float32 LSE scratch of steps with sinks and no caller lse (``sinks=True``), else None.  A
        #: normal tensor even for a plan made under torch.inference_mode: launch.sinks.apply updates
        #: it in place, which an inference tensor refuses outside inference mode.
        #: Whether the plan's kernels add the sinks themselves (a single-class plan made with
        #: ``sinks=True``: ``Recipe.sinks_fused``); steps then skip ``launch.sinks.apply``.
        self.sinks_fused = self.recipe.sinks_fused
        with torch.inference_mode(False):
            self._sink_lse = (torch.empty(num_heads_q * self.max_total_q, dtype=torch.float32, device=self.device)
                              if sinks and not self.sinks_fused else None)
        #: -inf sinks (no sink) for the steps of a sink-kernel plan that pass no ``sinks``
        self._no_sinks = (torch.full((num_heads_q,), float("-inf"), dtype=torch.float32, device=self.device)
                          if self.sinks_fused else None)

    def _alibi_arg(self, alibi_slopes, cu_seqlens_q):
        """(address, batch stride) of a step's checked ``alibi_slopes``, None without ALiBi."""
        if alibi_slopes is None:
            if self.alibi:
                raise ValueError("alibi_slopes is required: this plan was made with alibi=True (ALiBi kernels)")
            return None
        if not self.alibi:
            raise ValueError("alibi_slopes given to a plan made without ALiBi: make it with alibi=True")
        stride = validation.alibi_slopes(alibi_slopes, self.num_heads_q, cu_seqlens_q.shape[0] - 1, self.device)
        return alibi_slopes.data_ptr(), stride

    def _descale_arg(self, k_descale, v_descale, batch: int, q_descale=None, softmax_scale=None):
        """The FP8 kernels' descale fields of a step of ``batch`` requests (``kernel_args.descale_fields``:
        the checked ``k_descale`` / ``v_descale`` / ``q_descale`` addresses and strides; None: factor
        1), None for a plan without ``kv_dtype`` (which refuses descales as ``varlen_attention`` does
        with a 16-bit cache; ``q_descale`` needs a plan made with ``q_dtype``)."""
        strides = tuple(validation.descale(name, x, batch, self.num_heads_kv, self.device, self.kv_dtype)
                        for name, x in (("k_descale", k_descale), ("v_descale", v_descale)))
        strides += (validation.q_descale(q_descale, batch, self.num_heads_kv, self.device, self.q_dtype),)
        if validation.host_checks_enabled():
            for name, x in (("k_descale", k_descale), ("v_descale", v_descale), ("q_descale", q_descale)):
                validation.check_descale_values(name, x)
            validation.check_descale_product(k_descale, q_descale,
                                             validation.softmax_scale(softmax_scale, self.head_dim))
        if self.q_quant:   # the factors of the plan's quantised q, (batch, num_heads_kv) contiguous
            return kernel_args.descale_fields(k_descale, v_descale, strides[:2] + ((self.num_heads_kv, 1),),
                                              self._q8[self._q8_off:])
        return None if self.kv_dtype is None else kernel_args.descale_fields(k_descale, v_descale, strides, q_descale)

    def _quantized(self, q, cu_seqlens_q):
        """A step's 16-bit q quantised into the plan's buffer (``launch.quant_q``): the e4m3 q the
        kernels read (the factors at the plan's fixed offset, the step's q_descale field)."""
        return quant_q.quantize(q, cu_seqlens_q, cu_seqlens_q.shape[0] - 1, self.num_heads_kv, buffer=self._q8,
                                descale_offset=self._q8_off, kernel=self._q_kernel)[0]

    def _variant_arg(self, variant):
        """The tensor addresses of a step's variant (``variant``, else the plan's), None for a plan
        without one.  Raises ValueError for a variant the plan's kernels were not built for."""
        if self.variant is None:
            if variant is not None:
                raise ValueError("variant given to a plan made without one: make the plan with variant=")
            return None
        if variant is None:
            variant = self.variant
        validation.variant(variant, self.device)
        if variant.code != self.variant.code:
            raise ValueError("the step's variant has other snippets or tensor dtypes than the plan's: make a plan "
                             "for it (its kernels differ)")
        return variant.addresses()

    def _lse_scratch(self, total_q: int):
        """A contiguous (num_heads_q, total_q) float32 LSE for a step with sinks and no caller lse:
        a view of the preallocated scratch when it is large enough, else a new tensor."""
        n = self.num_heads_q * total_q
        if self._sink_lse is not None and n <= self._sink_lse.numel():
            return self._sink_lse[:n].view(self.num_heads_q, total_q)
        return torch.empty((self.num_heads_q, total_q), dtype=torch.float32, device=self.device)

    @property
    def metadata_bytes(self) -> int:
        """Size of the scheduler metadata in bytes: the metadata buffer's, plus the short class's of a
        two-class (mixed-batch) plan (depends on the capacity only)."""
        return (self.metadata.numel() + (0 if self.metadata_short is None else self.metadata_short.numel())) * 4

    def schedule(self, cu_seqlens_q, cu_seqlens_k=None, seqused_k=None) -> None:
        """Launch the scheduler for one batch: it writes the plan's metadata on the current stream.

        Args:
            cu_seqlens_q: int32 (batch + 1,), cumulative query lengths in tokens (batch <= capacity).
            cu_seqlens_k: int32 (batch + 1,), cumulative key lengths in tokens (packed k/v), or None.
            seqused_k: int32 (batch,), keys used per request in tokens (required when cu_seqlens_k is None).

        Raises:
            ValueError: the batch exceeds the capacity, or neither key-length tensor is given, or
                the two cu_seqlens differ in length, or a paged plan gets cu_seqlens_k or no seqused_k.
            TypeError: a length tensor is not int32.
        """
        batch = arguments.plan_lengths(cu_seqlens_q, cu_seqlens_k, seqused_k, device=self.device,
                                       capacity=self.capacity, paged=self.paged)
        self._scheduled_batch = None   # (a launch failing half-way leaves no batch to trust)
        with torch.cuda.device(self.device):
            oneoff.schedule(self._kernels, cu_seqlens_q, cu_seqlens_k, seqused_k, self.metadata, self.metadata_short,
                            batch, self.capacity)
        self._scheduled_batch = batch

    def attend(self, q, k, v, cu_seqlens_q, cu_seqlens_k=None, *, seqused_k=None, page_table=None, out=None, lse=None,
               softmax_scale=None, sinks=None, alibi_slopes=None, variant=None, k_descale=None, v_descale=None,
               q_descale=None):
        """Launch attention (and the combine kernel) on the metadata the last ``schedule`` wrote.

        Shapes as in ``varlen_attention``; ``lse`` is an optional (num_heads_q, total_q) float32
        tensor to fill; ``sinks`` an optional float32 (num_heads_q,) tensor of attention sinks
        (as in ``run``; ``lse`` then receives the sink-inclusive LSE); ``alibi_slopes`` the ALiBi
        slopes of a plan made with ``alibi=True`` (as in ``run``); ``variant``, ``k_descale``,
        ``v_descale`` and ``q_descale`` as in ``run``.  Returns out.  Raises
        ValueError / TypeError for inputs that do not match the plan (heads, head dims, dtype,
        kv_dtype, device, paging, capacities), ValueError for a batch (``cu_seqlens_q`` entries - 1)
        smaller than the one the last ``schedule`` (or ``run``) wrote metadata for (a larger one is
        the scheduled batch padded with zero-length requests, which own no tiles), and RuntimeError
        before any ``schedule`` or ``run`` (or after one whose launch failed).  The lengths themselves
        are not compared (they stay on the device): pass the values ``schedule`` was given, padded or
        not.  The check sees the Python calls, not graph replays: a graph that holds a ``schedule``
        replays the batch it captured.
        """
        sizes = self._check_inputs(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, page_table, out, lse, sinks)
        descale = None if self.kv_dtype is None and k_descale is None and v_descale is None and q_descale is None \
            else self._descale_arg(k_descale, v_descale, sizes["batch"], q_descale, softmax_scale)
        # (no call without ALiBi: a plain step's path down the layers stays as it was)
        alibi = None if alibi_slopes is None and not self.alibi else self._alibi_arg(alibi_slopes, cu_seqlens_q)
        user = None if variant is None and self.variant is None else self._variant_arg(variant)
        scale = validation.softmax_scale(softmax_scale, self.head_dim)
        validation.softcap_ratio(scale, self.softcap)
        if self._scheduled_batch is None:
            raise RuntimeError("AttentionPlan.attend: no metadata yet: call schedule(cu_seqlens_q, ...) for the "
                               "batch first (once per step; every layer's attend then reads it)")
        if sizes["batch"] < self._scheduled_batch:   # (more: padding requests, which own no tiles)
            raise ValueError(f"AttentionPlan.attend: cu_seqlens_q has {sizes['batch']} requests but the last "
                             f"schedule() was for {self._scheduled_batch} (the kernels would read past "
                             f"cu_seqlens_q): schedule this batch first")
        if out is None:
            out = torch.empty((sizes["total_q"], self.num_heads_q, self.head_dim_v), dtype=self.dtype, device=q.device)
        if self.hopper and not sizes["total_q"]:   # no query token: nothing to load (a TMA map needs a token)
            return out
        qs = {"q_short": q} if self._q_short else {}   # (the fused kernel's short class reads the 16-bit q)
        if self.q_convert is not None:
            q = q.to(self.q_convert)
        elif self.q_quant:
            q = self._quantized(q, cu_seqlens_q)
        fused_sinks = None
        if self.sinks_fused:   # the kernels add the sinks (or -inf: none)
            fused_sinks, kernel_lse = (self._no_sinks if sinks is None else sinks).data_ptr(), lse
        else:
            kernel_lse = lse if (lse is not None or sinks is None) else self._lse_scratch(sizes["total_q"])
        with torch.cuda.device(self.device):
            oneoff.attend(self._kernels, q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, page_table, out, kernel_lse,
                          md_long=self.metadata, md_short=self.metadata_short, split=self.split,
                          capacity=self.capacity, scale=scale, window=(self.window_left, self.window_right),
                          softcap=self.softcap, alibi=alibi,
                          **({} if fused_sinks is None else {"sinks": fused_sinks}),
                          **({} if user is None else {"user": user}),
                          **({} if descale is None else {"descale": descale}), **qs)
            if sinks is not None and fused_sinks is None:
                _sinks.apply(out, kernel_lse, sinks, cu_seqlens_q)
        return out

    def run(self, q, k, v, cu_seqlens_q, cu_seqlens_k=None, *, seqused_k=None, page_table=None, out=None, lse=None,
            return_lse=False, softmax_scale=None, sinks=None, alibi_slopes=None, variant=None, k_descale=None,
            v_descale=None, q_descale=None):
        """Scheduler, attention and combine for one step, on the plan's device whatever the current
        device is.

        Args: as ``varlen_attention`` — q (total_q, num_heads_q, head_dim), packed k/v
        (total_k, num_heads_kv, head_dim[_v]) with cu_seqlens_k (batch + 1,), or a paged cache
        (num_pages, page_size, num_heads_kv, head_dim[_v]) with page_table (batch, max_pages) and
        seqused_k (batch,) int32 (lengths in tokens); pass ``out`` (total_q, num_heads_q,
        head_dim_v) and ``lse`` (num_heads_q, total_q) float32 to avoid allocating (e.g. inside a
        CUDA graph).  ``sinks``: None, or attention sinks (gpt-oss), a float32 (num_heads_q,)
        tensor on the plan's device, one value-less logit per query head in every row's softmax
        denominator (semantics, -inf and empty rows as in ``varlen_attention``); the returned /
        written lse includes it.  On a plan with ``sinks_fused`` (single class, made with
        ``sinks=True``) the sink kernels add it (the address is a step parameter); otherwise it is
        applied after the kernels as an exact LSE rescale
        (``launch.sinks.apply``, one extra pass over out) with torch ops on the current stream:
        its values are read on the device, so a captured step replays with whatever the tensor
        holds then.  Without ``lse`` the step's LSE goes to the plan's scratch (``sinks=True``
        at construction) or a per-step tensor.  ``alibi_slopes``: the ALiBi slopes, required by
        (and only by) a plan made with ``alibi=True``: float32 (num_heads_q,) or (batch,
        num_heads_q) on the plan's device, FlashAttention-2's convention (``varlen_attention``);
        read on the device at every launch, so a captured step replays with new values.
        ``variant``: None (the plan's variant, if it has one) or a ``kernelgen.Variant`` with the
        plan's snippets and tensor dtypes (its tensors replace the plan's for this step; ValueError
        for other snippets, or for a plan made without a variant).  Its tensors are read on the
        device at every launch (a captured step replays with their new values).
        ``k_descale``, ``v_descale``: a plan made with ``kv_dtype`` (FP8 k/v of that dtype): None
        (factor 1) or float32 tensors on the plan's device of shape (batch, num_heads_kv) (batch:
        the step's ``cu_seqlens_q`` entries - 1, padding requests included) or one that broadcasts
        to it (``()``, ``(1, 1)``: per tensor), FlashAttention-3's convention as in
        ``varlen_attention``.  The kernels read the factors on the device at every launch: their
        addresses are parameters of the step (part of its signature, like ``alibi_slopes``), so a
        captured step replays with the values the same tensors hold then (write new scales in
        place); new tensors prepare the step again (capture again).  Given to a plan without
        ``kv_dtype`` they raise ValueError.  ``q_descale``: a plan made with ``q_dtype`` (FP8 q):
        None or a float32 tensor shaped as ``k_descale``, read the same way (``varlen_attention``).

        Returns:
            out, or (out, lse) when ``return_lse`` or ``lse`` is given.

        Raises:
            ValueError / TypeError: inputs that do not match the plan (heads, head dims, dtype,
                device, paging; a k dtype other than the plan's ``kv_dtype``: ValueError naming
                ``k``) or exceed its capacities (batch; max_total_q on a plan with split-KV
                partials or ``quantize_q``, whose buffers it sizes), and every error
                ``varlen_attention`` raises for bad shapes (descales included); all before
                anything is launched.
            kernelgen.LaunchError: the driver refused a launch (names the kernel).

        Host cost: the first step of a signature (the tensors' types, dtypes, devices, shapes and
        strides, ``return_lse``, ``softmax_scale``) is validated and prepared; later steps of it
        read the data pointers, check their alignment and enqueue the kernels (three; four for a
        mixed-batch plan, five where it runs the two classes in turn; as one CUDA graph launch
        outside capture, ``graph_launch.py``), with no allocation when ``out`` (and
        ``lse``, if returned) are given (``docs/dev/perf-log.md``, "host overhead").
        """
        try:
            descaled = k_descale is not None or v_descale is not None or q_descale is not None
            key = signature.key((q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, page_table, out, lse, sinks,
                                 alibi_slopes) + ((k_descale, v_descale, q_descale) if descaled else ()), (),
                                (return_lse, softmax_scale, None if alibi_slopes is None else alibi_slopes.data_ptr(),
                                 None if sinks is None or not self.sinks_fused else sinks.data_ptr(),
                                 # (the plan's own variant too: its tensors' addresses, read when a
                                 # step is prepared, must key it as a step's variant= does)
                                 (variant if variant is not None else self.variant).key()
                                 if variant is not None or self.variant is not None else None)
                                + (tuple(None if x is None else x.data_ptr() for x in (k_descale, v_descale, q_descale))
                                   if descaled else ()))
            step = self._steps.get(key)
            if descaled and validation.host_checks_enabled():
                step = None        # (the descales' values are checked on the validating path)
        except Exception:  # noqa: BLE001 - an argument that cannot be keyed: the validating path names it
            key = step = None
        kq, qs = q, {}
        if step is not None and self.q_convert is not None:
            # an FP8 q converted for the kernels (a misaligned one goes down the validating path,
            # which names it); a declined step goes down the validating path with the caller's q
            kq = None if q.data_ptr() & 15 else q.to(self.q_convert)
            step = None if kq is None else step
        elif step is not None and self.q_quant:   # (a misaligned q: the validating path names it)
            kq = None if q.data_ptr() & 15 else self._quantized(q, cu_seqlens_q)
            step = None if kq is None else step
            qs = {"q_short": q} if self._q_short else {}   # (the fused kernel's short class reads q itself)
        if step is not None:
            if sinks is None or (self.sinks_fused and not validation.host_checks_enabled()):
                # (sink kernels: the sinks' address is in the step's parameters)
                # (``_launched`` inline: the hot path)
                before, self._scheduled_batch = self._scheduled_batch, None
                res = step.run(kq, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, page_table, out, lse, **qs)
                if res is not None:
                    self._scheduled_batch = step.sizes["batch"]
                    return res if res[1] is not None else res[0]
                self._scheduled_batch = before
            elif not validation.host_checks_enabled():
                give = return_lse or lse is not None
                kernel_lse = lse if lse is not None or return_lse else self._lse_scratch(q.shape[0])
                if self.device.index != torch.cuda.current_device():
                    with torch.cuda.device(self.device):
                        res = self._sink_step(step, kq, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, page_table,
                                              out, kernel_lse, sinks, **qs)
                else:
                    res = self._sink_step(step, kq, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, page_table, out,
                                          kernel_lse, sinks, **qs)
                if res is not None:
                    return res if give else res[0]
        if torch.cuda.current_device() != self.device.index:
            with torch.cuda.device(self.device):
                return self._validated_run(key, q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, page_table, out, lse,
                                           return_lse, softmax_scale, sinks, alibi_slopes, variant, k_descale,
                                           v_descale, q_descale)
        return self._validated_run(key, q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, page_table, out, lse,
                                   return_lse, softmax_scale, sinks, alibi_slopes, variant, k_descale, v_descale,
                                   q_descale)

    def _launched(self, step, q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, page_table, out, lse, q_short=None):
        """``step.run``, recording the batch whose metadata its scheduler wrote (what ``attend`` checks):
        None while it launches (a launch failing half-way leaves no batch to trust), its batch once it
        launched; a declined fast path (None: misaligned pointers) launched nothing and changes nothing.
        ``q_short``: the step's 16-bit q beside its quantised copy ``q`` (``_q_short``)."""
        before, self._scheduled_batch = self._scheduled_batch, None
        res = step.run(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, page_table, out, lse,
                       **({} if q_short is None else {"q_short": q_short}))
        self._scheduled_batch = before if res is None else step.sizes["batch"]
        return res

    def _sink_step(self, step, q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, page_table, out, lse, sinks,
                   q_short=None):
        """A prepared step whose LSE goes to ``lse`` (or is allocated), then the sinks' rescale;
        None when the step's fast path declines (misaligned pointers)."""
        res = self._launched(step, q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, page_table, out, lse, q_short)
        if res is not None:
            _sinks.apply(res[0], res[1], sinks, cu_seqlens_q)
        return res

    def _validated_run(self, key, q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, page_table, out, lse, return_lse,
                       softmax_scale, sinks=None, alibi_slopes=None, variant=None, k_descale=None, v_descale=None,
                       q_descale=None):
        """run for a signature not prepared yet: every check before anything is launched, then the
        step is prepared, stored under ``key`` (None: not keyable) and run.  With ``sinks`` the
        step always writes an LSE (the caller's, a new one when returned, else the plan's
        scratch) and ``launch.sinks.apply`` follows it."""
        sizes = self._check_inputs(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, page_table, out, lse, sinks)
        return_lse, scale = arguments.step_scalars(return_lse, softmax_scale, self.head_dim, self.softcap)
        give = return_lse or lse is not None
        if return_lse and lse is None:
            lse = torch.empty((self.num_heads_q, q.shape[0]), dtype=torch.float32, device=q.device)
        # (no call without ALiBi: a plain step's path down the layers stays as it was)
        alibi = None if alibi_slopes is None and not self.alibi else self._alibi_arg(alibi_slopes, cu_seqlens_q)
        user = None if variant is None and self.variant is None else self._variant_arg(variant)
        descale = None if self.kv_dtype is None and k_descale is None and v_descale is None and q_descale is None \
            else self._descale_arg(k_descale, v_descale, sizes["batch"], q_descale, softmax_scale)
        fused_sinks = (self._no_sinks if sinks is None else sinks).data_ptr() if self.sinks_fused else None
        if sinks is not None and lse is None and fused_sinks is None:
            lse = self._lse_scratch(sizes["total_q"])
        batch = arguments.plan_lengths(cu_seqlens_q, cu_seqlens_k, seqused_k, device=self.device,
                                       capacity=self.capacity, paged=self.paged)
        if out is None:
            out = torch.empty((sizes["total_q"], self.num_heads_q, self.head_dim_v), dtype=self.dtype, device=q.device)
        if self.hopper and not sizes["total_q"]:   # no query token: nothing to load (a TMA map needs a token)
            return (out, lse) if give else out
        qs = {"q_short": q} if self._q_short else {}   # (the fused kernel's short class reads the 16-bit q)
        if self.q_convert is not None:
            q = q.to(self.q_convert)
        elif self.q_quant:
            q = self._quantized(q, cu_seqlens_q)
        step = self._kernels.prepare(layout=self.workspace_layout, batch=batch, q=q, k=k, v=v, out=out, lse=lse,
                                     page_table=page_table, scale=scale, window=(self.window_left, self.window_right),
                                     softcap=self.softcap,
                                     return_lse=bool(return_lse) or (sinks is not None and fused_sinks is None),
                                     fixed_base=self._workspace.data_ptr(), sizes=sizes,
                                     **({} if alibi is None else {"alibi": alibi}),
                                     **({} if fused_sinks is None else {"sinks": fused_sinks}),
                                     **({} if user is None else {"user": user}),
                                     **({} if descale is None else {"descale": descale}), **qs)
        if key is not None and signature.cacheable(key):
            self._steps.put(key, step)
        self._scheduled_batch = None   # (``_launched`` inline: this path always launches)
        out, lse = step.run(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, page_table, out, lse, **qs)
        self._scheduled_batch = batch
        if sinks is not None and fused_sinks is None:
            _sinks.apply(out, lse, sinks, cu_seqlens_q)
        return (out, lse) if give else out

    def _check_inputs(self, q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, page_table, out, lse, sinks=None) -> dict:
        return arguments.plan_inputs(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, page_table, out, lse,
                                     sinks=sinks, kv_dtype=self.kv_dtype or "", q_dtype=self.q_dtype or "",
                                     heads=(self.num_heads_q, self.num_heads_kv, self.head_dim, self.head_dim_v),
                                     dtype=self.dtype, device=self.device, capacity=self.capacity, paged=self.paged,
                                     page_size=self.page_size,
                                     max_total_q=None if self.split is None and not self.q_quant else self.max_total_q,
                                     hopper=self.hopper)
