"""kernelgen as a Hugging Face transformers attention implementation (``docs/transformers.md``).

    import kernelgen.integrations.transformers          # registers "kernelgen" and "paged|kernelgen"
    model = AutoModelForCausalLM.from_pretrained(name, dtype=torch.bfloat16,
                                                 attn_implementation="kernelgen").cuda()

Importing this module imports transformers (tested with 5.17) and calls ``register()``, which is
idempotent.  It registers:

- ``"kernelgen"`` in ``transformers.AttentionInterface`` (:func:`kernelgen_attention_forward`) and
  in ``transformers.AttentionMaskInterface`` (transformers' own FlashAttention mask function: the
  model then hands the attention a 2-D padding mask, or None when nothing is padded, instead of a
  dense 4-D mask);
- ``"paged|kernelgen"`` (:func:`kernelgen_paged_attention_forward`) for transformers' continuous
  batching (``model.generate_batch`` / ``init_continuous_batching``).

Mapping onto ``kernelgen.varlen_attention`` (what transformers' FlashAttention-2 integration does,
``transformers/modeling_flash_attention_utils.py``, without its unpad helpers):

- query ``(B, Hq, Sq, D)``, key/value ``(B, Hkv, Sk, D)`` (Sk counts the cached tokens) become
  packed ``(tokens, heads, D)`` tensors; a 2-D padding mask ``(B, Sk)`` (True = a real token),
  read once per forward: left padding (``generate``'s) keeps every row and points each request's
  keys past its padding (``cu_seqlens_k[b] = b * Sk + pad_b``, ``seqused_k`` = its real keys; with
  causal a padded query sees no key and gets zeros, without it the real keys); any other padding (right padding in a prefill) keeps
  the real rows (``cu_seqlens`` from the row sums; the queries are the last Sq mask columns) and
  scatters the output back with zeros at padded positions;
- ``is_causal`` -> ``causal`` (kernelgen aligns the diagonal bottom-right, so a query row of a step
  with cached tokens sees the whole past);
- ``sliding_window=w`` (a query sees itself and the ``w - 1`` previous tokens: transformers' mask is
  ``kv_idx > q_idx - w``) -> ``window_size=(w - 1, 0)`` (``(w - 1, w - 1)`` without causal);
- ``softcap`` -> ``softcap``; ``scaling`` -> ``softmax_scale``; GQA passes through (kernelgen maps
  query head h to KV head ``h // (Hq // Hkv)`` as transformers' ``repeat_kv`` does);
- ``s_aux`` (gpt-oss attention sinks, one logit per query head) -> ``sinks=`` (float32; one copy per tensor);
- packed sequences (``cu_seq_lens_q``/``cu_seq_lens_k``/``max_length_q``/``max_length_k`` keyword
  arguments, or position ids that restart inside one row) -> those cu_seqlens;
- an encoder-decoder's cross-attention (a decoder module, ``is_decoder``, that is not causal: Bart,
  Whisper) -> every decoder query of a request over that request's real encoder tokens (the mask is
  the encoder's padding).

Errors: a 4-D (dense, arbitrary) attention mask, dropout > 0, an input that requires grad with grad
enabled (kernelgen has no backward), a dtype other than float16/bfloat16, a head dim outside
64, 96, 128, 192, 256 raise ``ValueError`` / ``NotImplementedError`` naming the thing.
"""
from __future__ import annotations

import weakref

import torch

from ..front.api import varlen_attention
from ..kernels.spec import HEAD_DIMS  # noqa: F401  (head dims kernelgen compiles, docs/api.md; re-exported)

NAME = "kernelgen"
PAGED_NAME = "paged|kernelgen"
#: The transformers versions this module is tested with (pyproject's ``transformers`` extra; a test
#: keeps the two equal).
TESTED_VERSIONS = ">=5.17,<5.18"

_REGISTERED = False


