"""CPU: kernelgen.compat.flash_attn_combine (FlashAttention-3's merge of split-KV partials) against
attention over all keys computed in float64, its edge rows (empty partials, garbage in them), its
output forms and its argument errors."""
import pytest
import torch

from kernelgen.front import compat

F32, F64 = torch.float32, torch.float64


def chunk_partials(batch=3, seqlen=5, heads=4, d=64, chunks=(7, 0, 19, 14), seed=0):
    """Queries against keys cut into consecutive chunks (one of them empty): each chunk's softmax output
    and natural-log LSE in float64 (an empty chunk: LSE -inf, output NaN, as a kernel may leave it),
    and the attention over all keys.  Returns (out_partial, lse_partial, out_full, lse_full) in
    FA3's shapes: (S, B, L, H, D), (S, B, L, H), (B, L, H, D), (B, L, H)."""
    g = torch.Generator().manual_seed(seed)
    n = sum(chunks)
    q = torch.randn(batch, seqlen, heads, d, generator=g, dtype=F64)
    k = torch.randn(batch, n, heads, d, generator=g, dtype=F64)
    v = torch.randn(batch, n, heads, d, generator=g, dtype=F64)
    s = torch.einsum("blhd,bnhd->blhn", q, k) * (3.0 / d ** 0.5)   # a wide spread of scores
    outs, lses, lo = [], [], 0
    for c in chunks:
        sc = s[..., lo:lo + c]
        if c == 0:
            outs.append(torch.full((batch, seqlen, heads, d), float("nan"), dtype=F64))
            lses.append(torch.full((batch, seqlen, heads), float("-inf"), dtype=F64))
        else:
            outs.append(torch.einsum("blhn,bnhd->blhd", torch.softmax(sc, dim=-1), v[:, lo:lo + c]))
            lses.append(torch.logsumexp(sc, dim=-1))
        lo += c
    full = torch.einsum("blhn,bnhd->blhd", torch.softmax(s, dim=-1), v)
    return torch.stack(outs), torch.stack(lses), full, torch.logsumexp(s, dim=-1)


# float32 inputs (one rounding each, 2^-24 relative) and a float32 merge of at most four terms (a few
# roundings more): outputs of magnitude <= 1-2 and LSEs of magnitude <= ~30 land within 1e-5 of float64.
OUT_ATOL, LSE_ATOL = 1e-5, 1e-5


def test_the_merge_of_key_chunks_is_attention_over_all_keys():
    op, lp, full, lse_full = chunk_partials()
    out, lse = compat.flash_attn_combine(op.to(F32), lp.to(F32))
    assert out.dtype == F32 and out.shape == full.shape
    assert lse.dtype == F32 and lse.shape == lse_full.shape
    assert (out.double() - full).abs().max().item() <= OUT_ATOL
    assert (lse.double() - lse_full).abs().max().item() <= LSE_ATOL
    # FA3 returns the LSE as a (batch, seqlen, heads) view of a contiguous (batch, heads, seqlen) tensor
    assert lse.transpose(1, 2).is_contiguous()


def test_an_empty_partials_garbage_is_never_read_and_order_does_not_matter():
    op, lp, full, _ = chunk_partials(chunks=(5, 0, 9))
    op[1] = float("inf")                     # the empty chunk's output: anything (inf * 0 would be NaN)
    out, _ = compat.flash_attn_combine(op.to(F32), lp.to(F32))
    assert torch.isfinite(out).all()
    assert (out.double() - full).abs().max().item() <= OUT_ATOL
    rev, _ = compat.flash_attn_combine(op.flip(0).to(F32), lp.flip(0).to(F32))
    assert (rev.double() - full).abs().max().item() <= OUT_ATOL


def test_a_row_that_no_partial_saw_gives_zero_and_minus_infinity():
    op, lp, _, _ = chunk_partials(batch=2, seqlen=3, chunks=(4, 6))
    lp[:, 1, 2, :] = float("-inf")           # batch 1, position 2: every partial empty
    op[:, 1, 2] = float("nan")
    out, lse = compat.flash_attn_combine(op.to(F32), lp.to(F32))
    assert torch.equal(out[1, 2], torch.zeros_like(out[1, 2]))
    assert torch.equal(lse[1, 2], torch.full_like(lse[1, 2], float("-inf")))
    assert torch.isfinite(out[0]).all() and torch.isfinite(lse[0]).all()


def test_one_split_passes_through():
    op, lp, _, _ = chunk_partials(chunks=(11,))
    out, lse = compat.flash_attn_combine(op.to(F32), lp.to(F32))
    assert torch.allclose(out, op[0].to(F32), rtol=2e-7, atol=0) and torch.equal(lse, lp[0].to(F32))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_out_dtype_and_out_in_place(dtype):
    op, lp, full, _ = chunk_partials(chunks=(9, 3))
    out, _ = compat.flash_attn_combine(op.to(F32), lp.to(F32), out_dtype=dtype)
    assert out.dtype == dtype
    eps = torch.finfo(dtype).eps             # one rounding to dtype of a float32 result within 1e-5
    assert ((out.double() - full).abs() <= eps * full.abs() + OUT_ATOL).all()
    buf = torch.full((full.shape[0], full.shape[1], full.shape[2], 2 * full.shape[3]), 7.0, dtype=dtype)
    view = buf[..., ::2]                      # a strided out: written in place, returned as itself
    got, _ = compat.flash_attn_combine(op.to(F32), lp.to(F32), view)
    assert got is view and torch.equal(view, out)
    assert (buf[..., 1::2] == 7.0).all()
    got, _ = compat.flash_attn_combine(op.to(F32), lp.to(F32), view, dtype)
    assert got is view and torch.equal(view, out)


