"""The source of a user attention variant (``kernelgen.Variant``) as a kernel spec sees it.

A ``VariantCode`` is what of a ``kernelgen.Variant`` changes the rendered kernel: the three C++
snippets (``score_mod``, ``mask_mod``, ``kv_range``) and the user tensors' names and dtypes, in
order.  It is part of ``AttentionSpec`` (``AttentionSpec.variant``), so of the spec's name (a short
digest of it) and of the cache key (the rendered source holds the snippets); the tensors' shapes
and addresses are not (a new per-step tensor of the same dtype reuses the compiled kernel; the
addresses are ``AttnParams`` fields ``user0`` .. ``user7``).  Torch-free: the warmup-only install
builds these from a JSON file (``kernelgen warmup --variant FILE``).

The idea and the names follow FlexAttention (Dong et al. 2024, "Flex Attention: A Programming
Model for Generating Optimized Attention Kernels": ``score_mod``, ``mask_mod`` and block masks)
and FlashAttention-4's CuTe-DSL ``score_mod``; here the snippets are CUDA C++ rendered into the
Jinja templates and compiled by NVRTC.
"""
from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass

#: Most user tensors a variant may declare (``AttnParams.user0`` .. ``user7``).
MAX_TENSORS = 8

#: dtype name -> the C++ element type of the snippet's pointer (``const T* __restrict__ name``).
#: ``__half`` / ``__nv_bfloat16`` are kernelgen's own 2-byte structs (NVRTC here has no CUDA
#: headers); read them with ``to_float(x)``.
CTYPES = {
    "float32": "float", "float16": "__half", "bfloat16": "__nv_bfloat16", "int32": "int", "int64": "long long",
    "int8": "signed char", "uint8": "unsigned char", "bool": "bool",
}

#: The names a snippet sees besides the user tensors (a tensor may not take one of them).
SCOPE_NAMES = ("score", "batch", "head", "kv_head", "q_idx", "kv_idx", "q_len", "kv_len", "q_offset",
               "kv_lo", "kv_hi", "q_lo", "q_hi")
#: Device helpers the snippets may call (common/user_mod.cuh).
HELPER_NAMES = ("kg_min", "kg_max", "clamp", "kg_log", "kg_exp", "kg_abs", "kg_tanh", "to_float", "__half",
                "__nv_bfloat16")

#: C++ keywords and alternative tokens: no tensor may be named like one.
CPP_KEYWORDS = frozenset("""
alignas alignof and and_eq asm auto bitand bitor bool break case catch char char8_t char16_t char32_t class compl
concept const consteval constexpr constinit const_cast continue co_await co_return co_yield decltype default delete
do double dynamic_cast else enum explicit export extern false float for friend goto if inline int long mutable
namespace new noexcept not not_eq nullptr operator or or_eq private protected public register reinterpret_cast
requires return short signed sizeof static static_assert static_cast struct switch template this thread_local throw
true try typedef typeid typename union unsigned using virtual void volatile wchar_t while xor xor_eq
""".split())

SNIPPETS = ("score_mod", "mask_mod", "kv_range")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
#: Identifiers that open a raw string literal when a ``"`` follows at once (``R"x(...)x"``).
_RAW_PREFIXES = frozenset(("R", "u8R", "uR", "UR", "LR"))
_IDENT_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_$")
_DIGITS = frozenset("0123456789")


class _Unterminated(ValueError):
    """A comment or literal that does not end (``_blank``'s strict mode)."""


