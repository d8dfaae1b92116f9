"""User attention variants (``kernelgen.Variant``: score_mod / mask_mod / kv_range C++ snippets and
their tensors) on the CPU: the float64 reference's ``score_mod`` / ``mask_mod`` on hand-computed
cases and against the built-in ALiBi and soft-cap; the checks (errors name the argument); the spec
(off: no trace; on: the snippets in the name's digest, the source and the cache key, the tensors'
dtypes but not their shapes); the rendered source (``#line`` of each snippet, the program's
numbering restored after it); the decider (no fused kernel: the classes in turn on sm_90a, one
class elsewhere); the dispatcher through tests/fake_cuda.py (the tensors' addresses in AttnParams,
the prepared call's fast path, a new tensor, AttentionPlan run/attend); ``kernelgen warmup
--variant``; NVRTC builds of the five example variants (kernelgen.apps.variant_examples) for the
sm_80 16-row tile, the keys-as-rows tile and the Hopper mainloop without spills, and a broken
snippet's ``VariantCompileError`` with the snippet's own line number."""
import dataclasses
import json
import math
from pathlib import Path

import pytest
import torch

import fake_cuda as fake_cuda_mod   # (the fixture is named fake_cuda)
from test_decide import A100, H200, MIXED, sig
from test_fused_cpu import CTX, QLENS, paged_inputs

import kernelgen
from kernelgen.apps import variant_examples as X
from kernelgen.apps.reference import attention_reference
from kernelgen.jit import compiler, render
from kernelgen.kernels.params import ATTENTION_PARAMS, attention_params_for
from kernelgen.kernels.spec import AttentionSpec, FusedAttentionSpec, TileConfig, spec_from_json
from kernelgen.kernels.variant_code import VariantCode
from kernelgen.selection import decide, heuristics

BF16 = torch.bfloat16
H = 4


def _examples(device="cpu"):
    """The six example variants with CPU tensors (their code is what the kernels see)."""
    doc, ds, de, ko = X.document_ids([[3, 5], [4, 4, 4]], device=device)
    return {
        "alibi": X.alibi(torch.linspace(0.1, 0.8, H)),
        "softcap": X.softcap(30.0),
        "t5_bias": X.t5_bias(torch.randn(H, 32), X.t5_buckets()),
        "document_mask": X.document_mask(doc, ds, de, ko),
        "prefix_lm": X.prefix_lm(torch.tensor([2, 5], dtype=torch.int32)),
        "index_arith": X.index_arith(torch.linspace(0.1, 0.8, H)),
    }


# ----------------------------------------------------------------------------- the reference
def _tiny():
    q = torch.tensor([[[0.0, 0.0]], [[1.0, 0.0]]])
    k = torch.tensor([[[1.0, 0.0]], [[0.0, 0.0]], [[2.0, 0.0]]])
    v = torch.tensor([[[1.0, 0.0]], [[0.0, 1.0]], [[3.0, 3.0]]])
    return q, k, v, torch.tensor([0, 2], dtype=torch.int32), torch.tensor([0, 3], dtype=torch.int32)


def test_reference_score_mod_and_mask_mod_hand_computed():
    """Query row 1 (of 2), three keys, scale 1: logits 1, 0, 2; score_mod adds kv_idx - q_idx
    (0, -1, 1 -> 0, -1, 3); mask_mod hides key 1 -> softmax over keys 0 and 2 only."""
    q, k, v, cq, ck = _tiny()
    o, lse = attention_reference(q, k, v, cq, ck, softmax_scale=1.0,
                                 score_mod=lambda s, b, h, qi, kj, lq, lk: s + (kj - qi).double(),
                                 mask_mod=lambda b, h, qi, kj, lq, lk: kj != 1)
    w = [math.exp(0.0), math.exp(3.0)]
    z = sum(w)
    want = torch.tensor([(w[0] + 3 * w[1]) / z, 3 * w[1] / z], dtype=torch.float64)
    assert torch.allclose(o[1, 0], want, atol=1e-12)
    assert abs(lse[0, 1].item() - math.log(z)) < 1e-12


def test_reference_fully_masked_rows_give_zero_and_minus_inf():
    q, k, v, cq, ck = _tiny()
    o, lse = attention_reference(q, k, v, cq, ck, mask_mod=lambda b, h, qi, kj, lq, lk: (qi == 1) & (kj >= 0))
    assert torch.equal(o[0], torch.zeros_like(o[0])) and lse[0, 0].item() == float("-inf")
    assert torch.isfinite(lse[0, 1])


@pytest.mark.parametrize("causal", [False, True])
def test_reference_examples_equal_the_builtins(causal):
    """ALiBi and soft-cap written as score_mods give the built-in arguments' results."""
    torch.manual_seed(0)
    q, k, v = torch.randn(9, H, 16), torch.randn(14, 2, 16), torch.randn(14, 2, 16)
    cq, ck = torch.tensor([0, 4, 9], dtype=torch.int32), torch.tensor([0, 6, 14], dtype=torch.int32)
    slopes = torch.linspace(0.1, 0.8, H)
    _, sm, _ = X.alibi(slopes)
    a = attention_reference(q, k, v, cq, ck, causal=causal, alibi_slopes=slopes)
    b = attention_reference(q, k, v, cq, ck, causal=causal, score_mod=sm)
    assert torch.allclose(a[0], b[0], atol=1e-12) and torch.allclose(a[1], b[1], atol=1e-12)
    _, sm, _ = X.softcap(0.7)
    a = attention_reference(q, k, v, cq, ck, causal=causal, softcap=0.7)
    b = attention_reference(q, k, v, cq, ck, causal=causal, score_mod=sm)
    assert torch.allclose(a[0], b[0], atol=1e-12) and torch.allclose(a[1], b[1], atol=1e-12)


