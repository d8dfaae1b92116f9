"""Kernel parameter structs, defined once for both sides of the launch.

Every kernel takes a single struct by value.  The field list below renders the C declaration in
the template (``{{ params_decl }}``) and builds the ``struct.Struct`` the launcher packs, so the two
can never disagree.  Fields are laid out 8-byte fields first, then 4-byte fields, and the struct is
padded to a multiple of 8 bytes, which is exactly the C layout of the same declaration.
"""
from __future__ import annotations

import struct

_CTYPES = {"ptr": ("const void*", "Q", 8), "i64": ("long long", "q", 8), "i32": ("int", "i", 4), "f32": ("float", "f", 4)}


class ParamStruct:
    """A C struct of kernel arguments: ``fields`` is a list of (name, type) with type in ptr/i64/i32/f32."""

    def __init__(self, cname: str, fields: list[tuple[str, str]]):
        for name, ty in fields:
            if ty not in _CTYPES:
                raise ValueError(f"field {name}: unknown type {ty!r}")
        # 8-byte fields first keeps the C layout free of interior padding.
        self.cname = cname
        self.fields = sorted(fields, key=lambda f: -_CTYPES[f[1]][2])
        self.names = tuple(n for n, _ in self.fields)
        fmt = "<" + "".join(_CTYPES[t][1] for _, t in self.fields)
        size = struct.calcsize(fmt)
        pad = (-size) % 8
        self.struct = struct.Struct(fmt + "x" * pad)
        self.size = self.struct.size
        self._ptrs = frozenset(n for n, t in self.fields if t == "ptr")
        #: The pointer fields, in layout order; they lead the struct (see ``pointer_struct``).
        self.pointer_names = tuple(n for n, t in self.fields if t == "ptr")
        if self.names[:len(self.pointer_names)] != self.pointer_names:
            raise ValueError(f"{cname}: pointer fields must come first (declare them before the 8-byte integers)")
        #: ``struct.Struct`` of the leading pointer fields: ``pack_into(buf, 0, *pointers)`` rewrites
        #: them in a buffer that holds ``pack_static``'s bytes.
        self.pointer_struct = struct.Struct("<" + "Q" * len(self.pointer_names))

    def offset(self, name: str) -> int:
        """The byte offset of field ``name`` in the struct (KeyError naming it if absent)."""
        if name not in self.names:
            raise KeyError(f"{self.cname}: no field {name!r}")
        fmt = "<" + "".join(_CTYPES[t][1] for n, t in self.fields[:self.names.index(name)])
        return struct.calcsize(fmt)

    def c_decl(self) -> str:
        lines = [f"struct {self.cname} {{"]
        lines += [f"  {_CTYPES[t][0]} {n};" for n, t in self.fields]
        lines.append("};")
        lines.append(f'static_assert(sizeof({self.cname}) == {self.size}, "{self.cname} ABI size");')
        return "\n".join(lines)

    def pack(self, values: dict) -> bytes:
        """Pack a dict of field values (missing or None pointers become 0)."""
        try:
            return self.struct.pack(*[(values[n] or 0) if n in self._ptrs else values[n] for n in self.names])
        except KeyError as e:
            raise KeyError(f"{self.cname}: missing field {e.args[0]!r}") from None

    def pack_static(self, values: dict) -> bytes:
        """Pack the non-pointer fields of ``values`` with every pointer 0 (pointer entries of
        ``values``, if any, are ignored): the template a launch's pointers are packed into."""
        return self.pack({**values, **dict.fromkeys(self.pointer_names, 0)})


ATTENTION_PARAMS = ParamStruct(
    "AttnParams",
    [
        ("q", "ptr"), ("k", "ptr"), ("v", "ptr"), ("out", "ptr"), ("lse", "ptr"),
        ("cu_seqlens_q", "ptr"), ("cu_seqlens_k", "ptr"), ("seqused_k", "ptr"), ("page_table", "ptr"),
        ("metadata", "ptr"), ("out_accum", "ptr"), ("lse_accum", "ptr"), ("row_splits", "ptr"),
        ("q_row_stride", "i64"), ("q_head_stride", "i64"),
        ("k_row_stride", "i64"), ("k_head_stride", "i64"), ("k_page_stride", "i64"),
        ("v_row_stride", "i64"), ("v_head_stride", "i64"), ("v_page_stride", "i64"),
        ("o_row_stride", "i64"), ("o_head_stride", "i64"),
        ("lse_head_stride", "i64"), ("page_table_stride", "i64"),
        ("accum_split_stride", "i64"), ("accum_head_stride", "i64"), ("lse_accum_split_stride", "i64"),
        ("lse_accum_head_stride", "i64"),
        ("num_heads_q", "i32"), ("num_heads_kv", "i32"), ("capacity", "i32"), ("total_q", "i32"),
        ("page_size", "i32"), ("window_left", "i32"), ("window_right", "i32"), ("split_request_rows", "i32"),
        ("scale_log2", "f32"), ("softcap_scale", "f32"), ("softcap_log2", "f32"),
    ],
)

