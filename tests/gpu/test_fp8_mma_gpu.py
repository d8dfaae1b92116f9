"""GPU (branch fp8-mma, experimental): the Hopper kernel with FP8 tensor-core GEMMs (design variant B,
``AttentionSpec.fp8_mma``): q, k and v in e4m3, S = Q K^T and P V on FP8 wgmma.  The public API does
not take an e4m3 q yet, so these tests make a plan with ``heuristics.SM90_FP8_MMA`` set and launch it
through ``oneoff.attend`` with the FP8 q; q's scale is folded into ``k_descale``.

- one-hot rows: every query row aims at one key (q_r = +-8 e_a, keys +-e_a), with a logit gap that
  makes every other probability round to 0 in e4m3 and P = 256 exactly, so O_r must equal
  v_j(r) exactly: pins the layouts of Q8/K8 (64-byte swizzle descriptors), P's fragments and V^T's
  key relabelling and transpose;
- random inputs against the float64 reference on the dequantised inputs, within the per-element
  bound of docs/dev/fp8_hopper_design.md section 8 (e4m3 rounding of P)."""
import math

import numpy as np
import pytest
import torch

from kernelgen.front.plan import AttentionPlan
from kernelgen.launch import oneoff
from kernelgen.selection import heuristics

pytestmark = pytest.mark.gpu
E4M3, BF16 = torch.float8_e4m3fn, torch.bfloat16


def run_mma(monkeypatch, q8, k8, v8, lens_q, lens_k, kd, vd, causal):
    monkeypatch.setattr(heuristics, "SM90_FP8_MMA", True)
    hq, hkv, d = q8.shape[1], k8.shape[1], q8.shape[2]
    batch = len(lens_q)
    cu_q = torch.tensor([0] + list(np.cumsum(lens_q)), dtype=torch.int32, device="cuda")
    cu_k = torch.tensor([0] + list(np.cumsum(lens_k)), dtype=torch.int32, device="cuda")
    plan = AttentionPlan(max_batch=batch, num_heads_q=hq, num_heads_kv=hkv, head_dim=d, dtype=BF16,
                         max_total_q=q8.shape[0], max_seqlen_q=max(lens_q), max_seqlen_k=max(lens_k), causal=causal,
                         arch="sm_90a", kv_dtype="e4m3", num_splits=1)
    assert plan.attn_spec.fp8_mma, plan.attn_spec.name
    out = torch.full((q8.shape[0], hq, d), float("nan"), dtype=BF16, device="cuda")
    lse = torch.full((hq, q8.shape[0]), float("nan"), dtype=torch.float32, device="cuda")
    plan.schedule(cu_q, cu_k)
    oneoff.attend(plan._kernels, q8, k8, v8, cu_q, cu_k, None, None, out, lse, md_long=plan.metadata,
                  md_short=plan.metadata_short, split=plan.split, capacity=plan.capacity, scale=d ** -0.5,
                  window=(plan.window_left, plan.window_right), softcap=0.0, alibi=None,
                  descale=plan._descale_arg(kd, vd, batch))
    torch.cuda.synchronize()
    return out, lse, cu_q, cu_k


def finite_codes(n, seed):
    """n e4m3 values with distinct-ish finite codes of moderate size."""
    g = torch.Generator().manual_seed(seed)
    raw = torch.randint(0, 256, (n,), generator=g, dtype=torch.int32)
    raw = (raw & 0x87) | 0x30        # exponent field 6..7 (values 0.5 .. 1.875), any sign / mantissa
    return raw.to(torch.uint8).view(E4M3)


