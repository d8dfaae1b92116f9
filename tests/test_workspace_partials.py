"""CPU: the split-KV partials of a mixed batch's short class indexed by (request, token of the
request) instead of by token (kernelgen/kernels/workspace.py, short_class_workspace), the
row_splits encoding the kernels share, and the parameter field that carries it."""
import pytest
import torch

from kernelgen.jit import render
from kernelgen.kernels import kernel_args
from kernelgen.kernels.params import ATTENTION_PARAMS
from kernelgen.kernels.workspace import MAX_PARTIAL_ROWS, WorkspaceLayout, short_class_workspace
from kernelgen.selection import heuristics


def _llama_mixed():
    fv = heuristics.choose_fused_hopper("sm_90a", "bf16", 128, 128, num_heads_q=32, num_heads_kv=8, mask="causal",
                                        max_seqlen_q=4096, max_seqlen_k=32768, paged=True, page_size=16)
    assert fv is not None and fv.short_max_q == 4 and fv.combine is not None
    return fv


def test_serving_plan_partials_shrink_by_request():
    """The serving guide's mixed plan (256 requests, 8192 tokens, Llama-3 heads): partials for
    256 x 4 rows instead of 8192, 6.9 GiB -> 0.87 GiB."""
    fv = _llama_mixed()
    by_token = WorkspaceLayout(256, True, fv.short_max_splits, 32, 8192, 128)
    ws = short_class_workspace(256, 8192, True, fv.short_max_splits, 32, 128, fv.short_max_q)
    lay = ws.short
    assert lay.request_rows == 4 and lay.partial_rows == 1024 and lay.rows == 8192
    s, h, dv = fv.short_max_splits, 32, 128
    assert lay.lse_accum_offset - lay.out_accum_offset == 4 * s * h * 1024 * dv
    assert lay.row_splits_offset - lay.lse_accum_offset == 4 * s * h * 1024
    assert lay.nbytes - lay.row_splits_offset == 4 * 8192          # row_splits: one int a token
    assert by_token.nbytes > 6.9 * 2 ** 30 and lay.nbytes < 0.87 * 2 ** 30
    assert lay.split_strides() == {"accum_split_stride": h * 1024 * dv, "accum_head_stride": 1024 * dv,
                                   "lse_accum_split_stride": h * 1024, "lse_accum_head_stride": 1024,
                                   "split_request_rows": 4}


def test_by_token_when_requests_would_need_more_rows():
    """When capacity x threshold is not below the step's tokens (decode-heavy plans) the partials
    stay indexed by token: split_request_rows 0, the layout of a single-class call."""
    ws = short_class_workspace(64, 200, True, 8, 4, 64, 4)
    assert ws.short.request_rows == 0 and ws.short.partial_rows == 200
    assert ws.short.split_strides()["split_request_rows"] == 0
    assert ws.short == WorkspaceLayout(64, True, 8, 4, 200, 64)


def test_views_shapes_and_split_buffers_carry_request_rows():
    lay = WorkspaceLayout(8, True, 3, 2, 100, 64, request_rows=4)
    ws = torch.zeros(lay.nbytes, dtype=torch.uint8)
    md, sb = lay.views(ws)
    assert tuple(sb.out_accum.shape) == (3, 2, 32, 64) and tuple(sb.lse_accum.shape) == (3, 2, 32)
    assert tuple(sb.row_splits.shape) == (100,) and sb.request_rows == 4
    assert kernel_args.split_strides(sb) == lay.split_strides()
    assert kernel_args.split_strides(None)["split_request_rows"] == 0
    # regions do not overlap and stay in the buffer
    assert sb.out_accum.data_ptr() + sb.out_accum.numel() * 4 <= sb.lse_accum.data_ptr()
    assert sb.lse_accum.data_ptr() + sb.lse_accum.numel() * 4 <= sb.row_splits.data_ptr()
    assert sb.row_splits.data_ptr() + 400 <= ws.data_ptr() + lay.nbytes


def test_too_many_partial_rows_raise():
    with pytest.raises(ValueError, match=r"exceed 8388607 \(row_splits holds the row in 23 bits\): an "
                                         r"AttentionPlan's max_total_q .* num_splits=1"):   # (names the plan's option)
        WorkspaceLayout(1, True, 2, 1, MAX_PARTIAL_ROWS + 1, 64)
    WorkspaceLayout(1, False, 1, 1, MAX_PARTIAL_ROWS + 1, 64)         # no partials: no limit
    with pytest.raises(ValueError, match="exceed"):
        WorkspaceLayout(MAX_PARTIAL_ROWS, True, 2, 1, 10, 64, request_rows=2)


def test_the_field_reaches_the_attention_params():
    assert "split_request_rows" in ATTENTION_PARAMS.names
    lay = WorkspaceLayout(8, True, 3, 2, 100, 64, request_rows=4)
    q = torch.zeros(100, 2, 64, dtype=torch.bfloat16)
    k = torch.zeros(50, 1, 64, dtype=torch.bfloat16)
    fields = kernel_args.attention_fields(q, k, k, q, None, None, 8, 0.125, strides=lay.split_strides())
    assert fields["split_request_rows"] == 4
    assert kernel_args.attention_fields(q, k, k, q, None, None, 8, 0.125)["split_request_rows"] == 0
    packed = ATTENTION_PARAMS.pack({**dict.fromkeys(ATTENTION_PARAMS.pointer_names, 0), **fields})
    assert dict(zip(ATTENTION_PARAMS.names, ATTENTION_PARAMS.struct.unpack(packed)))["split_request_rows"] == 4


def test_kernels_write_and_read_the_same_row_splits_encoding():
    """The attention variants write row_splits_entry (count | partial row << 8), the combine kernel
    reads count = & 0xff and row = >> 8, and both sm_80 and Hopper epilogues address partials by
    partial_row."""
    fv = _llama_mixed()
    src = render.render(fv.fused)
    assert "(unsigned)num_splits | ((unsigned)partial_row(p, b, q_start, tok) << 8)" in src
    assert src.count("row_splits_entry(p, te.b, te.q_start, tok, te.num_splits)") == 2   # both variants
    assert "partial_row(p, te.b, te.q_start, te.q_start + token_of(r))" in src            # sm_80 partials
    assert "p.split_request_rows > 0 ? b * p.split_request_rows + (tok - q_start) : tok" in src
    comb = render.render(fv.combine)
    assert "const int S = rs & 0xff, prow = rs >> 8;" in comb
    assert "+ (i64)prow * DV" in comb and "(i64)token * DV" not in comb
    assert heuristics.MAX_SPLITS < 256 and heuristics.MAX_DECODE_SPLITS < 256   # the count fits its 8 bits
