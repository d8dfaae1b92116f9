"""GPU: option "m" of the Hopper mainloop (the overlapped loop's key block in a masked and an unmasked
copy chosen once a block, templates/attention/mainloop_sm90.cuh ``steady_block``), forced on every
Hopper kernel of a call (``heuristics.SM90_OPTS`` = "mpt"; dropped above head dim 128 and with a
sliding window, and for causal ALiBi on packed tiles, ``heuristics.without_mask_split``), through the
existing checks of each path: causal
and unmasked calls (the key-length mask of a request's last block; the diagonal's blocks; long runs of
unmasked blocks), soft-caps, packed GQA on two and three warpgroups, forced splits, paged K/V (TMA boxes and gathered
rows), an FP8 cache with a 16-bit q, the FP8 tensor-core variant, built-in ALiBi, user snippets (a
score_mod's hoisted row part and the causal distance, whose nonneg form picks its copy by the mask)
and a replayed CUDA graph.  Each checks against the float64 reference, out and lse NaN-poisoned."""
import pytest
import torch

from kernelgen.front import api
from kernelgen.selection import heuristics

import test_alibi_gpu as alibi
import test_fp8_gpu as fp8
import test_fp8_mma_gpu as fp8mma
import test_hopper_gpu as hopper
import test_variant_gpu as variant
import kernelgen
from kernelgen.apps.reference import attention_reference, gather_paged
from gpu_helpers import check, make_packed, prepared
from test_paged_decode_gpu import make_paged

#: The dispatcher's own Hopper options (before the fixture forces "mpt").
DEFAULT_SM90_OPTS = heuristics.SM90_OPTS

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0),
                                 reason="needs a compute capability 9.0 (Hopper) GPU")]


@pytest.fixture(autouse=True)
def option_m(monkeypatch):
    """Every Hopper kernel with option "m" (the variable would win over SM90_OPTS)."""
    monkeypatch.delenv("KERNELGEN_SM90_OPTS", raising=False)
    monkeypatch.setattr(heuristics, "SM90_OPTS", "mpt")
    api.clear_signature_cache()
    yield
    api.clear_signature_cache()


def ran_m():
    name = prepared().attn.name
    assert "_wgmma" in name and "_masksplit" in name, name


@pytest.mark.parametrize("hd,dt,causal", [(64, "bf16", True), (64, "fp16", False), (128, "bf16", False),
                                          (128, "fp16", True), (96, "bf16", True)])
def test_packed_prefill(hd, dt, causal):
    """Ragged GQA batches with an empty query, an empty key request and rows that see no key."""
    qlens, klens = hopper.ragged(hd + causal)
    q, k, v, cu_q, cu_k = hopper.make_batch(qlens, klens, 8, 2, hd, hopper.DT[dt], 5 + hd)
    hopper.check(q, k, v, cu_q, cu_k, causal=causal)
    ran_m()


@pytest.mark.parametrize("case,hd,dt", [(c, hd, dt) for c in ("softcap", "softcap_causal") for hd in (64, 128, 256)
                                         for dt in ("bf16", "fp16")])
def test_softcap(case, hd, dt):
    hopper.test_hopper_window_softcap_matrix(case, hd, dt, "soa")
    ran_m()


@pytest.mark.parametrize("qlen,klen", [(4096, 4096), (1000, 5000), (5000, 1000)])
@pytest.mark.parametrize("causal,cap", [(True, 30.0), (True, 0.0), (False, 0.0)])
def test_long_requests(qlen, klen, causal, cap):
    """Many key blocks a row: long runs of unmasked blocks after the masked ones (seqlen_q above and
    below seqlen_k: the diagonal's offset)."""
    hopper.test_hopper_window_softcap_long_requests(qlen, klen, causal, (-1, -1), cap)
    ran_m()


def test_a_window_drops_the_option():
    """A sliding window keeps one copy (the two spill there: heuristics.without_mask_split)."""
    hopper.test_hopper_window_softcap_matrix("causal_window", 64, "bf16", "soa")
    name = prepared().attn.name
    assert "_wgmma" in name and "_masksplit" not in name, name


@pytest.mark.parametrize("hd", [64, 128])
def test_forced_splits(hd):
    hopper.test_hopper_forced_splits(3, True, hd, "soa")
    ran_m()


@pytest.mark.parametrize("page_size,hd,dt", [(16, 64, "bf16"), (1, 128, "fp16"), (64, 128, "bf16")])
def test_paged_prefill(page_size, hd, dt):
    hopper.test_hopper_paged_matrix(page_size, hd, dt, True, 2, "soa")
    ran_m()


@pytest.mark.parametrize("dtype", [fp8.BF16, fp8.FP16])
def test_fp8_cache(dtype):
    fp8.test_varlen_prefill_causal_gqa(None, 0, dtype, fp8.E4M3)
    ran_m()