#: The ALiBi variants' AttnParams (``AttentionSpec.alibi``): the same fields, then the slopes'
#: address and batch stride.  The address is a static field (an i64, not one of the pointers a
#: launch rewrites per call): a prepared call is keyed by the slopes tensor's address
#: (``selection.signature``), an AttentionPlan owns its slopes buffer; the kernel reads the values
#: from it at every launch (graph replays see new values).  ``alibi_batch_stride`` is 0 for
#: ``(num_heads_q,)`` slopes and num_heads_q for ``(batch, num_heads_q)``.  Kernels without ALiBi
#: keep ``ATTENTION_PARAMS`` (their source and parameters are unchanged).
ATTENTION_PARAMS_ALIBI = ParamStruct(
    "AttnParams", ATTENTION_PARAMS.fields + [("alibi_slopes", "i64"), ("alibi_batch_stride", "i32")])

#: Attention sinks fused in the kernels (``AttentionSpec.sinks``): the sinks' address (an i64
#: static field, as ALiBi's slopes: a prepared call is keyed by the tensor's address and the kernel
#: reads the values at every launch) after the plain (or ALiBi) fields.
ATTENTION_PARAMS_SINKS = ParamStruct("AttnParams", ATTENTION_PARAMS.fields + [("sinks", "i64")])
ATTENTION_PARAMS_ALIBI_SINKS = ParamStruct("AttnParams", ATTENTION_PARAMS_ALIBI.fields + [("sinks", "i64")])

COMBINE_PARAMS = ParamStruct(
    "CombineParams",
    [
        ("out_accum", "ptr"), ("lse_accum", "ptr"), ("row_splits", "ptr"), ("cu_seqlens_q", "ptr"),
        ("metadata", "ptr"), ("out", "ptr"), ("lse", "ptr"),
        ("o_row_stride", "i64"), ("o_head_stride", "i64"), ("lse_head_stride", "i64"),
        ("accum_split_stride", "i64"), ("accum_head_stride", "i64"), ("lse_accum_split_stride", "i64"),
        ("lse_accum_head_stride", "i64"),
        ("num_heads_q", "i32"), ("total_q", "i32"),
    ],
)

#: The combine kernel of sink variants (``CombineSpec.sinks``): the sinks' address (i64, as above).
COMBINE_PARAMS_SINKS = ParamStruct("CombineParams", COMBINE_PARAMS.fields + [("sinks", "i64")])


def combine_params_for(spec):
    """The combine kernel's parameter struct: plain, or with the sinks' address."""
    return COMBINE_PARAMS_SINKS if getattr(spec, "sinks", False) else COMBINE_PARAMS


#: The q quantisation kernel (``spec.QuantSpec``, ``launch.quant_q``): q (16-bit, rows
#: ``q_row_stride`` elements apart), cu_seqlens_q, the u32 (batch, num_heads_kv) amax words (zeroed
#: before phase 0), q8 (contiguous e4m3) and the float32 (batch, num_heads_kv) descales;
#: ``group_elems`` = (num_heads_q / num_heads_kv) * head_dim; ``phase`` 0 (amax) or 1 (cast).
QUANT_PARAMS = ParamStruct(
    "QuantParams",
    [
        ("q", "ptr"), ("cu_seqlens_q", "ptr"), ("amax", "ptr"), ("q8", "ptr"), ("descale", "ptr"),
        ("q_row_stride", "i64"),
        ("total_q", "i32"), ("num_heads_kv", "i32"), ("group_elems", "i32"), ("batch", "i32"), ("phase", "i32"),
    ],
)