def register() -> None:
    """Register ``"kernelgen"`` (attention and mask functions) and ``"paged|kernelgen"`` with
    transformers.  Idempotent; called when this module is imported."""
    global _REGISTERED
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, flash_attention_mask

    AttentionInterface.register(NAME, kernelgen_attention_forward)
    AttentionInterface.register(PAGED_NAME, kernelgen_paged_attention_forward)
    # FlashAttention's mask function: None when no token is padded, else the 2-D (B, kv_len) bool
    # padding mask sliced to the layer's keys (sliding-window caches keep fewer keys)
    AttentionMaskInterface.register(NAME, flash_attention_mask)
    _REGISTERED = True


def _check_tensors(query, key, value, dropout):
    for name, t in (("query", query), ("key", key), ("value", value)):
        if t.dtype not in (torch.float16, torch.bfloat16):
            raise ValueError(f"kernelgen attention: {name} dtype {t.dtype} is not supported (float16 or bfloat16 "
                             f"only): load the model with dtype=torch.bfloat16 or torch.float16")
    if query.shape[-1] not in HEAD_DIMS or value.shape[-1] not in HEAD_DIMS:
        raise ValueError(f"kernelgen attention: query head dim {query.shape[-1]} / value head dim "
                         f"{value.shape[-1]} is not supported; kernelgen compiles head dims {HEAD_DIMS}")
    if dropout:
        raise NotImplementedError(f"kernelgen attention: dropout={dropout} is not supported (inference only); "
                                  f"call model.eval()")
    if torch.is_grad_enabled() and any(t.requires_grad for t in (query, key, value)):
        raise NotImplementedError("kernelgen attention has no backward (inference only): run the model under "
                                  "torch.no_grad() or torch.inference_mode() (generate() does)")


def _window(sliding_window, causal):
    if sliding_window is None or sliding_window <= 0:
        return (-1, -1)
    w = int(sliding_window) - 1
    return (w, 0) if causal else (w, w)


#: float32 copies of non-float32 sinks: id(s_aux) -> (weak reference, copy).  The sink kernels take
#: the sinks' address as a static parameter (a prepared call is keyed by it), so a layer's sinks keep
#: one float32 buffer across steps instead of a new ``.float()`` tensor every call (which would miss
#: the prepared call each time); its values are copied from the sinks in every call.
_SINKS32: dict = {}


def _sinks32(s_aux):
    """The float32 sinks of ``s_aux``: itself, or its one float32 buffer, refreshed from it on every
    call (one small copy: a write the version counter does not see, through ``.data`` as weight
    loaders and RL weight syncs do, or ``module.to()``, would leave a cached copy stale); a new
    buffer where the shape or device changed."""
    if s_aux.dtype == torch.float32:
        return s_aux
    hit = _SINKS32.get(id(s_aux))
    buf = hit[1] if hit is not None and hit[0]() is s_aux else None
    with torch.no_grad():
        if buf is None or buf.shape != s_aux.shape or buf.device != s_aux.device:
            buf = s_aux.detach().float()
            if len(_SINKS32) >= 4096:
                _SINKS32.clear()
            _SINKS32[id(s_aux)] = (weakref.ref(s_aux), buf)
        else:
            buf.copy_(s_aux.detach())
    return buf


def _extra(s_aux):
    """``sinks=`` only for a model with sinks (gpt-oss), so other models run on a kernelgen without it."""
    return {} if s_aux is None else {"sinks": _sinks32(s_aux)}


class _Layout:
    """How a 2-D padding mask maps onto varlen_attention, computed once per mask (every layer of a
    forward gets the same mask object): ``left`` (each row's real tokens are one run ending at the
    last column) with ``cu_q``, ``cu_k`` (row b's keys start at ``b * Sk + pad_b``) and ``lens_k``
    (seqused_k); otherwise the gather indices ``idx_q``/``idx_k``, ``cu_q``/``cu_k`` of the kept
    rows and the longest lengths."""

    __slots__ = ("left", "cu_q", "cu_k", "lens_k", "idx_q", "idx_k", "max_q", "max_k")


#: id(mask) -> (weak reference to the mask, its version, sq, sk, _Layout, the layers served); a handful
_LAYOUTS: dict = {}