def _blank(code: str, strict: bool) -> str:
    """``code`` with its comments and string / character literals replaced by spaces (newlines kept,
    so every line keeps its length), by one left-to-right pass over C++'s tokens as a compiler's
    lexer reads them (C++17, [lex.pptoken]): identifiers, pp-numbers with their digit separators
    (``1'000``: the quote is not a character literal), encoding prefixes (``u8"..."``, ``L'x'``), raw
    strings (``R"d(...)d"``), ``//`` and ``/* */`` comments.  Linear in ``len(code)``.  ``strict``:
    a comment or literal that does not end raises ``_Unterminated``; otherwise it runs to the end of
    its line (a literal) or of the code (a comment)."""
    out = list(code)
    n = len(code)

    def wipe(a: int, b: int) -> None:
        for k in range(a, b):
            if out[k] != "\n":
                out[k] = " "

    def quoted(i: int, q: str) -> int:   # i at the opening quote; returns the index past the closing one
        j = i + 1
        while j < n:
            c = code[j]
            if c == "\\":
                j += 2
                continue
            if c == q:
                return j + 1
            if c == "\n":
                break
            j += 1
        if strict:
            raise _Unterminated("an unterminated " + ("string" if q == '"' else "character") + " literal")
        return min(j, n)

    i = 0
    while i < n:
        c = code[i]
        if c == "/" and i + 1 < n and code[i + 1] == "/":
            j = code.find("\n", i)
            j = n if j < 0 else j
            wipe(i, j)
            i = j
        elif c == "/" and i + 1 < n and code[i + 1] == "*":
            j = code.find("*/", i + 2)
            if j < 0:
                if strict:
                    raise _Unterminated("an unterminated /* comment")
                j = n
            else:
                j += 2
            wipe(i, j)
            i = j
        elif c in _DIGITS or (c == "." and i + 1 < n and code[i + 1] in _DIGITS):
            j = i + 1   # a pp-number: digits, letters, '.', digit separators, exponent signs
            while j < n:
                d = code[j]
                if d in "+-" and code[j - 1] in "eEpP":
                    j += 1
                elif d in _IDENT_CHARS or d == ".":
                    j += 1
                elif d == "'" and j + 1 < n and code[j + 1] in _IDENT_CHARS:
                    j += 2
                else:
                    break
            i = j
        elif c in _IDENT_CHARS or ord(c) > 127:
            j = i + 1
            while j < n and (code[j] in _IDENT_CHARS or ord(code[j]) > 127):
                j += 1
            if j < n and code[j] == '"' and code[i:j] in _RAW_PREFIXES:
                k = code.find("(", j + 1, j + 18)   # (a delimiter has at most 16 characters)
                delim = code[j + 1:k] if k >= 0 else None
                if delim is None or len(delim) > 16 or any(x in delim for x in ' ()\\\t\v\f\n'):
                    if strict:
                        raise _Unterminated("a malformed raw string literal")
                    i = j
                    continue
                end = code.find(")" + delim + '"', k + 1)
                if end < 0:
                    if strict:
                        raise _Unterminated("an unterminated raw string literal")
                    end = n
                else:
                    end += len(delim) + 2
                wipe(i, end)
                i = end
            else:
                i = j   # (an encoding prefix such as u8 or L stays: the literal after it is blanked next)
        elif c in "\"'":
            j = quoted(i, c)
            wipe(i, j)
            i = j
        else:
            i += 1
    return "".join(out)


def code_only(code: str) -> str:
    """``code`` with its comments and string/character literals blanked (same length per line)."""
    return _blank(code, strict=False)


def check_tensor_name(name) -> None:
    """ValueError / TypeError unless ``name`` can name a user tensor in a snippet: a C identifier,
    not a C++ keyword, not a name in scope (``SCOPE_NAMES``), not a helper, not starting with
    ``kg_``/``KG_`` (kernelgen's own), ``MD_`` (the scheduler's) or an underscore (reserved in C++
    at file scope, and the templates' own)."""
    if not isinstance(name, str):
        raise TypeError(f"variant tensor names must be str, got {type(name).__name__}")
    if not _IDENT.match(name):
        raise ValueError(f"variant tensor name {name!r} is not a C identifier ([A-Za-z_][A-Za-z0-9_]*)")
    if name in CPP_KEYWORDS:
        raise ValueError(f"variant tensor name {name!r} is a C++ keyword")
    if name in PREDEFINED_MACROS or PREDEFINED_MACRO_PATTERN.fullmatch(name):
        raise ValueError(f"variant tensor name {name!r} is a macro NVRTC predefines, or has the form of the CUDA "
                         f"runtime's (NULL, CUDA_*, CUDART_*, CU_*, cuda + a capital): it would not name the tensor")
    if name in SCOPE_NAMES or name in HELPER_NAMES:
        raise ValueError(f"variant tensor name {name!r} collides with a name the snippets already see "
                         f"({', '.join(SCOPE_NAMES + HELPER_NAMES)})")
    if name in _MATH_NAMES or _TRANSCENDENTAL.fullmatch(name + "("):
        raise ValueError(f"variant tensor name {name!r} is a device function the snippets may call (a tensor of "
                         f"that name would hide it)")
    if name.lower().startswith("kg_") or name.startswith("_") or name.startswith("MD_"):
        raise ValueError(f"variant tensor name {name!r} is reserved (kg_/KG_/MD_ prefixes and a leading '_' are "
                         f"kernelgen's or the compiler's)")