@pytest.mark.parametrize("causal", [True, False])
def test_one_hot_rows_give_the_chosen_value_exactly(monkeypatch, causal):
    d, hq, hkv = 128, 2, 1
    lq = lk = 256                                   # two 128-key blocks
    k = torch.zeros(lk, hkv, d)
    for j in range(lk):                             # key j: +e_j (j < 128) or -e_(j-128): 256 directions
        k[j, 0, j % d] = 1.0 if j < d else -1.0
    q = torch.zeros(lq, hq, d)
    target = torch.zeros(lq, hq, dtype=torch.long)
    for r in range(lq):
        for h in range(hq):
            j = (r * 37 + 11 * h) % ((r + 1) if causal else lk)
            q[r, h, j % d] = 8.0 if j < d else -8.0
            target[r, h] = j
    q8, k8 = q.to(E4M3).cuda(), k.to(E4M3).cuda()
    v8 = finite_codes(lk * hkv * d, 5).view(lk, hkv, d).cuda()
    kd = torch.full((1, hkv), 32.0, device="cuda")      # the target's logit 22.6 (32.6 in log2 units), others 0
    vd = torch.ones((1, hkv), device="cuda")
    out, _, _, _ = run_mma(monkeypatch, q8, k8, v8, [lq], [lk], kd, vd, causal)
    want = torch.stack([v8.float()[target[:, h].cuda(), 0] for h in range(hq)], dim=1).to(BF16)
    bad = (out.float() != want.float()).any(dim=-1)
    if bad.any():   # which key's value came back instead (a layout error shows as a key permutation)
        vals = v8.float()[:, 0].to(BF16).float()                       # (lk, d)
        notes = []
        for r, h in bad.nonzero()[:12].tolist():
            hits = (vals == out[r, h].float()).all(dim=-1).nonzero().flatten().tolist()
            notes.append(f"row {r} head {h}: want key {int(target[r, h])}, got key(s) {hits[:3] or 'none'}")
        pytest.fail(f"{int(bad.sum())} of {bad.numel()} rows differ:\n" + "\n".join(notes))


def quantize(t):
    s = (t.abs().amax().float() / 448).clamp(min=1e-12)
    return (t.float() / s).to(E4M3), s


@pytest.mark.parametrize("causal", [True, False])
def test_random_inputs_within_the_fp8_p_bound(monkeypatch, causal):
    torch.manual_seed(3)
    lens_q, lens_k = [300, 129, 1], [300, 400, 70]
    hq, hkv, d = 4, 2, 128
    q8, qs = quantize(torch.randn(sum(lens_q), hq, d, device="cuda"))
    k8, ks = quantize(torch.randn(sum(lens_k), hkv, d, device="cuda"))
    v8, vs = quantize(torch.randn(sum(lens_k), hkv, d, device="cuda"))
    batch = len(lens_q)
    kd = (qs * ks).reshape(1, 1).expand(batch, hkv).contiguous()
    vd = vs.reshape(1, 1).expand(batch, hkv).contiguous()
    out, lse, cu_q, cu_k = run_mma(monkeypatch, q8, k8, v8, lens_q, lens_k, kd, vd, causal)
    assert not torch.isnan(out).any() and not torch.isnan(lse).any()
    scale = d ** -0.5
    q64, k64, v64 = q8.double(), k8.double() * float(qs * ks), v8.double() * float(vs)
    worst = 0.0
    for b in range(batch):
        qs_, qe = int(cu_q[b]), int(cu_q[b + 1])
        ks_, ke = int(cu_k[b]), int(cu_k[b + 1])
        if qe == qs_:
            continue
        for h in range(hq):
            kh = h // (hq // hkv)
            S = (q64[qs_:qe, h] @ k64[ks_:ke, kh].T) * scale
            if causal:
                i = torch.arange(qe - qs_, device="cuda")[:, None] + (ke - ks_) - (qe - qs_)
                S = S.masked_fill(torch.arange(ke - ks_, device="cuda")[None, :] > i, float("-inf"))
            a = torch.softmax(S, dim=-1)
            V = v64[ks_:ke, kh]
            ref = a @ V
            S1 = a @ V.abs()
            S0 = V.abs().sum(0, keepdim=True)
            amax = a.max(dim=-1, keepdim=True).values
            bound = 1.05 * (2 ** -4 * S1 + 2 ** -18 * amax * S0) + 2 ** -20 * S1 + 2 ** -8 * ref.abs()
            err = (out[qs_:qe, h].double() - ref).abs()
            worst = max(worst, float((err / bound).max()))
            assert (err <= bound).all(), f"b {b} h {h}: max err {err.max().item():.3e}, ratio {(err / bound).max().item():.2f}"
            lse_ref = torch.logsumexp(S, dim=-1)
            assert torch.allclose(lse[h, qs_:qe].double(), lse_ref, atol=2e-3, rtol=1e-4)
    print(f"fp8_mma random: worst err / bound {worst:.3f}")