def _version(t):
    """The tensor's version counter (bumped by in-place writes); None for an inference-mode tensor,
    which has none (see ``_fresh``)."""
    return None if t.is_inference() else t._version


def _fresh(hit, t, key: tuple, layer) -> bool:
    """Whether a cached entry ``hit`` (weak reference, version, *key, value, layers served) still
    describes tensor ``t``: the same object, version and ``key``.  An inference-mode tensor has no
    version: its entry holds for one forward, i.e. until a layer (``layer``: the module's
    ``layer_idx``) it already served asks again (a buffer rewritten in place between forwards is
    read again: a review found a stale layout); a module without ``layer_idx`` reads it every call."""
    if hit is None or hit[0]() is not t or hit[1:1 + len(key)] != key:
        return False
    if key[0] is not None:
        return True
    served = hit[-1]
    if layer is None or layer in served:
        return False
    served.add(layer)
    return True


def _padding_layout(attention_mask, sq, sk, layer=None):
    key = id(attention_mask)
    hit = _LAYOUTS.get(key)
    if _fresh(hit, attention_mask, (_version(attention_mask), sq, sk), layer):
        return hit[4]
    mask = attention_mask[:, -sk:].to(dtype=torch.bool)
    batch, dev = mask.shape[0], mask.device
    lay = _Layout()
    lens_k = mask.sum(dim=1, dtype=torch.int32)
    first = mask.to(torch.int8).argmax(dim=1).to(torch.int32)     # first real column (0 for an empty row)
    # one host sync a forward: left padding or not (FlashAttention's unpadding syncs in every layer)
    lay.left = bool(((first + lens_k == sk) | (lens_k == 0)).all())
    if lay.left:
        lay.cu_q = torch.arange(0, (batch + 1) * sq, sq, dtype=torch.int32, device=dev)
        cu_k = torch.arange(0, (batch + 1) * sk, sk, dtype=torch.int32, device=dev)
        cu_k[:-1] += sk - lens_k
        lay.cu_k, lay.lens_k = cu_k, lens_k
    else:
        qmask = mask[:, -sq:]
        lens_q = qmask.sum(dim=1, dtype=torch.int32)
        lay.cu_q = torch.nn.functional.pad(lens_q.cumsum(0, dtype=torch.int32), (1, 0))
        lay.cu_k = torch.nn.functional.pad(lens_k.cumsum(0, dtype=torch.int32), (1, 0))
        lay.idx_q = qmask.reshape(-1).nonzero().view(-1)
        lay.idx_k = mask.reshape(-1).nonzero().view(-1)
        lay.max_q, lay.max_k = int(lens_q.max()), int(lens_k.max())
    if len(_LAYOUTS) >= 8:
        _LAYOUTS.clear()
    _LAYOUTS[key] = (weakref.ref(attention_mask), _version(attention_mask), sq, sk, lay, {layer})
    return lay


#: id(position_ids) -> (weak reference, its version, the result of _packed_from_position_ids)
_PACKED: dict = {}


def _packed_from_position_ids(position_ids, batch, layer=None):
    """cu_seqlens of sequences packed into one row (position ids restarting at 0), or None when the
    ids are one increasing run (transformers' ``_is_packed_sequence``).  Read once per forward:
    every layer gets the same position_ids object, and the check syncs with the host (two reads),
    so the result (None included) is kept for that object and its version, as for masks."""
    if position_ids is None or batch != 1:
        return None
    hit = _PACKED.get(id(position_ids))
    if _fresh(hit, position_ids, (_version(position_ids),), layer):
        return hit[2]
    result = _read_packed(position_ids)
    if len(_PACKED) >= 8:
        _PACKED.clear()
    _PACKED[id(position_ids)] = (weakref.ref(position_ids), _version(position_ids), result, {layer})
    return result