#: Object-like macros NVRTC defines in every program (kernelgen's sources include no header): a user
#: tensor of such a name would be replaced before it is declared.  NVRTC 13.0 (a review: every
#: ``#define`` name in libnvrtc compiled as a variable): ``NULL`` and the CUDA runtime's names,
#: ``CUDART_*``, ``CUDA_*``, ``CU_*`` and ``cuda`` + a capital (``cudaStreamDefault``, ...): refused by
#: ``PREDEFINED_MACRO_PATTERN``; INFINITY, NAN, FLT_MAX, INT_MAX, size_t, int32_t, threadIdx are not
#: macros there.
PREDEFINED_MACROS = frozenset({"NULL"})
PREDEFINED_MACRO_PATTERN = re.compile(r"(?:CUDART|CUDA|CU)_\w*|CUDARTAPI|cuda[A-Z]\w*")

#: Preprocessor directives: a logical line whose first token is ``#``, its digraph ``%:`` or the
#: trigraph ``??=`` (gone in C++17, refused all the same).
_DIRECTIVE_STARTS = ("#", "%:", "??=")
#: Tokens refused anywhere outside comments and literals: the pragma operators (a pragma in a snippet
#: would change how kernelgen's code after it compiles, e.g. switch off the missing-return error) and
#: the brace / directive digraphs (``<%`` / ``%>`` are ``{`` / ``}`` to the compiler, unseen by the
#: brace balance).
_REFUSED_TOKENS = re.compile(r"\b_Pragma\b|\b__pragma\b|<%|%>|%:")


def check_snippet(what: str, code) -> None:
    """TypeError / ValueError unless ``code`` is None or a non-empty str that can be the body of one
    function: no NUL or lone surrogate, no line continuation (a backslash ending a line splices lines before anything
    else reads them), no comment or literal left open, no preprocessor directive (``#``, ``%:``,
    ``??=`` first on a line), balanced braces and parentheses, not kernelgen's own line marker."""
    if code is None:
        return
    if not isinstance(code, str):
        raise TypeError(f"{what} must be a str of C++ (or None), got {type(code).__name__}")
    if not code.strip():
        raise ValueError(f"{what} is empty: give C++ source or None")
    if "\0" in code:
        raise ValueError(f"{what} contains a NUL character")
    try:   # (the source is hashed and compiled as UTF-8: a lone surrogate has no encoding)
        code.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ValueError(f"{what} contains {code[e.start]!r} at character {e.start}, which has no UTF-8 "
                         f"encoding (a lone surrogate)") from None
    if "@@kg_" in code:
        raise ValueError(f"{what} contains '@@kg_', the text of kernelgen's own source markers")
    for n, line in enumerate(code.split("\n"), 1):
        if line.rstrip(" \t\r\f\v").endswith("\\"):
            raise ValueError(f"{what} line {n} ends in a line continuation (\\): a snippet is the body of one "
                             f"function and needs none")
    try:
        bare = _blank(code, strict=True)
    except _Unterminated as e:
        raise ValueError(f"{what} has {e}") from None
    _check_ascii(what, bare)
    if not bare.strip():
        raise ValueError(f"{what} holds only comments or literals: give C++ source or None")
    if any(line.lstrip().startswith(_DIRECTIVE_STARTS) for line in bare.splitlines()):
        raise ValueError(f"{what} contains a preprocessor directive (#...): a snippet is the body of one function")
    m = _REFUSED_TOKENS.search(bare)
    if m:
        raise ValueError(f"{what} contains {m.group(0)!r}: " + (
            "a pragma would apply to kernelgen's code after the snippet" if "ragma" in m.group(0) else
            "the digraphs <% %> %: are not taken in snippets (write { } #)"))
    depth = {"{": 0, "(": 0}
    for ch in bare:
        if ch in "{(":
            depth[ch] += 1
        elif ch in "})":
            opener = "{" if ch == "}" else "("
            depth[opener] -= 1
            if depth[opener] < 0:
                raise ValueError(f"{what} has an unmatched {ch!r}: a snippet is the body of one function")
    if depth["{"] or depth["("]:
        raise ValueError(f"{what} has unbalanced braces or parentheses")
    if what in ("score_mod", "mask_mod") and _BARE_RETURN.search(bare):
        # (NVRTC only warns, warning 117, and the snippet's value is then undefined: a build that
        # succeeds shows no warning)
        raise ValueError(f"{what} contains 'return;' without a value: every path of a {what} must return "
                         f"{'the score' if what == 'score_mod' else 'whether the pair is kept'}")


