"""The float64 reference on the CPU against a per-row loop written independently."""
import math

import pytest
import torch

from kernelgen.apps.reference import attention_reference, max_error, tolerance


def naive(q, k, v, cq, ck, causal, scale, left=-1, right=-1, softcap=0.0):
    total_q, hq, d = q.shape
    hkv = k.shape[1]
    out = torch.full((total_q, hq, v.shape[2]), float("nan"), dtype=torch.float64)
    lse = torch.full((hq, total_q), float("nan"), dtype=torch.float64)
    for b in range(len(cq) - 1):
        lq, lk = cq[b + 1] - cq[b], ck[b + 1] - ck[b]
        for r in range(lq):
            for h in range(hq):
                kh = h // (hq // hkv)
                pos = r + lk - lq
                rr = 0 if causal and right < 0 else (min(right, 0) if causal else right)
                keys = [j for j in range(lk) if (rr < 0 or j <= pos + rr) and (left < 0 or j >= pos - left)]
                if not keys:
                    out[cq[b] + r, h] = 0
                    lse[h, cq[b] + r] = -math.inf
                    continue
                s = torch.stack([(q[cq[b] + r, h].double() * k[ck[b] + j, kh].double()).sum() * scale for j in keys])
                if softcap > 0:
                    s = softcap * torch.tanh(s / softcap)
                w = torch.softmax(s, 0)
                out[cq[b] + r, h] = sum(w[i] * v[ck[b] + j, kh].double() for i, j in enumerate(keys))
                lse[h, cq[b] + r] = torch.logsumexp(s, 0)
    return out, lse


@pytest.mark.parametrize("causal", [False, True])
def test_reference_matches_naive(causal):
    g = torch.Generator().manual_seed(3)
    lq, lk = [3, 0, 5, 4], [2, 4, 5, 0]
    cq = [0] + list(torch.tensor(lq).cumsum(0).tolist())
    ck = [0] + list(torch.tensor(lk).cumsum(0).tolist())
    q = torch.randn(cq[-1], 4, 8, generator=g)
    k = torch.randn(ck[-1], 2, 8, generator=g)
    v = torch.randn(ck[-1], 2, 6, generator=g)
    scale = 0.3
    out, lse = attention_reference(q, k, v, torch.tensor(cq), torch.tensor(ck), causal=causal, softmax_scale=scale,
                                   max_elements=7)  # tiny blocks exercise the head grouping
    o2, l2 = naive(q, k, v, cq, ck, causal, scale)
    assert torch.allclose(out, o2, atol=1e-12, equal_nan=True)
    assert torch.allclose(lse, l2, atol=1e-12, equal_nan=True)
    if causal:
        # request 0 (lq 3 > lk 2): row 0 sees no key -> exactly 0 and -inf
        assert torch.all(out[0] == 0) and torch.all(lse[:, 0] == -math.inf)
    # request 3 has no keys at all
    assert torch.all(out[cq[3]:cq[4]] == 0) and torch.all(lse[:, cq[3]:cq[4]] == -math.inf)


def test_extreme_logits_are_uniform():
    """Case E3: every logit is -185,363.8 -> uniform weights, lse = logit + ln 4."""
    q = torch.full((1, 1, 128), 128.0)
    k = torch.full((4, 1, 128), -128.0)
    v = torch.randn(4, 1, 128, dtype=torch.float64).float()
    out, lse = attention_reference(q, k, v, torch.tensor([0, 1]), torch.tensor([0, 4]))
    assert torch.allclose(out[0, 0], v[:, 0].double().mean(0), atol=1e-12)
    assert lse[0, 0].item() == pytest.approx(-2097152 / math.sqrt(128) + math.log(4), abs=1e-6)


