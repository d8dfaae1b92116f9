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
from gpu_helpers import prepared

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


@pytest.mark.parametrize("case,hd,dt", [(c, hd, dt) for c in ("softcap", "softcap_causal") for hd in (64, 128)
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