#: Look-alikes that word processors and chat tools put in code, and the ASCII meant.
_LOOKALIKES = {"\u2212": "-", "\u2013": "-", "\u2014": "-", "\u00a0": "a space", "\u2009": "a space",
               "\u200b": "nothing (a zero-width space)", "\ufeff": "nothing (a byte-order mark)",
               "\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"', "\u00d7": "*", "\u00f7": "/",
               "\u2264": "<=", "\u2265": ">=", "\u2260": "!=", "\u2026": "..."}


def _check_ascii(what: str, bare: str) -> None:
    """ValueError naming the line, column and Unicode name of the first non-ASCII character of a
    snippet's code (``bare``: comments and literals blanked, where any text is fine): NVRTC reads
    such a character as an unrecognised token, with an error per use."""
    import unicodedata
    for n, line in enumerate(bare.split("\n"), 1):
        for col, ch in enumerate(line, 1):
            if ord(ch) > 127:
                meant = _LOOKALIKES.get(ch)
                raise ValueError(f"{what} line {n}, column {col}: U+{ord(ch):04X} "
                                 f"{unicodedata.name(ch, 'unnamed character')} outside a comment or literal; "
                                 f"snippet code is ASCII" + (f" (did you mean {meant}?)" if meant else ""))


#: ``return;``: a value-less return (comments and literals blanked first).
_BARE_RETURN = re.compile(r"\breturn\s*;")


#: The first tokens of a statement that cannot start an expression: a brace, a statement keyword,
#: an attribute (``[[likely]]``), a label (``name:``, not ``name::``).
_STATEMENT_START = re.compile(r"\s*(?:\{|\[\[|(?:if|for|while|do|switch|return|goto|try)\b|[A-Za-z_]\w*\s*:(?!:))")


def is_body(bare: str) -> bool:
    """Whether a snippet (comments and literals blanked) is a function body rather than an
    expression: a ``;`` or a ``return`` outside every brace pair (a lambda's ``[]{ return x; }()`` or
    a statement expression keeps them inside its braces), or a statement's first token first (a
    brace, a statement keyword, an attribute, a label)."""
    if _STATEMENT_START.match(bare):
        return True
    depth = 0
    for m in re.finditer(r"[{};]|\breturn\b", bare):
        t = m.group(0)
        if t == "{":
            depth += 1
        elif t == "}":
            depth -= 1
        elif depth == 0:
            return True
    return False


def body(code: str, what: str) -> str:
    """The C++ function body of a snippet: a function body (``is_body``; for ``kv_range`` always the
    statements as written) is kept as written, an expression is wrapped as ``return (expr);`` on the
    same lines, so NVRTC's line numbers are the snippet's."""
    if what == "kv_range" or is_body(code_only(code)):
        return code.rstrip() + "\n"
    return "return (" + code.rstrip() + "\n);\n"