def _read_packed(position_ids):
    pos = position_ids.reshape(-1)
    increasing = torch.arange(pos.numel(), device=pos.device) + pos.min()
    if not bool((increasing - pos).abs().sum()):
        return None
    starts = (pos == pos.min()).nonzero().view(-1).to(torch.int32)
    cu = torch.cat([starts, torch.tensor([pos.numel()], dtype=torch.int32, device=pos.device)])
    return cu, int(cu.diff().max())


#: (batch, sq, sk, device) -> (cu_q, cu_k) of an unpadded batch; a handful of entries
_UNIFORM: dict = {}


def _uniform_cu(batch, sq, sk, device):
    """``cu_seqlens`` of ``batch`` rows of ``sq`` queries and ``sk`` keys: int32 (batch + 1,)
    tensors ``arange(batch + 1) * sq`` / ``* sk`` on ``device``, made once per shape (every layer
    of a forward has the same one; a decode step of an unpadded batch would otherwise make two
    small tensors, two launches, in every layer).  The kernels only read them."""
    key = (batch, sq, sk, device)
    hit = _UNIFORM.get(key)
    if hit is None:
        hit = (torch.arange(0, (batch + 1) * sq, sq, dtype=torch.int32, device=device),
               torch.arange(0, (batch + 1) * sk, sk, dtype=torch.int32, device=device))
        if len(_UNIFORM) >= 8:
            _UNIFORM.clear()
        _UNIFORM[key] = hit
    return hit


def _cross_attention(module, causal: bool) -> bool:
    """An encoder-decoder's cross-attention (Bart, Whisper, ...: a decoder's attention module that is
    not causal): its keys are the encoder's tokens, its mask the encoder's padding, and its queries the
    decoder's, none of which is in that mask."""
    return not causal and bool(getattr(module, "is_decoder", False))


def _cross_attention_forward(q, k, v, attention_mask, common):
    """Cross-attention: every query row of a request sees that request's real encoder tokens (the 2-D
    mask's True columns; all of them without a mask), no causal mask (what sdpa does with the
    encoder's padding mask; the self-attention paths would take the queries from the mask's last
    columns: a review's find)."""
    batch, sq, hq, d = q.shape
    sk = k.shape[1]
    kp, vp = k.reshape(-1, *k.shape[2:]), v.reshape(-1, *v.shape[2:])
    cu_q, cu_k = _uniform_cu(batch, sq, sk, q.device)
    if attention_mask is None:
        out = varlen_attention(q.reshape(-1, hq, d), kp, vp, cu_q, cu_k, sq, sk, **common)
        return out.view(batch, sq, hq, -1), None
    if tuple(attention_mask.shape) != (batch, sk):
        raise ValueError(f"kernelgen attention: a cross-attention mask must be (batch, encoder tokens) = "
                         f"{(batch, sk)}, got {tuple(attention_mask.shape)}")
    mask = attention_mask.to(dtype=torch.bool)
    lens_k = mask.sum(dim=1, dtype=torch.int32)
    cu_k = torch.nn.functional.pad(lens_k.cumsum(0, dtype=torch.int32), (1, 0))
    idx_k = mask.reshape(-1).nonzero().view(-1)
    out = varlen_attention(q.reshape(-1, hq, d), kp.index_select(0, idx_k), vp.index_select(0, idx_k), cu_q, cu_k,
                           sq, sk, **common)
    return out.view(batch, sq, hq, -1), None


