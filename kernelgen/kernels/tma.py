"""TMA tensor maps for the Hopper attention kernel, built with the CUDA driver's own encoder.

A tensor map (``CUtensorMap``, 128 opaque bytes) describes a global tensor to the TMA unit: base
address, sizes, strides, the box one copy moves and the shared-memory swizzle.  We never write its
bytes ourselves: ``cuTensorMapEncodeTiled`` of the driver (``libcuda.so.1``, the library PyTorch
and CuPy already loaded; called through ctypes, so neither cuda-python nor a toolkit is needed)
encodes it.  The kernel takes the three maps by value as ``__grid_constant__`` parameters
(``params.TMA_ATTENTION_PARAMS``).

A paged K/V cache (num_pages, page_size, heads, head_dim) gets a 4-D map instead
(``paged_map_args``: head_dim, heads, page slot, page; boxes inside one page).

Each map is a 3-D view ``(head_dim, heads, tokens)`` of a (tokens, heads, head_dim) tensor whose
last dim is contiguous, in 16-bit elements (the dtype's bits are copied as is), with boxes of ``64 x
1 x rows``: one 128-byte row segment per token, ``rows`` tokens, stored with the 128-byte swizzle
the wgmma descriptors expect (templates/common/wgmma.cuh).  Tokens past the tensor's end read as
zeros, and so do columns past head_dim: a head dim of 96 is loaded as two 64-column boxes whose
second one holds columns 96..127 as zeros (the kernel's rows are padded to 128).  Requirements
(checked by ``map_args``): a 16-byte aligned base, head and token strides that are multiples of 16
bytes and below 2^40, at least one token.
"""
from __future__ import annotations

import ctypes
import threading

#: CUtensorMapDataType, CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill,
#: CUtensorMapInterleave values (cuda.h).
DTYPE_UINT8 = 0
DTYPE_UINT16 = 1
SWIZZLE_64B = 2
SWIZZLE_128B = 3
L2_PROMOTION_256B = 3
OOB_FILL_ZEROS = 0
INTERLEAVE_NONE = 0
MAP_BYTES = 128
#: Elements of one box row: 128 bytes of 16-bit values (the 128-byte swizzle's row).
BOX_INNER = 64
#: head_dim must be a multiple of this (96 is the one head dim that is not a multiple of 64).
HEAD_DIM_MULTIPLE = 32
#: The element kinds of a map: 16-bit (128-byte boxes, 128-byte swizzle: what wgmma reads) and FP8
#: K/V (1 byte: 64-byte boxes of the same 64 columns, 64-byte swizzle: the landing stages the Hopper
#: kernel's producer warps convert, templates/attention/mainloop_sm90.cuh).
KIND_16 = "16bit"
KIND_FP8 = "fp8"
_KINDS = {KIND_16: (2, DTYPE_UINT16, SWIZZLE_128B), KIND_FP8: (1, DTYPE_UINT8, SWIZZLE_64B)}


class TensorMapError(RuntimeError):
    """The driver refused to encode a tensor map (``code`` is the CUresult)."""

    def __init__(self, what: str, code: int, args: tuple):
        self.code = code
        super().__init__(f"cuTensorMapEncodeTiled failed for {what} with CUresult {code}; arguments {args}")


def map_args(ptr: int, shape: tuple, strides: tuple, box_rows: int, elem_bytes: int = 2, box_heads: int = 1) -> tuple:
    """The encoder's arguments for a (tokens, heads, head_dim) tensor of 16-bit elements (or of
    ``elem_bytes`` 1: an FP8 K/V cache).

    Args:
        ptr: device address of element [0, 0, 0].
        shape: (tokens, heads, head_dim); head_dim a multiple of 32 (boxes of 64 columns; a
            box past head_dim reads zeros).
        strides: the tensor's strides in elements, (token, head, 1).
        box_rows: tokens per box (1 .. 256).
        elem_bytes: bytes an element (2; 1 for an FP8 cache).
        box_heads: heads per box (1 .. heads): pack-GQA's Q box of the qpk query heads of one KV
            head, which TMA writes token by token, so shared-memory row r is (token r // box_heads,
            head r % box_heads): the packed rows' order.

    Returns:
        (global_dim, global_strides_bytes, box_dim): innermost first, as
        ``cuTensorMapEncodeTiled`` takes them (``global_strides`` lists dims 1 and 2).

    Raises:
        ValueError: a requirement of the TMA unit does not hold (names which).
    """
    tokens, heads, d = (int(x) for x in shape)
    s_tok, s_head, s_d = (int(x) for x in strides)
    if s_d != 1 and d > 1:
        raise ValueError(f"the last dim must be contiguous, got stride {s_d}")
    if d % HEAD_DIM_MULTIPLE or d < BOX_INNER:
        raise ValueError(f"head_dim {d} must be a multiple of {HEAD_DIM_MULTIPLE}, at least {BOX_INNER}")
    if tokens < 1 or heads < 1:
        raise ValueError(f"a tensor map needs at least one token and head, got shape {tuple(shape)}")
    if ptr % 16:
        raise ValueError(f"the base address {ptr:#x} must be 16-byte aligned")
    strides_b = (elem_bytes * s_head, elem_bytes * s_tok)
    for name, s in zip(("head", "token"), strides_b):
        if s % 16 or not 0 < s < 1 << 40:
            raise ValueError(f"the {name} stride ({s} bytes) must be a positive multiple of 16 below 2^40")
    if not 1 <= box_rows <= 256:
        raise ValueError(f"box_rows must be in [1, 256], got {box_rows}")
    if not 1 <= box_heads <= min(heads, 256):
        raise ValueError(f"box_heads must be in [1, heads = {heads}], got {box_heads}")
    return (d, heads, tokens), strides_b, (BOX_INNER, box_heads, box_rows)