def test_a_nan_logit_makes_its_row_nan():
    """A score_mod that gives a NaN logit makes that row's out and lse NaN, as the kernels do (their
    row maximum keeps a NaN: softmax.cuh), not a row without keys (out 0, lse -inf); the other rows
    and a row that is truly masked whole are unchanged."""
    g = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(n, 2, 8, generator=g) for n in (4, 6, 6))
    cq, ck = torch.tensor([0, 4]), torch.tensor([0, 6])
    base, base_lse = attention_reference(q, k, v, cq, ck)
    out, lse = attention_reference(q, k, v, cq, ck,
                                   score_mod=lambda s, b, h, i, j, lq, lk: s.masked_fill((i == 1) & (j == 2), math.nan),
                                   mask_mod=lambda b, h, i, j, lq, lk: (i != 3) | (j > 99))
    assert torch.isnan(out[1]).all() and torch.isnan(lse[:, 1]).all()
    assert torch.equal(out[[0, 2]], base[[0, 2]]) and torch.equal(lse[:, [0, 2]], base_lse[:, [0, 2]])
    assert torch.all(out[3] == 0) and torch.all(lse[:, 3] == -math.inf)


def test_tolerance_and_error_helpers():
    assert tolerance(torch.bfloat16) == (1.6e-2, 1.6e-2)
    # an FP8 cache given by dtype or by the name AttentionPlan.kv_dtype returns: the compute dtype's bound
    for kv in (torch.float8_e4m3fn, torch.float8_e5m2, "e4m3", "e5m2"):
        assert tolerance(torch.bfloat16, kv) == (1.6e-2, 1.6e-2)
    with pytest.raises(ValueError, match="no tolerance for a e3m4 cache"):
        tolerance(torch.bfloat16, "e3m4")
    assert tolerance(torch.float16) == (2e-3, 2e-3)
    with pytest.raises(ValueError):
        tolerance(torch.float32)
    a = torch.tensor([1.0, 2.0])
    assert max_error(a, a.double() + 0.5) == 0.5
    assert max_error(torch.tensor([float("nan")]), torch.tensor([0.0], dtype=torch.float64)) == math.inf


@pytest.mark.parametrize("causal,window,softcap", [(False, (2, 1), 0.0), (True, (1, -1), 0.0), (False, (-1, -1), 0.7),
                                                   (True, (-1, -1), 2.0)])
def test_reference_window_softcap(causal, window, softcap):
    g = torch.Generator().manual_seed(4)
    lq, lk = [3, 6, 2], [5, 6, 1]
    cq = [0] + list(torch.tensor(lq).cumsum(0).tolist())
    ck = [0] + list(torch.tensor(lk).cumsum(0).tolist())
    q, k, v = torch.randn(cq[-1], 2, 8, generator=g), torch.randn(ck[-1], 1, 8, generator=g), torch.randn(ck[-1], 1, 4, generator=g)
    out, lse = attention_reference(q, k, v, torch.tensor(cq), torch.tensor(ck), causal=causal, softmax_scale=0.5,
                                   window_size=window, softcap=softcap)
    o2, l2 = naive(q, k, v, cq, ck, causal, 0.5, window[0], window[1], softcap)
    assert torch.allclose(out, o2, atol=1e-12, equal_nan=True) and torch.allclose(lse, l2, atol=1e-12, equal_nan=True)


def test_gather_paged_and_seqused():
    from kernelgen.apps.reference import gather_paged

    kc = torch.arange(6 * 4 * 1 * 2, dtype=torch.float32).view(6, 4, 1, 2)
    pt = torch.tensor([[5, 0, 3], [2, 1, 4]], dtype=torch.int32)
    k, v, cu = gather_paged(kc, kc, pt, torch.tensor([6, 3]))
    assert cu.tolist() == [0, 6, 9]
    assert torch.equal(k[:4], kc[5].flatten(0, 0)) and torch.equal(k[4:6], kc[0, :2]) and torch.equal(k[6:9], kc[2, :3])
    # seqused_k on packed k/v keeps a prefix of each request's keys
    q = torch.randn(2, 1, 2)
    full, _ = attention_reference(q, k, v, torch.tensor([0, 1, 2]), torch.tensor([0, 4, 9]))
    part, _ = attention_reference(q, k, v, torch.tensor([0, 1, 2]), torch.tensor([0, 6, 9]), seqused_k=torch.tensor([4, 3]))
    assert torch.allclose(full[0], part[0])