def test_reference_passes_kv_head_and_q_offset_to_callables_that_name_them():
    """A snippet sees kv_head and q_offset; the reference gives them, as keywords, to a callable that names
    them (or takes **kwargs), and keeps calling older seven-argument callables as before."""
    torch.manual_seed(2)
    q, k, v = torch.randn(7, 4, 16), torch.randn(9, 2, 16), torch.randn(9, 2, 16)
    cq, ck = torch.tensor([0, 3, 7], dtype=torch.int32), torch.tensor([0, 4, 9], dtype=torch.int32)
    seen = []

    def sm(score, b, head, q_idx, kv_idx, lq, lk, kv_head, q_offset):   # KV head 1's heads and request 1 biased
        seen.append((b, q_offset, kv_head.flatten().tolist()))
        return score + 0.5 * (kv_head == 1) * kv_idx + 0.25 * q_offset * (kv_idx % 2)   # (a row's constant: no effect)

    def closure(score, b, head, q_idx, kv_idx, lq, lk):   # the same, from what it can compute itself
        return score + 0.5 * (head // 2 == 1) * kv_idx + 0.25 * int(cq[b]) * (kv_idx % 2)

    a, _ = attention_reference(q, k, v, cq, ck, score_mod=sm)
    c, _ = attention_reference(q, k, v, cq, ck, score_mod=closure)
    assert torch.allclose(a, c, atol=1e-12) and not torch.allclose(a, attention_reference(q, k, v, cq, ck)[0])
    assert seen == [(0, 0, [0, 0, 1, 1]), (1, 3, [0, 0, 1, 1])]
    kw = []
    attention_reference(q, k, v, cq, ck, mask_mod=lambda b, h, qi, kj, lq, lk, **extra: kw.append(sorted(extra)) or
                        (kj >= 0))
    assert kw == [["kv_head", "q_offset"]] * 2
    # (a review) a positional parameter that happens to be named kv_head, and a functools.wraps wrapper
    # taking *args, are called as before: no keywords
    import functools

    causal_by_name = attention_reference(q, k, v, cq, ck, mask_mod=lambda b, kv_head, qi, kj, lq, lk: kj <= qi)[0]
    assert torch.allclose(causal_by_name, attention_reference(q, k, v, cq, ck, mask_mod=lambda b, h, qi, kj, lq, lk:
                                                              kj <= qi)[0], atol=0)

    @functools.wraps(sm)
    def wrapped(*args):
        return args[0] + 0.5 * args[4]

    plain = lambda score, b, head, q_idx, kv_idx, lq, lk: score + 0.5 * kv_idx   # noqa: E731
    assert torch.equal(attention_reference(q, k, v, cq, ck, score_mod=wrapped)[0],
                       attention_reference(q, k, v, cq, ck, score_mod=plain)[0])


def test_reference_document_and_prefix_masks():
    torch.manual_seed(1)
    q, k, v = torch.randn(8, H, 16), torch.randn(8, 2, 16), torch.randn(8, 2, 16)
    cq = ck = torch.tensor([0, 8], dtype=torch.int32)
    doc, ds, de, ko = X.document_ids([[3, 5]], device="cpu")
    _, _, mm = X.document_mask(doc, ds, de, ko)
    o, _ = attention_reference(q, k, v, cq, ck, causal=True, mask_mod=mm)
    o0, _ = attention_reference(q[:3], k[:3], v[:3], torch.tensor([0, 3], dtype=torch.int32),
                                torch.tensor([0, 3], dtype=torch.int32), causal=True)
    o1, _ = attention_reference(q[3:], k[3:], v[3:], torch.tensor([0, 5], dtype=torch.int32),
                                torch.tensor([0, 5], dtype=torch.int32), causal=True)
    assert torch.allclose(o, torch.cat([o0, o1]), atol=1e-12)
    # more queries than keys: the snippet's index would go negative (unchecked on the GPU, wrapped by torch)
    with pytest.raises(ValueError, match="request 0 has 8 queries and 6 keys; the mask needs q_len <= kv_len"):
        attention_reference(q, k[:6], v[:6], cq, torch.tensor([0, 6], dtype=torch.int32), causal=True,
                            mask_mod=mm)
    o, _ = attention_reference(q, k[:0], v[:0], cq, torch.tensor([0, 0], dtype=torch.int32), causal=True,
                               mask_mod=mm)   # no key at all (a decode batch's empty request): no pair, zeros
    assert torch.equal(o, torch.zeros_like(o))
    _, _, pm = X.prefix_lm(torch.tensor([8], dtype=torch.int32))   # the whole request: bidirectional
    a, _ = attention_reference(q, k, v, cq, ck, mask_mod=pm)
    b, _ = attention_reference(q, k, v, cq, ck)
    assert torch.allclose(a, b, atol=1e-12)
    _, _, pm = X.prefix_lm(torch.tensor([0], dtype=torch.int32))   # no prefix: causal
    a, _ = attention_reference(q, k, v, cq, ck, mask_mod=pm)
    b, _ = attention_reference(q, k, v, cq, ck, causal=True)
    assert torch.allclose(a, b, atol=1e-12)


# ----------------------------------------------------------------------------- checks
@pytest.mark.parametrize("kw, exc, msg", [
    (dict(), ValueError, "at least one of score_mod"),
    (dict(score_mod=3), TypeError, "score_mod must be a str"),
    (dict(mask_mod="  "), ValueError, "mask_mod is empty"),
    (dict(kv_range="kv_lo = 0;"), ValueError, "kv_range only skips"),
    (dict(score_mod="score", tensors=[1]), TypeError, "dict of name"),
    (dict(score_mod="score", tensors={"1x": torch.zeros(1)}), ValueError, "not a C identifier"),
    (dict(score_mod="score", tensors={"int": torch.zeros(1)}), ValueError, "C\\+\\+ keyword"),
    (dict(score_mod="score", tensors={"head": torch.zeros(1)}), ValueError, "collides"),
    (dict(score_mod="score", tensors={"kg_x": torch.zeros(1)}), ValueError, "reserved"),
    (dict(score_mod="score", tensors={"b": [1.0]}), TypeError, "must be a torch.Tensor"),
    (dict(score_mod="score", tensors={"b": torch.zeros(2, dtype=torch.complex64)}), ValueError, "dtype"),
    (dict(score_mod="score", tensors={"b": torch.zeros(4, 4).t()}), ValueError, "contiguous"),
    (dict(score_mod="score", tensors={f"t{i}": torch.zeros(1) for i in range(9)}), ValueError, "at most 8"),
    (dict(score_mod="score", tensors={"_Pragma": torch.zeros(1)}), ValueError, "reserved"),
    (dict(score_mod="score", tensors={"MD_BATCH": torch.zeros(1)}), ValueError, "reserved"),
    (dict(score_mod="score", tensors={"b": torch.zeros(0)}), ValueError, "empty"),
    (dict(mask_mod="#define MT 0\nreturn true;"), ValueError, "preprocessor"),
    (dict(mask_mod="return true; }\n__device__ int evil() { return 1;"), ValueError, "unmatched"),
    (dict(score_mod="(score"), ValueError, "unbalanced"),
    (dict(score_mod="score // note \\"), ValueError, "line continuation"),
    # a continuation anywhere splices lines before a lexer reads them (here it would end the comment
    # early for the compiler, and the directive after it would stand at a line's start)
    (dict(score_mod="float a; /* x *\\\n/\nreturn score;"), ValueError, "line 1 ends in a line continuation"),
    # the directive's digraph and trigraph
    (dict(score_mod="%:define min(a, b) (b)\nreturn score;"), ValueError, "preprocessor"),
    (dict(score_mod="  %:error boom\nreturn score;"), ValueError, "preprocessor"),
    (dict(score_mod="??=define X 1\nreturn score;"), ValueError, "preprocessor"),
    # a digit separator is no character literal: it must not hide the lines after it
    (dict(score_mod='int n = 1\'000; const char* s = "\'/*";\n#define min(a, b) (b)\nconst char* t = "*/";\n'
                    'return score;'), ValueError, "preprocessor"),
    (dict(score_mod='return score; /* never closed'), ValueError, "unterminated /\\* comment"),
    (dict(score_mod='const char* s = "open;\nreturn score;'), ValueError, "unterminated string literal"),
    (dict(mask_mod="kv_idx > 'a"), ValueError, "unterminated character literal"),
    (dict(score_mod="//@@kg_line_restore@@\nreturn score;"), ValueError, "@@kg_"),
    # <% and %> are braces to the compiler: they would close the function (and the balance misses them)
    (dict(score_mod="return score; %> __global__ void kg_evil(int* p) <% *p = 1;"), ValueError, "digraphs"),
    (dict(score_mod='_Pragma("nv_diag_suppress 940") if (kv_idx > 0) return score;'), ValueError, "pragma"),
    (dict(mask_mod='__pragma(pack(push, 1)) return true;'), ValueError, "pragma"),
    (dict(score_mod="score", tensors={"tanhf": torch.zeros(1)}), ValueError, "device function"),
    (dict(score_mod="score", tensors={"min": torch.zeros(1)}), ValueError, "device function"),
    (dict(score_mod="score", tensors={"printf": torch.zeros(1)}), ValueError, "device function"),
    # (a review) a predefined macro as a tensor name; a snippet of comments only; non-ASCII code with
    # its line, column and name (and the ASCII a look-alike stands for); non-ASCII in a comment is fine
    (dict(score_mod="score", tensors={"NULL": torch.zeros(1)}), ValueError, "^variant tensor name 'NULL' is a macro"),
    (dict(score_mod="score", tensors={"CUDART_VERSION": torch.zeros(1)}), ValueError, "is a macro NVRTC predefines"),
    (dict(score_mod="score", tensors={"cudaStreamDefault": torch.zeros(1)}), ValueError, "is a macro NVRTC"),
    (dict(score_mod="score", tensors={"CU_UUID_HAS_BEEN_DEFINED": torch.zeros(1)}), ValueError, "is a macro NVRTC"),
    (dict(score_mod="// nothing here\n/* at all */"), ValueError, "^score_mod holds only comments or literals"),
    (dict(score_mod='"abc"'), ValueError, "^score_mod holds only comments or literals"),
    (dict(score_mod="// a comment\n\u00a0"), ValueError, r"^score_mod line 2, column 1: U\+00A0 NO-BREAK SPACE"),
    (dict(score_mod="// \u00e9t\u00e9\nscore \u2212 1.f"), ValueError,
     r"^score_mod line 2, column 7: U\+2212 MINUS SIGN outside a comment or literal; snippet code is ASCII "
     r"\(did you mean -\?\)$"),
    (dict(mask_mod="kv_idx\u00a0<= q_idx"), ValueError, r"^mask_mod line 1, column 7: U\+00A0 NO-BREAK SPACE .*a space"),
    (dict(score_mod="float \u00e9 = score; return \u00e9;"), ValueError,
     r"^score_mod line 1, column 7: U\+00E9 LATIN SMALL LETTER E WITH ACUTE outside a comment or literal; "
     r"snippet code is ASCII$"),
])
def test_variant_checks_name_the_argument(kw, exc, msg):
    with pytest.raises(exc, match=msg):
        kernelgen.Variant(**kw)


@pytest.mark.parametrize("code", [
    "int n = 1'000; return score + (float)(n + 'a');",          # digit separators, a character literal
    "float f = 1'0.5e+1'0f; return score + f * 0.f;",
    'const char* s = R"x(\n#define no\n)x"; return score + 0.f * s[0];',   # a raw string holds a '#' line
    "return score + u8'a' * 0.f + L'b' * 0.f;",
    "return /* a # in a comment */ score;",
])
def test_snippets_a_lexer_accepts_pass_the_checks(code):
    v = kernelgen.Variant(score_mod=code)
    assert v.score_mod == code and VariantCode(score_mod=code).score_mod == code


def test_code_only_blanks_comments_and_literals_as_a_lexer_does():
    from kernelgen.kernels.variant_code import code_only

    src = "int n = 1'000; // c '\nx = 'a' + \"b'\" /* d\n e */ + R\"q(\")q\" + y;"
    out = code_only(src)
    assert [len(x) for x in out.split("\n")] == [len(x) for x in src.split("\n")]
    assert out.split("\n") == ["int n = 1'000;       ", "x =     +          ", "      +          + y;"]
    # unterminated pieces run to their line's end (a literal) or the code's end (a comment)
    assert code_only("a = \"b\nc") == "a =   \nc" and code_only("a /* b\nc") == "a     \n "
    # a raw string's delimiter has at most 16 characters: without its '(' there, R"..." is read as R and
    # a plain string (looked for in those 16 characters only, so a long run of them stays linear)
    assert code_only('R"a;' * 3) == 'R     a;R   '
    assert code_only('R"' + "x" * 17 + '(a)' + "x" * 17 + '"') == "R" + " " * 39
    # linear: a long run of comment openers ends as one unterminated comment
    assert code_only("score\n" + "/* " * 40000).strip() == "score"
    with pytest.raises(ValueError, match="unterminated /\\* comment"):
        kernelgen.Variant(score_mod="score\n" + "/* " * 40000)


@pytest.mark.parametrize("code, wrapped", [
    ("score * 2.f", True),
    ("[&] { return score * 2.f; }()", True),          # a lambda's return is its own
    ("({ float t = score; t * 2.f; })", True),        # (a statement expression: its ';' inside braces)
    ("return score;", False),
    ("float t = score * 2.f;\nreturn t;", False),
    ("if (kv_idx > q_idx) { return score; } else { return score * 2.f; }", False),
    ("{ return score; }", False),
    ("l: { return score; }", False),                                      # a label
    ("[[likely]] if (kv_idx <= q_idx) { return score; } else { return -score; }", False),   # an attribute
    ("kv_idx > 0 ? score : kv_head", True),
    ("::fmaxf(score, 0.f)", True),
])
def test_an_expression_is_wrapped_a_body_kept(code, wrapped):
    from kernelgen.kernels.variant_code import body

    assert body(code, "score_mod") == (f"return ({code}\n);\n" if wrapped else code + "\n")


def test_a_lambda_expression_snippet_compiles_on_its_own_lines(tmp_path):
    from kernelgen.jit.cache import KernelCache

    v = kernelgen.Variant(score_mod="[&] { return (float)score * 2.f; }()", mask_mod="kv_idx >= 0")
    spec = dataclasses.replace(_compile_spec("alibi", "sm80_prefill"), variant=v.code)
    assert KernelCache(tmp_path / "c").get(spec).resources["spill_stores"] == 0


def test_a_compile_error_message_stays_short_and_keeps_the_users_lines():
    """The message shows errors before warnings, at most MAX_SHOWN_DIAGNOSTICS of them, a source line
    even when it holds the word 'error', and of a long snippet only the lines near them; a body
    without a return on every path gets a hint."""
    from kernelgen.jit.compiler import MAX_SHOWN_DIAGNOSTICS, VariantCompileError

    code = VariantCode(score_mod="\n".join(f"float u{i} = 0.f;" for i in range(3000)) +
                       "\nfloat error_term = score;\nreturn error_term + nope;")
    log = []
    for i in range(3000):
        log += [f'score_mod({i + 1}): warning #177-D: variable "u{i}" was declared but never referenced',
                f"  float u{i} = 0.f;", "        ^", ""]
    log += ['score_mod(3002): error: identifier "nope" is undefined', "  return error_term + nope;",
            "                       ^", "", "1 error detected in the compilation of \"k.cu\"."]
    e = VariantCompileError("k", "\n".join(log), "/tmp/k.cu", code)
    msg = str(e)
    lines = msg.splitlines()
    assert lines[1] == '  score_mod(3002): error: identifier "nope" is undefined'
    assert lines[2] == "    return error_term + nope;"
    assert sum("score_mod(" in x for x in lines) == MAX_SHOWN_DIAGNOSTICS
    assert "  ... and 2989 more diagnostic(s) in the snippets (the .log has them all)" in lines
    assert "  3002 | return error_term + nope;" in msg and "    1 | float u0 = 0.f;" in msg
    assert "  1500 | float u1499 = 0.f;" not in msg and len(lines) < 120
    # lines as NVRTC counts them: at '\n' only (a form feed inside a line is no line end)
    ff = VariantCompileError("k", 'score_mod(2): error: identifier "nope" is undefined\n  return a + nope;\n'
                             '             ^\n', None, VariantCode(score_mod="float a = 1.f;\x0cfloat b = a;\nreturn a + nope;"))
    assert "    2 | return a + nope;" in str(ff) and "      ^" in str(ff)
    # an expression's error on the closing line kernelgen adds is shown with that line
    closing = VariantCompileError("k", "score_mod(2): error: expected an expression\n  );\n  ^\n", None,
                                  VariantCode(score_mod="score +"))
    assert "    2 | );   <- kernelgen's" in str(closing)
    missing = VariantCompileError("k", 'k.cu(1136): error: missing return statement at end of non-void function '
                                  '"kg_user_score_mod"\n1 error detected', None,
                                  VariantCode(score_mod="if (kv_idx > 0) return score;"))
    assert "must return a value on every path" in str(missing)
    # (a review) a snippet naming another snippet's variable: the hint lists what it sees
    scope = VariantCompileError("k", 'kv_range(2): error: identifier "head" is undefined\n'
                                'kv_range(3): error: identifier "q_idx" is undefined\n'
                                'mask_mod(1): error: identifier "bogus" is undefined\n3 errors detected', None,
                                VariantCode(mask_mod="kv_idx <= q_idx", kv_range="int h = 0;\nh = head;\nh = q_idx;"))
    hints = [x for x in str(scope).splitlines() if x.startswith("  (")]
    assert hints == ["  (kv_range sees kv_lo, kv_hi, batch, kv_head, q_lo, q_hi, q_len, kv_len, q_offset and the "
                     "variant's tensors: it runs once per block of query rows [q_lo, q_hi) and KV head; head is "
                     "another snippet's)"]
    # (a review) an expression given a ';' is a body without any return: the hint says so
    semi = VariantCompileError("k", 'k.cu(1136): error: missing return statement at end of non-void function '
                               '"kg_user_score_mod"\n1 error detected', None, VariantCode(score_mod="score * 2.f;"))
    assert "(score_mod has no 'return': an expression takes no ';' at its end" in str(semi)
    assert "must return a value on every path" not in str(semi)
    # the snippet NVRTC names, not the first without a 'return' (an expression has none: kernelgen adds it)
    other = VariantCompileError("k", 'k.cu(1140): error: missing return statement at end of non-void function '
                                '"kg_user_mask_mod"\n1 error detected', None,
                                VariantCode(score_mod="score * 0.5f", mask_mod="if (kv_idx <= q_idx) return true;"))
    assert "(mask_mod is written as a function body: it must return a value on every path)" in str(other)
    assert "score_mod has no" not in str(other)


def test_the_scope_hints_name_what_each_snippet_function_takes():
    """compiler.SNIPPET_SCOPES (the compile error's hint) lists the parameters of the snippet
    functions in templates/common/user_mod.cuh, in order, besides the tensors."""
    import re as _re

    from kernelgen.jit.compiler import SNIPPET_SCOPES
    src = (Path(kernelgen.__file__).resolve().parents[1] / "templates" / "common" / "user_mod.cuh").read_text()
    for what, names in SNIPPET_SCOPES.items():
        head = src[src.index(f"kg_user_{what}("):]
        params = head[head.index("(") + 1:head.index("{%")]
        assert tuple(_re.findall(r"(\w+)\s*(?:,|$)", params.strip())) == names, what


def test_variant_json_round_trip_and_with_tensors():
    v, _, _ = _examples()["t5_bias"]
    d = json.loads(json.dumps(v.to_json()))
    assert d["tensors"] == {"table": "float32", "buckets": "int32"} and d["name"] == "t5_bias"
    w = kernelgen.Variant.from_json(d, dict(v.tensors))
    assert w.code == v.code and VariantCode.from_json(d) == v.code
    with pytest.raises(ValueError, match="dtypes"):
        kernelgen.Variant.from_json(d, {"table": torch.zeros(2, dtype=torch.float16), "buckets": v.tensors["buckets"]})
    u = v.with_tensors(table=torch.zeros(7, 3))
    assert u.code == v.code and u.tensors["table"].shape == (7, 3)
    with pytest.raises(ValueError, match=r"^with_tensors: table has dtype int32, the variant's table float32 "):
        v.with_tensors(table=torch.zeros(3, dtype=torch.int32))
    # the warmup file's tensors as a list of names: the message shows the documented forms
    with pytest.raises(ValueError, match=r"^a variant's tensors must be a \{name: dtype\} object .*got the entry 'table'"):
        VariantCode.from_json({"score_mod": "score", "tensors": ["table"]})
    assert "t5_bias" in repr(v)
    # the string form, and the errors each names
    assert kernelgen.Variant.from_json(json.dumps(d), dict(v.tensors)).code == v.code
    with pytest.raises(ValueError, match=r"^with_tensors: \['bias'\] are not tensors of this variant "
                                         r"\(\['table', 'buckets'\]\)"):
        v.with_tensors(bias=torch.zeros(3))
    with pytest.raises(TypeError, match="^tensors must be a dict of name -> torch.Tensor, got list"):
        kernelgen.Variant.from_json(d, [v.tensors["table"]])
    with pytest.raises(ValueError, match=r"^the variant declares tensors \['table', 'buckets'\], got \['table'\]"):
        kernelgen.Variant.from_json(d, {"table": v.tensors["table"]})
    with pytest.raises(ValueError, match=r"got \[\]; pass them as Variant.from_json\(d, tensors=.*VariantCode.from_json"):
        kernelgen.Variant.from_json(d)
    with pytest.raises(TypeError, match="^Variant name must be a str or None, got int"):
        kernelgen.Variant(score_mod="score", name=3)


def test_variant_tensor_changed_in_place_since_it_was_made_is_refused():
    """A call checks the variant's tensors again: one made non-contiguous in place (a transpose of
    a 2-D buffer) is refused naming it (the snippets index it flat)."""
    from kernelgen.selection import variant as V

    t = torch.zeros(4, 6)
    var = kernelgen.Variant(score_mod="score + bias[kv_idx]", tensors={"bias": t})
    V.check(var, t.device)
    t.t_()
    with pytest.raises(ValueError, match=r"^variant tensor 'bias' must be contiguous and non-empty, got shape "
                                         r"\(6, 4\) and strides \(1, 6\)"):
        V.check(var, t.device)


# ----------------------------------------------------------------------------- spec and source
BASE = AttentionSpec("sm_80", "bf16", 128, 128, "causal", "soa", TileConfig(64, 64, 4, 2, 2))


def test_spec_off_leaves_no_trace_and_on_round_trips():
    assert "variant" not in BASE.to_json() and "user" not in BASE.template_vars()
    assert "user_mod" not in render.render(BASE) and "score_mod" not in render.render(BASE)
    assert attention_params_for(BASE) is ATTENTION_PARAMS
    for name, (v, _, _) in _examples().items():
        s = dataclasses.replace(BASE, variant=v.code)
        assert "_var" in s.name and s.name != BASE.name
        assert spec_from_json(json.loads(json.dumps(s.to_json()))) == s
        names = attention_params_for(s).names
        assert [n for n in names if n.startswith("user")] == [f"user{i}" for i in range(len(v.tensors))]


def test_cache_key_follows_snippets_and_dtypes_not_shapes():
    a = kernelgen.Variant(score_mod="score + bias[head]", tensors={"bias": torch.zeros(4)})
    b = kernelgen.Variant(score_mod="score + bias[head]", tensors={"bias": torch.zeros(2, 9)})  # another shape
    c = kernelgen.Variant(score_mod="score + bias[head]", tensors={"bias": torch.zeros(4, dtype=torch.float16)})
    d = kernelgen.Variant(score_mod="score - bias[head]", tensors={"bias": torch.zeros(4)})
    spec = lambda v: dataclasses.replace(BASE, variant=v.code)  # noqa: E731
    assert spec(a) == spec(b) and render.render(spec(a)) == render.render(spec(b))
    names = {spec(x).name for x in (a, c, d)}
    assert len(names) == 3
    assert len({render.render(spec(x)) for x in (a, c, d)}) == 3


def test_source_has_line_directives_and_restores_the_numbering():
    v = kernelgen.Variant(score_mod="const float x = score;\nreturn x + 1.f;", mask_mod="kv_idx <= q_idx + 5",
                          tensors={"t": torch.zeros(1, dtype=torch.bfloat16)})
    spec = dataclasses.replace(BASE, variant=v.code)
    src = render.render(spec)
    lines = src.split("\n")
    i = lines.index('#line 1 "score_mod"')
    assert lines[i + 1:i + 3] == ["const float x = score;", "return x + 1.f;"]
    assert '#line 1 "mask_mod"' in lines and "return (kv_idx <= q_idx + 5" in src
    restores = [(n, x) for n, x in enumerate(lines) if x.startswith("#line") and spec.name in x]
    assert len(restores) == 2
    for n, x in restores:       # "#line N" names the line after it: its own 1-based number is n + 1
        assert x == f'#line {n + 2} "{spec.name}.cu"'
    assert "const __nv_bfloat16* __restrict__ t" in src
    assert "//@@kg_line_restore@@" not in src


def test_fused_spec_refuses_variants():
    v = _examples()["alibi"][0]
    long = AttentionSpec("sm_80", "bf16", 128, 128, "causal", "soa", TileConfig(128, 32, 4, 2, 2), variant=v.code)
    short = AttentionSpec("sm_80", "bf16", 128, 128, "causal", "soa", TileConfig(16, 16, 1, 2, 8))
    with pytest.raises(ValueError, match="no user variant"):
        FusedAttentionSpec(long, short)


# ----------------------------------------------------------------------------- decider
def _attn_specs(r):
    return [s for s in r.specs if s.kind == "attention"]


def test_decider_gives_variant_specs():
    code = _examples()["document_mask"][0].code
    r = decide.decide(sig(variant=code), H200)
    (a,) = _attn_specs(r)
    assert a.variant == code and a.mainloop == "sm90a"
    r = decide.decide(sig(variant=code, arch="sm_80"), H200)
    (a,) = _attn_specs(r)
    assert a.variant == code and a.tile == heuristics.VARIANT_PREFILL_TILES[128]
    r = decide.decide(sig(variant=code, max_seqlen_q=1, paged=True, page_size=16, rows=2), A100)
    (a,) = _attn_specs(r)
    assert a.variant == code and a.tile.num_warps == 1
    assert not any(s.variant is not None for s in _attn_specs(decide.decide(sig(), H200)))


def test_mixed_batch_with_a_variant_runs_the_classes_in_turn_or_as_one_class():
    code = _examples()["prefix_lm"][0].code
    r = decide.decide(sig(variant=code, **MIXED), H200)
    assert r.kind == "pair" and all(s.variant == code for s in _attn_specs(r))
    r = decide.decide(sig(variant=code, **MIXED), A100)
    assert r.kind == "single" and all(s.variant == code for s in _attn_specs(r))


# ----------------------------------------------------------------------------- the dispatcher
def _plain(total_k=2000):
    return fake_cuda_mod.small_batch(total_k, num_heads_q=H)


_attn_fields = fake_cuda_mod.attention_fields
CASES = fake_cuda_mod.single_class_cases("_variant2")


@pytest.mark.parametrize("case", list(CASES))
def test_varlen_attention_passes_the_tensors(fake_cuda, case):
    kw, kinds = CASES[case]
    q, k, v, cq, ck = _plain()
    var = X.t5_bias(torch.randn(H, 32), X.t5_buckets())[0]
    for _ in range(2):                       # the validating path, then the prepared call's fast path
        fake_cuda.clear()
        kernelgen.varlen_attention(q, k, v, cq, ck, 7, 1988, causal=True, variant=var, **kw)
        assert fake_cuda.kinds() == kinds
        (f,) = _attn_fields(fake_cuda)
        assert (f["user0"], f["user1"]) == var.addresses()
    other = var.with_tensors(table=var.tensors["table"].clone())   # a new tensor: its own prepared call
    fake_cuda.clear()
    kernelgen.varlen_attention(q, k, v, cq, ck, 7, 1988, causal=True, variant=other, **kw)
    (f,) = _attn_fields(fake_cuda)
    assert (f["user0"], f["user1"]) == other.addresses() != var.addresses()


def test_prepared_calls_are_cached_per_variant(fake_cuda, monkeypatch):
    from kernelgen.front import api

    q, k, v, cq, ck = _plain()
    var = X.alibi(torch.rand(H))[0]
    kernelgen.varlen_attention(q, k, v, cq, ck, 7, 1988, variant=var, arch="sm_80")
    calls = []
    monkeypatch.setattr(api, "_validated_call", lambda *a, **kw: calls.append(1))
    kernelgen.varlen_attention(q, k, v, cq, ck, 7, 1988, variant=var, arch="sm_80")
    assert calls == []                      # the fast path: no validation again
    kernelgen.varlen_attention(q, k, v, cq, ck, 7, 1988, variant=X.softcap(20.0)[0], arch="sm_80")
    assert calls == [1]


def test_varlen_attention_checks_variant(fake_cuda):
    q, k, v, cq, ck = _plain()
    with pytest.raises(TypeError, match="variant must be a kernelgen.Variant"):
        kernelgen.varlen_attention(q, k, v, cq, ck, variant="score")
    var = kernelgen.Variant(score_mod="score", tensors={"t": torch.zeros(1, device="meta")})
    with pytest.raises(ValueError, match="variant tensor 't' is on meta"):
        kernelgen.varlen_attention(q, k, v, cq, ck, variant=var)
    assert fake_cuda.kinds() == []


@pytest.mark.parametrize("arch", [None, "sm_80"])
def test_mixed_call_with_a_variant(fake_cuda, arch, monkeypatch):
    # the decision itself: no tiered first call (its sm_80 recipe while the Hopper kernel builds;
    # tests/test_tiered_cpu.py)
    monkeypatch.setenv("KERNELGEN_TIERED_COMPILE", "0")
    q, kc, vc, cu_q, used, pt = paged_inputs(QLENS, CTX)
    var = X.prefix_lm(torch.zeros(len(QLENS), dtype=torch.int32))[0]
    kernelgen.varlen_attention(q, kc, vc, cu_q, None, max(QLENS), max(CTX), seqused_k=used, page_table=pt,
                               variant=var, arch=arch)
    kinds = fake_cuda.kinds()
    if arch is None:   # the classes in turn: Hopper long class, sm_80 decode class
        assert kinds[:4] == ["scheduler", "scheduler", "attention_sm90_variant1", "attention_variant1"]
    else:
        assert kinds[:2] == ["scheduler", "attention_variant1"]
    assert "fused" not in kinds and "fused_sm90" not in kinds
    assert {f["user0"] for f in _attn_fields(fake_cuda)} == {var.addresses()[0]}


def test_plan_run_and_attend_pass_the_tensors(fake_cuda, monkeypatch):
    import fake_cuda as FC

    var = X.alibi(torch.rand(H))[0]
    plan = FC.make_plan(monkeypatch, max_batch=4, num_heads_q=H, num_heads_kv=2, head_dim=64, dtype=BF16,
                        max_seqlen_q=1, max_seqlen_k=4096, paged=False, arch="sm_80", variant=var)
    assert plan.attn_spec.variant == var.code
    q, k, v, cq, ck = _plain()
    q = q[:2]
    cq = torch.tensor([0, 1, 2], dtype=torch.int32)
    for step_var, want in ((None, var), (var, var), (var.with_tensors(slopes=torch.rand(H)), None)):
        fake_cuda.clear()
        plan.run(q, k, v, cq, ck, variant=step_var)
        (f,) = _attn_fields(fake_cuda)
        assert f["user0"] == (want or step_var).addresses()[0]
    fake_cuda.clear()
    plan.schedule(cq, ck)
    plan.attend(q, k, v, cq, ck)
    (f,) = _attn_fields(fake_cuda)
    assert f["user0"] == var.addresses()[0]
    with pytest.raises(ValueError, match="other snippets"):
        plan.run(q, k, v, cq, ck, variant=X.softcap(3.0)[0])
    plain = FC.make_plan(monkeypatch, max_batch=4, num_heads_q=H, num_heads_kv=2, head_dim=64, dtype=BF16,
                         max_seqlen_q=1, max_seqlen_k=4096, arch="sm_80")
    with pytest.raises(ValueError, match="made without one"):
        plain.run(q, k, v, cq, ck, variant=var)


def test_a_plan_step_without_variant_takes_the_plan_variants_live_tensors(fake_cuda, monkeypatch):
    """A step that passes no variant runs the plan's; its tensors' addresses key the prepared step, as a
    step's variant= does: a plan tensor given new storage in place (set_, a resize past its capacity)
    prepares the step again (it launched with the freed address: a review's find)."""
    import fake_cuda as FC

    var = X.alibi(torch.rand(H))[0]
    plan = FC.make_plan(monkeypatch, max_batch=4, num_heads_q=H, num_heads_kv=2, head_dim=64, dtype=BF16,
                        max_seqlen_q=1, max_seqlen_k=4096, arch="sm_80", variant=var)
    q, k, v, _, ck = _plain()
    q, cq = q[:2], torch.tensor([0, 1, 2], dtype=torch.int32)
    t = next(iter(var.tensors.values()))
    plan.run(q, k, v, cq, ck)
    old = t.data_ptr()
    t.set_(torch.rand(H))
    assert t.data_ptr() != old
    fake_cuda.clear()
    plan.run(q, k, v, cq, ck)
    (f,) = _attn_fields(fake_cuda)
    assert f["user0"] == t.data_ptr()


# ----------------------------------------------------------------------------- warmup
def test_warmup_specs_and_cli_with_a_variant(tmp_path, monkeypatch, capsys):
    from kernelgen.apps import cli
    from kernelgen.selection.catalog import warmup_specs

    code = _examples()["document_mask"][0].code
    kw = dict(head_dims=(128,), dtypes=("bf16",), layouts=("soa",), phases=("prefill", "decode"), paged=(False, True))
    specs = warmup_specs("sm_90a", variants=[code], **kw)
    attn = [s for s in specs if s.kind == "attention"]
    assert attn and all(s.variant == code for s in attn)
    assert not any(s.kind == "fused" for s in specs)
    # GQA: the Hopper kernels packed as calls of short requests take them (heuristics.SM90_VARIANT_PACK_AUTO)
    packed = [s for s in warmup_specs("sm_90a", variants=[code], gqas=(8,), **kw)
              if s.kind == "attention" and s.mainloop == "sm90a" and s.pack_gqa]
    assert packed and all(s.variant == code for s in packed)
    assert {s.paged for s in packed} == {False, True}
    f = tmp_path / "doc.json"
    f.write_text(json.dumps(_examples()["document_mask"][0].to_json()))
    seen = {}
    monkeypatch.setattr(cli, "warmup", lambda specs, root, **k: seen.setdefault("specs", specs) and (len(specs), 0))
    rc = cli.main(["warmup", "--arch", "sm_80", "--head-dim", "128", "--dtype", "bf16", "--layout", "soa",
                   "--cache-dir", str(tmp_path / "cache"), "--variant", str(f)])
    assert rc == 0
    assert all(s.variant == code for s in seen["specs"] if s.kind == "attention")
    bad = tmp_path / "bad.json"
    bad.write_text('{"score_mod": 3}')
    assert cli.main(["warmup", "--arch", "sm_80", "--cache-dir", str(tmp_path / "cache"), "--variant", str(bad)]) == 2
    assert "bad.json" in capsys.readouterr().err


# ----------------------------------------------------------------------------- NVRTC builds
def _compile_spec(name, where):
    v = _examples()[name][0]
    if where == "sm80_prefill":        # what the decider gives arch="sm_80" prefill at d 128 (64-row tile)
        vv = heuristics.choose("sm_80", "bf16", 128, 128, num_heads_q=32, num_heads_kv=8, mask="causal",
                               max_seqlen_q=4096, max_seqlen_k=4096, mainloop="sm80", variant=v.code)
        return vv.attention
    if where == "sm80_on_sm90a_split":  # the sm_80 mainloop compiled for sm_90a, split-KV
        vv = heuristics.choose("sm_90a", "bf16", 128, 128, num_heads_q=32, num_heads_kv=8, mask="causal",
                               max_seqlen_q=700, max_seqlen_k=9000, num_splits=3, mainloop="sm80", variant=v.code)
        return vv.attention
    if where == "sm80_decode_pack_split_paged":
        vv = heuristics.choose("sm_80", "bf16", 128, 128, num_heads_q=32, num_heads_kv=8, mask="none",
                               max_seqlen_q=1, max_seqlen_k=8192, paged=True, num_splits=4, variant=v.code)
        assert vv.attention.pack_gqa and vv.attention.split
        return vv.attention
    if where == "keys_as_rows":
        return AttentionSpec("sm_80", "fp16", 128, 128, "none", "soa", TileConfig(8, 16, 1, 4, 1), pack_gqa=True,
                             split=True, paged=True, variant=v.code)
    if where == "sm90a_prefill":
        vv = heuristics.choose("sm_90a", "bf16", 128, 128, num_heads_q=32, num_heads_kv=8, mask="causal",
                               max_seqlen_q=4096, max_seqlen_k=4096, variant=v.code)
        assert vv.attention.mainloop == "sm90a"
        return vv.attention
    if where == "sm90a_paged_split":
        vv = heuristics.choose("sm_90a", "bf16", 128, 128, num_heads_q=32, num_heads_kv=8, mask="none",
                               max_seqlen_q=700, max_seqlen_k=9000, paged=True, page_size=16, num_splits=3,
                               variant=v.code)
        assert vv.attention.mainloop == "sm90a" and vv.attention.split
        return vv.attention
    if where == "sm90a_gather":           # paged, page size unknown: the producers gather rows (kv_range there too)
        vv = heuristics.choose("sm_90a", "bf16", 128, 128, num_heads_q=32, num_heads_kv=8, mask="causal",
                               max_seqlen_q=700, max_seqlen_k=9000, paged=True, page_size=0, variant=v.code)
        assert "g" in vv.attention.sm90_opts
        return vv.attention
    if where.startswith("sm90a_packed"):   # pack-GQA on the Hopper kernel, asked for (pack_gqa=True)
        d, hq = (64, 64) if where.endswith("d64") else (128, 32)
        paged = "paged" in where
        vv = heuristics.choose("sm_90a", "bf16", d, d, num_heads_q=hq, num_heads_kv=8,
                               mask="none" if paged else "causal", max_seqlen_q=700, max_seqlen_k=9000, paged=paged,
                               page_size=64 if paged else 0, num_splits=3 if paged else 1, pack_gqa=True,
                               variant=v.code)
        a = vv.attention
        assert a.mainloop == "sm90a" and a.pack_gqa and a.split == paged, a.name
        assert a.tile.num_warps == (12 if d == 64 else 8), a.name
        if d == 64 and name in SPILL_ON_THREE:   # the call takes the first twin (selection.spills): 2 WGs, packed
            vv = heuristics.choose("sm_90a", "bf16", d, d, num_heads_q=hq, num_heads_kv=8, mask="causal",
                                   max_seqlen_q=700, max_seqlen_k=9000, pack_gqa=True, variant=v.code,
                                   variant_spills=1)
            assert vv.attention.mainloop == "sm90a" and vv.attention.pack_gqa and vv.attention.tile.num_warps == 8, \
                vv.attention.name
            return vv.attention
        return a
    raise AssertionError(where)


#: Examples whose kernel on head dim 64's three-warpgroup tile spills, packed or not (NVRTC 13.0: the
#: causal T5 bias 68 bytes, index_arith 56-336); a call takes the two-warpgroup twin (selection.spills,
#: tests/test_spills_cpu.py).
SPILL_ON_THREE = ("index_arith", "t5_bias")


WHERE = ("sm80_prefill", "sm80_on_sm90a_split", "sm80_decode_pack_split_paged", "keys_as_rows", "sm90a_prefill",
         "sm90a_paged_split", "sm90a_gather", "sm90a_packed", "sm90a_packed_d64", "sm90a_packed_paged_split")


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("name", X.EXAMPLES)
def test_example_variants_compile_without_spills(name, where):
    spec = _compile_spec(name, where)
    res = compiler.compile_cubin(render.render(spec), spec.arch, compiler.default_options(spec.arch), spec.name)
    r = res.resources
    assert r["spill_stores"] == 0 and r["spill_loads"] == 0 and r["stack_frame"] == 0, (spec.name, r)
    assert r["registers"] * spec.num_threads <= 65536 // spec.tile.min_blocks, (spec.name, r)
    if spec.mainloop == "sm90a":
        for c in ("C7508", "C7510", "C7519"):   # setmaxnreg honoured, wgmmas kept asynchronous
            assert c not in res.log, res.log


@pytest.mark.parametrize("where", ["sm80_prefill", "sm90a_prefill"])
def test_a_broken_snippet_names_its_own_line(tmp_path, monkeypatch, where):
    from kernelgen.jit.cache import KernelCache

    v = kernelgen.Variant(score_mod="const float x = score;\nreturn x + undefined_thing;",
                          mask_mod="kv_idx >= 0", tensors={"bias": torch.zeros(1)})
    spec = dataclasses.replace(_compile_spec("alibi", where), variant=v.code)
    with pytest.raises(kernelgen.VariantCompileError) as e:
        KernelCache(tmp_path / "c").get(spec)
    msg = str(e.value)
    assert "score_mod(2)" in msg and "undefined_thing" in msg
    assert "  2 | return x + undefined_thing;" in msg
    assert isinstance(e.value, ValueError) and isinstance(e.value, kernelgen.CompileError)
    assert "score_mod(2)" in e.value.log
    import pickle

    again = pickle.loads(pickle.dumps(e.value))
    assert str(again) == msg


def test_the_variants_guide_shows_the_tested_snippets():
    """docs/variants.md's examples are the snippets of kernelgen.apps.variant_examples (the ones the
    GPU tests check against the float64 reference), not untested look-alikes."""
    from pathlib import Path
    page = Path(__file__).resolve().parents[1].joinpath("docs", "variants.md").read_text()
    ex = _examples()
    snippets = [ex["alibi"][0].code.score_mod, ex["document_mask"][0].code.mask_mod,
                ex["prefix_lm"][0].code.mask_mod, ex["prefix_lm"][0].code.kv_range,
                X.softcap(50.0)[0].code.score_mod]
    for s in snippets:
        body = s.strip()
        if body.startswith("return (") and body.endswith(");"):
            body = body[len("return ("):-2]
        assert body in page, body
    for line in ex["t5_bias"][0].code.score_mod.strip().splitlines() + ex["document_mask"][0].code.kv_range.strip().splitlines():
        assert line.strip() in page, line


def test_return_in_a_comment_or_string_does_not_make_a_body():
    from kernelgen.kernels.variant_code import body
    assert body("score * 2.0f // return the doubled score", "score_mod").startswith("return (score")
    assert body('score + 0.f /* "return" */', "score_mod").startswith("return (")
    assert body("if (score > 0.f) return score;\nreturn 0.f;", "score_mod").startswith("if (")
    assert hash(kernelgen.kernels.variant_code.VariantCode("score", tensors=(["b", "float32"],))) == \
        hash(kernelgen.kernels.variant_code.VariantCode("score", tensors=(("b", "float32"),)))


def test_variant_tensors_are_read_only_and_rechecked_per_call():
    from kernelgen.selection import variant as V
    t = torch.zeros(4)
    var = kernelgen.Variant(score_mod="score + b[head]", tensors={"b": t})
    with pytest.raises(TypeError):
        var.tensors["b"] = torch.zeros(4, dtype=torch.float64)
    V.check(var, t.device)
    t.data = torch.zeros(4, dtype=torch.float64)      # the same tensor object, changed in place
    with pytest.raises(ValueError, match="dtype"):
        V.check(var, t.device)


def test_a_body_that_can_end_without_returning_is_a_compile_error(tmp_path):
    from kernelgen.jit.cache import KernelCache
    v = kernelgen.Variant(mask_mod="if (kv_idx > q_idx) return false;")
    vv = heuristics.choose("sm_80", "bf16", 64, 64, num_heads_q=4, num_heads_kv=4, mask="none", max_seqlen_q=1,
                           max_seqlen_k=512, variant=v.code)
    with pytest.raises(kernelgen.VariantCompileError, match="missing return statement"):
        KernelCache(tmp_path).get(vv.attention)


@pytest.mark.parametrize("what", ["score_mod", "mask_mod"])
def test_a_return_without_a_value_is_refused(what):
    """``return;`` in a score_mod / mask_mod compiled (NVRTC's warning 117 only, unseen when the build
    succeeds) and left the logit or the mask bit undefined: refused when the Variant is made, in any
    spacing; in a comment or a string literal it is no statement and passes."""
    for bad in ("return;", "if (q_idx > 3) return score;\nreturn ;", "if (kv_idx > q_idx) { return\n; }\nreturn true;"):
        with pytest.raises(ValueError, match=rf"^{what} contains 'return;' without a value: every path of a {what} "
                                             r"must return "):
            kernelgen.Variant(**{what: bad})
    ok = "score" if what == "score_mod" else "true"
    kernelgen.Variant(**{what: f"return {ok}; // return;"})
    kernelgen.Variant(**{what: f"/* return; */ return {ok};"})
    kernelgen.Variant(kv_range="if (kv_len == 0) return;\nkv_hi = kv_len;", mask_mod="true")   # (statements: allowed)


@pytest.mark.parametrize("arch,mainloop", [("sm_80", "sm80"), ("sm_90a", "sm90a")])
def test_a_mask_mod_returning_a_tensor_pointer_is_a_compile_error(tmp_path, arch, mainloop):
    """A user tensor named without an index is a non-null pointer; as a bool it would keep every
    pair.  The mask_mod's return type (user_mod.cuh's kg_mask_ret) stops the compile instead, naming
    the mistake, in the expression and the body forms; an indexed tensor of any dtype and a kg_idx
    still convert as a bool function's return converts them."""
    from kernelgen.jit.cache import KernelCache

    def spec(mask_mod, dtype="uint8"):
        v = kernelgen.Variant(mask_mod=mask_mod, tensors={"allowed": torch.zeros(4, dtype=getattr(torch, dtype))})
        return heuristics.choose(arch, "bf16", 64, 64, num_heads_q=4, num_heads_kv=4, mask="none",
                                 max_seqlen_q=128, max_seqlen_k=512, mainloop=mainloop, variant=v.code).attention

    for bad, line in (("allowed", 1), ("allowed + kv_idx", 1), ("if (kv_idx > q_idx) return false;\nreturn allowed;", 2)):
        with pytest.raises(kernelgen.VariantCompileError, match=r"mask_mod returned a pointer: index the tensor") as e:
            KernelCache(tmp_path / "c").get(spec(bad))
        # shown at the snippet's line (NVRTC's "at line n of mask_mod" below an error in kernelgen's code)
        assert f"\n  mask_mod({line}): error: static assertion failed" in str(e.value), str(e.value)
    for good, dtype in (("allowed[kv_idx]", "uint8"), ("allowed[kv_idx]", "float32"), ("allowed[kv_idx] != 0", "int32"),
                        ("kv_idx - q_idx", "uint8"), ("if (kv_idx > q_idx) return 0;\nreturn allowed[0];", "int64"),
                        # (a review's: `return {};` is a bool's false; a conversion operator need not be const)
                        ("if (kv_idx > q_idx) return {};\nreturn true;", "uint8"),
                        ("struct S { int v; __device__ operator bool() { return v != 0; } };\n"
                         "S s{(int)kv_idx};\nreturn s;", "uint8")):
        KernelCache(tmp_path / "c").get(spec(good, dtype))


@pytest.mark.parametrize("arch,mainloop", [("sm_80", "sm80"), ("sm_90a", "sm90a")])
def test_a_body_snippet_missing_its_last_semicolon_is_shown_at_its_last_line(tmp_path, arch, mainloop):
    """NVRTC reports a body snippet's missing final ';' at the '}' kernelgen closes the function with
    (a line of the rendered .cu, after the snippet's numbering ends); the error names the snippet's
    last line instead, with the hint, whatever blank lines follow it."""
    import os
    import pickle

    from kernelgen.jit.cache import KernelCache
    # (what reported at which line; the other snippets present) - a review's cases: a trailing comment
    # is not the last statement, a lone '\r' is no line end to NVRTC, a comment holding a '#line' text
    ok_mask = "kv_idx <= q_idx"
    for what, snippet, line, others in (
            ("mask_mod", "int a = (int)kv_idx;\nreturn q_idx >= a\n\n", 2, {}),
            ("score_mod", "const float x = score * 2.f;\nreturn x", 2, {}),
            ("mask_mod", "int a = (int)kv_idx;\nreturn q_idx >= a\n// a comment\n/* and\n another */", 2, {}),
            ("mask_mod", "int a = (int)kv_idx;\rint b = a;\nreturn q_idx >= b", 2, {}),
            ("mask_mod", '/*\n#line 1 "score_mod"\n*/\nreturn q_idx >= kv_idx', 4, {"score_mod": "score * 2.f"}),
            ("kv_range", "kv_hi = kg_min(kv_hi, q_hi)", 1, {"mask_mod": ok_mask})):
        v = kernelgen.Variant(**{what: snippet}, **others)
        vv = heuristics.choose(arch, "bf16", 64, 64, num_heads_q=4, num_heads_kv=4, mask="none", max_seqlen_q=128,
                               max_seqlen_k=512, mainloop=mainloop, variant=v.code)
        with pytest.raises(kernelgen.VariantCompileError) as e:
            KernelCache(tmp_path / "c").get(vv.attention)
        assert f'\n  {what}({line}): error: expected a ";" (at the snippet\'s end: a \';\' missing after its last ' \
               "statement?)" in str(e.value), str(e.value)
    # the full NVRTC log is saved beside the source, and the message says where (a CLI user reads no .log)
    from kernelgen.jit.compiler import log_path_of
    assert f"the full NVRTC log is saved at {log_path_of(e.value.source_path)}" in str(e.value)
    with open(log_path_of(e.value.source_path)) as f:
        assert f.read() == e.value.log
    # (a review) nothing saved: the message says so rather than "saved at None"
    unsaved = kernelgen.VariantCompileError(e.value.name, e.value.log, None, e.value.code)
    assert "None" not in str(unsaved).splitlines()[-1]
    assert str(unsaved).endswith("(the full NVRTC log is the exception's .log; the rendered source could not be saved)")
    # the message as it was made after a pickle round trip, also once the saved source is gone or unreadable
    msg = str(e.value)
    for damage in ("delete", "garble"):
        if damage == "delete":
            os.remove(e.value.source_path)
        else:
            with open(e.value.source_path, "wb") as f:
                f.write(b"\xff\xfe#line\n}\n")
        assert str(pickle.loads(pickle.dumps(e.value))) == msg
        if damage == "delete":
            with open(e.value.source_path, "wb") as f:
                f.write(b"")
    # built afresh over a garbled source: no exception of its own, NVRTC's error still shown
    again = kernelgen.VariantCompileError(e.value.name, e.value.log, e.value.source_path, e.value.code)
    assert 'error: expected a ";"' in str(again)


# ----------------------------------------------------------------------------- the index type (kg_idx)
def _sass_ops(spec, opcodes):
    from kernelgen.jit import sass
    tool = sass.find_nvdisasm()
    assert tool is not None, "nvdisasm is needed: pip install nvidia-cuda-nvdisasm (the test extra)"
    options = compiler.default_options(spec.arch) + (compiler.VARIANT_OPTIONS if spec.variant is not None else ())
    res = compiler.compile_cubin(render.render(spec), spec.arch, options, spec.name)
    text = sass.disassemble(res.cubin, tool)
    return {op: len(__import__("re").findall(rf"\b{op}\b", text)) for op in opcodes}, res.resources


def test_alibi_score_mod_converts_no_index_per_logit():
    """ALiBi written with the snippets' indices, ``(float)(q_idx + kv_len - q_len - kv_idx)``, builds
    a Hopper kernel with no int-to-float conversion per logit: the indices' float copies (kg_idx)
    carry it.  With int indices it had 128 I2FP (one per logit of the peeled and the looped key
    block); the built-in ALiBi kernel has 4."""
    code = VariantCode(score_mod="score - slopes[head] * fabsf((float)(q_idx + kv_len - q_len - kv_idx))",
                       tensors=(("slopes", "float32"),))
    kw = dict(num_heads_q=32, num_heads_kv=8, mask="causal", max_seqlen_q=16384, max_seqlen_k=16384)
    var = heuristics.choose("sm_90a", "bf16", 128, 128, variant=code, **kw).attention
    builtin = heuristics.choose("sm_90a", "bf16", 128, 128, alibi=True, **kw).attention
    ops = ("I2F", "I2FP", "FADD", "HGMMA")
    v_ops, v_res = _sass_ops(var, ops)
    b_ops, _ = _sass_ops(builtin, ops)
    assert v_ops["HGMMA"] == b_ops["HGMMA"] > 0
    assert v_ops["I2F"] + v_ops["I2FP"] <= b_ops["I2F"] + b_ops["I2FP"] + 4, (v_ops, b_ops)
    assert v_res["spill_stores"] == 0 and v_res["stack_frame"] == 0, v_res


def test_alibi_score_mod_on_indices_costs_one_ffma_a_logit_below_the_diagonal(monkeypatch):
    """ALiBi written on the indices, ``slopes[head] * kg_abs(q_idx + kv_len - q_len - kv_idx)`` (and
    without kg_abs, as causal ALiBi can be), builds a Hopper causal kernel whose key blocks below the
    diagonal take the bias as the built-in's FFMA form does (KG_ALIBI_ACC=0; the default built-in
    starts its accumulators from the bias, which snippets do only with the experiment KG_USER_ACC=1):
    the per-row part leaves the scores (softmax_scores' roff), the scale stays in the exponent and
    each logit gets one FFMA, raw + (slope / scale) * its key's column, no add for the distance and
    no product (common/user_mod.cuh: kg_rowcol, apply_user_hoist, NONNEG).  With fabsf on a float cast it takes the distance, the product and
    the FFMA per logit (1.07-1.14x the built-in's time on the H200); ``return score;`` costs what
    the plain kernel does, and ``50.f * tanhf(score / 50.f)`` one multiply a logit besides the tanh.  Counts over the whole kernel: the peeled (last, clamped) key block, the
    loop's block and, with kg_abs, the loop's masked (diagonal) block."""
    kw = dict(num_heads_q=32, num_heads_kv=8, mask="causal", max_seqlen_q=16384, max_seqlen_k=16384)
    ops = ("FFMA", "FADD", "FMUL", "HGMMA")

    def counts(score_mod=None, **extra):
        code = None if score_mod is None else VariantCode(
            score_mod=score_mod, tensors=(("slopes", "float32"),) if "slopes" in score_mod else ())
        spec = heuristics.choose("sm_90a", "bf16", 128, 128, variant=code, **kw, **extra).attention
        return _sass_ops(spec, ops)[0], spec

    plain, _ = counts()
    ident, _ = counts("return score;")
    monkeypatch.setenv(compiler.DEFINES_ENV, "KG_ALIBI_ACC=0")   # the built-in's FFMA form
    builtin, _ = counts(alibi=True)
    monkeypatch.delenv(compiler.DEFINES_ENV)
    linear, _ = counts("score - slopes[head] * (q_idx + kv_len - q_len - kv_idx)")
    absd, spec = counts("score - slopes[head] * kg_abs(q_idx + kv_len - q_len - kv_idx)")
    floatd, _ = counts("score - slopes[head] * fabsf((float)(q_idx + kv_len - q_len - kv_idx))")
    capped, cspec = counts("50.f * tanhf(score / 50.f)")
    # the soft-cap snippet's kernel takes option "m" (heuristics.with_mask_split: one more copy of the
    # key block); the plain kernel with the same options is its baseline
    assert "m" in cspec.sm90_opts
    plain_m, _ = counts(sm90_opts=cspec.sm90_opts)
    assert "apply_user_hoist<false, true>" in render.render(spec)      # the below-diagonal instance
    per_block = 64                                                     # logits a thread a key block
    assert builtin["HGMMA"] == linear["HGMMA"] == absd["HGMMA"] > 0
    assert ident["FMUL"] <= plain["FMUL"] + 8 and ident["FFMA"] <= plain["FFMA"] + 8, (ident, plain)
    for form in (linear, absd):
        assert form["FMUL"] <= builtin["FMUL"] + 16, (form, builtin)
    assert linear["FFMA"] <= builtin["FFMA"] + 8, (linear, builtin)
    assert linear["FADD"] <= builtin["FADD"] + 16, (linear, builtin)
    # kg_abs: the same below the diagonal; the general form (an add and an FFMA a logit) on the
    # peeled block and the loop's masked one
    assert absd["FADD"] <= builtin["FADD"] + 2 * per_block + 16, (absd, builtin)
    assert absd["FFMA"] <= builtin["FFMA"] + per_block + 8, (absd, builtin)
    assert floatd["FADD"] >= plain["FADD"] + 2 * per_block and floatd["FMUL"] >= plain["FMUL"] + per_block
    # FA4's soft-cap score_mod: the cap stays a scale (one multiply a logit, raw * scale / 50, not two)
    # in each of the three copies of the block (peeled, masked, unmasked)
    assert capped["HGMMA"] == plain_m["HGMMA"] > plain["HGMMA"]
    assert capped["FMUL"] <= plain_m["FMUL"] + 3 * per_block + 8, (capped, plain_m)


def test_builtin_causal_alibi_adds_no_ffma_a_logit(monkeypatch):
    """The built-in causal ALiBi on the Hopper kernel starts the Q K^T accumulators from the bias's
    per-key part (common/alibi.cuh, alibi_acc_init): its key-block loop has the plain kernel's FFMAs
    (the exponents) and no FFMA a logit, the first wgmma of every block accumulates (no zero
    accumulator, RZ), and the FFMA form (KG_ALIBI_ACC=0) has one FFMA a logit more."""
    from sass_loops import shortest_loop

    from kernelgen.jit import sass
    kw = dict(num_heads_q=32, num_heads_kv=32, mask="causal", max_seqlen_q=16384, max_seqlen_k=16384)

    def loop(**extra):
        spec = heuristics.choose("sm_90a", "bf16", 128, 128, **kw, **extra).attention
        options = compiler.default_options(spec.arch) + (compiler.VARIANT_OPTIONS if spec.variant is not None else ())
        res = compiler.compile_cubin(render.render(spec), spec.arch, options, spec.name)
        assert res.resources["spill_stores"] == 0 and res.resources["stack_frame"] == 0, res.resources
        text = sass.disassemble(res.cubin, sass.find_nvdisasm())
        return shortest_loop(text, "HGMMA", 12), text

    def ops(body, op):
        return sum(1 for x in body if x.split()[0].split(".")[0] == op)
    plain, _ = loop()
    acc, text = loop(alibi=True)
    # ALiBi as a linear snippet starts its accumulators the same way with the experiment KG_USER_ACC=1
    monkeypatch.setenv(compiler.DEFINES_ENV, "KG_USER_ACC=1")
    snippet, _ = loop(variant=VariantCode(score_mod="score - slopes[head] * (q_idx + kv_len - q_len - kv_idx)",
                                          tensors=(("slopes", "float32"),)))
    monkeypatch.setenv(compiler.DEFINES_ENV, "KG_ALIBI_ACC=0")
    ffma, _ = loop(alibi=True)
    per_block = 64   # logits a thread a key block
    assert ops(acc, "FFMA") <= ops(plain, "FFMA") + 4, (ops(acc, "FFMA"), ops(plain, "FFMA"))
    assert ops(ffma, "FFMA") >= ops(plain, "FFMA") + per_block
    # (its loop: the starts as 32 FFMAs with a zero addend instead of 32 FMULs, nothing a logit more)
    assert ops(snippet, "FFMA") + ops(snippet, "FMUL") <= ops(acc, "FFMA") + ops(acc, "FMUL") + 8
    assert ops(snippet, "FADD") <= ops(acc, "FADD") + 8
    assert not [x for x in text.splitlines() if "HGMMA" in x and "gdesc" in x and ", RZ" in x and ".tnspB" not in x]
    assert ops(plain, "HGMMA") == ops(acc, "HGMMA") > 0


_INDEX_FORMS = """
auto d = q_idx + kv_len - q_len - kv_idx;   // kg_idx
kg_idx d2 = -d; d2 = 5; d2 = 2.7f; d2 += d; d2 -= kv_idx; d2 *= 2; d2 /= 3; d2 %= 5; d2 <<= 1; d2 >>= 1;
d2 &= 7; d2 |= 1; d2 ^= 2; d2 += 1u; d2 -= 2ll; ++d2; --d2; d2++; d2--;
const int i0 = d, i1 = q_idx * 2, i2 = kv_idx / 3, i3 = q_idx % 4, i4 = kv_idx & 1, i5 = q_idx >> 1, i6 = ~kv_idx;
const unsigned u0 = kv_idx + 1u;
const long long l0 = (long long)kv_idx * 3 + q_offset, l1 = kv_idx + 2ll;
const bool b0 = q_idx < kv_idx, b1 = q_idx == 3, b2 = !kv_idx, b3 = q_idx && kv_idx, b4 = d < 0.5f;
if (q_idx) {}
switch (kv_idx) { default: break; }
const float f0 = (float)d, f1 = static_cast<float>(kv_idx), f2 = float(q_len), f3{kv_len};
const float f4 = 0.5f * d + d * 0.5f + 1.5f - d + d - 1.5f + d / 2.f + 2.f / (kv_len + 1);
const double g0 = (double)d + 0.5 * q_idx + (q_idx + 0.25);
const float f5 = fabsf(d) + to_float(kv_idx - q_idx) + kg_log(kv_len + 1) + kg_exp(-q_idx) + float(kg_abs(d));
const int c0 = clamp(kv_idx - q_idx, -8, 8), c1 = kg_min(q_idx, 4), c2 = kg_max(3, kv_idx), c3 = min(q_idx, 5);
const int c4 = max(kv_idx, q_idx), c5 = abs(d), c6 = b0 ? q_idx : kv_idx, c7 = b1 ? q_idx : 0;
const float h0 = kg_max(q_idx, 2.5f), h1 = clamp(d, -1.5f, 1.5f), h2 = b2 ? d : 0.5f;
const int t0 = slopes_i[q_idx] + slopes_i[kv_idx + 1] + slopes_i[clamp(d, 0, 3)];
auto s0 = score / 50.f; auto s1 = 2 * score * 0.5; auto s2 = -score; auto s3 = score;
s3 += 1.f; s3 -= 0.5f; s3 *= 2; s3 /= 2.f; s3 = s0; s3 = 1.5f; s3 = q_idx;
const float k0 = tanhf(s0) + fmaxf(score, 0.f) + max(score, 1.f) + (score > 0 ? score : 0.f) + (b0 ? score : -score);
const float k1 = score * q_idx + q_idx * score + score / (kv_idx + 1) + (score + kv_idx) + (kv_idx - score) + score * score;
const float k2 = kg_tanh(score * 0.02f) + kg_exp(score - 1.f) + kg_log(fabsf(score) + 1.f) + to_float(score) + s1 + s2;
return score + 1e-9f * (i0 + i1 + i2 + i3 + i4 + i5 + i6 + (int)u0 + (int)l0 + (int)l1 + b0 + b1 + b2 + b3 + b4 + c0
                        + c1 + c2 + c3 + c4 + c5 + c6 + c7 + t0 + (int)d2) + 1e-9f * (f0 + f1 + f2 + f3 + f4 + f5 + h0
                        + h1 + h2 + (float)g0) + 1e-9f * (k0 + k1 + k2 + s3);
"""


def test_index_expressions_compile():
    """Every kind of expression a user may write with an ``int`` index and a ``float`` score
    compiles with the kg_idx indices and the kg_score score (no ambiguous overload, no missing
    operator): arithmetic with ints of every width,
    floats and doubles, compound assignment, increments, comparisons, logical and bitwise
    operators, if / switch conditions, casts, the helpers and the CUDA math functions, ternaries,
    tensor indexing.  (Their values are checked on the GPU by the ``index_arith`` example.)"""
    code = VariantCode(score_mod=_INDEX_FORMS, mask_mod="kv_idx <= q_idx + kv_len - q_len || q_offset > 0",
                       tensors=(("slopes_i", "int32"),))
    spec = heuristics.choose("sm_80", "bf16", 64, 64, num_heads_q=4, num_heads_kv=4, mask="none",
                             max_seqlen_q=512, max_seqlen_k=512, variant=code).attention
    from kernelgen.jit.cache import KernelCache
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        KernelCache(d).get(spec)   # raises VariantCompileError with NVRTC's message otherwise


_COMPOUND_FORMS = """
kg_score s = score;
s *= q_idx; s /= kv_idx + 1; s *= score; s /= s0_helper(score);
s++; ++s; --s; const float o = s--;
kg_idx d = q_idx; d = score; d += score; d -= score; q_idx += score; kv_idx -= score; q_len = score;
return s + o + 1e-9f * (d + q_idx + kv_idx + q_len);
"""


def test_compound_assignments_with_index_and_score_operands_compile():
    """What a float score and int indices take, the kg_score / kg_idx take too: ``score *= q_idx``,
    ``score /= kv_idx + 1``, ``score *= score``, ``score++`` / ``--score``, ``q_idx += score``,
    ``q_idx = score`` (review16: these were 'no operator matches these operands')."""
    code = VariantCode(score_mod=_COMPOUND_FORMS.replace("s0_helper(score)", "(score + 2.f)"))
    spec = heuristics.choose("sm_80", "bf16", 64, 64, num_heads_q=4, num_heads_kv=4, mask="none",
                             max_seqlen_q=512, max_seqlen_k=512, variant=code).attention
    from kernelgen.jit.cache import KernelCache
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        KernelCache(d).get(spec)   # raises VariantCompileError with NVRTC's message otherwise


_ROWCOL_FORMS = """
auto b = slopes[head] * (q_idx - kv_idx);           // kg_rowcol
b += 1.f; b -= 1; b *= 2; b /= 2.f; ++b; --b; b++; b--; b = 0.5f;
const float f = b, g = b * 0.5f + 0.5f * b + b / 2 + (b - q_idx) + (kv_idx - b) + (b + b) - -b;
const double d = b * 0.5; const int i = b; const int j = (int)b; const bool c = b < 0 || b > 1.5 || b == 2.f;
const float m = fmaxf(b, 0.f) + expf(-b) + powf(b, 2.f) + floorf(b) + max(b, 1.f) + kg_min(b, 1.f) + clamp(b, -1.f, 1.f);
const float t = slopes[(int)b & 1] + slopes[b > 0] + (c ? b : 0.f) + (c ? b : f);
score = score - slopes[head] * (q_idx - kv_idx);    // assignment and compound assignment of a score
score *= 1.f + 0.01f * kv_idx; score /= 1.f + q_idx * 0.01f;
return score + 1e-9f * (f + g + (float)d + i + j + m + t) + 1e-9f * b;
"""


def test_products_of_indices_and_floats_compile():
    """An index times a float is a kg_rowcol (common/user_mod.cuh): everything a float takes, it
    takes (compound assignment, increments, conversions to float / double / int, comparisons,
    the CUDA math functions and the helpers, tensor indexing, conditionals with floats), and a
    score can be assigned and scaled by one (review of the twentieth session: ``score = score -
    slopes[head] * d`` and ``score *= 1.f + 0.01f * kv_idx`` did not compile)."""
    code = VariantCode(score_mod=_ROWCOL_FORMS, tensors=(("slopes", "float32"),))
    from kernelgen.jit.cache import KernelCache
    import tempfile
    for arch, mask, mq in (("sm_80", "none", 512), ("sm_90a", "causal", 4096)):
        spec = heuristics.choose(arch, "bf16", 128, 128, num_heads_q=32, num_heads_kv=8, mask=mask, max_seqlen_q=mq,
                                 max_seqlen_k=4096, variant=code).attention
        with tempfile.TemporaryDirectory() as d:
            KernelCache(d).get(spec)   # raises VariantCompileError with NVRTC's message otherwise


def test_a_conditional_of_an_index_product_and_an_integer_does_not_compile():
    """``c ? slopes[head] * d : 0`` is ambiguous, as ``c ? score : 0`` is: a kg_rowcol converts to an
    int (through float) and an int to a kg_rowcol, so C++ cannot give the conditional the int's type
    and truncate the product (review: 2.1 came out 2); ``0.f`` compiles."""
    from kernelgen.jit.cache import KernelCache
    from kernelgen.jit.compiler import VariantCompileError
    import tempfile

    def spec(body):
        return heuristics.choose("sm_80", "bf16", 64, 64, num_heads_q=4, num_heads_kv=4, mask="none", max_seqlen_q=512,
                                 max_seqlen_k=512, variant=VariantCode(score_mod=body, tensors=(("s", "float32"),))).attention

    with tempfile.TemporaryDirectory() as d:
        with pytest.raises(VariantCompileError, match=r'ambiguous "\?" operation'):
            KernelCache(d).get(spec("return score - (q_idx > kv_idx ? s[head] * (q_idx - kv_idx) : 0);"))
        KernelCache(d).get(spec("return score - (q_idx > kv_idx ? s[head] * (q_idx - kv_idx) : 0.f);"))


def test_a_conditional_of_the_score_and_an_integer_does_not_compile():
    """``c ? score : -10000`` with a float score is a float; with a class type convertible to
    float, C++ gives it the type int (the kg_score converts to the int, not the other way) and
    truncates the score (review16: 9.35 came out 9).  It is made ambiguous instead: a compile
    error naming the operation; ``-10000.f`` compiles."""
    from kernelgen.jit.cache import KernelCache
    from kernelgen.jit.compiler import VariantCompileError
    import tempfile

    def spec(body):
        return heuristics.choose("sm_80", "bf16", 64, 64, num_heads_q=4, num_heads_kv=4, mask="none",
                                 max_seqlen_q=512, max_seqlen_k=512, variant=VariantCode(score_mod=body)).attention

    with tempfile.TemporaryDirectory() as d:
        for body in ("return q_idx >= kv_idx ? score : -10000;", "return q_idx < kv_idx ? 0 : score;"):
            with pytest.raises(VariantCompileError, match=r'ambiguous "\?" operation'):
                KernelCache(d).get(spec(body))
        KernelCache(d).get(spec("return q_idx >= kv_idx ? score : -10000.f;"))


def test_only_straight_line_score_mods_start_the_accumulators():
    """USER_ACC (the experiment KG_USER_ACC=1: the Q K^T accumulators started from a score_mod's
    per-key part; off by default, common/user_mod.cuh says why) needs the same choice
    for every element of the warpgroup's one wgmma; a branch could make it differ by row (the
    two-returns form failed on the H200 that way), so only snippets with one return and no branch
    render it (VariantCode's "acc"; comments and strings do not count)."""
    from kernelgen.kernels.variant_code import body, straight_line
    linear = "score - slopes[head] * kg_abs(q_idx + kv_len - q_len - kv_idx)"
    assert straight_line(body(linear, "score_mod"))
    assert straight_line(body("auto b = slopes[head] * 2.f; // if ? &&\nreturn score - b;", "score_mod"))
    for code in ("if (q_idx & 1) return score;\nreturn score - slopes[head];", "return q_idx > 3 ? score : 0.f;",
                 "float b = 0.f; for (int i = 0; i < 2; ++i) b += 1.f; return score - b;",
                 "return (q_idx > 1 && kv_idx > 1) ? score : score - 1.f;"):
        assert not straight_line(body(code, "score_mod")), code
    kw = dict(num_heads_q=32, num_heads_kv=8, mask="causal", max_seqlen_q=4096, max_seqlen_k=4096)

    def acc_line(score_mod, mask_mod=None):
        code = VariantCode(score_mod=score_mod, mask_mod=mask_mod, tensors=(("slopes", "float32"),))
        src = render.render(heuristics.choose("sm_90a", "bf16", 128, 128, variant=code, **kw).attention)
        return [x for x in src.splitlines() if x.startswith("constexpr bool USER_ACC")]
    assert acc_line(linear) == ["constexpr bool USER_ACC = KG_USER_ACC && !SOFTCAP && true;"]
    assert acc_line("if (q_idx & 1) return score;\nreturn score - slopes[head] * kg_abs(q_idx - kv_idx);") == \
        ["constexpr bool USER_ACC = KG_USER_ACC && !SOFTCAP && false;"]
    assert acc_line(linear, "kv_idx <= q_idx + (int)slopes[0]") == \
        ["constexpr bool USER_ACC = KG_USER_ACC && !SOFTCAP && false;"]


def test_the_diagonal_blocks_keep_the_general_instance_of_kg_abs():
    """A causal Hopper kernel takes NONNEG (kg_abs of the causal distance as the distance itself, the
    float copies linear) only on key blocks wholly below the diagonal; the blocks that need the mask
    and the clamped last block keep the general instance, whatever the snippet, so the float copies
    the score_mod sees are the true |distance| and the clamped key for every pair it runs on, the
    ones the causal mask then drops included.  (f31e8be took NONNEG on every block of a score_mod
    without a mask_mod, arguing the mask drops the rest; a review found it wrong: a row part built
    from the signed float copy, ``slopes[head] * kg_abs(d) / (1.f + (float)kg_abs(d))``, is inf at
    d = -1 on a lane's first column and poisons the whole row's offset (NaN rows), and a float-derived
    index, ``bias[(int)(logf(1.f + (float)kg_abs(d)) * 4.f)]``, reads at INT_MIN; reverted.)"""
    kw = dict(num_heads_q=16, num_heads_kv=4, max_seqlen_q=4096, max_seqlen_k=4096)
    alibi = "score - slopes[head] * kg_abs(q_idx + kv_len - q_len - kv_idx)"

    def src(mask, **code):
        var = VariantCode(tensors=(("slopes", "float32"),), **code)
        return render.render(heuristics.choose("sm_90a", "bf16", 64, 64, variant=var, mask=mask, **kw).attention)
    for code in ({"score_mod": alibi},
                 {"mask_mod": "kg_abs(q_idx + kv_len - q_len - kv_idx) < 100 && slopes[head] > 0.f"}):
        causal = src("causal", **code)
        fn = "apply_user_hoist" if "score_mod" in code else "apply_user"
        assert f"{fn}<false, false>(" in causal and f"{fn}<false, true>(" in causal   # masked / below the diagonal
        assert f"{fn}<true>(" in causal and f"{fn}<true, true>(" not in causal        # the clamped last block
    plain = src("none", score_mod=alibi)
    assert "apply_user_hoist<true>(" in plain and "apply_user_hoist<false>(" in plain
    assert "apply_user_hoist<false, true>(" not in plain


@pytest.mark.parametrize("score_mod, mufu", [
    ("50.f * tanhf(score / 50.f)", True),
    ("50.f * kg_tanh(score * 0.02f)", True),
    ("score + logf(1.f + to_float(kv_idx))", True),
    ("score * rsqrtf(temp[head])", True),
    ("score + 0.1f * exp10f((float)kv_idx * 1e-3f)", True),
    ("score * __fdividef(1.f, temp[head])", True),
    ("score - slopes[head] * kg_abs(q_idx + kv_len - q_len - kv_idx)", False),
    ("score * temp[head]  // not tanhf(score)", False),
    ("score + exp_bias[kv_idx]", False),
])
def test_transcendental_snippets_take_the_three_warpgroup_tile_with_option_m_at_d64(score_mod, mufu, monkeypatch):
    """A score_mod that calls a MUFU function (VariantCode.transcendental: tanh.approx, the accurate
    kg_tanh, logf, rsqrtf, ...; not a name in a comment or a tensor named exp_bias) is MUFU-bound: on
    head dim 64's three-warpgroup tile it takes option "m" (heuristics.with_mask_split: the tanh and
    the row max in one straight run; 0.951-0.967x the two-warpgroup time for the tanh.approx
    soft-cap, H100, fifty-second session); others stay on three without it.  Without
    "transcendental" in SM90_THREE_WG_EXTRAS they run on two warpgroups, without "m"; head dim 128
    runs two warpgroups either way, with "m" for a MUFU-bound snippet (SM90_MASK_SPLIT_SNIPPET_HEAD_DIMS:
    0.919-0.969x the time, H100, fifty-fourth session)."""
    names = [n for n in ("temp", "slopes", "exp_bias") if n in score_mod]
    code = VariantCode(score_mod=score_mod, tensors=tuple((n, "float32") for n in names))
    assert code.transcendental is mufu
    kw = dict(num_heads_q=64, num_heads_kv=8, mask="causal", max_seqlen_q=16384, max_seqlen_k=16384)
    spec = heuristics.choose("sm_90a", "bf16", 64, 64, variant=code, **kw).attention
    assert spec.tile.num_warps == 12 and ("_masksplit" in spec.name) == mufu, spec.name
    d128 = heuristics.choose("sm_90a", "bf16", 128, 128, variant=code, **kw).attention
    assert d128.tile.num_warps == 8 and ("_masksplit" in d128.name) == mufu, d128.name
    monkeypatch.setattr(heuristics, "SM90_THREE_WG_EXTRAS", heuristics.SM90_THREE_WG_EXTRAS - {"transcendental"})
    spec = heuristics.choose("sm_90a", "bf16", 64, 64, variant=code, **kw).attention
    assert spec.tile.num_warps == (8 if mufu else 12) and "_masksplit" not in spec.name, spec.name


def _max_shuffle_sources(spec):
    """For each first shuffle (lane mask 1) of a row max's quad reduction in ``spec``'s SASS (a
    SHFL.BFLY whose result an FMNMX takes next), the opcode of the instruction that wrote its
    source register."""
    import re

    from kernelgen.jit import sass
    tool = sass.find_nvdisasm()
    assert tool is not None, "nvdisasm is needed: pip install nvidia-cuda-nvdisasm (the test extra)"
    options = compiler.default_options(spec.arch) + (compiler.VARIANT_OPTIONS if spec.variant is not None else ())
    text = sass.disassemble(compiler.compile_cubin(render.render(spec), spec.arch, options, spec.name).cubin, tool)
    ins = [m.group(1).strip() for x in text.splitlines() for m in [re.match(r"\s*/\*[0-9a-f]{4,}\*/\s+(.*?)\s*;", x)] if m]
    out = []
    for i, x in enumerate(ins):
        m = re.match(r"SHFL\.BFLY PT, (R\d+), (R\d+), 0x1, 0x1f", x)
        if not m:
            continue
        dst, src = m.groups()
        uses = [y for y in ins[i + 1:i + 12] if re.search(rf"\b{dst}\b", y.split(" ", 1)[1] if " " in y else "")]
        if not uses or not uses[0].startswith("FMNMX"):
            continue                                  # a sum's reduction, not a max's
        writer = next((y for y in reversed(ins[max(0, i - 40):i]) if re.match(rf"\S+ {src}\b", y)), "")
        out.append(writer.split()[0] if writer else "?")
    return out


def test_a_per_key_factor_takes_each_lanes_max_into_log2_units():
    """``score * temp[kv_idx]``: the Hopper kernel's apply_user_hoist lets each lane keep its own unit
    (raw with its factor, or natural-log), so the lanes of one query row can differ; softmax_scores
    then multiplies each lane's max by that lane's exponent factor (rounded up) before the quad's
    reduction (tests/gpu/test_variant_gpu.py::test_a_per_key_factor_on_the_score checks the rows on
    the GPU).  In the SASS every row max's first shuffle takes an FMUL.RP's result; in a plain
    kernel, whose factor is one for the quad, it takes the FMNMX of the lane's scores."""
    var = kernelgen.Variant(score_mod="score * temp[kv_idx]", tensors={"temp": torch.ones(64)})
    kw = dict(num_heads_q=16, num_heads_kv=4, mask="causal", max_seqlen_q=300, max_seqlen_k=300)
    spec = heuristics.choose("sm_90a", "bf16", 128, 128, variant=var.code, **kw).attention
    assert spec.mainloop == "sm90a" and "apply_user_hoist" in render.render(spec)
    hoisted = _max_shuffle_sources(spec)
    assert len(hoisted) >= 4 and all(w.startswith("FMUL") and ".RP" in w for w in hoisted), hoisted
    plain = _max_shuffle_sources(heuristics.choose("sm_90a", "bf16", 128, 128, **kw).attention)
    assert len(plain) >= 2 and all(w.startswith("FMNMX") for w in plain), plain