def paged_map_args(ptr: int, shape: tuple, strides: tuple, box_rows: int, elem_bytes: int = 2) -> tuple:
    """The encoder's arguments for a paged K/V cache (num_pages, page_size, heads, head_dim) of
    16-bit elements: a 4-D map (head_dim, heads, page slot, page) with boxes of
    ``64 x 1 x box_rows x 1`` (``box_rows`` keys inside one page, 128-byte swizzle).

    Args:
        ptr: device address of element [0, 0, 0, 0].
        shape: (num_pages, page_size, heads, head_dim); head_dim as for map_args (the dispatcher
            runs paged K/V on every head dim of spec.SM90_PAGED_HEAD_DIMS).
        strides: the cache's strides in elements, (page, slot, head, 1).
        box_rows: keys per box (1 .. 256, at most page_size).

    Returns:
        (global_dim, global_strides_bytes, box_dim), innermost first (strides of dims 1-3).

    Raises:
        ValueError: a requirement of the TMA unit does not hold (names which).
    """
    pages, page_size, heads, d = (int(x) for x in shape)
    s_page, s_tok, s_head, s_d = (int(x) for x in strides)
    if pages < 1 or page_size < 1:
        raise ValueError(f"a paged tensor map needs at least one page and token, got shape {tuple(shape)}")
    (dd, hh, tt), (sh, st), box = map_args(ptr, (page_size, heads, d), (s_tok, s_head, s_d), box_rows, elem_bytes)
    if box_rows > page_size:
        raise ValueError(f"box_rows ({box_rows}) must not exceed page_size ({page_size})")
    sp = elem_bytes * s_page
    if sp % 16 or not 0 < sp < 1 << 40:
        raise ValueError(f"the page stride ({sp} bytes) must be a positive multiple of 16 below 2^40")
    return (dd, hh, tt, pages), (sh, st, sp), box + (1,)


def tma_compatible(t) -> bool:
    """Whether a torch tensor (tokens, heads, head_dim), or a paged cache (num_pages, page_size,
    heads, head_dim), satisfies ``map_args``' (``paged_map_args``') requirements (pointer
    alignment aside, which is checked per call); FP8 tensors by their 1-byte elements."""
    try:
        if t.dim() == 4:  # a paged cache (num_pages, page_size, heads, head_dim)
            paged_map_args(16, tuple(t.shape), tuple(t.stride()), 1, t.element_size())
        else:
            map_args(16, tuple(t.shape), tuple(t.stride()), 1, t.element_size())
    except ValueError:
        return False
    return True


_lib = None
_lib_lock = threading.Lock()


def _driver():
    """libcuda's cuTensorMapEncodeTiled with its argument types."""
    global _lib
    if _lib is None:
        with _lib_lock:
            if _lib is None:
                lib = ctypes.CDLL("libcuda.so.1")
                fn = lib.cuTensorMapEncodeTiled
                u32, u64p, u32p = ctypes.c_uint32, ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_uint32)
                fn.argtypes = [ctypes.c_void_p, ctypes.c_int, u32, ctypes.c_void_p, u64p, u64p, u32p, u32p,
                               ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int]
                fn.restype = ctypes.c_int
                _lib = fn
    return _lib


def encode(ptr: int, dims: tuple, strides_b: tuple, box: tuple, what: str = "tensor", kind: str = KIND_16) -> bytes:
    """One tensor map (128 bytes) from ``map_args``' output and the base address ``ptr``; ``kind``
    ``KIND_16`` or ``KIND_FP8`` (element type and swizzle).

    Raises TensorMapError when the driver refuses (its CUresult is in the message).
    """
    return _resolve()(ptr, dims, strides_b, box, what, kind)