def kernelgen_attention_forward(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    sliding_window: int | None = None,
    softcap: float | None = None,
    is_causal: bool | None = None,
    s_aux: torch.Tensor | None = None,
    **kwargs,
):
    """transformers attention function: query (B, Hq, Sq, D), key/value (B, Hkv, Sk, D[v]),
    float16/bfloat16 on a CUDA device (Sq, Sk in tokens; Sk counts the cached tokens) ->
    (attn_output (B, Sq, Hq, Dv) in query's dtype, None).  See the module docstring for the mapping.

    Raises:
        ValueError: a 4-D attention mask, a mask whose shape does not fit query/key, a dtype other
            than float16/bfloat16, a head dim outside HEAD_DIMS; and what ``varlen_attention``
            raises (e.g. for CPU tensors).
        NotImplementedError: dropout > 0, or grad enabled with an input that requires grad.
    """
    _check_tensors(query, key, value, dropout)
    if attention_mask is not None and attention_mask.dim() != 2:
        raise ValueError(f"kernelgen attention: a {attention_mask.dim()}-D attention_mask is not supported: kernelgen "
                         f"takes padding (a 2-D (batch, keys) mask) plus causal/sliding-window masks, not an arbitrary "
                         f"dense mask. Pass a 2-D attention_mask, or use attn_implementation='sdpa' for custom masks")
    causal = bool(is_causal if is_causal is not None else getattr(module, "is_causal", True))
    batch, hq, sq, d = query.shape
    sk = key.shape[2]
    common = dict(causal=causal, window_size=_window(sliding_window, causal),
                  softcap=float(softcap) if softcap else 0.0, softmax_scale=scaling, **_extra(s_aux))
    q = query.transpose(1, 2)           # (B, Sq, Hq, D) views
    k = key.transpose(1, 2)
    v = value.transpose(1, 2)

    if _cross_attention(module, causal):
        return _cross_attention_forward(q, k, v, attention_mask, common)

    if attention_mask is not None:
        if attention_mask.shape[0] != batch or attention_mask.shape[1] < sq:
            raise ValueError(f"kernelgen attention: attention_mask shape {tuple(attention_mask.shape)} does not fit "
                             f"query {tuple(query.shape)} and key {tuple(key.shape)}")
        if sk > attention_mask.shape[1]:   # a static cache longer than the tokens seen: its tail is unused
            k, v, sk = k[:, :attention_mask.shape[1]], v[:, :attention_mask.shape[1]], attention_mask.shape[1]
        lay = _padding_layout(attention_mask, sq, sk, getattr(module, "layer_idx", None))
        kp, vp = k.reshape(-1, *k.shape[2:]), v.reshape(-1, *v.shape[2:])
        if lay.left:
            # left padding (what generate does): every row's real keys end at the last column, so
            # request b's keys are rows cu_k[b] = b*Sk + pad_b onward of the packed keys, seqused_k
            # of them; its Sq query rows all take part, and a padded query (before the first real
            # key) sees no key under the bottom-right causal diagonal and gets zeros (without causal
            # it sees the real keys, as sdpa's padding mask lets it): no gather, no scatter
            out = varlen_attention(q.reshape(-1, hq, d), kp, vp, lay.cu_q, lay.cu_k, sq, sk, seqused_k=lay.lens_k,
                                   **common)
            return out.view(batch, sq, hq, -1), None
        out = varlen_attention(q.reshape(-1, hq, d).index_select(0, lay.idx_q), kp.index_select(0, lay.idx_k),
                               vp.index_select(0, lay.idx_k), lay.cu_q, lay.cu_k, lay.max_q, lay.max_k, **common)
        full = out.new_zeros(batch * sq, hq, out.shape[-1])
        full.index_copy_(0, lay.idx_q, out)
        return full.view(batch, sq, hq, -1), None

    packed = None
    if all(kwargs.get(n) is not None for n in ("cu_seq_lens_q", "cu_seq_lens_k", "max_length_q", "max_length_k")):
        packed = (kwargs["cu_seq_lens_q"].to(torch.int32), kwargs["cu_seq_lens_k"].to(torch.int32),
                  int(kwargs["max_length_q"]), int(kwargs["max_length_k"]))
    elif sq == sk > 1 and (p := _packed_from_position_ids(kwargs.get("position_ids"), batch,
                                                         getattr(module, "layer_idx", None))) is not None:
        # (a step with cached keys, a decode step included, is never packed: no check, no host sync)
        packed = (p[0], p[0], p[1], p[1])
    if packed is not None:
        cu_q, cu_k, max_q, max_k = packed
        out = varlen_attention(q.reshape(-1, hq, d), k.reshape(-1, *k.shape[2:]), v.reshape(-1, *v.shape[2:]),
                               cu_q, cu_k, max_q, max_k, **common)
        return out.view(batch, sq, hq, -1), None

    # no padding: every row has Sq queries and Sk keys (a copy into packed rows; q often is one already)
    cu_q, cu_k = _uniform_cu(batch, sq, sk, query.device)
    out = varlen_attention(q.reshape(-1, hq, d), k.reshape(-1, *k.shape[2:]), v.reshape(-1, *v.shape[2:]),
                           cu_q, cu_k, sq, sk, **common)
    return out.view(batch, sq, hq, -1), None


