"""GPU: option "x" of the Hopper mainloop (a share of the softmax's exponentials on the FMA pipe,
templates/common/softmax.cuh ``ex2_fma``), forced on every Hopper kernel of a call
(``heuristics.SM90_OPTS`` = "ptx"), through the existing checks of each path: the packed prefill at
head dims 64 (three warpgroups) and 128 in bf16 and fp16, windows and soft-caps, forced splits,
paged K/V (TMA boxes and gathered rows), an FP8 cache with a 16-bit q, the FP8 tensor-core variant
at head dim 64 (where the option fits: heuristics.sm90_ex2_fma_fits), user snippets and a replayed
CUDA graph.  Each at the template's default share (4 of 8 with a soft-cap or a snippet calling a MUFU
function, else 2) and with every exponential on the FMA pipe (``KG_EX2_FMA=8``, a define); each
checks against the float64 reference with the error bounds that count the polynomial's error
(``reference.EX2_REL_ERR``), out and lse NaN-poisoned, rows that see no key exactly 0 / -inf.  Then
the dispatcher's own choice (``heuristics.sm90_ex2_fma`` with ``SM90_EX2_FMA`` on): the option on
soft-capped head dim 64 and on a transcendental snippet there."""
import pytest
import torch

from kernelgen.front import api
from kernelgen.jit import compiler
from kernelgen.selection import heuristics

import test_fp8_gpu as fp8
import test_fp8_mma_gpu as fp8mma
import test_hopper_gpu as hopper
import test_variant_gpu as variant
from gpu_helpers import prepared

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0),
                                 reason="needs a compute capability 9.0 (Hopper) GPU")]


@pytest.fixture(params=["", "KG_EX2_FMA=8"], ids=["default_share", "share8"], autouse=True)
def option_x(request, monkeypatch):
    """Every Hopper kernel with option "x" (the variable would win over SM90_OPTS), at the default
    share or with all of them on the FMA pipe."""
    monkeypatch.delenv("KERNELGEN_SM90_OPTS", raising=False)
    monkeypatch.setattr(heuristics, "SM90_OPTS", "ptx")
    # the kernels the option was built and measured on: a soft-cap and transcendental snippets on two
    # warpgroups without "m" (their three-warpgroup soft-cap kernel spills 40 bytes with "x")
    monkeypatch.setattr(heuristics, "SM90_THREE_WG_EXTRAS", frozenset({"alibi", "variant"}))
    monkeypatch.setattr(heuristics, "SM90_MASK_SPLIT_MUFU", False)
    monkeypatch.setenv(compiler.DEFINES_ENV, request.param)
    api.clear_signature_cache()
    yield
    api.clear_signature_cache()


def ran_x():
    name = prepared().attn.name
    assert "_wgmma" in name and "_ex2fma" in name, name


@pytest.mark.parametrize("hd,dt,causal", [(64, "bf16", True), (64, "fp16", False), (128, "bf16", False),
                                          (128, "fp16", True)])
def test_packed_prefill(hd, dt, causal):
    """Ragged GQA batches with an empty query, an empty key request and rows that see no key."""
    qlens, klens = hopper.ragged(hd + causal)
    q, k, v, cu_q, cu_k = hopper.make_batch(qlens, klens, 8, 2, hd, hopper.DT[dt], 3 + hd)
    hopper.check(q, k, v, cu_q, cu_k, causal=causal)
    ran_x()


@pytest.mark.parametrize("case,hd,dt", [("softcap_window", 64, "bf16"), ("softcap_window", 128, "fp16")]
                         + [(c, 64, "bf16") for c in hopper.WINDOW_CASES if c != "softcap_window"])
def test_window_and_softcap(case, hd, dt):
    hopper.test_hopper_window_softcap_matrix(case, hd, dt, "soa")
    ran_x()


@pytest.mark.parametrize("causal,window,cap", [(True, (-1, -1), 30.0), (True, (513, 0), 50.0)])
def test_long_softcapped_requests(causal, window, cap):
    """Long rows (many key blocks a row: the polynomial's error accumulates in the row sum)."""
    hopper.test_hopper_window_softcap_long_requests(4096, 4096, causal, window, cap)
    ran_x()


@pytest.mark.parametrize("hd", [64, 128])
def test_forced_splits(hd):
    hopper.test_hopper_forced_splits(3, True, hd, "soa")
    ran_x()


@pytest.mark.parametrize("page_size,hd,dt", [(16, 64, "bf16"), (1, 128, "fp16"), (64, 128, "bf16")])
def test_paged_prefill(page_size, hd, dt):
    hopper.test_hopper_paged_matrix(page_size, hd, dt, True, 2, "soa")
    ran_x()


@pytest.mark.parametrize("dtype", [fp8.BF16, fp8.FP16])
def test_fp8_cache(dtype):
    fp8.test_varlen_prefill_causal_gqa(None, 0, dtype, fp8.E4M3)
    ran_x()


@pytest.mark.parametrize("d,causal,num_splits", [(64, True, 0), (64, False, 3)])
def test_fp8_tensor_cores(d, causal, num_splits):
    """The FP8 tensor-core variant (P against the row max - 8: exponents up to +8)."""
    fp8mma.test_varlen_prefill_within_the_fp8_p_bound(d, causal, num_splits)
    ran_x()


def test_fp8_tensor_cores_softcap():
    fp8mma.test_softcap_on_the_tensor_core_tiles(64, "m192n128w12", (-1, -1))
    ran_x()


@pytest.mark.parametrize("name", ["softcap", "alibi"])
def test_user_variant(name):
    variant.test_varlen_prefill(name, "sm_90a", 0)
    ran_x()


def test_graph_replay():
    hopper.test_hopper_cuda_graph_replay()
    ran_x()


@pytest.mark.parametrize("name", ["softcap", "builtin"])
def test_the_default_takes_it_where_the_mufu_binds(name, monkeypatch):
    """The dispatcher's rule (heuristics.SM90_EX2_FMA on, SM90_OPTS back to the default, no define): a
    soft-cap and the soft-cap snippet (kg_tanh) at head dim 64 take the option (the share 4 of 8),
    right against the reference."""
    monkeypatch.setattr(heuristics, "SM90_OPTS", "pt")
    monkeypatch.setattr(heuristics, "SM90_EX2_FMA", True)    # (the rule; off by default: slower)
    monkeypatch.delenv(compiler.DEFINES_ENV, raising=False)
    api.clear_signature_cache()
    if name == "builtin":
        qlens, klens = hopper.ragged(64)
        q, k, v, cu_q, cu_k = hopper.make_batch(qlens, klens, 16, 4, 64, torch.bfloat16, 65)
        hopper.check(q, k, v, cu_q, cu_k, causal=True, softcap=30.0)
    else:
        variant.test_d64_three_warpgroups("softcap", 1, monkeypatch)
    ran_x()
