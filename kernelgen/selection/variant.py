"""``kernelgen.Variant``: user-written attention variants compiled at run time.

A variant is up to three CUDA C++ snippets that the attention templates render in place
(common/user_mod.cuh), plus named user tensors the snippets read through device pointers:

``score_mod``
    A C++ expression (wrapped as ``return (expr);``) or a function body containing ``return``,
    giving the new logit.  In scope: ``score``, the scaled logit q.k * softmax_scale in
    natural-log units (after the built-in soft-cap and ALiBi when those are on), a ``kg_score``
    that converts to float and folds products with numbers into the scale (docs/variants.md,
    "The score"); ``int batch``
    (the request), ``head`` (query head), ``kv_head``, ``q_idx`` (the query's row in its
    request, in [0, q_len)), ``kv_idx`` (the key, in [0, kv_len)), ``q_len``, ``kv_len`` (the
    request's query and key counts; with causal masks the query row i stands at key position
    ``i + kv_len - q_len``) and ``q_offset`` (``cu_seqlens_q[batch]``: the token index of the
    request's first query row in q) -- the five token indices are ``kg_idx`` values, an int
    with an exact float copy: ints wherever an int is expected, while casts to float and float
    arithmetic on their sums and differences take the float copy (no int-to-float conversion
    per logit; exact below 2^24; docs/variants.md, "The index type"); each user tensor as ``const T* __restrict__ name``, a flat
    pointer to its (contiguous) elements, T from its dtype (float32 -> float, float16 ->
    __half, bfloat16 -> __nv_bfloat16, int32 -> int, int64 -> long long, int8 -> signed char,
    uint8 -> unsigned char, bool -> bool).  Helpers: ``kg_min``, ``kg_max``, ``clamp(x, lo,
    hi)``, ``kg_abs``, ``kg_log``, ``kg_exp``, ``kg_tanh`` (accurate to about 1e-7; the kernels
    are compiled with --use_fast_math, where ``tanhf`` is tanh.approx, 2^-11 relative) and
    ``to_float`` (any element type, __half and __nv_bfloat16 included).
``mask_mod``
    A boolean expression (or body) of the same indices and tensors (no ``score``): false makes
    the logit -inf.  A query row whose keys are all masked gets out = 0 and lse = -inf.
``kv_range``
    Optional block-level declaration (FlexAttention's block masks): statements that may narrow
    ``int& kv_lo, int& kv_hi`` (initially [0, kv_len)) from ``batch, kv_head, q_lo, q_hi, q_len,
    kv_len, q_offset`` (a tile's query rows [q_lo, q_hi) of the request) and the tensors.  The
    kernels then load and compute only the key blocks that meet [kv_lo, kv_hi) (the split-KV
    splits share the narrowed range).  Contract: every key outside the range is masked for all
    those query rows, and ``mask_mod`` (required with ``kv_range``) still masks it element by
    element; kv_range only skips work.  Document masks and prefix-LM masks skip blocks this way.

The snippets only ever see indices in range: out-of-range elements (padding rows of a tile, keys
at or past kv_len) are evaluated at clamped indices (the last row, the last key) and discarded, so
the snippets may index their tensors without bounds checks.  The tensors' values are never
read on the host (no sync): the kernels read them at every launch, so a CUDA graph replays with
what they hold then; their addresses are kernel parameters (``AttnParams.user0`` ..), part of a
prepared call's key.  The snippets' source and the tensors' (name, dtype) pairs are part of the
kernel spec and its cache key; shapes and addresses are not (a new per-step tensor of the same
dtype compiles nothing).  A snippet that NVRTC rejects raises ``kernelgen.VariantCompileError``
with NVRTC's lines at the snippet's own line numbers.

Idea: FlexAttention (Dong et al. 2024, "Flex Attention: A Programming Model for Generating
Optimized Attention Kernels": ``score_mod``, ``mask_mod``, block masks) and FlashAttention-4's
CuTe-DSL ``score_mod``; here the snippets are C++ compiled by NVRTC into kernelgen's templates.
"""
from __future__ import annotations

import json
import types

import torch

from ..kernels.variant_code import CTYPES, MAX_TENSORS, VariantCode, check_snippet, check_tensor_name
from .signature import VariantKey

#: torch dtype -> the dtype name of ``variant_code.CTYPES``.
TORCH_DTYPES = {
    torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16", torch.int32: "int32",
    torch.int64: "int64", torch.int8: "int8", torch.uint8: "uint8", torch.bool: "bool",
}