def _encode_ctypes(ptr, dims, strides_b, box, what, kind=KIND_16):
    fn = _driver()
    raw = ctypes.create_string_buffer(MAP_BYTES + 64)
    addr = (ctypes.addressof(raw) + 63) & ~63  # CUtensorMap is 64-byte aligned
    rank = len(dims)
    gdim = (ctypes.c_uint64 * rank)(*dims)
    gstr = (ctypes.c_uint64 * (rank - 1))(*strides_b)
    bdim = (ctypes.c_uint32 * rank)(*box)
    estr = (ctypes.c_uint32 * rank)(*([1] * rank))
    _, dtype, swizzle = _KINDS[kind]
    rc = fn(ctypes.c_void_p(addr), dtype, rank, ctypes.c_void_p(ptr), gdim, gstr, bdim, estr, INTERLEAVE_NONE,
            swizzle, L2_PROMOTION_256B, OOB_FILL_ZEROS)
    if rc != 0:
        raise TensorMapError(what, rc, (hex(ptr), dims, strides_b, box))
    return ctypes.string_at(addr, MAP_BYTES)


#: The encoder ``encode`` calls (None: the driver's, through ctypes).  CPU tests replace it.
_encoder = None
_encoder_default = _encode_ctypes


def _resolve():
    return _encoder or _encoder_default


class AttentionMaps:
    """The three maps of one call signature: shapes, strides and boxes are fixed, the base
    addresses come per call.  ``encode(qp, kp, vp)`` returns the 384 bytes the kernel parameter
    starts with; the last result is kept per thread and reused while the pointers repeat.

    Args: q, k, v (tokens, heads, head_dim) tensors of the signature (only shapes and strides
    are read), or k, v paged caches (num_pages, page_size, heads, head_dim): 4-D maps
    (``paged_map_args``); block_m, block_n: the kernel's Q and K/V box rows (``kv_rows``: the
    K/V box rows when they differ from block_n: min(page_size, block_n) for a paged cache).
    ``kv_maps=False``: k and v get no map (128 zero bytes each; the kernel gathers their rows
    itself, option "g").  ``q_heads``: query heads a Q box (pack-GQA's qpk; boxes of block_m / q_heads
    tokens).  FP8 k and v (1-byte elements) get ``KIND_FP8`` maps.  Raises ValueError
    (map_args, paged_map_args).
    """

    def __init__(self, q, k, v, block_m: int, block_n: int, kv_maps: bool = True, kv_rows: int | None = None,
                 q_heads: int = 1):
        def args(t, rows, heads=1):
            eb = t.element_size()
            if t.dim() == 4:
                a = paged_map_args(16, tuple(t.shape), tuple(t.stride()), rows, eb)
            else:
                a = map_args(16, tuple(t.shape), tuple(t.stride()), rows, eb, box_heads=heads)
            return a + ((KIND_FP8,) if eb == 1 else ())
        rows = block_n if kv_rows is None else kv_rows
        if block_m % q_heads:
            raise ValueError(f"a packed Q box holds whole tokens: block_m ({block_m}) must be a multiple of the "
                             f"query heads a KV head ({q_heads})")
        self.args = ((args(q, block_m // q_heads, q_heads),)
                     + ((args(k, rows), args(v, rows)) if kv_maps else (None, None)))
        self._tls = threading.local()

    def encode(self, qp: int, kp: int, vp: int) -> bytes:
        last = getattr(self._tls, "last", None)
        if last is not None and last[0] == (qp, kp, vp):
            return last[1]
        fn = _resolve()
        maps = b"".join(bytes(MAP_BYTES) if a is None else fn(ptr, *a[:3], what, *a[3:])
                        for ptr, a, what in zip((qp, kp, vp), self.args, "qkv"))
        self._tls.last = ((qp, kp, vp), maps)
        return maps


def attention_maps(spec, q, k, v, paged: bool) -> AttentionMaps:
    """The ``AttentionMaps`` of a Hopper attention variant (``spec``, an sm90a ``AttentionSpec``) for
    a call signature's q (tokens, heads, head_dim) and k, v: q by ``block_m``-row boxes, K/V by key
    blocks, or on a paged cache (num_pages, page_size, heads, dim) by boxes of
    min(block_n, page_size) keys inside one page (``tma_load_paged``), none for the gather option
    "g" (the producer warps copy K/V rows themselves).  With pack-GQA (``spec.pack_gqa``) the Q box
    is the qpk query heads of a KV head by block_m / qpk tokens (``map_args``' box_heads).  Raises
    ValueError (``map_args``; block_m not a multiple of qpk when packed)."""
    t = spec.tile
    kv_rows = min(t.block_n, k.shape[1]) if paged else t.block_n
    qpk = q.shape[1] // k.shape[-2] if spec.pack_gqa else 1
    return AttentionMaps(q, k, v, t.block_m, t.block_n, kv_maps="g" not in spec.sm90_opts, kv_rows=kv_rows,
                         q_heads=qpk)