@pytest.mark.parametrize("d,causal,num_splits", [(64, True, 0), (64, False, 3), (128, True, 0)])
def test_fp8_tensor_cores(d, causal, num_splits):
    fp8mma.test_varlen_prefill_within_the_fp8_p_bound(d, causal, num_splits)
    ran_m()


@pytest.mark.parametrize("name", ["softcap", "alibi", "t5_bias", "document_mask", "prefix_lm"])
def test_user_variant(name, monkeypatch):
    """Each example's variant kernel (the test's last call may be the built-in argument's: every
    kernel it asked for is checked)."""
    names = []

    def recording():
        p = prepared()
        names.append(p.attn.name)
        return p
    monkeypatch.setattr(variant, "prepared", recording)
    variant.test_varlen_prefill(name, "sm_90a", 0)
    assert names and all("_wgmma" in n and "_var" in n and "_masksplit" in n for n in names), names
    ran_m()


@pytest.mark.parametrize("form", ["linear", "negated_distance", "tanh_cap"])
@pytest.mark.parametrize("causal", [True, False])
def test_row_parts_and_the_causal_distance(form, causal):
    variant.test_row_parts_and_the_causal_distance(form, 0, causal)
    ran_m()


@pytest.mark.parametrize("num_splits", [0, 3])
def test_builtin_alibi_causal(num_splits):
    alibi.test_varlen_prefill_causal_gqa(None, num_splits, True)
    ran_m()


@pytest.mark.parametrize("variant_name", ["none", "d64_mha"])
def test_builtin_alibi_non_causal(variant_name):
    alibi.test_varlen_prefill_non_causal(None, variant_name)
    ran_m()


@pytest.mark.parametrize("mask", ["causal", "none"])
@pytest.mark.parametrize("pack_gqa", [False, None])
def test_builtin_alibi_three_warpgroups(mask, pack_gqa, monkeypatch):
    """Unpacked and automatic (these short requests pack); causal ALiBi on packed tiles keeps one
    copy (its two spill: heuristics.without_mask_split)."""
    alibi.test_d64_three_warpgroups(mask, 1, torch.bfloat16, pack_gqa, monkeypatch)
    if mask == "causal" and pack_gqa is None:
        name = prepared().attn.name
        assert "_pack_" in name and "_masksplit" not in name, name
    else:
        ran_m()


def test_graph_replay():
    hopper.test_hopper_cuda_graph_replay()
    ran_m()


@pytest.mark.parametrize("d", [128, 256])
@pytest.mark.parametrize("causal,num_splits,page_size,default", [
    (True, 1, 0, False), (False, 3, 0, False), (True, 1, 16, False), (True, 2, 64, False), (True, 0, 0, True),
    (True, 0, 16, True)])
def test_two_warpgroup_tanh_snippet(causal, num_splits, page_size, default, d, monkeypatch):
    """A tanh snippet on the two-warpgroup tile takes "m" at head dims 128 and 256
    (heuristics.SM90_MASK_SPLIT_SNIPPET_HEAD_DIMS; 256 keeps it, SM90_MASK_SPLIT_MUFU_HEAD_DIMS): a
    soft-cap snippet on packed and paged K / V (TMA boxes of 16-token pages and of 64), split or
    not, against the float64 reference; ``default``: the dispatcher's own options add it."""
    if default:
        monkeypatch.setattr(heuristics, "SM90_OPTS", DEFAULT_SM90_OPTS)
        api.clear_signature_cache()
    qlens, klens = [700, 200, 0, 333, 129], [900, 400, 17, 333, 129]
    hq, hkv = 8, 2
    var = kernelgen.Variant(score_mod="50.f * tanhf(score / 50.f)", name=f"tanh_cap_d{d}")

    def ref_mod(score, b, h, qi, kj, lq, lk):
        return 50.0 * torch.tanh(score / 50.0)
    if page_size:
        q, kc, vc, pt, used, cu_q = make_paged(qlens, klens, hq, hkv, d, d, page_size, 256 + page_size)
        k, v, cu_k = gather_paged(kc, vc, pt, used)
        kw = dict(seqused_k=used, page_table=pt)
        args = (q, kc, vc, cu_q, None)
    else:
        q, k, v, cu_q, cu_k = make_packed(qlens, klens, hq, hkv, d, 256 + num_splits)
        kw, args = {}, (q, k, v, cu_q, cu_k)
    ref, ref_lse = attention_reference(q, k, v, cu_q, cu_k, causal=causal, score_mod=ref_mod)
    out = torch.full((q.shape[0], hq, d), float("nan"), dtype=torch.bfloat16, device="cuda")
    o, lse = kernelgen.varlen_attention(*args, max(qlens), max(klens), causal=causal, return_lse=True, out=out,
                                        arch="sm_90a", num_splits=num_splits, variant=var, **kw)
    torch.cuda.synchronize()
    check(o, lse, ref, ref_lse, torch.bfloat16)
    ran_m()
    assert "w8s" in prepared().attn.name, prepared().attn.name   # two warpgroups (m128n..w8s2b1)