def test_any_strides_of_the_partials():
    op, lp, full, lse_full = chunk_partials(chunks=(6, 8))
    lp_t = lp.to(F32).permute(0, 1, 3, 2).contiguous().permute(0, 1, 3, 2)   # FA3's seqlen-contiguous LSE
    op_nc = op.to(F32).transpose(2, 3).contiguous().transpose(2, 3)
    out, lse = compat.flash_attn_combine(op_nc, lp_t)
    assert (out.double() - full).abs().max().item() <= OUT_ATOL
    assert (lse.double() - lse_full).abs().max().item() <= LSE_ATOL


@pytest.mark.parametrize("dynamic", [None, True])
def test_traces_with_fullgraph_and_new_shapes(dynamic):
    """With ``out`` too: its overlap check must trace with symbolic strides (a second call with a new
    seqlen / head_dim recompiles with dynamic shapes)."""
    fn = torch.compile(compat.flash_attn_combine, fullgraph=True, backend="eager", dynamic=dynamic)
    for seqlen, d in ((3, 8), (6, 16), (5, 24)):
        op, lp, _, _ = chunk_partials(seqlen=seqlen, d=d, chunks=(4, 4))
        op, lp = op.to(F32), lp.to(F32)
        ref, ref_lse = compat.flash_attn_combine(op, lp)
        out, lse = fn(op, lp)
        assert torch.equal(out, ref) and torch.equal(lse, ref_lse)
        buf = torch.empty_like(ref)
        got, lse = fn(op, lp, buf)
        assert torch.equal(buf, ref) and torch.equal(lse, ref_lse)


def test_a_weighted_nan_shows_and_odd_head_dims_write_out():
    op, lp, full, _ = chunk_partials(d=37, chunks=(5, 6))
    buf = torch.empty(full.shape, dtype=torch.bfloat16)
    got, _ = compat.flash_attn_combine(op.to(F32), lp.to(F32), buf)
    assert got is buf and ((buf.double() - full).abs() <= 2 ** -8 * full.abs() + OUT_ATOL).all()
    op[1, 0, 0, 0, 3] = float("nan")          # a partial that has weight: its NaN is real, not hidden
    out, _ = compat.flash_attn_combine(op.to(F32), lp.to(F32))
    assert torch.isnan(out[0, 0, 0, 3]) and torch.isnan(out).sum() == 1


def test_an_empty_row_has_a_finite_gradient():
    op, lp, _, _ = chunk_partials(batch=1, seqlen=2, heads=1, d=4, chunks=(3, 2))
    lp[:, 0, 1] = float("-inf")
    op, lp = op.to(F32).requires_grad_(), lp.to(F32).requires_grad_()
    compat.flash_attn_combine(op, lp)[0].sum().backward()
    assert torch.isfinite(op.grad).all() and torch.isfinite(lp.grad).all()


@pytest.mark.parametrize("case, exc, words", [
    ("half partial", TypeError, "out_partial must be float32"),
    ("half lse", TypeError, "lse_partial must be float32"),
    ("list", TypeError, "out_partial must be a torch.Tensor"),
    ("4-D", ValueError, "out_partial must have shape"),
    ("no splits", ValueError, "no splits"),
    ("lse shape", ValueError, "lse_partial must have shape"),
    ("out shape", ValueError, "out must have shape"),
    ("out type", TypeError, "out must be a torch.Tensor"),
    ("out_dtype", TypeError, "out_dtype must be"),
    ("int out", TypeError, "out must be float32, bfloat16 or float16"),
    ("lse device", ValueError, "lse_partial is on meta"),
    ("out device", ValueError, "out is on meta"),
    ("out dtype", TypeError, "out has dtype"),
    ("expanded out", ValueError, "out must not have elements that share memory"),
])
def test_bad_arguments_name_themselves(case, exc, words):
    op, lp, full, _ = chunk_partials(batch=2, seqlen=3, heads=2, d=8, chunks=(3, 2))
    op, lp = op.to(F32), lp.to(F32)
    args = {"out_partial": op, "lse_partial": lp}
    if case == "half partial":
        args["out_partial"] = op.half()
    elif case == "half lse":
        args["lse_partial"] = lp.half()
    elif case == "list":
        args["out_partial"] = op.tolist()
    elif case == "4-D":
        args["out_partial"] = op[0]
    elif case == "no splits":
        args["out_partial"], args["lse_partial"] = op[:0], lp[:0]
    elif case == "lse shape":
        args["lse_partial"] = lp[:, :, :2]
    elif case == "out shape":
        args["out"] = torch.empty(2, 3, 2, 9)
    elif case == "out type":
        args["out"] = 3
    elif case == "out_dtype":
        args["out_dtype"] = torch.int32
    elif case == "int out":
        args["out"] = torch.empty(2, 3, 2, 8, dtype=torch.int32)
    elif case == "lse device":
        args["lse_partial"] = lp.to("meta")
    elif case == "out device":
        args["out"] = torch.empty(2, 3, 2, 8, device="meta")
    elif case == "out dtype":
        args["out"], args["out_dtype"] = torch.empty(2, 3, 2, 8), torch.bfloat16
    elif case == "expanded out":
        args["out"] = torch.empty(1, 3, 2, 8).expand(2, 3, 2, 8)
    with pytest.raises(exc, match=words):
        compat.flash_attn_combine(**args)