def kernelgen_paged_attention_forward(
    module: torch.nn.Module,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    attention_mask: torch.Tensor | None,
    cache=None,
    cu_seq_lens_q: torch.Tensor | None = None,
    cu_seq_lens_k=None,
    max_seqlen_q=None,
    max_seqlen_k=None,
    block_table: torch.Tensor | None = None,
    **kwargs,
):
    """``paged|kernelgen``: transformers' continuous batching (what ``paged|flash_attention_2`` does
    on its varlen path).  q (1, Hq, total_q, D), k/v (1, Hkv, new_tokens, D): the new tokens are
    written into the ``PagedAttentionCache`` and the request's keys read back packed
    (``cache.update`` with the batch's read/write indices), then one ``varlen_attention`` call with
    ``cu_seq_lens_q``/``cu_seq_lens_k`` of this layer's type, bottom-right causal, the layer's
    sliding window and sinks.  The 4-D mask continuous batching builds for non-flash
    implementations is not used.  The decode fast path (``block_table``, a
    ``flash_attn_with_kvcache`` call) is never offered to this name by transformers; given one, it
    raises NotImplementedError.

    Raises:
        ValueError: no paged cache, a dtype other than float16/bfloat16 or a head dim outside
            HEAD_DIMS; and what ``varlen_attention`` raises.
        NotImplementedError: a block table (the decode fast path), dropout > 0, or grad enabled
            with an input that requires grad.
    """
    if cache is None:
        raise ValueError("paged|kernelgen was called without a paged attention cache: it serves transformers' "
                         "continuous batching; use attn_implementation='kernelgen' for a standard forward")
    if block_table is not None:
        raise NotImplementedError("paged|kernelgen: the block-table decode fast path is not implemented; run "
                                  "continuous batching with max_blocks_per_request=0")
    _check_tensors(q, k, v, kwargs.get("dropout", 0.0))
    # the model passes its scaling, sliding_window, softcap and s_aux as keywords (some models, e.g.
    # Mistral, have no sliding_window attribute on the module)
    sliding = kwargs.get("sliding_window", getattr(module, "sliding_window", None))
    window = _window(sliding, True)
    if isinstance(cu_seq_lens_k, dict):
        layer_type = "sliding_attention" if window != (-1, -1) and "sliding_attention" in cu_seq_lens_k \
            else "full_attention"
        if layer_type not in cu_seq_lens_k and len(cu_seq_lens_k) == 1:
            layer_type = next(iter(cu_seq_lens_k))
        cu_seq_lens_k, max_seqlen_k = cu_seq_lens_k[layer_type], max_seqlen_k[layer_type]
    k, v = cache.update(key_states=k, value_states=v, layer_idx=module.layer_idx,
                        read_index=kwargs["read_index"], write_index=kwargs["write_index"])
    scaling = kwargs.get("scaling", getattr(module, "scaling", None))
    softcap = kwargs.get("softcap", getattr(module, "attn_logit_softcapping", None))
    qp = q.transpose(1, 2).squeeze(0).contiguous()
    out = varlen_attention(qp, k.contiguous(), v.contiguous(), cu_seq_lens_q.to(torch.int32),
                           cu_seq_lens_k.to(torch.int32), int(max_seqlen_q), int(max_seqlen_k), causal=True,
                           window_size=window, softcap=float(softcap) if softcap else 0.0, softmax_scale=scaling,
                           **_extra(kwargs.get("s_aux")))
    return out, None


register()
