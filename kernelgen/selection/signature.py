"""Call signatures: a cheap key for everything input validation and variant choice depend on.

``validation.varlen_inputs`` and the option checks read, of each tensor argument, its Python
type, dtype, device, shape and strides (rank, head counts, head dims, batch, contiguity and the
16-byte row rule all follow from those) and its data pointer's 16-byte alignment; of every other
argument its type and value.  ``key`` collects exactly that except the data pointers, which
change every step: the callers check the alignment of q, k, v and out on every call instead.
Two calls with equal keys therefore pass or fail validation alike and choose the same kernels,
so a call whose key was seen (and validated) before skips validation and the choice.

Scalars enter the key as (type, value): ``True`` and ``1``, or ``2.0`` and ``2``, validate
differently and hash alike.  ``window_size`` enters as its type, its entries' types and its
entries.  Only calls whose scalars are plain ``bool``/``int``/``float``/``str``/``None`` (or a
``torch.dtype``, e.g. ``out_dtype``: compared by identity, or a NumPy bool or number, e.g.
``1 / np.sqrt(d)``: compared by value, its type in the key as any scalar's) are stored
(``cacheable``), so a lookup never compares exotic objects for equality.
"""
from __future__ import annotations

import sys

import torch



class VariantKey(tuple):
    """A user variant's part of a call key (``kernelgen.Variant.key``): (its ``VariantCode``, and
    each tensor's (dtype, device, address)).  Its parts compare by value (strings, ints, torch
    dtypes and devices), so it counts as a plain scalar for ``cacheable``."""

    __slots__ = ()


_PLAIN = frozenset((bool, int, float, str, type(None), VariantKey, torch.dtype))


def tensor_key(x):
    """(type, dtype, device, shape, strides) of a tensor, None for None.  Raises (AttributeError,
    TypeError, RuntimeError, ...) for objects that are not strided tensors."""
    if x is None:
        return None
    return (x.__class__, x.dtype, x.device, x.shape, x.stride())


def key(tensors: tuple, window_size, scalars: tuple) -> tuple:
    """The signature of a call: ``tensors`` (tensor arguments in a fixed order, None allowed),
    ``window_size`` (a tuple or list) and ``scalars`` (the other arguments, a tuple in a fixed
    order).  Raises TypeError (or what a tensor attribute raises) when an argument cannot be
    keyed; the caller then takes the validating path."""
    wc = window_size.__class__
    if wc is tuple:
        values = scalars + window_size
    elif wc is list:
        values = scalars + tuple(window_size)
    else:
        raise TypeError("window_size is not a tuple or list")
    return (wc, tuple(map(type, values)), values,
            *[None if x is None else (x.__class__, x.dtype, x.device, x.shape, x.stride()) for x in tensors])


def _plain(t: type) -> bool:
    """A scalar type whose values compare and hash by value: ``_PLAIN``'s, or NumPy's bools and
    numbers (NumPy imported by the caller, who made them; a call with ``np.float64`` softmax_scale
    or ``np.bool_`` causal was validated and prepared again on every call)."""
    if t in _PLAIN:
        return True
    np = sys.modules.get("numpy")
    return np is not None and issubclass(t, (np.bool_, np.number))


def cacheable(k: tuple) -> bool:
    """Whether a key may be stored: its tensors are torch.Tensors and its scalars plain values."""
    return (all(_plain(t) for t in k[1])
            and all(t is None or issubclass(t[0], torch.Tensor) for t in k[3:]))


class SignatureCache:
    """A bounded dict from call keys to prepared calls; the oldest entry goes first when full.

    ``get`` checks the entry found last first (a serving loop repeats one signature): equal keys
    are then compared once, without hashing.
    """

    def __init__(self, max_entries: int = 1024):
        self.max_entries = max_entries
        self._d: dict = {}
        self._last = (None, None)

    def get(self, k: tuple):
        """The value stored under ``k``, or None."""
        last = self._last
        if last[0] == k:
            return last[1]
        v = self._d.get(k)
        if v is not None:
            self._last = (k, v)
        return v

    def put(self, k: tuple, value) -> None:
        d = self._d
        if k not in d and len(d) >= self.max_entries:
            try:
                del d[next(iter(d))]
            except (StopIteration, KeyError, RuntimeError):  # another thread emptied or resized it
                pass
        d[k] = value
        self._last = (k, value)

    def clear(self) -> None:
        self._d.clear()
        self._last = (None, None)

    def __len__(self) -> int:
        return len(self._d)

    def __contains__(self, k) -> bool:
        return k in self._d