SCHEDULER_PARAMS = ParamStruct(
    "SchedParams",
    [
        ("cu_seqlens_q", "ptr"), ("cu_seqlens_k", "ptr"), ("seqused_k", "ptr"), ("metadata", "ptr"),
        ("batch", "i32"), ("capacity", "i32"), ("num_heads", "i32"),
        ("block_m", "i32"), ("block_n", "i32"), ("pack_factor", "i32"),
        ("max_splits", "i32"), ("forced_splits", "i32"), ("num_ctas", "i32"),
        ("max_kvblocks_l2", "i32"), ("swizzle_mult", "i32"), ("sort", "i32"),
        ("class_min_q", "i32"), ("class_max_q", "i32"), ("window_left", "i32"), ("wave_ctas", "i32"),
        ("min_share", "i32"),
    ],
)


class TmaParamStruct:
    """The Hopper attention kernel's parameter: three TMA tensor maps (``CUtensorMap``, 128 bytes,
    64-byte aligned: q, k, v) followed by an ``AttnParams``, padded to a multiple of 64 bytes.

    It offers what the launchers use of a ``ParamStruct`` (``size``, ``pointer_names``,
    ``pointer_struct``, ``pack``, ``pack_static``, ``c_decl``); the tensor maps are written into
    bytes ``[0, MAPS_BYTES)`` of a launch's buffer per call (``kernelgen/kernels/tma.py``), the pointers at
    ``MAPS_BYTES``.
    """

    MAP_BYTES = 128
    MAPS = ("q", "k", "v")
    MAPS_BYTES = MAP_BYTES * len(MAPS)

    class _OffsetStruct:
        """``struct.Struct.pack_into`` of the pointer fields, shifted past the tensor maps."""

        def __init__(self, inner: struct.Struct, offset: int):
            self._pack_into, self.offset, self.size, self.format = inner.pack_into, offset, inner.size, inner.format

        def pack_into(self, buf, offset: int, *values) -> None:
            self._pack_into(buf, offset + self.offset, *values)

    def __init__(self, inner: ParamStruct, cname: str = "TmaAttnParams"):
        self.inner, self.cname = inner, cname
        self.names = inner.names
        self.pointer_names = inner.pointer_names
        self.pointer_struct = self._OffsetStruct(inner.pointer_struct, self.MAPS_BYTES)
        self.size = -(-(self.MAPS_BYTES + inner.size) // 64) * 64
        self._pad = bytes(self.size - self.MAPS_BYTES - inner.size)

    def pack(self, values: dict, maps: bytes = b"") -> bytes:
        """Tensor maps (``maps``: 384 bytes, or zeros when empty) + the AttnParams of ``values``."""
        if maps and len(maps) != self.MAPS_BYTES:
            raise ValueError(f"{self.cname}: tensor maps must be {self.MAPS_BYTES} bytes, got {len(maps)}")
        return (maps or bytes(self.MAPS_BYTES)) + self.inner.pack(values) + self._pad

    def pack_static(self, values: dict) -> bytes:
        return bytes(self.MAPS_BYTES) + self.inner.pack_static(values) + self._pad

    def offset(self, name: str) -> int:
        """The byte offset of AttnParams field ``name`` in the buffer (past the tensor maps)."""
        return self.MAPS_BYTES + self.inner.offset(name)

    def unpack(self, data: bytes) -> dict:
        """The AttnParams fields of a packed buffer (tests)."""
        n = self.inner.size
        return dict(zip(self.inner.names, self.inner.struct.unpack(data[self.MAPS_BYTES:self.MAPS_BYTES + n])))

    def c_decl(self) -> str:
        maps = " ".join(f"TmaDesc {m};" for m in self.MAPS)
        return "\n".join([
            self.inner.c_decl(),
            "struct __align__(64) TmaDesc { unsigned long long w[16]; };",
            f"struct {self.cname} {{ {maps} {self.inner.cname} p; }};",
            f'static_assert(sizeof({self.cname}) == {self.size}, "{self.cname} ABI size");',
        ])


TMA_ATTENTION_PARAMS = TmaParamStruct(ATTENTION_PARAMS)
TMA_ATTENTION_PARAMS_ALIBI = TmaParamStruct(ATTENTION_PARAMS_ALIBI)
TMA_ATTENTION_PARAMS_SINKS = TmaParamStruct(ATTENTION_PARAMS_SINKS)
TMA_ATTENTION_PARAMS_ALIBI_SINKS = TmaParamStruct(ATTENTION_PARAMS_ALIBI_SINKS)


#: The fields of FP8 K/V variants (``AttentionSpec.kv_dtype``), appended after the plain, ALiBi and
#: sinks fields (before a user variant's): the float32 ``k_descale`` / ``v_descale`` addresses (i64
#: static fields, as ALiBi's slopes: a prepared call is keyed by the tensors' addresses, the kernel
#: reads the values at every launch; 0 = factor 1) and the (batch, KV head) strides in elements the
#: factor of request b and KV head h is read at (0 along a broadcast dimension); then ``q_descale``'s
#: (an FP8 q, FlashAttention-3's (batch, num_heads_kv) factor; the kernels multiply it into
#: ``k_descale``'s; 0 = factor 1, as for every call with a 16-bit q).
FP8_FIELDS = [("k_descale", "i64"), ("v_descale", "i64"), ("k_descale_batch_stride", "i32"),
              ("k_descale_head_stride", "i32"), ("v_descale_batch_stride", "i32"), ("v_descale_head_stride", "i32"),
              ("q_descale", "i64"), ("q_descale_batch_stride", "i32"), ("q_descale_head_stride", "i32")]
ATTENTION_PARAMS_FP8 = ParamStruct("AttnParams", ATTENTION_PARAMS.fields + FP8_FIELDS)
_FP8_STRUCTS: dict = {ATTENTION_PARAMS.names: ATTENTION_PARAMS_FP8}


def fp8_params(base: ParamStruct) -> ParamStruct:
    """``base`` (an ``AttnParams`` ParamStruct) with the FP8 descale fields appended."""
    st = _FP8_STRUCTS.get(base.names)
    if st is None:
        st = _FP8_STRUCTS[base.names] = ParamStruct("AttnParams", base.fields + FP8_FIELDS)
    return st


#: Names of the user-variant tensor address fields (``AttentionSpec.variant``), in order.
USER_FIELDS = tuple(f"user{i}" for i in range(8))
_USER_STRUCTS: dict = {}


def user_params(base, n: int, hopper: bool):
    """``base`` (an ``AttnParams`` ParamStruct) with ``n`` user tensor addresses appended (i64
    static fields ``user0`` .. ``user{n-1}``, as ALiBi's slopes: a prepared call is keyed by the
    tensors' addresses and the kernel reads the values at every launch), wrapped in the Hopper
    kernel's ``TmaAttnParams`` when ``hopper``.  n == 0 still adds nothing but is a distinct
    struct only by identity (a variant with no tensors has the base fields)."""
    key = (base.names, n, hopper)
    st = _USER_STRUCTS.get(key)
    if st is None:
        inner = ParamStruct("AttnParams", base.fields + [(f, "i64") for f in USER_FIELDS[:n]])
        st = TmaParamStruct(inner) if hopper else inner
        _USER_STRUCTS[key] = st
    return st


_TMA_FP8: dict = {}


def tma_fp8_params(base: ParamStruct) -> TmaParamStruct:
    """The Hopper kernel's ``TmaAttnParams`` around an FP8 ``AttnParams`` (``fp8_params``' result; one
    instance per base)."""
    st = _TMA_FP8.get(base.names)
    if st is None:
        st = _TMA_FP8[base.names] = TmaParamStruct(base)
    return st


def attention_params_for(spec):
    """The parameter struct of an attention spec: plain or ALiBi (``AttnParams``), with the Hopper
    kernel's tensor maps in front (``TmaAttnParams``); a user variant's (``spec.variant``) appends
    its tensors' addresses (``user_params``)."""
    alibi, sinks = getattr(spec, "alibi", False), getattr(spec, "sinks", False)
    code = getattr(spec, "variant", None)
    if getattr(spec, "kv_dtype", ""):
        base = fp8_params({(False, False): ATTENTION_PARAMS, (True, False): ATTENTION_PARAMS_ALIBI,
                           (False, True): ATTENTION_PARAMS_SINKS,
                           (True, True): ATTENTION_PARAMS_ALIBI_SINKS}[alibi, sinks])
        if spec.mainloop == "sm90a":   # (the Hopper FP8 variants take no ALiBi or user variant)
            return tma_fp8_params(base)
        return base if code is None else user_params(base, len(code.tensors), False)
    if code is not None:
        base = {(False, False): ATTENTION_PARAMS, (True, False): ATTENTION_PARAMS_ALIBI,
                (False, True): ATTENTION_PARAMS_SINKS, (True, True): ATTENTION_PARAMS_ALIBI_SINKS}[alibi, sinks]
        return user_params(base, len(code.tensors), spec.mainloop == "sm90a")
    if spec.mainloop == "sm90a":
        return {(False, False): TMA_ATTENTION_PARAMS, (True, False): TMA_ATTENTION_PARAMS_ALIBI,
                (False, True): TMA_ATTENTION_PARAMS_SINKS, (True, True): TMA_ATTENTION_PARAMS_ALIBI_SINKS}[alibi, sinks]
    return {(False, False): ATTENTION_PARAMS, (True, False): ATTENTION_PARAMS_ALIBI,
            (False, True): ATTENTION_PARAMS_SINKS, (True, True): ATTENTION_PARAMS_ALIBI_SINKS}[alibi, sinks]


class FusedTmaParamStruct:
    """The fused mixed-batch kernel's parameter on sm_90a (templates/attention/fwd_fused_sm90.cu.j2):
    the long class's ``TmaAttnParams`` (three tensor maps, then its AttnParams), the short class's
    ``AttnParams``, then ``short_ctas`` (int: CTAs that start on the short queue), padded to a
    multiple of 64 bytes.

    As ``TmaParamStruct`` it offers ``size``, ``MAPS_BYTES``, ``c_decl``; ``pack_static`` packs
    both structs with zero pointers and zero maps, ``long_pointers`` / ``short_pointers`` rewrite
    each struct's pointer fields in a packed buffer.
    """

    MAPS_BYTES = TmaParamStruct.MAPS_BYTES

    def __init__(self, tma: TmaParamStruct, cname: str = "FusedTmaParams"):
        self.tma, self.inner, self.cname = tma, tma.inner, cname
        self.short_offset = tma.size
        self.ctas_offset = tma.size + tma.inner.size
        self.size = -(-(self.ctas_offset + 8) // 64) * 64
        self.long_pointers = tma.pointer_struct
        self.short_pointers = TmaParamStruct._OffsetStruct(tma.inner.pointer_struct, self.short_offset)
        self.tail = struct.Struct(f"<ii{self.size - self.ctas_offset - 8}x")

    def pack_static(self, static_long: dict, static_short: dict, short_ctas: int) -> bytes:
        return (self.tma.pack_static(static_long) + self.inner.pack_static(static_short)
                + self.tail.pack(int(short_ctas), 0))

    def unpack(self, data: bytes) -> tuple:
        """(long AttnParams fields, short AttnParams fields, short_ctas) of a packed buffer (tests)."""
        n = self.inner.size
        short = dict(zip(self.inner.names, self.inner.struct.unpack(data[self.short_offset:self.short_offset + n])))
        return self.tma.unpack(data), short, struct.unpack_from("<i", data, self.ctas_offset)[0]

    def c_decl(self) -> str:
        return "\n".join([
            self.tma.c_decl(),
            f"struct {self.cname} {{ {self.tma.cname} a; {self.inner.cname} b; int short_ctas; int pad_; }};",
            f'static_assert(sizeof({self.cname}) == {self.size}, "{self.cname} ABI size");',
        ])


FUSED_TMA_PARAMS = FusedTmaParamStruct(TMA_ATTENTION_PARAMS)
#: ... with an FP8 cache: both classes' AttnParams carry the descale fields (``FP8_FIELDS``).
FUSED_TMA_PARAMS_FP8 = FusedTmaParamStruct(tma_fp8_params(ATTENTION_PARAMS_FP8))


def fused_params_for(spec):
    """The parameter struct of a fused spec (``FusedAttentionSpec``): on the Hopper kernel
    ``FUSED_TMA_PARAMS`` (``FUSED_TMA_PARAMS_FP8`` on an FP8 cache, whose two AttnParams carry the
    descale fields); on the sm_80 kernel ``ATTENTION_PARAMS`` (``ATTENTION_PARAMS_FP8``), one a class
    back to back."""
    if spec.hopper:
        return FUSED_TMA_PARAMS_FP8 if spec.long.kv_dtype else FUSED_TMA_PARAMS
    return ATTENTION_PARAMS_FP8 if spec.long.kv_dtype else ATTENTION_PARAMS