class Variant:
    """A user attention variant: C++ snippets (see the module doc) and the tensors they read.

    Args:
        score_mod: C++ expression or body returning the new logit (natural-log units), or None.
        mask_mod: C++ boolean expression or body (false: masked), or None.
        kv_range: C++ statements narrowing ``kv_lo`` / ``kv_hi`` for a tile's query rows
            [q_lo, q_hi), or None (needs ``mask_mod``).
        tensors: {name: tensor}, at most 8 dense contiguous tensors of the dtypes of
            ``TORCH_DTYPES``, each named by a C identifier not in scope already (nor a device math
            function's name); at each call their device must be q's (a CPU tensor serves to
            build the variant, e.g. for ``to_json`` and warmup).  Any shape: the snippets index them
            flat.
        name: a label for messages and ``repr`` only (not part of the kernel).

    Raises:
        TypeError: a snippet is not a str, tensors is not a dict, a tensor is not a torch.Tensor.
        ValueError: no snippet at all, an empty snippet, kv_range without mask_mod, a tensor name
            that is not a C identifier, a C++ keyword, a name in scope, a device function's or
            reserved, more than 8 tensors, an unsupported dtype, a sparse or non-contiguous tensor;
            a snippet with a preprocessor line, a line continuation, an unterminated comment or
            literal, or unbalanced braces / parentheses (``variant_code.check_snippet``).
    """

    __slots__ = ("code", "tensors", "name")

    def __init__(self, score_mod: str | None = None, mask_mod: str | None = None, kv_range: str | None = None,
                 tensors: dict | None = None, name: str | None = None):
        for what, snippet in (("score_mod", score_mod), ("mask_mod", mask_mod), ("kv_range", kv_range)):
            check_snippet(what, snippet)
        if name is not None and not isinstance(name, str):
            raise TypeError(f"Variant name must be a str or None, got {type(name).__name__}")
        if tensors is None:
            tensors = {}
        if not isinstance(tensors, dict):
            raise TypeError(f"Variant tensors must be a dict of name -> torch.Tensor, got {type(tensors).__name__}")
        if len(tensors) > MAX_TENSORS:
            raise ValueError(f"a Variant takes at most {MAX_TENSORS} tensors, got {len(tensors)}")
        decl = []
        for tname, t in tensors.items():
            check_tensor_name(tname)
            decl.append((tname, _tensor_dtype(tname, t)))
        #: The kernel-side description (``kernels.variant_code.VariantCode``): snippets, (name, dtype).
        self.code = VariantCode(score_mod, mask_mod, kv_range, tuple(decl))
        #: The user tensors, in declaration order (read-only: ``with_tensors`` makes a new Variant).
        self.tensors = types.MappingProxyType(dict(tensors))
        self.name = name

    @property
    def score_mod(self):
        return self.code.score_mod

    @property
    def mask_mod(self):
        return self.code.mask_mod

    @property
    def kv_range(self):
        return self.code.kv_range

    def addresses(self) -> tuple:
        """The tensors' data pointers, in declaration order (the kernels' ``user0`` ..)."""
        return tuple(t.data_ptr() for t in self.tensors.values())

    def key(self) -> VariantKey:
        """What a prepared call depends on: the code and each tensor's (dtype, device, address)
        (``selection.signature.VariantKey``)."""
        return VariantKey((self.code, tuple((t.dtype, t.device, t.data_ptr()) for t in self.tensors.values())))

    def with_tensors(self, **tensors) -> "Variant":
        """The same snippets with some tensors replaced (same names and dtypes; ValueError else)."""
        unknown = set(tensors) - set(self.tensors)
        if unknown:
            raise ValueError(f"with_tensors: {sorted(unknown)} are not tensors of this variant "
                             f"({list(self.tensors)})")
        new = {**self.tensors, **tensors}
        v = Variant(self.code.score_mod, self.code.mask_mod, self.code.kv_range, new, self.name)
        if v.code != self.code:
            old_dtypes, new_dtypes = dict(self.code.tensors), dict(v.code.tensors)
            name = next(n for n in tensors if new_dtypes.get(n) != old_dtypes.get(n))
            raise ValueError(f"with_tensors: {name} has dtype {new_dtypes[name]}, the variant's {name} "
                             f"{old_dtypes[name]} (a replacement keeps the dtype: another is another kernel; "
                             f"make a new Variant)")
        return v

    def to_json(self) -> dict:
        """The snippets, the tensors' dtypes ({name: dtype}) and the name: the format of
        ``from_json`` and of ``kernelgen warmup --variant FILE`` (no tensor values)."""
        d = {k: v for k, v in (("score_mod", self.code.score_mod), ("mask_mod", self.code.mask_mod),
                                ("kv_range", self.code.kv_range)) if v is not None}
        d["tensors"] = dict(self.code.tensors)
        if self.name is not None:
            d["name"] = self.name
        return d

    @classmethod
    def from_json(cls, d, tensors: dict | None = None) -> "Variant":
        """A Variant from ``to_json`` output (a dict or a JSON string) and its tensors, which must
        have the declared names and dtypes (ValueError otherwise).  Without ``tensors`` only
        ``VariantCode.from_json(d)`` (what warmup needs) can be built: use that."""
        if isinstance(d, str):
            d = json.loads(d)
        code = VariantCode.from_json(d)
        tensors = {} if tensors is None else tensors
        if not isinstance(tensors, dict):
            raise TypeError(f"tensors must be a dict of name -> torch.Tensor, got {type(tensors).__name__}")
        want = [n for n, _ in code.tensors]
        if list(tensors) != want and sorted(tensors) != sorted(want):
            hint = ("; pass them as Variant.from_json(d, tensors={name: tensor, ...}), or build only its code "
                    "with kernelgen.kernels.variant_code.VariantCode.from_json(d) (what warmup needs)") if not tensors else ""
            raise ValueError(f"the variant declares tensors {want}, got {list(tensors)}{hint}")
        v = cls(code.score_mod, code.mask_mod, code.kv_range, {n: tensors[n] for n in want}, d.get("name"))
        if v.code != code:
            raise ValueError(f"the tensors' dtypes {[x for _, x in v.code.tensors]} differ from the declared "
                             f"{[x for _, x in code.tensors]}")
        return v

    def __repr__(self) -> str:
        label = f" {self.name!r}" if self.name else ""
        parts = [f"{k}={v!r}" for k, v in (("score_mod", self.score_mod), ("mask_mod", self.mask_mod),
                                            ("kv_range", self.kv_range)) if v is not None]
        parts.append("tensors={" + ", ".join(f"{n}: {tuple(t.shape)} {t.dtype}" for n, t in self.tensors.items()) + "}")
        return f"Variant{label}(" + ", ".join(parts) + ")"