_BRANCH = re.compile(r"\b(if|else|for|while|do|switch|case|goto)\b|\?|&&|\|\|")
#: Calls of functions that run on the MUFU unit (the special-function unit: 16 results a clock an SM
#: on sm_80 / sm_90, a quarter of a warp's FP32 rate; the kernels are built with --use_fast_math, so
#: ``tanhf`` is ``tanh.approx``, ``expf`` / ``logf`` / ``sinf`` one MUFU instruction after a multiply,
#: ``kg_tanh`` an ``ex2`` and a reciprocal), the unit every logit's softmax exponential takes too.
_TRANSCENDENTAL = re.compile(r"\b(?:tanhf?|kg_tanh|expf?|exp2f?|exp10f?|expm1f?|__expf|__exp10f|kg_exp|logf?|log2f?|"
                             r"log10f?|log1pf?|__logf|__log2f|__log10f|kg_log|sinf?|cosf?|tanf?|sincosf?|sinpif?|"
                             r"cospif?|__sinf|__cosf|__tanf|__sincosf|powf?|__powf|sqrtf?|rsqrtf?|__frsqrt_rn|"
                             r"cbrtf?|rcbrtf?|hypotf?|rhypotf?|erff?|erfcf?|normcdff?|sinhf?|coshf?|asinhf?|"
                             r"acoshf?|atanhf?|atanf?|atan2f?|asinf?|acosf?|__fdividef)\s*\(")


#: Device functions besides ``_TRANSCENDENTAL``'s that snippets commonly call: a user tensor may not
#: take their names.
_MATH_NAMES = frozenset("""
min max abs fabs fabsf fmin fminf fmax fmaxf floor floorf ceil ceilf round roundf rint rintf trunc truncf fmod fmodf
copysign copysignf isnan isinf isfinite signbit fma fmaf ldexp ldexpf frexp frexpf printf assert
""".split())   # (the intrinsics, __float2int_rn and the like: a leading '_' is refused already)


def straight_line(code: str) -> bool:
    """True for a snippet body without control flow: at most one ``return``, no ``if`` / ``else`` /
    loop / ``switch`` / ``goto``, no ``?:``, ``&&`` or ``||`` (comments and string literals
    ignored).  Conservative: a branch that could not change the result's form also says False."""
    text = code_only(code)
    return len(re.findall(r"\breturn\b", text)) <= 1 and not _BRANCH.search(text)