def _tensor_dtype(name: str, t) -> str:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"Variant tensor {name!r} must be a torch.Tensor, got {type(t).__name__}")
    dt = TORCH_DTYPES.get(t.dtype)
    if dt is None:
        raise ValueError(f"Variant tensor {name!r} has dtype {t.dtype}; supported: "
                         f"{', '.join(str(d) for d in TORCH_DTYPES)}")
    if t.layout != torch.strided:
        raise ValueError(f"Variant tensor {name!r} must be a dense (strided) tensor, got layout {t.layout}")
    if not t.is_contiguous():
        raise ValueError(f"Variant tensor {name!r} must be contiguous (the snippets index it flat), "
                         f"got strides {tuple(t.stride())} for shape {tuple(t.shape)}")
    if t.numel() == 0:
        raise ValueError(f"Variant tensor {name!r} is empty (shape {tuple(t.shape)}): the kernels would read "
                         f"through a null pointer")
    return dt


def check(variant, device) -> None:
    """A call's ``variant`` argument: None or a ``Variant`` whose tensors are on ``device`` (q's;
    None: any device).  Raises TypeError / ValueError naming the argument and the tensor."""
    if variant is None:
        return
    if not isinstance(variant, Variant):
        raise TypeError(f"variant must be a kernelgen.Variant or None, got {type(variant).__name__}")
    for (name, dtype), t in zip(variant.code.tensors, variant.tensors.values()):
        if device is not None and t.device != device:
            raise ValueError(f"variant tensor {name!r} is on {t.device}; it must be on q's device {device}")
        # a tensor changed in place since the Variant was made (dtype view, resize, transpose) is
        # checked again here (a prepared call of the same addresses skips this: keep them as made)
        if TORCH_DTYPES.get(t.dtype) != dtype:
            raise ValueError(f"variant tensor {name!r} has dtype {t.dtype} now; the variant was made with {dtype}")
        if not t.is_contiguous() or t.numel() == 0:
            raise ValueError(f"variant tensor {name!r} must be contiguous and non-empty, got shape "
                             f"{tuple(t.shape)} and strides {tuple(t.stride())}")


assert set(TORCH_DTYPES.values()) == set(CTYPES)