@dataclass(frozen=True)
class VariantCode:
    """A user variant's snippets and its tensors' (name, dtype) pairs (see the module doc).

    score_mod: C++ expression or body returning the new logit from ``float score`` (natural-log
    units, after soft-cap and ALiBi) and the indices; mask_mod: a bool of the indices (false: the
    logit is -inf); kv_range: statements narrowing ``int& kv_lo, int& kv_hi`` for a tile's query
    rows [q_lo, q_hi); tensors: ((name, dtype), ...) with dtype a key of ``CTYPES``.
    """

    score_mod: str | None = None
    mask_mod: str | None = None
    kv_range: str | None = None
    tensors: tuple = ()

    def __post_init__(self):
        for what in SNIPPETS:
            check_snippet(what, getattr(self, what))
        if self.score_mod is None and self.mask_mod is None and self.kv_range is None:
            raise ValueError("a variant needs at least one of score_mod, mask_mod, kv_range")
        if self.kv_range is not None and self.mask_mod is None:
            raise ValueError("kv_range only skips key blocks: give the mask_mod that masks the keys outside it "
                             "element by element too")
        if not isinstance(self.tensors, (tuple, list)):
            raise TypeError(f"variant tensors must be (name, dtype) pairs, got {type(self.tensors).__name__}")
        object.__setattr__(self, "tensors", tuple(tuple(t) if isinstance(t, (tuple, list)) else t
                                                  for t in self.tensors))
        if len(self.tensors) > MAX_TENSORS:
            raise ValueError(f"a variant takes at most {MAX_TENSORS} tensors, got {len(self.tensors)}")
        seen = set()
        for entry in self.tensors:
            if not isinstance(entry, tuple) or len(entry) != 2:
                raise ValueError(f"variant tensors must be (name, dtype) pairs, got {entry!r}")
            name, dtype = entry
            check_tensor_name(name)
            if name in seen:
                raise ValueError(f"variant tensor {name!r} is declared twice")
            seen.add(name)
            if dtype not in CTYPES:
                raise ValueError(f"variant tensor {name!r} has dtype {dtype!r}; supported: {', '.join(CTYPES)}")

    @property
    def digest(self) -> str:
        """10 hex digits of the sha256 of ``to_json`` (the spec name's suffix)."""
        return hashlib.sha256(json.dumps(self.to_json(), sort_keys=True).encode()).hexdigest()[:10]

    def template_vars(self) -> dict:
        """What the templates render (common/user_mod.cuh): each snippet's body (None: absent) and
        the tensors as (name, C type)."""
        return {
            "score_mod": None if self.score_mod is None else body(self.score_mod, "score_mod"),
            "mask_mod": None if self.mask_mod is None else body(self.mask_mod, "mask_mod"),
            "kv_range": None if self.kv_range is None else body(self.kv_range, "kv_range"),
            "tensors": [(n, CTYPES[d]) for n, d in self.tensors],
            "half": any(d in ("float16", "bfloat16") for _, d in self.tensors),
            # a snippet calling a MUFU function: a second MUFU instruction a logit (softmax.cuh's option
            # "x" moves a larger share of the exponentials off the unit)
            "transcendental": self.transcendental,
            # the Hopper softmax takes a score_mod's per-row part out of the exponent (not with a
            # mask_mod: a masked pair skips the score_mod); key blocks below a causal diagonal get
            # their own instance when a snippet takes kg_abs (apply_user's HOIST / NONNEG)
            "hoist": self.score_mod is not None and self.mask_mod is None,
            "nonneg": any("kg_abs" in (s or "") for s in (self.score_mod, self.mask_mod)),
            # a hoisted score_mod of straight-line code (one return, no branch) may start the Q K^T
            # accumulators from its per-key part (user_acc_init): whether it can is then the same
            # for every element, as one wgmma of the warpgroup needs (a branch could make it
            # differ by row)
            "acc": self.score_mod is not None and self.mask_mod is None
            and straight_line(body(self.score_mod, "score_mod")),
        }

    @property
    def transcendental(self) -> bool:
        """Whether the score_mod or mask_mod calls a function of the MUFU unit (``_TRANSCENDENTAL``:
        ``tanhf``, ``kg_tanh``, ``expf``, ``logf``, ``sqrtf``, ...; comments and string literals
        ignored): every logit then takes MUFU work besides the softmax's exponential, which
        ``heuristics.sm90_heavy`` weighs (head dim 64's tile).  A textual test, so a heuristic: a
        call on a per-row or constant value (``score * expf(temp[head])``) counts too, and a
        division by a run-time value (a MUFU reciprocal under --use_fast_math) does not."""
        return any(s is not None and _TRANSCENDENTAL.search(code_only(s)) is not None
                   for s in (self.score_mod, self.mask_mod))

    def to_json(self) -> dict:
        return {"score_mod": self.score_mod, "mask_mod": self.mask_mod, "kv_range": self.kv_range,
                "tensors": [list(t) for t in self.tensors]}

    @classmethod
    def from_json(cls, d: dict) -> "VariantCode":
        """From ``to_json`` output, or the warmup file format: ``tensors`` a list of [name, dtype]
        pairs or a {name: dtype} object (in order); ``name``, if there, a str (it labels messages only).
        Unknown keys raise ValueError, a ``tensors`` or ``name`` of another type TypeError."""
        if not isinstance(d, dict):
            raise TypeError(f"a variant description must be a JSON object, got {type(d).__name__}")
        extra = set(d) - {"score_mod", "mask_mod", "kv_range", "tensors", "name"}
        if extra:
            raise ValueError(f"unknown variant keys {sorted(extra)} (score_mod, mask_mod, kv_range, tensors, name)")
        if d.get("name") is not None and not isinstance(d["name"], str):
            raise TypeError(f"a variant's name must be a str, got {type(d['name']).__name__}")
        tensors = d.get("tensors") or ()
        if isinstance(tensors, dict):
            tensors = tuple(tensors.items())
        if not isinstance(tensors, (list, tuple)):
            raise TypeError(f"a variant's tensors must be a list of [name, dtype] pairs or a {{name: dtype}} object, "
                            f"got {type(tensors).__name__}")
        for t in tensors:
            if not (isinstance(t, (list, tuple)) and len(t) == 2):
                raise ValueError(f"a variant's tensors must be a {{name: dtype}} object (e.g. {{\"bias\": \"float32\"}}) "
                                 f"or a list of [name, dtype] pairs, got the entry {t!r}")
        return cls(d.get("score_mod"), d.get("mask_mod"), d.get("kv_range"), tuple(tuple(t) for t in tensors))
